"""MoE tensor x expert parallel mixed: ``ep`` groups of ``moe_tp = tp * dp / ep`` ranks,
each expert sharded over its group (SGLang ``--ep-size``, TensorRT-LLM
``moe_expert_parallel_size`` below ``tp``)."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.e2e_disagg import MOE_EP_SPLIT, layout_reason
from serveplan.errors import UserError
from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.ops import build_ops
from serveplan.estimator.specs import Parallelism
from serveplan.launch import sglang_commands, vllm_commands


@pytest.mark.parametrize(("tp", "dp", "ep", "moe_tp"), [
    (8, 1, 1, 8),   # plain tensor parallel: every expert over all 8 ranks
    (8, 1, 4, 2),   # 4 groups of 2: each expert on 2 ranks
    (8, 1, 8, 1),   # whole experts (vLLM --enable-expert-parallel)
    (1, 8, 8, 1),   # attention DP + wide EP
    (2, 4, 4, 2),
    (1, 4, 1, 4),   # attention DP without EP: experts over all 4 ranks (vLLM's DP x TP group)
    (1, 64, 8, 8),
])
def test_moe_tp_by_hand(tp, dp, ep, moe_tp):
    assert Parallelism(tp=tp, dp=dp, ep=ep).moe_tp == moe_tp


def test_a_rank_holds_its_share_of_each_local_expert():
    """Qwen3-235B-A22B (128 experts, hidden 4,096, expert intermediate 1,536, bf16) at tp 8:
    ep 4 puts 32 experts on a rank, each a 1,536 / 2 = 768-wide shard of its gate, up and
    down projections: 32 x 3 x 4,096 x 768 x 2 B per layer -- the same bytes as ep 1 (128
    experts in eighths) and ep 8 (16 whole experts)."""
    from serveplan.kernels import roofline as K

    def expert_bytes(ep):
        table = build_ops(resolve_model("qwen3-235b-a22b"), Parallelism(tp=8, ep=ep))
        rows = [i for i, n in enumerate(table.names) if n == "moe.experts"]
        return float(table.ops[rows[0], K.C_PARAM]), float(table.ops[rows[0], K.C_X1])

    hand = 32 * 3 * 4096 * 768 * 2
    assert expert_bytes(4) == (pytest.approx(hand), 32)
    assert expert_bytes(1)[0] == pytest.approx(hand) and expert_bytes(8)[0] == pytest.approx(hand)
    assert expert_bytes(1)[1] == 128 and expert_bytes(8)[1] == 16


def test_measured_layouts_with_attention_tp_are_expressible():
    assert layout_reason(8, 1, 4) is None and layout_reason(64, 1, 8) is None
    assert layout_reason(1, 8, 8) is None
    assert layout_reason(1, 64, 8) is None  # attention DP 64 over 8 groups of 8 ranks
    assert layout_reason(1, 4, 1) is None    # attention DP 4, experts over all 4 ranks
    assert layout_reason(2, 3, 4) == MOE_EP_SPLIT


def test_export_says_which_engine_runs_a_mixed_layout():
    dep = {"model": "qwen3-235b-a22b", "gpu": "h100", "tp": 8, "ep": 4, "dtype": "fp8",
           "num_instances": 1, "max_model_len": 4096}
    with pytest.raises(UserError, match="ep=4 shards each expert over 2 of them.*sglang"):
        vllm_commands(dep)
    assert any("--tp 8 --ep-size 4" in c for c in sglang_commands(dep))


def test_sharded_experts_under_attention_dp_gather_every_ranks_tokens():
    """Qwen3-30B-A3B (hidden 2,048, 128 experts of intermediate 768, bf16), attention DP 4
    without expert parallelism: every expert is sharded over the 4 ranks (768 / 4 = 192
    wide), which see all 4 ranks' tokens: each rank gathers the other 3 ranks' T x 2,048 x 2
    bytes (dispatch) and reduce-scatters as much back (combine), instead of the all-to-all of
    whole experts. At T = 64 tokens a rank, over 450 GB/s at e_m = 0.5 with 5 us latency:
    3 x 64 x 4,096 B / 225e9 B/s + 5 us = 8.50 us each way."""
    from serveplan.kernels import roofline as K

    model = resolve_model("qwen3-30b-a3b")
    table = build_ops(model, Parallelism(tp=1, dp=4))
    names = table.names
    assert "moe.dispatch_a2a" not in names and "moe.combine_a2a" not in names
    rows = [names.index("moe.dispatch_allgather"), names.index("moe.combine_reducescatter")]
    for r in rows:
        assert table.ops[r, K.C_BASIS] == K.B_GATHER
        assert (table.ops[r, K.C_B], table.ops[r, K.C_X1]) == (2048 * 2, 4)
    experts = table.ops[names.index("moe.experts")]
    assert experts[K.C_PARAM] == pytest.approx(128 * 3 * 2048 * 192 * 2)
    prm = np.zeros(K.N_PARAMS)
    prm[K.P_COMM_BW], prm[K.P_COMM_LAT] = 450e9, 5e-6
    got = K._comm_row_time(K.B_GATHER, 2048 * 2, 4.0, 64.0, prm, 0.5)
    assert got == pytest.approx(3 * 64 * 4096 / 225e9 + 5e-6)
    assert got == pytest.approx(8.50e-6, rel=1e-3)
    wide = build_ops(model, Parallelism(tp=1, dp=4, ep=4)).names  # whole experts: all-to-all
    assert "moe.dispatch_a2a" in wide and "moe.dispatch_allgather" not in wide
