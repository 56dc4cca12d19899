"""Attention/FFN disaggregation: the decode step of an attention instance (compiled).

In attention/FFN disaggregation (AFD; ``papers/frontier.txt`` §3.2, Appendix A.3) an
attention instance A holds the KV cache and runs every layer's attention; FFN instances F
hold the FFN (or expert) weights. Each decode iteration moves the activations A -> F and
F -> A at every layer. A splits its batch into ``m`` micro-batches and ping-pongs them, so
A computes one micro-batch's attention while F computes another's FFN.

:func:`afd_step_time` prices one step by list-scheduling that ping-pong exactly: A and F
each run one micro-batch-layer at a time, in layer-major order; a micro-batch's FFN starts
once F is free and its activations have arrived, its next attention once A is free and the
FFN output is back::

    A(l, j) starts at max(A free, back(l-1, j))          a_j seconds on A
    F(l, j) starts at max(F free, A(l, j) end + s_j)     f_j seconds on F
    back(l, j) = F(l, j) end + s_j

The pre-layer modules (embedding) run on A before the first layer, the post-layer ones
(final norm, LM head, sampler) after the last, per micro-batch. For two equal micro-batches
the per-layer period is ``max(2a, 2f, a + f + 2s)``: the slower stage twice, plus the part
of the round trip the other micro-batch cannot hide.

Costs come from two cost oracles: ``a_j`` = the attention-side modules (norms, attention
with its TP all-reduce) of A's oracle for micro-batch j, ``f_j`` = the FFN module of F's
oracle at the tokens one F instance receives. F serves the whole attention pool: its
tokens are this micro-batch's plus the other attention instances' running requests split
the same way (the pool's current load, :data:`AFD_SHARE` = 1 / FFN instances). With expert
parallelism in F the A -> F and F -> A transfers are the dispatch and combine, so F's own
all-to-all is not counted again (:data:`AFD_F_COMM` = 0); a tensor-parallel F keeps its
all-reduce. The transfer ``s_j`` is latency plus bytes over the slower end: A's egress (its
micro-batch over its GPUs' links) or F's ingress (the pool's micro-batch tokens sent to one
F instance, over its links) -- the link's concurrency.

The simulator's loop is compiled without numba's memory manager, so nothing here allocates:
a batch is split into ``m`` contiguous micro-batches (sizes differ by at most one request),
each priced on a view of the batch, and the per-micro-batch times live in the tail of the
parameter row (:data:`AFD_WIDTH` = :data:`N_AFD` parameters + scratch for up to
:data:`MAX_MICRO` micro-batches).
"""

from __future__ import annotations

from . import primitives as _primitives
from . import roofline as _roofline
from .cache_guard import drop_stale
from .primitives import njit
from .roofline import (
    M_SECTION,
    P_LAYERS,
    P_STEP_OVERHEAD,
    PHASE_DECODE,
    PHASE_PREFILL,
    SECTION_LAYER,
    SECTION_POST,
    SECTION_PRE,
    module_times,
    step_costs,
)


def _cache_probe():
    """A function of this module, for :func:`~.cache_guard.drop_stale`."""


drop_stale(_cache_probe, [_roofline.__file__, _primitives.__file__])

# AFD parameters of one attention pool (``afd`` row of the cost tables)
(AFD_MICRO,       # micro-batches m (ping-pong lanes)
 AFD_EGRESS_S,    # seconds per token leaving one attention instance (bytes / its link bw)
 AFD_INGRESS_S,   # seconds per token entering one FFN instance (bytes / its link bw)
 AFD_LATENCY,     # seconds of one transfer's latency
 AFD_SHARE,       # share of the pool's tokens one FFN instance receives (1 / FFN instances)
 AFD_F_COMM,      # 1: count F's collectives (TP all-reduce); 0: EP (the transfer is it)
 AFD_ATTN_MOD,    # bit mask of the attention-side layer modules of A's oracle
 AFD_FFN_MOD,     # bit mask of the FFN-side layer modules of F's oracle
 ) = range(8)
N_AFD = 8
MAX_MICRO = 16  # the most micro-batches a step splits into (the config's bound)
AFD_WIDTH = N_AFD + 6 * MAX_MICRO
"""Width of a parameter row: the parameters, then per-micro-batch scratch (pre, a, s, f,
post, ready)."""


@njit(cache=True)
def _side_time(comp, comm, mods, mask, with_comm):
    """Seconds of the layer modules in bit ``mask`` (one layer pass)."""
    t = 0.0
    for k in range(mods.shape[0]):
        if mods[k, M_SECTION] == SECTION_LAYER and (int(mask) >> k) & 1:
            t += comp[k] + (comm[k] if with_comm else 0.0)
    return t


@njit(cache=True)
def _section_time(comp, comm, mods, section):
    t = 0.0
    for k in range(mods.shape[0]):
        if mods[k, M_SECTION] == section:
            t += comp[k] + comm[k]
    return t


@njit(cache=True)
def ping_pong(pre, a, s, f, post, layers, ready):
    """Seconds from the step's start until the last micro-batch leaves A (module doc).

    ``pre``, ``a``, ``s``, ``f``, ``post``: per micro-batch pre-layer, attention,
    one-way transfer, FFN and post-layer seconds; ``layers`` identical layers; ``ready``:
    scratch of the same length (when each micro-batch is next ready for A).
    """
    m = a.shape[0]
    a_free = 0.0
    for j in range(m):
        a_free += pre[j]
        ready[j] = a_free
    f_free = 0.0
    for _ in range(layers):
        for j in range(m):
            start = a_free if a_free > ready[j] else ready[j]
            a_free = start + a[j]
            arrive = a_free + s[j]
            fs = f_free if f_free > arrive else arrive
            f_free = fs + f[j]
            ready[j] = f_free + s[j]
    for j in range(m):
        a_free = (a_free if a_free > ready[j] else ready[j]) + post[j]
    return a_free


@njit(cache=True)
def afd_step_time(new_tokens, ctx, n, a_tab, f_tab, afd, pool_tokens):
    """Seconds of one step of an attention instance over requests ``0..n-1``.

    ``a_tab`` / ``f_tab``: ``(ops, mods, prm, graph_sizes, agg, comp, comm)`` of A's and
    F's cost oracles; ``afd``: a row of :data:`AFD_WIDTH` (the :data:`N_AFD` parameters,
    then scratch); ``pool_tokens``: new tokens of the other attention instances of the pool
    in their current batches (F serves them too). Micro-batch j holds the contiguous
    requests ``j n / m .. (j + 1) n / m - 1``.
    """
    if n <= 0:
        return 0.0
    a_ops, a_mods, a_prm, a_gs, a_agg, a_comp, a_comm = a_tab
    f_ops, f_mods, f_prm, f_agg, f_comp, f_comm = f_tab
    m = min(int(afd[AFD_MICRO]), n, MAX_MICRO)
    lanes = afd[N_AFD:N_AFD + 6 * m]
    pre, a, s, f, post, ready = (lanes[0:m], lanes[m:2 * m], lanes[2 * m:3 * m],
                                 lanes[3 * m:4 * m], lanes[4 * m:5 * m], lanes[5 * m:])
    f_agg[:] = 0.0  # F prices no attention
    for j in range(m):
        lo, hi = j * n // m, (j + 1) * n // m
        tokens = 0.0
        prefill = False
        for i in range(lo, hi):
            tokens += new_tokens[i]
            prefill = prefill or new_tokens[i] > 1
        step_costs(new_tokens[lo:hi], ctx[lo:hi], hi - lo, a_ops, a_mods, a_prm, a_gs, a_agg,
                   a_comp, a_comm)
        a[j] = _side_time(a_comp, a_comm, a_mods, afd[AFD_ATTN_MOD], True)
        pre[j] = _section_time(a_comp, a_comm, a_mods, SECTION_PRE)
        post[j] = _section_time(a_comp, a_comm, a_mods, SECTION_POST)
        f_tokens = (tokens + pool_tokens / m) * afd[AFD_SHARE]
        module_times(f_tokens, f_tokens, PHASE_PREFILL if prefill else PHASE_DECODE, f_agg,
                     f_ops, f_prm, f_comp, f_comm)
        f[j] = _side_time(f_comp, f_comm, f_mods, afd[AFD_FFN_MOD], afd[AFD_F_COMM] != 0.0)
        egress = tokens * afd[AFD_EGRESS_S]
        ingress = f_tokens * afd[AFD_INGRESS_S]
        s[j] = afd[AFD_LATENCY] + (egress if egress > ingress else ingress)
    return ping_pong(pre, a, s, f, post, int(a_prm[P_LAYERS]), ready) + a_prm[P_STEP_OVERHEAD]


__all__ = ["AFD_ATTN_MOD", "AFD_EGRESS_S", "AFD_FFN_MOD", "AFD_F_COMM", "AFD_INGRESS_S",
           "AFD_LATENCY", "AFD_MICRO", "AFD_SHARE", "AFD_WIDTH", "MAX_MICRO", "N_AFD",
           "afd_step_time", "ping_pong"]
