"""Properties every simulation must satisfy, over hypothesis-generated configs and workloads.

* every request finishes exactly once, with all its output tokens;
* timestamps are ordered (arrival <= first scheduled <= first token <= finish) and each
  instance's steps do not overlap;
* KV blocks used stay within [0, capacity], batches within max_num_seqs and the token
  budget; after the run every block is free and the free list is intact;
* tokens are conserved: without preemption, the engine computes exactly
  sum(prompt + output - 1 - prefix hits) tokens;
* Little's law on the sample path: the time integral of the number of scheduled requests
  equals the summed residence times (first scheduled -> finish) when every running request
  is scheduled in every step.

Infeasible configs must raise a ``ValueError`` naming the offending knob, never crash.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serveplan.sim.engine import AffineStepCost, EngineParams, recorded_steps, run_engine
from serveplan.sim.kvcache import EMPTY, M_HEAD, M_NFREE
from serveplan.sim.state import A_TOKENS, FINISHED_IGNORED, PREEMPTED, Policy, Router
from serveplan.sim.workload import (
    ClosedLoop,
    PoissonArrivals,
    PrefixSharing,
    Uniform,
    generate_requests,
)


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 40))
    closed = draw(st.booleans())
    arrivals = ClosedLoop(draw(st.integers(1, 6))) if closed else PoissonArrivals(
        draw(st.floats(0.5, 200.0)))
    prefix = None
    if draw(st.booleans()):
        prefix = PrefixSharing(draw(st.integers(1, 3)), draw(st.integers(0, 80)),
                               draw(st.sampled_from([4, 16, 64])))
    requests = generate_requests(
        n, arrivals, Uniform(1, draw(st.integers(1, 300))), Uniform(1, draw(st.integers(1, 40))),
        seed=draw(st.integers(0, 2**16)), prefix=prefix)
    params = dict(
        policy=draw(st.sampled_from(list(Policy))),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.integers(8, 600)),
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        num_gpu_blocks=draw(st.integers(1, 400)),
        enable_prefix_caching=draw(st.booleans()),
        enable_chunked_prefill=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 7, 64])),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.2])),
        max_model_len=draw(st.sampled_from([64, 256, 4096])),
    )
    if draw(st.booleans()):  # tight memory: just above the largest request (preemptions)
        prompt, output = requests.prompt_len, requests.output_len
        live = prompt < params["max_model_len"]
        peak = np.minimum(prompt + output, params["max_model_len"]) - 1
        need = int((-(-peak[live] // params["block_size"])).max(initial=1))
        params["num_gpu_blocks"] = need + draw(st.integers(0, 8))
    instances = draw(st.integers(1, 3))
    router = draw(st.sampled_from(list(Router)))
    cost = AffineStepCost(draw(st.floats(1e-4, 0.05)), draw(st.sampled_from([0.0, 1e-5])),
                          draw(st.sampled_from([0.0, 1e-4])))
    return requests, EngineParams(**params), instances, router, cost


def check_pool_intact(res, i):
    pool = res.pool
    nb = res.params.num_gpu_blocks
    assert pool.meta[i, M_NFREE] == nb
    assert np.all(pool.ref[i, :nb] == 0)
    seen, b = 0, pool.meta[i, M_HEAD]
    while b != EMPTY:
        seen += 1
        b = pool.nxt[i, b]
        assert seen <= nb
    assert seen == nb


def check_invariants(requests, res):
    r, p = res.reqs, res.params
    live = r.status != FINISHED_IGNORED
    # every request finished once, with all its tokens
    assert np.all(r.status > PREEMPTED)
    assert np.all(np.isfinite(r.t_finish))
    np.testing.assert_array_equal(r.n_out[live], r.output[live])
    # ordered timestamps
    eps = 1e-9
    assert np.all(r.t_sched[live] >= r.arrival[live] - eps)
    assert np.all(r.t_first[live] >= r.t_sched[live] - eps)
    assert np.all(r.t_finish[live] >= r.t_first[live] - eps)
    if requests.concurrency:
        c = requests.concurrency
        np.testing.assert_allclose(r.arrival[c:], r.t_finish[:-c])
    # steps: capacity, budget, no overlap per instance
    steps = recorded_steps(res.rec)
    assert res.rec.meta[1] == 1  # small runs keep every step
    assert np.all((steps["kv_used"] >= 0) & (steps["kv_used"] <= p.num_gpu_blocks))
    assert np.all(steps["batch"] <= p.max_num_seqs)
    assert np.all(steps["running"] <= p.max_num_seqs)
    assert np.all(steps["tokens"] <= p.max_num_batched_tokens)
    assert np.all(steps["dt"] > 0)
    for i in range(res.num_instances):
        mine = steps["inst"] == i
        start, dt = steps["t"][mine], steps["dt"][mine]
        assert np.all(start[1:] >= start[:-1] + dt[:-1] - eps)
        check_pool_intact(res, i)
    # token conservation (exact without preemption)
    total = res.inst.acc[:, A_TOKENS].sum()
    if r.n_preempt.sum() == 0:
        expected = (r.prompt[live] + r.output[live] - 1 - r.hit[live]).sum()
        assert total == expected


# derandomize: the same 120 scenarios on every machine, so a failure replays anywhere. A
# wider random search (3,000 draws) found h2q-br scenarios that never finished -- two
# requests preempting each other as their ranks swapped -- until preemption took the
# (queue, arrival) order (serveplan.sim.session_policies); it finds none now, and
# tests/test_session_policies.py pins the rule by hand.
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(scenarios())
def test_random_configs_hold_invariants_or_fail_clearly(case):
    requests, params, instances, router, cost = case
    try:
        res = run_engine(requests, cost, params, num_instances=instances, router=router)
    except ValueError as exc:
        assert "stalled" not in str(exc)  # (its message names both knobs too)
        assert "num_gpu_blocks" in str(exc) or "max_num_batched_tokens" in str(exc)
        return
    check_invariants(requests, res)


@pytest.mark.parametrize("policy", list(Policy))
def test_littles_law_on_the_sample_path(policy):
    # ample budget and blocks: every running request is scheduled in every step
    requests = generate_requests(400, PoissonArrivals(30.0), Uniform(10, 200), Uniform(1, 60),
                                 seed=3)
    params = EngineParams(num_gpu_blocks=100_000, policy=policy, max_num_seqs=512,
                          max_num_batched_tokens=1 << 20, max_model_len=4096)
    res = run_engine(requests, AffineStepCost(0.002, 2e-6, 5e-5), params)
    r = res.reqs
    steps = recorded_steps(res.rec)
    if policy == Policy.VLLM_V1:
        # number in service integrated over time == summed residence times (exact)
        area = float((steps["batch"] * steps["dt"]).sum())
        assert area == pytest.approx(float((r.t_finish - r.t_sched).sum()), rel=1e-9)
    # L = lambda W over the run: time-average in system vs arrival rate x mean sojourn
    duration = r.t_finish.max() - r.arrival.min()
    lam = len(r.arrival) / duration
    t = np.linspace(r.arrival.min(), r.t_finish.max(), 20001)
    in_system = (np.searchsorted(np.sort(r.arrival), t, side="right")
                 - np.searchsorted(np.sort(r.t_finish), t, side="right"))
    assert in_system.mean() == pytest.approx(lam * (r.t_finish - r.arrival).mean(), rel=0.02)


def test_decimated_records_stay_bounded():
    requests = generate_requests(300, PoissonArrivals(50.0), Uniform(10, 50), Uniform(5, 30),
                                 seed=1)
    res = run_engine(requests, AffineStepCost(0.002),
                     EngineParams(num_gpu_blocks=10_000, max_model_len=1024), record_steps=64)
    k, stride = int(res.rec.meta[0]), int(res.rec.meta[1])
    assert k <= 64 and stride > 1
    assert res.num_steps // stride <= k <= res.num_steps // stride + 1
    steps = recorded_steps(res.rec)
    assert np.all(np.diff(steps["t"]) > 0)
