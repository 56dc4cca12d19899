"""Questions with no feasible answer are refused with the reason, never answered with zeros:
``search`` and ``sweep`` where nothing is feasible, and sweep grids that cannot be right."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.oracle import CostOracle
from serveplan.sweep import cells_dir

runner = CliRunner()
SEARCH = ["search", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--fidelity",
          "analytic"]


def refused(res) -> list[str]:
    """The ``error:`` lines of a refused command (exit status 1, no traceback)."""
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert lines, res.output
    return lines


def class_lines(lines: list[str]) -> dict[str, str]:
    return dict(re.match(r"error:\s+(\w+ tp[\d/]+): (.*)", ln).groups() for ln in lines[1:])


def test_tp_that_does_not_divide_the_heads():
    lines = refused(runner.invoke(app, [*SEARCH, "--tp", "3"]))
    assert "no strategy of llama-3.1-8b on 8x h100" in lines[0]
    reasons = class_lines(lines)
    assert set(reasons) == {"colocated tp3", "pd tp3"}
    assert all("does not divide num_attention_heads=32" in r for r in reasons.values())


@pytest.mark.parametrize("args, metric, goal_ms", [
    (["--isl", "200000"], "TTFT", 1500.0),
    (["--ttft", "0.00001"], "TTFT", 0.01),
    (["--tpot", "0.001"], "TPOT", 1.0),
])
def test_slo_impossible_names_the_best_achievable_latency(args, metric, goal_ms, oracle_8b):
    lines = refused(runner.invoke(app, [*SEARCH, *args]))
    reasons = class_lines(lines)
    assert {"colocated tp1", "colocated tp8", "pd tp1", "pd tp1/4", "pd tp4"} <= set(reasons)
    for text in reasons.values():
        best = float(re.search(rf"best achievable {metric} is ([\d,.]+) ms", text)
                     .group(1).replace(",", ""))
        assert best > goal_ms
    # one request alone on one colocated tp1 instance, from the cost model directly
    best = float(re.search(r"is ([\d,.]+) ms", reasons["colocated tp1"]).group(1)
                 .replace(",", ""))
    isl = 200000 if args[0] == "--isl" else 2048
    if metric == "TTFT":
        alone = float(oracle_8b.prefill_time(1, isl)) * 1e3
        assert best == pytest.approx(alone, abs=0.06)
    else:
        assert best == pytest.approx(float(oracle_8b.decode_time(1, 2048 + 32)) * 1e3, rel=0.05)


def test_model_that_fits_no_gpu_count_says_by_how_much():
    lines = refused(runner.invoke(app, ["search", "--model", "llama-3.1-405b", "--gpu", "l4",
                                        "--gpus", "2", "--fidelity", "analytic"]))
    reasons = class_lines(lines)
    assert {"colocated tp1", "colocated tp2", "pd tp1"} == set(reasons)
    for text in reasons.values():
        assert text.startswith("does not fit:") and re.search(r"short by [\d,.]+ GiB", text)


def test_refusal_applies_to_json_output_too():
    refused(runner.invoke(app, [*SEARCH, "--tp", "3", "--json"]))


# ----------------------------------------------------------------------------- sweeps
BASE = {
    "deployment": {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "num_instances": 1,
                   "max_model_len": 4096},
    "workload": {"kind": "poisson", "rate": 4, "num_requests": 300, "isl": 1024, "osl": 32},
    "slo": {"ttft_ms": 300, "tpot_ms": 30},
}


def sweep(tmp_path, grid: dict, **kw):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"base": kw.pop("base", BASE), "grid": grid,
                                    "fidelity": "analytic", **kw}))
    out = tmp_path / "out.nc"
    return runner.invoke(app, ["sweep", str(path), "--out", str(out)]), out


def test_unknown_grid_fields_fail_before_any_cell(tmp_path):
    res, out = sweep(tmp_path, {"deployment.tpp": [1, 2], "workload.ratee": [1],
                                "workload.rate": [2]})
    lines = refused(res)
    assert lines[0].startswith("error: grid.deployment.tpp:") and "did you mean tp" in lines[0]
    assert lines[1].startswith("error: grid.workload.ratee:") and "rate" in lines[1]
    assert len(lines) == 2 and not cells_dir(out).exists()


def test_goodput_without_an_slo_fails_before_any_cell(tmp_path):
    base = {k: v for k, v in BASE.items() if k != "slo"}
    res, out = sweep(tmp_path, {"deployment.tp": [1]}, base=base, measure="goodput")
    (line,) = refused(res)
    assert line.startswith("error: measure: goodput needs an SLO")
    assert not cells_dir(out).exists()


def test_sweep_with_no_feasible_cell_is_refused_with_reasons(tmp_path):
    res, out = sweep(tmp_path, {"deployment.tp": [3, 1], "slo.ttft_ms": [0.01, 0.02]},
                     measure="goodput")
    lines = refused(res)
    assert "no cell of the sweep is feasible" in lines[0] and out.exists()
    text = "\n".join(lines[1:])
    assert "invalid: tp=3 does not divide num_attention_heads=32" in text
    assert "(2 cells, e.g. tp=3, ttft_ms=0.01)" in text
    assert "infeasible: No rate meets the SLO" in text and "TTFT" in text


def test_sweep_with_some_feasible_cells_succeeds(tmp_path):
    res, _ = sweep(tmp_path, {"deployment.tp": [3, 1]})
    assert res.exit_code == 0, res.output


def test_oracle_fixture_is_the_catalog_model(oracle_8b):
    assert isinstance(oracle_8b, CostOracle)
