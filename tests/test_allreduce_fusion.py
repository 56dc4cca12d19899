"""RMSNorm fused into the tensor-parallel all-reduce, as TensorRT-LLM and SGLang run it.

TensorRT-LLM's PyTorch models (``modeling_llama.py``, ``modeling_deepseekv3.py``,
``modeling_gpt_oss.py``) call ``AllReduce`` with ``AllReduceFusionOp.RESIDUAL_RMS_NORM``
after attention (the post-attention norm) and after the FFN (the next layer's input norm,
the last layer's the model's final norm) whenever the layer is tensor parallel and
attention DP is off (``enable_fusion &= not enable_attention_dp``); SGLang does the same
with ``--enable-flashinfer-allreduce-fusion``. No separate norm kernel runs: the oracle
drops the two per-layer norm rows (the network's first norm, which follows no all-reduce,
is counted by the kept final norm).
"""

from __future__ import annotations

import pytest

from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.ops import build_ops, norms_on_allreduce
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.specs import Parallelism
from serveplan.resolution import resolve

PER_LAYER_NORMS = {"input_norm", "post_norm"}


def test_fused_op_table_has_no_per_layer_norms():
    llama = resolve_model("llama-3.1-70b")
    plain = build_ops(llama, Parallelism(tp=2))
    fused = build_ops(llama, Parallelism(tp=2), allreduce_fusion=True)
    assert PER_LAYER_NORMS <= set(plain.names)
    assert not PER_LAYER_NORMS & set(fused.names)
    assert set(plain.names) - set(fused.names) == PER_LAYER_NORMS
    assert "final_norm" in fused.names and "ffn_allreduce" in fused.names


@pytest.mark.parametrize("model, tp, impl, why", [
    ("llama-3.1-70b", 1, "fused", "no all-reduce to fuse into at tp 1"),
    ("llama-3.1-70b", 2, "eager", "the eager operator set has no fused kernels"),
    ("opt-13b", 2, "fused", "LayerNorm, not the fused RMSNorm"),
    ("gemma-2-9b", 2, "fused", "four norms a layer (a pre and a post norm per block)"),
])
def test_fusion_only_where_engines_do_it(model, tp, impl, why):
    m = resolve_model(model)
    assert not norms_on_allreduce(m, Parallelism(tp=tp), impl, True), why
    table = build_ops(m, Parallelism(tp=tp), impl=impl, allreduce_fusion=True)
    assert PER_LAYER_NORMS <= set(table.names), why


@pytest.mark.parametrize("model, dtype, tp", [("llama-3.1-70b", "fp8", 8),
                                              ("gpt-oss-120b", "mxfp4", 4)])
def test_decode_step_saves_exactly_the_norm_modules(model, dtype, tp):
    """A CUDA-graph decode step is the sum of its modules' GPU time; fused, it is shorter
    by the two norm modules of the unfused breakdown, and the rest is unchanged."""
    kw = dict(tp=tp, dtype=dtype, kv_dtype="fp8")
    plain = CostOracle(model, "b200", **kw).breakdown(phase="decode", batch_size=4,
                                                      context=1500)
    fused = CostOracle(model, "b200", allreduce_fusion=True, **kw).breakdown(
        phase="decode", batch_size=4, context=1500)
    assert plain.graph_mode == fused.graph_mode == "full"
    norms = sum(r["compute_s"] for r in plain.modules if r["name"] in PER_LAYER_NORMS)
    assert norms > 0
    assert fused.time_s == pytest.approx(plain.time_s - norms, rel=1e-9)
    others = {r["name"]: r["compute_s"] + r["comm_s"] for r in plain.modules
              if r["name"] not in PER_LAYER_NORMS}
    assert {r["name"]: r["compute_s"] + r["comm_s"] for r in fused.modules
            if r["name"] not in PER_LAYER_NORMS} == pytest.approx(others)


def _oracle(**kw):
    pool = {"role": "colocated", "model": "llama-3.1-70b", "gpu": "b200", "tp": 2,
            "max_model_len": 8192, **kw}
    return resolve({"pools": [pool]}).pools[0].instance.oracle


def test_engine_defaults_and_overrides():
    assert _oracle(engine="trtllm").allreduce_fusion  # TensorRT-LLM's default
    assert _oracle(engine="trtllm").describe()["allreduce_fusion"] is True
    assert not _oracle(engine="trtllm", allreduce_fusion=False).allreduce_fusion
    assert not _oracle(engine="vllm").allreduce_fusion  # vLLM's pass is off by default
    assert not _oracle(engine="sglang").allreduce_fusion
    assert _oracle(engine="sglang", allreduce_fusion=True).allreduce_fusion
    assert not _oracle().allreduce_fusion and "allreduce_fusion" not in _oracle().describe()
    assert not _oracle(engine="trtllm", tp=1).allreduce_fusion  # nothing to fuse into


def test_no_fusion_under_attention_dp():
    pool = {"role": "colocated", "model": "deepseek-r1", "gpu": "b200", "tp": 8, "dp": 8,
            "ep": 8, "engine": "trtllm", "max_model_len": 4096}
    oracle = resolve({"pools": [pool]}).pools[0].instance.oracle
    assert not oracle.allreduce_fusion
