"""Calibration: single-op roofline inputs, recovery of known constants from synthetic
measurements, correctors on synthetic residuals, fixtures, and the shipped profiles."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from serveplan.estimator.calibrate import (
    CalibrationError,
    apply_constants,
    calibrate,
    fit_constants,
    predict_measurements,
)
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.measurements import MEASUREMENT_COLUMNS, load_aiconfigurator
from serveplan.estimator.opwork import corrector_features, op_times, op_work
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import Efficiency, PhaseEfficiency, Profile, load_profile
from serveplan.estimator.specs import SpecError
from serveplan.kernels import roofline as K

FIXTURES = __import__("pathlib").Path(__file__).parent / "data" / "measurements"
H100 = resolve_gpu("h100")


def _frame(rows: list[dict]) -> pd.DataFrame:
    """A measurement table in the schema from partial row dicts."""
    df = pd.DataFrame(rows)
    for col, spec in MEASUREMENT_COLUMNS.items():
        if col not in df.columns:
            df[col] = "" if spec.dtype == "string" else np.nan
        elif spec.dtype == "string":
            df[col] = df[col].fillna("").astype(str)
    return df


def _eff(pc, pm, dc, dm):
    return PhaseEfficiency(prefill=Efficiency(ec=pc, em=pm), decode=Efficiency(ec=dc, em=dm))


TRUTH = Profile(
    name="truth",
    efficiency={
        "gemm": _eff(0.62, 0.71, 0.62, 0.71),
        "attention": _eff(0.45, 0.55, 0.5, 0.77),
        "elementwise": _eff(0.5, 0.6, 0.5, 0.5),
        "moe": _eff(0.35, 0.8, 0.35, 0.8),
        "comm": _eff(0.55, 0.55, 0.8, 0.8),
    },
    kernel_fixed_family_s={"gemm": 4e-6, "attention": 9e-6, "moe": 1.2e-5},
    comm_latency_s=3e-6,
    flash_tile=128,
)


def _synthetic_rows() -> list[dict]:
    base = dict(gpu="h100", engine="vllm", dtype="bf16")
    rows = []
    for m, (n, k) in itertools.product(2 ** np.arange(0, 15), [(4096, 4096), (6144, 4096),
                                                              (4096, 14336), (1024, 8192)]):
        rows.append(dict(base, op_family="gemm", m=m, n=n, k=k))
    heads = [(32, 8, 128), (8, 8, 128), (16, 2, 64)]
    for b, q, (hq, hkv, d) in itertools.product((1, 4, 32), (1, 16, 128, 512, 2048, 8192), heads):
        rows.append(dict(base, op_family="attention_prefill", batch_size=b, query_len=q, kv_len=0,
                         num_heads=hq, num_kv_heads=hkv, head_dim=d, window_size=0,
                         kv_dtype="bf16"))
    for b, kv, (hq, hkv, d) in itertools.product((1, 8, 64, 512), (15, 255, 4095, 32767), heads):
        rows.append(dict(base, op_family="attention_decode", batch_size=b, query_len=1,
                         kv_len=kv, num_heads=hq, num_kv_heads=hkv, head_dim=d, window_size=0,
                         kv_dtype="bf16"))
    for t, ep in itertools.product(2 ** np.arange(0, 15), (1, 4)):
        rows.append(dict(base, op_family="moe", num_tokens=t, hidden_size=4096, inter_size=14336,
                         num_experts=8, topk=2, tp=1, ep=ep, moe_distribution="balanced"))
    for nbytes, g, kern in itertools.product(2.0 ** np.arange(10, 29, 2), (2, 4, 8),
                                             ("vllm_graph", "vllm_eager")):
        rows.append(dict(base, op_family="allreduce", message_bytes=nbytes, num_gpus=g,
                         kernel=kern))
    return rows


@pytest.fixture(scope="module")
def synthetic():
    df = _frame(_synthetic_rows())
    rng = np.random.default_rng(0)
    exact = op_times(op_work(df, H100, TRUTH.flash_tile), H100, TRUTH)
    assert np.all(np.isfinite(exact))
    df["latency_s"] = exact * np.exp(rng.normal(0.0, 0.02, len(df)))
    return df, exact


def test_op_work_matches_the_op_tables():
    """A measured op is costed with exactly the coefficients of the oracle's op rows."""
    oracle = CostOracle("llama-3.1-8b", "h100", tp=1)
    ops, names = oracle.table.ops, oracle.table.names
    qkv = ops[names.index("qkv_proj")]
    dec = ops[names.index("attn_decode")]
    df = _frame([dict(op_family="gemm", gpu="h100", engine="vllm", dtype="bf16", m=37,
                      n=qkv[K.C_X1], k=qkv[K.C_X2], latency_s=1e-5),
                 dict(op_family="attention_decode", gpu="h100", engine="vllm", dtype="bf16",
                      batch_size=3, query_len=1, kv_len=999, num_heads=32, num_kv_heads=8,
                      head_dim=128, window_size=0, kv_dtype="bf16", latency_s=1e-5)])
    w = op_work(df, H100, 128)
    assert w.work[0] == qkv[K.C_A] * 37 and w.traffic[0] == qkv[K.C_B] * 37 + qkv[K.C_C]
    pairs, kv = K.attention_request(1.0, 999.0, 0.0, 128.0)
    assert w.work[1] == dec[K.C_A] * 3 * pairs
    assert w.traffic[1] == dec[K.C_B] * 3 * kv + dec[K.C_C] * 3
    # and priced like the kernel prices an op: roofline with precomputed rates + fixed time
    t = op_times(w, H100, oracle.profile)
    rate = dec[K.C_RATE + 2 * K.PHASE_DECODE: K.C_RATE + 2 * K.PHASE_DECODE + 2]
    assert t[1] == pytest.approx(max(w.work[1] * rate[0], w.traffic[1] * rate[1])
                                 + dec[K.C_FIXED], rel=1e-12)


def test_nvfp4_rows_are_costed_as_the_oracle_prices_nvfp4_weights():
    """An NVFP4 GEMM row (B200): 4-bit weights plus one e4m3 scale per 16 elements --
    0.5 + 1/16 = 0.5625 bytes per weight -- on the fp4 tensor cores (9,000 TFLOP/s dense in
    the catalog), with exactly the coefficients of an NVFP4 deployment's op row; the shipped
    B200 profile corrects it with its own NVFP4 table, not bf16's."""
    from serveplan.estimator.correctors import find_table

    oracle = CostOracle("llama-3.1-8b", "b200", tp=1, dtype="nvfp4")
    up = oracle.table.ops[oracle.table.names.index("mlp.gate_up_proj")]
    n, k, m = up[K.C_X1], up[K.C_X2], 24
    df = _frame([dict(op_family="gemm", gpu="b200", engine="vllm", dtype="nvfp4", m=m, n=n,
                      k=k, latency_s=1e-5)])
    w = op_work(df, resolve_gpu("b200"))
    assert w.work[0] == 2.0 * m * n * k == up[K.C_A] * m
    assert w.traffic[0] == n * k * 0.5625 + 2.0 * m * (n + k) == up[K.C_B] * m + up[K.C_C]
    assert w.peak[0] == 9000e12
    assert find_table(oracle.profile.correctors, "gemm", dtype="nvfp4").select == {
        "dtype": "nvfp4"}
    assert find_table(oracle.profile.correctors, "moe", dtype="nvfp4").select == {
        "dtype": "nvfp4"}


def test_fixture_rows_are_costed():
    df = load_aiconfigurator(FIXTURES / "aiconfigurator", systems=["h200"], families=["gemm"],
                             min_rows=0)
    w = op_work(df, resolve_gpu("h200"))
    big = (df["m"] == 32768).to_numpy() & (df["n"] == 65536).to_numpy()
    assert big.sum() == 1
    assert w.work[big][0] == 2.0 * 32768 * 65536 * 12288  # SOURCE.md sanity row
    assert np.all(np.isfinite(w.work[df["dtype"].astype(str).isin(["bf16", "fp8_block"])]))
    # nothing the oracle cannot cost slips through
    other = load_aiconfigurator(FIXTURES / "aiconfigurator", systems=["a100_sxm"], min_rows=0)
    assert not op_work(other, resolve_gpu("a100-80gb")).valid.any()  # int8 weight-only


def test_fit_recovers_known_constants(synthetic):
    df, exact = synthetic
    fits = fit_constants(df, H100, Profile())
    g, a, m, c = fits["gemm"], fits["attention"], fits["moe"], fits["comm"]
    assert g.ec[0] == pytest.approx(0.62, rel=0.03) and g.em[0] == pytest.approx(0.71, rel=0.03)
    assert g.fixed_s == pytest.approx(4e-6, rel=0.1)
    assert a.flash_tile == 128
    assert a.ec[0] == pytest.approx(0.45, rel=0.03) and a.em[1] == pytest.approx(0.77, rel=0.03)
    assert a.fixed_s == pytest.approx(9e-6, rel=0.1)
    assert m.ec[0] == pytest.approx(0.35, rel=0.03) and m.em[0] == pytest.approx(0.8, rel=0.03)
    assert c.ec == pytest.approx((0.55, 0.8), rel=0.05)
    assert c.comm_latency_s == pytest.approx(3e-6, rel=0.15)
    fitted = apply_constants(Profile(), fits)
    err = op_times(op_work(df, H100, fitted.flash_tile), H100, fitted) / exact - 1
    assert np.median(np.abs(err)) < 0.01


def test_correctors_learn_a_residual_the_roofline_cannot(synthetic):
    """A smooth shape effect on GEMMs is learnt, and holds on (n, k) sites not fitted."""
    df, _ = synthetic
    gemm = df[df["op_family"] == "gemm"].copy()
    X = corrector_features(gemm, "gemm")
    effect = 0.25 * np.sin(X[:, 0] / 2.0) + 0.05 * (X[:, 1] - 12.0)
    gemm["latency_s"] = gemm["latency_s"] * np.exp(effect)
    site = gemm["n"].astype(int).astype(str) + "x" + gemm["k"].astype(int).astype(str)
    held = (site == "6144x4096").to_numpy()
    prof = calibrate(gemm[~held], "h100")
    assert "gemm:bf16" in prof.correctors
    test = gemm[held]
    y = test["latency_s"].to_numpy()
    err_b = np.abs(predict_measurements(test, "h100", prof, correctors=False) / y - 1)
    err_c = np.abs(predict_measurements(test, "h100", prof) / y - 1)
    assert np.median(err_c) < 0.03 < np.median(err_b)


def test_calibrated_profile_drives_the_oracle(synthetic, tmp_path):
    df, _ = synthetic
    prof = calibrate(df, "h100", name="mine")
    path = tmp_path / "mine.json"
    path.write_text(prof.model_dump_json())
    loaded = load_profile("h100", path)
    assert loaded.kernel_fixed("attention") == pytest.approx(9e-6, rel=0.1)
    oracle = CostOracle("llama-3.1-8b", "h100", profile=path)
    assert oracle.profile.name == "mine" and oracle.prm.shape[0] > K.N_PARAMS
    assert 0 < oracle.decode_time(16, 1000) < 1.0


def test_calibrate_rejects_unusable_measurements():
    rows = [dict(op_family="gemm", gpu="h100", engine="vllm", dtype="bf16", m=2**i, n=4096,
                 k=4096, latency_s=1e-5) for i in range(5)]
    with pytest.raises(CalibrationError, match="usable rows"):
        calibrate(_frame(rows), "h100")
    two = _frame(rows + [dict(rows[0], gpu="h200")])
    with pytest.raises(CalibrationError, match="several GPUs"):
        calibrate(two, "h100")


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200", "a100-80gb", "l40s"])
def test_shipped_profiles_load_by_default(gpu):
    prof = load_profile(gpu)
    assert prof.name == gpu and prof.correctors, "run python -m serveplan.estimator.calibrate --all"
    assert prof.provenance["engine"] == "vllm"
    oracle = CostOracle("llama-3.1-8b", gpu, dtype="bf16")
    assert oracle.profile.name == gpu
    # a 64-request decode step on an 8B model: milliseconds, not micro- or whole seconds
    assert 1e-3 < oracle.decode_time(64, 2048) < 0.2


def test_a_gpu_without_a_profile_borrows_its_siblings():
    """B300 has no per-op data: it runs B200's fitted profiles (each engine's) on its own
    peaks, and says so; a B200 twin that names B200 as its lender prices every step
    exactly as B200 does, the same twin without a lender runs on the defaults, and a GPU
    the catalog gives no lender (H100 PCIe: another interconnect) keeps the defaults."""
    for engine in (None, "trtllm", "sglang"):
        lender, borrowed = load_profile("b200", engine), load_profile("b300", engine)
        assert borrowed.efficiency == lender.efficiency
        assert borrowed.correctors.keys() == lender.correctors.keys() and lender.correctors
        assert borrowed.provenance["borrowed_from"] == "b200"
        assert borrowed.name == f"{lender.name} (for b300)"
    b200 = resolve_gpu("b200").model_dump()
    twin = {**b200, "name": "b200-twin", "aliases": (), "profile_from": "b200"}
    alone = {**twin, "profile_from": None}
    times = [CostOracle("llama-3.1-8b", g).decode_time(64, 2048) for g in ("b200", twin, alone)]
    assert times[1] == times[0] and times[2] != times[0]
    assert CostOracle("llama-3.1-8b", alone).profile == Profile()
    assert load_profile("h100-pcie") == Profile()
    with pytest.raises(SpecError, match="profile_from 'b2000' names no GPU with a shipped vllm profile"):
        CostOracle("llama-3.1-8b", {**twin, "profile_from": "b2000"})


def test_a_gpu_on_the_defaults_is_announced_once(monkeypatch, capsys):
    """A profile nobody fitted is said on stderr, once per GPU and process; a calibrated
    GPU and one borrowing a profile say nothing."""
    from serveplan.estimator import notes

    monkeypatch.setattr(notes, "_SAID", set())
    for gpu in ("h100", "b300", "h100-pcie", "h100-pcie", "mi300x"):
        load_profile(gpu)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" has no")[0] for line in err] == ["note: GPU h100-pcie",
                                                         "note: GPU mi300x"]
    assert "no calibration profile (none shipped, no profile_from)" in err[0]
    assert "a100-80gb, b200, h100, h200, l40s" in err[0]


def test_refit_keeps_the_provenance_notes(tmp_path):
    """``calibrate --all`` rewrites PROVENANCE.md's table and keeps its notes section."""
    from serveplan.estimator.calibrate import NOTES_HEADING, _kept_notes, _provenance_md

    md = tmp_path / "PROVENANCE.md"
    assert _kept_notes(md) == ""
    old = _provenance_md([("h100.json", "h100", "vllm", "vllm 0.1", 10, 2, "2026-01-01")])
    md.write_text(old + f"\n{NOTES_HEADING}\n\nwhy the tables moved\n")
    new = _provenance_md([("h100.json", "h100", "vllm", "vllm 0.2", 12, 3, "2026-02-02")],
                         _kept_notes(md))
    assert "| h100.json | h100 | vllm | vllm 0.2 | 12 | 3 | 2026-02-02 |" in new
    assert "vllm 0.1" not in new
    assert new.endswith(f"{NOTES_HEADING}\n\nwhy the tables moved\n")
