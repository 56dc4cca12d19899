"""Benchmark-client behaviour (serveplan.sim.clients, the arrival schedules of
vllm bench serve and inference-perf, prompt pools, warm-up, timeouts), each checked against
the tool's documented algorithm written out here or a hand computation."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from pydantic import TypeAdapter, ValidationError

import serveplan
from serveplan.config import Workload
from serveplan.sim import clients
from serveplan.sim import workload as W
from serveplan.sim.clients import TIMEOUT_ATTR, WARMUP_ATTR, client_outcome
from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.state import FINISHED_IGNORED, FINISHED_STOPPED, RUNNING

WORKLOAD = TypeAdapter(Workload)
FIXTURES = Path(__file__).parent / "data" / "traces"
DEPLOYMENT = {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 4000,
              "max_model_len": 4096}


def spec(**fields):
    return WORKLOAD.validate_python(fields)


# --- vllm bench serve --request-rate / --burstiness ------------------------------------------


def test_vllm_schedule_is_rescaled_gamma_gaps():
    # vllm/benchmarks/serve.py get_request: gaps ~ Gamma(shape=B, scale=1/(R*B)), cumulative
    # sums, then all scaled so the last is n / R.
    n, rate, b, seed = 50, 4.0, 0.5, 7
    gaps = np.random.default_rng(seed).gamma(b, 1.0 / (rate * b), n)
    delay = np.cumsum(gaps)
    expected = delay * (n / rate) / delay[-1]
    got = W.VllmBenchArrivals(rate, b).sample(n, seed)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got[-1] == pytest.approx(n / rate) and got[0] > 0


def test_vllm_schedule_limits():
    # burstiness inf: every gap is 1/R, so request i goes at (i + 1) / R; rate inf: all at 0.
    np.testing.assert_allclose(W.VllmBenchArrivals(2.0, float("inf")).sample(4), [0.5, 1, 1.5, 2])
    np.testing.assert_array_equal(W.VllmBenchArrivals(float("inf")).sample(3, 0), [0, 0, 0])
    a, b = W.VllmBenchArrivals(1.0, 2.0), W.VllmBenchArrivals(8.0, 2.0)
    np.testing.assert_allclose(a.sample(20, 3), 8 * b.sample(20, 3))
    with pytest.raises(ValueError, match="burstiness must be > 0"):
        W.VllmBenchArrivals(1.0, 0.0)


def test_vllm_burstiness_sets_the_gap_cv():
    # Gamma shape B has CV 1/sqrt(B); the final rescale changes every gap by the same factor.
    t = W.VllmBenchArrivals(10.0, 4.0).sample(200_001, 1)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(0.5, rel=0.02)


# --- inference-perf load types ---------------------------------------------------------------


def _constant_timer(rate, duration, start, rng):
    """inference-perf ConstantLoadTimer.start_timer, written out."""
    n = int(rate * duration)
    intervals = rng.exponential(1 / rate, n)
    return start + np.cumsum(intervals * (duration / intervals.sum()))


def _poisson_timer(rate, count, start, rng):
    """inference-perf PoissonLoadTimer.start_timer, the first ``count`` times."""
    out = []
    while len(out) < count:
        k = rng.poisson(rate)
        if k < 1:
            start += 1.0
            continue
        times = _constant_timer(k, 1.0, start, rng)
        out.extend(times)
        start = times[-1]
    return np.array(out[:count])


def test_inference_perf_constant_stages():
    a = W.InferencePerfArrivals("constant", ((2.5, 3.0), (4.0, 2.0)), interval=0.5)
    assert list(a.counts) == [7, 8]  # int(7.5), int(8.0)
    rng = np.random.default_rng(11)
    first = _constant_timer(2.5, 3.0, 1.0, rng)  # stage 0 schedules from t = 1 s
    second = _constant_timer(4.0, 2.0, 4.0 + 0.5 + 1.0, rng)  # ends at 4, + interval + 1 s
    got = a.sample(seed=11)
    np.testing.assert_allclose(got, np.r_[first, second])
    assert got[6] == pytest.approx(4.0) and got[-1] == pytest.approx(7.5)
    np.testing.assert_array_equal(a.stage_of(), [0] * 7 + [1] * 8)
    with pytest.raises(ValueError, match="send 15 requests, not n = 3"):
        a.sample(3)



def test_inference_perf_staged_plan_has_the_same_draws():
    # staged(): stage 0 keeps its send times; stage 1's offsets run from stage 0's drain:
    # interval 0.5 + the 1-s queue fill + its own schedule (sample() added them to the last
    # send, 4.0, instead of to the drain)
    a = W.InferencePerfArrivals("constant", ((2.5, 3.0), (4.0, 2.0)), interval=0.5)
    sent = a.sample(seed=11)
    arrival, plan = a.staged(seed=11)
    np.testing.assert_array_equal(plan.stage, [0] * 7 + [1] * 8)
    np.testing.assert_allclose(arrival[:7], sent[:7])
    assert np.isnan(arrival[7:]).all()
    np.testing.assert_allclose(plan.offset_s[7:], sent[7:] - 4.0)
    np.testing.assert_array_equal(plan.first_index, [0, 7, 15])
    rng = np.random.default_rng(11)  # what a rate search scales: the schedule by hand
    first = _constant_timer(2.5, 3.0, 1.0, rng)
    second = _constant_timer(4.0, 2.0, first[-1] + 0.5 + 1.0, rng)
    np.testing.assert_allclose(plan.sends_without_server(), np.r_[first, second])
    req = W.generate_requests(15, a, W.Fixed(10), W.Fixed(2), seed=3)
    np.testing.assert_array_equal(req.stages.stage, plan.stage)


def test_stages_drain_before_the_next_one_is_sent():
    # Every step takes 10 ms. Stage 0: A (sent 0, 100 + 3 tokens) prefills 0 -> 0.010 and
    # decodes to 0.030; B (sent 0.005, 100 + 5) joins the step 0.010 -> 0.020 (its prompt,
    # A's token 2) and decodes to 0.060. Stage 0 drains at 0.060, B's last token -- not at
    # its last send, 0.005. C (stage 1, offset 0.5) is sent at 0.560 and, 2 tokens long,
    # finishes at 0.580.
    plan = W.StagePlan(np.array([0, 0, 1]), np.array([0.0, 0.005, 0.5]))
    req = W.Requests(np.array([0.0, 0.005, np.nan]), np.array([100, 100, 100]),
                     np.array([3, 5, 2]), stages=plan)
    res = run_engine(req, AffineStepCost(0.010), EngineParams(num_gpu_blocks=1000))
    r = res.reqs
    np.testing.assert_allclose(r.arrival, [0.0, 0.005, 0.560], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.t_finish, [0.030, 0.060, 0.580], rtol=0, atol=1e-12)


def test_staged_requests_are_checked():
    plan = W.StagePlan(np.array([0, 1]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="later stages' arrivals must be NaN"):
        W.Requests(np.array([0.0, 1.0]), np.array([5, 5]), np.array([2, 2]), stages=plan)
    with pytest.raises(ValueError, match="go up one at a time"):
        W.StagePlan(np.array([0, 2]), np.array([0.0, 1.0]))
    req = W.Requests(np.array([0.0, np.nan]), np.array([5, 5]), np.array([2, 2]), stages=plan)
    assert req.take(slice(0, 1)).stages.stage.tolist() == [0]
    with pytest.raises(ValueError, match="cut to their first ones"):
        req.take(np.array([1]))
    with pytest.raises(ValueError, match="cannot tile staged requests"):
        W.tile_requests(req, 4)


def test_a_timed_out_client_sends_its_next_request_at_the_timeout():
    # One closed-loop client, timeout 26 ms; every step takes 10 ms. A (50 + 5 tokens) runs
    # 0 -> 0.050; the client gives up at 0.026 and sends B then (not at 0.050). B joins the
    # step 0.030 -> 0.040 and ends at 0.050, within its timeout, so its finish sends C at
    # 0.050; C ends at 0.070. The server still serves A to its end.
    req = W.Requests(np.full(3, np.nan), np.array([50, 50, 50]), np.array([5, 2, 2]),
                     concurrency=1, timeout_s=0.026)
    r = run_engine(req, AffineStepCost(0.010), EngineParams(num_gpu_blocks=1000)).reqs
    np.testing.assert_allclose(r.arrival, [0.0, 0.026, 0.050], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.t_finish, [0.050, 0.050, 0.070], rtol=0, atol=1e-12)
    patient = run_engine(replace(req, timeout_s=None), AffineStepCost(0.010),
                         EngineParams(num_gpu_blocks=1000)).reqs
    np.testing.assert_allclose(patient.arrival, [0.0, 0.050, 0.070], rtol=0, atol=1e-12)

def test_inference_perf_poisson_windows():
    a = W.InferencePerfArrivals("poisson", ((3.0, 4.0),))
    expected = _poisson_timer(3.0, 12, 1.0, np.random.default_rng(5))
    np.testing.assert_allclose(a.sample(seed=5), expected)


def test_inference_perf_rejects_bad_stages():
    with pytest.raises(ValueError, match=r"stages\[1\].duration must be"):
        W.InferencePerfArrivals("constant", ((1.0, 2.0), (1.0, 0.0)))
    with pytest.raises(ValidationError, match="stages"):
        spec(kind="inference-perf", stages=[])


# --- closed loop: think time, warm-up ---------------------------------------------------------


def test_closed_loop_think_times():
    loop = W.ClosedLoop(2, think_time_s=0.5, think_time_jitter_s=0.1)
    d = loop.client_delays(5, 3)
    jitter = np.random.default_rng(3).standard_exponential(5)
    np.testing.assert_allclose(d, np.r_[0.0, 0.0, 0.5 + 0.1 * jitter[2:]])
    assert W.ClosedLoop(2).client_delays(5, 3) is None
    r = W.generate_requests(5, loop, W.Fixed(4), W.Fixed(2), 0)
    assert r.client_delay_s.shape == (5,) and np.all(r.client_delay_s[2:] >= 0.5)
    built = clients.build_requests(spec(kind="closed-loop", concurrency=2, num_requests=6,
                                        think_time_s=1.0))
    np.testing.assert_array_equal(built.client_delay_s, [0.0, 0.0, 1.0, 1.0, 1.0, 1.0])


def test_requests_client_fields_validate_and_survive_take_and_tile():
    base = dict(arrival_s=[np.nan] * 3, prompt_len=[1, 2, 3], output_len=[1, 1, 1],
                concurrency=1)
    with pytest.raises(ValueError, match="warmup = 4 exceeds the 3 requests"):
        W.Requests(**base, warmup=4)
    with pytest.raises(ValueError, match=r"client_delay_s\[1\] = -1.0"):
        W.Requests(**base, client_delay_s=[0.0, -1.0, 0.0])
    with pytest.raises(ValueError, match="needs a closed-loop"):
        W.Requests(arrival_s=[0.0], prompt_len=[1], output_len=[1], client_delay_s=[0.0])
    r = W.Requests(**base, warmup=1, timeout_s=2.0, client_delay_s=[0.0, 0.5, 0.25])
    head = r.take(slice(0, 2))
    assert head.warmup == 1 and head.timeout_s == 2.0
    np.testing.assert_array_equal(head.client_delay_s, [0.0, 0.5])
    assert r.take(np.array([1, 2])).warmup == 0
    with pytest.raises(ValueError, match="warm-up requests must stay the leading"):
        r.take(np.array([1, 0]))
    tiled = W.tile_requests(r, 5)
    assert tiled.warmup == 1
    np.testing.assert_array_equal(tiled.client_delay_s, [0.0, 0.5, 0.25, 0.0, 0.5])


def test_client_outcome_masks_by_hand():
    status = np.array([FINISHED_STOPPED, FINISHED_STOPPED, FINISHED_IGNORED, FINISHED_STOPPED,
                       FINISHED_STOPPED, RUNNING], dtype=np.int8)
    e2e = np.array([9.0, 1.0, 0.0, 3.5, 2.0, np.nan])
    ds = xr.Dataset({"status": ("request", status), "e2e_s": ("request", e2e)},
                    attrs={WARMUP_ATTR: 1, TIMEOUT_ATTR: 3.0})
    out = client_outcome(ds)
    # request 0 is warm-up (slow, not counted); 2 was rejected; 3 took 3.5 s > 3 s
    np.testing.assert_array_equal(out.measured, [0, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(out.completed, [0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(out.failed, [0, 0, 1, 1, 0, 0])
    plain = client_outcome(ds.assign_attrs({WARMUP_ATTR: 0, TIMEOUT_ATTR: 100.0}))
    np.testing.assert_array_equal(plain.completed, [1, 1, 0, 1, 1, 0])


def test_warmup_must_leave_requests_to_measure():
    with pytest.raises(ValueError, match="warmup_request_count = 10 leaves none of the 10"):
        clients.build_requests(spec(kind="poisson", rate=1, num_requests=10,
                                    warmup_request_count=10))


# --- prompt pools and shared prefixes ----------------------------------------------------------


def test_pool_orders():
    rng = np.random.default_rng(0)
    seq = W.PromptPool(3).pool_indices(7, rng)
    np.testing.assert_array_equal(seq, [0, 1, 2, 0, 1, 2, 0])
    shuf = W.PromptPool(3, "shuffle").pool_indices(9, rng)
    for k in range(3):  # every pass over the pool sends each entry once
        assert sorted(shuf[3 * k:3 * k + 3]) == [0, 1, 2]
    rand = W.PromptPool(3, "random").pool_indices(300, rng)
    assert set(rand) == {0, 1, 2}
    with pytest.raises(ValueError, match="dataset_sampling_strategy must be one of"):
        W.PromptPool(3, "round-robin")


def test_pool_requests_repeat_whole_prompts():
    # 2 entries of 20 + 16 prefix tokens = 36 tokens = 3 blocks of 16; one prefix group
    r = W.generate_requests(5, W.PoissonArrivals(1.0), W.Fixed(20), W.Uniform(1, 9), 0,
                            prefix=W.PrefixSharing(1, 16, 16), pool=W.PromptPool(2))
    assert list(np.diff(r.hash_offsets)) == [3] * 5
    rows = [tuple(r.hashes(i)) for i in range(5)]
    assert rows[0] == rows[2] == rows[4] and rows[1] == rows[3] and rows[0] != rows[1]
    assert rows[0][0] == rows[1][0] == 0  # the shared prefix block
    assert r.output_len[0] == r.output_len[2] == r.output_len[4]


def test_prefix_aliases_use_the_tools_names():
    aiperf = spec(kind="poisson", rate=1, prefix={"num_prefix_prompts": 4,
                                                  "prefix_prompt_length": 64})
    vllm = spec(kind="vllm-bench-serve", request_rate=2, prefix={"random_prefix_len": 32})
    assert (aiperf.prefix.num_groups, aiperf.prefix.prefix_len) == (4, 64)
    assert (vllm.prefix.num_groups, vllm.prefix.prefix_len) == (1, 32)


# --- config -> requests -------------------------------------------------------------------------


def test_vllm_bench_config():
    w = spec(kind="vllm-bench-serve", request_rate=4, burstiness=0.5, num_prompts=10, isl=64,
             osl=8, request_timeout=30, warmup_request_count=2)
    r = clients.build_requests(w, seed=0)
    assert len(r) == 10 and r.arrival_s[-1] == pytest.approx(10 / 4)
    assert (r.warmup, r.timeout_s) == (2, 30.0)
    burst = spec(kind="vllm-bench-serve", max_concurrency=3, num_prompts=6)  # rate inf
    assert WORKLOAD.validate_json(WORKLOAD.dump_json(burst)) == burst  # inf survives JSON
    closed = clients.build_requests(burst)
    assert closed.concurrency == 3
    capped = clients.build_requests(spec(kind="vllm-bench-serve", request_rate=1,
                                         max_concurrency=3, num_prompts=6))
    assert (capped.concurrency, capped.max_concurrency) == (None, 3)
    assert capped.arrival_s[-1] == pytest.approx(6.0)  # the schedule; sends are the run's


def test_max_concurrency_holds_due_requests_back():
    # vllm bench serve --max-concurrency 2; every step takes 10 ms. A (due 0, 50 + 3 tokens)
    # and B (due 0.001, 50 + 5) are sent when due: A prefills 0 -> 0.010, B joins the next
    # step and A ends at 0.030. C (due 0.002) and D (due 0.003) find 2 in flight and wait:
    # C is sent as A ends, 0.030, prefills with B's decode and ends at 0.050 (2 tokens); D
    # is sent then and, 1 token, ends with its prefill at 0.060, as does B (5th token).
    req = W.Requests(np.array([0.0, 0.001, 0.002, 0.003]), np.array([50, 50, 50, 50]),
                     np.array([3, 5, 2, 1]), max_concurrency=2)
    res = run_engine(req, AffineStepCost(0.010), EngineParams(num_gpu_blocks=1000))
    r = res.reqs
    np.testing.assert_allclose(r.arrival, [0.0, 0.001, 0.030, 0.050], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.t_finish, [0.030, 0.060, 0.050, 0.060], rtol=0, atol=1e-12)
    free = run_engine(replace(req, max_concurrency=None), AffineStepCost(0.010),
                      EngineParams(num_gpu_blocks=1000)).reqs
    np.testing.assert_allclose(free.arrival, req.arrival_s)  # without the cap: when due
    with pytest.raises(ValueError, match="max_concurrency caps an open-loop client"):
        W.Requests(np.full(2, np.nan), np.array([5, 5]), np.array([2, 2]), concurrency=1,
                   max_concurrency=1)


def test_a_cap_above_the_request_count_is_no_cap():
    """A closed loop of 10^12 clients over 4 requests sends all 4 at once, as 4 clients do;
    --max-concurrency 10^12 over 4 requests holds none back, as a cap of 4 does (same
    timeline as without a cap: A-D sent when due). Neither sizes a buffer by the cap."""
    cost, params = AffineStepCost(0.010), EngineParams(num_gpu_blocks=1000)
    prompt, output = np.array([50, 50, 50, 50]), np.array([3, 5, 2, 1])
    closed = [run_engine(W.Requests(np.full(4, np.nan), prompt, output, concurrency=c),
                         cost, params).reqs for c in (10**12, 4)]
    np.testing.assert_array_equal(closed[0].arrival, [0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(closed[0].t_finish, closed[1].t_finish)
    due = np.array([0.0, 0.001, 0.002, 0.003])
    capped = run_engine(W.Requests(due, prompt, output, max_concurrency=10**12), cost,
                        params).reqs
    free = run_engine(W.Requests(due, prompt, output), cost, params).reqs
    np.testing.assert_allclose(capped.arrival, due, rtol=0, atol=1e-12)
    np.testing.assert_allclose(capped.t_finish, free.t_finish, rtol=0, atol=1e-12)


def test_vllm_random_range_ratio():
    """``--random-range-ratio 0.5`` around isl 1001 / osl 3: ``get_sampling_params`` takes
    floor(1001 x 0.5) = 500 .. ceil(1001 x 1.5) = 1502 and floor(1.5) = 1 .. ceil(4.5) = 5
    (at least 1). A length law for isl cannot take a range: refused, naming the field."""
    w = spec(kind="vllm-bench-serve", max_concurrency=4, num_prompts=4000, isl=1001, osl=3,
             random_range_ratio=0.5)
    r = clients.build_requests(w, seed=0)
    assert (r.prompt_len.min(), r.prompt_len.max()) == (500, 1502)
    assert (r.output_len.min(), r.output_len.max()) == (1, 5)
    with pytest.raises(ValidationError, match="fixed isl"):
        spec(kind="vllm-bench-serve", random_range_ratio=0.2,
             isl={"dist": "uniform", "low": 10, "high": 20})
    with pytest.raises(ValidationError):
        spec(kind="vllm-bench-serve", random_range_ratio=1.0)


def test_inference_perf_config():
    w = spec(kind="inference-perf", type="constant", stages=[{"rate": 2, "duration": 3}],
             isl=32, osl=4)
    r = clients.build_requests(w, seed=0)
    assert len(r) == 6 and r.arrival_s[-1] == pytest.approx(4.0)


def test_trace_shorter_than_num_requests_needs_repeat():
    path = FIXTURES / "azure_conv_head.csv"  # 30 requests
    short = spec(kind="trace", path=str(path), num_requests=45)
    with pytest.raises(ValueError, match=r"num_requests = 45 but .*azure_conv_head.csv has "
                                         r"only 30 requests; set workload.repeat: true"):
        clients.build_requests(short)
    r = clients.build_requests(spec(kind="trace", path=str(path), num_requests=45, repeat=True))
    assert len(r) == 45 and np.all(np.diff(r.arrival_s) >= 0)
    np.testing.assert_array_equal(r.prompt_len[30:], r.prompt_len[:15])
    drawn = spec(kind="trace", path=str(path), arrival="poisson", rate=2, num_requests=31)
    with pytest.raises(ValueError, match="set workload.repeat: true"):
        clients.build_requests(drawn)


# --- through the simulator ------------------------------------------------------------------------


def test_simulate_leaves_warmup_out_and_counts_timeouts(sim_compiled, oracle_8b):
    base = {"kind": "poisson", "rate": 8.0, "num_requests": 40, "isl": 256,
            "osl": {"dist": "uniform", "low": 4, "high": 32}}
    plain = serveplan.simulate(DEPLOYMENT, base, seed=1)
    e2e, arrival, finish = (plain[v].values for v in ("e2e_s", "arrival_s", "finish_s"))
    timeout = float(np.median(e2e[5:]))
    ds = serveplan.simulate(DEPLOYMENT, {**base, "warmup_request_count": 5,
                                         "request_timeout_s": timeout}, seed=1)
    # the same requests ran the same way: warm-up and the timeout change only the statistics
    np.testing.assert_array_equal(ds["e2e_s"].values, e2e)
    s = json.loads(ds.attrs["summary"])
    slow = e2e[5:] > timeout
    assert s["completed"] == int((~slow).sum()) and s["failed"] == int(slow.sum()) > 0
    assert s["mean_e2el_ms"] == pytest.approx(e2e[5:][~slow].mean() * 1e3)
    assert s["duration_s"] == pytest.approx(finish[5:][~slow].max() - arrival[5])
    assert json.loads(plain.attrs["summary"])["completed"] == 40


def test_pool_repeats_hit_the_prefix_cache(sim_compiled, oracle_8b):
    # one 256-token prompt sent every 2 s: each repeat finds its 16 full blocks cached; vLLM v1
    # caps a hit at num_tokens - 1 = 255 tokens, whole 16-token blocks: 15 * 16 = 240
    w = {"kind": "constant", "rate": 0.5, "num_requests": 6, "isl": 256, "osl": 4,
         "num_dataset_entries": 1}
    hits = serveplan.simulate(DEPLOYMENT, w, seed=0)["prefix_hit_tokens"].values
    np.testing.assert_array_equal(hits, [0, 240, 240, 240, 240, 240])
    fresh = serveplan.simulate(DEPLOYMENT, {**w, "num_dataset_entries": None}, seed=0)
    assert np.all(fresh["prefix_hit_tokens"].values == 0)
