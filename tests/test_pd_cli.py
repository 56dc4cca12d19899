"""``architecture: pd`` through the config, the facade, ``serveplan simulate`` and
``serveplan compare-routers`` (typer's CliRunner)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

import serveplan
from serveplan.cli import app
from serveplan.config import PDDeployment, SimulationConfig

runner = CliRunner()

POOL = {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 4000, "max_model_len": 4096}
PD = {"architecture": "pd", "prefill": {**POOL, "num_instances": 2},
      "decode": {**POOL, "num_instances": 3}, "router": "sibyl", "placement": "separate"}
WORKLOAD = {"kind": "poisson", "rate": 10.0, "num_requests": 60, "isl": 512,
            "osl": {"dist": "uniform", "low": 2, "high": 40}}


@pytest.fixture(scope="module", autouse=True)
def _compiled(oracle_8b):
    from serveplan.sim.engine import AffineStepCost, EngineParams
    from serveplan.sim.pd import PoolSpec, run_pd
    from serveplan.sim.workload import Fixed, PoissonArrivals, generate_requests

    req = generate_requests(6, PoissonArrivals(50.0), Fixed(40), Fixed(3), seed=0)
    pool = PoolSpec(EngineParams(num_gpu_blocks=64, max_model_len=256), AffineStepCost(0.01))
    run_pd(req, pool, pool, router="sibyl")


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump({"deployment": PD, "workload": WORKLOAD,
                                    "slo": {"ttft_ms": 2000, "tpot_ms": 100}, "seed": 2}))
    return path


def test_config_validates_pd_and_keeps_colocated_errors():
    cfg = SimulationConfig.model_validate({"deployment": {**PD, "router": "ils"},
                                           "workload": WORKLOAD})
    assert isinstance(cfg.deployment, PDDeployment)
    assert cfg.deployment.router == "least-loaded"
    assert SimulationConfig.model_validate(cfg.model_dump()) == cfg
    with pytest.raises(ValidationError) as exc:
        SimulationConfig.model_validate({"deployment": {**PD, "router": "fastest"},
                                         "workload": WORKLOAD})
    assert exc.value.errors()[0]["loc"] == ("deployment", "router")
    with pytest.raises(ValidationError, match="architecture given an invalid value: 'af'"):
        SimulationConfig.model_validate({"deployment": {"architecture": "af"},
                                         "workload": WORKLOAD})


def test_facade_returns_pd_dataset():
    ds = serveplan.simulate(PD, WORKLOAD, seed=1)
    assert ds.attrs["architecture"] == "pd"
    assert ds.sizes["instance"] == 5
    assert list(ds["role"].values) == ["prefill"] * 2 + ["decode"] * 3
    s = json.loads(ds.attrs["summary"])
    assert s["completed"] == 60
    assert s["kv_bytes_transferred"] == float(ds["kv_bytes"].sum())
    resolved = json.loads(ds.attrs["resolved"])
    assert resolved["strategy"] == "2p3d" and resolved["kv_bytes_per_token"] == 131072


def test_simulate_table_and_json(cfg_file, tmp_path):
    r = runner.invoke(app, ["simulate", str(cfg_file)])
    assert r.exit_code == 0, r.output
    for text in ("2p3d", "KV transfer", "TPOT", "optimal_assignment_ratio", "slo_met"):
        assert text in r.output
    out = tmp_path / "pd.nc"
    r = runner.invoke(app, ["simulate", str(cfg_file), "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output.split("\n{", 1)[-1] if not r.output.startswith("{")
                   else r.output)
    assert s["completed"] == 60 and s["p99_9_tpot_ms"] >= s["p99_tpot_ms"]
    ds = xr.open_dataset(out, engine="h5netcdf")
    assert {"transfer_s", "kv_wait_s", "decode_queue_s", "routed_to"} <= set(ds.data_vars)
    ds.close()


def test_compare_routers_same_arrivals(cfg_file, tmp_path):
    out = tmp_path / "cmp.nc"
    r = runner.invoke(app, ["compare-routers", str(cfg_file), "--routers",
                            "rr,least-loaded,sibyl,sibyl-no-type3", "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["router"] for row in rows] == ["round-robin", "least-loaded", "sibyl",
                                               "sibyl-no-type3"]
    for row in rows:
        assert row["completed"] == 60
        assert row["p99_9_tpot_ms"] >= row["p99_tpot_ms"] >= row["median_tpot_ms"] > 0
        assert 0 <= row["optimal_assignment_ratio"] <= 1
    ds = xr.open_dataset(out, engine="h5netcdf")
    arrival = ds["arrival_s"].values
    assert arrival.shape == (4, 60)
    assert (arrival == arrival[0]).all()
    assert not (ds["routed_to"].values[0] == ds["routed_to"].values[1]).all()
    ds.close()


def test_compare_routers_table_and_errors(cfg_file):
    r = runner.invoke(app, ["compare-routers", str(cfg_file), "--routers", "rr,sibyl"])
    assert r.exit_code == 0, r.output
    assert "P99.9" in r.output and "sibyl" in r.output and "round-robin" in r.output
    r = runner.invoke(app, ["compare-routers", str(cfg_file), "--routers", "rr,fastest"])
    assert r.exit_code == 1
    assert "error: --routers given an invalid value for a disaggregated deployment: " \
           "'fastest'" in r.output
    assert "Traceback" not in r.output


def test_compare_routers_colocated(tmp_path, sim_compiled):
    path = tmp_path / "colo.yaml"
    path.write_text(yaml.safe_dump({"deployment": {**POOL, "num_instances": 2},
                                    "workload": {**WORKLOAD, "num_requests": 30}}))
    r = runner.invoke(app, ["compare-routers", str(path), "--routers", "rr,least-requests",
                            "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["router"] for row in rows] == ["round-robin", "least-requests"]
    assert all(np.isfinite(row["p99_9_tpot_ms"]) for row in rows)
    r = runner.invoke(app, ["compare-routers", str(path), "--routers", "sibyl"])
    assert r.exit_code == 1 and "colocated deployment: 'sibyl'" in r.output
