"""Per-op measurement schema, validation and importers (AIConfigurator, Vidur)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serveplan.estimator.measurements import (
    FAMILY_FEATURES,
    LATENCY_UNIT_COLUMNS,
    MEASUREMENT_COLUMNS,
    OP_FAMILIES,
    MeasurementError,
    empty_measurements,
    gpu_short_name,
    load_aiconfigurator,
    load_vidur,
    normalize_dtype,
    read_measurements,
    validate_measurements,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "data" / "measurements"
AIC_FIXTURE = FIXTURES / "aiconfigurator"
VIDUR_FIXTURE = FIXTURES / "vidur"
SHARED = REPO.parent / "shared" / "data"


# ------------------------------------------------------------------------- schema


def test_schema_spec_is_complete():
    assert set(MEASUREMENT_COLUMNS) >= {"op_family", "gpu", "engine", "engine_version",
                                        "dtype", "kv_dtype", "m", "n", "k", "kv_len",
                                        "message_bytes", "latency_s"}
    for name, spec in MEASUREMENT_COLUMNS.items():
        assert spec.dtype in ("string", "float64"), name
        assert spec.unit and spec.description, name
    assert MEASUREMENT_COLUMNS["latency_s"].unit == "s"
    assert MEASUREMENT_COLUMNS["message_bytes"].unit == "B"
    # every family feature is a float column of the schema
    for fam, feats in FAMILY_FEATURES.items():
        assert fam in OP_FAMILIES
        for f in feats:
            assert MEASUREMENT_COLUMNS[f].dtype == "float64", (fam, f)
    empty = empty_measurements()
    assert list(empty.columns) == list(MEASUREMENT_COLUMNS)
    assert len(empty) == 0


@pytest.mark.parametrize(
    ("name", "short"),
    [("NVIDIA H100 80GB HBM3", "h100"), ("h100_sxm", "h100"), ("NVIDIA H200", "h200"),
     ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("a100_sxm", "a100-80gb"), ("NVIDIA B200", "b200"),
     ("b200_sxm", "b200"), ("NVIDIA L40S", "l40s"), ("l40s", "l40s")],
)
def test_gpu_short_name(name, short):
    assert gpu_short_name(name) == short


def test_gpu_short_name_unknown_lists_valid():
    with pytest.raises(MeasurementError, match=r"'Voodoo 5'.*h100"):
        gpu_short_name("Voodoo 5")


def test_normalize_dtype():
    assert [normalize_dtype(x) for x in ("bfloat16", "half", "float16", "fp8", "sq",
                                         "fp8_block")] == ["bf16", "fp16", "fp16", "fp8",
                                                           "int8_sq", "fp8_block"]


# --------------------------------------------------------------------- validation


def _gemm_rows(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({
        "op_family": ["gemm"] * n, "gpu": ["h100"] * n, "engine": ["vllm"] * n,
        "dtype": ["bf16"] * n, "m": np.arange(1, n + 1, dtype=float),
        "n": [4096.0] * n, "k": [4096.0] * n, "latency_s": [1e-5] * n,
    })


def test_validate_accepts_good_table():
    df = _gemm_rows()
    assert validate_measurements(df, min_rows=3) is df


def test_validate_names_missing_column():
    df = _gemm_rows().drop(columns=["gpu"])
    with pytest.raises(MeasurementError, match=r"my.csv: missing required column\(s\) \['gpu'\]"):
        validate_measurements(df, source="my.csv")


def test_validate_names_unknown_family_and_row():
    df = _gemm_rows()
    df.loc[1, "op_family"] = "matmul"
    with pytest.raises(MeasurementError, match=r"'matmul'.*rows \[1\].*'gemm'"):
        validate_measurements(df)


def test_validate_negative_latency_row():
    df = _gemm_rows(4)
    df.loc[2, "latency_s"] = -1e-6
    with pytest.raises(MeasurementError, match=r"negative in rows \[2\]"):
        validate_measurements(df)


def test_validate_nonfinite_latency_rows():
    df = _gemm_rows(4)
    df.loc[0, "latency_s"] = np.nan
    df.loc[3, "latency_s"] = np.inf
    with pytest.raises(MeasurementError, match=r"latency_s is NaN/inf.*rows \[0, 3\]"):
        validate_measurements(df)


def test_validate_family_feature_missing_or_nan():
    df = _gemm_rows()
    df.loc[2, "k"] = np.nan
    with pytest.raises(MeasurementError, match=r"'k' is NaN.*'gemm'.*rows \[2\]"):
        validate_measurements(df)
    with pytest.raises(MeasurementError, match=r"column 'n' \(needed by op_family 'gemm'\)"):
        validate_measurements(_gemm_rows().drop(columns=["n"]))


def test_validate_min_rows_total_and_per_group():
    with pytest.raises(MeasurementError, match=r"3 rows, fewer than min_rows=5"):
        validate_measurements(_gemm_rows(3), min_rows=5)
    df = pd.concat([_gemm_rows(5), _gemm_rows(2).assign(gpu="h200")], ignore_index=True)
    with pytest.raises(MeasurementError, match=r"gemm/h200: 2"):
        validate_measurements(df, min_rows=3)


def test_validate_reports_latency_in_unknown_unit():
    df = _gemm_rows().rename(columns={"latency_s": "latency_ns"})
    with pytest.raises(MeasurementError, match=r"latency_ns.*unknown unit.*latency_ms"):
        validate_measurements(df)


# ---------------------------------------------------------------- read_measurements


def test_read_csv_converts_latency_ms(tmp_path):
    df = _gemm_rows().rename(columns={"latency_s": "latency_ms"})
    df["latency_ms"] = [0.5, 1.0, 2.5]
    path = tmp_path / "m.csv"
    df.to_csv(path, index=False)
    out = read_measurements(path)
    np.testing.assert_allclose(out["latency_s"], [0.5e-3, 1e-3, 2.5e-3])
    assert "latency_ms" not in out.columns
    assert list(out.columns[: len(MEASUREMENT_COLUMNS)]) == list(MEASUREMENT_COLUMNS)
    assert out["kv_len"].isna().all()  # filled in, does not apply to GEMM


def test_read_parquet_converts_latency_us(tmp_path):
    df = _gemm_rows().rename(columns={"latency_s": "latency_us"})
    df["latency_us"] = [10.0, 20.0, 40.0]
    path = tmp_path / "m.parquet"
    df.to_parquet(path, index=False)
    np.testing.assert_allclose(read_measurements(path)["latency_s"], [1e-5, 2e-5, 4e-5])


def test_read_unknown_unit_lists_accepted(tmp_path):
    df = _gemm_rows().rename(columns={"latency_s": "latency_ns"})
    path = tmp_path / "m.csv"
    df.to_csv(path, index=False)
    with pytest.raises(MeasurementError) as err:
        read_measurements(path)
    msg = str(err.value)
    assert "latency_ns" in msg
    for col in LATENCY_UNIT_COLUMNS:
        assert col in msg


def test_read_unknown_suffix(tmp_path):
    path = tmp_path / "m.xlsx"
    path.write_text("x")
    with pytest.raises(MeasurementError, match=r"'.xlsx'"):
        read_measurements(path)


def test_read_validates_rows(tmp_path):
    df = _gemm_rows()
    df.loc[1, "latency_s"] = -3.0
    path = tmp_path / "m.csv"
    df.to_csv(path, index=False)
    with pytest.raises(MeasurementError, match=r"m.csv: latency_s is negative in rows \[1\]"):
        read_measurements(path)


# ------------------------------------------------------------ AIConfigurator fixture


@pytest.fixture(scope="module")
def aic() -> pd.DataFrame:
    return load_aiconfigurator(AIC_FIXTURE)


def test_aic_gemm_sanity_row(aic):
    # SOURCE.md sanity check: h200 vllm bf16 m=32768 n=65536 k=12288 -> 63.83 ms, 827 TFLOP/s
    row = aic[(aic.gpu == "h200") & (aic.m == 32768) & (aic.n == 65536) & (aic.k == 12288)]
    assert len(row) == 1
    row = row.iloc[0]
    assert row.op_family == "gemm" and row.engine == "vllm" and row.engine_version == "0.24.0"
    assert row["dtype"] == "bf16"
    assert row.latency_s == pytest.approx(63.831177e-3, rel=1e-6)  # latency_ms / 1000
    tflops = 2 * row.m * row.n * row.k / row.latency_s / 1e12
    assert tflops == pytest.approx(827, abs=0.5)
    assert math.isnan(row.batch_size) and math.isnan(row.message_bytes)


def test_aic_gpu_mapping_and_dtypes(aic):
    a100 = aic[aic.source.str.contains("a100_sxm")]
    assert len(a100) == 4
    assert set(a100.gpu) == {"a100-80gb"}
    assert set(a100.engine) == {"trtllm"} and set(a100.dtype) == {"int8_wo"}
    assert set(aic.gpu) == {"h100", "h200", "a100-80gb"}


def test_aic_attention_mapping(aic):
    pre = aic[aic.op_family == "attention_prefill"].sort_values("latency_s")
    assert len(pre) == 4
    assert (pre.kv_len == 0).all()
    big = pre[(pre.batch_size == 4) & (pre.kv_dtype == "fp8")].iloc[0]
    assert big.query_len == 16384 and big.num_heads == 64 and big.num_kv_heads == 64
    assert big.head_dim == 64 and big.window_size == 0 and big["dtype"] == "bf16"
    assert big.latency_s == pytest.approx(17.466661e-3, rel=1e-6)
    assert sorted(pre.window_size) == [0, 0, 0, 128]

    dec = aic[aic.op_family == "attention_decode"]
    assert len(dec) == 4
    assert (dec.query_len == 1).all()
    assert sorted(dec.kv_len) == [1, 1023, 1023, 2047]  # kv_len = step
    assert set(dec.kv_dtype) == {"bf16", "fp8"}


def test_aic_moe_mapping(aic):
    moe = aic[aic.op_family == "moe"]
    assert len(moe) == 6
    alpha = dict(zip(moe.moe_distribution.astype(str), moe.moe_alpha, strict=True))
    assert alpha == {"balanced": 0.0, "power_law_1.01": 1.01, "power_law_1.2": 1.2}
    skew = moe[moe.moe_distribution == "power_law_1.2"].iloc[0]
    assert (skew.num_tokens, skew.hidden_size, skew.inter_size) == (1, 2048, 5120)
    assert (skew.topk, skew.num_experts, skew.tp, skew.ep) == (22, 512, 16, 2)
    assert skew.latency_s == pytest.approx(0.048198e-3, rel=1e-4)


def test_aic_collectives_elements_to_bytes(aic):
    nccl = aic[(aic.engine == "nccl") & (aic.engine_version == "2.27.3")]
    assert len(nccl) == 8
    assert set(nccl.op_family) == {"allreduce", "allgather", "reduce_scatter", "alltoall"}
    # half: 256 elements x 2 B; int8: 512 elements x 1 B
    assert set(nccl.loc[nccl.dtype == "fp16", "message_bytes"]) == {512.0}
    assert set(nccl.loc[nccl.dtype == "int8", "message_bytes"]) == {512.0}
    # the rows of this directory carry another NCCL version string
    assert set(nccl.engine_build) == {"2.29.2"}

    custom = aic[(aic.engine == "vllm") & (aic.op_family == "allreduce")]
    assert len(custom) == 4
    assert set(custom.kernel) == {"vllm_graph", "vllm_eager"}
    small = custom[custom.kernel == "vllm_graph"].sort_values("message_bytes").iloc[0]
    assert small.message_bytes == 128 * 2  # bf16 elements -> bytes
    assert small.num_gpus == 2
    assert small.latency_s == pytest.approx(0.004292e-3, rel=1e-3)


def test_aic_moe_a2a_is_microseconds(aic):
    a2a = aic[aic.op_family.isin(["moe_dispatch", "moe_combine"])]
    assert len(a2a) == 4
    first = a2a[(a2a.op_family == "moe_dispatch") & (a2a.num_tokens == 16)].iloc[0]
    assert first.latency_s == pytest.approx(64.18768e-6, rel=1e-6)
    assert (first.ep, first.num_gpus, first.num_nodes, first.topk) == (8, 8, 1, 8)
    assert first.kernel == "trtllm_deepep_ht"


def test_aic_filters():
    only = load_aiconfigurator(AIC_FIXTURE, systems="h200", families="gemm")
    assert len(only) == 5 and set(only.gpu) == {"h200"}
    by_dir = load_aiconfigurator(AIC_FIXTURE, systems=["a100_sxm"], engines="trtllm")
    assert len(by_dir) == 4 and set(by_dir.gpu) == {"a100-80gb"}
    ar = load_aiconfigurator(AIC_FIXTURE, families=["allreduce"], engines=["nccl"])
    assert set(ar.op_family) == {"allreduce"}
    assert sorted(ar.engine_version.unique()) == ["2.27.3", "2.29.2"]
    none = load_aiconfigurator(AIC_FIXTURE, systems="h200", families="moe", min_rows=0)
    assert len(none) == 0 and list(none.columns[:3]) == ["op_family", "op_name", "gpu"]


def test_aic_current_versions():
    cur = load_aiconfigurator(AIC_FIXTURE, families=["allreduce"], versions="current")
    # h100_sxm.yaml names nccl 2.27.3; query_versions.yaml names vllm 0.24.0
    assert set(zip(cur.engine, cur.engine_version, strict=True)) == {("nccl", "2.27.3"),
                                                                    ("vllm", "0.24.0")}


def test_aic_bad_filters_name_valid_values():
    with pytest.raises(MeasurementError, match=r"families.*\['matmul'\].*'gemm'"):
        load_aiconfigurator(AIC_FIXTURE, families=["matmul"])
    with pytest.raises(MeasurementError, match=r"engines.*\['tgi'\]"):
        load_aiconfigurator(AIC_FIXTURE, engines="tgi")
    with pytest.raises(MeasurementError, match=r"systems.*\['mi300x'\].*h100"):
        load_aiconfigurator(AIC_FIXTURE, systems="mi300x")
    with pytest.raises(MeasurementError, match="systems/data"):
        load_aiconfigurator(FIXTURES / "vidur")


# ---------------------------------------------------------------------- Vidur fixture


@pytest.fixture(scope="module")
def vidur() -> pd.DataFrame:
    with pytest.warns(UserWarning, match="Git-LFS pointer"):
        return load_vidur(VIDUR_FIXTURE)


def test_vidur_skips_lfs_pointer(vidur):
    assert not vidur.source.str.contains("Meta-Llama-3-8B").any()
    assert set(vidur.gpu) == {"h100"}


def test_vidur_gemm_shapes_and_units(vidur):
    gemm = vidur[vidur.op_family == "gemm"]
    assert len(gemm) == 3 * 4  # 3 rows x 4 GEMMs
    assert set(vidur.engine) == {"vidur"} and set(vidur.dtype) == {"fp16"}
    qkv = gemm[(gemm.op_name == "attn_pre_proj") & (gemm.tp == 2)].iloc[0]
    # Llama-2-7b: 32 heads x 128, no GQA -> (32 + 2*32) * 128 / tp=2
    assert (qkv.m, qkv.n, qkv.k) == (1, 6144, 4096)
    assert qkv.latency_s == pytest.approx(0.020e-3)  # median ms / 1000
    up = gemm[(gemm.op_name == "mlp_up_proj") & (gemm.tp == 1)]
    assert set(up.n) == {2 * 11008} and set(up.k) == {4096}
    assert sorted(up.latency_s) == pytest.approx([0.987e-3, 0.999e-3])
    down = gemm[(gemm.op_name == "mlp_down_proj") & (gemm.tp == 2)].iloc[0]
    assert (down.n, down.k) == (4096, 5504)
    act = vidur[(vidur.op_name == "mlp_act") & (vidur.tp == 2)].iloc[0]
    assert act.op_family == "elementwise" and act.hidden_size == 5504
    rope = vidur[(vidur.op_family == "rope") & (vidur.tp == 1)]
    assert set(rope.num_heads) == {32} and set(rope.head_dim) == {128}


def test_vidur_network(vidur):
    ar = vidur[vidur.op_family == "allreduce"].sort_values("message_bytes")
    assert len(ar) == 3
    first = ar.iloc[0]
    assert first.message_bytes == 2 * 2048  # fp16 elements -> bytes
    assert (first.num_gpus, first.num_nodes) == (8, 1)
    assert first.latency_s == pytest.approx(0.037e-3)
    p2p = vidur[vidur.op_family == "p2p"]
    assert sorted(p2p.num_nodes) == [1, 2]  # devices_per_node 2 (intra) and 1 (across)
    assert set(p2p.num_gpus) == {2}


def test_vidur_bad_statistic():
    with pytest.raises(MeasurementError, match=r"'p99'.*median"):
        load_vidur(VIDUR_FIXTURE, statistic="p99")


# ------------------------------------------------------------------------ real data


@pytest.fixture(scope="module")
def aic_real() -> pd.DataFrame:
    root = SHARED / "aiconfigurator"
    if not (root / "systems" / "data").is_dir():
        pytest.skip(f"{root} not present")
    return load_aiconfigurator(root, systems=["h100", "h200", "a100-80gb", "l40s", "b200"],
                               families=["gemm", "attention_prefill", "attention_decode"],
                               versions="current")


@pytest.mark.parametrize("gpu", ["h100", "h200", "a100-80gb", "l40s", "b200"])
@pytest.mark.parametrize("family", ["gemm", "attention_prefill", "attention_decode"])
def test_real_aic_rows_per_gpu_family(aic_real, gpu, family):
    sub = aic_real[(aic_real.gpu == gpu) & (aic_real.op_family == family)]
    assert len(sub) > 0
    assert np.isfinite(sub.latency_s).all() and (sub.latency_s > 0).all()


def test_real_aic_sanity_row(aic_real):
    row = aic_real[(aic_real.gpu == "h200") & (aic_real.engine == "vllm")
                   & (aic_real.m == 32768) & (aic_real.n == 65536) & (aic_real.k == 12288)
                   & (aic_real.dtype == "bf16")]
    assert len(row) == 1
    assert 2 * 32768 * 65536 * 12288 / row.latency_s.iloc[0] / 1e12 == pytest.approx(827,
                                                                                    abs=0.5)


def test_real_vidur():
    root = SHARED / "vidur"
    if not (root / "profiling").is_dir():
        pytest.skip(f"{root} not present")
    df = load_vidur(root)
    for gpu in ("a100-80gb", "h100"):
        assert (df[(df.gpu == gpu) & (df.op_family == "gemm")].shape[0]) > 0
        assert (df[(df.gpu == gpu) & (df.op_family == "allreduce")].shape[0]) > 0
