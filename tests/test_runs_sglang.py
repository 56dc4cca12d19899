"""``sglang.bench_serving --output-file`` results (serveplan/runs/sglang.py), written here
with the keys and units of sgl-project/sglang ``python/sglang/bench_serving.py``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.runs import detect_tool, read_run, run_numbers
from serveplan.runs._io import split_line
from serveplan.user_input import UserError

# benchmark()'s ``result``: statistics in ms, duration in s
RESULT = {"backend": "sglang", "dataset_name": "random", "request_rate": 4.0,
          "max_concurrency": None, "sharegpt_output_len": None, "random_input_len": 300,
          "random_output_len": 3, "random_range_ratio": 0.0, "duration": 1.5, "completed": 2,
          "total_input_tokens": 300, "total_output_tokens": 5,
          "total_output_tokens_retokenized": 5, "request_throughput": 1.333,
          "input_throughput": 200.0, "output_throughput": 3.333, "mean_e2e_latency_ms": 95.0,
          "median_e2e_latency_ms": 95.0, "std_e2e_latency_ms": 15.0,
          "p99_e2e_latency_ms": 109.7, "mean_ttft_ms": 65.0, "median_ttft_ms": 65.0,
          "std_ttft_ms": 15.0, "p99_ttft_ms": 79.7, "mean_tpot_ms": 22.5,
          "median_tpot_ms": 22.5, "std_tpot_ms": 7.5, "p99_tpot_ms": 29.9,
          "mean_itl_ms": 20.0, "median_itl_ms": 20.0, "std_itl_ms": 8.2, "p95_itl_ms": 29.0,
          "p99_itl_ms": 29.8, "concurrency": 0.13, "accept_length": None}
# ``result_details`` (--output-details): seconds, in the order the requests were scheduled;
# the third request timed out
DETAILS = {"input_lens": [100, 200, 300], "output_lens": [3, 2, 0],
           "ttfts": [0.05, 0.08, 0.0], "itls": [[0.01, 0.02], [0.03], []],
           "generated_texts": ["abc", "de", ""], "errors": ["", "", "Timeout"]}


def _write(path, *results):
    path.write_text("".join(json.dumps(r) + "\n" for r in results))
    return path


def test_a_run_with_details_reads_as_the_tool_measured_it(tmp_path):
    """Per request: E2E = TTFT + the ITLs (0.05 + 0.03, 0.08 + 0.03); the errored request is
    a failure. The statistics arrive in seconds; the gaps are Poisson at 4 requests/s."""
    run = read_run(_write(tmp_path / "sg.jsonl", RESULT | DETAILS))
    assert (run.tool, run.model, run.n) == ("sglang", None, 3)
    assert run.success.tolist() == [True, True, False]
    assert run.output_len.tolist() == [3, 2, -1]
    np.testing.assert_allclose(run.ttft_s[:2], [0.05, 0.08])
    np.testing.assert_allclose(run.e2e_s[:2], [0.08, 0.11])
    assert math.isnan(run.e2e_s[2])
    assert (run.load.kind, run.load.request_rate, run.load.arrival) == ("rate", 4.0, "poisson")
    assert run.summary["p50_e2e_s"] == pytest.approx(0.095)
    assert run.summary["p95_itl_s"] == pytest.approx(0.029)
    assert run.summary["mean_ttft_s"] == pytest.approx(0.065)
    assert run.extras["dataset_name"] == "random"
    assert "accept_length" not in run.extras  # null in the file
    named = read_run(_write(tmp_path / "named.jsonl", RESULT | {"model_id": "Qwen/Qwen3-8B"}))
    assert named.model == "Qwen/Qwen3-8B"


def test_all_at_once_under_max_concurrency_is_a_closed_loop(tmp_path):
    """``--request-rate inf`` (``Infinity`` in the file) with ``--max-concurrency 8``."""
    path = _write(tmp_path / "c.jsonl", RESULT | {"request_rate": math.inf,
                                                 "max_concurrency": 8})
    assert "Infinity" in path.read_text()
    run = read_run(path)
    assert (run.load.kind, run.load.concurrency) == ("concurrency", 8)
    assert not run.has_requests


def test_a_file_of_several_runs_names_the_one_to_read(tmp_path):
    """The tool appends a line per run; FILE:LINE picks one (blank lines keep their
    numbers), and a line with no run is refused with the lines that have one."""
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps(RESULT) + "\n\n" + json.dumps(RESULT | {"request_rate": 16.0})
                    + "\n")
    with pytest.raises(UserError, match=r"holds 2 runs .*sweep.jsonl:3 for the last"):
        read_run(path)
    assert read_run(f"{path}:3").load.request_rate == 16.0
    assert read_run(f"{path}:1").load.request_rate == 4.0
    with pytest.raises(UserError, match="no run on line 2; the file's runs are on lines 1, 3"):
        read_run(f"{path}:2")
    assert run_numbers(path) == [1, 3]  # what compare --all-runs goes through
    assert run_numbers(f"{path}:3") == [] and read_run(f"{path}:3").name == "sweep.jsonl:3"


def test_how_files_are_told_apart(tmp_path):
    """An SGLang line in a .jsonl file is SGLang's (an aiperf record has metadata and
    metrics instead); the same result saved indented as .json is one run; a path that
    exists keeps its colon; FILE:LINE on another tool's file is refused."""
    assert detect_tool(_write(tmp_path / "a.jsonl", RESULT)) == "sglang"
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(RESULT, indent=2))
    assert detect_tool(pretty) == "sglang"
    assert read_run(pretty).load.request_rate == 4.0
    odd = _write(tmp_path / "run:2", RESULT)
    assert split_line(odd) == (odd, None)
    vllm = tmp_path / "v.json"
    vllm.write_text(json.dumps({"completed": 1, "model_id": "m", "request_rate": 1.0}))
    with pytest.raises(UserError, match="FILE:N picks a line of an sglang.bench_serving file "
                                        "or a benchmark of a GuideLLM report; v.json is a "
                                        "vllm result"):
        read_run(f"{vllm}:1")


def test_compare_replays_an_sglang_run(tmp_path):
    """The CLI end to end: the file names no model, so --model is needed and then used."""
    path = _write(tmp_path / "sg.jsonl", RESULT | DETAILS)
    runner = CliRunner()
    missing = runner.invoke(app, ["compare", str(path), "--gpu", "h100"])
    assert missing.exit_code == 1 and "does not name its model; pass --model" in missing.output
    ok = runner.invoke(app, ["compare", str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                             "--engine", "sglang", "--json"])
    assert ok.exit_code == 0, ok.output
    result, _ = json.JSONDecoder().raw_decode(ok.output[ok.output.index("{"):])
    assert result["metrics"]["completed"]["measured"] == 2
    assert result["metrics"]["p50_ttft_s"]["measured"] == pytest.approx(0.065)
