"""The event loop: every architecture, one compiled loop over instances with roles.

Instances are stacked in one structure of arrays (:mod:`serveplan.sim.state`); each has a
role (knob ``K_ROLE``: colocated, prefill, decode), its own engine knobs and scheduler
policy, and its own cost row. The loop advances time from event to event; the next one is
found by comparing a few times, with no heap:

1. the next arrival (requests are sorted by arrival, a pointer walks them; a closed
   loop's later requests are released by their client's previous one instead, at once or
   after the client's think time (a heap of pending sends) and, through a front end, from a
   FIFO of pending releases; a session's later rounds are sent
   after their tool delay, from a heap of pending rounds, :mod:`serveplan.sim.session_state`);
2. the earliest step end among busy *upstream* instances (colocated, prefill), or the next
   completion of SIBYL's delay stage;
3. the next cross-role transfer event (:mod:`serveplan.sim.transfer`);
4. the earliest step end among busy *downstream* instances (decode).

On equal times they are handled in that order, and among instances of one class the
lowest index first. Each event goes to its role's handler; then every idle instance with
work starts a step, in index order. A new role gives its code a rank (upstream or
downstream of the transfers), a start handler and a completion handler -- three branches
below; a new transfer kind is another event source beside (3).

A Python research policy (:mod:`serveplan.sim.pyhook`) is served by pausing: when an idle
instance whose policy code is ``POLICY_PYTHON`` should start a step, the loop records it
in ``glob[G_PAUSE]`` and returns; the caller fills the batch and calls the loop again,
which launches that step and carries on where it stopped.
"""

from __future__ import annotations

import numpy as np

from ._jitcache import sim_jit, sim_jit_inline
from .disagg import (
    complete_decode,
    complete_delay,
    complete_prefill,
    complete_transfer,
    start_decode,
    start_prefill,
)
from .engine_policies import trt_balance_adp
from .handoff import Q_DBASE, Q_DELAY, Q_DPTR, Q_NDELAY
from .kvcache import num_used
from .lifecycle import ROLE_DECODE, ROLE_PREFILL, admit, on_arrival, release_round, send_request
from .runtime import next_release_time, next_send_time, pop_release, pop_send
from .session_state import pop_session, session_next_time
from .state import (
    A_BATCH_TIME,
    A_BUSY_TIME,
    A_BUSY_UNTIL,
    A_KV_TIME,
    ERR_MAX_STEPS,
    ERR_STALL,
    G_DEFER,
    G_DONE,
    G_ERROR,
    G_MAX_STEPS,
    G_NEXT,
    G_NOPEN,
    G_PAUSE,
    G_START_IDLE,
    G_STEPS,
    G_STOP_DONE,
    I_BATCH,
    I_BUSY,
    I_NRUN,
    I_WLEN,
    K_ADP_BALANCE,
    K_GROUP,
    K_GROUP_SIZE,
    K_POLICY,
    K_ROLE,
    POLICY_PYTHON,
)
from .step import complete_step, group_moe_tokens, launch, price_step, start_step
from .transfer import xfer_next_time


@sim_jit_inline
def _next_arrival(w):
    """``(time, source)``: the next open arrival (source 0), released closed-loop request or
    front-end release (1), session round sent after its tool delay (2) or closed-loop request
    sent after its client's think time (3)."""
    t = w.views[0].arrival[w.glob[G_NEXT]] if w.glob[G_NEXT] < w.glob[G_NOPEN] else np.inf
    src = 0
    t_rel = next_release_time(w.fe)
    if t_rel < t:
        t, src = t_rel, 1
    t_round = session_next_time(w.ss)
    if t_round < t:
        t, src = t_round, 2
    t_send = next_send_time(w.fe)
    if t_send < t:
        t, src = t_send, 3
    return t, src


@sim_jit_inline
def _next_step_ends(w):
    """``(k_up, t_up, k_down, t_down)``: the earliest step end among upstream and among
    downstream instances (index -1 and inf if none; -2 marks the delay stage)."""
    inst, knobs = w.inst, w.knobs
    k_up, t_up, k_down, t_down = -1, np.inf, -1, np.inf
    for i in range(knobs.shape[0]):
        if inst.ist[i, I_BUSY] == 0:
            continue
        t = inst.acc[i, A_BUSY_UNTIL]
        if knobs[i, K_ROLE] == ROLE_DECODE:
            if t < t_down:
                k_down, t_down = i, t
        elif t < t_up:
            k_up, t_up = i, t
    hs = w.hs
    if hs.gi[Q_DELAY] != 0 and hs.gi[Q_DPTR] < hs.gi[Q_NDELAY]:
        t = hs.t_delay_end[hs.dorder[hs.gi[Q_DPTR]]]
        if t < t_up:
            k_up, t_up = -2, t
    return k_up, t_up, k_down, t_down


@sim_jit_inline
def _role_event(w, k, now, start):
    """Start (``start``) or complete instance ``k``'s step by its role: where a role plugs
    in. ``k == -2`` is a completion of SIBYL's delay stage."""
    if k == -2:
        complete_delay(w, now)
        return
    role = w.knobs[k, K_ROLE]
    if role == ROLE_PREFILL:
        if start:
            start_prefill(w, k, now)
        else:
            complete_prefill(w, k, now)
    elif role == ROLE_DECODE:
        if start:
            start_decode(w, k, now)
        else:
            complete_decode(w, k, now)
    elif start:
        start_step(w, k, now)
    else:
        complete_step(w, k, now)


@sim_jit_inline
def _has_work(w, k):
    inst = w.inst
    if inst.ist[k, I_WLEN] > 0 or inst.ist[k, I_NRUN] > 0:
        return True
    if w.knobs[k, K_ROLE] == ROLE_DECODE:
        return w.hs.pq_len[k - w.hs.gi[Q_DBASE]] > 0
    return False


@sim_jit_inline
def _group_busy(w, k):
    """Whether a member of instance ``k``'s lockstep group is in a step."""
    g = w.knobs[k, K_GROUP]
    for j in range(g, g + w.knobs[k, K_GROUP_SIZE]):
        if w.inst.ist[j, I_BUSY] != 0:
            return True
    return False


@sim_jit_inline
def _start_group(w, g, now):
    """Lockstep group ``g`` (attention data-parallel ranks) starts a step on every member
    with work: all are scheduled first, then priced with the tokens the group's MoE layers
    see together (:func:`~serveplan.sim.step.group_moe_tokens`). The members meet in every
    layer's collectives, so all of them end when the slowest does (the wait counts as busy
    time: the rank's GPU is held)."""
    inst = w.inst
    n = w.knobs[g, K_GROUP_SIZE]
    if w.knobs[g, K_ADP_BALANCE] != 0 and w.knobs[g, K_ROLE] != ROLE_DECODE:
        trt_balance_adp(inst, w.views[0], w.knobs, g, n)
    w.glob[G_DEFER] = 1
    for j in range(g, g + n):
        if _has_work(w, j):
            _role_event(w, j, now, True)
    w.glob[G_DEFER] = 0
    moe_tokens = group_moe_tokens(w, g, n)
    end = now
    for j in range(g, g + n):
        if inst.ist[j, I_BUSY] != 0:
            price_step(w, j, now, moe_tokens)
            if inst.acc[j, A_BUSY_UNTIL] > end:
                end = inst.acc[j, A_BUSY_UNTIL]
    for j in range(g, g + n):
        if inst.ist[j, I_BUSY] != 0:
            wait = end - inst.acc[j, A_BUSY_UNTIL]
            inst.acc[j, A_BUSY_UNTIL] = end
            inst.acc[j, A_BUSY_TIME] += wait
            inst.acc[j, A_BATCH_TIME] += inst.ist[j, I_BATCH] * wait
            inst.acc[j, A_KV_TIME] += num_used(w.pool, j) * wait


@sim_jit_inline
def _start_idle(w, first, now):
    """Idle instances ``first..`` with work start a step (a lockstep group once none of its
    members is in one); returns True if the loop must pause for a Python policy."""
    for k in range(first, w.knobs.shape[0]):
        if w.inst.ist[k, I_BUSY] != 0 or not _has_work(w, k):
            continue
        if w.knobs[k, K_POLICY] == POLICY_PYTHON:
            w.inst.ist[k, I_BATCH] = 0
            w.glob[G_PAUSE] = k + 1
            w.clock[0] = now
            return True
        if w.knobs[k, K_GROUP_SIZE] > 1:
            if not _group_busy(w, k):
                _start_group(w, w.knobs[k, K_GROUP], now)
            continue
        _role_event(w, k, now, True)
    return False


@sim_jit_inline
def _handle_next_event(w):
    """Handle the next event; returns its time (NaN: nothing can happen, a stall)."""
    t_arr, source = _next_arrival(w)
    k_up, t_up, k_down, t_down = _next_step_ends(w)
    t_x = xfer_next_time(w.x)
    if t_arr == np.inf and t_up == np.inf and t_x == np.inf and t_down == np.inf:
        return np.nan
    if t_arr <= t_up and t_arr <= t_x and t_arr <= t_down:
        if source == 1:
            admit(w, pop_release(w.fe), t_arr)
            return t_arr
        if source == 2:
            release_round(w, pop_session(w.ss), t_arr)
            return t_arr
        if source == 3:
            send_request(w, pop_send(w.fe), t_arr)
            return t_arr
        r = w.glob[G_NEXT]
        w.glob[G_NEXT] = r + 1
        on_arrival(w, r, t_arr)
        return t_arr
    if t_up <= t_x and t_up <= t_down:
        _role_event(w, k_up, t_up, False)
        return t_up
    if t_x <= t_down:
        complete_transfer(w, t_x)
        return t_x
    _role_event(w, k_down, t_down, False)
    return t_down


@sim_jit
def run_loop(w, now):
    """Advance until every request has finished, an error code is set in ``glob`` or a
    Python policy must fill a batch (``glob[G_PAUSE]``, its time in ``clock[0]``), or --
    with ``glob[G_STOP_DONE]`` set -- once that many requests have finished (after the
    instances idle at that instant have started their steps; the time in ``clock[0]``).
    ``now`` is the time of the paused decision when resuming, or the time at which to start
    the idle instances with ``glob[G_START_IDLE]`` set (ignored otherwise)."""
    glob = w.glob
    n = w.views[0].prompt.shape[0]
    first = 0
    resume = glob[G_PAUSE] > 0
    if resume:  # a Python policy filled this instance's batch
        paused = glob[G_PAUSE] - 1
        glob[G_PAUSE] = 0
        if w.inst.ist[paused, I_BATCH] > 0:
            launch(w, paused, now)
        first = paused + 1
    elif glob[G_START_IDLE] != 0:  # state set up outside the loop: start its steps first
        glob[G_START_IDLE] = 0
        resume = True
    while resume or glob[G_DONE] < n:
        if not resume:
            now = _handle_next_event(w)
            if now != now:
                glob[G_ERROR] = ERR_STALL
                return
            first = 0
        resume = False
        if _start_idle(w, first, now):
            return
        if glob[G_STEPS] >= glob[G_MAX_STEPS]:
            glob[G_ERROR] = ERR_MAX_STEPS
            return
        if 0 < glob[G_STOP_DONE] <= glob[G_DONE] < n:  # a layout switch: stop here
            w.clock[0] = now
            return


__all__ = ["run_loop"]
