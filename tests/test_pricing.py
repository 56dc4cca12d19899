"""Prices, Frontier's spend ratio and cost efficiency, and the search over several GPU types
ranked per dollar (serveplan.pricing, serveplan.search_dataset)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import SLO
from serveplan.deployments import Deployment, PDDeployment, Pool
from serveplan.pricing import (
    cost_efficiency,
    default_prices,
    hourly_cost,
    parse_prices,
    price_table,
    spend_ratio,
)
from serveplan.search import SearchSpec, count_strategies, enumerate_strategies, run_search
from serveplan.user_input import UserError


def _pd(gpu_p, n_p, tp_p, gpu_d, n_d, tp_d):
    return PDDeployment(prefill=Pool(model="llama-3.1-8b", gpu=gpu_p, tp=tp_p,
                                     num_instances=n_p),
                        decode=Pool(model="llama-3.1-8b", gpu=gpu_d, tp=tp_d,
                                    num_instances=n_d))


def test_every_default_price_has_a_source_and_a_catalog_gpu():
    for name, (usd, source) in default_prices().items():
        assert usd > 0 and len(source) > 20, name
        assert price_table()[name] == usd


def test_prices_parse_with_aliases_and_bad_ones_are_named():
    assert parse_prices(["h100-sxm=2.5,h20=1.2", "b200=6"]) == {"h100": 2.5, "h20": 1.2,
                                                                 "b200": 6.0}
    for bad in ("h100", "h100=abc", "h100=-1", "=3", "h100=inf"):
        with pytest.raises(UserError, match="--price: expected GPU=DOLLARS_PER_HOUR"):
            parse_prices([bad])
    with pytest.raises(UserError, match="--price: unknown GPU 'h1000'"):
        parse_prices(["h1000=2"])


def test_hourly_cost_by_hand():
    prices = {"h100": 3.0, "h20": 1.5}
    # 2 prefill instances at TP 2 on H100 + 3 decode instances at TP 1 on H20
    assert hourly_cost(_pd("h100", 2, 2, "h20", 3, 1), prices) == 2 * 2 * 3.0 + 3 * 1 * 1.5
    colocated = Deployment(model="llama-3.1-8b", gpu="h100", tp=2, num_instances=4)
    assert hourly_cost(colocated, price_table()) == pytest.approx(4 * 2 * 2.95)
    with pytest.raises(UserError, match="no price for GPU 'l4': give one with --price l4="):
        hourly_cost(Deployment(model="llama-3.1-8b", gpu="l4"), prices)


def test_spend_ratios_of_frontiers_heterogeneous_study():
    """Frontier §6.2 prices H800 at $3.49/h and H20 at $1.59/h over 8 GPUs: PDD with the
    decode role on H20 has SR 1.37 at P:D = 1:1 and 1.69 at P:D = 2:6 (its Figure 14)."""
    prices = {"h800": 3.49, "h20": 1.59}
    baseline = hourly_cost(_pd("h800", 4, 1, "h800", 4, 1), prices)
    assert baseline == pytest.approx(8 * 3.49)
    one_to_one = hourly_cost(_pd("h800", 4, 1, "h20", 4, 1), prices)
    two_to_six = hourly_cost(_pd("h800", 2, 1, "h20", 6, 1), prices)
    assert round(spend_ratio(one_to_one, baseline), 2) == 1.37
    assert round(spend_ratio(two_to_six, baseline), 2) == 1.69


def test_cost_efficiency_by_hand():
    # 10 req/s for $8/h against 12 req/s for $12/h: (10/8) / (12/12) = 1.25
    assert cost_efficiency(10.0, 8.0, 12.0, 12.0) == pytest.approx(1.25)
    assert cost_efficiency(0.0, 8.0, 12.0, 12.0) == 0.0  # an SLO-breaking placement
    assert math.isnan(cost_efficiency(10.0, 8.0, 0.0, 12.0))


SPEC = dict(model="llama-3.1-8b", gpu="h100,h20", gpus=4, isl=1024, osl=64, tp=(1, 2),
            slo=SLO(ttft_ms=800, tpot_ms=40), fidelity="analytic", num_requests=100,
            seeds=1, max_decide=40)


def test_several_gpu_types_enumerate_every_role_placement():
    spec = SearchSpec(**SPEC)
    strategies = enumerate_strategies(spec)
    assert len(strategies) == count_strategies(spec)
    one = SearchSpec(**{**SPEC, "gpu": "h100"})
    assert len(strategies) == 2 * sum(1 for d in enumerate_strategies(one)
                                      if isinstance(d, Deployment)) + 4 * sum(
        1 for d in enumerate_strategies(one) if isinstance(d, PDDeployment))
    pairs = {(d.prefill.gpu, d.decode.gpu) for d in strategies if isinstance(d, PDDeployment)}
    assert pairs == {("h100", "h100"), ("h100", "h20"), ("h20", "h100"), ("h20", "h20")}


@pytest.fixture(scope="module")
def per_dollar(oracle_8b):
    return run_search(SearchSpec(**SPEC, rank_by="dollar", prices={"h20": 1.2}))


def test_a_per_dollar_search_ranks_by_requests_per_dollar(per_dollar):
    ds = per_dollar
    decided = ds.where(ds["status"] == "decided", drop=True)
    assert decided.sizes["strategy"] >= 4
    prices = {"h100": 2.95, "h20": 1.2}  # the default and the override
    for i in range(decided.sizes["strategy"]):
        r = decided.isel(strategy=i)
        by_hand = (int(r["n_prefill"]) * int(r["tp_prefill"]) * prices[str(r["gpu_prefill"].values)]
                   + (int(r["n_decode"]) * int(r["tp_decode"]) * prices[str(r["gpu_decode"].values)]
                      if str(r["architecture"].values) == "pd" else 0.0))
        assert float(r["cost_per_hour"]) == pytest.approx(by_hand)
        assert float(r["goodput_per_dollar"]) == pytest.approx(3600 * float(r["goodput"])
                                                               / by_hand)
    per = decided["goodput_per_dollar"].values
    assert (np.diff(per) <= 1e-9).all()  # rank order is per dollar
    assert ds.attrs["rank_by"] == "dollar"


def test_cost_efficiency_is_against_the_best_homogeneous_strategy(per_dollar):
    ds = per_dollar
    base = ds.attrs["baseline"]
    assert base.endswith("-h100")
    row = ds.where(ds["name"] == base, drop=True).isel(strategy=0)
    assert float(row["cost_efficiency"]) == pytest.approx(1.0)
    assert float(row["spend_ratio"]) == pytest.approx(1.0)
    homogeneous = ((ds["gpu_prefill"] == "h100") & (ds["gpu_decode"] == "h100")
                   & (ds["status"] == "decided"))
    assert (ds["cost_efficiency"].values[homogeneous.values] <= 1.0 + 1e-9).all()
    zero = (ds["status"] == "decided") & (ds["goodput"] == 0)
    assert (ds["cost_efficiency"].values[zero.values] == 0).all()


def test_ranking_per_dollar_needs_every_price_before_anything_runs():
    with pytest.raises(UserError, match="no price for GPU 'l4'"):
        run_search(SearchSpec(**{**SPEC, "gpu": "h100,l4"}, rank_by="dollar"))


def test_the_command_reports_money_and_refuses_a_bad_price():
    out = CliRunner().invoke(app, ["search", "--gpu", "h100,h20", "--gpus", "2", "--tp", "1",
                                   "--isl", "512", "--osl", "32", "--fidelity", "analytic",
                                   "--rank-by", "dollar", "-n", "100", "--seeds", "1"])
    assert out.exit_code == 0, out.output
    assert "requests per dollar" in out.output and "$/h" in out.output
    bad = CliRunner().invoke(app, ["search", "--price", "h100=cheap"])
    assert bad.exit_code == 1
    assert "--price: expected GPU=DOLLARS_PER_HOUR" in bad.output
    assert "Traceback" not in bad.output
