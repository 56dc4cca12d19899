"""Golden per-request results of the colocated and disaggregated event loops.

The files in ``tests/data/golden_loop/`` were produced by the code *before* the colocated
loop (``serveplan.sim.engine.run_engine``) and the disaggregated one
(``serveplan.sim.pd.run_pd``) were unified into one loop (commit 3d67e85). They pin, for a
matrix of small seeded runs (:mod:`loop_golden_cases`: every scheduler policy with chunked
prefill and prefix caching on and off, every colocated router, open and closed loops,
every decode router with early, late and layer-wise assignment, the delay prefill stage,
free and timed KV links, the fitted-throughput decode cost, ``max_model_len`` clipping,
affine and cost-oracle step costs), every request's times (scheduled, first and last
token, finish, KV ready / transfer start / join, ...), its preemptions, prefix hits,
instance and status, the per-instance accumulators and the step count -- integers bit for
bit, times to 1e-12 relative (other machines and library builds move their last bits), so
a refactoring that reorders events or changes a result shows up here.

An intended change of the loops' semantics must regenerate the files (and say why in the
commit message)::

    SERVEPLAN_REGEN_LOOP_GOLDEN=1 .venv/bin/python -m pytest tests/test_loop_golden.py

or, from another checkout of the package (as the files were first written)::

    cd /tmp && PYTHONPATH=/path/to/pkg:/work/main/tests SERVEPLAN_REGEN_LOOP_GOLDEN=1 \\
        /work/main/.venv/bin/python -c 'import loop_golden_cases as m; m.regenerate()'
"""

from __future__ import annotations

import os

import loop_golden_cases as cases
import numpy as np
import pytest

REGEN = os.environ.get("SERVEPLAN_REGEN_LOOP_GOLDEN") == "1"


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


@pytest.mark.parametrize("name", list(cases.CASES))
def test_loop_golden(name):
    got = cases.run_case(name)
    path = cases.golden_path(name)
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, **got)
    with np.load(path) as stored:
        expected = {key: stored[key] for key in stored.files}
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        _assert_same(got[key], want, f"{name}: {key}")


def _assert_same(got: np.ndarray, want: np.ndarray, msg: str) -> None:
    """Counts, ids and flags bit for bit; times to 1e-12 relative: builds of the numeric
    libraries and CPUs differ in the last bits of the same sums (a few ulps, seen between
    machines), far below any change of the loops' semantics."""
    assert got.shape == want.shape and got.dtype == want.dtype, msg
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15, err_msg=msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=msg, strict=True)


def test_golden_matrix_exercises_features():
    """The stored runs cover preemptions, prefix hits, ignored and length-capped requests,
    and KV transfers that take time (else the bit-for-bit check pins less than it seems)."""
    total: dict[str, int] = {}
    for name in cases.CASES:
        with np.load(cases.golden_path(name)) as stored:
            counts = cases.feature_counts({key: stored[key] for key in stored.files})
        for key, value in counts.items():
            total[key] = total.get(key, 0) + (value > 0)
    for key in ("preempted", "hit", "ignored", "capped", "xfer>0", "pullwait"):
        assert total[key] > 0, key
