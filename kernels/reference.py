"""Plain NumPy / Python references for the numba kernels, written the obvious way.

Each reference computes what its kernel computes without the kernel's shortcuts: pairs
and KV reads by enumerating positions and tiles, the dispatch/GPU overlap by stepping
through every module of every layer instead of the closed form. Tests hold the kernels to
these; benchmarks time both. ``REFERENCE`` maps kernel name -> reference.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import roofline as K


def roofline_time_ref(work, traffic, peak_flops, peak_bw, e_c, e_m):
    """W / P with P = min(e_c S_c, I e_m S_m), I = W / Q (BestServe eq. 3), as written."""
    work = np.asarray(work, dtype=float)
    traffic = np.asarray(traffic, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = work / traffic
        perf = np.minimum(e_c * peak_flops, intensity * e_m * peak_bw)
        t = np.where(work > 0, work / perf, traffic / (e_m * peak_bw))
    return t


def allreduce_time_ref(nbytes, group, bw, latency, eff):
    """The engines' all-reduce algorithm by size, written as data movement per stage:
    one stage reads the n-1 peers' whole buffers after one barrier; two stages reduce-
    scatter then all-gather a 1/n shard each to n-1 peers after a barrier each; NCCL's
    ring runs 2(n-1) steps moving nbytes/n with one latency each; over more than 8 GPUs
    NCCL's tree goes up and down a binary tree of depth ceil(log2 n) (one latency a level)
    and moves what the ring moves."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    rate = eff * bw
    custom = group <= 8 and nbytes < 8 * 2**20
    one_stage_below = {2: 8 * 2**20, 3: 512 * 1024, 4: 512 * 1024}.get(group, 256 * 1024)
    if custom and nbytes < one_stage_below:
        return latency + (group - 1) * nbytes / rate
    if custom:
        shard_exchange = (group - 1) * (nbytes / group) / rate
        return 2 * (latency + shard_exchange)
    step = nbytes / group / rate
    if group > 8:
        depth = int(np.ceil(np.log2(group)))
        return 2 * depth * latency + 2 * (group - 1) * step
    return 2 * (group - 1) * (step + latency)


def alltoall_time_ref(nbytes, group, bw, latency, eff):
    """Each rank sends (n-1)/n of its bytes to the others, links used in parallel."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    return nbytes * (group - 1) / group / (eff * bw) + latency


def attention_request_ref(q, c, window, tile):
    """Causal pairs and FlashAttention KV reads by enumerating query positions and tiles."""
    q, c = int(q), int(c)
    pos = np.arange(c, c + q)
    seen = pos + 1 if window <= 0 else np.minimum(pos + 1, int(window))
    pairs = float(seen.sum())
    if q <= 1:
        return pairs, float(seen[-1]) if q == 1 else 0.0
    kv = 0.0
    for start in range(0, q, int(tile)):
        end = min(start + int(tile), q)
        first_q, last_q = c + start, c + end - 1
        hi = last_q + 1  # keys [lo, hi) visible to some query of the tile
        lo = 0 if window <= 0 else max(0, first_q - int(window) + 1)
        kv += hi - lo
    return pairs, kv


def log_features_ref(ops, r, T, R, prm, agg_row):
    """log2 of every corrector feature (indexed by FEAT_* code) of op row ``r``, by definition."""
    basis = int(ops[r, K.C_BASIS])
    tokens = R if basis == K.B_ROWS else T
    n_req = agg_row[4]
    with np.errstate(divide="ignore"):
        feats = {
            K.FEAT_TOKENS: np.log2(tokens),
            K.FEAT_N: np.log2(ops[r, K.C_X1]),
            K.FEAT_K: np.log2(ops[r, K.C_X2]),
            K.FEAT_BATCH: np.log2(n_req if n_req > 0 else tokens),
            K.FEAT_KV_MEAN: np.log2(agg_row[1] / n_req) if n_req > 0 else -np.inf,
            K.FEAT_Q_MEAN: np.log2(agg_row[2] / n_req) if n_req > 0 else -np.inf,
            K.FEAT_TOK_PER_EXPERT: np.log2(tokens * prm[K.P_MOE_TOKENS] * ops[r, K.C_X2]),
        }
    return feats


def correction_ref(prm, off, log_feats):
    """Factor of the packed grid table at ``prm[off]``: multilinear interpolation over every
    corner of the enclosing cell, coordinates clamped to the grid, written out in full."""
    ndim = int(prm[off])
    axes = []
    for d in range(ndim):
        code, lo, step, npts = prm[off + 1 + K.CORR_HEADER * d: off + 1 + K.CORR_HEADER * (d + 1)]
        npts = int(npts)
        u = (log_feats[int(code)] - lo) / step
        u = 0.0 if not np.isfinite(u) and not u > 0 else u
        u = min(max(u, 0.0), npts - 1.0)
        lower = min(int(np.floor(u)), max(npts - 2, 0))
        axes.append((npts, lower, u - lower))
    values = prm[off + 1 + K.CORR_HEADER * ndim:]
    total = 0.0
    for corner in itertools.product((0, 1), repeat=ndim):
        weight = 1.0
        flat = 0
        for (npts, lower, frac), bit in zip(axes, corner, strict=True):
            weight *= frac if bit else 1.0 - frac
            flat = flat * npts + min(lower + bit, npts - 1)
        total += weight * values[flat]
    return total


def _op_work_traffic(ops, r, T, R, prm, agg_row):
    basis = int(ops[r, K.C_BASIS])
    a, b, c = ops[r, K.C_A], ops[r, K.C_B], ops[r, K.C_C]
    if basis == K.B_TOKENS:
        return (a * T, b * T + c) if T > 0 else (0.0, 0.0)
    if basis == K.B_ROWS:
        return (a * R, b * R + c) if R > 0 else (0.0, 0.0)
    if basis in (K.B_ATTN_PREFILL, K.B_ATTN_DECODE):
        return a * agg_row[0], b * agg_row[1] + c * agg_row[2]
    if basis == K.B_SCORES:
        return a * agg_row[3], b * agg_row[3] + c * agg_row[2]
    if basis == K.B_MOE:
        # the busiest EP rank: its experts see every DP rank's tokens, times its routed load
        tokens = T * prm[K.P_MOE_TOKENS] * prm[K.P_MOE_LOAD]
        experts, p = ops[r, K.C_X1], ops[r, K.C_X2]
        # probability that a given local expert receives none of the tokens
        active = experts * (1 - (1 - p) ** tokens) if tokens > 0 else 0.0
        assign = tokens * p * experts
        return a * assign, b * assign + c * active
    raise ValueError(f"basis {basis} has no work/traffic")


def _collective_ref(ops, r, T, prm, e_m):
    """Seconds of a collective row: TP all-reduce of b·T bytes, the EP all-to-all of the
    busiest rank, which moves f times a rank's mean b·T (this rank's T, not dp·T), or the
    all-gather of the other n - 1 attention-DP ranks' b·T (one latency)."""
    if int(ops[r, K.C_BASIS]) == K.B_ALLREDUCE:
        return allreduce_time_ref(ops[r, K.C_B] * T, prm[K.P_TP], prm[K.P_COMM_BW],
                                       prm[K.P_COMM_LAT], e_m)
    if int(ops[r, K.C_BASIS]) == K.B_GATHER:  # each of n ranks gets the n-1 others' b·T
        n = ops[r, K.C_X1]
        return (n - 1) * ops[r, K.C_B] * T / (e_m * prm[K.P_COMM_BW]) + prm[K.P_COMM_LAT]
    busiest = ops[r, K.C_B] * T * prm[K.P_MOE_LOAD]
    return alltoall_time_ref(busiest, prm[K.P_EP], prm[K.P_COMM_BW], prm[K.P_COMM_LAT], e_m)


def _attention_agg_ref(ops, r, q, cx, prm, q_decode=1):
    """Pairs, KV reads, query tokens, score entries and requests of row ``r``'s class
    (decodes: requests with at most ``q_decode`` new tokens)."""
    agg = np.zeros(5)
    want_prefill = int(ops[r, K.C_BASIS]) != K.B_ATTN_DECODE
    for i in range(q.shape[0]):
        if q[i] <= 0 or (q[i] > q_decode) != want_prefill:
            continue
        pairs, kv = attention_request_ref(q[i], cx[i], ops[r, K.C_WINDOW], prm[K.P_TILE])
        agg += (pairs, kv, q[i], q[i] * (cx[i] + q[i]), 1.0)
    return agg


def _row_times_ref(q, cx, T, R, phase, ops, prm, n_mod, q_decode=1):
    """Per-module (compute, communication) seconds of one layer pass, row by row."""
    comp = np.zeros(n_mod)
    comm = np.zeros(n_mod)
    for r in range(ops.shape[0]):
        basis = int(ops[r, K.C_BASIS])
        fam = int(ops[r, K.C_FAMILY])
        mod = int(ops[r, K.C_MODULE])
        ph = {K.B_ATTN_DECODE: K.PHASE_DECODE, K.B_ATTN_PREFILL: K.PHASE_PREFILL}.get(basis,
                                                                                    phase)
        e_c = prm[K.P_EFF + (ph * K.N_FAMILIES + fam) * 2]
        e_m = prm[K.P_EFF + (ph * K.N_FAMILIES + fam) * 2 + 1]
        off = int(ops[r, K.C_CORR + ph])
        agg = np.zeros(5)
        if basis in (K.B_ALLREDUCE, K.B_ALLTOALL, K.B_GATHER):
            t = _collective_ref(ops, r, T, prm, e_m)
            if off > 0 and t > 0:
                t *= correction_ref(prm, off, log_features_ref(ops, r, T, R, prm, agg))
            comm[mod] += ops[r, K.C_FRAC] * t
            continue
        if ph == K.PHASE_DECODE and ops[r, K.C_DECODE_FUSED] > 0:
            continue  # inside the decode step's all-reduce kernel
        if basis in (K.B_ATTN_PREFILL, K.B_ATTN_DECODE, K.B_SCORES):
            agg = _attention_agg_ref(ops, r, q, cx, prm, q_decode)
            if agg[2] == 0:
                continue
        w, byt = _op_work_traffic(ops, r, T, R, prm, agg)
        if w == 0 and byt == 0:
            continue
        t = float(roofline_time_ref(w, byt, prm[K.P_SC + fam], prm[K.P_SM], e_c, e_m))
        t += ops[r, K.C_COUNT] * prm[K.P_FIXED + fam]
        if off > 0:
            t *= correction_ref(prm, off, log_features_ref(ops, r, T, R, prm, agg))
        comp[mod] += ops[r, K.C_FRAC] * t
    return comp, comm


def step_time_ref(new_tokens, context_len, ops, mods, prm, graph_sizes, q_decode=1):
    """One step, computed op by op and module by module through every layer. Requests
    with at most ``q_decode`` new tokens decode (a speculative verify step: one logit row
    per query token of each of them)."""
    q = np.asarray(new_tokens, dtype=float)
    cx = np.asarray(context_len, dtype=float)
    n = q.shape[0]
    if n == 0:
        return 0.0
    verify = (q > 1) & (q <= q_decode)
    T, R = q.sum(), float(np.where(verify, q, 1.0).sum())
    pure_decode = bool(np.all(q <= q_decode))
    graph = K.GRAPH_NONE
    if prm[K.P_GRAPH] > 0 and (pure_decode or prm[K.P_GRAPH] > 1):
        fits = graph_sizes[graph_sizes >= T]
        if prm[K.P_GRAPH_EXACT] > 0:  # no padding: only a batch of exactly a capture size
            fits = fits[fits == T]
        if fits.size:
            T = float(fits[0])
            graph, R = (K.GRAPH_FULL, T) if pure_decode else (K.GRAPH_PIECEWISE, R)
    phase = K.PHASE_DECODE if pure_decode else K.PHASE_PREFILL
    n_mod = mods.shape[0]
    comp, comm = _row_times_ref(q, cx, T, R, phase, ops, prm, n_mod, q_decode)
    # Algorithm 1, module by module through every layer
    sections = mods[:, K.M_SECTION]
    order = [j for j in range(n_mod) if sections[j] == K.SECTION_PRE]
    layer = [j for j in range(n_mod) if sections[j] == K.SECTION_LAYER]
    order += layer * int(prm[K.P_LAYERS])
    order += [j for j in range(n_mod) if sections[j] == K.SECTION_POST]
    launch = prm[K.P_GRAPH_LAUNCH]
    d = 0.0 if graph == K.GRAPH_NONE else launch
    f = d
    for j in order:
        if graph == K.GRAPH_NONE:
            d += mods[j, K.M_DISPATCH]
        elif graph == K.GRAPH_PIECEWISE and mods[j, K.M_SPLIT] > 0:
            d += mods[j, K.M_DISPATCH] + launch  # eager attention, then the next piece
        f = max(f, d) + comp[j] + comm[j]
    if prm[K.P_PP] > 1:
        f += (prm[K.P_PP] - 1) * (prm[K.P_P2P_LAT] + prm[K.P_P2P_BYTES] * T / prm[K.P_P2P_BW])
    return f + prm[K.P_STEP_OVERHEAD]


REFERENCE = {
    "roofline_time": roofline_time_ref,
    "allreduce_time": allreduce_time_ref,
    "alltoall_time": alltoall_time_ref,
    "attention_request": attention_request_ref,
    "step_time": step_time_ref,
    "correction": correction_ref,
    "uniform_step_times": step_time_ref,
}
