"""GuideLLM reports (serveplan/runs/guidellm.py) against reports GuideLLM itself wrote
(tests/data/runs/guidellm/, one per release family). Each per-request reading is checked
against the statistics GuideLLM computed from the same requests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.runs import detect_tool, read_run
from serveplan.user_input import UserError

DATA = Path(__file__).parent / "data" / "runs" / "guidellm"
V021, V031 = DATA / "v0.2.1-poisson.json", DATA / "v0.3.1-sweep.json"
V040, V054 = DATA / "v0.4.0-concurrent.json", DATA / "v0.5.4-constant.json"


def _metric(path: Path, name: str, index: int = 0) -> dict:
    return json.loads(path.read_text())["benchmarks"][index]["metrics"][name]["successful"]


@pytest.mark.parametrize("path", [V040, V054], ids=["0.4.0", "0.5.4"])
def test_records_reproduce_guidellms_own_statistics(path):
    """Mean TTFT (ms), mean latency (s) and the prompt tokens of the records read here are
    GuideLLM's figures for the same requests."""
    run = read_run(path)
    assert run.tool == "guidellm" and run.has_requests
    assert run.n == _metric(path, "time_to_first_token_ms")["count"]
    assert np.mean(run.ttft_s) * 1e3 == pytest.approx(
        _metric(path, "time_to_first_token_ms")["mean"], rel=1e-9)
    assert np.mean(run.e2e_s) == pytest.approx(_metric(path, "request_latency")["mean"],
                                               rel=1e-9)
    assert run.input_len.sum() == _metric(path, "prompt_token_count")["total_sum"]
    assert np.all(np.diff(run.send_s) >= 0) and run.send_s[0] == 0.0
    assert run.summary["mean_tpot_s"] * 1e3 == pytest.approx(
        _metric(path, "inter_token_latency_ms")["mean"])


def test_strategies_become_the_loads_guidellm_ran():
    """0.4.0 ``concurrent`` with 4 streams is a closed loop; 0.5.4 ``constant`` at 20/s
    with its default cap of 512 an open loop; the model comes from the requests when
    --model was not given (args.model is null in that report)."""
    closed, constant = read_run(V040), read_run(V054)
    assert (closed.load.kind, closed.load.concurrency) == ("concurrency", 4)
    assert (constant.load.kind, constant.load.request_rate, constant.load.arrival,
            constant.load.concurrency) == ("rate", 20.0, "constant", 512)
    assert json.loads(V054.read_text())["args"]["model"] is None
    assert constant.model == "mock-model"


def test_a_sweep_is_read_one_benchmark_at_a_time():
    with pytest.raises(UserError, match=r"holds 3 benchmarks \(1 synchronous, 2 throughput, "
                                        r"3 constant@9\.99723\); name one as .*:N"):
        read_run(V031)
    with pytest.raises(UserError, match=r":4: no benchmark 4; the file has 3 \(1-3\)"):
        read_run(f"{V031}:4")
    sync, burst = read_run(f"{V031}:1"), read_run(f"{V031}:2")
    assert (sync.load.kind, sync.load.concurrency) == ("concurrency", 1)
    assert (burst.load.kind, burst.load.request_rate) == ("rate", float("inf"))
    assert burst.extras["guidellm_strategy"] == "throughput"
    assert burst.name == "v0.3.1-sweep.json:2"


def test_sampled_records_fall_back_to_the_statistics():
    """0.3.1 kept 3 of 9 records per benchmark (--output-sampling): the replay takes the 9
    from the statistics. GuideLLM's p001 is the 0.1th percentile, p999 the 99.9th."""
    run = read_run(f"{V031}:3")
    assert not run.has_requests and run.n == 9
    assert any("a sample (successful 3 of 9" in w for w in run.warnings)
    ttft = _metric(V031, "time_to_first_token_ms", 2)
    assert run.summary["p0.1_ttft_s"] == pytest.approx(ttft["percentiles"]["p001"] * 1e-3)
    assert run.summary["p99.9_ttft_s"] == pytest.approx(ttft["percentiles"]["p999"] * 1e-3)
    assert run.summary["mean_output_len"] == _metric(V031, "output_token_count", 2)["mean"]


def test_the_020_layout_has_no_p50_and_a_seeded_poisson():
    run = read_run(V021)
    ttft = _metric(V021, "time_to_first_token_ms")
    assert "p50" not in ttft["percentiles"]
    assert run.summary["p50_ttft_s"] == pytest.approx(ttft["median"] * 1e-3)
    assert (run.load.arrival, run.load.request_rate, run.load.seed) == ("poisson", 5.0, 42)
    assert run.model == "mock-model"


def _edited(tmp_path, edit) -> Path:
    data = json.loads(V054.read_text())
    edit(data["benchmarks"][0])
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    return path


def test_warm_up_records_and_failures(tmp_path):
    """0.4+ writes warm-up requests; one that ended before the window is left out. An
    errored request is a failure with no output; the counts follow request_totals."""
    def edit(bench):
        ok = bench["requests"]["successful"]
        early = json.loads(json.dumps(ok[0]))
        early["info"]["timings"]["request_start"] -= 10.0
        early["info"]["timings"]["request_end"] = bench["start_time"] - 1.0
        failed = ok.pop(5)
        failed["info"]["status"] = "errored"
        failed["info"]["timings"]["first_token_iteration"] = None
        bench["requests"]["errored"] = [failed]
        ok.append(early)
        bench["metrics"]["request_totals"].update(successful=14, errored=1)
    run = read_run(_edited(tmp_path, edit))
    assert run.n == 15 and int((~run.success).sum()) == 1
    assert run.output_len[~run.success].tolist() == [-1]
    assert (run.summary["completed"], run.summary["failed"]) == (14.0, 1.0)
    assert detect_tool(tmp_path) == "guidellm"  # the folder holding benchmarks.json


def test_yaml_reports_with_python_tuples_are_read(tmp_path):
    """--output-path x.yaml in 0.4+ writes args.outputs as !!python/tuple."""
    data = json.loads(V054.read_text())
    data["args"]["outputs"] = ("benchmarks.yaml",)
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.dump(data))
    assert "!!python/tuple" in path.read_text()
    assert detect_tool(path) == "guidellm"
    assert read_run(path).n == 15


def test_bad_reports_name_the_file_and_field(tmp_path):
    def edit(bench):
        bench["config"]["strategy"]["type_"] = "burst"
    with pytest.raises(UserError, match=r"benchmarks\.json: benchmarks\[0\]\.config\."
                                        r"strategy\.type_: unknown strategy 'burst'"):
        read_run(_edited(tmp_path, edit))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(UserError, match="empty.json: benchmarks: missing or empty"):
        read_run(empty, "guidellm")


def test_compare_replays_a_guidellm_benchmark():
    result = CliRunner().invoke(app, ["compare", str(V054), "--model", "llama-3.1-8b",
                                      "--gpu", "h100"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "(guidellm, 15 requests)" in text and "mean_ttft" in text


def test_compare_all_runs_of_a_sweep():
    """--all-runs: one row per benchmark with its load; the JSON names each run FILE:N."""
    base = ["compare", str(V031), "--all-runs", "--model", "llama-3.1-8b", "--gpu", "h100"]
    result = CliRunner().invoke(app, base + ["--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output[result.output.index("["):])
    assert [(r["run"], r["load"], r["requests"]) for r in runs] == [
        ("v0.3.1-sweep.json:1", "1 client", 9), ("v0.3.1-sweep.json:2", "all at once", 9),
        ("v0.3.1-sweep.json:3", "9.997 req/s constant", 9)]
    assert runs[0]["metrics"]["mean_ttft_s"]["measured"] == pytest.approx(
        _metric(V031, "time_to_first_token_ms")["mean"] * 1e-3)
    table = CliRunner().invoke(app, base)
    assert table.exit_code == 0 and "measured / predicted (error" in table.output
    plot = CliRunner().invoke(app, base + ["--plot", "x.png"])
    assert plot.exit_code == 1 and "one run at a time" in plot.output
    single = CliRunner().invoke(app, ["compare", str(V054), "--all-runs", "--model",
                                      "llama-3.1-8b", "--gpu", "h100"])
    assert single.exit_code == 0 and "mean_ttft" in single.output  # one run: the usual table


@pytest.mark.parametrize("name", ["v0.2.1-poisson.json", "v0.5.4-constant.json"])
@pytest.mark.parametrize("benchmarks", [[], "1e3", {}])
def test_a_report_with_damaged_benchmarks_is_still_read_as_guidellm(tmp_path, name, benchmarks):
    """The ``benchmarks`` key alone marks a GuideLLM report (no other tool writes it), so a
    report whose benchmarks are empty or not a list gets GuideLLM's message, not vLLM's."""
    data = json.loads((DATA / name).read_text())
    data["benchmarks"] = benchmarks
    path = tmp_path / name
    path.write_text(json.dumps(data))
    assert detect_tool(path) == "guidellm"
    with pytest.raises(UserError, match="benchmarks: missing or empty: expected the list of "
                                        "benchmarks GuideLLM writes"):
        read_run(path)
