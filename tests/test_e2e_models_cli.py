"""``estimate``, ``memory`` and ``simulate`` on every model of the measured Blackwell
deployments at every precision its rows use, as a user would run them.

The pairs are read from the CSV (not listed here), so a model or precision the data adds
is covered; for each, the first expressible row gives the checkpoint serveplan serves
(:func:`serveplan.e2e_served.served`), its GPU and its layout. What is checked is what holds
independently of serveplan's numbers: the commands succeed, a batch-1 decode step moves at
least the weights a GPU holds at the GPU's HBM bandwidth (a MoE model's is cheaper than a
step whose batch touches every expert), the plan's weights fit under its
budget (the row ran), and a short simulation of the row's deployment completes every
request with TTFT and TPOT above zero.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.e2e import deployment, expressible, load_rows
from serveplan.e2e_recipes import layout
from serveplan.e2e_served import served
from serveplan.estimator.catalog import resolve_gpu, resolve_model

runner = CliRunner()
CSV = Path(__file__).resolve().parents[2] / "shared" / "data" / "e2e" / "aic_silicon_blackwell" \
    / "silicon_blackwell.csv"


def _csv_pairs() -> list[tuple[str, str]]:
    """The (model, precision) pairs of the CSV, read at collection (none without it: the
    tests below then skip through their fixture)."""
    if not CSV.is_file():
        return [("", "")]
    with open(CSV, newline="") as fh:
        return sorted({(r["model_path"], r["precision"]) for r in csv.DictReader(fh)})


PAIRS = _csv_pairs()


def _pairs(aic) -> dict:
    """(model, precision) -> its first expressible agg row (a disaggregated one if none)."""
    first: dict = {}
    for row in load_rows(aic / "silicon_blackwell.csv"):
        key = (row.model, row.precision)
        better = key not in first or (first[key].mode != "agg" and row.mode == "agg")
        if better and expressible(row, aic) is None:
            first[key] = row
    return first


@pytest.fixture(scope="module")
def pairs(blackwell_e2e):
    return _pairs(blackwell_e2e)


def test_every_model_and_precision_of_the_data_is_covered(pairs):
    """Every (model, precision) pair of the CSV has an expressible row."""
    assert sorted(pairs) == PAIRS


def _instance_args(row, aic) -> list[str]:
    s = served(row, aic)
    tp, dp, ep = layout(row) if row.mode == "agg" else (row.decode.tp, row.decode.dp,
                                                         row.decode.ep)
    args = ["-m", s.model, "-g", row.system.removesuffix("_sxm"), "--tp", str(tp)]
    if ep > 1:
        args += ["--ep", str(ep), "--dp", str(dp)]
    if s.quantization is not None:  # a recipe beside another config: its shorthand
        args += ["--dtype", {"fp4": "nvfp4", "fp8": "fp8"}.get(row.precision, "nvfp4")]
    return args


@pytest.mark.parametrize("pair", PAIRS, ids="/".join)
def test_estimate_and_memory(pairs, blackwell_e2e, pair):
    """A batch-1 decode step of a dense model reads every weight a GPU holds, so it takes
    at least their bytes over the HBM bandwidth; a MoE model's touches its top-k experts
    only, so it is cheaper than a batch-256 step, which touches nearly all of them
    (1 - (1 - k / E)^256 of them: 99.97 % for 8 of 256)."""
    row = pairs[pair]
    args = _instance_args(row, blackwell_e2e)
    mem = runner.invoke(app, ["memory", *args, "--max-model-len", "4096", "--json"])
    assert mem.exit_code == 0, mem.output
    plan = json.loads(mem.stdout)
    assert plan["fits"] and 0 < plan["weights_bytes"] < plan["budget_bytes"]
    est = runner.invoke(app, ["estimate", *args, "--context-len", "1024", "--json"])
    assert est.exit_code == 0, est.output
    step_s = json.loads(est.stdout)["time_s"]
    if resolve_model(served(row, blackwell_e2e).model).is_moe:
        wide = runner.invoke(app, ["estimate", *args, "--context-len", "1024", "-b", "256",
                                   "--json"])
        assert wide.exit_code == 0, wide.output
        assert 0 < step_s < json.loads(wide.stdout)["time_s"]
    else:
        gpu = resolve_gpu(row.system.removesuffix("_sxm"))
        assert step_s >= plan["weights_bytes"] / gpu.mem_bw


@pytest.mark.parametrize("pair", PAIRS, ids="/".join)
def test_simulate_the_rows_deployment(pairs, blackwell_e2e, tmp_path, pair):
    row = pairs[pair]
    config = {"deployment": deployment(row, blackwell_e2e),
              "workload": {"kind": "poisson", "rate": 2.0, "num_requests": 8,
                           "isl": {"dist": "fixed", "value": min(row.isl, 1024)},
                           "osl": {"dist": "fixed", "value": 16}},
              "seed": 0}
    path = tmp_path / "row.yaml"
    path.write_text(yaml.safe_dump(config))
    out = runner.invoke(app, ["simulate", str(path), "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["completed"] == 8, summary
    assert summary["mean_ttft_ms"] > 0 and summary["mean_tpot_ms"] > 0
