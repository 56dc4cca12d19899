"""Goodput bisection (serveplan/goodput.py): statistically bracketed, at every fidelity."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from serveplan.config import SLO, PoissonWorkload
from serveplan.errors import UserError
from serveplan.fidelity import PreparedDeployment, evaluate
from serveplan.goodput import (
    RateCheck,
    analytic_goodput,
    check_rate,
    constraints,
    find_goodput,
    meets,
    quantile_interval,
    verifiable_utilisation,
)
from serveplan.results_io import write_netcdf

COLOCATED = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "num_instances": 1,
             "max_model_len": 4096}
PD = {"architecture": "pd", "prefill": dict(COLOCATED), "decode": dict(COLOCATED)}
SLO_P90 = SLO(ttft_ms=500, tpot_ms=50)


def workload(n=2000):
    return PoissonWorkload(kind="poisson", rate=1.0, num_requests=n, isl=2048, osl=64)


@pytest.fixture(scope="module")
def colocated():
    return PreparedDeployment(COLOCATED, workload(), seeds=(0, 1, 2))


@pytest.fixture(scope="module")
def pd():
    return PreparedDeployment(PD, workload(), seeds=(0, 1, 2))


def assert_bracketed(g):
    """Each reported rate meets its predicate and the next evaluated rate does not."""
    for rate, nxt, pred in ((g.low, g.next_low, "met"), (g.rate, g.next_rate, "point"),
                            (g.high, g.next_high, "plausible")):
        here, there = g.check_at(rate), g.check_at(nxt)
        assert getattr(here, pred), (pred, rate)
        assert not getattr(there, pred), (pred, nxt)
        assert nxt <= rate * (1 + g.rtol) + 1e-12
    assert g.low <= g.rate <= g.high


def test_request_level_goodput_is_bracketed(colocated):
    g = find_goodput(colocated, SLO_P90, fidelity="request", seeds=(0, 1, 2))
    assert g.fidelity == "request"
    assert_bracketed(g)
    # at the conservative rate the upper CI of each P90 is within its goal
    here = g.check_at(g.low)
    assert here.ttft.high <= 0.5 or here.attainment["ttft"].low >= 0.9
    assert g.low > 0.5 * g.analytic  # the analytic level brackets the same region


def test_iteration_level_goodput_is_bracketed(colocated):
    g = find_goodput(colocated, SLO_P90, fidelity="iteration", seeds=(0, 1), rtol=0.05)
    assert g.fidelity == "iteration"
    assert_bracketed(g)


def test_pd_goodput_at_request_and_iteration_levels(pd):
    g = find_goodput(pd, SLO_P90, fidelity="request", seeds=(0, 1), rtol=0.05)
    assert g.fidelity == "request" and g.gpus == 2
    assert_bracketed(g)
    it = find_goodput(PreparedDeployment(PD, workload(600), seeds=(0,)), SLO_P90,
                      fidelity="auto", seeds=(0,), rtol=0.05)
    assert it.fidelity == "iteration"
    assert_bracketed(it)
    assert 0.5 * g.rate < it.rate < 2.0 * g.rate


def test_analytic_level_returns_the_analytic_goodput(colocated):
    g = find_goodput(colocated, SLO_P90, fidelity="analytic")
    assert g.rate == g.low == g.high == analytic_goodput(colocated, SLO_P90)
    est = colocated.analytic([g.rate, g.next_rate])
    assert est.ttft_quantile(0.9)[0] <= 0.5 and est.tpot_quantile(0.9)[0] <= 0.05
    assert not (est.ttft_quantile(0.9)[1] <= 0.5 and est.tpot_quantile(0.9)[1] <= 0.05)


def test_common_random_numbers_make_attainment_monotone(colocated):
    rates = np.linspace(6.0, 16.0, 9)
    att = []
    for r in rates:
        m = colocated.evaluate(r, 0, "request")
        att.append(np.mean(m.ttft_s <= 0.3))
    assert np.all(np.diff(att) <= 1e-12)
    a, b = colocated.evaluate(8.0, 1, "request"), colocated.evaluate(4.0, 1, "request")
    np.testing.assert_allclose(a.arrival_s * 2, b.arrival_s)


def test_sequential_seeds_stop_when_decided(colocated):
    easy = check_rate(colocated, 1.0, SLO_P90, fidelity="request", seeds=(0, 1, 2))
    assert easy.verdict == "met" and easy.seeds == 1
    hard = check_rate(colocated, 40.0, SLO_P90, fidelity="request", seeds=(0, 1, 2))
    assert hard.verdict == "violated" and hard.seeds == 1


def test_attainment_slo_form():
    slo = SLO(ttft_ms=500, tpot_ms=50, attainment=0.95)
    (c,) = constraints(slo)
    assert (c.metric, c.target, c.ttft_s, c.tpot_s) == ("both", 0.95, 0.5, 0.05)
    assert [c.metric for c in constraints(SLO(ttft_ms=100))] == ["ttft"]
    with pytest.raises(ValueError, match="goal"):
        constraints(SLO())


def test_quantile_interval_brackets_the_estimate():
    rng = np.random.default_rng(0)
    runs = [rng.exponential(1.0, 5000) for _ in range(3)]
    iv = quantile_interval(runs, 0.9)
    assert iv.low < iv.estimate < iv.high
    assert iv.estimate == pytest.approx(np.log(10), rel=0.05)
    nan = quantile_interval([np.array([np.nan, 1.0, 2.0])], 0.5)
    assert nan.estimate in (1.0, 2.0)


def test_goodput_dataset_roundtrips_netcdf(colocated, tmp_path):
    g = find_goodput(colocated, SLO_P90, fidelity="request", seeds=(0,), rtol=0.05)
    ds = g.to_dataset()
    path = tmp_path / "g.nc"
    write_netcdf(ds, path)
    back = xr.open_dataset(path)
    assert back.attrs["goodput"] == pytest.approx(g.rate)
    assert list(back["stat"].values) == ["estimate", "low", "high"]
    assert set(back["verdict"].values) <= {"met", "uncertain", "violated"}
    back.close()


def test_evaluate_is_the_fidelity_switch():
    m = evaluate(COLOCATED, workload(300), 5.0, seed=3, fidelity="request")
    assert m.fidelity == "request" and len(m) == 300 and np.all(m.ttft_s > 0)
    assert isinstance(check_rate, object) and RateCheck
    with pytest.raises(UserError, match="fidelity"):
        evaluate(COLOCATED, workload(10), 5.0, fidelity="bogus")
    with pytest.raises(UserError, match="analytic"):
        evaluate(COLOCATED, workload(10), 5.0, fidelity="analytic")


# ----------------------------------------------------------------------------- sustainable rates
def test_verifiable_utilisation_is_where_the_relaxation_time_fills_the_run():
    """M/M/1 relaxation time in arrivals, rho / (1 - sqrt(rho))^2 (Abate & Whitt 1987),
    equals the run's n requests exactly at the ceiling; below it the run is longer."""
    for n in (100, 1800, 18000):
        rho = verifiable_utilisation(n)
        assert rho / (1.0 - np.sqrt(rho)) ** 2 == pytest.approx(n, rel=1e-9)
        below = 0.99 * rho
        assert below / (1.0 - np.sqrt(below)) ** 2 < n
    assert verifiable_utilisation(1800) == pytest.approx(1800 / (1 + 1800 ** 0.5) ** 2)
    assert 0.954 < verifiable_utilisation(1800) < 0.955


def test_loose_slo_is_censored_at_the_ceiling_not_reported_above_capacity():
    """With goals no queue can miss, a finite run meets the SLO at any rate, even far above
    capacity (the old answer: 4x the bound). Now no rate above the ceiling is evaluated and
    the result says capacity binds."""
    prep = PreparedDeployment(COLOCATED, workload(600), seeds=(0,))
    loose = SLO(ttft_ms=1e9, tpot_ms=1e9)
    g = find_goodput(prep, loose, fidelity="request", seeds=(0,), rtol=0.05)
    n = 600 - 60  # 10% warm-up
    assert g.requests_per_run == n
    assert g.ceiling == pytest.approx(g.capacity * n / (1 + n ** 0.5) ** 2)
    assert all(c.rate <= g.ceiling * (1 + 1e-12) for c in g.checks)
    assert g.rate <= g.ceiling < g.capacity
    assert g.point_censored and g.binding == "capacity"
    assert g.upper == g.capacity
    assert "at least" in g.sentence() and "Capacity binds" in g.sentence()


def test_the_binding_goal_is_the_one_missed_at_the_next_rate(colocated):
    """Tight TPOT with a loose TTFT binds on TPOT, and the other way round; checked against
    the fractions of the simulated requests at the next rate."""
    for slo, goal in ((SLO(ttft_ms=60_000, tpot_ms=20), "TPOT"),
                      (SLO(ttft_ms=250, tpot_ms=1_000), "TTFT")):
        g = find_goodput(colocated, slo, fidelity="request", seeds=(0,), rtol=0.05)
        assert g.binding == goal and goal in g.sentence()
        m = colocated.evaluate(g.next_rate, 0, "request")
        start = len(m) // 10
        ttft_ok = np.mean(m.ttft_s[start:] <= slo.ttft_ms / 1e3)
        tpot_ok = np.mean(~(m.tpot_s[start:] > slo.tpot_ms / 1e3))
        assert (tpot_ok < ttft_ok) == (goal == "TPOT")
        assert min(ttft_ok, tpot_ok) < 0.9


def test_interval_upper_end_is_the_first_confident_violation(colocated):
    g = find_goodput(colocated, SLO_P90, fidelity="request", seeds=(0, 1), rtol=0.05)
    assert g.upper == g.next_high and g.upper > g.low  # one bracket wide, never zero
    assert g.check_at(g.upper).verdict == "violated"
    assert g.check_at(g.low).verdict == "met"


def test_a_rejected_request_misses_every_goal():
    ttft = np.array([0.1, np.inf, 0.1, 0.9])
    tpot = np.array([0.01, np.nan, np.nan, 0.01])
    for slo, want in ((SLO(ttft_ms=500, tpot_ms=50), [1, 0, 1, 0]),
                      (SLO(tpot_ms=50), [1, 0, 1, 1]),
                      (SLO(ttft_ms=500, tpot_ms=50, attainment=0.9), [1, 0, 1, 0])):
        ok = np.ones(4, dtype=bool)
        for c in constraints(slo):
            ok &= meets(c, ttft, tpot)
        assert ok.astype(int).tolist() == want


def test_a_staged_load_is_rescaled_as_its_schedule():
    """A rate search scales a staged (inference-perf) load's schedule -- each stage's
    offsets from the previous stage's last send -- not the drains that only a run places:
    the unit requests keep their stages (later ones unsent), the requests at rate 2 are the
    schedule divided by 2, open loop."""
    from serveplan.config import InferencePerfWorkload

    w = InferencePerfWorkload(kind="inference-perf", type="constant", isl=256, osl=8,
                              stages=[{"rate": 2, "duration": 3}, {"rate": 4, "duration": 2}])
    prep = PreparedDeployment(COLOCATED, w, seeds=(0,))
    unit = prep.unit_requests(0)
    assert unit.stages is not None and np.isnan(unit.arrival_s[6:]).all()
    at_2 = prep.requests_at(2.0, 0)
    assert at_2.stages is None
    np.testing.assert_allclose(at_2.arrival_s, unit.stages.sends_without_server() / 2.0)


def _engine_profile(tmp_path, name, **terms):
    """The shipped vLLM runtime profile with its terms replaced by ``terms``."""
    import json

    from serveplan.estimator.runtime import load_runtime_profile

    prof = load_runtime_profile("vllm").model_dump(mode="json")
    prof["terms"] = terms
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(prof))
    return str(path)


def test_goodput_simulates_the_engines_runtime(tmp_path):
    """A goodput search sees what a simulation sees: with an engine whose front end adds
    0.1 s of latency to every token, each request's TTFT at the iteration and the request
    level, and the analytic level's TTFT, are exactly 0.1 s longer than with no terms (a
    latency moves no engine step, so the same requests run the same steps) and TPOT is
    unchanged; a disaggregated deployment's handoff of 0.2 s is in the analytic level's KV
    transfer as well."""
    load = PoissonWorkload(kind="poisson", rate=1.0, num_requests=40, isl=512, osl=16)
    engine = {**COLOCATED, "engine": "vllm", "engine_version": "0.11.0"}
    plain = _engine_profile(tmp_path, "plain")
    slow = _engine_profile(tmp_path, "slow", frontend_output_s=0.1)
    preps = [PreparedDeployment({**engine, "runtime_profile": p}, load) for p in (plain, slow)]
    for level in ("iteration", "request"):
        m0, m1 = (prep.evaluate(4.0, 0, level) for prep in preps)
        np.testing.assert_allclose(m1.ttft_s - m0.ttft_s, 0.1, rtol=0, atol=1e-9)
        np.testing.assert_allclose(m1.tpot_s, m0.tpot_s, rtol=0, atol=1e-12)
    a0, a1 = (prep.analytic([2.0, 4.0]) for prep in preps)
    np.testing.assert_allclose(a1.ttft_mean - a0.ttft_mean, 0.1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a1.ttft_quantile(0.9) - a0.ttft_quantile(0.9), 0.1, atol=1e-9)
    handoff = _engine_profile(tmp_path, "handoff", disagg_handoff_s=0.2)
    pds = [PreparedDeployment({"architecture": "pd", "prefill": {**engine, "runtime_profile": p},
                               "decode": {**engine, "runtime_profile": p}}, load)
           for p in (plain, handoff)]
    assert pds[1].kv_transfer_s - pds[0].kv_transfer_s == pytest.approx(0.2, abs=1e-12)
