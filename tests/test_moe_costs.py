"""MoE costs of the oracle: fp8 experts against bf16 and against measured fp8 MoE ops, and
the expert-parallel all-to-all worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.calibrate import calibrate, select_training_rows
from serveplan.estimator.measurements import load_aiconfigurator
from serveplan.estimator.ops import MOD_FFN
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import Profile
from serveplan.kernels import roofline as K

# decode batches at which every model below has most of its experts active and a handful
# of tokens per expert: the grouped GEMMs stream weights (see the test's docstring)
BANDWIDTH_BOUND_BATCHES = (16, 32, 64, 128, 256)
FP8_VS_BF16 = [
    ("deepseek-v3", "h200", dict(tp=8)),
    ("qwen3-30b-a3b", "h100", dict(tp=1)),
    ("qwen3-235b-a22b", "h200", dict(tp=8)),
]


def _rows_seconds(oracle: CostOracle, names: tuple[str, ...], new_tokens, context_len):
    """(compute, comm) seconds of the op rows ``names`` in one step, summed over the layers
    (the step with every other row's layer fraction set to 0)."""
    ops = oracle.table.ops.copy()
    keep = np.isin(np.array(oracle.table.names), names)
    ops[~keep, K.C_FRAC] = 0.0
    q = np.asarray(new_tokens, dtype=np.int64)
    c = np.asarray(context_len, dtype=np.int64)
    agg, comp, comm = oracle.scratch()
    K.step_costs(q, c, q.shape[0], ops, oracle.mods, oracle.prm, oracle.graph_sizes, agg,
                 comp, comm)
    layers = oracle.prm[K.P_LAYERS]
    return comp[MOD_FFN] * layers, comm[MOD_FFN] * layers


def _experts_decode(oracle: CostOracle, batch: int) -> float:
    """Seconds of the routed experts in a decode step of ``batch`` requests, all layers."""
    return _rows_seconds(oracle, ("moe.experts",), np.ones(batch), np.full(batch, 1024))[0]


@pytest.mark.parametrize("model,gpu,par", FP8_VS_BF16, ids=[f"{m}-{g}" for m, g, _ in FP8_VS_BF16])
def test_fp8_experts_not_slower_than_bf16_when_bandwidth_bound(model, gpu, par):
    """fp8 experts cost at most what bf16 ones do where their grouped GEMMs are bound by
    memory bandwidth.

    In a decode step of B requests a rank's experts stream each active expert's gate, up
    and down matrices once: Q ~ E_active x 3 h i x w bytes, and fp8 halves w (2 -> 1
    byte). Their work is 6 h i FLOP per token-expert assignment, so the intensity is about
    2 B k / E FLOP per weight byte at fp8: Qwen3-30B-A3B (E = 128, k = 8) at B = 256 has
    16 tokens per expert, 32 FLOP/B; DeepSeek-V3 (E = 256, k = 8) has 8. The fp8 ridge of
    an H100 / H200 is S_c / S_m = 1979e12 / 3.35e12 = 590 (H200: 412) FLOP/B, so these
    GEMMs take time in proportion to their bytes. Measured (AIConfigurator, vLLM 0.24,
    balanced routing), the block-fp8 fused MoE of the same shapes runs at a median 0.52 to
    0.56 of bf16 for 16 to 512 tokens on H100 and H200. The whole decode step follows.
    """
    fp8 = CostOracle(model, gpu, dtype="fp8", **par)
    bf16 = CostOracle(model, gpu, dtype="bf16", **par)
    batch = np.array(BANDWIDTH_BOUND_BATCHES)
    experts_fp8 = np.array([_experts_decode(fp8, b) for b in batch])
    experts_bf16 = np.array([_experts_decode(bf16, b) for b in batch])
    assert np.all(experts_fp8 <= experts_bf16), (experts_fp8, experts_bf16)
    assert np.all(fp8.decode_time(batch, 1024) <= bf16.decode_time(batch, 1024))


@pytest.fixture(scope="module")
def h100_moe(shared_data):
    """vLLM H100 fused-MoE measurements (AIConfigurator, versions AIC queries)."""
    return load_aiconfigurator(shared_data / "aiconfigurator", systems=["h100"],
                               engines=["vllm"], families=["moe"], versions="current",
                               min_rows=0).reset_index(drop=True)


HELD_OUT = [  # (model, tp, expert shape: hidden, expert intermediate, experts, top-k)
    ("qwen3-30b-a3b", 1, (2048, 768, 128, 8)),
    ("qwen3-235b-a22b", 4, (4096, 1536, 128, 8)),
]


@pytest.mark.parametrize("model,tp,shape", HELD_OUT, ids=[m for m, _, _ in HELD_OUT])
def test_fp8_experts_match_measured_block_fp8_moe_on_held_out_shapes(h100_moe, model, tp,
                                                                     shape):
    """The oracle's fp8 experts against the measured fused-MoE op of the same layer.

    A MoE profile (constants and correctors) is fitted on the H100 vLLM rows of every other
    model shape; the oracle built from it prices the routed experts of a decode step of T
    requests, which is one fused-MoE call on T tokens per layer -- the measured op (vLLM's
    ``Fp8MoEMethod`` on a block-fp8 checkpoint, ``moe_dtype`` fp8_block, TP-sharded
    experts). Before the fix the oracle priced it with the ModelOpt per-tensor FP8 kernel's
    corrector and came out 2.5-5x the measured time.
    """
    df = h100_moe
    h, inter, experts, topk = shape
    shape_rows = ((df["hidden_size"] == h) & (df["inter_size"] == inter)
                  & (df["num_experts"] == experts) & (df["topk"] == topk)).to_numpy()
    profile = calibrate(df[~shape_rows].reset_index(drop=True), "h100")
    oracle = CostOracle(model, "h100", tp=tp, dtype="fp8", profile=profile)
    sel = (select_training_rows(df, "moe", dtype="fp8_block") & shape_rows
           & (df["tp"] == tp).to_numpy() & (df["ep"] == 1).to_numpy()
           & (df["num_tokens"] <= 256).to_numpy())
    rows = df[sel]
    assert len(rows) >= 8
    frac = oracle.table.ffn_moe_fraction * oracle.prm[K.P_LAYERS]  # MoE layers
    pred = np.array([_rows_seconds(oracle, ("moe.experts",), np.ones(int(n)),
                                   np.zeros(int(n)))[0] / frac for n in rows["num_tokens"]])
    err = pred / rows["latency_s"].to_numpy() - 1.0
    assert np.median(np.abs(err)) <= 0.15, err
    assert np.all(np.abs(err) <= 0.35), err


def test_alltoall_prices_one_ranks_tokens_by_hand():
    """Expert-parallel all-to-all of DeepSeek-V3 on H200, tp 1 / dp 8 / ep 8, for a step in
    which this attention-DP rank prefills one 1,024-token prompt.

    The oracle's step is one DP rank's batch. Dispatch sends each of the rank's T = 1,024
    tokens' hidden vector (h = 7,168, bf16: 2 B) to its k = 8 experts:
    1,024 x 7,168 x 8 x 2 = 117,440,512 B per rank; combine brings as many back. Over 8
    ranks 1/8 stays local, so 7/8 x 117,440,512 = 102,760,448 B cross the links: at
    e_m x S = 0.7 x 450 GB/s (H200 NVLink per direction, default profile) that is
    326.22 us, + 5 us latency = 331.22 us per direction of each MoE layer, and
    2 x 331.22 us x 58 MoE layers = 38.42 ms per step. Pricing the whole DP group's tokens
    (8 x 1,024) instead gave 303.3 ms.
    """
    oracle = CostOracle("deepseek-v3", "h200", tp=1, dp=8, ep=8, profile=Profile())
    _, comm = _rows_seconds(oracle, ("moe.dispatch_a2a", "moe.combine_a2a"), [1024], [0])
    per_rank = 1024 * 7168 * 8 * 2
    assert per_rank == 117_440_512
    bw = 0.7 * 450e9
    one_way = 7 / 8 * per_rank / bw + 5e-6
    assert comm == pytest.approx(58 * 2 * one_way, rel=1e-12)
    assert comm == pytest.approx(38.42e-3, rel=1e-3)
