"""The benchmark client of the measured Blackwell rows (InferenceX's ``benchmark_serving.py``):
its length draws, its burst, and its means, each against the client's own rules."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.e2e import BENCH_CLIENT, BenchClient, E2ERow, bench_means
from serveplan.sim.costs import AffineStepCost
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import PoolSpec

STEP = 0.010


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _row(**kw) -> E2ERow:
    base = dict(id="x", engine="vllm", version="0.19.0", model="m", system="b200_sxm",
                precision="fp8", mode="agg", isl=1024, osl=512, concurrency=4, tp=1, pp=1,
                dp=1, ep=1, ttft_ms=1.0, tpot_ms=1.0)
    return E2ERow(**{**base, **kw})


def test_lengths_are_the_clients_own_draws():
    """``sample_uniform`` of the client: ``np.random.seed(0)``, then
    ``np.random.randint(int(L * 0.8), L + 1, size=num_prompts)`` for the inputs and the
    same for the outputs, num_prompts = 10 x concurrency."""
    saved = np.random.get_state()  # noqa: NPY002  (the client draws from the global state)
    try:
        np.random.seed(0)  # noqa: NPY002
        isl = np.random.randint(int(1024 * 0.8), 1024 + 1, size=40)  # noqa: NPY002
        osl = np.random.randint(int(512 * 0.8), 512 + 1, size=40)  # noqa: NPY002
    finally:
        np.random.set_state(saved)  # noqa: NPY002
    req = BENCH_CLIENT.requests(_row())
    assert req.prompt_len.tolist() == isl.tolist()
    assert req.output_len.tolist() == osl.tolist()
    assert req.prompt_len.min() >= 819 and req.output_len.max() <= 512
    assert req.concurrency == 4 and np.isnan(req.arrival_s).all()  # a closed loop of 4


def test_length_laws_match_the_draws():
    pin, pout = BENCH_CLIENT.length_laws(_row())
    assert (pin.low, pin.high, pout.low, pout.high) == (819, 1024, 409, 512)


def test_one_client_means_by_hand():
    """One client, every step 10 ms, outputs of 1 or 2 tokens (osl 2, ratio 0.5).
    Each request arrives at its predecessor's finish on an idle engine: its prefill is
    the next step, so TTFT = 10 ms; a 2-token request decodes one more step: TPOT =
    (E2E - TTFT) / 1 = 10 ms. One-token requests have no TPOT and are left out of its
    mean (with them TPOT would be 0/0)."""
    client = BenchClient(prompts_per_client=12, range_ratio=0.5)
    load = client.requests(_row(isl=64, osl=2, concurrency=1))
    assert 0 < (load.output_len == 1).sum() < 12  # both kinds present
    pool = PoolSpec(EngineParams(num_gpu_blocks=100, max_model_len=512), AffineStepCost(STEP))
    ttft, tpot = bench_means(load, run_pools(load, [pool]))
    assert ttft == pytest.approx(10.0)
    assert tpot == pytest.approx(10.0)


def test_the_first_requests_leave_together():
    """``--request-rate inf`` behind a semaphore of C: the first C = 3 requests are sent at
    t = 0 (the warm-ups have drained); each later one when an earlier one finishes."""
    load = BENCH_CLIENT.requests(_row(isl=32, osl=8, concurrency=3))
    pool = PoolSpec(EngineParams(num_gpu_blocks=100, max_model_len=512), AffineStepCost(STEP))
    res = run_pools(load, [pool])
    reqs = res.reqs
    assert reqs.arrival[:3].tolist() == [0.0, 0.0, 0.0]
    finish = res.pd.t_finish[:len(reqs.prompt)]
    assert reqs.arrival[3:] == pytest.approx(finish[:-3])  # request i after i - 3


def test_each_campaign_gets_its_client():
    """InferenceX exports (``db-dump/...``, ``source_file=2026-04-06.csv``) ran InferenceX's
    client; the generator's own gap analysis (a Dynamo image in the source) ran aiperf
    with fixed lengths, 20 x C requests."""
    from serveplan.e2e import AIPERF_CLIENT, row_client

    assert row_client(_row(source="db-dump/2026-04-27; config_id=733")) is BENCH_CLIENT
    assert row_client(_row(source="source_file=2026-04-06.csv; model=x")) is BENCH_CLIENT
    gap = _row(source="source_file=/x/Qwen3-32B.csv; gtl_job_id=1; dynamo_version=0.9.0",
               isl=4000, osl=1000, concurrency=8)
    assert row_client(gap) is AIPERF_CLIENT
    req = AIPERF_CLIENT.requests(gap)
    assert len(req.prompt_len) == 160 and set(req.prompt_len) == {4000}
    assert set(req.output_len) == {1000}
