"""Roofline-and-dispatch batch cost kernels (BestServe §2.5, §3.3, Algorithm 1).

Everything here is a numba ``@njit`` function over flat arrays; nothing compiles at import.
The estimator turns a model + parallelism + calibration profile into three arrays once:

``ops`` (float64, one row per operator of one transformer layer, or of the pre/post part):
    columns ``C_*`` below. An operator's work ``W`` (FLOP) and traffic ``Q`` (bytes) are
    linear in a *basis* quantity of the batch, chosen by ``C_BASIS``:

    =================  ===============================================================
    ``B_TOKENS``       T = new tokens in the step:         W = a·T,  Q = b·T + c
    ``B_ROWS``         R = logit rows (one per request):   W = a·R,  Q = b·R + c
    ``B_ATTN_PREFILL`` requests with >1 new token:         W = a·pairs, Q = b·kv_read + c·q
    ``B_ATTN_DECODE``  requests with 1 new token:          same, over the decode requests
    ``B_SCORES``       eager attention's score matrix:     W = a·S,  Q = b·S  (S = q·k entries)
    ``B_MOE``          routed experts on the busiest rank: W = a·A,  Q = b·A + c·E_active
    ``B_ALLREDUCE``    all-reduce of b·T bytes over the TP group (engines' algorithm by size)
    ``B_ALLTOALL``     all-to-all of b·T·f bytes over the EP group (busiest rank)
    ``B_GATHER``       all-gather of the n = x1 attention-DP ranks' tokens: b·T bytes
                       from each of the n - 1 others (or the reduce-scatter back)
    =================  ===============================================================

    where pairs = causal (query, key) pairs, kv_read = KV tokens read (FlashAttention
    reads each request's KV once per query tile), A = token-expert assignments routed to
    the busiest expert-parallel rank, E_active = expected experts of that rank hit by at
    least one token. An EP step waits for its slowest rank: with routed load ``f``
    (``prm[P_MOE_LOAD]``, max over ranks / mean, from
    :mod:`serveplan.estimator.routing`) that rank computes and receives as a rank of a
    balanced layer would with ``f`` times the tokens (``f = 1``: every rank equal).

``mods`` (float64, one row per module): ``M_DISPATCH`` eager CPU dispatch seconds,
    ``M_SECTION`` 0 / 1 / 2 = before / in each / after the layers, ``M_SPLIT``.

``prm`` (float64): scalars at the ``P_*`` indices, including per-phase, per-family
    efficiencies ``e_c`` (compute) and ``e_m`` (memory) at ``P_EFF``.

An operator's GPU time is the adapted roofline (BestServe eq. 3)
``W / min(e_c S_c, I e_m S_m) = max(W / (e_c S_c), Q / (e_m S_m))`` plus a fixed
per-kernel time. Module times are combined with CPU dispatch by the overlap rule of
BestServe Algorithm 1, solved in closed form over the repeated layers (:func:`combine`).
"""

from __future__ import annotations

import numpy as np

from . import primitives as _primitives
from .cache_guard import drop_stale
from .primitives import (  # noqa: F401  (re-exported: roofline.attention_request, ...)
    allreduce_time,
    alltoall_time,
    attention_aggregates,
    attention_aggregates_q,
    attention_request,
    expected_active,
    njit,
    roofline_time,
)


def _cache_probe():
    """A function of this module, for :func:`~.cache_guard.drop_stale`."""


drop_stale(_cache_probe, [_primitives.__file__])

# --- ops columns -------------------------------------------------------------------
C_MODULE, C_BASIS, C_A, C_B, C_C, C_FAMILY, C_COUNT, C_FRAC, C_WINDOW, C_X1, C_X2, C_PARAM = range(12)
# C_PARAM: resident weight bytes of the row (memory planner), not used for time.
# C_RATE: 1/(e_c S_c), 1/(e_m S_m) per phase [prefill c, m, decode c, m] (:func:`fill_rates`)
C_RATE = 12
# C_CORR, C_CORR + 1: offsets in ``prm`` of the row's corrector table in the prefill and the
# decode phase (0 = none; :func:`correction`): a collective runs eagerly in a mixed step but
# inside the CUDA graph in a decode step. GEMM rows keep n, k in C_X1 / C_X2 (features).
C_CORR = 16
# C_FIXED: the row's fixed GPU seconds per call, C_COUNT kernels x the family's per-kernel
# time (``prm[P_FIXED + family]``), written by :func:`fill_rates`.
C_FIXED = 18
# C_DECODE_FUSED: 1 for a row that runs inside a collective's kernel in a decode step (an
# RMSNorm fused into the TP all-reduce, whose small decode messages take the fused one- or
# two-shot kernels): no time of its own there; a mixed step runs it separately.
C_DECODE_FUSED = 19
N_COLS = 20
N_AGG = 5  # attention aggregates per row: pairs, kv_read, query tokens, score entries, requests
# --- bases -------------------------------------------------------------------------
(B_TOKENS, B_ROWS, B_ATTN_PREFILL, B_ATTN_DECODE, B_SCORES, B_MOE, B_ALLREDUCE, B_ALLTOALL,
 B_GATHER) = range(9)
# --- op families (efficiency classes) ----------------------------------------------
F_GEMM, F_ATTN, F_ELEM, F_MOE, F_COMM = range(5)
N_FAMILIES = 5
FAMILY_NAMES = ("gemm", "attention", "elementwise", "moe", "comm")
# --- module table columns ------------------------------------------------------------
M_DISPATCH, M_SECTION, M_SPLIT = range(3)
N_MOD_COLS = 3
# M_SPLIT: 1.0 for a module piecewise CUDA graphs leave out (eager attention between pieces)
GRAPH_NONE, GRAPH_FULL, GRAPH_PIECEWISE = 0, 1, 2
SECTION_PRE, SECTION_LAYER, SECTION_POST = 0, 1, 2
# --- parameter vector --------------------------------------------------------------
(
    P_LAYERS,  # transformer layers of the whole model (all pipeline stages)
    P_PP,  # pipeline stages
    P_TP,  # tensor-parallel group size (all-reduce ring size)
    P_EP,  # expert-parallel group size (all-to-all size)
    P_MOE_TOKENS,  # dp: one rank's experts see the tokens of all dp (equally loaded) ranks
    P_MOE_LOAD,  # routed load of the busiest EP rank over the mean (>= 1; 1 = balanced)
    P_GRAPH,  # 1: pure decodes as one CUDA graph; 2: and mixed steps as piecewise graphs
    P_GRAPH_EXACT,  # 1: only steps of exactly a capture size replay a graph (no padding)
    P_GRAPH_LAUNCH,  # CPU time to launch one graph replay
    P_STEP_OVERHEAD,  # CPU time per engine step outside the forward pass
    P_TILE,  # FlashAttention query tile (rows)
    P_COMM_BW,  # TP/EP link bandwidth per direction, B/s
    P_COMM_LAT,  # per-collective latency, s
    P_P2P_BW,  # pipeline send/recv bandwidth, B/s
    P_P2P_LAT,  # pipeline send/recv latency, s
    P_P2P_BYTES,  # bytes per token sent between pipeline stages
    P_SM,  # peak memory bandwidth, B/s
    P_SC,  # peak FLOP/s per family (N_FAMILIES entries)
) = range(18)
P_EFF = P_SC + N_FAMILIES  # e_c, e_m for [phase][family]: 2 * N_FAMILIES * 2 entries
P_FIXED = P_EFF + 2 * N_FAMILIES * 2  # GPU seconds every kernel of a family costs (N_FAMILIES)
N_PARAMS = P_FIXED + N_FAMILIES  # corrector tables are appended after this
PHASE_PREFILL, PHASE_DECODE = 0, 1


@njit(cache=True)
def eff_index(phase, family, which):
    """Index in ``prm`` of e_c (``which`` = 0) or e_m (``which`` = 1)."""
    return P_EFF + (phase * N_FAMILIES + family) * 2 + which


# --- learned residual correctors ----------------------------------------------------
# A corrector multiplies an op row's time (roofline + fixed) by a factor read from a grid
# table over up to three features, each on a log2 axis, packed into ``prm`` at the offset
# stored in the row's C_CORR (prefill phase) or C_CORR + 1 (decode phase):
#   prm[o] = ndim; then per dim d: feature code, log2 lower edge, step, number of points;
#   then the factors, C order (last dim fastest).
# Evaluation is multilinear interpolation of the factors in log2-feature space, clamped at
# the edges (outside the grid the edge value holds). The estimator fits log corrections and
# packs their exp(), so nothing transcendental runs per row; at a grid node the factor is
# exactly the packed value. See serveplan.estimator.correctors for the fit and packing.
FEAT_TOKENS, FEAT_N, FEAT_K, FEAT_BATCH, FEAT_KV_MEAN, FEAT_Q_MEAN, FEAT_TOK_PER_EXPERT = range(7)
N_FEATURES = 7
FEATURE_NAMES = ("tokens", "n", "k", "batch", "kv_mean", "q_mean", "tokens_per_expert")
CORR_MAX_DIMS = 3
CORR_HEADER = 4  # packed header entries per dim: feature code, log2 lower edge, step, points


@njit(cache=True, inline="always")
def log_feature(code, t, lt, agg, ops, r, prm):
    """log2 of corrector feature ``code`` for op row ``r`` in this step.

    ``t`` is the row's token count (T, or the logit rows R for ``B_ROWS`` rows) and ``lt``
    its log2. ``FEAT_BATCH``, ``FEAT_KV_MEAN`` and ``FEAT_Q_MEAN`` are per request of the
    row's attention class (``agg[r]``: pairs, kv_read, query tokens, score entries,
    requests); on a row without requests the batch is ``t`` and the means are NaN (which
    clamps to the lower edge). The features sit in a tuple indexed by the code: one load
    instead of a chain of data-dependent branches, which cost several times more here.
    """
    if code == FEAT_TOKENS:
        return lt
    n_req = agg[r, 4]
    linear = (t, ops[r, C_X1], ops[r, C_X2], n_req if n_req > 0.0 else t,
              agg[r, 1] / n_req, agg[r, 2] / n_req, t * prm[P_MOE_TOKENS] * ops[r, C_X2])
    return np.log2(linear[code])


@njit(cache=True, inline="always")
def _axis(prm, h, x):
    """Lower node index and weight of log2-feature ``x`` on the axis whose header is at ``h``.

    Clamped: below the first node -> (0, 0.0); beyond the last -> (n-2, 1.0); a one-point
    axis -> (0, 0.0). NaN clamps low.
    """
    npts = prm[h + 3]
    u = (x - prm[h + 1]) / prm[h + 2]
    if u > 0.0 and npts > 1.0:
        if u < npts - 1.0:
            i = int(u)
            return i, u - i
        return int(npts) - 2, 1.0
    return 0, 0.0


@njit(cache=True, inline="always")
def _lerp_last(prm, p, w):
    """Linear interpolation between prm[p] and prm[p + 1] (prm[p + 1] unread when w = 0)."""
    v = prm[p]
    if w > 0.0:
        v += w * (prm[p + 1] - v)
    return v


@njit(cache=True, inline="always")
def _lerp_plane(prm, p, n_last, w_row, w_last):
    """Bilinear interpolation in the plane whose corner is at p (rows n_last apart)."""
    v = _lerp_last(prm, p, w_last)
    if w_row > 0.0:
        v += w_row * (_lerp_last(prm, p + n_last, w_last) - v)
    return v


@njit(cache=True, inline="always")
def correction(prm, off, t, lt, agg, ops, r):
    """Correction factor of the grid table packed at ``prm[off]`` for op row ``r`` (see above).

    Multilinear interpolation over 1-3 log2 axes, as nested linear interpolations (last
    axis first); neighbours of zero weight are not read, so one-point axes and clamped
    edges never index past the table, and a grid node returns its value exactly.
    Allocates nothing.
    """
    ndim = int(prm[off])
    h0 = off + 1
    base = h0 + CORR_HEADER * ndim
    i0, w0 = _axis(prm, h0, log_feature(int(prm[h0]), t, lt, agg, ops, r, prm))
    if ndim == 1:
        return _lerp_last(prm, base + i0, w0)
    h1 = h0 + CORR_HEADER
    i1, w1 = _axis(prm, h1, log_feature(int(prm[h1]), t, lt, agg, ops, r, prm))
    n1 = int(prm[h1 + 3])
    if ndim == 2:
        return _lerp_plane(prm, base + i0 * n1 + i1, n1, w0, w1)
    h2 = h1 + CORR_HEADER
    i2, w2 = _axis(prm, h2, log_feature(int(prm[h2]), t, lt, agg, ops, r, prm))
    n2 = int(prm[h2 + 3])
    p = base + (i0 * n1 + i1) * n2 + i2
    v = _lerp_plane(prm, p, n2, w1, w2)
    if w0 > 0.0:
        v += w0 * (_lerp_plane(prm, p + n1 * n2, n2, w1, w2) - v)
    return v


@njit(cache=True)
def fill_rates(ops, prm):
    """Write each row's 1/(e_c S_c), 1/(e_m S_m) for both phases into ``C_RATE..`` and its
    fixed seconds (``C_COUNT`` x the family's per-kernel time) into ``C_FIXED``.

    Call once whenever ``ops`` or ``prm`` change (the oracle does, on construction).
    """
    for r in range(ops.shape[0]):
        fam = int(ops[r, C_FAMILY])
        for ph in range(2):
            ops[r, C_RATE + 2 * ph] = 1.0 / (prm[eff_index(ph, fam, 0)] * prm[P_SC + fam])
            ops[r, C_RATE + 2 * ph + 1] = 1.0 / (prm[eff_index(ph, fam, 1)] * prm[P_SM])
        ops[r, C_FIXED] = ops[r, C_COUNT] * prm[P_FIXED + fam]


@njit(cache=True)
def module_times(T, R, phase, agg, ops, prm, comp, comm):
    """GPU compute and communication seconds per module for one step (one layer pass).

    ``agg`` holds, per op row, the attention aggregates of that row's request class
    (see :func:`attention_aggregates`); other rows ignore it. Results accumulate into
    ``comp`` and ``comm`` (zeroed here), weighted by each row's layer fraction: first the
    rows that depend on the token count only, then the attention rows. A row with a
    corrector for the phase (``C_CORR + phase`` > 0) has its time multiplied by
    :func:`correction`.
    """
    for j in range(comp.shape[0]):
        comp[j] = 0.0
        comm[j] = 0.0
    add_row_times(T, R, phase, agg, ops, prm, comp, comm, False)
    add_row_times(T, R, phase, agg, ops, prm, comp, comm, True)


@njit(cache=True)
def _is_attention_basis(basis):
    return basis == B_ATTN_PREFILL or basis == B_ATTN_DECODE or basis == B_SCORES


@njit(cache=True)
def _row_phase(basis, phase):
    """The phase whose efficiencies price a row: attention rows keep their request class's
    (decode or prefill) in a mixed step; every other row takes the step's."""
    if basis == B_ATTN_DECODE:
        return PHASE_DECODE
    if basis == B_ATTN_PREFILL:
        return PHASE_PREFILL
    return phase


@njit(cache=True)
def _comm_row_time(basis, nbytes, group, T, prm, e_m):
    """Seconds of one collective row whose bytes per token are ``nbytes``.

    ``B_ALLREDUCE``: all-reduce of ``nbytes·T`` over the TP group (one stage, two stages,
    NCCL's ring or tree by size and group, :func:`allreduce_time`). ``B_ALLTOALL``: the EP all-to-all
    waits for the busiest rank, which receives (dispatch) and sends back (combine) ``f``
    times a rank's mean: ``nbytes·T·f``, with ``nbytes·T`` = the step's T
    tokens (one attention-DP rank's) x top-k x h x bytes and ``f = prm[P_MOE_LOAD]``.
    ``B_GATHER``: every rank receives the other ``group - 1`` attention-DP ranks' ``nbytes·T``
    (MoE experts sharded over the DP ranks see every rank's tokens), whatever the routing.
    """
    if basis == B_ALLREDUCE:
        return allreduce_time(nbytes * T, prm[P_TP], prm[P_COMM_BW], prm[P_COMM_LAT], e_m)
    if basis == B_GATHER:  # (n-1)/n of n ranks' b·T: what an all-to-all of n·b·T moves
        return alltoall_time(nbytes * T * group, group, prm[P_COMM_BW], prm[P_COMM_LAT], e_m)
    return alltoall_time(nbytes * T * prm[P_MOE_LOAD], prm[P_EP], prm[P_COMM_BW],
                         prm[P_COMM_LAT], e_m)


@njit(cache=True)
def _work_traffic(basis, r, T, R, agg, ops, prm):
    """``(W, Q, busy)`` of non-collective row ``r`` in this step (the basis table of the
    module doc); ``busy`` is False when the row has nothing to do (no tokens, no requests
    of its attention class), and then it costs nothing, not even its fixed time.

    ``B_MOE`` prices the busiest expert-parallel rank: its experts see the step's tokens of
    all ``dp`` ranks times its routed load ``f`` (``prm[P_MOE_LOAD]``), spread over its
    ``C_X1`` local experts, each picked by a token with probability ``C_X2``.
    """
    a = ops[r, C_A]
    b = ops[r, C_B]
    c = ops[r, C_C]
    if basis == B_TOKENS:
        return a * T, b * T + c, T > 0.0
    if basis == B_ROWS:
        return a * R, b * R + c, R > 0.0
    if basis == B_ATTN_PREFILL or basis == B_ATTN_DECODE:
        return a * agg[r, 0], b * agg[r, 1] + c * agg[r, 2], agg[r, 2] > 0.0
    if basis == B_SCORES:
        return a * agg[r, 3], b * agg[r, 3] + c * agg[r, 2], agg[r, 3] > 0.0
    tokens = T * prm[P_MOE_TOKENS] * prm[P_MOE_LOAD]  # B_MOE
    local_experts = ops[r, C_X1]
    frac_hit = ops[r, C_X2]  # top-k / experts: chance a token picks one given expert
    assign = tokens * frac_hit * local_experts
    return (a * assign, b * assign + c * expected_active(local_experts, frac_hit, tokens),
            tokens > 0.0)


@njit(cache=True)
def add_row_times(T, R, phase, agg, ops, prm, comp, comm, attention):
    """Add the times of the attention rows (``attention``) or of all other rows (which
    depend on T, R and the phase only) into ``comp`` / ``comm``; see :func:`module_times`."""
    lT = np.nan  # log2 T and log2 R, computed on first use by a corrector
    lR = np.nan
    for r in range(ops.shape[0]):
        basis = int(ops[r, C_BASIS])
        if _is_attention_basis(basis) != attention:
            continue
        ph = _row_phase(basis, phase)
        corr_off = int(ops[r, C_CORR + ph])
        if basis == B_ALLREDUCE or basis == B_ALLTOALL or basis == B_GATHER:
            e_m = prm[eff_index(ph, int(ops[r, C_FAMILY]), 1)]
            t = _comm_row_time(basis, ops[r, C_B], ops[r, C_X1], T, prm, e_m)
            if corr_off > 0 and t > 0.0:
                if lT != lT:
                    lT = np.log2(T)
                t *= correction(prm, corr_off, T, lT, agg, ops, r)
            comm[int(ops[r, C_MODULE])] += ops[r, C_FRAC] * t
            continue
        if ph == PHASE_DECODE and ops[r, C_DECODE_FUSED] > 0.0:
            continue
        w, q, busy = _work_traffic(basis, r, T, R, agg, ops, prm)
        if not busy:
            continue
        t_c = w * ops[r, C_RATE + 2 * ph]
        t_m = q * ops[r, C_RATE + 2 * ph + 1]
        t = (t_c if t_c > t_m else t_m) + ops[r, C_FIXED]  # roofline_time, precomputed rates
        if corr_off > 0:
            if basis == B_ROWS:
                if lR != lR:
                    lR = np.log2(R) if R > 0.0 else -np.inf
                t *= correction(prm, corr_off, R, lR, agg, ops, r)
            else:
                if lT != lT:
                    lT = np.log2(T) if T > 0.0 else -np.inf
                t *= correction(prm, corr_off, T, lT, agg, ops, r)
        comp[int(ops[r, C_MODULE])] += ops[r, C_FRAC] * t


@njit(cache=True)
def module_dispatch(mods, j, graph, launch):
    """CPU seconds to issue module ``j`` once: every module without graphs; under piecewise
    graphs a split module (eager attention) and the launch of the next piece; none else."""
    if graph == GRAPH_NONE:
        return mods[j, M_DISPATCH]
    if graph == GRAPH_PIECEWISE and mods[j, M_SPLIT] > 0.0:
        return mods[j, M_DISPATCH] + launch
    return 0.0


@njit(cache=True)
def combine(comp, comm, mods, prm, graph):
    """Overlap CPU dispatch with GPU work over the whole forward pass (Algorithm 1).

    The CPU issues module j at ``d_j`` (cumulative dispatch); the GPU starts it at
    ``max(f_{j-1}, d_j)`` and finishes after its compute and communication:
    ``f_j = max(f_{j-1}, d_j) + g_j``. For the ``L`` identical layers the per-layer map
    on the lag ``e = f - d`` is ``e' = max(e + G - D, K - D)`` (G, D: the layer's GPU and
    dispatch totals; K: the max over modules of dispatch-before plus GPU-after), whose
    L-fold iterate is ``max(e + L(G-D), (K-D) + (L-1) max(G-D, 0))``. A graph step (``graph``
    not ``GRAPH_NONE``) begins with one launch; then :func:`module_dispatch`. Returns the
    seconds of one forward pass through all layers.
    """
    L = prm[P_LAYERS]
    launch = prm[P_GRAPH_LAUNCH]
    d = 0.0 if graph == GRAPH_NONE else launch
    f = d
    # pre-layer modules
    for j in range(mods.shape[0]):
        if mods[j, M_SECTION] != SECTION_PRE:
            continue
        d += module_dispatch(mods, j, graph, launch)
        f = (f if f > d else d) + comp[j] + comm[j]
    # repeated layers, closed form
    D = 0.0
    G = 0.0
    K = -1e300
    for j in range(mods.shape[0]):
        if mods[j, M_SECTION] != SECTION_LAYER:
            continue
        D += module_dispatch(mods, j, graph, launch)
        g = comp[j] + comm[j]
        # K = max_j (D_cum_j + G_suffix_j) = max_j (D_cum_j - G_prefix_{j-1}) + G
        cand = D - G
        if cand > K:
            K = cand
        G += g
    K += G
    if L > 0.0 and (G > 0.0 or D > 0.0):
        e0 = f - d
        a = G - D
        grow = a if a > 0.0 else 0.0
        e1 = e0 + L * a
        e2 = (K - D) + (L - 1.0) * grow
        e = e1 if e1 > e2 else e2
        d += L * D
        f = d + e
    # post-layer modules
    for j in range(mods.shape[0]):
        if mods[j, M_SECTION] != SECTION_POST:
            continue
        d += module_dispatch(mods, j, graph, launch)
        f = (f if f > d else d) + comp[j] + comm[j]
    return f


@njit(cache=True)
def graphs_run(prm, pure_decode):
    """Whether a step of this kind may replay CUDA graphs (full for pure decodes, piecewise
    for mixed steps when ``prm[P_GRAPH] == 2``)."""
    return prm[P_GRAPH] > 0.0 and (pure_decode or prm[P_GRAPH] > 1.0)


@njit(cache=True)
def graph_index(n_tokens, sizes, prm):
    """Index of the capture size a step of ``n_tokens`` replays: the smallest >= n_tokens
    (padded), or with ``prm[P_GRAPH_EXACT]`` only one equal to it; -1: the step runs eager."""
    k = np.searchsorted(sizes, n_tokens)
    if k >= sizes.shape[0] or (prm[P_GRAPH_EXACT] > 0.0 and sizes[k] != n_tokens):
        return -1
    return k


@njit(cache=True)
def _finish(comp, comm, mods, prm, graph, T):
    """Forward pass + pipeline sends + per-step engine overhead.

    One batch crosses the ``pp`` stages one after another: every layer in sequence plus
    ``pp - 1`` activation sends (overlapping *different* batches is the simulator's job).
    """
    pp = prm[P_PP]
    fwd = combine(comp, comm, mods, prm, graph)
    p2p = 0.0
    if pp > 1.0:
        p2p = prm[P_P2P_LAT] + prm[P_P2P_BYTES] * T / prm[P_P2P_BW]
    return fwd + (pp - 1.0) * p2p + prm[P_STEP_OVERHEAD]


@njit(cache=True)
def step_costs(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg, comp, comm):
    """Fill per-module ``comp``/``comm`` for one mixed step; return (T, R, graph mode).

    Scratch arrays ``agg`` (n_ops × N_AGG), ``comp`` and ``comm`` (n_modules) are caller-owned
    so that a scheduler loop allocates nothing per step.
    """
    return step_costs_q(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg, comp,
                        comm, 1.0)


@njit(cache=True)
def step_costs_q(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg, comp, comm,
                 q_decode):
    """:func:`step_costs` where a request with at most ``q_decode`` new tokens decodes.

    With speculative decoding (``q_decode = k + 1``) a decoding request brings its last
    token and ``k`` draft tokens to be verified: it stays in the decode attention class,
    every one of its query tokens gets a logit row (the target scores each draft), and a
    step of decodes only is a CUDA-graph step padded to the capture size >= its tokens.
    ``q_decode = 1`` is the step without speculation. A piecewise-graph mixed step pads
    its tokens to a capture size too (attention and logit rows stay as scheduled).
    """
    T = 0.0
    R = 0.0
    pure_decode = n > 0
    for i in range(n):
        q = new_tokens[i]
        T += q
        if q > q_decode:
            pure_decode = False
        R += q if 1.0 < q <= q_decode else 1.0  # verify rows score every query token
    graph = GRAPH_NONE
    k = graph_index(T, graph_sizes, prm) if graphs_run(prm, pure_decode) else -1
    if k >= 0:
        T = graph_sizes[k]
        graph = GRAPH_FULL if pure_decode else GRAPH_PIECEWISE
        R = T if pure_decode else R
    tile = prm[P_TILE]
    for r in range(ops.shape[0]):
        basis = int(ops[r, C_BASIS])
        if basis == B_ATTN_PREFILL or basis == B_SCORES:
            attention_aggregates_q(new_tokens, context_len, n, True, ops[r, C_WINDOW], tile,
                                   agg[r], q_decode)
        elif basis == B_ATTN_DECODE:
            attention_aggregates_q(new_tokens, context_len, n, False, ops[r, C_WINDOW], tile,
                                   agg[r], q_decode)
    phase = PHASE_DECODE if pure_decode else PHASE_PREFILL
    module_times(T, R, phase, agg, ops, prm, comp, comm)
    return T, R, graph


@njit(cache=True)
def step_time(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg, comp, comm):
    """Seconds for one engine step over requests ``0..n-1`` (the scheduler's hot call).

    ``new_tokens[i]`` tokens are computed for request i on top of ``context_len[i]``
    cached ones. Steps where every request decodes one token are "decode" phase (and run
    as a CUDA graph when enabled and the padded batch fits a capture size); any request
    with more than one new token makes the step "prefill" phase for its linear layers.
    """
    return step_time_q(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg, comp,
                       comm, 1.0)


@njit(cache=True)
def step_time_q(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg, comp, comm,
                q_decode):
    """:func:`step_time` where requests with at most ``q_decode`` new tokens decode (a
    speculative-decoding verify step, :func:`step_costs_q`)."""
    if n <= 0:
        return 0.0
    T, R, graph = step_costs_q(new_tokens, context_len, n, ops, mods, prm, graph_sizes, agg,
                               comp, comm, q_decode)
    return _finish(comp, comm, mods, prm, graph, T)
