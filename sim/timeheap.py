"""A min-heap of pending (time, request row) events in plain arrays (compiled).

The loop's deferred sends -- a session's later rounds after their tool delay
(:mod:`serveplan.sim.session_state`), a closed-loop client's next request after its think
time (:mod:`serveplan.sim.runtime`) -- wait here until their time. The heap lives in the
owner's arrays: ``heap_t`` (times), ``heap_r`` (rows) and its length in ``gi[slot]``.
Order: earlier time first, then lower row, so runs are deterministic.
"""

from __future__ import annotations

import numpy as np

from ._jitcache import sim_jit


@sim_jit
def _before(heap_t, heap_r, a, b):
    ta, tb = heap_t[a], heap_t[b]
    return ta < tb or (ta == tb and heap_r[a] < heap_r[b])


@sim_jit
def _swap(heap_t, heap_r, a, b):
    t, r = heap_t[a], heap_r[a]
    heap_t[a], heap_r[a] = heap_t[b], heap_r[b]
    heap_t[b], heap_r[b] = t, r


@sim_jit
def heap_push(heap_t, heap_r, gi, slot, t, r):
    """Row ``r`` is due at ``t``."""
    k = gi[slot]
    heap_t[k], heap_r[k] = t, r
    gi[slot] = k + 1
    while k > 0:
        parent = (k - 1) // 2
        if not _before(heap_t, heap_r, k, parent):
            break
        _swap(heap_t, heap_r, k, parent)
        k = parent


@sim_jit
def heap_next_time(heap_t, gi, slot):
    """When the first pending row is due (inf: none)."""
    return heap_t[0] if gi[slot] > 0 else np.inf


@sim_jit
def heap_pop(heap_t, heap_r, gi, slot):
    """The row due first (removed from the heap)."""
    r = heap_r[0]
    n = gi[slot] - 1
    gi[slot] = n
    heap_t[0], heap_r[0] = heap_t[n], heap_r[n]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and _before(heap_t, heap_r, c + 1, c):
            c += 1
        if not _before(heap_t, heap_r, c, k):
            break
        _swap(heap_t, heap_r, k, c)
        k = c
    return r


__all__ = ["heap_next_time", "heap_pop", "heap_push"]
