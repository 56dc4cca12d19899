"""The prefill-width probe (``bench/e2e_prefill_width_probe.py``) on rows built by hand."""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest

from serveplan.e2e import E2ERow
from serveplan.e2e_fit import RowShape, row_slopes

LAYERS = 60
HIDDEN = {"a": 4096, "b": 7168, "c": 6144}
TERM = "prefill_token_layer_s"


@pytest.fixture
def probe(accuracy_e2e, monkeypatch):  # the fixture puts bench/ on the path
    module = importlib.import_module("e2e_prefill_width_probe")
    monkeypatch.setitem(module.SHIPPED_SETS, "sglang", (TERM,))  # the term alone
    return module


def _rows():
    return [E2ERow(id=f"{m}-{isl}-{c}", engine="sglang", version="1", model=m,
                   system="b200_sxm", precision="fp8", mode="agg", isl=isl, osl=1024,
                   concurrency=c, batch_size=c, tp=8, pp=1, dp=1, ep=1, ttft_ms=0.0,
                   tpot_ms=0.0)
            for m in HIDDEN for isl in (1024, 8192) for c in (4, 64)]


def _shapes(rows, probe, form):
    scale = probe.FORMS[form]
    return [RowShape(scale(LAYERS, HIDDEN[r.model]), 0) for r in rows]


def test_a_gap_per_hidden_unit_is_carried_by_that_form_alone(probe):
    """Measured = term-free + 2e-7 s per token, layer and hidden / 4096 (each row's own
    first-order slopes): fitted on two models, that form predicts the third exactly; the
    per-layer form must put one value on models whose gaps per layer differ (1 : 1.75 :
    1.5), so it misses every held-out model."""
    rows = _rows()
    per_layer, per_width = list(probe.FORMS)
    pred0 = np.tile([200.0, 20.0], (len(rows), 1))
    truth = _shapes(rows, probe, per_width)
    meas = pred0 + np.array([row_slopes(r, p, s, (TERM,))[:, 0] * 2e-7
                             for r, p, s in zip(rows, pred0, truth, strict=True)])
    rows = [replace(r, ttft_ms=t, tpot_ms=p) for r, (t, p) in zip(rows, meas, strict=True)]
    unit, counted = [r.model for r in rows], np.ones(len(rows), dtype=bool)
    prefill_s = [None] * len(rows)
    good = probe.held_out(rows, pred0, truth, prefill_s, unit, counted)
    np.testing.assert_allclose(good, meas, rtol=1e-4)
    bad = probe.held_out(rows, pred0, _shapes(rows, probe, per_layer), prefill_s, unit,
                         counted)
    miss = np.abs(bad[:, 0] / meas[:, 0] - 1.0).reshape(len(HIDDEN), -1)  # model by model
    assert np.all(miss.max(axis=1) > 0.03)  # c (1.5) lies between a and b: least missed


def test_the_table_gives_each_held_out_unit_its_median(probe):
    rows = _rows()[:4]  # model a: four rows
    meas = np.full((4, 2), 100.0)
    preds = {"x": np.array([[110.0, 100], [120, 100], [90, 100], [100, 100]])}
    lines = probe.table(rows, ["a"] * 4, meas, preds)
    assert lines[2] == "| all | all | 4 | 10.0 / 0.0 |"  # |errors| 10, 20, 10, 0 %
    assert lines[-1] == "| sglang | a | 4 | 10.0 / 0.0 |"
