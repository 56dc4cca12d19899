"""MiniMax-M2's q/k norm over the whole projection (``qk_norm_type: per_layer``).

vLLM's ``MiniMaxText01RMSNormTP.forward_qk`` (``model_executor/layers/mamba/linear_attn.py``)
takes each rank's mean of squares of its q and k slices, all-reduces the two (``torch.cat``
of two fp32 per token) over the tensor-parallel group and divides by its size, then
normalises: one extra all-reduce of 8 bytes a token in every attention layer when tp > 1,
none at tp 1. Qwen3 norms each head on its own: no all-reduce at any tp.
"""

from __future__ import annotations

import pytest

from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.ops import build_ops
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.specs import Parallelism
from serveplan.kernels import roofline as K


def _row(table, name):
    return [k for k, n in enumerate(table.names) if n == name]


def test_minimax_config_norms_q_and_k_per_layer():
    # config.json: "use_qk_norm": true, "qk_norm_type": "per_layer"
    m = resolve_model("MiniMaxAI/MiniMax-M2.5")
    assert m.qk_norm and m.qk_norm_scope == "layer"
    q = resolve_model("Qwen/Qwen3-32B")
    assert q.qk_norm and q.qk_norm_scope == "head"


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_variance_all_reduce_is_one_row_of_two_fp32_per_token_beyond_tp_1(tp):
    table = build_ops(resolve_model("MiniMaxAI/MiniMax-M2.5"), Parallelism(tp=tp))
    rows = _row(table, "qk_norm_allreduce")
    if tp == 1:
        assert rows == []
        return
    (r,) = rows
    assert table.ops[r, K.C_BASIS] == K.B_ALLREDUCE and table.ops[r, K.C_B] == 8.0
    assert table.ops[r, K.C_FAMILY] == K.F_COMM and table.ops[r, K.C_FRAC] == 1.0


def test_per_head_norms_need_no_all_reduce():
    table = build_ops(resolve_model("Qwen/Qwen3-32B"), Parallelism(tp=8))
    assert _row(table, "qk_norm") and not _row(table, "qk_norm_allreduce")


def _attention_comm_s(oracle) -> float:
    return sum(m["comm_s"] for m in oracle.breakdown(phase="decode", batch_size=8,
                                                     context=2048).modules
               if m["name"] == "attention")


def test_the_all_reduce_prices_only_tensor_parallel_steps():
    m = resolve_model("MiniMaxAI/MiniMax-M2.5")
    per_head = m.model_copy(update={"qk_norm_scope": "head"})
    layer1, head1 = (CostOracle(s, "b200", tp=1) for s in (m, per_head))
    assert layer1.decode_time(8, 2048) == head1.decode_time(8, 2048)
    # at tp 4 the step grows by the attention module's extra communication, all of it
    layer4, head4 = (CostOracle(s, "b200", tp=4) for s in (m, per_head))
    extra = layer4.decode_time(8, 2048) - head4.decode_time(8, 2048)
    assert extra > 0
    assert extra == pytest.approx(_attention_comm_s(layer4) - _attention_comm_s(head4),
                                  rel=1e-9)
