"""Sweeps (serveplan/sweep.py): resumable checkpoints, serial = Dask, invalid cells recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.errors import UserError
from serveplan.results_io import read_netcdf
from serveplan.sweep import SweepSpec, cells_dir, run_one, run_sweep, sweep_points

BASE = {
    "deployment": {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "num_instances": 1,
                   "max_model_len": 4096},
    "workload": {"kind": "poisson", "rate": 4, "num_requests": 300, "isl": 1024, "osl": 32},
    "slo": {"ttft_ms": 300, "tpot_ms": 30},
}
GRID = {"deployment.num_instances": [1, 2], "workload.rate": [4, 16, 64], "seed": [0, 1]}


def spec(**kw) -> SweepSpec:
    return SweepSpec(base=BASE, grid=kw.pop("grid", GRID), fidelity=kw.pop("fidelity",
                                                                           "request"), **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    s = spec()
    return s, run_sweep(s, tmp_path_factory.mktemp("ref") / "ref.nc")


def test_sweep_has_one_dim_per_field_and_provenance(reference):
    s, ds = reference
    assert dict(ds.sizes) == {"num_instances": 2, "rate": 3, "seed": 2}
    assert ds["ttft_p90_s"].dims == ("num_instances", "rate", "seed")
    assert ds.attrs["serveplan_version"] and SweepSpec.model_validate_json(
        ds.attrs["config"]) == s
    assert (ds["status"] == "ok").all()
    # more load, longer waits (common random numbers within a seed)
    p90 = ds["ttft_p90_s"].sel(num_instances=1, seed=0).values
    assert np.all(np.diff(p90) >= 0)
    np.testing.assert_allclose(ds["arrival_rate"].sel(num_instances=1, seed=0), [4, 16, 64])


def test_run_one_is_pure(reference):
    s, ds = reference
    p = sweep_points(s)[5]
    a, b = run_one(p), run_one(p)
    xr.testing.assert_identical(a, b)
    assert float(a["ttft_p90_s"]) == float(ds["ttft_p90_s"].values.ravel()[5])


def test_interrupted_and_resumed_equals_uninterrupted(reference, tmp_path):
    s, ds = reference
    out = tmp_path / "resumed.nc"
    rng = np.random.default_rng(7)
    for stop in rng.integers(1, 3, size=3):  # three interruptions at random chunk counts
        with pytest.raises(KeyboardInterrupt):
            run_sweep(s, out, chunk_size=2, stop_after=int(stop))
    (cells_dir(out) / ".chunk-dead.123.tmp").write_text("{half a fi")  # killed mid-write
    seen = []
    resumed = run_sweep(s, out, chunk_size=2, progress=lambda d, n: seen.append(d))
    assert seen[0] > 0  # it started from the checkpoints
    xr.testing.assert_identical(resumed, ds)


def test_dask_local_cluster_equals_serial(reference):
    from dask.distributed import Client, LocalCluster

    s, ds = reference
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            dist = run_sweep(s, Path(tmp) / "d.nc", client=client, chunk_size=3)
    xr.testing.assert_identical(dist, ds)


def test_invalid_cells_record_why(tmp_path):
    s = spec(grid={"deployment.model": ["llama-3.1-8b", "llama-3.1-70b"],
                   "deployment.tp": [1, 3], "workload.rate": [4.0, 1000.0]},
             fidelity="analytic")
    ds = run_sweep(s, tmp_path / "bad.nc")
    st = ds["status"]
    assert st.sel(model="llama-3.1-8b", tp=1, rate=4.0) == "ok"
    assert st.sel(model="llama-3.1-8b", tp=1, rate=1000.0) == "infeasible"
    assert "utilisation" in str(ds["reason"].sel(model="llama-3.1-8b", tp=1, rate=1000.0).values)
    assert st.sel(model="llama-3.1-70b", tp=1, rate=4.0) == "oom"
    assert "GiB" in str(ds["reason"].sel(model="llama-3.1-70b", tp=1, rate=4.0).values)
    assert (st.sel(tp=3) == "invalid").all()
    assert "tp=3" in str(ds["reason"].sel(model="llama-3.1-8b", tp=3, rate=4.0).values)
    typo = spec(grid={"deployment.tpp": [1]})
    with pytest.raises(UserError, match="grid.deployment.tpp"):
        run_sweep(typo, tmp_path / "typo.nc")
    assert not cells_dir(tmp_path / "typo.nc").exists()  # refused before any cell ran


def test_goodput_measure(tmp_path):
    s = spec(grid={"deployment.num_instances": [1, 2]}, measure="goodput")
    ds = run_sweep(s, tmp_path / "g.nc")
    g = ds["goodput"].values
    assert np.all(g > 0) and g[1] > g[0]
    assert np.all(ds["goodput_low"].values <= g)
    assert set(ds["binding"].values) <= {"TTFT", "TPOT", "capacity"}


def test_cli_sweep_killed_and_resumed_writes_the_same_file(reference, tmp_path):
    s, ds = reference
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(s.model_dump(), sort_keys=False))
    out = tmp_path / "cli.nc"
    exe = Path(sys.executable).with_name("serveplan")
    cmd = [str(exe), "sweep", str(grid), "--out", str(out), "--chunk-size", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not list(cells_dir(out).glob("chunk-*.json")):
        assert proc.poll() is None, "the sweep ended before it could be killed"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    res = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(out)])
    assert res.exit_code == 0, res.output
    xr.testing.assert_identical(read_netcdf(out), read_netcdf(_write(ds, tmp_path)))


def _write(ds, tmp_path):
    from serveplan.results_io import write_netcdf

    return write_netcdf(ds, tmp_path / "ref.nc")


def test_a_note_met_by_several_dask_workers_is_said_once(tmp_path, capfd, monkeypatch):
    """Two worker processes both price cells on L4, a GPU on the uncalibrated defaults:
    each would say so on its own stderr; they hand the note back with their cells, and the
    sweep says it once. A serial run says it too (same path, one process)."""
    from dask.distributed import Client, LocalCluster, get_task_stream

    from serveplan.estimator import notes

    monkeypatch.setattr(notes, "_SAID", set())  # this process may have said it already
    s = SweepSpec(base={**BASE, "deployment": {**BASE["deployment"], "gpu": "l4"},
                        "workload": {**BASE["workload"], "num_requests": 40}},
                  grid={"seed": [0, 1, 2, 3]}, fidelity="request")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        with get_task_stream(client) as tasks:
            dist = run_sweep(s, tmp_path / "d.nc", client=client, chunk_size=1)
    assert len({t["worker"] for t in tasks.data}) == 2  # both met the note
    assert (dist["status"] == "ok").all()
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(said) == 1 and "GPU l4 has no calibration profile" in said[0], said

    notes._SAID.discard(said[0].removeprefix("note: "))
    run_sweep(s, tmp_path / "serial.nc")
    again = [line for line in capfd.readouterr().err.splitlines() if line.startswith("note:")]
    assert again == said
