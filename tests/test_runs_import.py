"""serveplan.runs: benchmark results read into one form, written back, and replayed.

The expected values are the hand-written numbers of the fixtures in tests/data/runs (written
from each tool's documented schema; see the module docstrings of serveplan.runs), converted
by hand here; TPOT is recomputed in the test from the per-request numbers; the replay's
schedule is compared with the arrival classes drawn directly.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from serveplan.runs import (
    BenchRun,
    Load,
    detect_tool,
    read_run,
    requests_for,
    run_from_arrays,
    write_vllm,
)
from serveplan.runs._io import Where, num_list
from serveplan.sim.arrivals import InferencePerfArrivals, PoissonArrivals, VllmBenchArrivals
from serveplan.user_input import UserError

DATA = Path(__file__).parent / "data" / "runs"
NAN = np.nan


def assert_same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------- vLLM
@pytest.fixture(scope="module")
def vllm_run() -> BenchRun:
    return read_run(DATA / "vllm_detailed.json")


def test_vllm_detailed_per_request(vllm_run):
    r = vllm_run
    assert (r.tool, r.model, r.n, r.has_requests) == (
        "vllm", "meta-llama/Llama-3.1-8B-Instruct", 6, True)
    assert_same(r.input_len, [100, 200, 150, 120, 300, 80])
    assert_same(r.output_len, [4, 3, 1, -1, 5, 2])  # the failed request's output is unknown
    assert_same(r.success, [True, True, True, False, True, True])
    assert_same(r.ttft_s, [0.123, 0.2, 0.15, NAN, 0.25, 0.1])  # seconds stay seconds
    assert_same(r.e2e_s, [0.198, 0.29, 0.15, NAN, 0.35, 0.16])
    assert_same(r.itls(0), [0.02, 0.03, 0.025])
    assert_same(r.itls(4), [0.01, 0.02, 0.03, 0.04])
    assert r.itls(2).size == 0 and r.itls(3).size == 0
    assert_same(r.itl_offsets, [0, 3, 5, 5, 5, 9, 10])
    assert_same(r.send_s, [0.0, 0.25, 0.5, 0.75, 1.5, 2.0])  # start_times - first
    assert r.stage is None
    assert r.load == Load("rate", 4.0, 1.0, None, arrival="poisson", seed=7)


def test_vllm_summary_in_seconds(vllm_run):
    s = vllm_run.summary
    assert s["mean_ttft_s"] == 0.1646  # mean_ttft_ms 164.6
    assert s["p50_ttft_s"] == 0.15  # median_ttft_ms 150.0
    assert s["p99_tpot_s"] == pytest.approx(0.05955)
    assert s["mean_itl_s"] == 0.0325
    assert (s["completed"], s["failed"], s["duration_s"]) == (5, 1, 2.9)
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (830, 15)
    assert s["mean_output_len"] == 15 / 5
    assert "request_goodput" not in s  # null in the file
    assert_same(vllm_run.extras["client_queue_s"], np.zeros(6))


def test_per_request_tpot_by_hand(vllm_run):
    # (e2e - ttft) / (output - 1), successful requests with more than one output token
    expected = [(0.198 - 0.123) / 3, (0.29 - 0.2) / 2, NAN, NAN, (0.35 - 0.25) / 4,
                (0.16 - 0.1) / 1]
    np.testing.assert_allclose(vllm_run.per_request_tpot_s(), expected, rtol=1e-12)


def test_vllm_summary_only():
    r = read_run(DATA / "vllm_summary.json")
    assert not r.has_requests and r.n == 4 and r.send_s is None
    assert r.summary["mean_ttft_s"] == 0.123  # mean_ttft_ms 123.0
    assert r.summary["p99_client_queue_time_s"] == 1.497
    assert r.load.kind == "concurrency" and r.load.concurrency == 2
    assert math.isinf(r.load.request_rate)
    req = requests_for(r)
    assert req.concurrency == 2 and np.isnan(req.arrival_s).all()
    assert_same(req.prompt_len, [512] * 4)  # total_input_tokens / completed
    assert_same(req.output_len, [128] * 4)
    assert any("mean lengths" in w for w in r.warnings)


def test_vllm_before_2025_files():
    r = read_run(DATA / "vllm_v08.json")
    assert r.send_s is None and "failed" not in r.summary
    # no `latencies`: E2E as vLLM's request functions measure it, TTFT + sum of the gaps
    np.testing.assert_allclose(r.e2e_s, [0.05 + 0.03, 0.0625 + 0.03, 0.075 + 0.03])
    assert any("latencies not recorded" in w for w in r.warnings)
    req = requests_for(r, seed=5)
    assert_same(req.arrival_s, VllmBenchArrivals(2.0, 1.0).sample(3, 5))
    assert_same(req.prompt_len, [100, 200, 300])
    assert_same(req.output_len, [3, 2, 4])


def test_vllm_requests_put_in_send_order(tmp_path):
    # a --max-concurrency wait can send request 2 before request 1
    data = json.loads((DATA / "vllm_detailed.json").read_text())
    data["start_times"][1], data["start_times"][2] = 1001.0, 1000.75
    (tmp_path / "swapped.json").write_text(json.dumps(data))
    r = read_run(tmp_path / "swapped.json")
    assert_same(r.input_len, [100, 150, 200, 120, 300, 80])
    assert_same(r.send_s, [0.0, 0.25, 0.5, 0.75, 1.5, 2.0])
    assert r.itls(1).size == 0 and list(r.itls(2)) == [0.04, 0.05]
    assert any("reordered" in w for w in r.warnings)


def _assert_runs_equal(a: BenchRun, b: BenchRun):
    for name in ("input_len", "output_len", "success", "ttft_s", "e2e_s", "itl_s",
                 "itl_offsets", "send_s"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert_same(x, y)
    for name in ("kind", "request_rate", "burstiness", "concurrency", "seed"):
        assert getattr(a.load, name) == getattr(b.load, name), name


def test_vllm_round_trip_is_exact(vllm_run, tmp_path):
    back = read_run(write_vllm(vllm_run, tmp_path / "out.json"))
    _assert_runs_equal(vllm_run, back)
    assert back.model == vllm_run.model
    assert back.summary["mean_ttft_s"] == pytest.approx(vllm_run.summary["mean_ttft_s"])
    assert back.summary["p99_itl_s"] == pytest.approx(vllm_run.summary["p99_itl_s"])


def test_vllm_round_trip_of_a_simulation(tmp_path):
    rng = np.random.default_rng(3)
    n = 9
    out = rng.integers(1, 6, n)
    ttft = rng.uniform(0.01, 0.2, n)
    gaps = [rng.uniform(0.001, 0.05, k - 1) for k in out]
    e2e = ttft + np.array([g.sum() for g in gaps])
    ok = np.ones(n, dtype=bool)
    ok[4] = False
    run = run_from_arrays(input_len=rng.integers(1, 900, n), output_len=out, ttft_s=ttft,
                          e2e_s=e2e, success=ok, itls=gaps, send_s=np.sort(rng.uniform(0, 3, n)),
                          load=Load("rate", 3.5, 0.5, None, arrival="gamma", seed=11),
                          model="llama-3.1-8b")
    path = write_vllm(run, tmp_path / "sim.json", percentiles=(50, 90, 99))
    back = read_run(path)
    _assert_runs_equal(run, back)
    assert run.send_s[0] == 0.0  # relative to the first send, as read from a file
    data = json.loads(path.read_text())
    assert data["request_rate"] == 3.5 and data["seed"] == 11 and data["failed"] == 1
    tpot = (e2e - ttft)[ok & (out > 1)] / (out - 1)[ok & (out > 1)]  # vLLM's tpots list
    assert data["mean_tpot_ms"] == pytest.approx(tpot.mean() * 1000)
    assert data["p90_ttft_ms"] == pytest.approx(np.percentile(ttft[ok], 90) * 1000)
    assert data["output_lens"][4] == 0 and data["errors"][4]


def test_write_vllm_fills_equal_gaps_without_itls(tmp_path):
    run = run_from_arrays(input_len=[10, 20], output_len=[3, 1], ttft_s=[0.1, 0.2],
                          e2e_s=[0.3, 0.2], load=Load("rate"))
    data = json.loads(write_vllm(run, tmp_path / "x.json").read_text())
    assert data["itls"] == [[(0.3 - 0.1) / 2] * 2, []]  # the request's TPOT, twice
    assert data["request_rate"] == "inf" and "start_times" not in data


# ----------------------------------------------------------------------------- aiperf
@pytest.fixture(scope="module")
def aiperf_run() -> BenchRun:
    return read_run(DATA / "aiperf")


def test_aiperf_records_sorted_and_converted(aiperf_run):
    r = aiperf_run
    assert (r.tool, r.model, r.n) == ("aiperf", "Qwen/Qwen3-0.6B", 5)  # warm-up left out
    assert_same(r.input_len, [550, 600, 500, 520, 450])  # 520: the failure's error_isl
    assert_same(r.output_len, [4, 3, 1, -1, 5])
    assert_same(r.success, [True, True, True, False, True])
    np.testing.assert_allclose(r.send_s, [0.0, 0.1, 0.25, 0.3, 0.5], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.ttft_s, [0.025, 0.030, 0.020, NAN, 0.0225])  # from ms
    np.testing.assert_allclose(r.e2e_s, [0.040, 0.044, 0.020, NAN, 0.0425])
    np.testing.assert_allclose(r.itls(1), [0.007, 0.007])
    assert r.itls(2).size == 0
    assert r.extras["warmup_requests"] == 1
    assert_same(r.extras["cached_prompt_tokens"], [256, -1, -1, -1, -1])


def test_aiperf_itl_is_vllm_tpot(aiperf_run):
    # aiperf's per-record inter_token_latency (ms) in the file: 5.0, 7.0, -, -, 5.0
    np.testing.assert_allclose(aiperf_run.per_request_tpot_s(),
                               [0.005, 0.007, NAN, NAN, 0.005], rtol=1e-9)


def test_aiperf_aggregate_summary_and_load(aiperf_run):
    s = aiperf_run.summary
    assert s["mean_ttft_s"] == pytest.approx(24.375e-3)
    assert s["p50_e2e_s"] == pytest.approx(41.25e-3)
    assert s["mean_tpot_s"] == pytest.approx(5.666666666666667e-3)  # inter_token_latency
    assert s["p99_itl_s"] == pytest.approx(7.0e-3)  # inter_chunk_latency
    assert (s["completed"], s["failed"], s["duration_s"]) == (4, 1, 0.5425)
    assert s["total_output_tokens"] == 13
    load = aiperf_run.load
    assert (load.kind, load.request_rate, load.arrival, load.seed) == ("rate", 10.0,
                                                                       "poisson", 42)
    assert aiperf_run.extras["requested_output_len"] == 4


def test_aiperf_either_file_and_aggregate_alone(aiperf_run, tmp_path):
    for name in ("profile_export.jsonl", "profile_export_aiperf.json"):
        assert_same(read_run(DATA / "aiperf" / name).input_len, aiperf_run.input_len)
    shutil.copy(DATA / "aiperf" / "profile_export_aiperf.json", tmp_path)
    alone = read_run(tmp_path / "profile_export_aiperf.json")
    assert not alone.has_requests and alone.n == 5  # request_count + error_request_count
    req = requests_for(alone, seed=9)
    assert_same(req.arrival_s, PoissonArrivals(10.0).sample(5, 9))
    assert_same(req.prompt_len, [525] * 5)
    assert_same(req.output_len, [3] * 5)  # round(3.25)


def test_aiperf_2025_layout_closed_loop():
    r = read_run(DATA / "aiperf_v0")
    assert_same(r.input_len, [550, 530, -1])  # the failed record has no length
    assert_same(r.output_len, [5, 7, -1])  # output_token_count 3 + reasoning 2
    np.testing.assert_allclose(r.ttft_s, [1.6805, 1.5, NAN])
    assert r.load.kind == "concurrency" and r.load.concurrency == 2
    req = requests_for(r)
    assert req.concurrency == 2 and np.isnan(req.arrival_s).all()
    assert_same(req.prompt_len, [550, 530, 540])  # median prompt
    assert_same(req.output_len, [5, 7, 6])  # median output of the successes
    assert_same(requests_for(r, arrivals="recorded").arrival_s, r.send_s)


# ----------------------------------------------------------------------------- inference-perf
@pytest.fixture(scope="module")
def ip_run() -> BenchRun:
    return read_run(DATA / "inference_perf")


def test_inference_perf_per_request(ip_run):
    r = ip_run
    assert (r.tool, r.model, r.n) == ("inference-perf", "HuggingFaceTB/SmolLM2-135M-Instruct", 7)
    assert_same(r.send_s, [0.0, 0.5, 1.5, 3.0, 3.25, 3.5, 4.0])  # sorted by start_time
    assert_same(r.stage, [0, 0, 0, 1, 1, 1, 1])  # stage counts 3 and 4
    assert_same(r.input_len, [180, 220, 250, 150, 300, 120, 200])
    assert_same(r.output_len, [4, 3, -1, 3, 2, 1, 5])  # the server's completion_tokens
    assert_same(r.ttft_s, [0.125, 0.125, NAN, 0.25, 0.25, 0.125, 0.125])
    assert_same(r.e2e_s, [0.3125, 0.25, NAN, 0.375, 0.3125, 0.125, 0.625])
    assert_same(r.itls(3), [0.0, 0.125])  # two tokens in one chunk
    assert_same(r.extras["cached_prompt_tokens"], [-1, -1, -1, -1, 128, -1, -1])
    assert r.extras["requested_output_len"] == 4


def test_inference_perf_summary_and_load(ip_run):
    s = ip_run.summary
    assert s["mean_ttft_s"] == pytest.approx(1 / 6)
    assert s["p50_ttft_s"] == 0.125  # "median"
    assert s["p90_e2e_s"] == 0.46875
    assert (s["completed"], s["failed"], s["duration_s"]) == (6, 1, 4.625)
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (1170, 18)
    load = ip_run.load
    assert load.kind == "stages" and load.stages == ((2.0, 1.5), (4.0, 1.0))
    assert (load.arrival, load.stage_interval_s, load.seed) == ("constant", 1.0, 1234)


def test_inference_perf_replay(ip_run):
    req = requests_for(ip_run)
    assert_same(req.arrival_s, ip_run.send_s)
    assert_same(req.output_len, [4, 3, 4, 3, 2, 1, 5])  # failed: the requested mean, 4
    sched = requests_for(ip_run, seed=3, arrivals="schedule")  # stage 2 after stage 1 drains
    arrival, plan = InferencePerfArrivals("constant", ((2.0, 1.5), (4.0, 1.0)), 1.0).staged(7, 3)
    assert_same(sched.arrival_s, arrival)
    assert_same(sched.stages.offset_s, plan.offset_s)
    assert sched.stages.stage.tolist() == [0, 0, 0, 1, 1, 1, 1]


def test_inference_perf_one_stage_file():
    r = read_run(DATA / "inference_perf" / "stage_1_lifecycle_metrics.json")
    assert r.n == 4 and r.summary["completed"] == 4 and r.summary["duration_s"] == 1.625
    assert_same(r.send_s, [0.0, 0.25, 0.5, 1.0])
    assert_same(r.input_len, [150, 300, 120, 200])
    assert_same(r.extras["cached_prompt_tokens"], [-1, 128, -1, -1])
    assert r.load.stages == ((4.0, 1.0),)


# ----------------------------------------------------------------------------- replay
def test_replay_vllm_schedule_and_failed_requests(vllm_run):
    assert_same(requests_for(vllm_run).arrival_s, vllm_run.send_s)
    sched = requests_for(vllm_run, seed=4, arrivals="schedule")
    assert_same(sched.arrival_s, VllmBenchArrivals(4.0, 1.0).sample(6, 4))
    # the failed request: median output of the successes (4, 3, 1, 5, 2) = 3
    assert_same(sched.output_len, [4, 3, 1, 3, 5, 2])
    assert_same(sched.prompt_len, vllm_run.input_len)
    assert any("failed requests are replayed" in w and "3 tokens" in w
               for w in vllm_run.warnings)


def test_replay_infinite_rate_and_ramp_up(vllm_run):
    burst = replace(vllm_run, send_s=None, load=Load("rate"))
    assert_same(requests_for(burst).arrival_s, np.zeros(6))
    ramp = replace(vllm_run, send_s=None,
                   load=Load("rate", burstiness=math.inf, ramp_up=("linear", 1.0, 6.0)))
    rates = 1.0 + 5.0 * np.arange(6) / 5  # get_request: start + (end - start) * i / (n - 1)
    np.testing.assert_allclose(requests_for(ramp).arrival_s, np.cumsum(1 / rates))


def test_replay_without_send_times_refuses_recorded(vllm_run):
    with pytest.raises(UserError, match="send times"):
        requests_for(replace(vllm_run, send_s=None), arrivals="recorded")


def test_detect_tool():
    assert detect_tool(DATA / "vllm_detailed.json") == "vllm"
    assert detect_tool(DATA / "aiperf") == "aiperf"
    assert detect_tool(DATA / "aiperf" / "profile_export_aiperf.json") == "aiperf"
    assert detect_tool(DATA / "inference_perf") == "inference-perf"
    assert detect_tool(DATA / "inference_perf" / "summary_lifecycle_metrics.json") == \
        "inference-perf"


def test_bench_run_checks_its_arrays():
    with pytest.raises(ValueError, match="shape"):
        BenchRun(path=Path("x"), tool="vllm", model=None, load=Load("rate"),
                 input_len=[1, 2], output_len=[1], success=[True, True], ttft_s=[0.1, 0.1],
                 e2e_s=[0.2, 0.2])


# ----------------------------------------------------------------------------- bad input
BAD = [
    ("vllm_missing_input_lens.json", ["input_lens"]),
    ("vllm_wrong_type.json", ["ttfts[1]"]),
    ("vllm_bad_rate.json", ["request_rate"]),
    ("vllm_appended.json", ["line 2", "--append-result"]),
    ("not_json.json", ["line 4", "not valid JSON"]),
    ("unknown.json", ["completed"]),
    ("empty.json", ["empty"]),
    ("binary.json", ["not a text file"]),
    ("aiperf_bad_line3", ["profile_export.jsonl", "line 3"]),
    ("aiperf_missing_latency", ["profile_export.jsonl", "line 2", "metrics.request_latency"]),
    ("aiperf_bad_unit", ["profile_export_aiperf.json", "time_to_first_token.unit"]),
    ("ip_wrong_type", ["per_request_lifecycle_metrics.json", "[1].start_time"]),
    ("ip_bad_yaml", ["config.yaml", "line 6"]),
    ("ip_missing_successes", ["summary_lifecycle_metrics.json", "successes"]),
]


@pytest.mark.parametrize(("name", "parts"), BAD, ids=[b[0] for b in BAD])
def test_malformed_files_give_one_user_error(name, parts):
    path = DATA / "bad" / name
    with pytest.raises(UserError) as info:
        read_run(path)
    message = str(info.value)
    assert name in message and "\n" not in message
    for part in parts:
        assert part in message


def test_wrong_tool_and_missing_path():
    with pytest.raises(UserError, match="vllm_detailed.json.*records"):
        read_run(DATA / "vllm_detailed.json", "aiperf")
    with pytest.raises(UserError, match="vllm_detailed.json: top level: no metric blocks.*"
                                        "genai-perf summary"):
        read_run(DATA / "vllm_detailed.json", "genai-perf")
    with pytest.raises(UserError, match="format 'locust'"):
        read_run(DATA / "vllm_detailed.json", "locust")
    with pytest.raises(UserError, match="no such file"):
        read_run(DATA / "nope.json")


def test_replayed_schedule_keeps_the_clients_concurrency_cap(vllm_run):
    # vllm bench serve --request-rate 4 --max-concurrency 2: the schedule as drawn, and the
    # cap the simulator applies (a due request waits while 2 are in flight)
    run = replace(vllm_run, load=replace(vllm_run.load, concurrency=2))
    req = requests_for(run, seed=4, arrivals="schedule")
    assert (req.max_concurrency, req.concurrency) == (2, None)
    assert_same(req.arrival_s, VllmBenchArrivals(4.0, 1.0).sample(6, 4))
    assert requests_for(vllm_run, seed=4, arrivals="schedule").max_concurrency is None


@pytest.mark.parametrize(("values", "null_ok", "bad"), [
    ([0.5, True, 1.0], False, "gaps[1]: expected a number, got true"),
    ([0.5, "0.1"], False, 'gaps[1]: expected a number, got string "0.1"'),
    ([0.5, None], False, "gaps[1]: expected a number, got null"),
    ([[0.5]], True, "gaps[0]: expected a number, got array [0.5]"),
    ([0.5, 10**400], False, "gaps[1]: expected a finite number, got number 1000000000"),
    ([None, math.nan], True, "gaps[1]: expected a finite number, got number NaN"),
])
def test_number_lists_name_their_first_bad_entry(values, null_ok, bad):
    with pytest.raises(UserError, match=re.escape(f"run.json: {bad}")):
        num_list(values, Where(Path("run.json")), "gaps", null_ok=null_ok)


def test_number_lists_keep_ints_floats_and_allowed_nulls():
    where = Where(Path("run.json"))
    assert num_list([1, 2.5, 10**20], where, "gaps").tolist() == [1.0, 2.5, 1e20]
    assert num_list([], where, "gaps").dtype == np.float64
    got = num_list([0.25, None], where, "gaps", null_ok=True)
    assert got[0] == 0.25 and np.isnan(got[1])


# ----------------------------------------------------------------------------- impossible values
def _set(obj, path: tuple, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def _jsonl_set(text: str, line: int, path: tuple, value) -> str:
    lines = text.splitlines()
    record = json.loads(lines[line - 1])
    _set(record, path, value)
    lines[line - 1] = json.dumps(record)
    return "\n".join(lines) + "\n"


TOO_LONG = "expected an integer <= 16,777,216 (the longest request serveplan simulates)"
IMPOSSIBLE = [  # (fixture, file in it, where to write, value, expected message part)
    ("vllm_detailed.json", None, ("output_lens", 1), 2**63 + 5, f"output_lens[1]: {TOO_LONG}"),
    ("vllm_detailed.json", None, ("output_lens", 0), 10**12, f"output_lens[0]: {TOO_LONG}"),
    ("vllm_detailed.json", None, ("output_lens", 2), 10**400, f"output_lens[2]: {TOO_LONG}"),
    ("vllm_detailed.json", None, ("input_lens", 2), -3, "input_lens[2]: expected an integer >= 0"),
    ("vllm_detailed.json", None, ("ttfts", 2), -0.1,
     "ttfts[2]: expected a finite number >= 0, got number -0.1"),
    ("vllm_detailed.json", None, ("itls", 1, 0), math.nan, "itls[1][0]: expected a finite number"),
    ("vllm_detailed.json", None, ("itls", 1, 1), -1, "itls[1][1]: expected a finite number >= 0"),
    ("vllm_detailed.json", None, ("latencies", 0), math.inf, "latencies[0]: expected a finite"),
    ("vllm_detailed.json", None, ("start_times", 1), math.nan, "start_times[1]: expected a finite"),
    ("aiperf", "profile_export.jsonl", (2, "metrics", "time_to_first_token", "value"), -5.0,
     "line 2: metrics.time_to_first_token.value: expected a finite number >= 0"),
    ("aiperf", "profile_export.jsonl", (3, "metrics", "input_sequence_length", "value"), 2**40,
     f"line 3: metrics.input_sequence_length.value: {TOO_LONG}"),
    ("inference_perf", "per_request_lifecycle_metrics.json", (1, "end_time"), math.inf,
     "[1].end_time: expected a finite number"),
    ("inference_perf", "per_request_lifecycle_metrics.json",
     (0, "info", "response_metrics", "server_usage", "completion_tokens"), 2**30,
     f"[0].info.output_tokens: {TOO_LONG}"),
    ("guidellm/v0.5.4-constant.json", None,
     ("benchmarks", 0, "requests", "successful", 0, "output_tokens"), 2**25,
     f"benchmarks[0].requests.successful[0].output_tokens: {TOO_LONG}"),
]


@pytest.mark.parametrize(("fixture", "name", "path", "value", "part"), IMPOSSIBLE,
                         ids=[f"{f}:{p[-1]}" for f, _, p, _, _ in IMPOSSIBLE])
def test_impossible_values_are_refused_by_name(tmp_path, fixture, name, path, value, part):
    """Counts beyond what any request holds (or int64), negative or non-finite times: one
    error naming the file, line and field, never a traceback or a replay of nonsense."""
    src = DATA / fixture
    if src.is_dir():
        shutil.copytree(src, tmp_path / src.name)
        target, edited = tmp_path / src.name, tmp_path / src.name / name
    else:
        target = edited = tmp_path / src.name
        shutil.copy(src, target)
    if edited.suffix == ".jsonl":
        edited.write_text(_jsonl_set(edited.read_text(), path[0], path[1:], value))
    else:
        data = json.loads(edited.read_text())
        _set(data, path, value)
        edited.write_text(json.dumps(data))
    with pytest.raises(UserError) as info:
        read_run(target)
    message = str(info.value)
    assert part in message and edited.name in message and "\n" not in message


@pytest.mark.parametrize(("field", "value", "part"), [
    ("total_input_tokens", 1e300, "input_len: a mean of 2.5e+299 tokens per request; expected "
                                  "0 to 16,777,216 (the longest request serveplan simulates)"),
    ("total_output_tokens", -40, "output_len: a mean of -10 tokens per request; expected 0"),
    ("completed", 2**40, "completed: 1,099,511,627,776 requests (with the failed ones), more "
                         "than the 1,048,576 a replay runs"),
    ("failed", -1e-9, "failed: expected a whole number of requests >= 0, got -1e-09"),
    ("completed", 3.5, "completed: expected a whole number of requests >= 0, got 3.5"),
])
def test_a_summary_beyond_what_a_replay_runs_is_refused(tmp_path, field, value, part):
    """A summary-only run is replayed as completed + failed requests of its mean lengths
    (total / completed: 1e300 / 4 = 2.5e299 tokens)."""
    data = json.loads((DATA / "vllm_summary.json").read_text())
    data[field] = value
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=re.escape(f"summary.json: {part}")):
        requests_for(read_run(path))


def test_inference_perf_stage_values_are_named(tmp_path):
    """An infinite stage rate in config.yaml and a null stage count are refused by field."""
    folder = tmp_path / "ip"
    shutil.copytree(DATA / "inference_perf", folder)
    config = folder / "config.yaml"
    good = config.read_text()
    config.write_text(good.replace("rate: 2.0", "rate: .inf"))
    with pytest.raises(UserError, match=re.escape(
            "config.yaml: load.stages[0].rate: expected a finite number >= 0, got number "
            "Infinity")):
        read_run(folder)
    config.write_text(good.replace("rate: 2.0", "rate: 0"))
    with pytest.raises(UserError, match=re.escape("load.stages[0].rate: expected a number > 0")):
        read_run(folder)
    config.write_text(good)
    stage = folder / "stage_0_lifecycle_metrics.json"
    data = json.loads(stage.read_text())
    data["load_summary"]["count"] = None
    stage.write_text(json.dumps(data))
    with pytest.raises(UserError, match=re.escape(
            "stage_0_lifecycle_metrics.json: load_summary.count: expected an integer, got null")):
        read_run(folder)
