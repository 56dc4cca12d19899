"""Setting (e) of the end-to-end report (``bench/accuracy_e2e_selfcal.py``), worked by hand."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from serveplan.e2e import E2ERow
from serveplan.estimator.runtime import RuntimeTerms


@pytest.fixture
def selfcal(accuracy_e2e):  # the fixture puts bench/ on the path
    return importlib.import_module("accuracy_e2e_selfcal")


def _row(k, concurrency, model="m", precision="fp8", tp=4, engine="vllm", ttft_ms=None):
    """Row ``k``, a measurement of its own (TTFT ``100 + k`` ms) unless ``ttft_ms`` is given."""
    return E2ERow(id=f"r{k}", engine=engine, version="1", model=model, system="b200_sxm",
                  precision=precision, mode="agg", isl=1024, osl=1024,
                  concurrency=concurrency, tp=tp, pp=1, dp=1, ep=1,
                  ttft_ms=100.0 + k if ttft_ms is None else ttft_ms, tpot_ms=10.0)


def _rows():
    """Deployment A (m, fp8, tp 4): 4, 8, 8 clients light, 16 and 64 heavier. B (fp4):
    only 4 and 8 light (too few). C (tp 8): three light rows, none heavier. D (model n):
    4, 4, 8 light and 32 heavier."""
    return [_row(0, 4), _row(1, 8), _row(2, 16), _row(3, 8), _row(4, 64),
            _row(5, 4, precision="fp4"), _row(6, 8, precision="fp4"),
            _row(7, 16, precision="fp4"),
            _row(8, 4, tp=8), _row(9, 4, tp=8), _row(10, 8, tp=8),
            _row(11, 4, model="n"), _row(12, 32, model="n"), _row(13, 4, model="n"),
            _row(14, 8, model="n")]


def test_groups_by_deployment_by_hand(selfcal):
    assert selfcal.calibration_groups(_rows()) == [([0, 1, 3], [2, 4]),
                                                   ([11, 13, 14], [12])]


def test_a_run_exported_twice_is_fitted_on_once(selfcal):
    """Deployment A as above, with a copy of its 4-client run (row 15: same load and
    measurement) and of its 16-client run (row 16): the copy of a light run is left out of
    the fit, a heavier copy is still checked. Without row 3, A's two light runs are too
    few, however many copies they have."""
    rows = _rows() + [_row(15, 4, ttft_ms=100.0), _row(16, 16, ttft_ms=102.0)]
    assert selfcal.calibration_groups(rows)[0] == ([0, 1, 3], [2, 4, 16])
    without_3 = [r for r in rows if r.id != "r3"]
    assert [len(train) for train, _ in selfcal.calibration_groups(without_3)] == [3]  # D's


def test_each_deployment_predicted_by_its_own_light_rows(selfcal):
    """A stub fit whose latency is the mean index of its training rows: A's heavier rows get
    (0 + 1 + 3) / 3 = 1.333, D's (11 + 13 + 14) / 3 = 12.667; no fit ever sees a heavier
    row, and the rows of B and C stay unpredicted."""
    rows = _rows()
    seen = []

    def fit(idx):
        seen.extend(idx)
        return RuntimeTerms(frontend_output_s=float(np.mean(idx))), {"fitted": ["frontend_output_s"]}

    def predict(idx, terms):
        return np.tile([terms.frontend_output_s, 1.0], (len(idx), 1))

    pred, fits = selfcal.self_calibrated(rows, fit, predict)
    assert sorted(seen) == [0, 1, 3, 11, 13, 14]
    assert pred[[2, 4], 0] == pytest.approx([4 / 3, 4 / 3])
    assert pred[12, 0] == pytest.approx(38 / 3)
    assert np.isnan(pred[[0, 1, 3, 5, 6, 7, 8, 9, 10, 11, 13, 14], 0]).all()
    assert [(f["light_rows"], f["checked_rows"]) for f in fits] == [(3, 2), (3, 1)]


def test_summary_by_hand(selfcal):
    """vLLM rows 0, 1 and SGLang row 2 are predicted by (e): TTFT errors -0.1, +0.3 and 0,
    TPOT 0 everywhere; (c) has +0.5 on all three. vLLM: (e) TTFT median |e| 0.2, bias
    +0.1; all: 0.1 and 0. Row 3 has no (e) prediction and counts nowhere."""
    rows = [_row(0, 16), _row(1, 32), _row(2, 16, engine="sglang"), _row(3, 16)]
    meas = np.full((4, 2), 100.0)
    held_out = np.full((4, 2), 150.0)
    calibrated = np.array([[90, 100], [130, 100], [100, 100], [np.nan, np.nan]])
    fits = [{"deployment": "vllm/m/b200_sxm/agg/fp8/4/1/1/1"},
            {"deployment": "sglang/m/b200_sxm/agg/fp8/4/1/1/1"}]
    out = selfcal.summary(rows, meas, held_out, calibrated, fits)["by_engine"]
    assert [(g["engine"], g["rows"], g["deployments"]) for g in out] == [
        ("sglang", 1, 1), ("vllm", 2, 1), ("all", 3, 2)]
    vllm, everything = out[1]["e"], out[2]["e"]
    assert vllm["ttft_med_abs"] == pytest.approx(0.2)
    assert vllm["ttft_bias"] == pytest.approx(0.1)
    assert everything["ttft_med_abs"] == pytest.approx(0.1)
    assert everything["ttft_bias"] == pytest.approx(0.0)
    assert out[2]["c"]["ttft_bias"] == pytest.approx(0.5)
