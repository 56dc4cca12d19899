"""Closed-form primitives of the cost model, each a numba ``@njit`` function of scalars.

One operator's adapted roofline time, one collective (all-reduce as the engines run it, all-to-all), one
request's causal attention pairs and FlashAttention KV reads (and their sums over a
request class), and the experts of one rank hit by a number of tokens. They know nothing
of the op-table layout; :mod:`serveplan.kernels.roofline` prices a whole step with them and
re-exports them under its own name (``roofline.attention_request``, ...).

numba caches a compiled function under the file that defines it, so the kernels of
:mod:`~serveplan.kernels.roofline` hold compiled copies of these functions: before a
simulation, ``serveplan.sim._jitcache.refresh`` deletes ``roofline``'s cache entries older
than this file, and the simulator's own entries older than either.
"""

from __future__ import annotations

import math

from serveplan.kernels import jit as _njit


def njit(*args, **kwargs):
    """numba.njit with the NumPy error model: a division by zero yields inf/nan rather
    than a Python exception, so the hot loops carry no zero checks. Compiled once per
    argument type (:func:`serveplan.kernels.jit`)."""
    kwargs.setdefault("error_model", "numpy")
    return _njit(*args, **kwargs)


@njit(cache=True)
def roofline_time(work, traffic, peak_flops, peak_bw, e_c, e_m):
    """Adapted roofline time of one operator, seconds.

    ``max(W / (e_c S_c), Q / (e_m S_m))``, equal to ``W / P`` with
    ``P = min(e_c S_c, I e_m S_m)`` and ``I = W / Q`` (BestServe eq. 3).
    """
    t_c = work / (e_c * peak_flops)
    t_m = traffic / (e_m * peak_bw)
    return t_c if t_c > t_m else t_m


#: The engines' custom all-reduce (vLLM ``csrc/custom_all_reduce.cuh``, which SGLang uses;
#: TensorRT-LLM's AUTO strategy is alike) within one NVLink domain of up to 8 GPUs: one
#: stage below these sizes, two stages up to ``CUSTOM_AR_MAX_BYTES`` (vLLM's ``max_size``,
#: 8 MiB), NCCL above it or over more GPUs: its ring within a node, its tree (latency
#: logarithmic in the ranks, as NCCL picks for small messages over many ranks and NVLS keeps
#: on an NVL72 rack) over more than 8 GPUs.
ONE_SHOT_MAX_BYTES_2 = 8.0 * 2**20  # two GPUs: always one stage within the custom range
ONE_SHOT_MAX_BYTES_4 = 512.0 * 2**10
ONE_SHOT_MAX_BYTES_8 = 256.0 * 2**10
CUSTOM_AR_MAX_BYTES = 8.0 * 2**20
CUSTOM_AR_MAX_GPUS = 8


@njit(cache=True)
def allreduce_time(nbytes, group, bw, latency, eff):
    """All-reduce of ``nbytes`` over ``group`` ranks as the engines run it.

    One stage (each rank reads every peer's buffer): ``lat + (n-1) · bytes / (eff·bw)``;
    two stages (reduce-scatter, all-gather): ``2 lat + 2(n-1)/n · bytes / (eff·bw)``; NCCL:
    ``r lat + 2(n-1)/n · bytes / (eff·bw)`` with ``r = 2(n-1)`` rounds of its ring up to 8
    GPUs and ``r = 2 ceil(log2 n)`` of its tree beyond. ``lat`` is one synchronisation round.
    The algorithm by size and group: the constants above.
    """
    if group <= 1 or nbytes <= 0.0:
        return 0.0
    n = float(group)
    seconds_per_byte = 1.0 / (eff * bw)
    if group <= CUSTOM_AR_MAX_GPUS and nbytes < CUSTOM_AR_MAX_BYTES:
        if group == 2:
            one_shot = ONE_SHOT_MAX_BYTES_2
        elif group <= 4:
            one_shot = ONE_SHOT_MAX_BYTES_4
        else:
            one_shot = ONE_SHOT_MAX_BYTES_8
        if nbytes < one_shot:
            return latency + (n - 1.0) * nbytes * seconds_per_byte
        return 2.0 * latency + 2.0 * (n - 1.0) / n * nbytes * seconds_per_byte
    rounds = 2.0 * (n - 1.0)
    if group > CUSTOM_AR_MAX_GPUS:
        rounds = 2.0 * math.ceil(math.log2(n))
    return rounds * latency + 2.0 * (n - 1.0) / n * nbytes * seconds_per_byte


@njit(cache=True)
def alltoall_time(nbytes, group, bw, latency, eff):
    """All-to-all of ``nbytes`` per rank over ``group`` ranks: (n-1)/n · bytes / (eff·bw) + lat."""
    if group <= 1 or nbytes <= 0.0:
        return 0.0
    return (group - 1.0) / group * nbytes / (eff * bw) + latency


@njit(cache=True)
def _pairs_upto(n, window):
    """Causal (query, key) pairs of the first ``n`` positions: sum_{p<n} min(p+1, window)."""
    if window <= 0.0 or n <= window:
        return n * (n + 1.0) * 0.5
    return window * (window + 1.0) * 0.5 + (n - window) * window


@njit(cache=True)
def attention_request(q, c, window, tile):
    """Pairs and KV tokens read for one request with ``q`` new tokens after ``c`` cached ones.

    Pairs are causal: query at position p sees min(p+1, window) keys. KV reads follow
    FlashAttention: each query tile of ``tile`` rows streams the keys it can see once.
    Returns ``(pairs, kv_read)``.
    """
    pairs = _pairs_upto(c + q, window) - _pairs_upto(c, window)
    if q <= 1.0:
        kv = c + q
        if window > 0.0 and kv > window:
            kv = window
        return pairs, kv
    kv = 0.0
    start = 0.0
    while start < q:
        end = start + tile
        if end > q:
            end = q
        seen = c + end
        if window > 0.0:
            lo = c + start - window + 1.0
            if lo > 0.0:
                seen -= lo
        kv += seen
        start = end
    return pairs, kv


@njit(cache=True)
def attention_aggregates(new_tokens, context_len, n, prefill_class, window, tile, out):
    """Sum pairs, KV reads and query tokens over the requests of one class.

    ``prefill_class``: True sums requests with more than one new token, False the rest.
    Writes ``out[0] = pairs, out[1] = kv_read, out[2] = query tokens,
    out[3] = full score entries q·(c+q)`` (what an eager implementation materialises),
    out[4] = number of requests``.
    """
    attention_aggregates_q(new_tokens, context_len, n, prefill_class, window, tile, out, 1.0)


@njit(cache=True)
def attention_aggregates_q(new_tokens, context_len, n, prefill_class, window, tile, out,
                           q_decode):
    """:func:`attention_aggregates` where the decode class is every request with at most
    ``q_decode`` new tokens: a speculative-decoding verify step brings ``k + 1`` query
    tokens per decoding request, and vLLM's attention backends split decodes from prefills
    at that length (``reorder_batch_threshold = 1 + num_speculative_tokens``)."""
    out[0] = 0.0
    out[1] = 0.0
    out[2] = 0.0
    out[3] = 0.0
    out[4] = 0.0
    for i in range(n):
        q = float(new_tokens[i])
        if q <= 0.0 or (q > q_decode) != prefill_class:
            continue
        c = float(context_len[i])
        pairs, kv = attention_request(q, c, window, tile)
        out[0] += pairs
        out[1] += kv
        out[2] += q
        out[3] += q * (c + q)
        out[4] += 1.0


@njit(cache=True)
def expected_active(experts, frac, tokens):
    """Expected local experts hit by at least one of ``tokens`` tokens (uniform routing)."""
    if tokens <= 0.0:
        return 0.0
    return experts * (1.0 - (1.0 - frac) ** tokens)
