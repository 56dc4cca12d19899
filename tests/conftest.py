"""Shared fixtures. Numba compilation is paid once per session by the warm-up fixtures."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Compiled code throughout, compiled once (here and in the CLI subprocesses the tests start),
# not a Python run beside a background compile; tests/test_interpret.py tests that mode.
os.environ.setdefault("SERVEPLAN_JIT", "compile")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The reference data folder beside the repository; tests needing it skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def blackwell_e2e(shared_data) -> Path:
    """The measured Blackwell deployments (``e2e/aic_silicon_blackwell``); skip without."""
    path = shared_data / "e2e" / "aic_silicon_blackwell"
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="session")
def oracle_8b():
    """A warmed-up Llama-3.1-8B / H100 oracle (compiles the cost kernels once)."""
    from serveplan.estimator.oracle import CostOracle

    oracle = CostOracle("llama-3.1-8b", "h100", tp=1)
    oracle.decode_time(8, 128)
    oracle.step_time([16, 1], [0, 10])
    return oracle


@pytest.fixture(scope="session")
def sim_compiled():
    """Compile (or load from numba's cache) the simulator's event loop once per session."""
    from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
    from serveplan.sim.state import Policy
    from serveplan.sim.workload import Fixed, PoissonArrivals, PrefixSharing, generate_requests

    req = generate_requests(8, PoissonArrivals(50.0), Fixed(40), Fixed(3), seed=0,
                            prefix=PrefixSharing(2, 16, 16))
    for policy in Policy:
        run_engine(req, AffineStepCost(0.01), EngineParams(num_gpu_blocks=64, policy=policy,
                                                           max_model_len=256))
    return True


@pytest.fixture
def accuracy_e2e(monkeypatch):
    """``bench/accuracy_e2e.py`` (and its sibling modules) importable as modules."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    return importlib.import_module("accuracy_e2e")
