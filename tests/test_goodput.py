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
    quantile_interval,
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
