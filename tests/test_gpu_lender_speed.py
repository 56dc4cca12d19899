"""A borrowed profile's measured speed: the GPU field, how the oracle applies it, and the
paired-deployment estimate behind the catalog's B300 value (hand computations)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from test_calibrate import _frame

from serveplan.e2e import E2ERow
from serveplan.e2e_gpu_speed import (
    gpu_yaml,
    held_out_gpus,
    lender_speed,
    pair_speeds,
    speed_pairs,
    speed_without_engine,
)
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.opwork import op_times, op_work
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import load_profile
from serveplan.estimator.specs import GPUSpec

B200 = resolve_gpu("b200").model_dump()


def _twin(**kw) -> GPUSpec:
    """B200's peaks under another name, borrowing B200's profile."""
    return GPUSpec(**{**B200, "name": "b200-twin", "aliases": (), "profile_from": "b200", **kw})


def _no_launch(profile):
    return profile.model_copy(update={"kernel_fixed_s": 0.0, "kernel_fixed_family_s": {}})


def test_lender_speed_divides_each_phases_gpu_work():
    """Per op (no kernel launch time, no correctors): a prefill-phase row -- a GEMM of 8,192
    tokens, a prefill attention -- takes 1/2 the time at prefill speed 2, a decode-phase
    row -- a GEMM of 16 tokens, a decode attention -- 1/1.25 at decode speed 1.25;
    collectives keep the lender's efficiency."""
    plain, fast = _twin(), _twin(lender_speed={"prefill": 2.0, "decode": 1.25})
    df = _frame([
        dict(op_family="gemm", gpu="b200", engine="vllm", dtype="bf16", m=8192, n=4096,
             k=4096, latency_s=1e-3),
        dict(op_family="attention_prefill", gpu="b200", engine="vllm", dtype="bf16",
             batch_size=1, query_len=4096, kv_len=0, num_heads=32, num_kv_heads=8,
             head_dim=128, window_size=0, kv_dtype="bf16", latency_s=1e-3),
        dict(op_family="gemm", gpu="b200", engine="vllm", dtype="bf16", m=16, n=4096,
             k=4096, latency_s=1e-5),
        dict(op_family="attention_decode", gpu="b200", engine="vllm", dtype="bf16",
             batch_size=32, query_len=1, kv_len=2048, num_heads=32, num_kv_heads=8,
             head_dim=128, window_size=0, kv_dtype="bf16", latency_s=1e-5)])
    w = op_work(df, plain)
    t_plain = op_times(w, plain, _no_launch(load_profile(plain)))
    t_fast = op_times(w, fast, _no_launch(load_profile(fast)))
    np.testing.assert_allclose(t_fast, t_plain / [2.0, 2.0, 1.25, 1.25], rtol=1e-12)
    prof = load_profile(fast)
    assert prof.phase_speed == {"prefill": 2.0, "decode": 1.25}
    assert prof.provenance["lender_speed"] == {"prefill": 2.0, "decode": 1.25}
    e = prof.eff("comm", "prefill")
    assert prof.priced_eff("comm", "prefill") == (e.ec, e.em)


def test_a_step_of_a_phase_at_speed_one_is_priced_as_the_lenders():
    """Decode speed 1: a decode step costs what it costs on the plain twin, to the bit; a
    prefill step at prefill speed 1.5 costs less, and not less than 1/1.5 of it (dispatch
    and launches stay)."""
    plain = CostOracle("llama-3.1-8b", _twin())
    fast = CostOracle("llama-3.1-8b", _twin(lender_speed={"prefill": 1.5}))
    assert fast.decode_time(64, 2048) == plain.decode_time(64, 2048)
    p, f = plain.prefill_time(batch_size=1, input_len=8192), fast.prefill_time(
        batch_size=1, input_len=8192)
    assert p / 1.5 <= f < p


@pytest.mark.parametrize("speed, match", [
    ({"prefil": 1.1}, "unknown phase"), ({"decode": 0.0}, "decode must be a finite number"),
    ({"decode": float("nan")}, "decode must be a finite number")])
def test_bad_lender_speed_is_refused_by_field(speed, match):
    with pytest.raises(ValueError, match=f"lender_speed: {match}"):
        _twin(lender_speed=speed)


def test_lender_speed_needs_a_lender():
    with pytest.raises(ValueError, match="lender_speed: needs profile_from"):
        GPUSpec(**{**B200, "name": "x", "lender_speed": {"decode": 1.1}})


def _row(k, system, concurrency=8, engine="vllm", model="m", mode="agg", ttft=100.0,
         tpot=10.0):
    return E2ERow(id=f"r{k}", engine=engine, version="1", model=model, system=system,
                  precision="fp8", mode=mode, isl=1024, osl=1024, concurrency=concurrency,
                  tp=4, pp=1, dp=1, ep=1, ttft_ms=ttft, tpot_ms=tpot, measured=f"2026-0{k}")


def test_pairs_are_one_deployment_and_load_on_both_systems():
    """Rows alike but for their system, id and date pair up (a side's repeats stay
    together); another load, a lone system or a disaggregated row makes no pair."""
    rows = [_row(1, "b200_sxm"), _row(2, "b300_sxm"), _row(3, "b300_sxm", ttft=90.0),
            _row(4, "b200_sxm", concurrency=16), _row(5, "b300_sxm", concurrency=32),
            _row(6, "b200_sxm", mode="disagg"), _row(7, "b300_sxm", mode="disagg")]
    pairs = speed_pairs(rows)
    assert len(pairs) == 1
    assert [r.id for r in pairs[0].lender] == ["r1"]
    assert [r.id for r in pairs[0].borrower] == ["r2", "r3"]


def test_pair_speed_by_hand():
    """Predicted B300 / B200: TTFT 1.0, TPOT 1.02; measured 0.8 and 0.96 -> prefill speed
    1.0 / 0.8 = 1.25, decode 1.02 / 0.96 = 1.0625. The catalog value is the median over
    pairs, rounded to 3 digits."""
    pred = np.array([[[100.0, 10.0], [100.0, 10.2]]])
    meas = np.array([[[200.0, 20.0], [160.0, 19.2]]])
    np.testing.assert_allclose(pair_speeds(pred, meas), [[1.25, 1.0625]], rtol=1e-12)
    speeds = np.array([[1.25, 1.0625], [1.0, 1.0], [1.1, 1.2]])
    assert lender_speed(speeds) == {"prefill": 1.1, "decode": 1.062}
    with pytest.raises(ValueError, match="no pairs"):
        lender_speed(np.empty((0, 2)))


def test_held_out_speed_leaves_the_engines_pairs_out():
    rows = [_row(1, "b200_sxm"), _row(2, "b300_sxm"),
            _row(3, "b200_sxm", engine="sglang"), _row(4, "b300_sxm", engine="sglang")]
    pairs = speed_pairs(rows)
    speeds = np.array([[2.0, 3.0] if p.engine == "vllm" else [1.5, 1.2] for p in pairs])
    assert speed_without_engine(pairs, speeds, "vllm") == {"prefill": 1.5, "decode": 1.2}
    assert speed_without_engine(pairs[:1], speeds[:1], pairs[0].engine) is None


def test_gpu_yaml_is_the_catalog_gpu_with_another_speed(tmp_path):
    """The YAML resolves to the catalog's B300, its name kept (so it borrows B200's profile
    and its prices), with only ``lender_speed`` replaced; None: the profile as borrowed."""
    b300 = resolve_gpu("b300")
    path = gpu_yaml("b300", {"prefill": 1.3, "decode": 1.05}, tmp_path)
    spec = resolve_gpu(str(path))
    assert spec.model_copy(update={"lender_speed": b300.lender_speed}) == b300
    assert spec.lender_speed == {"prefill": 1.3, "decode": 1.05}
    plain = resolve_gpu(str(gpu_yaml("b300", None, tmp_path)))
    assert plain.lender_speed is None and load_profile(plain).phase_speed == {}
    assert yaml.safe_load(path.read_text())["name"] == "b300"


def test_held_out_rows_run_on_the_speed_of_the_other_engines(tmp_path):
    """A B300 row runs on a B300 YAML with the speed its engine did not set; an engine no
    other engine's pairs speak for runs the profile as borrowed; a B200 row keeps its GPU."""
    rows = [_row(1, "b300_sxm"), _row(2, "b300_sxm", concurrency=16),
            _row(3, "b300_sxm", engine="sglang"), _row(4, "b200_sxm")]
    out = held_out_gpus(rows, {"vllm": {"prefill": 1.2, "decode": 1.04}, "sglang": None},
                        tmp_path)
    assert set(out) == {"r1", "r2", "r3"} and out["r1"] == out["r2"]
    assert resolve_gpu(out["r1"]).lender_speed == {"prefill": 1.2, "decode": 1.04}
    assert resolve_gpu(out["r3"]).lender_speed is None
