"""TensorRT-LLM's fp8 GEMM rows of AIConfigurator lose their dynamic input-scale time.

AIC's TensorRT-LLM GEMM collector loads no ``input_scale``, so its per-tensor fp8 rows time
``quantize_e4m3_per_tensor`` (amax, then quantise) before the GEMM; a served fp8 checkpoint
quantises with its static scale. AIC times the difference on its own (``compute_scale``).
The trees below are written by hand; the expected latencies are worked out in each test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serveplan.estimator.measurements import MeasurementError, load_aiconfigurator

SYSTEM = "h100_sxm"
DEVICE = "NVIDIA H100 80GB HBM3"


def _gemm_rows(rows: list[tuple[str, int, int, int, float]], framework="TRTLLM",
               version="1.3.0rc20") -> pd.DataFrame:
    return pd.DataFrame([dict(framework=framework, version=version, device=DEVICE,
                              op_name="gemm", kernel_source="torch_flow", gemm_dtype=dt,
                              m=m, n=n, k=k, latency=ms) for dt, m, n, k, ms in rows])


def _compute_scale(grid: dict[tuple[int, int], float]) -> pd.DataFrame:
    return pd.DataFrame([dict(framework="TRTLLM", version="1.3.0rc20", device=DEVICE,
                              op_name="compute_scale", kernel_source="torch_ops", m=m, k=k,
                              quant_dtype="fp8", latency=ms) for (m, k), ms in grid.items()])


def _tree(root: Path, engine: str, gemm: pd.DataFrame, scale: pd.DataFrame | None) -> Path:
    data = root / "systems" / "data" / SYSTEM
    (data / "gemm" / engine / "1.3.0rc20").mkdir(parents=True)
    gemm.to_parquet(data / "gemm" / engine / "1.3.0rc20" / "gemm_perf.parquet")
    if scale is not None:
        (data / "quantize" / engine / "1.3.0rc20").mkdir(parents=True)
        scale.to_parquet(data / "quantize" / engine / "1.3.0rc20" / "computescale_perf.parquet")
    return root


# compute_scale grid (ms): m in {4, 16}, k in {1024, 4096}
GRID = {(4, 1024): 0.0072, (16, 1024): 0.0080, (4, 4096): 0.0100, (16, 4096): 0.0120}


def _latency_us(df: pd.DataFrame, dtype: str, m: int, k: int) -> float:
    row = df[(df["dtype"] == dtype) & (df.m == m) & (df.k == k)]
    assert len(row) == 1
    return float(row.latency_s.iloc[0]) * 1e6


def test_fp8_rows_lose_the_compute_scale_of_their_shape(tmp_path):
    gemm = _gemm_rows([("fp8", 4, 8192, 1024, 0.0148), ("bfloat16", 4, 8192, 1024, 0.0087),
                       ("fp8_block", 4, 8192, 1024, 0.0078), ("fp8", 16, 8192, 4096, 0.0300)])
    df = load_aiconfigurator(_tree(tmp_path, "trtllm", gemm, _compute_scale(GRID)))
    # on the grid: 14.8 - 7.2 = 7.6 us and 30.0 - 12.0 = 18.0 us
    assert _latency_us(df, "fp8", 4, 1024) == pytest.approx(7.6, abs=1e-6)
    assert _latency_us(df, "fp8", 16, 4096) == pytest.approx(18.0, abs=1e-6)
    # other dtypes as measured
    assert _latency_us(df, "bf16", 4, 1024) == pytest.approx(8.7, abs=1e-6)
    assert _latency_us(df, "fp8_block", 4, 1024) == pytest.approx(7.8, abs=1e-6)
    kernels = dict(zip(df["dtype"].astype(str), df.kernel.astype(str), strict=False))
    assert kernels["fp8"] == "torch_flow_static_scale" and kernels["bf16"] == "torch_flow"


def test_off_grid_shapes_interpolate_in_log2(tmp_path):
    # m = 8 is halfway between 4 and 16 in log2; k = 2048 halfway between 1024 and 4096:
    # the bilinear value is the mean of the four corners, (7.2 + 8.0 + 10.0 + 12.0) / 4 = 9.3 us
    # m = 64 lies beyond the grid and takes its edge (m = 16): at k = 1024, 8.0 us
    gemm = _gemm_rows([("fp8", 8, 8192, 2048, 0.0200), ("fp8", 64, 8192, 1024, 0.0200)])
    df = load_aiconfigurator(_tree(tmp_path, "trtllm", gemm, _compute_scale(GRID)))
    assert _latency_us(df, "fp8", 8, 2048) == pytest.approx(20.0 - 9.3, abs=1e-6)
    assert _latency_us(df, "fp8", 64, 1024) == pytest.approx(20.0 - 8.0, abs=1e-6)


def test_other_engines_keep_their_fp8_rows(tmp_path):
    # vLLM's collector quantises with a scale of its own choosing; its rows are left alone
    gemm = _gemm_rows([("fp8", 4, 8192, 1024, 0.0083)], framework="VLLM")
    df = load_aiconfigurator(_tree(tmp_path, "vllm", gemm, _compute_scale(GRID)))
    assert _latency_us(df, "fp8", 4, 1024) == pytest.approx(8.3, abs=1e-6)


def test_without_the_scale_table_rows_are_kept_with_a_warning(tmp_path):
    gemm = _gemm_rows([("fp8", 4, 8192, 1024, 0.0148)])
    with pytest.warns(UserWarning, match=r"computescale_perf.parquet.*dynamic input scale"):
        df = load_aiconfigurator(_tree(tmp_path, "trtllm", gemm, None))
    assert _latency_us(df, "fp8", 4, 1024) == pytest.approx(14.8, abs=1e-6)


def test_a_scale_longer_than_its_gemm_is_refused(tmp_path):
    gemm = _gemm_rows([("fp8", 4, 8192, 1024, 0.0050)])
    with pytest.raises(MeasurementError, match=r"gemm_perf.parquet: an fp8 GEMM row.*disagree"):
        load_aiconfigurator(_tree(tmp_path, "trtllm", gemm, _compute_scale(GRID)))


SHARED_AIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "aiconfigurator"


@pytest.mark.skipif(not SHARED_AIC.is_dir(), reason="the shared AIConfigurator copy is absent")
def test_on_the_real_tables_fp8_costs_what_block_fp8_does_at_small_m():
    """The corrected per-tensor rows sit at the block-scaled fp8 GEMM of the same shape
    (the kernel family a served fp8 GEMM of this size runs), where the raw rows are about
    1.5x it on H100 (the bf16 GEMM moves twice the weight bytes)."""
    df = load_aiconfigurator(SHARED_AIC, systems="h100", families="gemm", engines="trtllm",
                             versions="current")
    small = df[df.m <= 64]
    wide = small.pivot_table(index=["m", "n", "k"], columns="dtype", values="latency_s",
                             observed=True).dropna()
    ratio = float(np.median(wide["fp8"] / wide["fp8_block"]))
    assert 0.85 < ratio < 1.1
