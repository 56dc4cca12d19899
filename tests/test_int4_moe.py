"""Weight-only int4 experts (compressed-tensors w4a16: Kimi-K2.5's routed experts) get a
corrector table of their own, fitted on AIConfigurator's ``int4_wo`` MoE rows.

Without it the oracle corrected int4 experts with the bf16 table, and the int4 kernels
(Marlin-style dequantising grouped GEMMs) ran 2-5x slower than that on B200
(``tests`` below compare against the shipped tables; ``bench/results/accuracy.md``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serveplan.estimator.calibrate_rows import oracle_dtype, select_training_rows
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.opwork import op_work
from serveplan.estimator.profile import load_profile

SHARED_AIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "aiconfigurator"


def test_measured_labels_map_to_the_oracles_table_keys():
    labels = pd.Series(["fp16", "bf16", "int4_wo", "nvfp4", "fp8_block"])
    assert list(oracle_dtype(labels)) == ["bf16", "bf16", "int4", "nvfp4", "fp8_block"]


def _moe_rows(dtypes, tokens=1):
    return pd.DataFrame([dict(op_family="moe", dtype=d, num_tokens=tokens, hidden_size=7168,
                              inter_size=2048, topk=8, num_experts=384, tp=1, ep=1,
                              moe_distribution="balanced", kernel="k", latency_s=1e-4)
                         for d in dtypes])


def test_an_int4_expert_row_moves_int4_bytes():
    """One token routed to 8 of Kimi-K2.5's experts (7168 x 2048, gate, up and down): the
    same FLOPs as bf16, and 8 x 3 x 7168 x 2048 weights at 2 - (0.5 + 2 / 128) bytes fewer
    (int4 with an fp16 scale per 128)."""
    w = op_work(_moe_rows(["bf16", "int4_wo"]), resolve_gpu("b200"), 128.0)
    assert w.work[0] == w.work[1]
    assert w.traffic[0] - w.traffic[1] == pytest.approx(8 * 3 * 7168 * 2048 * (2 - 0.515625))


def test_int4_rows_train_the_int4_table_only():
    rows = _moe_rows(["bf16", "int4_wo", "int4_wo"])
    assert list(select_training_rows(rows, "moe", dtype="int4")) == [False, True, True]
    assert list(select_training_rows(rows, "moe", dtype="bf16")) == [True, False, False]


@pytest.mark.parametrize("gpu", ["b200", "h100", "h200"])
def test_shipped_profiles_carry_an_int4_moe_table(gpu):
    assert "moe:int4" in load_profile(gpu).correctors


@pytest.mark.skipif(not SHARED_AIC.is_dir(), reason="the shared AIConfigurator copy is absent")
def test_the_int4_table_prices_the_measured_int4_kernel():
    """On B200's ``int4_wo`` rows (Kimi-K2.5's expert shape at every EP / TP size AIC ran)
    the shipped profile comes within a few percent at the median, where the bf16 table it
    fell back to put them 2-5x too fast (median ratio 0.33). These rows trained the table
    (one shape a GPU leaves none to hold out): a check that the fit reached the kernel it
    was fitted on and that the oracle reads it for int4 experts, not a held-out result."""
    from serveplan.estimator.calibrate_correctors import predict_measurements
    from serveplan.estimator.measurements import load_aiconfigurator

    df = load_aiconfigurator(SHARED_AIC, systems="b200", families="moe", engines="vllm",
                             versions="current")
    rows = df[select_training_rows(df, "moe", dtype="int4")].reset_index(drop=True)
    prof = load_profile("b200")
    ratio = predict_measurements(rows, "b200", prof) / rows["latency_s"].to_numpy()
    assert abs(np.median(ratio) - 1) < 0.05
    fallback = prof.model_copy(update={"correctors": {
        k: v for k, v in prof.correctors.items() if k != "moe:int4"}})
    old = predict_measurements(rows, "b200", fallback) / rows["latency_s"].to_numpy()
    assert np.median(old) < 0.5
