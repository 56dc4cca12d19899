"""``serveplan goodput`` through typer's CliRunner."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from serveplan.cli import app

CFG = {
    "deployment": {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "num_instances": 1,
                   "max_model_len": 4096},
    "workload": {"kind": "poisson", "num_requests": 600, "isl": 1024, "osl": 32},
    "slo": {"ttft_ms": 400, "tpot_ms": 40},
    "goodput": {"fidelity": "request", "seeds": 2, "rtol": 0.05},
}


def write(tmp_path, data):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_goodput_json_and_netcdf(tmp_path):
    out = tmp_path / "g.nc"
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, CFG)), "--json",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["strategy"] == "1m" and s["fidelity"] == "request"
    assert s["goodput_low"] <= s["goodput"] < s["goodput_high"]
    assert s["binding"] in ("TTFT", "TPOT") and s["binding"] in s["summary"]
    assert s["goodput"] <= s["verifiable_up_to"] < s["capacity_bound"]
    assert out.exists()


def test_goodput_table_and_overrides(tmp_path):
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, CFG)), "--fidelity",
                                   "analytic", "--ttft", "0.3"])
    assert res.exit_code == 0, res.output
    assert "goodput of 1m" in res.stdout and "analytic level" in res.stdout


def test_goodput_errors_are_one_line(tmp_path):
    bad = {**CFG, "goodput": {"fidelity": "exact"}}
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, bad))])
    assert res.exit_code == 1
    assert "Traceback" not in res.output and "goodput.fidelity" in res.output
    closed = {**CFG, "workload": {"kind": "closed-loop", "concurrency": 4}}
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, closed))])
    assert res.exit_code == 1 and "open-loop" in res.output
    neg = {**CFG, "slo": {"ttft_ms": -1}}
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, neg))])
    assert res.exit_code == 1 and "slo.ttft_ms" in res.output


def test_loose_slo_reports_a_censored_bound_in_words(tmp_path):
    """Goals no finite run can miss: the goodput is not reported above the capacity bound
    but as a lower bound, and the table says that capacity binds."""
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, CFG)), "--ttft", "1000",
                                   "--tpot", "1000", "--seeds", "1"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "at least" in text and "Capacity binds" in text and "censored" in text
    res = CliRunner().invoke(app, ["goodput", str(write(tmp_path, CFG)), "--ttft", "1000",
                                   "--tpot", "1000", "--seeds", "1", "--json"])
    s = json.loads(res.stdout)
    assert s["censored"] and s["binding"] == "capacity"
    assert s["goodput"] <= s["verifiable_up_to"] < s["capacity_bound"] == s["goodput_high"]
