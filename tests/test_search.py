"""Strategy search (serveplan/search.py): enumeration, pruning, ranking, output."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import SLO
from serveplan.deployments import PDDeployment, gpus, strategy_name
from serveplan.fidelity import PreparedDeployment, Workspace
from serveplan.goodput import find_goodput
from serveplan.results_io import read_netcdf, write_netcdf
from serveplan.search import SearchSpec, _workload, enumerate_strategies, run_search

SMALL = dict(model="llama-3.1-8b", gpu="h100", isl=1024, osl=64,
             slo=SLO(ttft_ms=300, tpot_ms=30), fidelity="request", num_requests=600,
             seeds=1, rtol=0.05)


def test_enumeration_covers_xm_and_ypzd_within_budget():
    spec = SearchSpec(**SMALL, gpus=4, tp=(1, 2))
    ds = enumerate_strategies(spec)
    names = sorted(f"{strategy_name(d)}@{gpus(d)}" for d in ds)
    assert len(ds) == 6 + 11
    assert all(gpus(d) <= 4 for d in ds)
    assert "4m@4" in names and "3p1d@4" in names and "1p1d@4" in names  # tp2/tp2
    same = enumerate_strategies(SearchSpec(**SMALL, gpus=4, tp=(1, 2), same_tp=True))
    assert all(d.prefill.tp == d.decode.tp for d in same if isinstance(d, PDDeployment))


@pytest.fixture(scope="module")
def small_search():
    spec = SearchSpec(**SMALL, gpus=3, tp=(1,), top=2)
    return spec, run_search(spec)


def test_search_ranks_decided_strategies_by_goodput_per_gpu(small_search):
    spec, ds = small_search
    decided = ds.where(ds["status"] == "decided", drop=True)
    per_gpu = decided["goodput_per_gpu"].values
    assert decided.sizes["strategy"] >= 2
    assert np.all(np.diff(per_gpu) <= 1e-12)
    assert decided["rank"].values.tolist() == list(range(1, len(per_gpu) + 1))
    assert set(ds["status"].values) <= {"decided", "dominated", "pruned", "budget", "oom",
                                        "invalid"}
    for arch in ds["architecture"].values:
        assert arch in ("colocated", "pd")
    assert np.all(ds["goodput_low"].values[: len(per_gpu)] <= decided["goodput"].values)
    # the interval [low, b) is at least one bisection bracket wide, never zero
    assert np.all(decided["goodput_high"].values > decided["goodput_low"].values)
    assert set(decided["binding"].values) <= {"TTFT", "TPOT", "capacity"}


def test_dominated_and_pruned_strategies_do_not_beat_the_ranking(small_search):
    """Decide the strategies the search skipped: none beats the top-ranked per GPU."""
    spec, ds = small_search
    best = float(ds["goodput_per_gpu"].values[0])
    ws = Workspace()
    skipped = [i for i, s in enumerate(ds["status"].values) if s in ("pruned", "dominated")]
    assert skipped
    for i in skipped:
        dep = json.loads(str(ds["deployment"].values[i]))
        prep = PreparedDeployment(dep, _workload(spec), seeds=(0,), workspace=ws)
        g = find_goodput(prep, spec.slo, fidelity="request", seeds=(0,), rtol=spec.rtol)
        assert g.per_gpu <= best * (1 + spec.rtol)


def test_out_of_memory_strategies_record_why():
    spec = SearchSpec(model="llama-3.1-70b", gpu="h100", gpus=2, tp=(1, 2), isl=1024,
                      osl=64, slo=SLO(ttft_ms=2000, tpot_ms=100), fidelity="analytic",
                      architectures=("colocated",))
    ds = run_search(spec)
    oom = ds.where(ds["status"] == "oom", drop=True)
    assert oom.sizes["strategy"] >= 1
    assert all("GiB" in str(r) for r in oom["reason"].values)
    assert (ds["status"] == "decided").sum() >= 1  # tp=2 fits


def test_search_dataset_roundtrips_netcdf(small_search, tmp_path):
    _, ds = small_search
    path = write_netcdf(ds, tmp_path / "s.nc")
    back = read_netcdf(path)
    assert back.attrs["kind"] == "search"
    assert list(back["name"].values) == list(ds["name"].values)
    np.testing.assert_allclose(back["goodput"].values, ds["goodput"].values)


def test_search_cli_json():
    res = CliRunner().invoke(app, ["search", "--model", "llama-3.1-8b", "--gpus", "2",
                                   "--tp", "1", "--isl", "1024", "--osl", "64", "--ttft",
                                   "0.3", "--tpot", "0.03", "--requests", "400", "--seeds",
                                   "1", "--fidelity", "request", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert rows[0]["rank"] == 1 and rows[0]["goodput_per_gpu"] > 0
    assert rows[0]["binding"] in ("TTFT", "TPOT", "capacity")
    bad = CliRunner().invoke(app, ["search", "--tp", "one"])
    assert bad.exit_code == 1 and "comma-separated" in bad.output


def test_search_ends_with_a_recommendation_and_a_legend():
    """The sentence names the best and the runner-up with the numbers of the JSON output,
    and the gap between them computed here."""
    args = ["search", "--model", "llama-3.1-8b", "--gpus", "2", "--tp", "1", "--isl", "1024",
            "--osl", "64", "--ttft", "0.3", "--tpot", "0.03", "--requests", "400", "--seeds",
            "1", "--fidelity", "request"]
    rows = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    best, second = rows[0], rows[1]
    assert f"Deploy {best['strategy']}" in text
    assert f"{best['goodput_per_gpu']:,.2f} req/s per GPU" in text
    assert f"{best['goodput']:,.2f} req/s in total" in text
    gap = (best["goodput_per_gpu"] - second["goodput_per_gpu"]) / best["goodput_per_gpu"]
    assert f"Runner-up: {second['strategy']}" in text and f"{gap:.1%} lower" in text
    assert ("goal binds" in text) or ("capacity binds" in text)
    for word in ("decided =", "dominated =", "level:", "req/s [a, b)", "binds:"):
        assert word in text
