"""State of the prefill -> decode handoff, and the helpers both sides of it use (compiled).

A disaggregated request is dispatched to a prefill instance, prefilled, bound to a decode
instance by the decode router (at dispatch: *early*; at prefill end: *late*), queued for a
pull by that instance, transferred and decoded (:mod:`serveplan.sim.disagg` has the
events). :data:`HandoffState` holds what this path needs beyond the engines' own state:
per request its instances and the times of each stage, per decode instance its FIFO pull
queue, per prefill instance the finished prefills whose KV it still holds.

Indices: prefill instances are the deployment's first instances (``p_of`` is a global
instance index, equal to the index within the prefill pool); ``d_of`` is an index within
the decode pool, whose instances start at global index ``gi[Q_DBASE]``. ``t_finish`` is
every request's completion time, whatever its architecture.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ._jitcache import sim_jit
from .pd_router import on_assign, route_decode
from .state import A_BUSY_UNTIL, I_BUSY

# int parameters and counters: hs.gi[Q_*]
(Q_LATE, Q_LAYERWISE, Q_DELAY, Q_DPTR, Q_NDELAY, Q_CHUNK, Q_DBASE, Q_RECOMPUTE) = range(8)
N_GI = 8
# float parameters: hs.gf[W_*]
(W_LAYER_FRAC,) = range(1)
N_GF = 1
# per-request flags: hs.flag[r] bits
FL_PREFILLED, FL_QUEUED, FL_ASSIGNED = 1, 2, 4

HandoffState = namedtuple("HandoffState", [
    "p_of", "d_of", "t_assign", "tau", "t_kvready", "t_xstart", "t_join", "t_dec1", "t_finish",
    "opt_tok", "opt_req", "flag", "pq_next", "t_delay_end", "dorder",
    "pq_head", "pq_tail", "pq_len", "held", "d_tstart", "p_node", "d_node", "link",
    "t_pre", "gi", "gf",
])


def make_handoff_state(n: int, n_prefill: int, n_decode: int, *, gi=None, gf=None,
                       t_delay_end=None, dorder=None, p_node=None, d_node=None, link=None,
                       t_pre=None) -> HandoffState:
    """Handoff state for ``n`` requests between ``n_prefill`` and ``n_decode`` instances
    (a colocated run has none of either: only its ``t_finish`` is sized by request)."""
    m = max(n, 1)
    nd, npf = max(n_decode, 1), max(n_prefill, 1)
    m_pd = m if n_decode > 0 else 1  # per-request handoff arrays: a colocated run needs none
    nan = np.full(m_pd, np.nan)
    i64 = np.int64
    return HandoffState(
        p_of=np.full(m_pd, -1, dtype=i64), d_of=np.full(m_pd, -1, dtype=i64),
        t_assign=nan.copy(), tau=nan.copy(), t_kvready=nan.copy(), t_xstart=nan.copy(),
        t_join=nan.copy(), t_dec1=nan.copy(), t_finish=np.full(m, np.nan),
        opt_tok=np.full(m_pd, -1, dtype=np.int8), opt_req=np.full(m_pd, -1, dtype=np.int8),
        flag=np.zeros(m_pd, dtype=i64), pq_next=np.full(m_pd, -1, dtype=i64),
        t_delay_end=np.full(m_pd, np.inf) if t_delay_end is None else t_delay_end,
        dorder=np.zeros(m_pd, dtype=i64) if dorder is None else dorder,
        pq_head=np.full(nd, -1, dtype=i64), pq_tail=np.full(nd, -1, dtype=i64),
        pq_len=np.zeros(nd, dtype=i64), held=np.zeros(npf, dtype=i64),
        d_tstart=np.zeros(nd),
        p_node=np.zeros(npf, dtype=i64) if p_node is None else p_node,
        d_node=np.zeros(nd, dtype=i64) if d_node is None else d_node,
        link=np.zeros((2, 2)) if link is None else link,
        t_pre=np.zeros(1) if t_pre is None else t_pre,
        gi=np.zeros(N_GI, dtype=i64) if gi is None else gi,
        gf=np.zeros(N_GF) if gf is None else gf,
    )


@sim_jit
def est_prefill(hs, inst, p, prompt, now):
    """Expected time until ``prompt`` more tokens queued on prefill instance ``p`` finish."""
    chunk = hs.gi[Q_CHUNK]
    q = inst.load[p] + prompt
    t = (q // chunk) * hs.t_pre[chunk] + hs.t_pre[q % chunk]
    if inst.ist[p, I_BUSY] != 0 and inst.acc[p, A_BUSY_UNTIL] > now:
        t += inst.acc[p, A_BUSY_UNTIL] - now
    return t


@sim_jit
def enqueue_pull(hs, r, now):
    """``r``'s KV is ready (or streams): it joins its decode instance's pull queue."""
    d = hs.d_of[r]
    hs.flag[r] |= FL_QUEUED
    hs.t_kvready[r] = now
    hs.pq_next[r] = -1
    if hs.pq_len[d] == 0:
        hs.pq_head[d] = r
    else:
        hs.pq_next[hs.pq_tail[d]] = r
    hs.pq_tail[d] = r
    hs.pq_len[d] += 1


@sim_jit
def assign_decode(hs, rt, d_reqs, r, now, tau):
    """The decode router binds ``r`` to a decode instance, expecting it at ``tau``."""
    d = route_decode(rt, now, tau)
    hs.d_of[r] = d
    d_reqs.inst[r] = d
    hs.t_assign[r] = now
    hs.tau[r] = tau
    hs.flag[r] |= FL_ASSIGNED
    on_assign(rt, r, d, d_reqs.prompt[r], tau)


__all__ = ["FL_ASSIGNED", "FL_PREFILLED", "FL_QUEUED", "HandoffState", "assign_decode",
           "enqueue_pull", "est_prefill", "make_handoff_state"]
