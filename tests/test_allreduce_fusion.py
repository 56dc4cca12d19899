"""RMSNorm fused into the tensor-parallel all-reduce, as TensorRT-LLM and SGLang run it.

TensorRT-LLM's PyTorch models (``modeling_llama.py``, ``modeling_deepseekv3.py``,
``modeling_gpt_oss.py``) call ``AllReduce`` with ``AllReduceFusionOp.RESIDUAL_RMS_NORM``
after attention (the post-attention norm) and after the FFN (the next layer's input norm,
the last layer's the model's final norm) whenever the layer is tensor parallel and
attention DP is off (``enable_fusion &= not enable_attention_dp``); SGLang does the same
with ``--enable-flashinfer-allreduce-fusion``. Both do it on their small-message kernels
(TensorRT-LLM's one- and two-shot all-reduce, FlashInfer's up to a token limit): a decode
step runs no separate norm kernel, and the oracle prices its two per-layer norm rows at
zero there (the network's first norm, which follows no all-reduce, is counted by the kept
final norm); a mixed step's large messages go to NCCL, after which the engines run the
norm on its own, so mixed steps keep it.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.ops import build_ops, norms_on_allreduce
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.specs import Parallelism
from serveplan.kernels import roofline as K
from serveplan.kernels.reference import step_time_ref
from serveplan.resolution import resolve

PER_LAYER_NORMS = {"input_norm", "post_norm"}


def _flagged(table) -> set[str]:
    return {n for n, row in zip(table.names, table.ops, strict=True)
            if row[K.C_DECODE_FUSED] > 0}


def test_fused_op_table_flags_the_per_layer_norms():
    llama = resolve_model("llama-3.1-70b")
    plain = build_ops(llama, Parallelism(tp=2))
    fused = build_ops(llama, Parallelism(tp=2), allreduce_fusion=True)
    assert plain.names == fused.names and not _flagged(plain)
    assert _flagged(fused) == PER_LAYER_NORMS  # the final norm keeps its kernel


@pytest.mark.parametrize("model, tp, impl, why", [
    ("llama-3.1-70b", 1, "fused", "no all-reduce to fuse into at tp 1"),
    ("llama-3.1-70b", 2, "eager", "the eager operator set has no fused kernels"),
    ("opt-13b", 2, "fused", "LayerNorm, not the fused RMSNorm"),
    ("gemma-2-9b", 2, "fused", "four norms a layer (a pre and a post norm per block)"),
])
def test_fusion_only_where_engines_do_it(model, tp, impl, why):
    m = resolve_model(model)
    assert not norms_on_allreduce(m, Parallelism(tp=tp), impl, True), why
    assert not _flagged(build_ops(m, Parallelism(tp=tp), impl=impl, allreduce_fusion=True)), why


@pytest.mark.parametrize("model, dtype, tp", [("llama-3.1-70b", "fp8", 8),
                                              ("gpt-oss-120b", "mxfp4", 4)])
def test_decode_step_saves_exactly_the_norm_modules(model, dtype, tp):
    """A CUDA-graph decode step is the sum of its modules' GPU time; fused, it is shorter
    by the two norm modules of the unfused breakdown, and the rest is unchanged. A prefill
    step (NCCL's messages: the norm runs on its own) costs the same either way."""
    kw = dict(tp=tp, dtype=dtype, kv_dtype="fp8")
    plain_o = CostOracle(model, "b200", **kw)
    fused_o = CostOracle(model, "b200", allreduce_fusion=True, **kw)
    plain, fused = (o.breakdown(phase="decode", batch_size=4, context=1500)
                    for o in (plain_o, fused_o))
    assert plain.graph_mode == fused.graph_mode == "full"
    norms = sum(r["compute_s"] for r in plain.modules if r["name"] in PER_LAYER_NORMS)
    assert norms > 0
    assert fused.time_s == pytest.approx(plain.time_s - norms, rel=1e-9)
    others = {r["name"]: r["compute_s"] + r["comm_s"] for r in plain.modules
              if r["name"] not in PER_LAYER_NORMS}
    assert {r["name"]: r["compute_s"] + r["comm_s"] for r in fused.modules
            if r["name"] not in PER_LAYER_NORMS} == pytest.approx(others)
    assert fused_o.prefill_time(2, 1024) == plain_o.prefill_time(2, 1024)


def test_numba_step_matches_the_numpy_reference():
    """The kernel and the row-by-row reference agree on a fused oracle's decode, mixed and
    prefill steps."""
    o = CostOracle("llama-3.1-70b", "b200", tp=4, dtype="fp8", kv_dtype="fp8",
                   allreduce_fusion=True)
    ops, mods, prm, sizes = o.kernel_args
    for q, c in (([1] * 6, [900] * 6), ([1, 1, 300], [900, 40, 0]), ([512], [0])):
        q, c = np.array(q, dtype=np.int64), np.array(c, dtype=np.int64)
        assert o.step_time(q, c) == pytest.approx(step_time_ref(q, c, ops, mods, prm, sizes),
                                                  rel=1e-9)


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
