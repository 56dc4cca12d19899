"""Pareto frontiers, plots and launch export (serveplan/pareto.py, plots.py, launch.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import SLO
from serveplan.launch import hf_repo, sglang_commands, vllm_commands
from serveplan.pareto import frontier, pareto_points
from serveplan.plots import plot
from serveplan.results_io import write_netcdf
from serveplan.search import SearchSpec, run_search
from serveplan.sweep import SweepSpec, run_sweep

COLOCATED = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 2, "num_instances": 2,
             "max_model_len": 4096, "max_num_seqs": 128}
PD = {"architecture": "pd", "prefill": {**COLOCATED, "num_instances": 2, "tp": 1},
      "decode": {**COLOCATED, "num_instances": 1, "tp": 4}}


def test_frontier_keeps_only_undominated_points():
    pts = pd.DataFrame({"tok_s_per_user": [10, 20, 30, 15, 25],
                        "throughput_per_gpu": [100, 80, 50, 70, 40]})
    assert frontier(pts).index.tolist() == [0, 1, 2]


@pytest.fixture(scope="module")
def sweep_ds(tmp_path_factory):
    spec = SweepSpec(base={"deployment": COLOCATED, "workload": {
        "kind": "poisson", "rate": 4, "num_requests": 300, "isl": 1024, "osl": 32},
        "slo": {"ttft_ms": 300, "tpot_ms": 30}},
        grid={"deployment.num_instances": [1, 2], "workload.rate": [2, 8, 32]},
        fidelity="request")
    return run_sweep(spec, tmp_path_factory.mktemp("s") / "s.nc")


@pytest.fixture(scope="module")
def search_ds():
    spec = SearchSpec(model="llama-3.1-8b", gpu="h100", gpus=2, tp=(1,), isl=1024, osl=32,
                      slo=SLO(ttft_ms=300, tpot_ms=30), fidelity="request", num_requests=300,
                      seeds=1)
    return run_search(spec)


def test_pareto_from_sweep_respects_the_ttft_limit(sweep_ds):
    df = pareto_points(sweep_ds, ttft_max_s=0.1)
    assert len(df) == 6 and set(df["architecture"]) == {"colocated"}
    assert not (df["frontier"] & ~df["meets_ttft"]).any()
    on = df[df["frontier"]].sort_values("tok_s_per_user")
    assert on["throughput_per_gpu"].is_monotonic_decreasing


def test_pareto_from_search_has_both_architectures(search_ds):
    df = pareto_points(search_ds)
    assert set(df["architecture"]) <= {"colocated", "pd"} and len(df) >= 1
    assert (df["throughput_per_gpu"] > 0).all()


def test_plots_write_pngs(sweep_ds, search_ds, tmp_path):
    plot(sweep_ds, "latency-vs-rate", tmp_path / "a.png")
    plot(search_ds, "bars", tmp_path / "b.png")
    from serveplan.fidelity import evaluate

    m = evaluate(COLOCATED, {"kind": "poisson", "rate": 4, "num_requests": 200, "isl": 512,
                             "osl": 16}, 4.0, fidelity="request")
    plot(m.to_dataset(), "histograms", tmp_path / "c.png", ttft_s=0.1, tpot_s=0.02)
    for name in "abc":
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="kind"):
        plot(sweep_ds, "pie", tmp_path / "d.png")


def test_vllm_and_sglang_commands():
    assert hf_repo("llama-3.1-8b") == "meta-llama/Llama-3.1-8B"
    col = vllm_commands(COLOCATED)
    serve = [c for c in col if c.startswith("CUDA")]
    assert len(serve) == 2 and "CUDA_VISIBLE_DEVICES=2,3" in serve[1]
    assert "--tensor-parallel-size 2" in serve[0] and "--max-num-seqs 128" in serve[0]
    assert "--port 8101" in serve[1]
    pd_ = vllm_commands(PD)
    serve = [c for c in pd_ if c.startswith("CUDA")]
    assert len(serve) == 3 and all("NixlConnector" in c for c in serve)
    assert "CUDA_VISIBLE_DEVICES=2,3,4,5" in serve[2] and "--tensor-parallel-size 4" in serve[2]
    assert any("--decoder-ports 8102" in c for c in pd_)
    sg = sglang_commands(PD)
    assert sum("--disaggregation-mode prefill" in c for c in sg) == 2
    assert any("--pd-disaggregation" in c for c in sg)


def test_cli_pareto_plot_export(sweep_ds, search_ds, tmp_path):
    sw = write_netcdf(sweep_ds, tmp_path / "sw.nc")
    se = write_netcdf(search_ds, tmp_path / "se.nc")
    r = CliRunner().invoke(app, ["pareto", str(sw), "--ttft", "0.2", "--plot",
                                 str(tmp_path / "p.png"), "--csv", str(tmp_path / "p.csv")])
    assert r.exit_code == 0, r.output
    assert pd.read_csv(tmp_path / "p.csv")["frontier"].any()
    r = CliRunner().invoke(app, ["plot", str(se), "--kind", "bars", "--out",
                                 str(tmp_path / "b.png")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["export", "vllm", str(se), "--rank", "1"])
    assert r.exit_code == 0 and "vllm serve meta-llama/Llama-3.1-8B" in r.stdout
    r = CliRunner().invoke(app, ["export", "vllm", str(se), "--rank", "99"])
    assert r.exit_code == 1 and "no strategy of rank 99" in r.output
    r = CliRunner().invoke(app, ["export", "vllm", str(sw)])
    assert r.exit_code == 1 and "not a search result" in r.output
