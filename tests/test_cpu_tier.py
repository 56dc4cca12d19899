"""The CPU KV tier: hand-computed loads, hits by tier, its LRU, and that off means off.

Scenario used below (block_size 16, an 8-block GPU pool, an affine step of 10 ms + 0.1 ms
per token, one output token each so every request is one prefill step):

* A (t=0): 64 tokens, prefix hashes [1, 2, 3, 4] -> 4 blocks, cached on the GPU when it
  finishes;
* B (t=1): 128 tokens, hashes [11..18] -> needs all 8 GPU blocks, so A's 4 cached blocks
  are evicted -- with a CPU tier (store on evict) they are written to it;
* C (t=2): A's prompt again. A lookup may cover at most (64 - 1) // 16 = 3 blocks; none is
  on the GPU, all 3 are in the CPU tier.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import xarray.testing as xrt
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sim_scheduler import make_requests

from serveplan.sim.cpu_tier import CPUTier
from serveplan.sim.engine import AffineStepCost, EngineParams, recorded_steps
from serveplan.sim.kvcache import C_STORED, _cpu_put, cpu_holds, make_cpu_pool, make_pool
from serveplan.sim.loop_api import run_pools
from serveplan.sim.pools import PoolSpec
from serveplan.sim.results import summarize, to_dataset
from serveplan.sim.state import Policy
from serveplan.sim.workload import Fixed, PoissonArrivals, PrefixSharing, generate_requests

BASE, PER_TOKEN = 0.01, 1e-4
# Llama-3.1-8B, bf16, tp=1: 2 (K, V) x 8 KV heads x 128 dims x 2 bytes x 32 layers
RANK_BYTES_PER_TOKEN = 2 * 8 * 128 * 2 * 32  # 131,072 B
HOST_BW, LATENCY = 55e9, 1e-5  # PCIe 5.0 x16 effective (catalog), per-load latency


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def abc():
    return make_requests([0.0, 1.0, 2.0], [64, 128, 64], [1, 1, 1],
                         hashes=[[1, 2, 3, 4], list(range(11, 19)), [1, 2, 3, 4]])


def run(requests, tier=None, **params):
    params.setdefault("num_gpu_blocks", 8)
    params.setdefault("max_model_len", 1024)
    spec = PoolSpec(EngineParams(**params), AffineStepCost(BASE, PER_TOKEN), cpu_tier=tier)
    return run_pools(requests, [spec])


def llama_tier(num_blocks=4, store_on="evict") -> CPUTier:
    """A tier of ``num_blocks`` Llama-3.1-8B blocks on an H100's host link."""
    block = 16 * RANK_BYTES_PER_TOKEN  # 2 MiB
    return CPUTier.from_link(num_blocks * block, 16, RANK_BYTES_PER_TOKEN, 1, HOST_BW,
                             LATENCY, store_on)


def test_cpu_hit_costs_its_bytes_over_the_host_link():
    res = run(abc(), llama_tier())
    r = res.reqs
    # 3 blocks x 2,097,152 B / 55e9 B/s = 114.39 us, + 10 us latency = 124.39 us
    load = 3 * 2_097_152 / 55e9 + 1e-5
    assert load == pytest.approx(124.39e-6, rel=1e-4)
    # C prefills 64 - 48 = 16 tokens: 10 ms + 1.6 ms, plus the load
    assert r.t_first[2] - r.arrival[2] == pytest.approx(BASE + 16 * PER_TOKEN + load)
    ds = to_dataset(res)
    assert float(ds["cpu_load_s"].sum()) == pytest.approx(load)
    assert float(ds["cpu_bytes_loaded"].sum()) == 3 * 2_097_152
    # stores: A's 4 blocks when B evicts them, then 4 of B's when C takes GPU blocks
    assert float(ds["cpu_bytes_stored"].sum()) == 8 * 2_097_152
    assert int(ds["cpu_loads"].sum()) == 1


def test_evicted_prefix_kept_in_cpu_is_a_cpu_hit_with_fewer_prefill_tokens():
    off, on = run(abc()), run(abc(), llama_tier())
    np.testing.assert_array_equal(off.reqs.hit, [0, 0, 0])  # evicted from the GPU: a miss
    np.testing.assert_array_equal(on.reqs.hit, [0, 0, 48])
    np.testing.assert_array_equal(on.reqs.cpu_hit, [0, 0, 48])
    assert recorded_steps(off.rec)["prefill_tokens"][2] == 64
    assert recorded_steps(on.rec)["prefill_tokens"][2] == 16
    ds = to_dataset(on)
    np.testing.assert_array_equal(ds["gpu_hit_tokens"], [0, 0, 0])
    np.testing.assert_array_equal(ds["cpu_hit_tokens"], [0, 0, 48])
    s = summarize(ds)
    # hit rates over the 256 prompt tokens of the three requests
    assert s["cpu_prefix_hit_rate"] == pytest.approx(48 / 256)
    assert s["gpu_prefix_hit_rate"] == 0.0
    assert s["prefix_hit_rate"] == pytest.approx(48 / 256)


def test_a_gpu_hit_continues_in_the_cpu_tier():
    # B's blocks are freed last first, so C's admission (4 blocks) evicts B's blocks 4..7
    # (hashes 15..18) to the CPU tier (capacity 8: A's 4 and these 4) and leaves 0..3
    # (hashes 11..14) on the GPU. D repeats B: a lookup covers (128 - 1) // 16 = 7 blocks,
    # 4 on the GPU and 3 (hashes 15..17) in the CPU tier.
    reqs = make_requests([0.0, 1.0, 2.0, 3.0], [64, 128, 64, 128], [1, 1, 1, 1],
                         hashes=[[1, 2, 3, 4], list(range(11, 19)), [1, 2, 3, 4],
                                 list(range(11, 19))])
    res = run(reqs, llama_tier(8))
    assert res.reqs.hit[3] == 7 * 16 and res.reqs.cpu_hit[3] == 3 * 16
    assert recorded_steps(res.rec)["prefill_tokens"][3] == 16
    load = 3 * 2_097_152 / 55e9 + 1e-5
    assert res.reqs.t_first[3] - 3.0 == pytest.approx(BASE + 16 * PER_TOKEN + load)


def test_write_through_stores_blocks_as_they_are_computed():
    one = make_requests([0.0], [64], [1], hashes=[[1, 2, 3, 4]])
    ds = to_dataset(run(one, llama_tier(8, store_on="compute")))
    # nothing is evicted, yet A's 4 full prompt blocks crossed the link once each
    assert float(ds["cpu_bytes_stored"].sum()) == 4 * 2_097_152
    evict = to_dataset(run(one, llama_tier(8)))
    assert float(evict["cpu_bytes_stored"].sum()) == 0.0


class RefLRU:
    """An LRU cache of hashes, written plainly (OrderedDict: first = least recent)."""

    def __init__(self, capacity):
        self.capacity, self.d, self.stored = capacity, OrderedDict(), 0

    def put(self, key):
        if key in self.d:
            self.d.move_to_end(key)
            return
        if len(self.d) == self.capacity:
            self.d.popitem(last=False)
        self.d[key] = None
        self.stored += 1


def test_cpu_lru_evicts_the_least_recently_used_block():
    pool = make_pool([4], make_cpu_pool([2]))
    for key in (101, 102, 101, 103):  # 101 used again, so 102 is the least recent
        _cpu_put(pool.cpu, 0, key)
    assert cpu_holds(pool, 0, 101) and cpu_holds(pool, 0, 103)
    assert not cpu_holds(pool, 0, 102)
    assert pool.cpu.meta[0, C_STORED] == 3  # 101's second put moved no bytes


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(0, 12), max_size=60))
def test_cpu_lru_matches_a_reference(capacity, keys):
    pool, ref = make_pool([2], make_cpu_pool([capacity])), RefLRU(capacity)
    for key in keys:
        _cpu_put(pool.cpu, 0, key)
        ref.put(key)
        assert [k for k in range(13) if cpu_holds(pool, 0, k)] == sorted(ref.d)
    assert pool.cpu.meta[0, C_STORED] == ref.stored


def prefix_heavy(n=60, seed=0):
    return generate_requests(n, PoissonArrivals(40.0), Fixed(96), Fixed(4), seed=seed,
                             prefix=PrefixSharing(6, 64, 16))


def test_no_tier_and_a_zero_tier_give_the_same_dataset():
    reqs = prefix_heavy()
    off = to_dataset(run(reqs, num_gpu_blocks=40))
    zero = to_dataset(run(reqs, CPUTier(0, 2e6, 1e-4, 1e-5), num_gpu_blocks=40))
    xrt.assert_identical(off, zero)
    assert "cpu_hit_tokens" not in off and "cpu_prefix_hit_rate" not in summarize(off)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 40), st.sampled_from(["evict", "compute"]),
       st.sampled_from([Policy.VLLM_V1, Policy.SGLANG, Policy.PREFILL_PRIORITY]),
       st.integers(0, 3))
def test_hits_by_tier_never_exceed_the_prompt(cpu_blocks, store_on, policy, seed):
    reqs = prefix_heavy(40, seed)
    tier = CPUTier(cpu_blocks, 2e6, 1e-4, 1e-5, store_on)
    res = run(reqs, tier, num_gpu_blocks=30, policy=policy, max_num_batched_tokens=256)
    r = res.reqs
    assert np.all(r.hit <= r.prompt - 1)  # a lookup leaves at least one token to compute
    assert np.all((r.cpu_hit >= 0) & (r.cpu_hit <= np.maximum(r.hit, 0)))
    assert np.all(r.cpu_hit % 16 == 0)
    assert np.all(np.isfinite(r.t_finish))
    if cpu_blocks == 0:
        assert not r.cpu_hit.any()
