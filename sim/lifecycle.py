"""A request's way into and out of a deployment, whatever its architecture (compiled).

* :func:`on_arrival` -- an open-loop arrival, or the first requests of a closed loop;
* :func:`admit` -- route the request to an instance of the entry role: a colocated
  instance (:mod:`serveplan.sim.router`), or a prefill instance (then, with early
  assignment, the decode router binds its decode instance too);
* :func:`request_done` -- the request has produced its last token: count it and, in a
  closed loop, release its client's next request (:func:`release_next`).

Requests rejected up front (prompt too long: ``FINISHED_IGNORED``) finish at their arrival.

:data:`World` bundles the run's state for the compiled functions: the KV pools, the
per-instance state, the request views (``views[0]`` is the request as its entry instance
sees it -- colocated or prefill --, ``views[1]`` as its decode instance sees it), the knob
table, the global counters, the clock (the time of a paused decision), the step recorder,
the cost tables, the handoff state, the decode router's state, the transfers in flight, the
front end and the sessions (:mod:`serveplan.sim.session_state`: a later round of a session
goes to the instance of the previous one, and is sent after its tool delay).
"""

from __future__ import annotations

from collections import namedtuple

from ._jitcache import sim_jit, sim_jit_inline
from .handoff import Q_DELAY, Q_LATE, Q_LAYERWISE, assign_decode, enqueue_pull, est_prefill
from .pools import Role
from .router import route_with_state
from .runtime import F_ON, F_TIMEOUT, push_release, push_send, stage_done
from .session_state import affine_instance, round_done
from .state import (
    FINISHED_IGNORED,
    G_CAP,
    G_CONCURRENCY,
    G_DONE,
    G_ENTRY_LO,
    G_HELD_HEAD,
    G_HELD_LEN,
    G_INFLIGHT,
    G_ROUTER,
    K_ROLE,
    RUNNING,
    WAITING,
    wq_push_back,
)

World = namedtuple("World", ["pool", "inst", "views", "knobs", "glob", "clock", "rec", "costs",
                             "hs", "rt", "x", "fe", "ss"])

ROLE_COLOCATED, ROLE_PREFILL, ROLE_DECODE = int(Role.COLOCATED), int(Role.PREFILL), int(Role.DECODE)


@sim_jit_inline
def stage_of(role):
    """Which request view an instance of ``role`` works on."""
    return 1 if role == ROLE_DECODE else 0


@sim_jit
def _admit_prefill(w, r, now):
    """Dispatch ``r`` to a prefill instance (or SIBYL's delay stage); bind its decode
    instance now with early assignment."""
    hs, p_reqs, d_reqs = w.hs, w.views[0], w.views[1]
    prompt = p_reqs.prompt[r]
    if hs.gi[Q_DELAY] != 0:
        p = -1
        tau = hs.t_delay_end[r]
        p_reqs.t_sched[r] = now
        p_reqs.status[r] = RUNNING
    else:
        p = _entry_instance(w, r, now)
        tau = now + est_prefill(hs, w.inst, p, prompt, now)
        p_reqs.inst[r] = p
        p_reqs.status[r] = WAITING
        wq_push_back(w.inst, p, r)
        w.inst.load[p] += prompt
    hs.p_of[r] = p
    if hs.gi[Q_LATE] == 0 and d_reqs.output[r] > 1:
        assign_decode(hs, w.rt, d_reqs, r, now, tau)
        if hs.gi[Q_DELAY] != 0 and hs.gi[Q_LAYERWISE] != 0:
            enqueue_pull(hs, r, now)


@sim_jit
def _entry_instance(w, r, now):
    """The previous round's instance for a session's later round, else the router's pick."""
    i = affine_instance(w.ss, w.views[0], r)
    return i if i >= 0 else route_with_state(w.glob[G_ROUTER], r, w.views[0], w.rt, now,
                                             w.inst, w.glob)


@sim_jit
def admit(w, r, now):
    """Route arrived request ``r`` to an instance of the entry role."""
    if w.hs.gi[Q_DELAY] == 0 and w.knobs[w.glob[G_ENTRY_LO], K_ROLE] == ROLE_COLOCATED:
        reqs = w.views[0]
        i = _entry_instance(w, r, now)
        reqs.inst[r] = i
        reqs.status[r] = WAITING
        wq_push_back(w.inst, i, r)
        w.inst.load[i] += reqs.prompt[r] + reqs.output[r]
    else:
        _admit_prefill(w, r, now)


@sim_jit
def _finish_ignored(w, r, now):
    w.views[0].t_finish[r] = now
    w.hs.t_finish[r] = now
    w.glob[G_DONE] += 1
    round_done(w.ss, r, now)  # a session's later rounds are rejected in turn
    stage_done(w.fe, r, now)


@sim_jit
def _set_arrival(w, k, t):
    w.views[0].arrival[k] = t
    if w.views[1].arrival.shape[0] == w.views[0].arrival.shape[0]:
        w.views[1].arrival[k] = t


@sim_jit
def release_next(w, r, now):
    """Closed loop: the client of ``r``, which got the last token at ``now`` (plus the
    front end's output delay), sends its next request -- after its think time, if it has
    one (a pending send, :func:`send_request`), else at once (a request rejected up front
    finishes at once, and its client goes on to the next)."""
    conc = w.glob[G_CONCURRENCY]
    n = w.views[0].prompt.shape[0]
    k = r + conc
    fe = w.fe
    sent = now + fe.d_last[r]
    while conc > 0 and k < n:
        if fe.think[k] > 0.0:
            push_send(fe, k, sent + fe.think[k])
            return
        if not _send(w, k, sent):
            return
        k += conc


@sim_jit
def send_request(w, k, sent):
    """A pending send: request ``k`` leaves its client at ``sent`` (its think time over);
    ``k = -(r + 1)``: request ``r``'s client times out at ``sent``."""
    if k < 0:
        _time_out(w, -k - 1, sent)
    elif _send(w, k, sent):
        release_next(w, k, sent)


@sim_jit
def _arm_timeout(w, k, sent):
    """A closed-loop client with a timeout gives up on ``k`` that long after ``sent``."""
    if w.fe.terms[F_TIMEOUT] > 0.0:
        push_send(w.fe, -(k + 1), sent + w.fe.terms[F_TIMEOUT])


@sim_jit
def _time_out(w, r, now):
    """``r``'s client timed out at ``now``: unless it already has its answer, it moves on
    to its next request (the server still serves ``r``)."""
    if w.fe.moved_on[r] == 0:
        w.fe.moved_on[r] = 1
        release_next(w, r, now)


@sim_jit
def _send(w, k, sent):
    """Request ``k`` leaves its client at ``sent``: through a front end it reaches the engine
    later (a pending release, :mod:`serveplan.sim.runtime`), otherwise it is admitted now.
    Returns True if it was rejected up front (it finished at once)."""
    fe = w.fe
    if w.views[0].status[k] == FINISHED_IGNORED:
        fe.t_sent[k] = sent
        _set_arrival(w, k, sent)
        _finish_ignored(w, k, sent)
        return True
    _arm_timeout(w, k, sent)
    if fe.terms[F_ON] != 0.0:
        _set_arrival(w, k, push_release(fe, k, sent, w.views[0].prompt[k]))
    else:
        _set_arrival(w, k, sent)
        admit(w, k, sent)
    return False


@sim_jit
def release_round(w, k, now):
    """A session's round ``k`` is sent at ``now`` (its tool delay is over): through the front
    end it reaches the engine later (a pending release), otherwise it is admitted now."""
    if w.views[0].status[k] == FINISHED_IGNORED:
        w.fe.t_sent[k] = now
        _set_arrival(w, k, now)
        _finish_ignored(w, k, now)
    elif w.fe.terms[F_ON] != 0.0:
        _set_arrival(w, k, push_release(w.fe, k, now, w.views[0].prompt[k]))
    else:
        _set_arrival(w, k, now)
        admit(w, k, now)


@sim_jit
def _capped_arrival(w, r, now):
    """``vllm bench serve --max-concurrency``: ``r`` is due at ``now``; it is sent if fewer
    than ``G_CAP`` requests are in flight and none waits before it, else it waits (its
    task blocks on the client's semaphore, first come first served)."""
    g = w.glob
    if g[G_HELD_LEN] > 0 or g[G_INFLIGHT] >= g[G_CAP]:
        if g[G_HELD_LEN] == 0:
            g[G_HELD_HEAD] = r
        g[G_HELD_LEN] += 1
        return
    g[G_INFLIGHT] += 1
    if _send(w, r, now):  # rejected up front: its slot is free again
        g[G_INFLIGHT] -= 1


@sim_jit
def _free_slot(w, now):
    """A capped client's request ended at ``now``: the longest-waiting due request, if any,
    is sent in its place."""
    g = w.glob
    g[G_INFLIGHT] -= 1
    while g[G_HELD_LEN] > 0 and g[G_INFLIGHT] < g[G_CAP]:
        k = g[G_HELD_HEAD]
        g[G_HELD_HEAD] += 1
        g[G_HELD_LEN] -= 1
        g[G_INFLIGHT] += 1
        if _send(w, k, now):
            g[G_INFLIGHT] -= 1


@sim_jit
def on_arrival(w, r, now):
    """Arrival event of request ``r``."""
    if w.glob[G_CAP] > 0:
        _capped_arrival(w, r, now)
    elif w.views[0].status[r] == FINISHED_IGNORED:
        _finish_ignored(w, r, now)
        release_next(w, r, now)
    else:
        if w.glob[G_CONCURRENCY] > 0:  # a closed loop's first requests: sent at 0
            _arm_timeout(w, r, w.fe.t_sent[r] if w.fe.terms[F_ON] != 0.0 else now)
        admit(w, r, now)


@sim_jit
def request_done(w, r, now):
    """``r`` produced its last token at ``now``."""
    w.hs.t_finish[r] = now
    w.glob[G_DONE] += 1
    if w.fe.moved_on[r] == 0:  # (a client that timed out has sent its next one already)
        w.fe.moved_on[r] = 1
        release_next(w, r, now)
    round_done(w.ss, r, now + w.fe.d_last[r])
    stage_done(w.fe, r, now + w.fe.d_last[r])
    if w.glob[G_CAP] > 0:
        _free_slot(w, now + w.fe.d_last[r])


__all__ = ["World", "admit", "on_arrival", "release_next", "release_round", "request_done",
           "send_request", "stage_of"]
