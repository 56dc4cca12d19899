"""SGLang's ``lpm`` schedule policy (serveplan.sim.sglang_lpm) against the rules of
``SchedulePolicy.calc_priority`` in SGLang's ``schedule_policy.py``, orders worked out by
hand: longest radix-cache match first, a short-match request whose first 32 tokens another
waiting request before it shares goes last, fcfs above 128 waiting requests."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.kvcache import make_pool
from serveplan.sim.sglang_lpm import lpm_sort
from serveplan.sim.state import (
    G_HASH_BLOCK,
    I_WHEAD,
    I_WLEN,
    N_GLOB,
    Policy,
    make_inst,
    make_reqs,
    wq_push_back,
)
from serveplan.sim.workload import Requests

BS = 16


def _hashed(ids_per_request):
    """Hash ids (one per 16 tokens) -> (prompt lengths, hash ids, offsets)."""
    prompt = np.array([BS * len(ids) for ids in ids_per_request])
    off = np.concatenate([[0], np.cumsum([len(ids) for ids in ids_per_request])])
    return prompt, np.concatenate(ids_per_request), off


def _waiting(inst):
    head, n = inst.ist[0, I_WHEAD], inst.ist[0, I_WLEN]
    return [int(inst.wq[0, (head + k) % inst.wq.shape[1]]) for k in range(n)]


def _queue(ids_per_request, schedule_policy="lpm"):
    prompt, ids, off = _hashed(ids_per_request)
    n = len(prompt)
    reqs = make_reqs(np.zeros(n), prompt, np.full(n, 4), ids, off)
    inst = make_inst(1, 4, 64, n + 1)
    for r in range(n):
        wq_push_back(inst, 0, r)
    params = EngineParams(num_gpu_blocks=64, policy=Policy.SGLANG, new_token_ratio=0.7,
                          schedule_policy=schedule_policy)
    glob = np.zeros(N_GLOB, dtype=np.int64)
    glob[G_HASH_BLOCK] = BS
    return reqs, inst, params.knob_row()[None, :], make_pool([64]), glob


def test_in_batch_prefix_deprioritises_the_later_sharer():
    # Nothing is cached: every match is 0 <= 32 tokens, so each is checked against the
    # waiting requests before it. C shares A's first 3 blocks (48 >= 32 tokens): C goes
    # last. E shares only A's first block (16 < 32) and D nothing: they stay in place.
    A = [10, 11, 12, 13]
    queue = [A, [10, 11, 12, 20], [10, 30, 31, 32], [40, 41, 42, 43]]  # A, C, E, D
    reqs, inst, knobs, pool, glob = _queue(queue)
    lpm_sort(pool, inst, reqs, knobs, glob, 0)
    assert _waiting(inst) == [0, 2, 3, 1]


def test_more_than_128_waiting_stays_first_come_first_served():
    queue = [[10, 11, 12, 13], [10, 11, 12, 20]] + [[100 + k, 1, 2, 3] for k in range(127)]
    reqs, inst, knobs, pool, glob = _queue(queue)
    lpm_sort(pool, inst, reqs, knobs, glob, 0)
    assert _waiting(inst) == list(range(129))


def test_lpm_serves_the_cached_prefix_first():
    """One request runs at a time (max_running_requests 1); every step takes 10 ms. D
    (sent 0, 5 blocks [1..5], 2 tokens) prefills 0 -> 0.010 and ends at 0.020, leaving its
    blocks cached. A ([10..14]), C ([10, 11, 12, 20, 21]: A's first 48 tokens) and B ([1, 2,
    3, 4, 30]: D's first 64 tokens) wait, sent in that order at 1-3 ms. At 0.020 lpm ranks
    B (64 cached tokens) first, then A (0; into the in-batch tree), then C (it shares 48
    tokens with A: deprioritised): first tokens B 0.030, A 0.050, C 0.070. fcfs serves them
    as sent: A 0.030, C 0.050, B 0.070."""
    prompt, ids, off = _hashed([[1, 2, 3, 4, 5], [10, 11, 12, 13, 14], [10, 11, 12, 20, 21],
                                [1, 2, 3, 4, 30]])
    req = Requests(np.array([0.0, 0.001, 0.002, 0.003]), prompt, np.full(4, 2),
                   hash_ids=ids, hash_offsets=off, hash_block_size=BS)
    first = {}
    for policy in ("lpm", "fcfs"):
        params = EngineParams(num_gpu_blocks=200, policy=Policy.SGLANG, max_num_seqs=1,
                              new_token_ratio=0.7, schedule_policy=policy)
        first[policy] = run_engine(req, AffineStepCost(0.010), params).reqs.t_first
    np.testing.assert_allclose(first["lpm"], [0.010, 0.050, 0.070, 0.030], atol=1e-12)
    np.testing.assert_allclose(first["fcfs"], [0.010, 0.030, 0.050, 0.070], atol=1e-12)


def test_lpm_is_sglangs_only():
    with pytest.raises(ValueError, match="schedule_policy 'lpm' is SGLang's"):
        EngineParams(num_gpu_blocks=10, schedule_policy="lpm")
    with pytest.raises(ValueError, match="'fcfs' or 'lpm'"):
        EngineParams(num_gpu_blocks=10, policy=Policy.SGLANG, new_token_ratio=0.7,
                     schedule_policy="dfs-weight")


def test_a_config_names_lpm_outside_sglang():
    from pydantic import ValidationError

    from serveplan.pools_config import to_pools

    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100"}
    with pytest.raises(ValidationError, match=r"pools.0.schedule_policy\n  lpm is SGLang"):
        to_pools({"pools": [{**pool, "engine": "vllm", "schedule_policy": "lpm"}]})
    d = to_pools({"pools": [{**pool, "engine": "sglang", "schedule_policy": "lpm"}]})
    assert d.pools[0].schedule_policy == "lpm"
