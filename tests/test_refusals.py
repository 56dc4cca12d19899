"""Questions with no feasible answer are refused with the reason, never answered with zeros:
``search`` and ``sweep`` where nothing is feasible, and sweep grids that cannot be right."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.oracle import CostOracle
from serveplan.sweep import cells_dir

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
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


# ----------------------------------------------------------------------------- run size
def _world_bytes(x, seen: set) -> int:
    """Bytes of the arrays in (nested) named tuples of the simulator's state."""
    import numpy as np

    if isinstance(x, np.ndarray):
        if id(x) in seen:
            return 0
        seen.add(id(x))
        return x.nbytes
    return sum(_world_bytes(v, seen) for v in x) if isinstance(x, tuple) else 0


@pytest.mark.parametrize("name, over", [
    ("llama8b-h100.yaml", {}),
    ("llama8b-h100.yaml", {"deployment.pools.0.count": 4, "workload.num_requests": 600}),
    ("llama8b-h100.yaml", {"deployment.pools.0.max_num_seqs": 2048,
                           "deployment.pools.0.num_gpu_blocks": 50000}),
    ("pd-sibyl.yaml", {}),
])
def test_run_size_estimate_is_what_the_simulator_allocates(name, over, sim_compiled):
    """config.simulator_bytes (the run-size refusal) against the arrays a run allocates."""
    from serveplan.config import load_config, simulator_bytes
    from serveplan.simulation import build_requests, resolve, run_resolved

    cfg = load_config(REPO / "examples" / name, {"workload.num_requests": 200, **over})
    resolved = resolve(cfg.deployment)
    req = build_requests(cfg.workload, cfg.seed, block_size=resolved.block_size)
    world = run_resolved(resolved, req, record_steps=cfg.record_steps).world
    est = simulator_bytes([(s.params, s.num_instances, s.role) for s in resolved.pool_specs()],
                          req.prompt_len, req.output_len,
                          prefill_hold=getattr(resolved.deployment, "prefill_hold", None))
    assert est["kv"] == pytest.approx(_world_bytes(world.pool, set()), rel=1e-3)
    assert est["slots"] == pytest.approx(_world_bytes(world.inst, set()), rel=0.05)


def test_a_run_too_large_for_memory_is_refused_naming_what_to_lower():
    (line,) = refused(runner.invoke(app, ["simulate", str(REPO / "examples" /
                                                          "llama8b-h100.yaml"), "-n", "5",
                                          "--num-instances", "64",
                                          "--num-gpu-blocks", "4000000"]))
    assert line.startswith("error: deployment: the simulator would preallocate 10.8 GiB")
    assert "64 instances x 3,999,999 KV blocks" in line and "num_gpu_blocks" in line


def test_goodput_refuses_a_run_too_large_for_memory():
    (line,) = refused(runner.invoke(app, [
        "goodput", str(REPO / "examples" / "goodput-llama8b.yaml"), "-n", "20", "--seeds", "1",
        "--set", "deployment.num_instances=1000", "--set", "deployment.max_model_len=131072"]))
    assert line.startswith("error: deployment: the simulator would preallocate")


def test_search_decides_the_largest_strategy_small_enough_to_simulate(monkeypatch):
    """Strategies whose simulation would outgrow memory are `invalid`; dominance then keeps
    the largest multiple that fits (here 2m of 3m, with room for two instances)."""
    import serveplan.search as search

    one = search.simulator_size  # the size of 2m is below the bound, of 3m above
    spec = search.SearchSpec(model="llama-3.1-8b", gpu="h100", gpus=3, tp=(1,),
                             architectures=("colocated",), num_requests=10, seeds=1,
                             max_decide=1, isl=512, osl=8)
    sizes = {}

    def size(prep, fidelity):
        sizes[prep.deployment.num_instances] = one(prep, fidelity)
        return sizes[prep.deployment.num_instances]

    monkeypatch.setattr(search, "simulator_size", size)
    monkeypatch.setattr(search, "MAX_SIM_BYTES", 0)
    search.run_search(spec)  # fills sizes
    monkeypatch.setattr(search, "MAX_SIM_BYTES", (sizes[2] + sizes[3]) / 2)
    ds = search.run_search(spec)
    status = dict(zip(ds["name"].values.tolist(), ds["status"].values.tolist(), strict=True))
    assert status == {"2m-tp1": "decided", "1m-tp1": "dominated", "3m-tp1": "invalid"}
    reason = str(ds["reason"].values[ds["name"].values.tolist().index("3m-tp1")])
    assert reason.startswith("too large to simulate")
