"""A node's step terms from fixed-batch latency runs (serveplan/batch_calibrate.py,
``calibrate --batch-runs``): the slope against the oracle, the fit against latencies made
by hand, the vLLM latency file, and what a bad manifest gets."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from serveplan.batch_calibrate import (
    batch_latency,
    calibrate_batches,
    latency_slopes,
    price_runs,
    read_latency_json,
    read_manifest,
)
from serveplan.cli import app
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import load_profile
from serveplan.estimator.runtime import load_runtime_profile
from serveplan.user_input import UserError

RUNS = [("llama-3.1-8b", 1, 8, 256, 128), ("llama-3.1-8b", 2, 8, 256, 256),
        ("Qwen/Qwen3-8B", 1, 4, 512, 128), ("Qwen/Qwen3-8B", 4, 1, 128, 64),
        ("llama-3.1-70b", 4, 4, 256, 128)]
"""(model, tp, batch_size, input_len, output_len) of a node's runs."""


def _manifest(tmp_path, latencies, runs=RUNS, name="node.yaml", **top) -> str:
    entries = [{"latency_s": float(s), "model": m, "tp": tp, "batch_size": b,
                "input_len": i, "output_len": o}
               for s, (m, tp, b, i, o) in zip(latencies, runs, strict=True)]
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"gpu": "h100", "engine": "vllm", **top, "runs": entries}))
    return path


def test_step_overhead_slope_is_the_oracles():
    """The slope the fit uses -- a batch's latency moves by its output length per second
    of step overhead -- is what the oracle does: its batch of 8 x (256 in, 64 out) priced
    with a 2.5 ms step overhead instead of the profile's is 64 x (2.5 ms - profile's)
    slower."""
    oracle = CostOracle("meta-llama/Llama-2-7b-hf", "h100", tp=1, dtype="fp16", kv_dtype="fp16")
    base = batch_latency(oracle, 8, 256, 64)
    slower = batch_latency(oracle.with_runtime(step_overhead_s=2.5e-3), 8, 256, 64)
    step_slope, sync_slope = latency_slopes([64], [32], [1])[0]
    assert (step_slope, sync_slope) == (64.0, 0.0)
    assert slower - base == pytest.approx(64 * (2.5e-3 - oracle.profile_step_overhead_s),
                                          rel=1e-6)


def test_a_nodes_terms_come_back_and_carry_to_a_model_held_out(tmp_path):
    """Latencies made by hand from the oracle's batches on a node that spends 2.0 ms a step
    and 45 us a layer and step at tp > 1 (Llama-3.1-8B: 32 layers, Qwen3-8B: 36,
    Llama-3.1-70B: 80): ``measured = oracle + out x (2.0 ms - profile's) + out x layers x
    [tp > 1] x 45 us``. The fit gives those terms back, each model's batches are predicted
    within 0.1 % by terms fitted on the other two (each leaves runs at TP 1 and TP > 1),
    and the profile written carries them."""
    step0 = load_profile("h100").step_overhead_s
    placeholder = _manifest(tmp_path, [1.0] * len(RUNS))
    priced = price_runs(placeholder, read_manifest(placeholder))
    layers = {"llama-3.1-8b": 32, "Qwen/Qwen3-8B": 36, "llama-3.1-70b": 80}
    measured = [p + o * (2.0e-3 - step0) + o * layers[m] * (tp > 1) * 45e-6
                for p, (m, tp, _, _, o) in zip(priced.predicted_s, RUNS, strict=True)]
    out = tmp_path / "node-vllm.json"
    report = calibrate_batches(_manifest(tmp_path, measured), out)
    assert report["terms"]["step_overhead_s"] == pytest.approx(2.0e-3, rel=1e-3)
    assert report["terms"]["tp_sync_per_layer_s"] == pytest.approx(45e-6, rel=1e-3)
    assert report["held_out_by"] == "model"
    held = np.array([r["err_held_out"] for r in report["runs"]])
    assert np.abs(held).max() < 1e-3
    assert report["runs"][4]["err_before"] < -0.15  # the 70B at TP 4: too fast unfitted
    terms = load_runtime_profile("vllm", out).terms
    assert (terms.step_overhead_s, terms.tp_sync_per_layer_s) == (
        pytest.approx(2.0e-3, rel=1e-3), pytest.approx(45e-6, rel=1e-3))
    assert terms.frontend_output_s == load_runtime_profile("vllm").terms.frontend_output_s


def test_vllm_latency_file_gives_its_median(tmp_path):
    """``vllm bench latency --output-json``: the median of ``latencies`` (2.0 of 1, 2 and
    10 s), ``avg_latency`` when it lists none; anything else is named."""
    path = tmp_path / "lat.json"
    path.write_text(json.dumps({"avg_latency": 4.33, "latencies": [1.0, 2.0, 10.0],
                                "percentiles": {"50": 2.0}}))
    assert read_latency_json(path) == 2.0
    path.write_text(json.dumps({"avg_latency": 4.33}))
    assert read_latency_json(path) == 4.33
    for bad in ({"latencies": [1.0, -2.0]}, {"avg_latency": "fast"}, [1, 2], {}):
        path.write_text(json.dumps(bad))
        with pytest.raises(UserError, match="latencies .or avg_latency.: expected seconds > 0"):
            read_latency_json(path)
    path.write_text("{truncated")
    with pytest.raises(UserError, match="not a vllm bench latency JSON file"):
        read_latency_json(path)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["runs"][0].pop("batch_size"), "runs[0].batch_size: Field required"),
    (lambda m: m["runs"][1].update(latency="lat.json"),
     "runs[1]: give latency (a vllm bench latency JSON file) or latency_s (seconds), one "
     "of them"),
    (lambda m: m["runs"][2].update(tp=0), "runs[2].tp: Input should be greater than or equal "
                                          "to 1"),
    (lambda m: m.update(engine="tgi"), "engine: Input should be 'vllm', 'sglang' or 'trtllm'"),
])
def test_manifest_problems_name_the_field_and_line(tmp_path, edit, message):
    path = _manifest(tmp_path, [1.0] * len(RUNS))
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as err:
        read_manifest(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_impossible_runs_are_refused_by_name(tmp_path):
    """A batch the KV cache cannot hold would be preempted: refused, as is a model the
    catalog does not know, each naming its run."""
    huge = [("llama-3.1-8b", 1, 4096, 8192, 8192)]
    path = _manifest(tmp_path, [100.0], huge)
    with pytest.raises(UserError, match=r"runs\[0\]: the batch holds 67,108,864 tokens and "
                                        r"vllm's KV cache [\d,]+: the engine would preempt"):
        price_runs(path, read_manifest(path))
    path = _manifest(tmp_path, [1.0], [("no-such-model", 1, 1, 8, 8)])
    with pytest.raises(UserError, match=r"runs\[0\]: .*no-such-model"):
        price_runs(path, read_manifest(path))


def test_cli_writes_the_profile_and_prints_the_runs(tmp_path):
    (tmp_path / "lat.json").write_text(json.dumps({"latencies": [0.5, 0.6, 0.7]}))
    path = _manifest(tmp_path, [1.0, 2.0, 0.6, 3.0, 4.0])
    data = yaml.safe_load(path.read_text())
    data["runs"][2] = {**{k: v for k, v in data["runs"][2].items() if k != "latency_s"},
                       "latency": "lat.json"}
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "fitted.json"
    r = CliRunner().invoke(app, ["calibrate", "--batch-runs", str(path), "-o", str(out),
                                 "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert [x["run"] for x in report["runs"]] == ["runs[0]", "runs[1]", "lat.json", "runs[3]",
                                                "runs[4]"]
    assert report["runs"][2]["measured_s"] == 0.6 and out.is_file()
    r = CliRunner().invoke(app, ["calibrate", "--batch-runs", str(path), "-o", str(out),
                                 "--runs", str(path)])
    assert r.exit_code == 1 and "give fixed-batch runs alone" in r.stderr
    r = CliRunner().invoke(app, ["calibrate", "--batch-runs", str(tmp_path / "nope.yaml"),
                                 "-o", str(out)])
    assert r.exit_code == 1 and "is not a file" in r.stderr and "Traceback" not in r.output


def test_what_the_runs_cannot_tell_is_said(tmp_path):
    """Runs at TP 4 alone cannot separate the synchronisation from the step overhead (it is
    not fitted, and the report says why); a run 20x slower than its batch asks for more
    than the step overhead's bound (10 ms), which is said rather than passed off as a fit."""
    path = _manifest(tmp_path, [60.0], [("llama-3.1-8b", 4, 4, 64, 512)])
    report = calibrate_batches(path, tmp_path / "o.json")
    assert report["terms"] == {"step_overhead_s": pytest.approx(10e-3),
                               "tp_sync_per_layer_s": 0.0}
    assert report["notes"][0].startswith("tp_sync_per_layer_s not fitted: it needs runs at "
                                         "tensor-parallel size 1 and > 1")
    assert report["notes"][1].startswith("step_overhead_s is at its bound (10 ms)")
    assert report["runs"][0]["err_held_out"] is None  # a lone run: nothing to hold out
