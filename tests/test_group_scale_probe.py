"""The per-group scale probe (``bench/e2e_group_scale_probe.py``), worked by hand."""

from __future__ import annotations

import importlib

import numpy as np
import pytest


@pytest.fixture
def probe(accuracy_e2e):  # the fixture puts bench/ on the path
    return importlib.import_module("e2e_group_scale_probe")


def _rec(engine, meas, unfitted, fitted):
    return {"engine": engine, "ttft_ms": str(meas), "engine_unfitted_ttft_ms": str(unfitted),
            "engine_fitted_lomo_ttft_ms": str(fitted)}


def test_held_out_factor_comes_from_the_other_units(probe):
    # units b and c: unfitted 100, fitted 150, measured 125 -> their factor is 0.5; unit a's
    # rows (unfitted 200, fitted 260) then predict 200 + 0.5 x 60 = 230, whatever they measured
    n = probe.MIN_ROWS
    recs = ([_rec("vllm", 125.0, 100.0, 150.0) for _ in range(2 * n)]
            + [_rec("vllm", 999.0, 200.0, 260.0) for _ in range(n)])
    unit = ["b"] * n + ["c"] * n + ["a"] * n
    pred, factors = probe.scaled(recs, unit, ["g"] * (3 * n))
    assert factors[("vllm", "g", "a")] == pytest.approx(0.5, abs=1e-4)
    np.testing.assert_allclose(pred[2 * n:], 230.0, atol=0.01)
    # b's factor comes from c's rows (0.5) and a's (which want (999 - 200) / 60, past the
    # bound 3), not from b's own: in between
    assert 0.5 + 1e-3 < factors[("vllm", "g", "b")] < 3.0 - 1e-3


def test_rows_left_alone_and_thin_groups_keep_the_fit(probe):
    recs = [_rec("vllm", 125.0, 100.0, 150.0) for _ in range(4)] + [_rec("sglang", 50.0, 40.0,
                                                                         80.0)]
    unit = ["a", "b", "b", "b", "a"]
    # group None: untouched; group "g" has 3 rows of other units (< MIN_ROWS): factor 1
    pred, factors = probe.scaled(recs, unit, ["g", "g", "g", "g", None])
    np.testing.assert_allclose(pred, [150.0] * 4 + [80.0])
    assert set(factors.values()) == {1.0}


def test_in_sample_factor_uses_every_unit(probe):
    n = probe.MIN_ROWS
    recs = [_rec("trtllm", 125.0, 100.0, 150.0) for _ in range(n)]
    pred, factors = probe.scaled(recs, ["a"] * n, ["g"] * n, in_sample=True)
    assert factors[("trtllm", "g", "a")] == pytest.approx(0.5, abs=1e-4)
    np.testing.assert_allclose(pred, 125.0, atol=0.01)
