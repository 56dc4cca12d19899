"""Research schedulers in plain Python: a policy callback fills each batch.

The built-in policies run inside the compiled loop (:func:`serveplan.sim.loop.run_loop`).
Passing ``policy=`` to :func:`~serveplan.sim.engine.run_engine` (or
:func:`~serveplan.sim.loop_api.run_pools`) gives every colocated instance the policy code
``POLICY_PYTHON``: whenever such an instance may start a step, the compiled loop pauses
and :func:`run_with_python_policy` calls ``policy(ctx)``, which fills the batch through a
:class:`SchedulerContext` whose actions are the compiled building blocks of the built-in
schedulers (KV allocation, preemption and batch bookkeeping stay exact); then the loop
resumes. Each decision costs tens of microseconds: fine for thousands of requests, not for
millions.

>>> def shortest_prompt_first(ctx):                                   # doctest: +SKIP
...     ctx.reorder_waiting(sorted(ctx.waiting, key=lambda r: ctx.reqs.prompt[r]))
...     budget, preempted = ctx.schedule_running(ctx.max_num_batched_tokens)
...     if not preempted:
...         ctx.schedule_waiting(budget)
>>> run_engine(requests, cost, params, policy=shortest_prompt_first)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .loop import run_loop
from .scheduler import MODE_ALL, MODE_DECODE, MODE_PREFILL, schedule_running, schedule_waiting
from .state import (
    G_PAUSE,
    I_BATCH,
    I_NRUN,
    I_WHEAD,
    I_WLEN,
    K_CHUNKED,
    K_MAX_SEQS,
    K_MAX_TOKENS,
)

_MODES = {"all": MODE_ALL, "prefill": MODE_PREFILL, "decode": MODE_DECODE}


class SchedulerContext:
    """One scheduling decision: instance ``i`` at time ``now``.

    Attributes
    ----------
    reqs : Reqs
        Request arrays (read them; change them only through the actions).
    instance : int
    now : float
    """

    def __init__(self, pool, inst, reqs, knobs, glob, i: int, now: float):
        self._pool, self._inst, self._knobs, self._glob = pool, inst, knobs, glob
        self.reqs, self.instance, self.now = reqs, i, now

    # ------------------------------------------------------------------ state
    @property
    def max_num_batched_tokens(self) -> int:
        return int(self._knobs[self.instance, K_MAX_TOKENS])

    @property
    def max_num_seqs(self) -> int:
        return int(self._knobs[self.instance, K_MAX_SEQS])

    @property
    def running(self) -> np.ndarray:
        """Running request ids in admission order (a copy)."""
        return self._inst.run[self.instance, : self._inst.ist[self.instance, I_NRUN]].copy()

    @property
    def waiting(self) -> np.ndarray:
        """Waiting request ids, head first (a copy)."""
        i, wq = self.instance, self._inst.wq
        head, n = self._inst.ist[i, I_WHEAD], self._inst.ist[i, I_WLEN]
        return wq[i, (head + np.arange(n)) % wq.shape[1]].astype(np.int64)

    @property
    def batch_size(self) -> int:
        return int(self._inst.ist[self.instance, I_BATCH])

    # ------------------------------------------------------------------ actions
    def reorder_waiting(self, order) -> None:
        """Replace the waiting queue's order by ``order`` (a permutation of :attr:`waiting`)."""
        current = self.waiting
        order = np.asarray(order, dtype=np.int64)
        if order.shape != current.shape or not np.array_equal(np.sort(order), np.sort(current)):
            raise ValueError("reorder_waiting needs a permutation of the waiting request ids")
        i, wq = self.instance, self._inst.wq
        head = self._inst.ist[i, I_WHEAD]
        wq[i, (head + np.arange(len(order))) % wq.shape[1]] = order

    def schedule_running(self, budget: int, mode: str = "all") -> tuple[int, bool]:
        """Schedule running requests in order (``mode``: all, prefill or decode), preempting
        the last-admitted on block shortage; returns ``(budget left, preempted any)``."""
        budget, preempted = schedule_running(self._pool, self._inst, self.reqs, self._knobs,
                                             self._glob, self.instance, int(budget),
                                             _MODES[mode])
        return int(budget), bool(preempted)

    def schedule_waiting(self, budget: int, chunked: bool | None = None,
                         whole_prompt: bool = False) -> int:
        """Admit waiting requests from the head while budget, slots and blocks allow;
        returns the budget left. ``chunked`` defaults to the instance's setting."""
        if chunked is None:
            chunked = bool(self._knobs[self.instance, K_CHUNKED])
        return int(schedule_waiting(self._pool, self._inst, self.reqs, self._knobs, self._glob,
                                    self.instance, int(budget), float(self.now), bool(chunked),
                                    bool(whole_prompt)))


def run_with_python_policy(world, policy: Callable[[SchedulerContext], None]) -> None:
    """Run the loop, calling ``policy`` for every batch of a paused instance."""
    while True:
        run_loop(world, world.clock[0])
        paused = int(world.glob[G_PAUSE]) - 1
        if paused < 0:
            return
        policy(SchedulerContext(world.pool, world.inst, world.views[0], world.knobs,
                                world.glob, paused, float(world.clock[0])))
