"""DeepSeek sparse attention (GLM-5, DeepSeek-V3.2): the config fields, the indexer's
operators, its key cache in the KV budget, and what sparsity does to a step."""

from __future__ import annotations

from pathlib import Path

import pytest

from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.memory import kv_bytes_per_token_layer
from serveplan.estimator.ops import build_ops
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.specs import Parallelism
from serveplan.kernels import roofline as K


@pytest.fixture(scope="module")
def glm5(blackwell_e2e) -> Path:
    """The checkpoint's config.json as the measured sample ships it."""
    return blackwell_e2e / "model_configs" / "zai-org--GLM-5_config.json"


def test_glm5_config_reads_as_mla_with_an_indexer(glm5):
    """zai-org/GLM-5 config.json: glm_moe_dsa, 78 layers (the first 3 dense), kv_lora_rank
    512, qk_rope_head_dim 64, index_topk 2048, index_n_heads 32, index_head_dim 128."""
    m = resolve_model(str(glm5))
    assert (m.model_type, m.attention, m.num_layers, m.num_moe_layers) == (
        "glm_moe_dsa", "mla", 78, 75)
    assert (m.index_topk, m.index_n_heads, m.index_head_dim) == (2048, 32, 128)
    assert (m.kv_lora_rank, m.qk_rope_head_dim, m.num_nextn_predict_layers) == (512, 64, 1)


def test_kv_per_token_adds_the_indexer_key(glm5):
    """fp8 KV: the latent (512 + 64) x 1 B = 576 B, plus the indexer key 128 x 1 B and one
    fp32 scale = 132 B: 708 B per token and layer, on every TP rank (MLA is not split)."""
    m = resolve_model(str(glm5))
    assert kv_bytes_per_token_layer(m, 8, "fp8") == 708.0
    dense = m.model_copy(update={"index_topk": 0})
    assert kv_bytes_per_token_layer(dense, 8, "fp8") == 576.0


def test_indexer_rows_by_hand(glm5):
    """TP 8, bf16: the indexer's query projection reads the 2,048-wide q-LoRA latent into
    32 x 128 outputs on every rank (replicated): 2 x 2048 x 4096 FLOP per token; its scores
    cost 2 x 32 x 128 = 8,192 FLOP per (query, cached token) pair and read 132 B per cached
    token, over the whole context (window 0); the latent attention reads at most 2,048."""
    m = resolve_model(str(glm5))
    t = build_ops(m, Parallelism(tp=8), "bf16", "fp8")
    row = {n: t.ops[i] for i, n in enumerate(t.names)}
    assert row["indexer_q_proj"][K.C_A] == 2 * 2048 * 32 * 128
    scores = row["indexer_scores_decode"]
    assert (scores[K.C_A], scores[K.C_B], scores[K.C_WINDOW]) == (8192, 132, 0)
    assert row["attn_decode"][K.C_WINDOW] == 2048
    assert row["attn_prefill"][K.C_WINDOW] == 2048


def test_sparse_decode_stops_growing_with_context(glm5):
    """Decode reads every cached latent of dense MLA but only 2,048 under sparse attention;
    the indexer still reads 132 B per cached token. From 2k to 32k of context the dense step
    grows by the extra latents (576 B each), the sparse one only by the indexer keys, so it
    grows less; at 2k and below the two attend to the same tokens and sparse pays the
    indexer on top."""
    sparse = CostOracle(str(glm5), "b200", tp=8, dtype="fp8", kv_dtype="fp8")
    dense_spec = resolve_model(str(glm5)).model_copy(update={"index_topk": 0})
    dense = CostOracle(dense_spec, "b200", tp=8, dtype="fp8", kv_dtype="fp8")
    s2, s32 = sparse.decode_time(32, 2048), sparse.decode_time(32, 32768)
    d2, d32 = dense.decode_time(32, 2048), dense.decode_time(32, 32768)
    assert s2 > d2
    assert s32 - s2 < d32 - d2
    assert s32 < d32


def test_index_topk_needs_mla_and_indexer_dims():
    base = resolve_model("qwen3-32b").model_dump()
    with pytest.raises(ValueError, match="sparse attention"):  # pydantic wraps the SpecError
        type(resolve_model("qwen3-32b"))(**{**base, "index_topk": 2048})


def test_catalog_names_resolve_to_glm5_and_its_checkpoints():
    """The sample's name (zhipuai/GLM-5), the short name, NVIDIA's NVFP4 checkpoint (experts
    and dense MLPs NVFP4: 0.5 B + one fp8 scale per 16 = 0.5625 B; attention and indexer
    16-bit) and the FP8 release (block-scaled: 1 B + one fp32 scale per 128 x 128)."""
    for name in ("zhipuai/GLM-5", "glm-5", "zai-org/GLM-5"):
        assert resolve_model(name).index_topk == 2048
    nvfp4 = resolve_model("nvidia/GLM-5-NVFP4").quantization.bytes_by_class()
    assert (nvfp4["experts"], nvfp4["mlp"], nvfp4["qkv"]) == (0.5625, 0.5625, 2.0)
    fp8 = resolve_model("zai-org/GLM-5-FP8").quantization.bytes_by_class()
    assert fp8["experts"] == pytest.approx(1 + 4 / (128 * 128))
