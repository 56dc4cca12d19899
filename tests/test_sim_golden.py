"""Golden seeded results: a small run per scheduler compared with stored NetCDF files.

The runs use the affine step cost, so they pin the engine's scheduling semantics (batches,
preemptions, prefix hits, routing, timestamps) independently of cost-model calibration.
Any intended change of those semantics must regenerate the files, and the diff of the
summary numbers belongs in the commit message. Regenerate with::

    SERVEPLAN_REGEN_GOLDEN=1 .venv/bin/pytest tests/test_sim_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import xarray as xr
import xarray.testing as xrt

from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.results import to_dataset
from serveplan.sim.state import Policy, Router
from serveplan.sim.workload import (
    GammaArrivals,
    LogNormal,
    PrefixSharing,
    Uniform,
    generate_requests,
)

GOLDEN = Path(__file__).parent / "data" / "golden"
REGEN = os.environ.get("SERVEPLAN_REGEN_GOLDEN") == "1"


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def golden_run(policy: Policy) -> xr.Dataset:
    requests = generate_requests(
        80, GammaArrivals(40.0, cv=2.0), LogNormal.from_mean(150, 0.7, clip_max=600),
        Uniform(1, 40), seed=2024, prefix=PrefixSharing(3, 64, 16))
    # without chunking (prefill-priority) the budget must hold a whole prompt, as in vLLM v0
    budget = 1024 if policy == Policy.PREFILL_PRIORITY else 256
    params = EngineParams(num_gpu_blocks=60, policy=policy, max_num_seqs=16,
                          max_num_batched_tokens=budget, block_size=16, max_model_len=1024,
                          long_prefill_token_threshold=128, watermark=0.01)
    res = run_engine(requests, AffineStepCost(0.004, 2e-5, 1e-4), params, num_instances=2,
                     router=Router.LEAST_OUTSTANDING_TOKENS)
    return to_dataset(res)


@pytest.mark.parametrize("policy", [Policy.VLLM_V1, Policy.SGLANG, Policy.PREFILL_PRIORITY],
                         ids=lambda p: p.name.lower())  # the policies the files were recorded with
def test_golden(policy):
    path = GOLDEN / f"sim_{policy.name.lower()}.nc"
    ds = golden_run(policy)
    if REGEN:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        ds.to_netcdf(path, engine="h5netcdf")
    expected = xr.open_dataset(path, engine="h5netcdf").load()
    xrt.assert_allclose(ds, expected, rtol=1e-9)
    assert ds.attrs["total_steps"] == expected.attrs["total_steps"]
    # the run exercises what it is meant to pin
    assert int(ds["num_preemptions"].sum()) > 0
    assert int(ds["prefix_hit_tokens"].sum()) > 0
    assert set(ds["routed_to"].values.tolist()) == {0, 1}
