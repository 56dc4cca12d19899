"""The compiled KV block pool against a plain-Python reference (dict + OrderedDict LRU).

Random operation sequences (allocate, touch, release, cache, lookup) run on both; the free
list order, reference counts, cached hashes and lookups must agree after every operation.
Small pools with small integer keys make hash-table collisions and wrap-around frequent,
which exercises the backward-shift deletion.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan.sim.kvcache import (
    EMPTY,
    M_HEAD,
    cache_block,
    lookup,
    make_pool,
    mix64,
    num_free,
    pop_free,
    release,
    touch,
)


class RefPool:
    """vLLM's BlockPool semantics, written plainly."""

    def __init__(self, nb: int):
        self.ref = [0] * nb
        self.key = [EMPTY] * nb
        self.free = OrderedDict((b, None) for b in range(nb))
        self.table: dict[int, int] = {}

    def pop_free(self) -> int:
        b = next(iter(self.free))
        del self.free[b]
        if self.key[b] != EMPTY:
            del self.table[self.key[b]]
            self.key[b] = EMPTY
        self.ref[b] = 1
        return b

    def touch(self, b: int) -> None:
        if self.ref[b] == 0:
            del self.free[b]
        self.ref[b] += 1

    def release(self, b: int) -> None:
        self.ref[b] -= 1
        if self.ref[b] == 0:
            self.free[b] = None

    def cache_block(self, b: int, key: int) -> None:
        if self.key[b] == EMPTY and key not in self.table:
            self.table[key] = b
            self.key[b] = key


def free_order(pool, i=0) -> list[int]:
    out, b = [], pool.meta[i, M_HEAD]
    while b != EMPTY:
        out.append(int(b))
        b = pool.nxt[i, b]
    return out


ops = st.lists(st.tuples(st.sampled_from(["alloc", "touch", "release", "cache", "lookup"]),
                         st.integers(0, 10**6), st.integers(0, 40)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), ops)
def test_pool_matches_reference(nb, sequence):
    pool, ref = make_pool([nb]), RefPool(nb)
    for op, pick, key in sequence:
        held = [b for b in range(nb) if ref.ref[b] > 0]
        cached = [b for b in range(nb) if ref.key[b] != EMPTY]
        if op == "alloc" and ref.free:
            assert pop_free(pool, 0) == ref.pop_free()
        elif op == "touch" and cached:
            b = cached[pick % len(cached)]
            touch(pool, 0, b)
            ref.touch(b)
        elif op == "release" and held:
            b = held[pick % len(held)]
            release(pool, 0, b)
            ref.release(b)
        elif op == "cache" and held:
            b = held[pick % len(held)]
            cache_block(pool, 0, b, key)
            ref.cache_block(b, key)
        elif op == "lookup":
            assert lookup(pool, 0, key) == ref.table.get(key, -1)
        assert free_order(pool) == list(ref.free)
        assert num_free(pool, 0) == len(ref.free)
        np.testing.assert_array_equal(pool.ref[0, :nb], ref.ref)
        np.testing.assert_array_equal(pool.key[0, :nb], ref.key)
    for k in range(41):
        assert lookup(pool, 0, k) == ref.table.get(k, -1)


def test_instances_are_independent():
    pool = make_pool([4, 6])
    b = pop_free(pool, 1)
    cache_block(pool, 1, b, 7)
    assert lookup(pool, 1, 7) == b and lookup(pool, 0, 7) == -1
    assert num_free(pool, 0) == 4 and num_free(pool, 1) == 5


def test_mix64_is_non_negative_and_spreads():
    keys = np.array([mix64(k) for k in range(10_000)])
    assert np.all(keys >= 0)
    assert len(np.unique(keys)) == 10_000
    # low bits (the table index) are well spread
    counts = np.bincount(keys & 63, minlength=64)
    assert counts.min() > 100
