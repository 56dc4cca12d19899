"""The Argonne runs' step terms as ``bench/accuracy_batch_calib.py`` fits them, leave one
model out, against runs made by hand."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


@pytest.fixture
def calib(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    return importlib.import_module("accuracy_batch_calib")


def _runs(model, layers, tps, step_s, sync_s, profile_s=0.5e-3):
    """Runs of a stand-in cluster: the GPU-step sum predicts 1 ms a step (plus 10 ms of
    prefill); the cluster measures ``step_s`` instead of the profile's 0.5 ms per step and
    ``sync_s`` per layer and step at tp > 1."""
    rows = []
    for tp in tps:
        for out in (128, 512, 2048):
            predicted = 0.010 + out * 1e-3
            measured = predicted + out * (step_s - profile_s) + out * layers * (tp > 1) * sync_s
            rows.append({"engine": "vllm", "gpu": "h100", "model": model, "tp": tp,
                         "output_len": out, "layers": layers, "fits_kv": True,
                         "profile_step_overhead_s": profile_s, "predicted_s": predicted,
                         "measured_s": measured})
    return rows


def test_held_out_model_gets_the_cluster_terms_of_the_others(calib):
    """A node that runs 2.0 ms a step and 45 us a layer at tp > 1: fitted on the 7B and 8B
    runs at TP 1, 2, 4, the 80-layer model at TP 4 is predicted exactly -- its 512-token
    batch 0.010 + 0.512 + 512 x 1.5 ms + 512 x 80 x 45 us = 3.1332 s -- and each fit
    reports those terms."""
    res = pd.DataFrame(_runs("7b", 32, (1, 2, 4), 2.0e-3, 45e-6)
                       + _runs("8b", 32, (1, 2, 4), 2.0e-3, 45e-6)
                       + _runs("70b", 80, (4,), 2.0e-3, 45e-6))
    pred, fits = calib.calibrated_lomo(res)
    held = res["model"] == "70b"
    assert pred[(held & (res["output_len"] == 512)).to_numpy()] == pytest.approx([3.1332],
                                                                                rel=1e-4)
    np.testing.assert_allclose(pred, res["measured_s"], rtol=1e-4)
    assert [f["held_out"] for f in fits] == ["70b", "7b", "8b"]
    for f in fits:
        assert f["step_overhead_s"] == pytest.approx(2.0e-3, rel=1e-3)
        assert f["tp_sync_per_layer_s"] == pytest.approx(45e-6, rel=1e-3)


def test_sync_is_not_fitted_without_both_tp_1_and_tp_above_1(calib):
    """Runs at TP 4 only cannot tell a step's overhead from its synchronisation: the fit
    puts everything in the step overhead (1.5 ms + 32 x 45 us = 2.94 ms) and no sync."""
    rows = pd.DataFrame(_runs("7b", 32, (4,), 1.5e-3, 45e-6))
    step, sync = calib.fit_cluster(rows)
    assert (step, sync) == (pytest.approx(1.5e-3 + 32 * 45e-6, rel=1e-3), 0.0)
