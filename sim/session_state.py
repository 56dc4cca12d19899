"""Stateful sessions in the loop: rounds linked to their session, released after a tool delay.

A session is a chain of rounds; each round is an ordinary request row (its own arrival,
TTFT, prefix hits, ...) linked to its session by :data:`Sessions` (``prev`` / ``next``).
Round ``k + 1`` is sent ``delay[k + 1]`` seconds (the tool call, or the user's think time)
after the client received round ``k``'s last token; its prompt is the whole history --
every earlier prompt and output -- plus its new tokens (:mod:`serveplan.sim.sessions`).

What this module does inside the compiled loop:

* a min-heap of pending rounds (time, row) is the loop's fifth event source
  (:func:`session_next_time`, :func:`pop_session`); :func:`round_done` pushes the next round
  when a round ends (:func:`serveplan.sim.lifecycle.request_done`);
* session affinity: a later round goes to the instance that served the previous one
  (:func:`affine_instance`), where its KV is;
* history KV: a session's rounds hash their prompt blocks from one token stream per
  session (hash ids ``base + h``), so every block of a round's prompt hashes as the same
  block of the next round's prompt. When a colocated round finishes,
  :func:`cache_for_next_round` registers its full blocks that hold output tokens under the
  next round's hashes (vLLM caches every full computed block, output included). The next
  round then hits the history while it is still cached on that instance; evicted blocks
  are recomputed. On a prefill instance only the prompt's blocks are there (the output was
  decoded elsewhere), so a round recomputes the previous round's output.

Approximation: a block that already carries a private hash (the request was preempted and
recomputed) is not re-registered, so the next round misses from that block on.

The scheduler state of :mod:`serveplan.sim.session_policies` lives here too: per session the
H2Q-BR history (sticky long flag ``z``, served new tokens, carryover credit), per request
its queue class and attained service, per instance the short-queue streak and the last
batch's size (accounted at the instance's next scheduling pass).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ._jitcache import sim_jit
from .kvcache import cache_block
from .state import G_HASH_BLOCK, K_BLOCK, K_PREFIX, block_key
from .timeheap import heap_next_time, heap_pop, heap_push

Sessions = namedtuple("Sessions", [
    "sid", "prev", "next", "delay", "new", "kind",
    "heap_t", "heap_r", "gi", "par",
    "q", "att", "pos", "key", "cand", "z", "served", "carry", "streak", "last_bn", "rel",
])
"""Session links (per request row), the heap of pending rounds, scheduler knobs (``par``)
and the session-aware schedulers' state (module docstring)."""

# gi[S_*]
S_HEAP_LEN, S_ON = range(2)
N_SGI = 2
# par[P_*]: skip-join MLFQ's first quantum and number of queues, H2Q-BR's C, L and B
P_MLFQ_QUANTUM, P_MLFQ_LEVELS, P_H2Q_CAP, P_H2Q_LONG, P_H2Q_STREAK = range(5)
N_PAR = 5
KIND_THINKING, KIND_ANSWER = 0, 1
Q_UNSET, Q_SHORT, Q_LONG = -1, 0, 1


def make_sessions(n: int, n_inst: int, prompt, plan=None, par=None, slots: int = 1) -> Sessions:
    """Session state for ``n`` request rows on ``n_inst`` instances of at most ``slots``
    running requests each.

    ``plan`` (:class:`serveplan.sim.sessions.SessionPlan`) links rounds; without one every
    request is a one-round session of its own (its new tokens are its prompt). ``par``:
    the scheduler knobs (``N_PAR`` integers; :class:`~serveplan.sim.sessions.SchedulerKnobs`).
    """
    m = max(n, 1)
    if plan is None:
        sid = np.arange(m, dtype=np.int64)
        prev = np.full(m, -1, dtype=np.int64)
        nxt = np.full(m, -1, dtype=np.int64)
        delay = np.zeros(m)
        new = np.ones(m, dtype=np.int64)
        new[:n] = np.asarray(prompt, dtype=np.int64)
        kind = np.full(m, KIND_ANSWER, dtype=np.int8)
        n_sess = m
    else:
        sid, prev, nxt = plan.session.copy(), plan.prev.copy(), plan.next.copy()
        delay, new, kind = plan.delay_s.copy(), plan.new_tokens.copy(), plan.kind.copy()
        n_sess = max(plan.num_sessions, 1)
    gi = np.zeros(N_SGI, dtype=np.int64)
    gi[S_ON] = int(plan is not None)
    return Sessions(
        sid=sid, prev=prev, next=nxt, delay=delay, new=new, kind=kind,
        heap_t=np.zeros(m), heap_r=np.zeros(m, dtype=np.int64), gi=gi,
        par=np.asarray(par if par is not None else np.zeros(N_PAR), dtype=np.int64),
        q=np.full(m, Q_UNSET, dtype=np.int8), att=np.zeros(m, dtype=np.int64),
        pos=np.zeros(m, dtype=np.int64), key=np.zeros(m, dtype=np.int64),
        cand=np.zeros(m + max(int(slots), 1), dtype=np.int64),
        z=np.zeros(n_sess, dtype=np.int8), served=np.zeros(n_sess, dtype=np.int64),
        carry=np.zeros(n_sess, dtype=np.int8),
        streak=np.zeros(max(n_inst, 1), dtype=np.int64),
        last_bn=np.zeros(max(n_inst, 1), dtype=np.int64),
        rel=np.full(max(n_inst, 1), -1, dtype=np.int64),
    )


# ------------------------------------------------------------------------ pending rounds
@sim_jit
def push_session(ss, t, r):
    """Round ``r`` is sent at ``t``."""
    heap_push(ss.heap_t, ss.heap_r, ss.gi, S_HEAP_LEN, t, r)


@sim_jit
def session_next_time(ss):
    """When the next pending round is sent (inf: none)."""
    return heap_next_time(ss.heap_t, ss.gi, S_HEAP_LEN)


@sim_jit
def pop_session(ss):
    """The pending round sent first (removed from the heap)."""
    return heap_pop(ss.heap_t, ss.heap_r, ss.gi, S_HEAP_LEN)


@sim_jit
def round_done(ss, r, seen):
    """Round ``r``'s client got its last token at ``seen``: send the session's next round
    after its tool delay."""
    k = ss.next[r]
    if k >= 0:
        push_session(ss, seen + ss.delay[k], k)


# ------------------------------------------------------------------------ affinity, KV
@sim_jit
def affine_instance(ss, reqs, r):
    """The instance that served the previous round of ``r``'s session (-1: none, route)."""
    p = ss.prev[r]
    return reqs.inst[p] if p >= 0 else -1


@sim_jit
def cache_for_next_round(pool, inst, reqs, knobs, glob, ss, i, r):
    """Before finished round ``r`` frees its blocks on instance ``i``: register its full
    computed blocks not cached yet (those holding output tokens) under the hashes the
    next round of its session gives them, so that round can hit them."""
    k = ss.next[r]
    if k < 0 or knobs[i, K_PREFIX] == 0 or glob[G_HASH_BLOCK] <= 0:
        return
    bs = knobs[i, K_BLOCK]
    s = reqs.slot[r]
    full = min(reqs.computed[r] // bs, inst.nblk[i, s])
    for j in range(inst.nhashed[i, s], full):
        cache_block(pool, i, inst.blocks[i, s, j], block_key(reqs, k, j, bs, glob[G_HASH_BLOCK]))


__all__ = ["KIND_ANSWER", "KIND_THINKING", "N_PAR", "Q_LONG", "Q_SHORT", "Q_UNSET",
           "Sessions", "affine_instance", "cache_for_next_round", "make_sessions",
           "pop_session", "push_session", "round_done", "session_next_time"]
