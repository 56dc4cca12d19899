"""Pareto frontiers, plots and launch export (serveplan/pareto.py, plots.py, launch.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import SLO
from serveplan.deployments import gpus, parse_deployment
from serveplan.errors import UserError
from serveplan.launch import hf_repo, place, sglang_commands, vllm_commands
from serveplan.pareto import frontier, pareto_points
from serveplan.plots import plot, series_styles
from serveplan.results_io import missing_units, write_netcdf
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
    assert r.exit_code == 1 and "is a sweep result; export needs a search result" in r.output


# ----------------------------------------------------------------------------- frontier
def _brute_force_frontier(x, y) -> set:
    """(x, y) values no other point weakly dominates with one strict improvement."""
    pts = set(zip(x, y, strict=True))
    return {p for p in pts if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=30))
def test_frontier_is_the_non_dominated_set(points):
    x, y = zip(*points, strict=True)
    df = pd.DataFrame({"tok_s_per_user": x, "throughput_per_gpu": y})
    front = frontier(df)
    got = list(zip(front["tok_s_per_user"], front["throughput_per_gpu"], strict=True))
    assert len(got) == len(set(got))  # of exact duplicates one stays
    assert set(got) == _brute_force_frontier(x, y)


def test_dominated_ties_leave_the_frontier():
    """The issue's numbers: three designs at 197.895 tok/s/user whose speeds differ only in
    the last bits; only the one with the most throughput per GPU belongs."""
    speed = 197.895133
    df = pd.DataFrame({"tok_s_per_user": [speed * (1 + 3e-15), speed, speed * (1 + 6e-15),
                                          219.35, 180.26],
                       "throughput_per_gpu": [65.70, 65.78, 32.91, 32.89, 131.05]})
    assert sorted(frontier(df).index) == [1, 3, 4]


def _synthetic_sweep(values: dict, dims: dict, grid: dict) -> xr.Dataset:
    """A sweep-shaped Dataset (variables as serveplan.sweep writes them) from arrays."""
    shape = tuple(len(v) for v in dims.values())
    full = {"status": np.full(shape, "ok", dtype=object),
            "architecture": np.full(shape, "colocated", dtype=object),
            "strategy": np.full(shape, "1m", dtype=object), "gpus": np.ones(shape, int),
            "ttft_slo_p_s": np.full(shape, 0.1), **values}
    full["tpot_slo_p_s"] = 1.0 / full["tok_s_per_user"]
    data = {k: (list(dims), np.asarray(v)) for k, v in full.items()}
    base = {"deployment": {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1},
            "slo": {"ttft_ms": 500, "tpot_ms": 50}}
    return xr.Dataset(data, coords=dims, attrs={
        "kind": "sweep", "grid_fields": json.dumps(grid),
        "config": json.dumps({"base": base, "grid": {k: list(map(str, dims[v]))
                                                     for k, v in grid.items()}})})


def test_seeds_are_averaged_before_the_frontier():
    speed = np.array([[100.0, 110.0], [50.0, 70.0], [20.0, 20.0]])  # rate x seed
    thr = np.array([[10.0, 30.0], [40.0, 60.0], [90.0, 70.0]])
    ds = _synthetic_sweep({"tok_s_per_user": speed, "output_tok_s_per_gpu": thr,
                           "arrival_rate": np.array([[1.0] * 2, [2.0] * 2, [4.0] * 2])},
                          {"rate": [1, 2, 4], "seed": [0, 1]},
                          {"workload.rate": "rate", "seed": "seed"})
    df = pareto_points(ds).sort_values("rate")
    assert len(df) == 3 and (df["seeds"] == 2).all()
    np.testing.assert_allclose(df["tok_s_per_user"], speed.mean(axis=1))
    np.testing.assert_allclose(df["throughput_per_gpu"], thr.mean(axis=1))
    assert df["frontier"].all()
    failed = ds.copy(deep=True)
    failed["status"][1, 1] = "oom"  # a design counts only if every seed ran
    assert sorted(pareto_points(failed)["rate"]) == [1.0, 4.0]


def test_one_frontier_per_model_and_labels():
    speed = np.array([[100.0, 50.0], [90.0, 40.0]])  # model x rate; model b slower...
    thr = np.array([[10.0, 20.0], [5.0, 8.0]])  # ...and with less throughput everywhere
    ds = _synthetic_sweep({"tok_s_per_user": speed, "output_tok_s_per_gpu": thr,
                           "arrival_rate": np.array([[2.0, 4.0], [2.0, 4.0]])},
                          {"model": ["a", "b"], "rate": [2, 4]},
                          {"deployment.model": "model", "workload.rate": "rate"})
    df = pareto_points(ds)
    assert df["frontier"].all()  # b is dominated by a, but has its own frontier
    assert set(df["label"]) == {"1m tp=1 @ 2 req/s", "1m tp=1 @ 4 req/s"}


def test_min_speed_changes_the_table(sweep_ds, tmp_path):
    sw = write_netcdf(sweep_ds, tmp_path / "sw.nc")
    df = pareto_points(sweep_ds)
    front = df[df["frontier"]].sort_values("tok_s_per_user")
    cut = float(front["tok_s_per_user"].iloc[len(front) // 2])
    rows = {}
    for extra in ([], ["--min-speed", f"{cut}"]):
        r = CliRunner().invoke(app, ["pareto", str(sw), *extra], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        rows[bool(extra)] = set(re.findall(r"\d+m tp=\d+ @ [\d.]+ req/s", r.output))
    slow = {lbl for lbl, s in zip(front["label"], front["tok_s_per_user"], strict=True)
            if s < cut}
    assert slow and slow <= rows[False] and not slow & rows[True]
    assert rows[True] and rows[True] < rows[False]


def _attrs(ds: xr.Dataset, drop: str | None = None, **values) -> xr.Dataset:
    """``ds`` with the attribute ``drop`` removed and ``values`` set."""
    out = ds.copy()
    out.attrs = {**{k: v for k, v in ds.attrs.items() if k != drop}, **values}
    return out


@pytest.mark.parametrize(("command", "which", "edit", "message"), [
    ("pareto", "sweep", lambda ds: ds.drop_vars("arrival_rate"),
     "a sweep result without the variable 'arrival_rate' (written by another serveplan "
     "version, or edited?); pareto reads it"),
    ("pareto", "sweep", lambda ds: ds.assign(gpus=ds["gpus"].astype(str)),
     "variable 'gpus' holds text values; pareto reads numbers there"),
    ("pareto", "search", lambda ds: _attrs(ds, drop="spec"),
     "a search result without its 'spec' attribute (written by another serveplan version, "
     "or edited?); pareto reads it"),
    ("plot", "sweep", lambda ds: ds.drop_vars("ttft_slo_p_s"),
     "a sweep result without the variable 'ttft_slo_p_s' (written by another serveplan "
     "version, or edited?); plot --kind latency-vs-rate reads it"),
    ("plot", "sweep", lambda ds: ds.assign(tpot_slo_p_s=ds["tpot_slo_p_s"].astype(str)),
     "variable 'tpot_slo_p_s' holds text values; plot --kind latency-vs-rate reads numbers"),
    ("plot", "sweep", lambda ds: _attrs(ds, config="{broken"),
     "attribute 'config' is not JSON (Expecting property name enclosed in double quotes); "
     "was the file edited?"),
    ("plot", "search", lambda ds: ds.drop_vars("goodput_low"),
     "a search result without the variable 'goodput_low'"),
    ("plot", "search", lambda ds: ds.assign(gpus=ds["gpus"].astype(str)),
     "variable 'gpus' holds text values; plot --kind bars reads numbers there"),
    ("plot", "search", lambda ds: _attrs(ds, spec="[1, 2]"),
     "attribute 'spec' holds JSON list, not a mapping"),
    ("plot", "search", lambda ds: _attrs(ds, slo='{"ttft_ms": "fast"}'),
     'attribute \'slo\': ttft_ms is "fast", not a number'),
])
def test_edited_results_get_one_error_naming_what_they_lack(sweep_ds, search_ds, tmp_path,
                                                           command, which, edit, message):
    """A result edited (or written by another version) without what pareto or a plot kind
    reads: one error naming the file and what is wrong, not xarray's KeyError, a JSON
    parser's position or a format error's traceback; no figure written."""
    path = write_netcdf(edit(sweep_ds if which == "sweep" else search_ds),
                        tmp_path / "edited.nc", kind=which)
    png = tmp_path / "p.png"
    r = CliRunner().invoke(app, [command, str(path), *(["-o", str(png)] if command == "plot"
                                                       else [])])
    assert r.exit_code == 1 and "Traceback" not in r.output and not png.exists()
    assert f"error: {path}: " in r.stderr and message in " ".join(r.stderr.split())


def test_plot_refuses_a_goodput_interval_that_is_not_a_number(tmp_path):
    """A goodput result's interval is read from its attributes: text there is named."""
    ds = xr.Dataset({name: (("rate", "est"), np.full((2, 3), 0.1)) for name in
                     ("ttft_p_s", "tpot_p_s")}, coords={"rate": [1.0, 2.0]},
                    attrs={"goodput": 1.5, "goodput_low": "1.2", "goodput_high": 1.8})
    path = write_netcdf(ds, tmp_path / "g.nc", kind="goodput")
    r = CliRunner().invoke(app, ["plot", str(path), "-o", str(tmp_path / "g.png")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert ("attribute 'goodput_low' is '1.2', not a number; plot --kind latency-vs-rate "
            "reads a number there") in " ".join(r.stderr.split())
    ds.attrs["goodput_low"] = 1.2
    r = CliRunner().invoke(app, ["plot", str(write_netcdf(ds, tmp_path / "h.nc", kind="goodput")),
                                 "-o", str(tmp_path / "h.png")])
    assert r.exit_code == 0 and (tmp_path / "h.png").stat().st_size > 0


def test_export_names_an_edited_search_result(search_ds, tmp_path):
    """export reads rank, name and the ranked strategy's deployment (JSON text)."""
    no_rank = write_netcdf(search_ds.drop_vars("rank"), tmp_path / "a.nc", kind="search")
    r = CliRunner().invoke(app, ["export", "vllm", str(no_rank), "--rank", "1"])
    assert r.exit_code == 1 and "without the variable 'rank'" in " ".join(r.stderr.split())
    broken = search_ds.copy()
    first = int((broken["rank"].values == 1).nonzero()[0][0])
    deployments = broken["deployment"].values.astype(object)
    deployments[first] = "{not json"
    broken["deployment"] = (broken["deployment"].dims, deployments)
    path = write_netcdf(broken, tmp_path / "b.nc", kind="search")
    r = CliRunner().invoke(app, ["export", "vllm", str(path), "--rank", "1"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "the deployment of rank 1 is not JSON" in " ".join(r.stderr.split())


def test_result_files_carry_kind_and_units(sweep_ds, search_ds, tmp_path):
    for ds, kind in ((sweep_ds, "sweep"), (search_ds, "search")):
        with xr.open_dataset(write_netcdf(ds, tmp_path / f"{kind}.nc")) as back:
            assert back.attrs["kind"] == kind and missing_units(back) == []
    assert back["goodput"].attrs["units"] == "req/s" and back["gpus"].attrs["units"] == "GPUs"
    out = tmp_path / "p.nc"
    r = CliRunner().invoke(app, ["pareto", str(tmp_path / "sweep.nc"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    with xr.open_dataset(out) as back:
        assert back.attrs["kind"] == "pareto" and missing_units(back) == []
        assert back["tok_s_per_user"].attrs["units"] == "tokens/s/user"


# ----------------------------------------------------------------------------- plots
def test_series_styles_are_distinct():
    for n in (3, 10, 12, 20):
        styles = series_styles(n)
        assert len(set(styles)) == n and len({c for c, _ in styles}) == n
        assert len({m for _, m in styles}) == min(n, 12)


def test_latency_plot_has_one_entry_per_series_with_data(sweep_ds, tmp_path, monkeypatch):
    import serveplan.plots as plots

    ds = sweep_ds.copy(deep=True)
    for var in ("ttft_slo_p_s", "tpot_slo_p_s"):
        ds[var][0, :] = np.nan  # num_instances=1 has no data
    seen = {}

    def keep(fig, path):
        seen["labels"] = [t.get_text() for ax in fig.axes if ax.get_legend()
                          for t in ax.get_legend().get_texts()]
        seen["title"] = fig._suptitle.get_text()
        plots._plt().close(fig)

    monkeypatch.setattr(plots, "_save", keep)
    plot(ds, "latency-vs-rate", tmp_path / "l.png")
    assert [lbl for lbl in seen["labels"] if "num_instances" in lbl] == ["num_instances=2"]
    assert {"TTFT SLO 300 ms", "TPOT SLO 30 ms"} <= set(seen["labels"])
    assert "llama-3.1-8b on h100" in seen["title"] and "TTFT ≤ 300 ms" in seen["title"]


# ----------------------------------------------------------------------------- export
def _serve_lines(lines):
    """(node, [gpu ids], port) of each started instance, from the per-node blocks."""
    node, out = 0, []
    for line in lines:
        m = re.match(r"# ===== on \S+ \(node (\d+)\)", line)
        if m:
            node = int(m.group(1))
        m = re.match(r"CUDA_VISIBLE_DEVICES=([\d,]+) .*--port (\d+)", line)
        if m:
            out.append((node, [int(g) for g in m.group(1).split(",")], int(m.group(2))))
    return out


@pytest.mark.parametrize("deployment", [
    {**COLOCATED, "num_instances": 7},  # 14 GPUs
    {**PD, "prefill": {**PD["prefill"], "num_instances": 5, "tp": 2},
     "decode": {**PD["decode"], "num_instances": 1, "tp": 4}},  # 5p1d-tp2/4: 14 GPUs
    {**COLOCATED, "num_instances": 3, "tp": 4},
])
def test_instances_are_laid_out_per_node(deployment):
    lines = vllm_commands(deployment)
    served = _serve_lines(lines)
    used = [(node, g) for node, ids, _ in served for g in ids]
    assert len(used) == len(set(used)) == gpus(parse_deployment(deployment))
    assert all(0 <= g < 8 for _, g in used)  # CUDA ids count from 0 on every node
    assert len({p for _, _, p in served}) == len(served)
    nodes = max(n for n, _ in used) + 1
    assert nodes == -(-len(used) // 8)  # these layouts pack without gaps
    assert ("# ===== on node1 (node 1) =====" in lines) == (nodes > 1)


def test_fourteen_gpus_use_two_hosts_and_given_names():
    lines = vllm_commands({**COLOCATED, "num_instances": 7}, hosts=["a", "b"])
    assert not any("CUDA_VISIBLE_DEVICES=10" in ln for ln in lines)
    assert "# ===== on b (node 1) =====" in lines
    assert lines[-1].endswith("a:8103, b:8104, b:8105, b:8106 (any HTTP load balancer)")
    with pytest.raises(UserError, match="--hosts names 1 host"):
        vllm_commands({**COLOCATED, "num_instances": 7}, hosts=["a"])


def test_instance_larger_than_a_node_takes_whole_nodes():
    big = {"model": "llama-3.1-405b", "gpu": "h100", "tp": 16, "max_model_len": 8192}
    p = place(big)
    assert [(x.nodes, x.gpus) for x in p] == [((0, 1), tuple(range(8)))]
    lines = vllm_commands(big)
    assert "ray start --head --port 6379" in lines
    assert "ray start --address node0:6379 --block &" in lines
    sg = sglang_commands(big)
    assert sum("--nnodes 2" in ln for ln in sg) == 2 and any("--node-rank 1" in ln for ln in sg)
    with pytest.raises(UserError, match="not whole nodes"):
        place({**big, "tp": 12})


def test_export_refuses_unfit_with_the_planners_numbers():
    from serveplan.estimator.memory import plan_memory
    from serveplan.estimator.specs import Parallelism

    plan = plan_memory("llama-3.1-405b", "h100", Parallelism(tp=1))
    short = re.search(r"short by ([\d.]+) GiB", plan.reason).group(1)
    with pytest.raises(UserError, match=rf"short by {re.escape(short)} GiB"):
        vllm_commands({"model": "llama-3.1-405b", "gpu": "h100", "tp": 1})


@pytest.mark.parametrize("port, message", [(65535, "above 65535"), (7999, "front end"),
                                           (5599, "NIXL")])
def test_ports_must_fit(port, message):
    with pytest.raises(UserError, match=message):
        vllm_commands(PD, base_port=port)
