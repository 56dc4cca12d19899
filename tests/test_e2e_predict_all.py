"""The end-to-end report's ``predict_all`` (``bench/accuracy_e2e_sims.py``): runs go to the
workers longest first, and each row still gets its own simulation's result, a repeated
deployment simulated once."""

from __future__ import annotations

import importlib

import numpy as np

from serveplan.e2e import E2ERow


def _row(k: int, concurrency: int) -> E2ERow:
    return E2ERow(id=f"r{k}", engine="vllm", version="0.19.0", model="m", system="b200_sxm",
                  precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=concurrency,
                  tp=1, pp=1, dp=1, ep=1, ttft_ms=100.0, tpot_ms=10.0)


def test_results_follow_the_rows_whatever_order_the_runs_take(accuracy_e2e, monkeypatch):
    """Rows at 4, 64, 4 (a repeat of row 0's deployment: simulated once) and 16 clients.
    The runs go 64, 16, 4 clients (rows 1, 3, 0); the stand-in returns (row, clients), so
    the rows must read (0, 4), (1, 64), (0, 4), (3, 16)."""
    sims = importlib.import_module("accuracy_e2e_sims")  # the fixture puts bench/ on the path
    order = []

    def task(t):
        k, _ = t
        order.append(k)
        return float(k), float(rows[k].concurrency)

    monkeypatch.setattr(sims, "_predict_task", task)
    rows = [_row(0, 4), _row(1, 64), _row(2, 4), _row(3, 16)]
    out = sims.predict_all(rows, [None] * 4, None, jobs=1)
    assert order == [1, 3, 0]
    np.testing.assert_array_equal(out, [[0, 4], [1, 64], [0, 4], [3, 16]])
    assert sims.predict_all([], [], None, jobs=1).shape == (0, 2)
