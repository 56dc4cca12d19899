"""Research schedulers in plain Python: a slower driver loop with a policy callback.

The built-in policies run inside the compiled loop (:func:`serveplan.sim.engine.run_loop`)
and are untouched by this module. Passing ``policy=`` to
:func:`~serveplan.sim.engine.run_engine` runs :func:`run_python_loop` instead: the same
event logic in Python, which calls ``policy(ctx)`` whenever an idle instance with work may
start a step. The policy fills the batch through a :class:`SchedulerContext`, whose actions
are the compiled building blocks of the built-in schedulers (KV allocation, preemption and
batch bookkeeping stay exact). Each callback costs tens of microseconds of dispatch: fine
for thousands of requests, not for millions.

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

from .engine import complete_step, launch_step
from .scheduler import MODE_ALL, MODE_DECODE, MODE_PREFILL, schedule_running, schedule_waiting
from .state import (
    A_BUSY_UNTIL,
    ERR_MAX_STEPS,
    ERR_STALL,
    G_DONE,
    G_ERROR,
    G_MAX_STEPS,
    G_NEXT,
    G_NOPEN,
    G_STEPS,
    I_BATCH,
    I_BUSY,
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


def run_python_loop(pool, inst, reqs, knobs, glob, rec, cost_arrays: tuple,
                    policy: Callable[[SchedulerContext], None]) -> None:
    """:func:`~serveplan.sim.engine.run_loop` with ``policy`` choosing every batch."""
    from .engine import _arrive

    n = reqs.prompt.shape[0]
    n_inst = knobs.shape[0]
    while glob[G_DONE] < n:
        t_arr = reqs.arrival[glob[G_NEXT]] if glob[G_NEXT] < glob[G_NOPEN] else np.inf
        busy = inst.ist[:, I_BUSY] != 0
        until = np.where(busy, inst.acc[:, A_BUSY_UNTIL], np.inf)
        k = int(np.argmin(until))
        t_step = until[k]
        if t_step == np.inf and t_arr == np.inf:
            glob[G_ERROR] = ERR_STALL
            return
        if t_arr <= t_step:
            now = float(t_arr)
            r = int(glob[G_NEXT])
            glob[G_NEXT] = r + 1
            _arrive(pool, inst, reqs, knobs, glob, r, now)
        else:
            now = float(t_step)
            complete_step(pool, inst, reqs, knobs, glob, k, now)
        for i in range(n_inst):
            if inst.ist[i, I_BUSY] == 0 and (inst.ist[i, I_WLEN] > 0 or inst.ist[i, I_NRUN] > 0):
                inst.ist[i, I_BATCH] = 0
                policy(SchedulerContext(pool, inst, reqs, knobs, glob, i, now))
                if inst.ist[i, I_BATCH] > 0:
                    launch_step(pool, inst, reqs, glob, rec, i, now, *cost_arrays)
        if glob[G_STEPS] >= glob[G_MAX_STEPS]:
            glob[G_ERROR] = ERR_MAX_STEPS
            return
