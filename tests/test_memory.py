"""Memory planner against the worked examples of VLLM_KV_BUDGET.md and hand arithmetic."""

import math

import pytest

from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.memory import (
    GIB,
    MemoryPlanError,
    default_block_size,
    kv_bytes_per_token_layer,
    plan_memory,
)
from serveplan.estimator.specs import Parallelism, SpecError

KIB = 1024


@pytest.mark.parametrize("model,tp,per_layer,per_token", [
    ("llama-3.1-8b", 1, 4096, 128 * KIB),        # 2·8·128·2; 32 layers
    ("llama-3.1-70b", 4, 1024, 80 * KIB),        # 2·(8/4)·128·2; 80 layers
    ("qwen3-30b-a3b", 8, 512, 24 * KIB),         # max(1, 4//8) = 1 head; 48 layers
    ("deepseek-v3", 8, 1152, 70272),             # (512 + 64)·2 on every rank; 61 layers
    ("gemma-2-9b", 1, 8192, 8192 * 42),          # head_dim 256; 42 layers
])
def test_kv_bytes_worked_examples(model, tp, per_layer, per_token):
    m = resolve_model(model)
    assert kv_bytes_per_token_layer(m, tp) == per_layer
    plan = plan_memory(model, "h200", Parallelism(tp=tp, ep=1),
                       kv_cache_memory_bytes=40 * GIB)
    assert plan.kv_bytes_per_token == per_token


def test_deepseek_page_and_block_size():
    plan = plan_memory("deepseek-v3", "h200", Parallelism(tp=8), kv_cache_memory_bytes=GIB)
    assert plan.block_size == 64 == default_block_size(resolve_model("deepseek-v3"))
    assert plan.page_bytes == 73728  # 64 · 1152


def test_num_blocks_rule_with_fixed_kv_budget():
    # --kv-cache-memory skips profiling: blocks = floor(bytes / page / layers)
    budget = 10 * GIB
    plan = plan_memory("llama-3.1-8b", "h100", kv_cache_memory_bytes=budget)
    assert plan.num_gpu_blocks == math.floor(budget / (16 * 4096) / 32) == 5120
    assert plan.kv_tokens == (5120 - 1) * 16  # one null block


def test_llama_8b_weights_equal_parameter_count():
    # 8,030,261,248 parameters (embedding and untied LM head 128256·4096 each, 32 layers
    # of q/k/v/o, gate/up/down and two norms, the final norm) in bf16
    plan = plan_memory("llama-3.1-8b", "h100")
    assert plan.weights_bytes == 2 * 8_030_261_248
    assert plan.fits


def test_budget_identity_and_blocks():
    plan = plan_memory("llama-3.1-8b", "h100", gpu_memory_utilization=0.9)
    requested = 0.9 * plan.total_bytes
    assert plan.available_kv_bytes == pytest.approx(
        requested - plan.weights_bytes - plan.activation_bytes - plan.non_torch_bytes)
    assert plan.num_gpu_blocks == math.floor(plan.available_kv_bytes / plan.page_bytes / 32)
    # more headroom -> more blocks
    assert plan_memory("llama-3.1-8b", "h100", gpu_memory_utilization=0.95).num_gpu_blocks > \
        plan.num_gpu_blocks


def test_kv_heads_replicated_beyond_tp():
    # Qwen3-30B-A3B has 4 KV heads: tp=8 keeps one head per rank (replicated twice)
    m = resolve_model("qwen3-30b-a3b")
    assert kv_bytes_per_token_layer(m, 4) == kv_bytes_per_token_layer(m, 8)


def test_weights_that_do_not_fit_say_by_how_much_and_what_fits():
    plan = plan_memory("llama-3.1-70b", "h100")
    assert not plan.fits
    assert "131.4 GiB per GPU at tp=1" in plan.reason
    assert "0.90 × 79.6 GiB" in plan.reason
    # 131072-token context: tp=2 holds the weights but not one full-length request
    assert "tp ≥ 4 fits" in plan.reason
    assert not plan_memory("llama-3.1-70b", "h100", Parallelism(tp=2)).fits
    assert plan_memory("llama-3.1-70b", "h100", Parallelism(tp=4)).fits
    short = plan_memory("llama-3.1-70b", "h100", max_model_len=8192)
    assert "tp ≥ 2 fits" in short.reason
    assert plan_memory("llama-3.1-70b", "h100", Parallelism(tp=2), max_model_len=8192).fits
    with pytest.raises(MemoryPlanError):
        plan.raise_if_unfit()


def test_max_model_len_that_does_not_fit():
    plan = plan_memory("llama-3.1-8b", "h100", kv_cache_memory_bytes=GIB,
                       max_model_len=131072)
    assert not plan.fits and "max_model_len" in plan.reason


def test_pipeline_split_takes_worst_rank():
    one = plan_memory("llama-3.1-70b", "h100", Parallelism(tp=2))
    two = plan_memory("llama-3.1-70b", "h100", Parallelism(tp=2, pp=2))
    assert two.weights_bytes < one.weights_bytes * 0.6
    assert two.kv_bytes_per_token == one.kv_bytes_per_token / 2


# ------------------------------------------------------------ bad knob values (issue list)
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0.0, -1.0])
def test_kv_cache_memory_must_be_finite_and_positive(value):
    with pytest.raises(SpecError, match="kv_cache_memory_bytes must be a finite number"):
        plan_memory("llama-3.1-8b", "h100", kv_cache_memory_bytes=value)


def test_kv_cache_memory_beyond_the_device_is_refused():
    with pytest.raises(SpecError, match="more than h100 has"):
        plan_memory("llama-3.1-8b", "h100", kv_cache_memory_bytes=1e30)


def test_kv_cache_memory_that_leaves_no_room_for_weights_is_short_by_the_excess():
    # 70e9 + 16,060,522,496 weights + 838,860,800 activation + 268,435,456 other
    # − 85,520,809,984 device bytes = 1,647,008,768 bytes short
    plan = plan_memory("llama-3.1-8b", "h100", kv_cache_memory_bytes=70e9)
    assert not plan.fits
    assert plan.short_by_bytes == pytest.approx(1_647_008_768)
    assert "short by 1.53 GiB" in plan.reason


@pytest.mark.parametrize("gib", [0.001, 1, 10, 40, 60])
def test_short_by_is_never_negative(gib):
    plan = plan_memory("llama-3.1-8b", "h100", kv_cache_memory_bytes=gib * GIB)
    assert plan.short_by_bytes >= 0 and (plan.fits == (plan.short_by_bytes == 0))


@pytest.mark.parametrize("bs", [0, 7, 12, 48, 512])
def test_block_size_outside_vllms_set_is_refused(bs):
    with pytest.raises(SpecError, match=r"one of vLLM's \(1, 8, 16, 32, 64, 128, 256\)"):
        plan_memory("llama-3.1-8b", "h100", block_size=bs)


def test_num_gpu_blocks_override_counts_the_null_block():
    plan = plan_memory("llama-3.1-8b", "h100", num_gpu_blocks_override=2)
    assert plan.num_gpu_blocks == 2 and plan.kv_tokens == 16  # 2 blocks, 1 usable
    assert not plan.fits and "num_gpu_blocks=2 leaves 1 usable" in plan.reason
    assert plan_memory("llama-3.1-8b", "h100", num_gpu_blocks_override=2,
                       max_model_len=16).fits


def test_num_gpu_blocks_override_beyond_memory_is_short():
    # 100,000 blocks × 65,536 bytes × 32 layers = 209,715,200,000 bytes of KV per GPU
    plan = plan_memory("llama-3.1-8b", "h100", num_gpu_blocks_override=100_000)
    assert not plan.fits
    assert plan.short_by_bytes == pytest.approx(209_715_200_000 - plan.available_kv_bytes)
