"""A mid-run parallelism switch: run layout A, stop, continue the active requests on B.

RL rollouts (``papers/frontier.txt`` §6.4) start as a burst that rewards many replicas and
end as a heavy tail that rewards fast ones. :func:`run_with_switch` simulates a
time-sliced layout switch on the one compiled loop:

1. Layout A (one colocated pool) runs until the number of finished requests reaches
   ``stop_done`` (the loop's ``G_STOP_DONE``): the first instant the active count drops
   below the policy's threshold. Instances idle at that instant have started their next
   step when the loop stops.
2. :func:`capture` records each active request's progress: tokens generated so far
   (``n_out``) and tokens whose KV is computed -- steps in flight at the switch are
   abandoned, so their tokens are not counted (a request in such a step keeps the KV it had
   when the step was formed).
3. The active requests move to layout B (another colocated pool, fresh KV caches) in
   migration order -- A's running requests position by position across A's instances,
   then its waiting queues -- dealt round-robin over B's instances. With ``kv="transfer"``
   a running request arrives with its KV (it keeps ``computed`` and its blocks; it runs
   on, as a vLLM running request) while B's slots and blocks allow; every other request
   is queued with no KV, and B's scheduler prefills its context, prompt plus generated
   tokens, before it decodes on (``kv="recompute"``, the default for all of them: vLLM's
   recompute preemption).
4. B starts after the pause the caller prices from the migration (:class:`Migration`:
   weights resharded, KV moved; :mod:`serveplan.rollout_cost`), and runs to the end.

Approximations: the steps in flight on A at the switch are lost (at most one step per
instance); B's prefix caches start empty; a request mid-way through a chunked prefill
keeps the chunks computed before the switch only with ``transfer``; SGLang's decaying
``new_token_ratio`` restarts from its initial value on B. With one instance, equal
layouts, ``transfer`` and a zero pause nothing changes: B's first step is the step A
abandoned, and the run matches the run without a switch request by request
(``tests/test_rollout.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from serveplan.kernels import jit_mode

from . import _jitcache
from .loop import run_loop
from .loop_api import (
    _build_world,
    _entry_router,
    _raise_on_error,
    python_seconds,
    run_pools,
)
from .pools import Role
from .requests import Requests
from .state import (
    G_DONE,
    G_NEXT,
    G_START_IDLE,
    G_STOP_DONE,
    I_BATCH,
    I_BUSY,
    I_NRUN,
    I_NSLOT,
    I_WHEAD,
    I_WLEN,
    K_MAX_SEQS,
    PENDING,
    PREEMPTED,
    RUNNING,
    WAITING,
    reserve_blocks,
    wq_push_back,
)

KV_MODES = ("recompute", "transfer")
_CARRIED = ("t_sched", "t_first", "t_last", "itl_max", "n_preempt", "hit")
"""Per-request fields a migrated request keeps (its history on A)."""


@dataclass(frozen=True)
class Snapshot:
    """The active requests at the switch, in migration order (module docstring)."""

    t_switch: float
    ids: np.ndarray  # request ids
    n_out: np.ndarray  # tokens generated on A
    kv_tokens: np.ndarray  # tokens whose KV is computed (steps in flight excluded)
    running: np.ndarray  # bool: in a running list of A (holding KV)


@dataclass(frozen=True)
class Migration:
    """Where the active requests go on B: what the pause is priced from."""

    snapshot: Snapshot
    prompt: np.ndarray  # prompt tokens of each snapshot entry
    b_instance: np.ndarray  # B instance of each snapshot entry
    kv_kept: np.ndarray  # tokens of KV each one brings along (0: recomputed on B)
    num_b_instances: int

    @property
    def context(self) -> np.ndarray:
        """Prompt plus generated tokens of each request (what a recompute prefills)."""
        return self.prompt + self.snapshot.n_out


@dataclass(frozen=True, eq=False)
class SwitchRun:
    """One rollout with a layout switch: per-request results over all requests and the
    switch itself (``snapshot`` is None if the run ended before the threshold)."""

    t_finish: np.ndarray
    t_first: np.ndarray
    n_out: np.ndarray
    output: np.ndarray
    prompt: np.ndarray
    snapshot: Snapshot | None
    migration: Migration | None
    pause_s: float
    world_a: object
    world_b: object | None

    @property
    def t_switch(self) -> float:
        return float("nan") if self.snapshot is None else self.snapshot.t_switch

    @property
    def t_resume(self) -> float:
        return self.t_switch + self.pause_s


def _queue_order(inst, n_inst: int) -> tuple[list, list]:
    """Running and waiting request ids of A, position by position across instances."""
    running, waiting = [], []
    depth = int(inst.ist[:, I_NRUN].max()) if n_inst else 0
    for pos in range(depth):
        running += [int(inst.run[i, pos]) for i in range(n_inst) if pos < inst.ist[i, I_NRUN]]
    cap = inst.wq.shape[1]
    depth = int(inst.ist[:, I_WLEN].max()) if n_inst else 0
    for pos in range(depth):
        waiting += [int(inst.wq[i, (inst.ist[i, I_WHEAD] + pos) % cap])
                    for i in range(n_inst) if pos < inst.ist[i, I_WLEN]]
    return running, waiting


def capture(world, now: float) -> Snapshot:
    """The active requests of a stopped colocated world and their progress."""
    inst, reqs = world.inst, world.views[0]
    n_inst = world.knobs.shape[0]
    kv = reqs.computed.copy()
    for i in range(n_inst):  # steps in flight are abandoned: KV as when they were formed
        if inst.ist[i, I_BUSY]:
            for j in range(inst.ist[i, I_BATCH]):
                kv[inst.b_req[i, j]] = inst.b_ctx[i, j]
    running, waiting = _queue_order(inst, n_inst)
    pending = np.flatnonzero(reqs.status == PENDING)
    if pending.size:
        raise ValueError(f"{pending.size} requests had not arrived at the layout switch "
                         f"(t = {now:.6g} s): a switch moves a burst that has arrived")
    ids = np.array(running + waiting, dtype=np.int64)
    is_run = np.zeros(len(ids), dtype=bool)
    is_run[: len(running)] = True
    return Snapshot(float(now), ids, reqs.n_out[ids].copy(), kv[ids], is_run)


def _take_slot(inst, reqs, i: int, r: int) -> None:
    """A free sequence slot of instance ``i`` for request ``r``."""
    n_slot = inst.ist[i, I_NSLOT] - 1
    reqs.slot[r] = inst.free_slots[i, n_slot]
    inst.ist[i, I_NSLOT] = n_slot


def _place_running(world, i: int, r: int, kv_tokens: int) -> bool:
    """Put ``r`` in ``i``'s running list with KV for ``kv_tokens`` tokens; False (nothing
    changed) when ``i`` has no slot or not enough free blocks."""
    inst, reqs = world.inst, world.views[0]
    if kv_tokens <= 0 or inst.ist[i, I_NRUN] >= world.knobs[i, K_MAX_SEQS]:
        return False
    _take_slot(inst, reqs, i, r)
    if not reserve_blocks(world.pool, inst, reqs, world.knobs, i, r, kv_tokens):
        s = reqs.slot[r]  # give the slot back
        inst.free_slots[i, inst.ist[i, I_NSLOT]] = s
        inst.ist[i, I_NSLOT] += 1
        reqs.slot[r] = -1
        return False
    inst.run[i, inst.ist[i, I_NRUN]] = r
    inst.ist[i, I_NRUN] += 1
    reqs.status[r] = RUNNING
    reqs.computed[r] = kv_tokens
    return True


def _inject(world, snap: Snapshot, reqs_a, b_inst: np.ndarray, kv: str) -> np.ndarray:
    """Set up B's state: each migrated request (local id = its snapshot position) in its
    instance's running list (KV kept) or waiting queue; returns the KV tokens kept."""
    reqs = world.views[0]
    for name in _CARRIED:
        getattr(reqs, name)[:] = getattr(reqs_a, name)[snap.ids]
    reqs.n_out[:] = snap.n_out
    kept = np.zeros(len(snap.ids), dtype=np.int64)
    for k in range(len(snap.ids)):
        i = int(b_inst[k])
        reqs.inst[k] = i
        world.inst.load[i] += (reqs.prompt[k] if snap.n_out[k] == 0 else 0) + \
            reqs.output[k] - snap.n_out[k]
        if kv == "transfer" and snap.running[k] and _place_running(
                world, i, k, int(snap.kv_tokens[k])):
            kept[k] = snap.kv_tokens[k]
            continue
        reqs.status[k] = PREEMPTED if snap.n_out[k] > 0 else WAITING
        reqs.computed[k] = 0
        wq_push_back(world.inst, i, k)
    return kept


def _sub_requests(requests, ids: np.ndarray) -> Requests:
    """The migrated requests as a workload of their own (arrival times are not used: every
    one is placed directly)."""
    return Requests(np.zeros(len(ids)), np.asarray(requests.prompt_len)[ids],
                    np.asarray(requests.output_len)[ids])


def _stop_a(requests, pool_a, code, stop_done, record_steps, max_steps):
    """Run layout A until ``stop_done`` requests have finished (or all have)."""
    world, _, w = _build_world(requests, (pool_a,), None, code, None, record_steps, max_steps)
    if not jit_mode.STATE.settled:
        jit_mode.prefer_compiled(python_seconds(w, 2))
    world.glob[G_STOP_DONE] = int(stop_done)
    run_loop(world, 0.0)
    _raise_on_error(world.glob, len(requests), max_steps)
    return world, w


def _check(pool_a, pool_b, kv, stop_done, n):
    for name, pool in (("pool_a", pool_a), ("pool_b", pool_b)):
        if pool.role != Role.COLOCATED:
            raise ValueError(f"{name} must be a colocated pool: a layout switch moves "
                             "colocated instances")
    if kv not in KV_MODES:
        raise ValueError(f"kv given an invalid value: {kv!r} (valid: {', '.join(KV_MODES)})")
    if not 1 <= stop_done <= n:
        raise ValueError(f"stop_done must be in [1, {n}], got {stop_done!r}")


def run_with_switch(requests, pool_a, pool_b, *, stop_done: int,
                    pause: float | Callable[[Migration], float] = 0.0, kv: str = "recompute",
                    router="round-robin", record_steps: int = 1 << 16,
                    max_steps: int | None = None) -> SwitchRun:
    """Run ``requests`` on colocated ``pool_a``, switching to ``pool_b`` when
    ``stop_done`` requests have finished (module docstring).

    ``pause`` is the reconfiguration's duration in seconds, or a function of the
    :class:`Migration` giving it. ``kv``: ``recompute`` (B prefills each context) or
    ``transfer`` (running requests keep their KV while B has room). ``router`` routes the
    arrivals on A.
    """
    _jitcache.refresh()
    n = len(requests)
    _check(pool_a, pool_b, kv, stop_done, n)
    world_a, w = _stop_a(requests, pool_a, _entry_router(router), stop_done, record_steps,
                         max_steps)
    reqs_a = world_a.views[0]
    t_finish = world_a.hs.t_finish.copy()
    out = dict(t_first=reqs_a.t_first.copy(), n_out=reqs_a.n_out.copy(), output=w.output,
               prompt=w.prompt)
    if world_a.glob[G_DONE] >= n:  # ended before the threshold: no switch
        return SwitchRun(t_finish, snapshot=None, migration=None, pause_s=0.0,
                         world_a=world_a, world_b=None, **out)
    snap = capture(world_a, float(world_a.clock[0]))
    sub = _sub_requests(requests, snap.ids)
    world_b, _, _ = _build_world(sub, (pool_b,), None, 0, None, record_steps, max_steps)
    b_inst = np.arange(len(snap.ids), dtype=np.int64) % int(pool_b.num_instances)
    kept = _inject(world_b, snap, reqs_a, b_inst, kv)
    mig = Migration(snap, w.prompt[snap.ids], b_inst, kept, int(pool_b.num_instances))
    pause_s = float(pause(mig) if callable(pause) else pause)
    if not (np.isfinite(pause_s) and pause_s >= 0):
        raise ValueError(f"the reconfiguration pause must be a finite number >= 0 seconds, "
                         f"got {pause_s!r}")
    world_b.glob[G_NEXT] = len(snap.ids)  # no arrivals: every request is placed
    world_b.glob[G_START_IDLE] = 1
    run_loop(world_b, snap.t_switch + pause_s)
    _raise_on_error(world_b.glob, len(snap.ids), max_steps)
    reqs_b = world_b.views[0]
    t_finish[snap.ids] = world_b.hs.t_finish
    out["t_first"][snap.ids] = reqs_b.t_first
    out["n_out"][snap.ids] = reqs_b.n_out
    return SwitchRun(t_finish, snapshot=snap, migration=mig, pause_s=pause_s,
                     world_a=world_a, world_b=world_b, **out)


def run_without_switch(requests, pool_a, *, router="round-robin",
                       record_steps: int = 1 << 16, max_steps: int | None = None) -> SwitchRun:
    """The same rollout on layout A throughout (the baseline), as a :class:`SwitchRun`."""
    res = run_pools(requests, [pool_a], router=router, record_steps=record_steps,
                    max_steps=max_steps)
    reqs = res.reqs
    return SwitchRun(res.hs.t_finish.copy(), reqs.t_first.copy(), reqs.n_out.copy(),
                     reqs.output.copy(), reqs.prompt.copy(), None, None, 0.0, res.world, None)


def active_series(t_finish: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(t, active)``: the number of unfinished requests right after each finish instant
    (all requests arrive at 0; the series starts at ``(0, n)``)."""
    t = np.sort(np.asarray(t_finish, dtype=np.float64))
    times = np.unique(t)
    done = np.searchsorted(t, times, side="right")
    n = len(t)
    return np.concatenate([[0.0], times]), np.concatenate([[n], n - done]).astype(np.int64)


__all__ = ["KV_MODES", "Migration", "Snapshot", "SwitchRun", "active_series", "capture",
           "run_with_switch", "run_without_switch"]
