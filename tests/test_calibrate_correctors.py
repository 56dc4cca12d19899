"""Residual correctors: stored tables, their compilation into kernel arrays, and the kernel
with correctors on against the NumPy reference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from serveplan.estimator.corrector_fit import GridRegressor, interpolation_matrix
from serveplan.estimator.correctors import (
    QUANT_SCALE,
    Axis,
    GridTable,
    Runtime,
    Static,
    pack_runtime,
    packed_factors,
    specialize,
)
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import Profile, load_profile
from serveplan.kernels import roofline as K
from serveplan.kernels.reference import correction_ref, step_time_ref

GEMM_AXES = [Axis(feature="m", lo=0.0, step=0.5, n=31), Axis(feature="n", lo=5.0, step=1.0, n=12),
             Axis(feature="k", lo=5.0, step=1.0, n=12)]


def _random_table(family, axes, rng, select=None, scale=0.3):
    values = scale * rng.standard_normal([a.n for a in axes])
    return GridTable.from_values(family, axes, values, select)


def _synthetic_profile(rng) -> Profile:
    """Random correctors for every family the oracle binds."""
    tables = {
        "gemm:bf16": _random_table("gemm", GEMM_AXES, rng, {"dtype": "bf16"}),
        "attention_prefill:bf16": _random_table("attention_prefill", [
            Axis(feature="q_len", lo=0.0, step=1.0, n=15),
            Axis(feature="batch_heads", lo=0.0, step=1.0, n=16),
            Axis(feature="gqa_ratio", lo=0.0, step=1.0, n=7),
            Axis(feature="head_dim", lo=6.0, step=1.0, n=3)], rng, {"kv_dtype": "bf16"}),
        "attention_decode:bf16": _random_table("attention_decode", [
            Axis(feature="kv_len", lo=0.0, step=1.0, n=18),
            Axis(feature="batch_kv_heads", lo=0.0, step=1.0, n=15),
            Axis(feature="gqa_ratio", lo=0.0, step=1.0, n=7),
            Axis(feature="head_dim", lo=6.0, step=1.0, n=3)], rng, {"kv_dtype": "bf16"}),
        "moe:bf16": _random_table("moe", [
            Axis(feature="tokens_per_expert", lo=-8.0, step=1.0, n=20),
            Axis(feature="local_experts", lo=0.0, step=1.0, n=10),
            Axis(feature="expert_size", lo=18.0, step=1.0, n=9)], rng, {"dtype": "bf16"}),
        "allreduce:prefill": _random_table("allreduce", [
            Axis(feature="message_bytes", lo=8.0, step=1.0, n=23),
            Axis(feature="num_gpus", lo=1.0, step=1.0, n=3)], rng, {"phase": "prefill"}),
        "allreduce:decode": _random_table("allreduce", [
            Axis(feature="message_bytes", lo=8.0, step=1.0, n=23),
            Axis(feature="num_gpus", lo=1.0, step=1.0, n=3)], rng, {"phase": "decode"}),
        "alltoall": _random_table("alltoall", [
            Axis(feature="message_bytes", lo=8.0, step=1.0, n=23),
            Axis(feature="num_gpus", lo=1.0, step=1.0, n=3)], rng),
    }
    return Profile(name="synthetic", correctors=tables,
                   kernel_fixed_family_s={"gemm": 3e-6, "attention": 9e-6, "moe": 1.1e-5})


MODELS = [
    ("llama-3.1-8b", dict(tp=1)),
    ("llama-3.1-70b", dict(tp=4)),
    ("qwen3-30b-a3b", dict(tp=2)),
    ("qwen3-30b-a3b", dict(tp=2, ep=4, dp=2)),
    ("gemma-2-9b", dict(tp=2)),
]


@pytest.fixture(scope="module")
def profile():
    return _synthetic_profile(np.random.default_rng(11))


def test_quantised_values_round_trip():
    rng = np.random.default_rng(0)
    values = rng.uniform(-2, 2, size=(31, 12, 12))
    table = GridTable.from_values("gemm", GEMM_AXES, values)
    assert np.max(np.abs(table.log_values() - values)) <= QUANT_SCALE / 2 + 1e-15
    again = GridTable(**json.loads(table.model_dump_json()))
    assert np.array_equal(again.log_values(), table.log_values())


def test_table_rejects_wrong_size_and_axes():
    table = GridTable.from_values("gemm", GEMM_AXES, np.zeros((31, 12, 12)))
    with pytest.raises(ValueError, match="axes need"):
        GridTable(family="gemm", axes=GEMM_AXES[:2] + [Axis(feature="k", lo=5, step=1, n=3)],
                  values=table.values)
    with pytest.raises(ValueError, match="must be one of"):
        GridTable(family="gemm", axes=[Axis(feature="q_len", lo=0, step=1, n=31)] + GEMM_AXES[1:],
                  values=table.values)


def _direct_gemm_pack(table):
    """The stored GEMM table packed as-is for the kernel: m, n, k all read at run time."""
    header = [(K.FEAT_TOKENS, GEMM_AXES[0].lo, GEMM_AXES[0].step, GEMM_AXES[0].n),
              (K.FEAT_N, GEMM_AXES[1].lo, GEMM_AXES[1].step, GEMM_AXES[1].n),
              (K.FEAT_K, GEMM_AXES[2].lo, GEMM_AXES[2].step, GEMM_AXES[2].n)]
    return pack_runtime(header, np.exp(table.log_values()))


def _kernel_factor(prm, off, m, n, k):
    ops = np.zeros((1, K.N_COLS))
    ops[0, K.C_X1], ops[0, K.C_X2] = n, k
    return K.correction(prm, off, m, np.log2(m), np.zeros((1, K.N_AGG)), ops, 0)


def test_kernel_equals_table_exactly_at_grid_nodes():
    rng = np.random.default_rng(1)
    table = _random_table("gemm", GEMM_AXES, rng)
    prm = np.concatenate([np.zeros(3), _direct_gemm_pack(table)])
    factors = np.exp(table.log_values())
    for _ in range(200):
        i, j, jk = rng.integers(0, 31), rng.integers(0, 12), rng.integers(0, 12)
        m, n, k = 2.0 ** (0.5 * i), 2.0 ** (5 + j), 2.0 ** (5 + jk)
        got = _kernel_factor(prm, 3, m, n, k)
        if i % 2 == 0:  # power-of-two m: log2 is exact, so the node is hit exactly
            assert got == factors[i, j, jk]
        else:
            assert got == pytest.approx(factors[i, j, jk], rel=1e-13)


def test_kernel_equals_multilinear_interpolation_between_nodes():
    rng = np.random.default_rng(2)
    table = _random_table("gemm", GEMM_AXES, rng)
    prm = np.concatenate([np.zeros(1), _direct_gemm_pack(table)])
    m = 2.0 ** rng.uniform(-1, 16.5, 300)  # includes points beyond both edges (clamped)
    n = 2.0 ** rng.uniform(4, 17.5, 300)
    k = 2.0 ** rng.uniform(4.5, 16.2, 300)
    X = np.log2(np.stack([m, n, k], axis=1))
    want = table.factor(X)
    got = np.array([_kernel_factor(prm, 1, *row) for row in zip(m, n, k, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # the reference writes out every corner; same numbers
    ref = [correction_ref(prm, 1, {K.FEAT_TOKENS: np.log2(a), K.FEAT_N: np.log2(b),
                                   K.FEAT_K: np.log2(c)}) for a, b, c in zip(m, n, k, strict=True)]
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    # and the fit's sparse design matrix interpolates the same way
    M = interpolation_matrix(X, GEMM_AXES)
    np.testing.assert_allclose(M @ np.exp(table.log_values()).ravel(), want, rtol=1e-12)


def test_specialised_table_equals_stored_table(profile):
    """Static axes interpolated out and runtime axes shifted give the stored table's value."""
    table = profile.correctors["attention_decode:bf16"]
    hkv, ratio, d = 2.0, 4.0, 128.0
    bind = {"kv_len": Runtime(K.FEAT_KV_MEAN), "batch_kv_heads": Runtime(K.FEAT_BATCH, 1.0),
            "gqa_ratio": Static(ratio), "head_dim": Static(d)}
    prm = np.concatenate([np.zeros(2), packed_factors(table, bind)])
    rng = np.random.default_rng(3)
    for _ in range(100):
        batch, kv = rng.integers(1, 3000), 2.0 ** rng.uniform(0, 17)
        agg = np.array([[0.0, batch * kv, batch, 0.0, batch]])
        got = K.correction(prm, 2, 1.0, 0.0, agg, np.zeros((1, K.N_COLS)), 0)
        X = np.log2([[kv, batch * hkv, ratio, d]])
        assert got == pytest.approx(table.factor(X)[0], rel=1e-12)


def test_fully_static_table_packs_to_a_constant():
    rng = np.random.default_rng(4)
    table = _random_table("allreduce", [Axis(feature="message_bytes", lo=8, step=1, n=5),
                                        Axis(feature="num_gpus", lo=1, step=1, n=3)], rng)
    header, values = specialize(table, {"message_bytes": Static(2**10), "num_gpus": Static(4)})
    assert header == [(K.FEAT_TOKENS, 0.0, 1.0, 1)] and values.shape == (1,)
    assert values[0] == pytest.approx(table.predict_log(np.log2([[2**10, 4]]))[0])


@pytest.mark.parametrize("name,par", MODELS, ids=[f"{m}-{p}" for m, p in MODELS])
def test_step_time_with_correctors_matches_reference(profile, name, par):
    oracle = CostOracle(name, "h100", profile=profile, **par)
    ops, mods, prm, sizes = oracle.kernel_args
    assert prm.shape[0] > K.N_PARAMS and np.any(ops[:, K.C_CORR] > 0)
    rng = np.random.default_rng(5)
    for n in (1, 5, 64, 300):
        kind = rng.random(n)
        q = np.where(kind < 0.6, 1, rng.integers(2, 3000, n)).astype(np.int64)
        c = rng.integers(0, 20000, n).astype(np.int64)
        assert oracle.step_time(q, c) == pytest.approx(step_time_ref(q, c, ops, mods, prm, sizes),
                                                       rel=1e-9)
        ones = np.ones(n, dtype=np.int64)
        assert oracle.step_time(ones, c) == pytest.approx(
            step_time_ref(ones, c, ops, mods, prm, sizes), rel=1e-9)


def test_uniform_path_with_correctors_equals_per_request_path(profile):
    oracle = CostOracle("qwen3-30b-a3b", "h100", tp=2, profile=profile)
    batches, ctx = np.array([1, 3, 40, 200]), np.array([0, 77, 4000, 12000])
    dec = oracle.decode_time(batches, ctx)
    pre = oracle.prefill_time(batches, 257, ctx)
    for j in range(4):
        b = int(batches[j])
        cc = np.full(b, ctx[j], dtype=np.int64)
        assert dec[j] == pytest.approx(oracle.step_time(np.ones(b, dtype=np.int64), cc), rel=1e-12)
        assert pre[j] == pytest.approx(oracle.step_time(np.full(b, 257), cc), rel=1e-12)


def test_correctors_change_time_and_can_be_switched_off(profile):
    plain = profile.model_copy(update={"correctors": {}})
    on = CostOracle("llama-3.1-70b", "h100", tp=4, profile=profile)
    off = CostOracle("llama-3.1-70b", "h100", tp=4, profile=profile, correctors=False)
    bare = CostOracle("llama-3.1-70b", "h100", tp=4, profile=plain)
    assert off.prm.shape == bare.prm.shape == (K.N_PARAMS,)
    assert off.decode_time(32, 1000) == bare.decode_time(32, 1000)
    assert on.decode_time(32, 1000) != pytest.approx(off.decode_time(32, 1000), rel=1e-3)


def test_grid_regressor_recovers_a_multilinear_function():
    axes = [Axis(feature="m", lo=0, step=1, n=6), Axis(feature="n", lo=0, step=1, n=5),
            Axis(feature="k", lo=0, step=1, n=4)]
    rng = np.random.default_rng(6)
    truth = rng.normal(0, 0.2, (6, 5, 4))
    X = rng.uniform(-0.2, 5.2, (4000, 3))
    y = interpolation_matrix(X, axes) @ truth.ravel()
    reg = GridRegressor(axes=axes, smooth=1e-6, ridge=1e-9).fit(X, y)
    np.testing.assert_allclose(reg.values_, truth, atol=2e-4)
    np.testing.assert_allclose(reg.predict(X), y, atol=2e-4)


def test_profile_with_correctors_round_trips_through_json(tmp_path, profile):
    path = tmp_path / "p.json"
    path.write_text(profile.model_dump_json())
    loaded = load_profile("h100", path)
    a = CostOracle("llama-3.1-8b", "h100", profile=loaded)
    b = CostOracle("llama-3.1-8b", "h100", profile=profile)
    assert np.array_equal(a.prm, b.prm)
