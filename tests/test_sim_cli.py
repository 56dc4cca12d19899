"""``serveplan simulate`` through typer's CliRunner, and the ``serveplan.simulate`` facade."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

import serveplan
from serveplan.cli import app
from serveplan.config import SimulationConfig, load_config

runner = CliRunner()

DEPLOYMENT = {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 4000,
              "max_model_len": 4096}
WORKLOAD = {"kind": "poisson", "rate": 8.0, "num_requests": 60, "isl": 256,
            "osl": {"dist": "uniform", "low": 4, "high": 32}}


@pytest.fixture(autouse=True)
def _compiled(sim_compiled, oracle_8b):
    return sim_compiled


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump({"deployment": DEPLOYMENT, "workload": WORKLOAD,
                                    "slo": {"ttft_ms": 1000, "tpot_ms": 100}, "seed": 1}))
    return path


def run(*args):
    return runner.invoke(app, ["simulate", *map(str, args)])


def test_table_output(cfg_file):
    r = run(cfg_file)
    assert r.exit_code == 0, r.output
    for text in ("TTFT", "TPOT", "request_throughput", "slo_met"):
        assert text in r.output


def test_json_summary_and_overrides(cfg_file):
    r = run(cfg_file, "--json", "--requests", 40, "--rate", 4)
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["completed"] == 40 and s["failed"] == 0
    assert s["slo_met"] in (True, False)
    assert s["median_ttft_ms"] > 0 and s["median_tpot_ms"] > 0


def test_netcdf_output_readable_by_plain_xarray(cfg_file, tmp_path):
    out = tmp_path / "run.nc"
    r = run(cfg_file, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    ds = xr.open_dataset(out)
    assert ds.sizes["request"] == 60 and ds.sizes["step"] > 0
    assert ds.attrs["serveplan_version"] == serveplan.__version__
    cfg = json.loads(ds.attrs["config"])
    assert cfg["workload"]["rate"] == 8.0 and cfg["seed"] == 1
    resolved = json.loads(ds.attrs["resolved"])
    assert resolved["num_gpu_blocks"] == 4000 and resolved["usable_kv_blocks"] == 3999
    assert json.loads(ds.attrs["summary"]) == json.loads(r.stdout)


def test_concurrency_switches_to_closed_loop(cfg_file, tmp_path):
    out = tmp_path / "cl.nc"
    r = run(cfg_file, "--concurrency", 4, "--isl", 128, "--osl", 16, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    ds = xr.open_dataset(out)
    assert json.loads(ds.attrs["config"])["workload"]["kind"] == "closed-loop"
    np.testing.assert_allclose(ds["arrival_s"].values[4:], ds["finish_s"].values[:-4])
    assert int(ds["output_len"].values.max()) == 16


def test_trace_needs_timestamps_or_a_rate(cfg_file, shared_data):
    sharegpt = (shared_data / "vidur" / "processed_traces"
                / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
    r = run(cfg_file, "--trace", sharegpt, "--requests", 30)
    assert r.exit_code == 1
    assert "has no timestamps" in r.output and "Traceback" not in r.output
    r = run(cfg_file, "--trace", sharegpt, "--requests", 30, "--rate", 5,
            "--set", "workload.arrival=poisson", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    # prompts of max_model_len (4096) tokens or more are rejected, as by vLLM
    assert s["completed"] + s["failed"] == 30 and s["completed"] > 20


def test_trace_replay_azure(cfg_file, shared_data):
    azure = shared_data / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    r = run(cfg_file, "--trace", azure, "--requests", 50, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["completed"] == 50


@pytest.mark.parametrize("args, message", [
    (["--set", "deployment.foo=1"], "deployment.foo: Extra inputs are not permitted"),
    (["--rate", "-1"], "rate: Input should be greater than 0"),
    (["--set", "workload.kind=weird"], "workload: Input tag 'weird' found using 'kind'"),
    (["--scheduler", "fifo"], "fifo"),
    (["--set", "deployment.tp=x"], "deployment.tp: Input should be a valid integer"),
])
def test_bad_config_is_reported_without_traceback(cfg_file, args, message):
    r = run(cfg_file, *args)
    assert r.exit_code != 0
    assert message in r.output
    assert "Traceback" not in r.output


def test_missing_file_and_unrunnable_config(tmp_path, cfg_file):
    r = run(tmp_path / "nope.yaml")
    assert r.exit_code == 1 and "does not exist" in r.output
    r = run(cfg_file, "--num-gpu-blocks", 3)
    assert r.exit_code == 1 and "num_gpu_blocks" in r.output and "Traceback" not in r.output


def test_python_facade_is_deterministic():
    a = serveplan.simulate(DEPLOYMENT, WORKLOAD, seed=3)
    b = serveplan.simulate(DEPLOYMENT, WORKLOAD, seed=3)
    c = serveplan.simulate(DEPLOYMENT, WORKLOAD, seed=4)
    xr.testing.assert_identical(a, b)
    assert not np.array_equal(a["arrival_s"].values, c["arrival_s"].values)
    assert {"ttft_s", "tpot_s", "e2e_s", "queue_s", "itl_max_s", "num_preemptions",
            "prefix_hit_tokens"} <= set(a.data_vars)
    assert a["request"].size == 60


def test_memory_planner_sizes_the_cache():
    ds = serveplan.simulate({"model": "llama-3.1-8b", "gpu": "h100", "max_model_len": 8192},
                            {"kind": "constant", "rate": 2, "num_requests": 10})
    resolved = json.loads(ds.attrs["resolved"])
    assert resolved["memory_plan"]["num_gpu_blocks"] == resolved["num_gpu_blocks"] > 1000


def test_file_then_overrides(cfg_file):
    cfg = load_config(cfg_file, {"workload.rate": 2.5, "deployment.router": "least-requests"})
    assert cfg.workload.rate == 2.5 and cfg.deployment.router == "least-requests"
    assert cfg.deployment.num_gpu_blocks == 4000


_FIELDS = st.sampled_from([
    "deployment.tp", "deployment.max_num_seqs", "deployment.max_num_batched_tokens",
    "deployment.gpu_memory_utilization", "deployment.block_size", "deployment.num_instances",
    "deployment.watermark", "workload.rate", "workload.num_requests", "seed"])
_BAD = st.one_of(st.integers(-5, 0), st.floats(-1.0, 0.0), st.text(max_size=3),
                 st.just([1, 2]), st.just({"a": 1}))


@settings(max_examples=60, deadline=None)
@given(_FIELDS, _BAD)
def test_bad_values_name_their_field(field, value):
    data = {"deployment": DEPLOYMENT, "workload": WORKLOAD}
    from serveplan.config import set_path

    data = set_path(data, field, value)
    try:
        SimulationConfig.model_validate(data)
    except ValidationError as exc:
        locs = [".".join(str(p) for p in e["loc"]) for e in exc.errors()]
        leaf = field.rsplit(".", 1)[-1]
        assert any(leaf in loc for loc in locs), (field, value, locs)


def test_vllm_startup_checks(cfg_file):
    r = run(cfg_file, "--max-num-seqs", 512, "--max-num-batched-tokens", 256)
    assert r.exit_code == 1 and "must be >= max_num_seqs (512)" in r.output
    r = run(cfg_file, "--scheduler", "prefill-priority", "--max-num-batched-tokens", 2048)
    assert r.exit_code == 1 and "smaller than max_model_len (4096)" in r.output
    r = run(cfg_file, "--scheduler", "prefill-priority", "--json")
    assert r.exit_code == 0, r.output


def test_rejected_requests_count_against_the_slo(cfg_file, tmp_path):
    """Prompts of max_model_len tokens or more are rejected at arrival; they are failures
    in the summary, with the reason, and SLO misses: attainment is computed here by hand
    over every request, the rejected ones included."""
    out = tmp_path / "rej.nc"
    r = run(cfg_file, "--set", "workload.isl={dist: uniform, low: 100, high: 300}", "--set",
            "deployment.max_model_len=200", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    ds = xr.open_dataset(out)
    prompt = ds["prompt_len"].values
    rejected = int((prompt >= 200).sum())
    assert 10 < rejected < 50 and s["failed"] == rejected
    assert s["completed"] + s["failed"] == 60
    assert f"{rejected} rejected at arrival" in s["failed_reason"]
    assert "max_model_len=200" in s["failed_reason"]
    served = prompt < 200
    ok = ((ds["ttft_s"].values[served] <= 1.0)
          & ~(ds["tpot_s"].values[served] > 0.1))  # goals of cfg_file: 1000 ms, 100 ms
    assert s["slo_attainment"] == pytest.approx(ok.sum() / 60)
    assert s["slo_met"] is False and s["slo_p90_ttft_ms"] is None  # inf: not JSON
    table = run(cfg_file, "--set", "workload.isl={dist: uniform, low: 100, high: 300}",
                "--set", "deployment.max_model_len=200")
    text = " ".join(table.output.split())
    assert (f"failed: {rejected} of 60 requests: {rejected} rejected at arrival, prompt too "
            "long (prompt_len >= max_model_len=200)") in text
    assert "count against the SLO as misses" in text


PD_DEPLOYMENT = {"architecture": "pd",
                 "prefill": {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 4000,
                             "max_model_len": 4096},
                 "decode": {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 4000,
                            "max_model_len": 4096}}


@pytest.mark.parametrize("ttft_ms, word", [(1000, "yes"), (0.001, "no")])
def test_slo_met_reads_the_same_for_colocated_and_pd(tmp_path, ttft_ms, word):
    for name, deployment in (("colocated", DEPLOYMENT), ("pd", PD_DEPLOYMENT)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"deployment": deployment, "workload": WORKLOAD,
                                        "slo": {"ttft_ms": ttft_ms, "tpot_ms": 100}}))
        r = run(path, "--requests", 20)
        assert r.exit_code == 0, r.output
        row = [ln for ln in r.output.splitlines() if "slo_met" in ln]
        assert len(row) == 1 and row[0].split()[-2] == word, (name, row)
        assert json.loads(run(path, "--requests", 20, "--json").stdout)["slo_met"] is (
            word == "yes")


def test_flags_replace_a_workload_field_given_under_the_clients_name():
    """``-n`` / ``--rate`` replace ``num_prompts`` / ``request_rate`` (vllm bench serve's
    names) instead of clashing with them; an inference-perf workload, whose stages set both,
    refuses them with a clear error."""
    from serveplan.commands.common import resolve_overrides
    from serveplan.errors import UserError

    bench = {"workload": {"kind": "vllm-bench-serve", "num_prompts": 1000,
                          "request_rate": 12, "max_concurrency": 48}}
    w = resolve_overrides(bench, requests=100, rate=3.0)["workload"]
    assert w == {"kind": "vllm-bench-serve", "num_requests": 100, "rate": 3.0,
                 "max_concurrency": 48}
    staged = {"workload": {"kind": "inference-perf", "stages": [{"rate": 2, "duration": 5}]}}
    with pytest.raises(UserError, match="inference-perf workload takes its rate and request"):
        resolve_overrides(staged, requests=100)
