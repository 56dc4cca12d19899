"""Shared fixtures. Numba compilation is paid once per session by the warm-up fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The reference data folder beside the repository; tests needing it skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def oracle_8b():
    """A warmed-up Llama-3.1-8B / H100 oracle (compiles the cost kernels once)."""
    from serveplan.estimator.oracle import CostOracle

    oracle = CostOracle("llama-3.1-8b", "h100", tp=1)
    oracle.decode_time(8, 128)
    oracle.step_time([16, 1], [0, 10])
    return oracle
