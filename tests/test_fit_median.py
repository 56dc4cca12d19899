"""The median-error first-order fit (``fit_first_order_median``) against hand-worked
cases, beside the soft-L1 fit it starts from."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.runtime_fit import (
    fit_first_order,
    fit_first_order_median,
    median_loss,
)


def _problem(gaps_ms):
    """One term, a latency of x seconds: each row's TTFT 100 ms + 1000 x, TPOT 10 ms,
    measured 100 + gap ms and 10 ms."""
    n = len(gaps_ms)
    pred0 = np.tile([100.0, 10.0], (n, 1))
    jac = np.zeros((n, 2, 1))
    jac[:, 0, 0] = 1e3
    meas = np.column_stack([100.0 + np.asarray(gaps_ms, dtype=float), np.full(n, 10.0)])
    return pred0, jac, meas


def test_median_loss_by_hand():
    pred = np.array([[110.0, 10.0], [100.0, 12.0], [50.0, 10.0]])
    meas = np.array([[100.0, 10.0], [100.0, 10.0], [100.0, 10.0]])
    # TTFT errors 0.1, 0, 0.5 -> median 0.1; TPOT 0, 0.2, 0 -> median 0
    assert median_loss(pred, meas) == pytest.approx(0.1)


def test_three_rows_of_five_decide_the_median_fit():
    """Gaps of 10, 10, 10, 100 and 100 ms: a 10 ms latency predicts three rows exactly,
    so the median error is 0 there and the median fit lands on it; the soft-L1 fit is
    pulled towards the two 100 ms rows."""
    pred0, jac, meas = _problem([10, 10, 10, 100, 100])
    upper = np.array([1.0])
    x = fit_first_order_median(pred0, jac, meas, np.zeros(1), upper)
    assert x[0] == pytest.approx(0.010, abs=2e-4)
    assert median_loss(pred0 + jac @ x, meas) == pytest.approx(0.0, abs=2e-3)
    soft = fit_first_order(pred0, jac, meas, np.zeros(1), upper)
    assert soft[0] > 0.015


def test_the_bounds_hold():
    """Gaps of -50 ms everywhere want a negative latency: the fit stops at 0."""
    pred0, jac, meas = _problem([-50, -50, -50])
    x = fit_first_order_median(pred0, jac, meas, np.zeros(1), np.array([1.0]))
    assert x[0] == pytest.approx(0.0, abs=1e-9)
