"""Scheduler scenarios: small hand-built workloads, stepped, asserted step by step.

In the style of vLLM's ``tests/v1/core/test_scheduler.py``: each test builds a few requests
with a factory, runs the engine with an affine step cost (every step takes ``STEP`` seconds,
so event times are easy to compute) and checks the recorded batches and request metrics.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.engine import AffineStepCost, EngineParams, recorded_steps, run_engine
from serveplan.sim.state import FINISHED_IGNORED, FINISHED_LENGTH_CAPPED, Policy, Router
from serveplan.sim.workload import Requests

STEP = 0.01


def make_requests(arrival, prompt, output, hashes=None, hash_block=16, concurrency=None):
    """Requests from lists; ``hashes`` is a list of per-request hash id lists."""
    kw = {}
    if hashes is not None:
        off = np.cumsum([0] + [len(h) for h in hashes])
        kw = dict(hash_ids=np.concatenate([np.asarray(h, dtype=np.int64) for h in hashes]),
                  hash_offsets=off, hash_block_size=hash_block)
    return Requests(arrival_s=np.asarray(arrival, dtype=float), prompt_len=prompt,
                    output_len=output, concurrency=concurrency, **kw)


def run(requests, cost=None, num_instances=1, router=Router.ROUND_ROBIN, **params):
    params.setdefault("num_gpu_blocks", 1000)
    params.setdefault("max_model_len", 4096)
    return run_engine(requests, cost or AffineStepCost(STEP), EngineParams(**params),
                      num_instances=num_instances, router=router)


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def test_single_request_timeline():
    res = run(make_requests([0.0], [32], [4]))
    r = res.reqs
    # prefill step emits token 1, then three decode steps
    assert res.num_steps == 4
    assert r.t_first[0] == pytest.approx(STEP)
    assert r.t_finish[0] == pytest.approx(4 * STEP)
    assert r.n_out[0] == 4
    assert r.itl_max[0] == pytest.approx(STEP)
    steps = recorded_steps(res.rec)
    np.testing.assert_array_equal(steps["tokens"], [32, 1, 1, 1])
    np.testing.assert_array_equal(steps["prefill_tokens"], [32, 0, 0, 0])


def test_budget_split_between_decode_and_chunked_prefill():
    # A decodes while B's 200-token prompt is chunked into the rest of a 64-token budget
    res = run(make_requests([0.0, 0.015], [16, 200], [10, 2]), max_num_batched_tokens=64)
    steps = recorded_steps(res.rec)
    np.testing.assert_array_equal(steps["tokens"][:6], [16, 1, 64, 64, 64, 12])
    np.testing.assert_array_equal(steps["prefill_tokens"][:6], [16, 0, 63, 63, 63, 11])
    np.testing.assert_array_equal(steps["batch"][:6], [1, 1, 2, 2, 2, 2])
    # B's first token comes from the step that completes its prefill (the 6th)
    assert res.reqs.t_first[1] == pytest.approx(6 * STEP)
    assert res.reqs.t_sched[1] == pytest.approx(2 * STEP)


def test_long_prefill_threshold_caps_chunks():
    res = run(make_requests([0.0, 0.015], [16, 200], [10, 2]), max_num_batched_tokens=512,
              long_prefill_token_threshold=50)
    steps = recorded_steps(res.rec)
    np.testing.assert_array_equal(steps["tokens"][:7], [16, 1, 51, 51, 51, 51, 1 + 1])


def test_without_chunking_a_prompt_waits_for_budget():
    # budget 256: B (200 tokens) fits whole next to A's decode
    res = run(make_requests([0.0, 0.015], [16, 200], [10, 2]), max_num_batched_tokens=256,
              enable_chunked_prefill=False)
    steps = recorded_steps(res.rec)
    np.testing.assert_array_equal(steps["tokens"][:3], [16, 1, 201])


def test_prefill_priority_rejects_prompt_larger_than_budget():
    with pytest.raises(ValueError, match="max_num_batched_tokens=128"):
        run(make_requests([0.0], [200], [2]), max_num_batched_tokens=128,
            policy=Policy.PREFILL_PRIORITY)


def test_sglang_runs_prefill_only_batches():
    reqs = make_requests([0.0, 0.015], [16, 40], [10, 2])
    mixed = recorded_steps(run(reqs, policy=Policy.VLLM_V1).rec)
    split = recorded_steps(run(reqs, policy=Policy.SGLANG).rec)
    # vLLM v1: the 3rd step mixes A's decode with B's prefill
    assert mixed["batch"][2] == 2 and mixed["tokens"][2] == 41
    # SGLang: B's prefill alone, A's decode waits one step
    assert split["batch"][2] == 1 and split["tokens"][2] == 40
    assert split["prefill_tokens"][2] == 40
    assert split["batch"][3] == 2 and split["tokens"][3] == 2


def test_prefill_priority_does_not_mix():
    reqs = make_requests([0.0, 0.015, 0.016], [16, 40, 30], [10, 2, 2])
    steps = recorded_steps(run(reqs, policy=Policy.PREFILL_PRIORITY).rec)
    # both waiting prompts in one prefill-only batch, then decodes of all three
    assert steps["tokens"][2] == 70 and steps["prefill_tokens"][2] == 70
    assert steps["batch"][3] == 3 and steps["tokens"][3] == 3


def test_max_num_seqs_limits_running():
    res = run(make_requests(np.zeros(5), [20] * 5, [5] * 5), max_num_seqs=2)
    steps = recorded_steps(res.rec)
    assert steps["running"].max() == 2
    assert steps["batch"].max() == 2
    # the third request starts when the first two finish (5 steps)
    assert res.reqs.t_sched[2] == pytest.approx(5 * STEP)


def test_preemption_when_blocks_run_out():
    # 10 blocks of 16 tokens; each request grows to cdiv(64 + 59, 16) = 8 blocks
    res = run(make_requests([0.0, 0.005], [64, 64], [60, 60]), num_gpu_blocks=10,
              block_size=16, enable_prefix_caching=False)
    r = res.reqs
    assert r.n_preempt[0] == 0  # the earlier request keeps running
    assert r.n_preempt[1] >= 1  # the last admitted one is preempted (recompute)
    np.testing.assert_array_equal(r.n_out, [60, 60])
    steps = recorded_steps(res.rec)
    assert steps["kv_used"].max() <= 10
    # after its preemption B recomputes prompt + generated tokens in one prefill
    assert steps["prefill_tokens"].max() > 64


def test_preempted_request_goes_to_front_of_waiting():
    # C waits behind the preempted B and must not overtake it
    res = run(make_requests([0.0, 0.005, 0.006], [64, 64, 16], [60, 60, 2]),
              num_gpu_blocks=10, block_size=16, enable_prefix_caching=False, max_num_seqs=2)
    r = res.reqs
    assert r.n_preempt[1] >= 1
    assert r.t_sched[2] >= r.t_finish[0] - 1e-12


def test_prefix_cache_hit_skips_computed_blocks():
    hashes = [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 50, 51, 52], [1, 2, 3, 4, 5, 6, 7]]
    reqs = make_requests([0.0, 1.0, 2.0], [100, 100, 100], [2, 2, 2], hashes=hashes)
    res = run(reqs, block_size=16)
    # B shares 4 blocks; C shares all, but the last token must be recomputed: 6 blocks
    np.testing.assert_array_equal(res.reqs.hit, [0, 64, 96])
    steps = recorded_steps(res.rec)
    first_steps = steps["tokens"][[0, 2, 4]]
    np.testing.assert_array_equal(first_steps, [100, 36, 4])
    off = run(reqs, block_size=16, enable_prefix_caching=False)
    np.testing.assert_array_equal(off.reqs.hit, [0, 0, 0])


def test_trace_hash_blocks_map_onto_engine_blocks():
    # Mooncake-style 512-token hash blocks on 16-token engine blocks
    hashes = [[7, 8], [7, 9, 10], [7, 8, 11]]
    reqs = make_requests([0.0, 1.0, 2.0], [1024, 1100, 1100], [2, 2, 2], hashes=hashes,
                         hash_block=512)
    res = run(reqs, block_size=16, max_num_batched_tokens=2048)
    # B matches trace block 0 only (512 tokens), C both (1024 tokens)
    np.testing.assert_array_equal(res.reqs.hit, [0, 512, 1024])


def test_cached_blocks_are_evicted_lru():
    # 8 blocks only: after A and B (4 blocks each, distinct) finish, C reuses A's prefix
    # only if A's blocks were not the ones evicted for B.
    hashes = [[1, 2, 3, 4], [10, 11, 12, 13], [1, 2, 3, 4]]
    reqs = make_requests([0.0, 1.0, 2.0], [64, 64, 64], [1, 1, 1], hashes=hashes)
    res = run(reqs, block_size=16, num_gpu_blocks=8)
    assert res.reqs.hit[2] == 48  # A's blocks survived (B took the never-used ones)
    reqs4 = make_requests([0.0, 1.0, 2.0, 3.0], [64, 64, 128, 64], [1, 1, 1, 1],
                          hashes=[[1, 2, 3, 4], [10, 11, 12, 13], list(range(20, 28)),
                                  [1, 2, 3, 4]])
    res4 = run(reqs4, block_size=16, num_gpu_blocks=8)
    assert res4.reqs.hit[3] == 0  # the 8-block request evicted everything


def test_closed_loop_keeps_concurrency():
    reqs = make_requests(np.full(6, np.nan), [16] * 6, [3] * 6, concurrency=2)
    res = run(reqs)
    r = res.reqs
    np.testing.assert_allclose(r.arrival[:2], 0.0)
    np.testing.assert_allclose(r.arrival[2:], r.t_finish[:4])
    assert recorded_steps(res.rec)["running"].max() == 2


def test_prompt_longer_than_max_model_len_is_rejected():
    res = run(make_requests([0.0, 0.0], [300, 10], [5, 400]), max_model_len=256)
    assert res.reqs.status[0] == FINISHED_IGNORED
    assert np.isnan(res.reqs.t_first[0])
    # the second request's output stops at max_model_len
    assert res.reqs.n_out[1] == 246
    assert res.reqs.status[1] == FINISHED_LENGTH_CAPPED


def test_too_few_blocks_for_one_request_is_an_error():
    with pytest.raises(ValueError, match="num_gpu_blocks=4"):
        run(make_requests([0.0], [100], [10]), num_gpu_blocks=4, block_size=16)


def test_round_robin_and_least_tokens_routers():
    reqs = make_requests(np.arange(6) * 1e-4, [100, 10, 10, 10, 10, 10], [50, 2, 2, 2, 2, 2])
    rr = run(reqs, num_instances=2, router=Router.ROUND_ROBIN)
    np.testing.assert_array_equal(rr.reqs.inst, [0, 1, 0, 1, 0, 1])
    lt = run(reqs, num_instances=2, router=Router.LEAST_OUTSTANDING_TOKENS)
    # the long first request loads instance 0; the short ones go to instance 1
    np.testing.assert_array_equal(lt.reqs.inst, [0, 1, 1, 1, 1, 1])
    lr = run(reqs, num_instances=3, router=Router.LEAST_REQUESTS)
    np.testing.assert_array_equal(lr.reqs.inst[:3], [0, 1, 2])


def test_affine_cost_is_applied_to_the_batch():
    res = run(make_requests([0.0], [100], [2]), cost=AffineStepCost(0.001, 1e-5, 1e-3))
    steps = recorded_steps(res.rec)
    np.testing.assert_allclose(steps["dt"], [0.001 + 100e-5 + 1e-3, 0.001 + 1e-5 + 1e-3])


def test_python_policy_hook_reproduces_vllm_v1():
    from serveplan.sim.workload import PoissonArrivals, PrefixSharing, Uniform, generate_requests

    def vllm_like(ctx):
        budget, preempted = ctx.schedule_running(ctx.max_num_batched_tokens)
        if not preempted:
            ctx.schedule_waiting(budget)

    reqs = generate_requests(60, PoissonArrivals(40.0), Uniform(16, 300), Uniform(1, 30),
                             seed=5, prefix=PrefixSharing(2, 48, 16))
    kw = dict(num_gpu_blocks=40, max_num_batched_tokens=128, max_num_seqs=8, num_instances=2)
    built_in = run(reqs, **kw)
    hooked = run_engine(reqs, AffineStepCost(STEP),
                        EngineParams(num_gpu_blocks=40, max_num_batched_tokens=128,
                                     max_num_seqs=8, max_model_len=4096),
                        num_instances=2, policy=vllm_like)
    assert built_in.reqs.n_preempt.sum() > 0
    for name in ("t_sched", "t_first", "t_finish", "n_preempt", "hit", "inst"):
        np.testing.assert_array_equal(getattr(hooked.reqs, name), getattr(built_in.reqs, name))


def test_python_policy_can_reorder_waiting():
    def shortest_prompt_first(ctx):
        ctx.reorder_waiting(sorted(ctx.waiting, key=lambda r: ctx.reqs.prompt[r]))
        budget, preempted = ctx.schedule_running(ctx.max_num_batched_tokens)
        if not preempted:
            ctx.schedule_waiting(budget)

    reqs = make_requests([0.0, 0.001, 0.002, 0.003], [16, 300, 200, 20], [5, 2, 2, 2])
    res = run_engine(reqs, AffineStepCost(STEP),
                     EngineParams(num_gpu_blocks=1000, max_num_seqs=2, max_model_len=4096),
                     policy=shortest_prompt_first)
    order = np.argsort(res.reqs.t_sched[1:]) + 1
    np.testing.assert_array_equal(order, [3, 2, 1])
