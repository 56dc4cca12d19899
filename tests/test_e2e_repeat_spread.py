"""The report's floor from repeated measurements (``repeat_spread`` in
``bench/accuracy_e2e_breakdown.py``, keyed by ``accuracy_e2e.sim_key``) and its overall
figures with each run counted once (``overall_distinct``), worked by hand."""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest

from serveplan.e2e import E2ERow


@pytest.fixture
def spread(accuracy_e2e):  # the fixture puts bench/ on the path
    breakdown = importlib.import_module("accuracy_e2e_breakdown")
    return lambda rows: breakdown.repeat_spread(rows, accuracy_e2e.sim_key)


def _row(k, ttft, tpot, measured, concurrency=8, version="0.19.0"):
    return E2ERow(id=f"r{k}", engine="vllm", version=version, model="m", system="b200_sxm",
                  precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=concurrency,
                  tp=1, pp=1, dp=1, ep=1, ttft_ms=ttft, tpot_ms=tpot, measured=measured)


def test_one_date_exported_twice_is_one_measurement(spread):
    """One deployment and load: 2026-04-01 exported twice (100 and 102 ms: median 101),
    2026-04-08 at 120 ms, 2026-04-15 at 80 ms. Each date against the median of the other
    two: 101 vs median(120, 80) = 100 -> 0.01; 120 vs median(101, 80) = 90.5 -> 0.326;
    80 vs median(101, 120) = 110.5 -> 0.276. TTFT median 0.276, p75 (numpy linear) 0.301.
    TPOT 10, 10, 12, 10 ms: 10 vs 11 -> 0.0909, 12 vs 10 -> 0.2, 10 vs 11 -> 0.0909.
    Another load (16 clients) measured on one date only adds nothing, and the engine
    version does not split a group (repeats are grouped across versions)."""
    rows = [_row(0, 100, 10, "2026-04-01"), _row(1, 102, 10, "2026-04-01"),
            _row(2, 120, 12, "2026-04-08", version="0.17.0"), _row(3, 80, 10, "2026-04-15"),
            _row(4, 300, 20, "2026-04-01", concurrency=16)]
    s = spread(rows)
    assert s["measurements"] == 3
    assert s["ttft_median"] == pytest.approx(abs(80 / 110.5 - 1))
    assert s["ttft_p75"] == pytest.approx((abs(80 / 110.5 - 1) + abs(120 / 90.5 - 1)) / 2)
    assert s["tpot_median"] == pytest.approx(1 / 11)
    assert s["tpot_p75"] == pytest.approx((1 / 11 + 0.2) / 2)


def test_undated_rows_count_once_per_distinct_value(spread):
    """Undated: 100 and 100 ms are one measurement, 150 another: 100 vs 150 -> 1/3, 150 vs
    100 -> 0.5; median 5/12. A deployment measured once gives no repeats at all."""
    rows = [_row(0, 100, 10, ""), _row(1, 100, 10, ""), _row(2, 150, 10, "")]
    s = spread(rows)
    assert s["measurements"] == 2
    assert s["ttft_median"] == pytest.approx((1 / 3 + 0.5) / 2)
    assert spread(rows[:2]) == {"measurements": 0}


def test_copies_of_one_run_count_once_in_the_overall_figure(accuracy_e2e):
    """Rows 0 and 1 are one run exported twice, once under another model name and recorded
    tp, its TTFT one binary digit off (same engine, system, load, and TTFT / TPOT to nine
    significant digits); row 2 is another run of that load (101 ms), row 3 the same values
    at another load. Each run once keeps rows 0, 2 and 3. Predicted TTFT 110, 200, 101, 150 ms: errors 0.1, 1.0, 0, 0.5, median over
    the rows 0.3, over the runs median(0.1, 0, 0.5) = 0.1 (the copy's 200 ms not counted);
    TPOT errors 0, 0, 0, 0.2: median over the runs 0."""
    breakdown = importlib.import_module("accuracy_e2e_breakdown")
    rows = [_row(0, 100, 10, ""), replace(_row(1, np.nextafter(100, 101), 10, ""),
                                          model="m2", tp=2),
            _row(2, 101, 10, ""), _row(3, 100, 10, "", concurrency=16)]
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in rows])
    assert breakdown.distinct_measurements(rows).tolist() == [True, False, True, True]
    pred = np.array([[110, 10], [200, 10], [101, 10], [150, 12]], dtype=float)
    once = breakdown.overall_distinct(rows, {"x": pred}, meas)
    assert once["rows"] == 3
    assert once["settings"]["x"]["ttft_med_abs"] == pytest.approx(0.1)
    assert once["settings"]["x"]["tpot_med_abs"] == pytest.approx(0.0)
    assert breakdown.overall({"x": pred}, meas)["x"]["ttft_med_abs"] == pytest.approx(0.3)


def test_a_runs_copies_under_two_dates_are_not_a_repeat(spread):
    """One run exported dated (2026-04-01) and undated, its TTFT one binary digit apart, is
    one measurement: with a second run (2026-04-08, 120 ms) the deployment has two, 100 vs
    120 -> 1/6 and 120 vs 100 -> 0.2 (median 11/60). Counted as two dates, the copies would
    add a third measurement at 0 % and pull the median down."""
    rows = [_row(0, 100, 10, "2026-04-01"), _row(1, np.nextafter(100, 99), 10, ""),
            _row(2, 120, 10, "2026-04-08")]
    s = spread(rows)
    assert s["measurements"] == 2
    assert s["ttft_median"] == pytest.approx((1 / 6 + 0.2) / 2)


def test_a_run_rounded_to_hundredths_in_another_export_is_one_measurement(spread):
    """A gap-analysis CSV repeats a run rounded to 0.01 ms (304.6537... ms / 8.33499... ms
    exported as 304.65 / 8.33, undated). It is the same run: one measurement, so the
    deployment has no repeat and the overall figure counts it once. A run 0.02 ms off in
    TTFT is another measurement."""
    breakdown = importlib.import_module("accuracy_e2e_breakdown")
    full, rounded = _row(0, 304.6537191, 8.334993756, "2026-03-24"), _row(1, 304.65, 8.33, "")
    assert breakdown.distinct_measurements([full, rounded]).tolist() == [True, False]
    assert spread([full, rounded]) == {"measurements": 0}
    other = _row(2, 304.67, 8.33, "2026-04-01")
    assert breakdown.distinct_measurements([full, rounded, other]).tolist() == [True, False,
                                                                               True]
