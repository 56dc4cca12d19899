"""Fitting runtime terms: recover known terms from runs generated with them; refuse what the
runs cannot identify; the measured rows' engine flags follow the benchmark generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serveplan.e2e import E2ERow, deployment, expressible
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.estimator.runtime_fit import fit_terms
from serveplan.sim.costs import AffineStepCost
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import PoolSpec
from serveplan.sim.workload import Requests

LAYERS = 10
# (concurrency, tp, prompt, output) of the synthetic runs: one client each, so a median is a
# smooth function of the terms (TTFT = front end + prefill step; TPOT = decode step)
RUNS = [(1, 1, 200, 20), (1, 1, 2000, 20), (1, 2, 200, 20), (1, 2, 2000, 20)]


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _predict(terms: RuntimeTerms) -> np.ndarray:
    """Median TTFT and TPOT (ms) of closed-loop runs on an affine-cost engine (10 ms + 10 us
    per token), with the terms' front end and step work."""
    out = []
    for conc, tp, prompt, output in RUNS:
        n = 3 * conc
        req = Requests(arrival_s=np.full(n, np.nan), prompt_len=np.full(n, prompt),
                       output_len=np.full(n, output), concurrency=conc)
        pool = PoolSpec(EngineParams(num_gpu_blocks=4000, max_model_len=8192),
                        AffineStepCost(0.010, 1e-5), runtime=terms.step_runtime(LAYERS, tp))
        r = run_pools(req, [pool], frontend=terms.front_end()).reqs
        ttft = r.t_first - r.arrival
        tpot = (r.t_finish - r.t_first) / (output - 1)
        out.append([np.median(ttft) * 1e3, np.median(tpot) * 1e3])
    return np.array(out)


def test_fit_recovers_the_terms_the_runs_were_generated_with():
    true = RuntimeTerms(frontend_request_s=0.02, tp_sync_per_layer_s=2e-4, step_cpu_s=3e-3)
    measured = _predict(true)
    tp = np.array([r[1] for r in RUNS])
    names = ("frontend_request_s", "tp_sync_per_layer_s", "step_cpu_s")
    fit = fit_terms(_predict, measured, tp, names=names, max_evals=300)
    assert fit.fitted == names
    for name in fit.fitted:
        assert getattr(fit.terms, name) == pytest.approx(getattr(true, name), rel=0.05), name
    assert np.median(fit.err_after) < 0.01 < np.median(fit.err_before)


def test_a_term_the_runs_cannot_identify_is_not_fitted():
    """Without runs at tp = 1 and tp > 1 the per-layer sync term is left alone, with why."""
    measured = np.array([[100.0, 10.0]])
    fit = fit_terms(lambda t: np.array([[100.0 + 1e3 * t.frontend_request_s,
                                         10.0 + 1e3 * t.step_cpu_s]]), measured,
                    tp=np.array([1]), names=("tp_sync_per_layer_s",))
    assert fit.fitted == ()
    assert "tensor-parallel size 1 and > 1" in fit.skipped["tp_sync_per_layer_s"]
    colocated = fit_terms(lambda t: measured, measured, tp=np.array([1]),
                          names=("disagg_handoff_s",), disaggregated=np.array([False]))
    assert colocated.fitted == ()
    assert "disaggregated runs" in colocated.skipped["disagg_handoff_s"]


def _row(**kw) -> E2ERow:
    """A row of the generator's gap analysis (a Dynamo image): it ran the generator's rule."""
    base = dict(id="x", engine="trtllm", version="1.2.0rc6", model="meta-llama/Llama-3.1-70B",
                system="b200_sxm", precision="fp8", mode="agg", isl=8192, osl=1024,
                concurrency=64, tp=4, pp=1, dp=1, ep=1, ttft_ms=1.0, tpot_ms=1.0,
                source="source_file=/x.csv; gtl_job_id=1; dynamo_version=0.9.0")
    return E2ERow(**{**base, **kw})


def test_measured_rows_get_the_generator_flags():
    """trtllm.rule: agg max_num_tokens = ceil((bs + isl + 1500) / 32) * 32 = ceil(9756 / 32)
    * 32 = 305 * 32 = 9760; max_seq_len = isl + osl + 1500 = 10716; max_batch_size = bs."""
    pool = deployment(_row(), Path("."))["pools"][0]
    assert pool["max_num_batched_tokens"] == 9760
    assert pool["max_model_len"] == 10716
    assert pool["max_num_seqs"] == 64
    assert pool["engine"] == "trtllm" and pool["gpu"] == "b200"
    vllm = deployment(_row(engine="vllm"), Path("."))["pools"][0]
    assert vllm["max_num_batched_tokens"] == 64 + 8192 + 1500  # vllm.rule, no rounding


def test_rows_serveplan_cannot_express_say_why():
    assert "on a dense model" in expressible(_row(ep=4), Path("."))
    assert expressible(_row(precision="fp4"), Path(".")) is None  # ModelOpt NVFP4 recipe
    assert expressible(_row(system="b300_sxm"), Path(".")) is None
    assert expressible(_row(), Path(".")) is None


def test_sglang_agg_rows_get_mixed_chunks_and_the_prefill_budget():
    """sglang.rule: ``agg enable_mixed_chunk = true`` and ``max_prefill_tokens = isl + 1500``
    (no batch-size term, unlike vLLM / TRT-LLM); a dense model's page is the simulator's
    16-token block, so 8192 + 1500 = 9692 is cut to 605 * 16 = 9680."""
    pool = deployment(_row(engine="sglang"), Path("."))["pools"][0]
    assert pool["enable_mixed_chunk"] is True
    assert pool["max_num_batched_tokens"] == 9680
    gpu_only = deployment(_row(engine="sglang"), Path("."), engine=False)["pools"][0]
    assert "enable_mixed_chunk" not in gpu_only


def test_first_order_solve_matches_a_hand_computation():
    """Two runs, TTFT = 100 / 300 ms + 1000 x (ms per s of front-end latency x), TPOT
    untouched: the measured 150 / 350 ms are met exactly at x = 0.05 s."""
    from serveplan.estimator.runtime_fit import fit_first_order

    pred0 = np.array([[100.0, 10.0], [300.0, 20.0]])
    jac = np.array([[[1000.0], [0.0]], [[1000.0], [0.0]]])
    measured = np.array([[150.0, 10.0], [350.0, 20.0]])
    x = fit_first_order(pred0, jac, measured, np.zeros(1), np.array([1.0]))
    assert x[0] == pytest.approx(0.05, rel=1e-4)


def test_a_run_far_off_barely_pulls_the_fit_whatever_the_start():
    """Six runs, TTFT = 100 ms + 1000 x: five measure 150 ms (x = 0.05), one 1000 ms (an
    engine that stalled). With r = ln(pred / measured) / 0.1 the Cauchy loss is stationary
    where 5 psi(r_in) + psi(r_out) = 0, psi(r) = 2r / (1 + r^2) (every run's dr/dx is the
    same and cancels); its root above 0.05 is solved here with brentq. Soft L1 (psi(r) =
    2r / sqrt(1 + r^2)) would stop where the five runs sit 2 % high (x ~ 0.053). The Cauchy
    loss has a second minimum near the stalled run (x ~ 0.85): started there, the fit still
    finds the first, since it starts from the convex soft-L1 minimum."""
    from scipy.optimize import brentq

    from serveplan.estimator.runtime_fit import fit_first_order

    jac = np.array([[[1000.0], [0.0]]] * 6)
    measured = np.array([[150.0, 10.0]] * 5 + [[1000.0, 10.0]])

    def psi_sum(x):
        r_in, r_out = (np.log((100.0 + 1000.0 * x) / m) / 0.1 for m in (150.0, 1000.0))
        return 5 * 2 * r_in / (1 + r_in**2) + 2 * r_out / (1 + r_out**2)

    expected = brentq(psi_sum, 0.05, 0.2)
    assert expected == pytest.approx(0.0502, abs=1e-4)  # 150 ms x e^0.00105 -> 0.05016
    for start in (0.0, 0.9):  # the predictions given are those at the start
        pred0 = np.array([[100.0 + 1000.0 * start, 10.0]] * 6)
        x = fit_first_order(pred0, jac, measured, np.array([start]), np.array([1.0]))
        assert x[0] == pytest.approx(expected, rel=1e-3)


def test_a_term_that_moves_no_median_is_reported_not_fitted():
    """Predictions that ignore the per-layer sync term (as an async engine hides CPU work
    behind the GPU step) leave it at its start value, with why."""
    measured = np.array([[150.0, 10.0], [350.0, 20.0]])

    def predict(t):
        return np.array([[100.0, 10.0], [300.0, 20.0]]) + np.array([[1e3, 0.0]]) * \
            t.frontend_output_s

    fit = fit_terms(predict, measured, tp=np.array([1, 2]),
                    names=("frontend_output_s", "tp_sync_per_layer_s"))
    assert fit.fitted == ("frontend_output_s",)
    assert fit.terms.frontend_output_s == pytest.approx(0.05, rel=1e-3)
    assert fit.terms.tp_sync_per_layer_s == 0.0
    assert "moves no median" in fit.skipped["tp_sync_per_layer_s"]
