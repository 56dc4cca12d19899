"""The report's floor from repeated measurements (``repeat_spread`` in
``bench/accuracy_e2e_breakdown.py``, keyed by ``accuracy_e2e.sim_key``), worked by hand."""

from __future__ import annotations

import importlib

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
