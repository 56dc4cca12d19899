"""KV block pool with prefix caching: free list, block hash table, LRU eviction.

Mirrors vLLM v1's ``BlockPool`` / ``FreeKVCacheBlockQueue`` (``vllm/v1/core/block_pool.py``)
with arrays instead of objects. Every array is stacked over instances (first axis ``i``),
so one :class:`KVPool` holds the caches of all colocated instances and each function acts
on one instance.

* Blocks ``0 .. nb-1`` of an instance carry a reference count ``ref`` and a hash ``key``
  (``-1``: not cached). A block is *free* when ``ref == 0``; free blocks sit in a doubly
  linked list (``nxt`` / ``prv``, head and tail in ``meta``), least recently freed first.
* A free block may still hold cached content (``key >= 0``): it can be *touched* back by a
  prefix-cache hit (unlinked from the free list) until it is *evicted*, which happens when
  it reaches the head of the free list and is handed out for new content.
* ``ht_key`` / ``ht_val`` is an open-addressing hash table (linear probing, backward-shift
  deletion) from block hash to block id; its capacity is a power of two at least twice the
  number of blocks, so it never fills.

Differences from vLLM: a block hash maps to at most one block (when two running requests
compute the same block concurrently, the second copy is simply not cached); vLLM keeps a
small dict of duplicates.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ._jitcache import sim_jit

# meta columns. M_SCHED_NRUN / M_SCHED_FULL are the admission memo of schedulers that
# close admission when memory runs short (SGLang's ``batch_is_full``): the running requests
# the scheduler will still count at its next call (-1: those still running), and whether
# admission is closed.
M_HEAD, M_TAIL, M_NFREE, M_NBLOCKS, M_SCHED_NRUN, M_SCHED_FULL = range(6)
N_META = 6
EMPTY = -1

KVPool = namedtuple("KVPool", ["ref", "key", "nxt", "prv", "meta", "ht_key", "ht_val"])
"""Stacked KV block pools; build with :func:`make_pool`."""


def make_pool(num_blocks: np.ndarray | list[int]) -> KVPool:
    """Empty pools (all blocks free, nothing cached) for instances with ``num_blocks`` each.

    Parameters
    ----------
    num_blocks : int array, one entry per instance
        KV blocks of each instance (>= 1).
    """
    nb = np.asarray(num_blocks, dtype=np.int64)
    if nb.ndim != 1 or nb.size == 0 or np.any(nb < 1):
        raise ValueError(f"num_blocks must be a non-empty list of integers >= 1, got {num_blocks!r}")
    n_inst, width = nb.size, int(nb.max())
    cap = 1 << max(4, int(np.ceil(np.log2(2 * width + 1))))
    pool = KVPool(
        ref=np.zeros((n_inst, width), dtype=np.int32),
        key=np.full((n_inst, width), EMPTY, dtype=np.int64),
        nxt=np.full((n_inst, width), EMPTY, dtype=np.int32),
        prv=np.full((n_inst, width), EMPTY, dtype=np.int32),
        meta=np.zeros((n_inst, N_META), dtype=np.int64),
        ht_key=np.full((n_inst, cap), EMPTY, dtype=np.int64),
        ht_val=np.full((n_inst, cap), EMPTY, dtype=np.int32),
    )
    for i in range(n_inst):
        reset_pool(pool, i, int(nb[i]))
    return pool


@sim_jit
def reset_pool(pool, i, num_blocks):
    """All ``num_blocks`` blocks of instance ``i`` free, in id order; cache emptied."""
    for b in range(num_blocks):
        pool.ref[i, b] = 0
        pool.key[i, b] = EMPTY
        pool.prv[i, b] = b - 1
        pool.nxt[i, b] = b + 1 if b + 1 < num_blocks else EMPTY
    pool.meta[i, M_HEAD] = 0
    pool.meta[i, M_TAIL] = num_blocks - 1
    pool.meta[i, M_NFREE] = num_blocks
    pool.meta[i, M_NBLOCKS] = num_blocks
    pool.meta[i, M_SCHED_NRUN] = 0
    pool.meta[i, M_SCHED_FULL] = 0
    pool.ht_key[i, :] = EMPTY
    pool.ht_val[i, :] = EMPTY


# ------------------------------------------------------------------------ hashing
@sim_jit
def mix64(x):
    """SplitMix64 finaliser of ``x``, as a non-negative int64 (a block hash)."""
    z = np.uint64(x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z >> np.uint64(1))


@sim_jit
def _slot(pool, i, key):
    """Table index holding ``key``, or -1."""
    mask = pool.ht_key.shape[1] - 1
    j = key & mask
    while pool.ht_key[i, j] != EMPTY:
        if pool.ht_key[i, j] == key:
            return j
        j = (j + 1) & mask
    return -1


@sim_jit
def lookup(pool, i, key):
    """Block id cached under ``key`` on instance ``i``, or -1."""
    j = _slot(pool, i, key)
    return -1 if j < 0 else pool.ht_val[i, j]


@sim_jit
def _insert(pool, i, key, block):
    """Map ``key`` to ``block`` unless ``key`` is already cached; True if inserted."""
    mask = pool.ht_key.shape[1] - 1
    j = key & mask
    while pool.ht_key[i, j] != EMPTY:
        if pool.ht_key[i, j] == key:
            return False
        j = (j + 1) & mask
    pool.ht_key[i, j] = key
    pool.ht_val[i, j] = block
    return True


@sim_jit
def _delete(pool, i, key):
    """Remove ``key`` (backward-shift deletion keeps probe chains intact)."""
    j = _slot(pool, i, key)
    if j < 0:
        return
    mask = pool.ht_key.shape[1] - 1
    hole = j
    k = j
    while True:
        k = (k + 1) & mask
        kk = pool.ht_key[i, k]
        if kk == EMPTY:
            break
        home = kk & mask
        # the entry at k may move into the hole unless its home lies cyclically in (hole, k]
        if hole <= k:
            stays = hole < home <= k
        else:
            stays = home > hole or home <= k
        if not stays:
            pool.ht_key[i, hole] = kk
            pool.ht_val[i, hole] = pool.ht_val[i, k]
            hole = k
    pool.ht_key[i, hole] = EMPTY
    pool.ht_val[i, hole] = EMPTY


# ------------------------------------------------------------------------ free list
@sim_jit
def _unlink(pool, i, b):
    p = pool.prv[i, b]
    n = pool.nxt[i, b]
    if p == EMPTY:
        pool.meta[i, M_HEAD] = n
    else:
        pool.nxt[i, p] = n
    if n == EMPTY:
        pool.meta[i, M_TAIL] = p
    else:
        pool.prv[i, n] = p
    pool.prv[i, b] = EMPTY
    pool.nxt[i, b] = EMPTY
    pool.meta[i, M_NFREE] -= 1


@sim_jit
def _append(pool, i, b):
    t = pool.meta[i, M_TAIL]
    pool.prv[i, b] = t
    pool.nxt[i, b] = EMPTY
    if t == EMPTY:
        pool.meta[i, M_HEAD] = b
    else:
        pool.nxt[i, t] = b
    pool.meta[i, M_TAIL] = b
    pool.meta[i, M_NFREE] += 1


@sim_jit
def num_free(pool, i):
    """Free blocks of instance ``i`` (cached-but-unreferenced blocks included, as vLLM)."""
    return pool.meta[i, M_NFREE]


@sim_jit
def num_used(pool, i):
    """Blocks referenced by at least one request."""
    return pool.meta[i, M_NBLOCKS] - pool.meta[i, M_NFREE]


@sim_jit
def pop_free(pool, i):
    """Take the least recently freed block for new content (evicting its cached hash).

    The caller must have checked ``num_free(pool, i) > 0``. Returns the block id with
    ``ref == 1``.
    """
    b = pool.meta[i, M_HEAD]
    _unlink(pool, i, b)
    k = pool.key[i, b]
    if k != EMPTY:
        _delete(pool, i, k)
        pool.key[i, b] = EMPTY
    pool.ref[i, b] = 1
    return b


@sim_jit
def touch(pool, i, b):
    """Take one more reference on a cached block hit by a prefix lookup."""
    if pool.ref[i, b] == 0:
        _unlink(pool, i, b)
    pool.ref[i, b] += 1


@sim_jit
def release(pool, i, b):
    """Drop one reference; an unreferenced block goes to the free tail (content kept)."""
    pool.ref[i, b] -= 1
    if pool.ref[i, b] == 0:
        _append(pool, i, b)


@sim_jit
def cache_block(pool, i, b, key):
    """Register block ``b`` of full, computed content under hash ``key`` (if not cached)."""
    if pool.key[i, b] != EMPTY:
        return
    if _insert(pool, i, key, b):
        pool.key[i, b] = key
