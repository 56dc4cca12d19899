"""The fits'-loss probe (``bench/e2e_loss_probe.py``) on rows built by hand."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import serveplan.estimator.runtime_fit as runtime_fit
from serveplan.e2e import E2ERow

TERM = "frontend_output_s"


@pytest.fixture
def probe(accuracy_e2e, monkeypatch):  # the fixture puts bench/ on the path
    module = importlib.import_module("e2e_loss_probe")
    width = importlib.import_module("e2e_prefill_width_probe")
    monkeypatch.setitem(width.SHIPPED_SETS, "sglang", (TERM,))  # the latency alone
    return module


class _Model:
    num_layers, expert_layers = 60, 0


def _inputs(stalled: float):
    """Models a and b: 4 rows each, measured 50 ms above the term-free 200 ms TTFT (the
    latency's slope is 1 ms per ms); model c: 2 rows that measured ``stalled`` times that."""
    counts = {"a": 4, "b": 4, "c": 2}
    rows = [E2ERow(id=f"{m}{k}", engine="sglang", version="1", model=m, system="b200_sxm",
                   precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=4,
                   batch_size=4, tp=8, pp=1, dp=1, ep=1,
                   ttft_ms=250.0 * (stalled if m == "c" else 1.0), tpot_ms=20.0)
            for m, n in counts.items() for k in range(n)]
    return dict(rows=rows, unfitted=np.tile([200.0, 20.0], (len(rows), 1)),
                prefill_s=[None] * len(rows), models=[_Model()] * len(rows),
                unit=[r.model for r in rows], counted=np.ones(len(rows), dtype=bool))


def test_cauchy_at_the_shipped_scale_is_the_shipped_loss(probe):
    rng = np.random.default_rng(0)
    pred, meas = rng.uniform(50, 500, (7, 2)), rng.uniform(50, 500, (7, 2))
    assert probe.cauchy(pred, meas, 0.1) == pytest.approx(runtime_fit.robust_loss(pred, meas))
    assert probe.cauchy(pred, meas, 0.1) != pytest.approx(runtime_fit.soft_l1_loss(pred, meas))


def test_stalled_rows_pull_soft_l1_and_barely_cauchy(probe):
    """Held out, model a's latency is fitted on b (4 rows needing 50 ms) and c (2 rows ten
    times off). Soft L1 (psi(r) = 2r / sqrt(1 + r^2), r the log ratio over 0.1) balances
    c's pull, about -2 each, against b's: 4 psi(r) = 4 at r = 1 / sqrt(3), so b sits
    e^0.0577 - 1 = 5.9 % high and so does a. Cauchy's pull from c is about 2 / |r| each."""
    inp = _inputs(stalled=10.0)
    soft = probe.held_out_with(runtime_fit.soft_l1_loss, inp)
    cauchy = probe.held_out_with(runtime_fit.robust_loss, inp)
    a = slice(0, 4)
    assert soft[a, 0] / 250.0 - 1.0 == pytest.approx(np.expm1(0.1 / np.sqrt(3)), abs=0.003)
    assert np.all(np.abs(cauchy[a, 0] / 250.0 - 1.0) < 0.005)
    assert runtime_fit.robust_loss is probe.LOSSES["Cauchy, 0.1 (shipped)"]  # restored
