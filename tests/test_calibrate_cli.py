"""`serveplan calibrate` through typer's CliRunner: a fitted profile that `--profile` loads,
and one-line errors for bad measurement files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.opwork import op_times, op_work
from serveplan.estimator.profile import Efficiency, PhaseEfficiency, Profile

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _gemm_csv(path, gpu="l40s", n_rows=None, latency_col="latency_us"):
    """GEMM timings of a GPU whose GEMMs run at e_c = 0.5, e_m = 0.6, 5 µs per kernel."""
    ms = 2 ** np.arange(0, 14)
    sites = [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 2048)]
    df = pd.DataFrame([dict(op_family="gemm", gpu=gpu, engine="vllm", dtype="bf16", m=m, n=n, k=k)
                       for m in ms for n, k in sites])
    eff = PhaseEfficiency(prefill=Efficiency(ec=0.5, em=0.6), decode=Efficiency(ec=0.5, em=0.6))
    truth = Profile(efficiency={**Profile().efficiency, "gemm": eff},
                    kernel_fixed_family_s={"gemm": 5e-6})
    t = op_times(op_work(df, resolve_gpu("l40s")), resolve_gpu("l40s"), truth)
    df[latency_col] = t * 1e6 if latency_col == "latency_us" else t
    if n_rows is not None:
        df = df.head(n_rows)
    df.to_csv(path, index=False)
    return path


def test_calibrate_writes_a_profile_that_estimate_loads(tmp_path):
    src = _gemm_csv(tmp_path / "gemm.csv")
    out = tmp_path / "l40s-mine.json"
    r = run("calibrate", "--gpu", "l40s", "--measurements", src, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["correctors"] == ["gemm:bf16"]
    prof = json.loads(out.read_text())
    assert prof["efficiency"]["gemm"]["prefill"]["ec"] == pytest.approx(0.5, rel=0.02)
    assert prof["kernel_fixed_family_s"]["gemm"] == pytest.approx(5e-6, rel=0.05)
    a = run("estimate", "--model", "llama-3.1-8b", "--gpu", "l40s", "--phase", "prefill",
            "--batch", "1", "--input-len", "2048", "--profile", out, "--json")
    b = run("estimate", "--model", "llama-3.1-8b", "--gpu", "l40s", "--phase", "prefill",
            "--batch", "1", "--input-len", "2048", "--json")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert json.loads(a.output)["time_s"] != json.loads(b.output)["time_s"]


def test_calibrate_table_output(tmp_path):
    src = _gemm_csv(tmp_path / "gemm.csv")
    r = run("calibrate", "-g", "l40s", "-m", src, "-o", tmp_path / "p.json", "--no-correctors")
    assert r.exit_code == 0, r.output
    assert "gemm" in r.output and "0 corrector table(s)" in r.output
    assert "serveplan estimate --profile" in r.output


def test_missing_columns_is_one_line_error(tmp_path):
    src = _gemm_csv(tmp_path / "gemm.csv")
    pd.read_csv(src).drop(columns=["engine"]).to_csv(src, index=False)
    r = run("calibrate", "--gpu", "l40s", "--measurements", src, "--out", tmp_path / "p.json")
    assert r.exit_code == 1
    assert "missing required column" in r.output and "engine" in r.output
    assert "Traceback" not in r.output


def test_unknown_latency_unit_names_the_accepted_ones(tmp_path):
    src = _gemm_csv(tmp_path / "gemm.csv")
    pd.read_csv(src).rename(columns={"latency_us": "latency_ns"}).to_csv(src, index=False)
    r = run("calibrate", "--gpu", "l40s", "--measurements", src, "--out", tmp_path / "p.json")
    assert r.exit_code == 1
    assert "latency_ns" in r.output and "latency_ms" in r.output and "latency_us" in r.output


def test_too_few_rows(tmp_path):
    src = _gemm_csv(tmp_path / "gemm.csv", n_rows=8)
    r = run("calibrate", "--gpu", "l40s", "--measurements", src, "--out", tmp_path / "p.json")
    assert r.exit_code == 1 and "fewer than --min-rows 20" in r.output
    r = run("calibrate", "--gpu", "l40s", "--measurements", src, "--out", tmp_path / "p.json",
            "--min-rows", "5")  # a smaller threshold lets the 8 GEMM rows be fitted
    assert r.exit_code == 0, r.output
    r = run("calibrate", "--gpu", "l40s", "--measurements", src, "--out", tmp_path / "p.json",
            "--min-rows", "8", "--no-correctors")
    assert r.exit_code == 0, r.output


def test_wrong_gpu_and_missing_file(tmp_path):
    src = _gemm_csv(tmp_path / "gemm.csv")
    r = run("calibrate", "--gpu", "h100", "--measurements", src, "--out", tmp_path / "p.json")
    assert r.exit_code == 1 and "no measurements for GPU 'h100'" in r.output and "l40s" in r.output
    r = run("calibrate", "--gpu", "h100", "--measurements", tmp_path / "nope.csv",
            "--out", tmp_path / "p.json")
    assert r.exit_code == 1 and "no such measurements file" in r.output
    r = run("calibrate", "--gpu", "h100", "--out", tmp_path / "p.json")
    assert r.exit_code == 1 and "give measurements" in r.output


def test_readme_form_files_as_arguments_and_gpu_from_the_data(tmp_path):
    """`serveplan calibrate measurements.csv --out my-gpu.json`: the GPU is the one the
    file's gpu column names; the fit equals the one with --gpu and -m."""
    src = _gemm_csv(tmp_path / "measurements.csv")
    r = run("calibrate", src, "--out", tmp_path / "a.json", "--no-correctors")
    assert r.exit_code == 0, r.output
    r = run("calibrate", "--gpu", "l40s", "-m", src, "--out", tmp_path / "b.json",
            "--no-correctors")
    assert r.exit_code == 0, r.output
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert a["efficiency"] == b["efficiency"]


def test_several_gpus_in_the_data_need_gpu(tmp_path):
    one, two = _gemm_csv(tmp_path / "a.csv"), _gemm_csv(tmp_path / "b.csv", gpu="h100")
    r = run("calibrate", one, two, "--out", tmp_path / "p.json")
    assert r.exit_code == 1 and "choose one with --gpu" in r.output
    assert "h100" in r.output and "l40s" in r.output
    r = run("calibrate", one, two, "--gpu", "l40s", "--out", tmp_path / "p.json",
            "--no-correctors")
    assert r.exit_code == 0, r.output
