"""``serveplan compare`` and ``calibrate --runs``: a run replayed against itself, terms
recovered from runs generated with them, and the command lines' errors.

The round trips are the independent check: a run that serveplan simulated, written in
vLLM's ``--save-result --save-detailed`` format and read back, must compare with zero
error (to float rounding), because the replay rebuilds the same requests and sends; and
runtime terms used to generate runs must come back from fitting those runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.commands.run_flags import other_model_note
from serveplan.e2e import with_terms
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.resolution import resolve
from serveplan.run_calibrate import RunCase, fit_runs, measured_medians
from serveplan.run_compare import as_bench_run, compare_run, latency_stats, replay, request_itls
from serveplan.runs import read_run
from serveplan.runs.model import Load, run_from_arrays
from serveplan.runs.vllm import write_vllm

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
POOL = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100", "engine": "vllm",
        "engine_version": "0.11.0", "max_num_seqs": 64, "num_gpu_blocks": 4000}


def _template(n: int, load: Load, seed: int = 1) -> object:
    """A run with lengths only (its latencies are placeholders the replay ignores)."""
    rng = np.random.default_rng(seed)
    zeros = np.zeros(n)
    return run_from_arrays(input_len=rng.integers(64, 512, n), output_len=rng.integers(8, 48, n),
                           ttft_s=zeros, e2e_s=zeros, load=load)


def _simulated_run(resolved, load: Load, n: int = 60, seed: int = 3):
    ds = replay(_template(n, load), resolved, seed)
    return as_bench_run(ds, load, model="llama-3.1-8b"), ds


@pytest.fixture(scope="module")
def resolved():
    return resolve({"pools": [POOL]})


def test_vllm_round_trip_compares_with_zero_error(resolved, tmp_path):
    run, _ = _simulated_run(resolved, Load("rate", request_rate=8.0))
    path = tmp_path / "run.json"
    write_vllm(run, path)
    back = read_run(path)
    comparison = compare_run(back, resolved, seed=3)
    errors = {k: comparison.error(k) for k in comparison.measured}
    assert errors and all(abs(e) < 1e-9 for e in errors.values() if math.isfinite(e)), errors
    # every metric the table shows is defined on both sides
    assert all(math.isfinite(comparison.predicted[k]) for k in ("p99_ttft_s", "p99_itl_s"))
    pairs = comparison.pairs
    np.testing.assert_allclose(pairs["measured_ttft_s"], pairs["predicted_ttft_s"], rtol=1e-9)
    np.testing.assert_allclose(pairs["measured_itl_s"], pairs["predicted_itl_s"], rtol=1e-9)


def test_itls_sum_to_each_requests_decode_time(resolved):
    """Per request, the gaps add up to finish - first token (they tile the decode span)."""
    _, ds = _simulated_run(resolved, Load("rate", request_rate=8.0))
    itl, offsets, _ = request_itls(ds)
    span = (ds["finish_s"] - ds["first_token_s"]).values
    n_out = ds["output_len"].values
    for i in np.flatnonzero(n_out > 1):
        gaps = itl[offsets[i]:offsets[i + 1]]
        assert len(gaps) == n_out[i] - 1
        assert gaps.sum() == pytest.approx(span[i], rel=1e-6, abs=1e-9)


def test_stats_follow_vllm_definitions():
    """Hand-computed: TPOT = (e2e - ttft) / (out - 1); failed requests left out; throughput
    over the duration."""
    run = run_from_arrays(input_len=[10, 10, 10], output_len=[5, 3, 1], ttft_s=[0.1, 0.2, 0.3],
                          e2e_s=[0.5, 0.4, 0.3], success=[True, True, False],
                          itls=[[0.1] * 4, [0.1, 0.1], []], send_s=[0.0, 1.0, 2.0],
                          load=Load("rate", request_rate=1.0))
    from serveplan.run_compare import measured_latencies

    stats = latency_stats(measured_latencies(run))
    assert stats["mean_tpot_s"] == pytest.approx((0.4 / 4 + 0.2 / 2) / 2)
    assert stats["mean_ttft_s"] == pytest.approx(0.15)
    assert stats["completed"] == 2 and stats["failed"] == 1
    # first send 0 -> last response 1.0 + 0.4
    assert stats["request_throughput"] == pytest.approx(2 / 1.4)
    assert stats["output_throughput"] == pytest.approx(8 / 1.4)


def test_calibrate_recovers_terms_from_runs_generated_with_them(resolved):
    truth = RuntimeTerms(frontend_request_s=0.03, step_cpu_s=0.004)
    cases = []
    for rate in (4.0, 12.0):
        run, _ = _simulated_run(with_terms(resolved, truth), Load("rate", request_rate=rate))
        cases.append(RunCase(run, resolved))
    fit = fit_runs(cases, RuntimeTerms(), names=("frontend_request_s", "step_cpu_s"),
                   max_evals=150, seed=3)
    assert fit.terms.frontend_request_s == pytest.approx(0.03, rel=0.15)
    assert fit.terms.step_cpu_s == pytest.approx(0.004, rel=0.15)
    assert fit.err_after.max() < 0.02 < fit.err_before.max()
    assert "tp_sync_per_layer_s" not in fit.fitted


def test_calibrate_refuses_a_tp_term_without_tp_contrast(resolved):
    run, _ = _simulated_run(resolved, Load("rate", request_rate=8.0), n=20)
    fit = fit_runs([RunCase(run, resolved)], RuntimeTerms(), names=("tp_sync_per_layer_s",),
                   max_evals=5)
    assert fit.fitted == () and "tensor-parallel size 1 and > 1" in fit.skipped[
        "tp_sync_per_layer_s"]


def test_measured_medians_need_successes(resolved, tmp_path):
    run = run_from_arrays(input_len=[10], output_len=[1], ttft_s=[float("nan")],
                          e2e_s=[float("nan")], success=[False], path=tmp_path / "x.json")
    from serveplan.user_input import UserError

    with pytest.raises(UserError, match="x.json"):
        measured_medians(RunCase(run, resolved))


# ----------------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def written_run(tmp_path_factory, resolved):
    run, _ = _simulated_run(resolved, Load("rate", request_rate=8.0), n=40)
    path = tmp_path_factory.mktemp("runs") / "bench.json"
    write_vllm(run, path)
    return path


FLAGS = ["--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--engine-version",
         "0.11.0", "--max-num-seqs", "64", "--num-gpu-blocks", "4000"]


def test_compare_command_json_out_and_plot(written_run, tmp_path):
    out, png = tmp_path / "pairs.nc", tmp_path / "cdf.png"
    res = runner.invoke(app, ["compare", str(written_run), *FLAGS, "--seed", "3", "--json",
                              "--out", str(out), "--plot", str(png)])
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.stdout)["metrics"]
    assert abs(metrics["p50_ttft_s"]["error"]) < 1e-9
    ds = xr.open_dataset(out, engine="h5netcdf")
    assert ds.attrs["kind"] == "compare" and ds.sizes["request"] == 40
    assert png.stat().st_size > 10_000


def test_compare_command_table(written_run):
    res = runner.invoke(app, ["compare", str(written_run), *FLAGS])
    assert res.exit_code == 0, res.output
    assert "p99_itl" in res.output and "measured" in res.output


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama-3.1-8b"], "--gpu"),
    (["--gpu", "h100", "--engine-version", "0.11"], "--engine"),
    (["--gpu", "h100", "--model", "no-such-model"], "no-such-model"),
])
def test_compare_command_errors(written_run, argv, message):
    res = runner.invoke(app, ["compare", str(written_run), *argv])
    assert res.exit_code == 1
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("run_model, differs", [
    ("meta-llama/Llama-3.1-8B-Instruct", False),  # a variant of the same architecture
    ("nvidia/Llama-3.1-8B-Instruct-FP8", False),  # a quantized checkpoint of it
    ("/models/my-finetune", False),  # a name the catalog does not know: nothing to say
    (None, False),
    ("llama-3.1-70b", True), ("qwen3-30b-a3b", True)])
def test_a_run_of_another_model_is_noted(resolved, run_model, differs):
    note = other_model_note(run_model, Path("run.json"), resolved)
    assert (note is not None) == differs
    if differs:
        assert note.startswith(f"run.json ran {run_model} (") and "llama-3.1-8b" in note


def test_compare_notes_a_model_flag_the_run_did_not_run(written_run):
    flags = [*FLAGS]
    flags[flags.index("llama-3.1-8b")] = "llama-3.1-70b"
    flags[flags.index("4000")] = "20000"
    res = runner.invoke(app, ["compare", str(written_run), *flags, "--tp", "4"])
    assert res.exit_code == 0, res.output
    assert (f"note: {written_run.name} ran llama-3.1-8b (llama-3.1-8b); the deployment "
            "simulates llama-3.1-70b, another architecture") in res.output


def test_compare_malformed_result_names_the_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"completed": 3}')
    res = runner.invoke(app, ["compare", str(bad), "--gpu", "h100"])
    assert res.exit_code == 1 and "broken.json" in res.output and "Traceback" not in res.output


def _calibrate_json(run, out, *extra) -> dict:
    """``calibrate --runs RUN ... --json`` on the test deployment: its printed report."""
    res = runner.invoke(app, ["calibrate", "--runs", str(run), *FLAGS, "--out", str(out),
                              *extra, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_calibrate_runs_command(written_run, tmp_path):
    out = tmp_path / "terms.json"
    report = _calibrate_json(written_run, out, "--max-evals", "20", "--seed", "3")
    assert report["leave_one_run_out"][0]["ttft_err_after"] is None  # one run: none held out
    assert "tp_sync_per_layer_s" in report["skipped"]
    # the profile loads as a pool's runtime profile
    pool = {**POOL, "runtime_profile": str(out)}
    runtime = resolve({"pools": [pool]}).pools[0].instance.runtime
    assert runtime.terms.model_dump() == report["terms"]
    # its fit domain is the run's deployment, which therefore lies inside it
    domain = json.loads(out.read_text())["domain"]
    assert domain["gpus"] == ["h100"] and domain["models"] == ["llama-3.1-8b"]
    assert domain["dense"] and not domain["moe"] and runtime.outside_fit == ()
    assert domain["gpus_per_instance"] == [1, 1]  # one H100 an instance (tp 1)
    assert domain["modes"] == ["colocated"]  # so a prefill/decode split is named outside
    split = {"pools": [{**pool, "role": "prefill"}, {**pool, "role": "decode"}]}
    assert resolve(split).pools[1].instance.runtime.outside_fit == (
        "it runs disaggregated; theirs ran colocated only",)


def test_pd_deployment_itls_tile_the_decode_span(tmp_path):
    """A prefill/decode deployment (the example's pools): every request's gaps are placed
    on its decode instance's steps and add up to finish - first token."""
    from serveplan.commands.run_flags import deployment_from_file

    pd = resolve(deployment_from_file(REPO / "examples" / "pd-pools.yaml"))
    ds = replay(_template(40, Load("rate", request_rate=6.0)), pd, seed=2)
    itl, offsets, equal = request_itls(ds)
    assert equal == 0
    span = (ds["finish_s"] - ds["first_token_s"]).values
    sums = np.array([itl[a:b].sum() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    multi = ds["output_len"].values > 1
    np.testing.assert_allclose(sums[multi], span[multi], rtol=1e-6)


def test_calibrate_runs_manifest(written_run, tmp_path):
    """Runs on their own deployments, listed in a YAML manifest (paths relative to it)."""
    import shutil

    shutil.copy(written_run, tmp_path / "a.json")
    dep = {k: v for k, v in POOL.items() if k != "role"}
    (tmp_path / "runs.yaml").write_text(json.dumps({"runs": [
        {"result": "a.json", "deployment": dep},
        {"result": "a.json", "deployment": {**dep, "tp": 2}}]}))
    out = tmp_path / "terms.json"
    res = runner.invoke(app, ["calibrate", "--runs", str(tmp_path / "runs.yaml"), "--out",
                              str(out), "--max-evals", "5", "--seed", "3", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [r["run"] for r in report["leave_one_run_out"]] == ["a.json", "a.json"]
    assert "tp_sync_per_layer_s" in report["fitted"]  # runs at TP 1 and 2 identify it
    bad = tmp_path / "bad.yaml"
    bad.write_text("runs: [{result: a.json}]\n")
    res = runner.invoke(app, ["calibrate", "--runs", str(bad), "--out", str(out)])
    assert res.exit_code == 1 and "runs.0" in res.output and "deployment" in res.output


def test_calibrate_runs_fits_only_the_terms_asked_for(written_run, tmp_path):
    report = _calibrate_json(written_run, tmp_path / "terms.json", "--max-evals", "10",
                             "--terms", "frontend_output_s")
    assert report["fitted"] == ["frontend_output_s"] and report["skipped"] == {}
    shipped = resolve({"pools": [POOL]}).pools[0].instance.runtime.terms.model_dump()
    fitted = {k: v for k, v in report["terms"].items() if k != "frontend_output_s"}
    assert fitted == {k: v for k, v in shipped.items() if k != "frontend_output_s"}


def test_calibrate_runs_refuses_an_unknown_term(written_run, tmp_path):
    res = runner.invoke(app, ["calibrate", "--runs", str(written_run), *FLAGS, "--out",
                              str(tmp_path / "t.json"), "--terms", "frontend_output_s,warp_s"])
    assert res.exit_code == 1
    assert "--terms: warp_s: not a runtime term" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "t.json").exists()


def test_calibrate_terms_help_names_every_term():
    """The --terms help lists the default terms and the others: every term the fit knows."""
    import re

    from serveplan.commands.calibrate import FitTerms
    from serveplan.estimator.runtime_fit import TERM_SCALES

    help_text = FitTerms.__metadata__[0].help
    assert set(re.findall(r"[a-z_]+_s\b", help_text)) == set(TERM_SCALES)


def test_calibrate_terms_needs_runs(tmp_path):
    res = runner.invoke(app, ["calibrate", "--terms", "frontend_output_s", "--out",
                              str(tmp_path / "p.json"), "--gpu", "h100"])
    assert res.exit_code == 1 and "--terms goes with --runs" in res.output
    assert "Traceback" not in res.output


def test_compare_says_what_max_model_len_refused_or_cut(written_run):
    """vLLM refuses a prompt of max_model_len tokens or more and stops an output at
    max_model_len tokens in all; counted here from the run's lengths by hand."""
    run = read_run(written_run)
    prompt, output = run.input_len, run.output_len
    limit = int(np.median(prompt)) + 1
    refused = int(np.sum(prompt >= limit))
    capped = int(np.sum((prompt < limit) & (prompt + output > limit)))
    assert refused and capped  # the fixture's lengths straddle the limit
    flags = [*FLAGS, "--max-model-len", str(limit), "--max-num-batched-tokens", "8192"]
    res = runner.invoke(app, ["compare", str(written_run), *flags, "--json"])
    assert res.exit_code == 0, res.output
    notes = json.loads(res.stdout)["notes"]
    n, where = run.n, f"the deployment's max_model_len ({limit:,} tokens)"
    assert f"{refused} of {n} prompts reach {where}: the replay refuses them" in " ".join(notes)
    assert f"{capped} of {n} requests ask for more tokens than {where} holds" in " ".join(notes)
    assert json.loads(res.stdout)["metrics"]["failed"]["predicted"] == refused
