"""Prefill/decode disaggregation: the PD loop against a tandem of colocated runs, KV sizes,
event ordering, backpressure, layer-wise overlap, the delay prefill stage, the fitted cost."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.pd import (
    FittedThroughputCost,
    KVLink,
    PoolSpec,
    prefill_seconds,
    run_pd,
)
from serveplan.sim.results import summarize, to_dataset
from serveplan.sim.workload import Fixed, PoissonArrivals, Requests, Uniform, generate_requests

AMPLE = EngineParams(num_gpu_blocks=20000, max_model_len=4096)


@pytest.fixture(scope="session")
def pd_compiled():
    """Compile (or load from numba's cache) the PD loop once per session."""
    req = generate_requests(6, PoissonArrivals(50.0), Fixed(40), Fixed(3), seed=0)
    pool = PoolSpec(EngineParams(num_gpu_blocks=64, max_model_len=256), AffineStepCost(0.01))
    run_pd(req, pool, pool, router="sibyl", link=KVLink.uniform(1e-4))
    run_pd(req, pool, pool, prefill_stage="delay", layerwise=True)
    return True


def _ds(res):
    return to_dataset(res)


def test_tandem_equivalence_1p1d(pd_compiled, oracle_8b):
    """1P1D, free link, ample memory: PD = prefill stage alone, then a decode-only stage
    fed with the prefill completions (a colocated engine whose requests have a one-token
    prompt and output - 1 tokens: the same one-token steps under an affine cost).

    The prefill instance runs one sequence at a time (SIBYL's prefill config), so no two
    prefills complete at the same instant (the colocated engine starts a step at each
    arrival, even one tied with the next)."""
    req = generate_requests(300, PoissonArrivals(12.0), Uniform(50, 1500), Uniform(1, 120),
                            seed=3)
    pparams = EngineParams(num_gpu_blocks=20000, max_model_len=4096, max_num_seqs=1)
    prefill = PoolSpec(pparams, oracle_8b)
    dcost = AffineStepCost(0.004, 2e-6, 3e-5)
    decode = PoolSpec(EngineParams(num_gpu_blocks=20000, max_model_len=4096, max_num_seqs=64),
                      dcost)
    res = run_pd(req, prefill, decode, prefill_hold=len(req))
    ds = _ds(res)

    stage1 = run_engine(Requests(req.arrival_s, req.prompt_len, np.ones(len(req), np.int64)),
                        oracle_8b, pparams)
    np.testing.assert_array_equal(ds["first_token_s"].values, stage1.reqs.t_first)
    np.testing.assert_array_equal(ds["first_scheduled_s"].values, stage1.reqs.t_sched)

    multi = np.flatnonzero(req.output_len > 1)
    t1 = stage1.reqs.t_first[multi]
    order = multi[np.argsort(t1, kind="stable")]
    stage2 = run_engine(Requests(stage1.reqs.t_first[order], np.ones(len(order), np.int64),
                                 req.output_len[order] - 1),
                        dcost, decode.params)
    np.testing.assert_allclose(ds["finish_s"].values[order], stage2.reqs.t_finish, rtol=0,
                               atol=1e-12)
    single = req.output_len == 1
    np.testing.assert_array_equal(ds["finish_s"].values[single],
                                  ds["first_token_s"].values[single])
    assert (ds["output_len"].values == req.output_len).all()


def test_kv_bytes_and_uncontended_transfer_time(pd_compiled):
    """KV moved = layers x 2 (K, V) x kv heads x head dim x 2 bytes per prompt token
    (Llama-3.1-8B: 131072 B); with TP=2 each rank sends half over its own link."""
    from serveplan.estimator.oracle import CostOracle

    o = CostOracle("llama-3.1-8b", "h100", tp=2)
    per_token = 32 * 2 * 8 * 128 * 2
    pool = PoolSpec(AMPLE, AffineStepCost(0.02, 1e-5))
    for placement, bw, lat in (("separate", 50e9, 1e-5), ("packed", 450e9, 5e-6)):
        link = KVLink.from_specs(o, o, 1, 1, placement=placement)
        assert link.bytes_per_token == per_token
        req = Requests(np.array([0.0, 5.0]), np.array([1000, 37]), np.array([10, 4]))
        ds = _ds(run_pd(req, pool, pool, link=link))
        expect = lat + req.prompt_len * (per_token / 2) / bw
        np.testing.assert_allclose(ds["transfer_s"].values, expect, rtol=1e-9)
        np.testing.assert_array_equal(ds["kv_bytes"].values, req.prompt_len * per_token)


def test_kv_bytes_total_under_contention(pd_compiled):
    from serveplan.estimator.oracle import CostOracle

    o = CostOracle("llama-3.1-8b", "h100")
    link = KVLink.from_specs(o, o, 2, 3, placement="separate", bandwidth=5e9)
    req = generate_requests(150, PoissonArrivals(40.0), Uniform(100, 2000), Uniform(1, 30),
                            seed=1)
    pool = PoolSpec(AMPLE, AffineStepCost(0.01, 2e-6))
    ds = _ds(run_pd(req, PoolSpec(AMPLE, AffineStepCost(0.01, 2e-6), 2),
                    PoolSpec(pool.params, pool.cost, 3), link=link, router="least-loaded"))
    decoded = req.output_len > 1
    assert ds["kv_bytes"].values.sum() == (req.prompt_len[decoded] * 131072).sum()
    # fair sharing only slows a transfer down
    alone = 1e-5 + req.prompt_len * 131072 / 5e9
    assert np.all(ds["transfer_s"].values[decoded] >= alone[decoded] * (1 - 1e-9))


@pytest.mark.parametrize("layerwise", [False, True])
def test_no_decode_before_kv_arrives(pd_compiled, layerwise):
    req = generate_requests(250, PoissonArrivals(30.0), Uniform(100, 900), Uniform(2, 60),
                            seed=5)
    prefill = PoolSpec(EngineParams(num_gpu_blocks=3000, max_model_len=2048),
                       AffineStepCost(0.02, 2e-5), 2)
    decode = PoolSpec(EngineParams(num_gpu_blocks=160, max_model_len=2048, max_num_seqs=16),
                      AffineStepCost(0.01, 0, 2e-4), 3)
    link = KVLink.uniform(2e-5, 1e-3, num_layers=8)
    ds = _ds(run_pd(req, prefill, decode, link=link, router="sibyl", layerwise=layerwise))
    v = {k: ds[k].values for k in ("arrival_s", "first_scheduled_s", "first_token_s",
                                   "kv_ready_s", "transfer_start_s", "kv_arrival_s",
                                   "decode_start_s", "finish_s")}
    assert np.isfinite(v["finish_s"]).all()
    assert np.all(v["first_scheduled_s"] >= v["arrival_s"])
    assert np.all(v["first_token_s"] >= v["first_scheduled_s"])
    assert np.all(v["transfer_start_s"] >= v["kv_ready_s"])
    assert np.all(v["kv_arrival_s"] >= v["transfer_start_s"] + 1e-3 + req.prompt_len * 2e-5
                  - 1e-12)
    assert np.all(v["kv_arrival_s"] >= v["first_token_s"])
    assert np.all(v["decode_start_s"] >= v["kv_arrival_s"])
    assert np.all(v["finish_s"] > v["decode_start_s"])
    if layerwise:
        np.testing.assert_array_equal(v["kv_ready_s"], v["first_scheduled_s"])
    else:
        np.testing.assert_array_equal(v["kv_ready_s"], v["first_token_s"])
    assert (ds["output_len"].values == req.output_len).all()


def test_backpressure_keeps_decode_kv_within_capacity(pd_compiled):
    """A transfer starts only once the decode instance holds blocks for the whole prompt:
    at no time do the prompts admitted on an instance exceed its blocks."""
    blocks, bs = 60, 16
    req = generate_requests(120, PoissonArrivals(80.0), Uniform(200, 400), Uniform(2, 3),
                            seed=2)
    prefill = PoolSpec(AMPLE, AffineStepCost(0.005, 1e-6), 2)
    decode = PoolSpec(EngineParams(num_gpu_blocks=blocks, max_model_len=1024, watermark=0.1),
                      AffineStepCost(0.05), 2)
    ds = _ds(run_pd(req, prefill, decode, link=KVLink.uniform(1e-5)))
    assert ds["num_preemptions"].values.sum() == 0
    dec = ds["role"].values[ds["step_instance"].values] == "decode"
    assert ds["kv_blocks_used"].values[dec].max() <= blocks
    start, end = ds["transfer_start_s"].values, ds["finish_s"].values
    need = -(-req.prompt_len // bs)
    inst = ds["routed_to"].values
    for r in range(len(req)):
        live = (inst == inst[r]) & (start <= start[r]) & (end > start[r])
        assert need[live].sum() <= blocks
    assert (ds["kv_wait_s"].values > 0).sum() > 10  # backpressure did engage


def test_prefill_holds_kv_until_transferred(pd_compiled):
    """The prefill instance keeps a request's blocks until its transfer ends: with a slow
    link and little prefill memory, prefills wait for transfers."""
    req = generate_requests(40, PoissonArrivals(200.0), Fixed(480), Fixed(4), seed=0)
    prefill = PoolSpec(EngineParams(num_gpu_blocks=64, max_model_len=1024),
                       AffineStepCost(0.002, 1e-6))
    decode = PoolSpec(AMPLE, AffineStepCost(0.01))
    slow = _ds(run_pd(req, prefill, decode, link=KVLink.uniform(1e-4)))
    fast = _ds(run_pd(req, prefill, decode, link=KVLink.uniform(1e-7)))
    assert slow["queue_s"].values.mean() > 5 * fast["queue_s"].values.mean()
    pre = slow["role"].values[slow["step_instance"].values] == "prefill"
    assert slow["kv_blocks_used"].values[pre].max() <= 64


def test_layerwise_transfer_overlaps_prefill(pd_compiled):
    """One request: a fast link finishes one layer's share after the prefill; a slow one
    runs from the prefill start at full rate."""
    prefill_cost = AffineStepCost(0.1)
    req = Requests(np.array([0.0]), np.array([1000]), np.array([5]))
    pool = PoolSpec(AMPLE, prefill_cost)
    for spt, lat in ((2e-5, 1e-3), (5e-4, 1e-3)):
        work = 1000 * spt
        link = KVLink.uniform(spt, lat, num_layers=10)
        ds = _ds(run_pd(req, pool, pool, link=link, layerwise=True))
        t0, t1 = ds["first_scheduled_s"].values[0], ds["first_token_s"].values[0]
        assert ds["transfer_start_s"].values[0] == t0
        expect = max(t1 + work / 10, t0 + work) + lat
        np.testing.assert_allclose(ds["kv_arrival_s"].values[0], expect, rtol=1e-12)
        plain = _ds(run_pd(req, pool, pool, link=link))
        np.testing.assert_allclose(plain["kv_arrival_s"].values[0], t1 + work + lat,
                                   rtol=1e-12)


def test_delay_prefill_stage_is_exact(pd_compiled, oracle_8b):
    req = generate_requests(100, PoissonArrivals(5.0), Uniform(10, 3000), Uniform(1, 40),
                            seed=4)
    pool = PoolSpec(AMPLE, oracle_8b)
    res = run_pd(req, pool, PoolSpec(AMPLE, AffineStepCost(0.01), 4), prefill_stage="delay",
                 router="sibyl")
    ds = _ds(res)
    delta = prefill_seconds(oracle_8b, req.prompt_len, AMPLE.max_num_batched_tokens)
    np.testing.assert_allclose(ds["ttft_s"].values, delta, rtol=0, atol=1e-11)
    multi = req.output_len > 1
    np.testing.assert_allclose(ds["handoff_estimate_s"].values[multi],
                               ds["first_token_s"].values[multi], rtol=1e-12)
    assert ds.sizes["instance"] == 4 and set(ds["role"].values) == {"decode"}


def test_fitted_throughput_decode_steps(pd_compiled):
    """Every decode step of N requests takes N / TPS(N) (SIBYL Appendix I); a request
    alone decodes at TPS(1) tokens/s."""
    cost = FittedThroughputCost()
    assert cost.tps(1) == pytest.approx(-0.423 + 44.766 - 7.753)
    assert cost.tps(200) == cost.min_tps
    flat = FittedThroughputCost(plateau=True)
    assert flat.tps(200) == pytest.approx(flat.tps(flat.peak_n))
    assert flat.tps(200) == pytest.approx(1176.64, abs=0.01)
    req = generate_requests(120, PoissonArrivals(4.0), Uniform(50, 300), Uniform(2, 200), seed=8)
    ds = _ds(run_pd(req, PoolSpec(AMPLE, AffineStepCost(0.05)), PoolSpec(AMPLE, cost, 2)))
    dec = ds["role"].values[ds["step_instance"].values] == "decode"
    n = ds["batch_size"].values[dec]
    assert n.max() > 5
    np.testing.assert_allclose(ds["step_time_s"].values[dec], cost.step_time(n), rtol=1e-12)
    alone = Requests(np.zeros(1), np.array([100]), np.array([11]))
    one = _ds(run_pd(alone, PoolSpec(AMPLE, AffineStepCost(0.05)), PoolSpec(AMPLE, cost)))
    np.testing.assert_allclose(one["tpot_s"].values, 1 / cost.tps(1), rtol=1e-12)


def test_early_and_late_assignment(pd_compiled):
    req = generate_requests(80, PoissonArrivals(20.0), Uniform(50, 500), Uniform(1, 20), seed=6)
    pool = PoolSpec(AMPLE, AffineStepCost(0.01, 1e-5), 2)
    early = _ds(run_pd(req, pool, pool, router="least-loaded"))
    late = _ds(run_pd(req, pool, pool, router="least-loaded", assignment="late"))
    multi = req.output_len > 1
    np.testing.assert_array_equal(early["assigned_s"].values[multi], req.arrival_s[multi])
    np.testing.assert_array_equal(late["assigned_s"].values[multi],
                                  late["first_token_s"].values[multi])
    assert (early["optimal_assignment"].values[multi] >= 0).all()
    assert (late["optimal_assignment"].values == -1).all()
    assert (early["routed_to"].values[~multi] == -1).all()
    with pytest.raises(ValueError, match="layer-wise"):
        run_pd(req, pool, pool, assignment="late", layerwise=True)


def test_closed_loop_pd(pd_compiled):
    req = generate_requests(60, PoissonArrivals(1.0), Uniform(20, 300), Uniform(1, 30), seed=7)
    closed = Requests(np.full(60, np.nan), req.prompt_len, req.output_len, concurrency=4)
    pool = PoolSpec(AMPLE, AffineStepCost(0.01, 1e-5), 2)
    ds = _ds(run_pd(closed, pool, pool, router="sibyl", link=KVLink.uniform(1e-5)))
    arrival, finish = ds["arrival_s"].values, ds["finish_s"].values
    assert np.isfinite(finish).all()
    for t in arrival:
        assert ((arrival <= t) & (finish > t)).sum() <= 4
    summary = summarize(ds)
    assert summary["completed"] == 60


def test_rejected_and_capped_requests(pd_compiled):
    req = Requests(np.array([0.0, 0.1, 0.2]), np.array([100, 300, 50]), np.array([5, 3, 400]))
    params = EngineParams(num_gpu_blocks=200, max_model_len=256)
    pool = PoolSpec(params, AffineStepCost(0.01))
    ds = _ds(run_pd(req, pool, pool))
    assert ds["status"].values.tolist() == [4, 6, 5]
    assert ds["output_len"].values.tolist() == [5, 0, 206]
    s = summarize(ds)
    assert s["completed"] == 2 and s["failed"] == 1
