"""The end-to-end report's breakdown tables (``bench/accuracy_e2e_breakdown.py``), worked
by hand on a few rows."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from serveplan.e2e import E2ERow


@pytest.fixture
def breakdown(accuracy_e2e):  # the fixture puts bench/ on the path
    return importlib.import_module("accuracy_e2e_breakdown")


def _row(k, engine="vllm", model="m", concurrency=4, mode="agg", isl=1024, system="b200_sxm"):
    return E2ERow(id=f"r{k}", engine=engine, version="1", model=model, system=system,
                  precision="fp8", mode=mode, isl=isl, osl=1024, concurrency=concurrency,
                  tp=1, pp=1, dp=1, ep=1, ttft_ms=0.0, tpot_ms=0.0)


def test_load_bands_cover_every_concurrency(breakdown):
    assert [breakdown.load_band(c) for c in (1, 8, 9, 128, 129, 12_000)] == [
        "<= 8", "<= 8", "9-128", "9-128", "> 128", "> 128"]
    with pytest.raises(ValueError, match="below every band"):
        breakdown.load_band(0)


def test_engine_load_table_by_hand(breakdown):
    """vLLM at 4, 4 and 200 clients, SGLang at 16. Measured TTFT 100, 200, 100, 50 ms and
    TPOT 10 ms everywhere; predicted TTFT 80, 260, 150, 50 and TPOT 11, 9, 10, 12 ms.
    vLLM <= 8: TTFT errors -0.2 and +0.3 -> median |e| 0.25, bias +0.05; TPOT +0.1 and
    -0.1 -> 0.1 and 0. vLLM > 128: +0.5 / 0. SGLang 9-128: 0 / +0.2."""
    rows = [_row(0), _row(1), _row(2, concurrency=200), _row(3, "sglang", concurrency=16)]
    meas = np.array([[100, 10], [200, 10], [100, 10], [50, 10]], dtype=float)
    pred = np.array([[80, 11], [260, 9], [150, 10], [50, 12]], dtype=float)
    table = breakdown.engine_load_table(rows, meas, {"b": pred})
    got = {(t["engine"], t["load"], t["rows"]): t["b"] for t in table}
    assert [(t["engine"], t["load"]) for t in table] == [("sglang", "9-128"), ("vllm", "<= 8"),
                                                          ("vllm", "> 128")]
    light = got[("vllm", "<= 8", 2)]
    assert light["ttft_med_abs"] == pytest.approx(0.25)
    assert light["ttft_bias"] == pytest.approx(0.05)
    assert light["tpot_med_abs"] == pytest.approx(0.1)
    assert light["tpot_bias"] == pytest.approx(0.0)
    assert got[("vllm", "> 128", 1)]["ttft_bias"] == pytest.approx(0.5)
    assert got[("sglang", "9-128", 1)]["tpot_bias"] == pytest.approx(0.2)


def test_a_setting_without_finite_predictions_is_left_out(breakdown):
    rows = [_row(0)]
    meas = np.array([[100.0, 10.0]])
    table = breakdown.group_table(rows, meas, {"b": np.array([[np.nan, 10.0]]),
                                                "c": np.array([[110.0, 10.0]])})
    assert "b" not in table[0] and table[0]["c"]["ttft_bias"] == pytest.approx(0.1)


def test_light_load_gaps_by_hand(breakdown):
    """Two light-load rows of one group: measured 200 / 300 ms TTFT at 10 / 20 ms TPOT,
    the engine alone 100 / 140 ms -> gaps 100 and 160 ms (median 130), 10 and 8 decode
    steps (median 9). Rows at 16 clients, disaggregated, or another prompt length are not
    in that group."""
    rows = [_row(0, concurrency=2), _row(1, concurrency=8), _row(2, concurrency=16),
            _row(3, mode="disagg"), _row(4, isl=8192)]
    meas = np.array([[200, 10], [300, 20], [900, 10], [900, 10], [500, 10]], dtype=float)
    engine = np.array([[100, 10], [140, 20], [100, 10], [100, 10], [450, 10]], dtype=float)
    table = breakdown.light_load_gaps(rows, meas, engine)
    assert [(t["isl"], t["rows"]) for t in table] == [(1024, 2), (8192, 1)]
    first = table[0]
    assert (first["measured_ms"], first["engine_ms"]) == (250.0, 120.0)
    assert first["gap_ms"] == pytest.approx(130.0)
    assert first["gap_steps"] == pytest.approx(9.0)
    assert table[1]["gap_steps"] == pytest.approx(5.0)


def test_a_small_rise_prints_with_the_digits_that_show_it(breakdown):
    assert breakdown.before_after(0.1234, 0.2) == "12.3 -> 20.0 %"
    assert breakdown.before_after(0.06301, 0.06349) == "6.30 -> 6.35 %"
    assert breakdown.before_after(0.063001, 0.063004) == "6.300 -> 6.300 %"  # three at most


def test_worse_models_lists_only_the_models_whose_error_rose(breakdown):
    rows = [E2ERow(id=f"{m}{k}", engine="vllm", version="1", model=m, system="b200_sxm",
                   precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=4,
                   tp=1, pp=1, dp=1, ep=1, ttft_ms=100.0, tpot_ms=10.0)
            for m in ("a", "b") for k in range(2)]
    before = np.array([[110.0, 10.63]] * 2 + [[130.0, 11.0]] * 2)  # TTFT +10 / +30 %
    after = np.array([[120.0, 10.634]] * 2 + [[110.0, 10.5]] * 2)  # a rises, b falls
    assert breakdown.worse_models(rows, [0, 1, 2, 3], before, after) == [
        "a: TTFT 10.0 -> 20.0 %, TPOT 6.30 -> 6.34 %"]
