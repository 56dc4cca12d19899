"""Step costs of uniform batches, vectorized: the oracle's table path.

Entry k of :func:`uniform_step_times` is ``batch[k]`` identical requests; what each costs
is :func:`~serveplan.kernels.roofline.step_time` of such a batch, computed with the
attention aggregates of one request scaled by the batch size and the token-count rows of a
padded decode step computed once per capture size.
"""

from __future__ import annotations

import numpy as np

from . import primitives as _primitives
from . import roofline as _roofline
from .cache_guard import drop_stale
from .primitives import attention_request, njit
from .roofline import (
    B_ATTN_DECODE,
    C_BASIS,
    C_WINDOW,
    GRAPH_FULL,
    GRAPH_NONE,
    GRAPH_PIECEWISE,
    N_AGG,
    P_TILE,
    PHASE_DECODE,
    PHASE_PREFILL,
    _finish,
    _is_attention_basis,
    add_row_times,
    graph_index,
    graphs_run,
    module_times,
)


def _cache_probe():
    """A function of this module, for :func:`~.cache_guard.drop_stale`."""


drop_stale(_cache_probe, [_roofline.__file__, _primitives.__file__])


@njit(cache=True)
def _uniform_aggregates(B, q, c, pure_decode, ops, tile, agg):
    """Attention aggregates of ``B`` identical requests (``q`` new tokens after ``c``
    cached) into ``agg``: one request's pairs and KV reads scaled by ``B``, on the rows of
    the batch's attention class; the other class's rows are zeroed."""
    for r in range(ops.shape[0]):
        basis = int(ops[r, C_BASIS])
        if not _is_attention_basis(basis):
            continue
        if (basis != B_ATTN_DECODE) == pure_decode:
            for i in range(N_AGG):
                agg[r, i] = 0.0
            continue
        pairs, kv = attention_request(q, c, ops[r, C_WINDOW], tile)
        agg[r, 0] = B * pairs
        agg[r, 1] = B * kv
        agg[r, 2] = B * q
        agg[r, 3] = B * q * (c + q)
        agg[r, 4] = B


@njit(cache=True)
def uniform_step_times(batch, new_tokens, context_len, ops, mods, prm, graph_sizes, out):
    """Step seconds for uniform batches, elementwise over 1-D arrays (the vectorized path).

    Entry k: ``batch[k]`` requests, each with ``new_tokens[k]`` new tokens on top of
    ``context_len[k]`` cached ones. Attention aggregates are those of one request scaled
    by the batch size, so the cost per entry does not grow with the batch.
    """
    n_mod = mods.shape[0]
    agg = np.zeros((ops.shape[0], N_AGG))
    comp = np.zeros(n_mod)
    comm = np.zeros(n_mod)
    # token-count rows of a padded decode step depend on the capture size only: computed
    # once per size and reused (the attention rows are added per entry)
    n_sizes = graph_sizes.shape[0]
    cache_comp = np.zeros((n_sizes, n_mod))
    cache_comm = np.zeros((n_sizes, n_mod))
    cached = np.zeros(n_sizes, dtype=np.bool_)
    for k in range(batch.shape[0]):
        B = float(batch[k])
        q = float(new_tokens[k])
        c = float(context_len[k])
        if B <= 0.0 or q <= 0.0:
            out[k] = 0.0
            continue
        T = B * q
        pure_decode = q <= 1.0
        gi = graph_index(T, graph_sizes, prm) if graphs_run(prm, pure_decode) else -1
        _uniform_aggregates(B, q, c, pure_decode, ops, prm[P_TILE], agg)
        if gi >= 0 and pure_decode:
            T = graph_sizes[gi]
            if not cached[gi]:
                for j in range(n_mod):
                    comp[j] = 0.0
                    comm[j] = 0.0
                add_row_times(T, T, PHASE_DECODE, agg, ops, prm, comp, comm, False)
                for j in range(n_mod):
                    cache_comp[gi, j] = comp[j]
                    cache_comm[gi, j] = comm[j]
                cached[gi] = True
            else:
                for j in range(n_mod):
                    comp[j] = cache_comp[gi, j]
                    comm[j] = cache_comm[gi, j]
            add_row_times(T, T, PHASE_DECODE, agg, ops, prm, comp, comm, True)
            mode = GRAPH_FULL
        else:
            mode = GRAPH_PIECEWISE if gi >= 0 else GRAPH_NONE
            T = graph_sizes[gi] if gi >= 0 else T
            phase = PHASE_DECODE if pure_decode else PHASE_PREFILL
            module_times(T, B, phase, agg, ops, prm, comp, comm)
        out[k] = _finish(comp, comm, mods, prm, mode, T)
