"""genai-perf results (serveplan/runs/genai_perf.py), written here with the keys and units
of triton-inference-server/perf_analyzer: the summary as genai-perf's ``JsonExporter``
writes it (statistics in ms, ``input_config`` flat or nested) and the per-request file as
perf_analyzer's ``ProfileDataExporter`` does (ns since the epoch, completion order)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.runs import detect_tool, read_run
from serveplan.runs.genai_perf import DISTRIBUTION_NOTE, rate_law
from serveplan.user_input import UserError

T0 = 1_718_000_000_000_000_000  # ns since the epoch
MS = 1_000_000


def _sse(*texts: str | None) -> dict:
    """One response of an OpenAI chat stream: an event per text (None: a role-only delta)."""
    events = []
    for t in texts:
        delta = {"role": "assistant"} if t is None else {"content": t}
        events.append("data: " + json.dumps({"object": "chat.completion.chunk",
                                             "choices": [{"index": 0, "delta": delta}]}))
    return {"response": "\n\n".join(events) + "\n\n"}


DONE = {"response": "data: [DONE]\n\n"}
USAGE = {"response": "data: " + json.dumps({"choices": [], "usage": {"completion_tokens": 2}})
         + "\n\n"}
# Completion order, as perf_analyzer writes them: B, then C, then A.
REQ_A = {"timestamp": T0, "request_inputs": {"payload": "{}"},
         "response_timestamps": [T0 + 10 * MS, T0 + 50 * MS, T0 + 70 * MS, T0 + 75 * MS,
                                 T0 + 76 * MS],
         "response_outputs": [_sse(None), _sse("Hel"), _sse("lo"), USAGE, DONE]}
REQ_B = {"timestamp": T0 + 5 * MS, "request_inputs": {"payload": "{}"},
         "response_timestamps": [T0 + 65 * MS, T0 + 95 * MS, T0 + 96 * MS],
         "response_outputs": [_sse("a"), _sse("b", "c"), DONE]}
REQ_C = {"timestamp": T0 + 80 * MS, "request_inputs": {"payload": "{}"},
         "response_timestamps": [T0 + 90 * MS, T0 + 91 * MS],
         "response_outputs": [_sse(None), DONE]}
EXPORT = {"experiments": [{"experiment": {"mode": "concurrency", "value": 2},
                           "requests": [REQ_B, REQ_C, REQ_A],
                           "window_boundaries": [T0, T0 + 10_000 * MS]}],
          "version": "2.50.0", "service_kind": "openai", "endpoint": "v1/chat/completions"}


def _block(avg: float, unit: str = "ms") -> dict:
    return {"unit": unit, "avg": avg, "p50": avg, "p99": avg * 1.2, "min": avg * 0.8,
            "max": avg * 1.3, "std": 1.0}


STATS = {"time_to_first_token": _block(55.0), "inter_token_latency": _block(12.0),
         "request_latency": _block(80.0), "output_sequence_length": _block(4.0, "tokens"),
         "input_sequence_length": _block(100.0, "tokens"),
         "output_token_throughput": {"unit": "tokens/sec", "avg": 160.0},
         "request_throughput": {"unit": "requests/sec", "avg": 40.0}}
NESTED = {"model_names": ["meta-llama/Llama-3.1-8B-Instruct"], "subcommand": "profile",
          "endpoint": {"type": "chat", "service_kind": "openai", "streaming": True},
          "perf_analyzer": {"stimulus": {"concurrency": 2}, "warmup_request_count": 0,
                            "measurement": {"mode": "request_count", "num": ""}},
          "input": {"random_seed": 0, "synthetic_tokens": {"mean": 100, "stddev": 0},
                    "output_tokens": {"mean": "", "stddev": 0, "deterministic": False}},
          "output": {"profile_export_file": "profile_export.json"}}
FLAT = {"model": ["meta-llama/Llama-3.1-8B-Instruct"], "formatted_model_name": "llama",
        "concurrency": None, "request_rate": 5.0, "request_count": 50,
        "warmup_request_count": 0, "measurement_interval": 10000, "random_seed": 7,
        "synthetic_input_tokens_mean": 550, "synthetic_input_tokens_stddev": 0,
        "output_tokens_mean": 128, "output_tokens_stddev": 0, "streaming": True,
        "service_kind": "openai", "endpoint_type": "chat", "extra_inputs": {}}


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def _artifacts(tmp_path, config=NESTED, export=EXPORT, stats=STATS):
    folder = tmp_path / "llama-openai-chat-concurrency2"
    folder.mkdir()
    _write(folder / "profile_export_genai_perf.json", stats | {"input_config": config})
    if export is not None:
        _write(folder / "profile_export.json", export)
    return folder


def test_requests_are_timed_as_genai_perf_times_them(tmp_path):
    """Sorted by send: A (0 ms), B (5 ms), C (80 ms). Text responses only: A's first text at
    50 ms and last at 70 ms (its role-only chunk, usage chunk and [DONE] dropped), B's at
    65 and 95 ms after a send at 5; C returned no text and is a failure."""
    run = read_run(_artifacts(tmp_path))
    assert (run.tool, run.model, run.n) == ("genai-perf", "meta-llama/Llama-3.1-8B-Instruct", 3)
    assert (run.load.kind, run.load.concurrency) == ("concurrency", 2)
    np.testing.assert_allclose(run.send_s, [0.0, 0.005, 0.080])
    assert run.success.tolist() == [True, True, False]
    np.testing.assert_allclose(run.ttft_s[:2], [0.050, 0.060])
    np.testing.assert_allclose(run.e2e_s[:2], [0.070, 0.090])
    assert math.isnan(run.ttft_s[2])
    np.testing.assert_allclose(run.itls(0), [0.020])
    np.testing.assert_allclose(run.itls(1), [0.030])
    assert run.summary["mean_ttft_s"] == pytest.approx(0.055)
    assert run.summary["mean_tpot_s"] == pytest.approx(0.012)


def test_token_counts_come_from_text_events_scaled_to_the_summary(tmp_path):
    """Text events: A 2 (Hel, lo), B 3 (a, b, c): mean 2.5; the summary's re-tokenized mean
    is 4.0, so x 1.6: A round(3.2) = 3, B round(4.8) = 5. Prompts: the mean, 100."""
    run = read_run(_artifacts(tmp_path))
    assert run.output_len.tolist() == [3, 5, -1]
    assert run.input_len.tolist() == [100, 100, 100]
    assert any("x 1.600" in w for w in run.warnings)
    alone = tmp_path / "alone"
    alone.mkdir()
    with pytest.raises(UserError, match=r"profile_export\.json: prompt lengths: .*keep the "
                                        r"run's \*_genai_perf\.json"):
        read_run(_write(alone / "profile_export.json", EXPORT))


def test_triton_c_api_token_ids_are_counted_exactly(tmp_path):
    """Token ids in and out are counted, not scaled; the export alone gives the load."""
    reqs = [{"timestamp": T0, "request_inputs": {"input_ids": [1, 2, 3]},
             "response_timestamps": [T0 + 20 * MS, T0 + 30 * MS],
             "response_outputs": [{"output_ids": [5, 6]}, {"output_ids": 7}]}]
    export = {"experiments": [{"experiment": {"mode": "request_rate", "value": 2.0},
                               "requests": reqs, "window_boundaries": []}],
              "service_kind": "triton_c_api", "endpoint": ""}
    run = read_run(_write(tmp_path / "profile_export.json", export))
    assert (run.input_len.tolist(), run.output_len.tolist()) == ([3], [3])
    np.testing.assert_allclose([run.ttft_s[0], run.e2e_s[0]], [0.020, 0.030])
    assert (run.load.kind, run.load.request_rate, run.load.arrival) == (
        "rate", 2.0, "constant")
    assert not any("x " in w for w in run.warnings)
    assert DISTRIBUTION_NOTE in run.warnings  # one send cannot show the rate's law


def test_a_flat_summary_alone_replays_its_rate_as_constant_gaps(tmp_path):
    """The 2024 layout: request_rate 5 (perf_analyzer's default constant distribution) and
    request_count 50; no request_count block, so the count is the one asked for."""
    run = read_run(_artifacts(tmp_path, config=FLAT, export=None))
    assert not run.has_requests and run.n == 50
    assert (run.load.kind, run.load.request_rate, run.load.arrival, run.load.seed) == (
        "rate", 5.0, "constant", 7)
    assert run.extras["requested_output_len"] == 128
    assert DISTRIBUTION_NOTE in run.warnings


def test_the_rate_law_is_read_from_the_recorded_send_gaps():
    """Coefficient of variation of the gaps, by hand: evenly spaced sends have 0 (perf_analyzer
    constant); gaps alternating 0.1 and 1.9 s have mean 1 and std 0.9 (over 0.5: Poisson);
    alternating 0.8 and 1.2 s have std 0.2 (constant, a jittered schedule). Twenty sends
    (19 gaps) are too few to tell."""
    even = np.arange(21) * 0.2
    alternating = np.concatenate([[0.0], np.cumsum(np.tile([0.1, 1.9], 10))])
    jittered = np.concatenate([[0.0], np.cumsum(np.tile([0.8, 1.2], 10))])
    assert (rate_law(even), rate_law(alternating), rate_law(jittered)) == (
        "constant", "poisson", "constant")
    assert rate_law(even[:20]) is None and rate_law(None) is None
    assert rate_law(np.zeros(30)) is None  # a burst at one instant has no rate law


def test_a_rate_exports_sends_name_its_law_and_need_no_assumption(tmp_path):
    """A pass-through --request-distribution poisson leaves no trace in the settings, but
    its exponential send gaps do: the export's 41 sends label the load Poisson."""
    gaps_ns = (np.random.default_rng(3).exponential(0.2, 40) * 1e9).astype(np.int64)
    sends = T0 + np.concatenate([[0], np.cumsum(gaps_ns)])
    reqs = [{"timestamp": int(t), "request_inputs": {"input_ids": [1, 2]},
             "response_timestamps": [int(t) + 20 * MS], "response_outputs": [
                 {"output_ids": [5]}]} for t in sends]
    export = {"experiments": [{"experiment": {"mode": "request_rate", "value": 5.0},
                               "requests": reqs, "window_boundaries": []}],
              "service_kind": "triton_c_api", "endpoint": ""}
    run = read_run(_write(tmp_path / "profile_export.json", export))
    assert (run.n, run.load.request_rate, run.load.arrival) == (41, 5.0, "poisson")
    assert DISTRIBUTION_NOTE not in run.warnings


def test_an_interval_run_without_its_export_names_what_is_missing(tmp_path):
    config = FLAT | {"request_count": 0}
    with pytest.raises(UserError, match=r"request_count: not in the summary.*"
                                        r"profile_export\.json"):
        read_run(_artifacts(tmp_path, config=config, export=None))
    counted = STATS | {"request_count": {"unit": "count", "avg": 20}}
    sub = tmp_path / "counted"
    sub.mkdir()
    assert read_run(_artifacts(sub, config=config, export=None, stats=counted)).n == 20


def test_files_are_told_apart_from_aiperf(tmp_path):
    folder = _artifacts(tmp_path)
    assert detect_tool(folder) == "genai-perf"
    assert detect_tool(folder / "profile_export.json") == "genai-perf"
    renamed = _write(tmp_path / "run1.json", STATS | {"input_config": FLAT})
    assert detect_tool(renamed) == "genai-perf"
    assert read_run(renamed).n == 50  # read as the summary it is
    aiperf = _write(tmp_path / "agg.json", STATS | {"schema_version": "1.2",
                                                    "input_config": {"loadgen": {}}})
    assert detect_tool(aiperf) == "aiperf"
    # the export read directly finds its summary beside it
    assert read_run(folder / "profile_export.json").model == "meta-llama/Llama-3.1-8B-Instruct"


def test_bad_records_name_the_file_and_field(tmp_path):
    bad = dict(REQ_B, response_timestamps=[T0 + 65 * MS])
    export = EXPORT | {"experiments": [{"experiment": {"mode": "concurrency", "value": 2},
                                        "requests": [REQ_A, bad]}]}
    with pytest.raises(UserError, match=r"profile_export\.json: experiments\[0\]\.requests"
                                        r"\[1\]: response_timestamps and response_outputs"):
        read_run(_artifacts(tmp_path, export=export))
    two = {"experiments": [EXPORT["experiments"][0],
                           {"experiment": {"mode": "concurrency", "value": 4},
                            "requests": [REQ_A]}]}
    alone = tmp_path / "two"
    alone.mkdir()
    with pytest.raises(UserError, match=r"2 experiments \(concurrency 2, concurrency 4\)"):
        read_run(_write(alone / "profile_export.json", two))


def test_compare_replays_a_genai_perf_folder(tmp_path):
    folder = _artifacts(tmp_path)
    result = CliRunner().invoke(app, ["compare", str(folder), "--gpu", "h100",
                                      "--format", "genai-perf"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "(genai-perf, 3 requests)" in text
    assert "mean_ttft" in text and "x 1.600" in text


def test_malformed_stream_events_carry_no_text(tmp_path):
    """Events that are not chat chunks (a string choice, a string delta, a JSON list) are
    dropped like the role-only chunk: the first text arrives at 40 ms."""
    odd = [{"response": 'data: {"choices": ["x"]}\n\n'},
           {"response": 'data: {"choices": [{"delta": "a"}]}\n\ndata: [1, 2]\n\n'}]
    req = {"timestamp": T0, "response_timestamps": [T0 + 10 * MS, T0 + 20 * MS,
                                                   T0 + 40 * MS, T0 + 41 * MS],
           "response_outputs": [*odd, _sse("a"), DONE]}
    export = EXPORT | {"experiments": [{"experiment": {"mode": "concurrency", "value": 2},
                                        "requests": [req]}]}
    run = read_run(_artifacts(tmp_path, export=export))
    np.testing.assert_allclose([run.ttft_s[0], run.e2e_s[0]], [0.040, 0.040])
    assert run.output_len.tolist() == [4]  # one text event, scaled to the summary's 4.0


def test_triton_requests_are_timed_as_genai_perfs_own_test_expects(tmp_path):
    """perf_analyzer's genai-perf ``test_llm_profile_data_parser.py``, Triton data,
    experiment 2 (request_rate 2.0): requests sent at 5 and 3 ns with responses at
    7, 8, 13, 18 and 6, 8, 11 ns. Its expected TTFTs are 7 - 5 = 2 and 6 - 3 = 3 ns and
    the latencies 13 and 8 ns; the summary's load picks the experiment."""
    def req(sent, stamps, texts):
        return {"timestamp": sent, "response_timestamps": stamps,
                "response_outputs": [{"text_output": t} for t in texts]}
    export = {"service_kind": "triton", "endpoint": "", "experiments": [
        {"experiment": {"mode": "concurrency", "value": 10},
         "requests": [req(1, [3, 5, 8], ["   dogs", "   are", "   cool"])]},
        {"experiment": {"mode": "request_rate", "value": 2.0},
         "requests": [req(5, [7, 8, 13, 18], ["   cats", "   are", "   cool", "   too"]),
                      req(3, [6, 8, 11], ["   it's", "   very", "   simple work"])]}]}
    config = NESTED | {"perf_analyzer": {"stimulus": {"request_rate": 2.0}}}
    run = read_run(_artifacts(tmp_path, config=config, export=export))
    assert (run.load.kind, run.load.request_rate) == ("rate", 2.0)
    np.testing.assert_allclose(run.send_s, [0.0, 2e-9])
    np.testing.assert_allclose(run.ttft_s, [3e-9, 2e-9])
    np.testing.assert_allclose(run.e2e_s, [8e-9, 13e-9])


@pytest.mark.parametrize(("tag", "avg"), [("output_sequence_length", 1e308),
                                          ("input_sequence_length", -3.0)])
def test_a_summary_mean_length_no_request_has_is_refused(tmp_path, tag, avg):
    """The summary's mean lengths set every request's prompt and scale its output (1e308
    would overflow the int64 cast; a negative mean would become 1 token)."""
    stats = STATS | {tag: _block(avg, "tokens")}
    with pytest.raises(UserError, match=re.escape(
            f"profile_export_genai_perf.json: {tag}.avg: a mean of {avg:.6g} tokens per "
            "request; expected 0 to 16,777,216")):
        read_run(_artifacts(tmp_path, stats=stats))
