"""The end-to-end report's inputs for the fits that ship (``bench/accuracy_e2e_sims.py``:
``at_catalog_speed``): only the rows held out at another GPU speed are resolved again on
their catalog GPU, with their oracle prefill and term-free predictions anew; the report's
own inputs are left as they were."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from serveplan.e2e import E2ERow


def _row(k: int, system: str, concurrency: int = 8) -> E2ERow:
    return E2ERow(id=f"r{k}", engine="vllm", version="0.19.0", model="m", system=system,
                  precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=concurrency,
                  tp=1, pp=1, dp=1, ep=1, ttft_ms=100.0, tpot_ms=10.0)


@pytest.fixture
def sims(accuracy_e2e, monkeypatch):  # the fixture puts bench/ on the path
    module = importlib.import_module("accuracy_e2e_sims")
    resolved_for = []
    monkeypatch.setattr(module, "HELD_OUT_GPU", {"r1": "held.yaml", "r2": "held.yaml",
                                                 "r3": "held.yaml"})
    monkeypatch.setattr(module, "resolve_row", lambda row, data, gpu=None: (
        resolved_for.append((row.id, gpu)) or f"catalog {row.id}"))
    monkeypatch.setattr(module, "prefill_seconds", lambda row, res: 0.5)
    monkeypatch.setattr(module, "predict_all", lambda rows, resolved, terms, jobs: np.array(
        [[200.0 + r.concurrency, 20.0] for r in rows]))
    return module, resolved_for


def test_only_the_held_out_speed_rows_move(sims):
    """Rows 1-3 are B300 rows held out at another speed; row 2 repeats row 1's deployment
    and load (resolved once, on the catalog's GPU: no ``gpu`` override), row 3 runs 16
    clients. The stand-in simulates TTFT = 200 ms + the clients: rows 1 and 2 read 208,
    row 3 216; row 0 (B200) keeps everything it had, and so do the given inputs."""
    module, resolved_for = sims
    rows = [_row(0, "b200_sxm"), _row(1, "b300_sxm"), _row(2, "b300_sxm"),
            _row(3, "b300_sxm", concurrency=16)]
    resolved, prefill_s = ["held 0", "held 1", "held 2", "held 3"], [0.1, 0.2, 0.2, 0.3]
    unfitted = np.array([[100.0, 10.0], [101.0, 11.0], [101.0, 11.0], [102.0, 12.0]])
    before = unfitted.copy()
    res, pre, unf = module.at_catalog_speed(rows, resolved, prefill_s, unfitted, None)
    assert resolved_for == [("r1", None), ("r3", None)]
    assert res == ["held 0", "catalog r1", "catalog r1", "catalog r3"]
    assert pre == [0.1, 0.5, 0.5, 0.5]
    np.testing.assert_array_equal(unf, [[100, 10], [208, 20], [208, 20], [216, 20]])
    assert resolved == ["held 0", "held 1", "held 2", "held 3"]
    assert prefill_s == [0.1, 0.2, 0.2, 0.3]
    np.testing.assert_array_equal(unfitted, before)


def test_without_held_out_rows_nothing_is_simulated(sims, monkeypatch):
    module, resolved_for = sims
    monkeypatch.setattr(module, "predict_all", lambda *a: pytest.fail("simulated"))
    res, pre, unf = module.at_catalog_speed([_row(0, "b200_sxm")], ["held 0"], [0.1],
                                            np.array([[100.0, 10.0]]), None)
    assert (res, pre, resolved_for) == (["held 0"], [0.1], [])
    np.testing.assert_array_equal(unf, [[100.0, 10.0]])
