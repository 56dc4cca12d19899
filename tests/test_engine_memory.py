"""Each engine's KV rule against hand arithmetic, vLLM's own pipeline-split tests, and the
numbers vLLM logged at start-up.

Shared constants, derived once by hand:

* H100 in the catalog: 85,520,809,984 bytes (81,559 MiB).
* Llama-3.1-8B bf16: 8,030,261,248 parameters = 16,060,522,496 bytes; one decoder layer is
  4096·4096 (q) + 2·4096·1024 (k, v) + 4096·4096 (o) + 3·4096·14336 (gate, up, down)
  + 2·4096 (norms) = 218,112,000 parameters = 436,224,000 bytes; embedding and LM head
  128,256·4096 = 525,336,576 parameters = 1,050,673,152 bytes each; final norm 8,192 bytes.
* KV per token and layer (8 KV heads, head_dim 128, bf16): 2·8·128·2 = 4,096 bytes; a
  16-token vLLM block of one layer is 65,536 bytes; a token on all 32 layers 131,072 bytes.
* Profiling activation of 8,192 tokens (the planner's estimate: hidden state and residual
  2·8192·4096·2 = 134,217,728 plus gate/up output and activation 8192·3·14336·2 =
  704,643,072): 838,860,800 bytes. The 256-row sampler (256·128,256·4·2 = 262,668,288) is
  smaller.
* Non-torch memory of one rank without NCCL (default profile): 0.25 GiB = 268,435,456.
"""

import math

import pytest

from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.engine_memory import (
    ENGINES,
    plan_engine_memory,
    sglang_default_mem_fraction_static,
)
from serveplan.estimator.memory import (
    GIB,
    get_pp_indices,
    layers_per_stage,
    plan_memory,
    resolve_setup,
)
from serveplan.estimator.specs import Parallelism, SpecError

H100 = 85_520_809_984
W_8B = 16_060_522_496
LAYER_8B = 436_224_000
EMBED_8B = 1_050_673_152
ACT_8192 = 838_860_800
NON_TORCH = 268_435_456


# ------------------------------------------------------------------ vLLM's get_pp_indices
# tests/distributed/test_pipeline_partition.py (vllm-project/vllm), test_uneven_auto_partition
@pytest.mark.parametrize("num_layers,pp,rank,indices", [
    (2, 2, 0, (0, 1)), (2, 2, 1, (1, 2)),
    (3, 2, 0, (0, 2)), (3, 2, 1, (2, 3)),
    (3, 3, 0, (0, 1)), (3, 3, 1, (1, 2)), (3, 3, 2, (2, 3)),
    (4, 3, 0, (0, 1)), (4, 3, 1, (1, 3)), (4, 3, 2, (3, 4)),
    (5, 3, 0, (0, 2)), (5, 3, 1, (2, 4)), (5, 3, 2, (4, 5)),
])
def test_get_pp_indices_matches_vllm_uneven_cases(num_layers, pp, rank, indices):
    assert get_pp_indices(num_layers, rank, pp) == indices


@pytest.mark.parametrize("num_layers,pp,expected", [
    # 32 // 5 = 6 remainder 2: partitions[-2] and partitions[-3] get one more
    (32, 5, [6, 6, 7, 7, 6]),
    # vLLM's docs example for a 61-layer model: PP2 [31, 30], PP4 [15, 15, 16, 15]
    (61, 2, [31, 30]),
    (61, 4, [15, 15, 16, 15]),
    (80, 6, [13, 13, 13, 14, 14, 13]),  # 80 = 6·13 + 2
    (32, 4, [8, 8, 8, 8]),
])
def test_layer_split_gives_the_remainder_to_the_stages_before_the_last(num_layers, pp,
                                                                        expected):
    assert layers_per_stage(num_layers, pp) == expected
    assert sum(expected) == num_layers


# test_custom_layer_partition (same vLLM file): VLLM_PP_LAYER_PARTITION
@pytest.mark.parametrize("partition,num_layers,pp,goldens", [
    ("5,5,5,5", 20, 4, [(0, 5), (5, 10), (10, 15), (15, 20)]),
    ("4,6,6,4", 20, 4, [(0, 4), (4, 10), (10, 16), (16, 20)]),
    ("5,6,5,6", 22, 4, [(0, 5), (5, 11), (11, 16), (16, 22)]),
])
def test_custom_partition_as_vllm(partition, num_layers, pp, goldens):
    for rank, golden in enumerate(goldens):
        assert get_pp_indices(num_layers, rank, pp, partition) == golden


@pytest.mark.parametrize("partition,num_layers,pp", [
    ("5,5,5,5,", 20, 4),  # invalid string
    ("5,5,5,a", 20, 4),
    ("5,5,5", 20, 4),  # wrong number of partitions
    ("5,5,5,5", 21, 4),  # wrong number of layers
])
def test_bad_partition_raises_like_vllm(partition, num_layers, pp):
    with pytest.raises(ValueError, match="pp_layer_partition"):
        get_pp_indices(num_layers, 0, pp, partition)


@pytest.mark.parametrize("split,expected", [
    # sglang/srt/distributed/utils.py get_pp_indices: the last `remainder` stages get one more
    ("sglang", {(32, 5): [6, 6, 6, 7, 7], (5, 3): [1, 2, 2], (3, 2): [1, 2]}),
    # tensorrt_llm/mapping.py pp_layers: torch.tensor_split, the first `remainder` stages
    ("trtllm", {(32, 5): [7, 7, 6, 6, 6], (5, 3): [2, 2, 1], (3, 2): [2, 1]}),
])
def test_other_engines_split_the_remainder_their_way(split, expected):
    for (num_layers, pp), parts in expected.items():
        assert layers_per_stage(num_layers, pp, split=split) == parts


def test_engine_plans_use_their_own_split():
    for engine, layers in (("vllm", (6, 6, 7, 7, 6)), ("sglang", (6, 6, 6, 7, 7)),
                           ("trtllm", (7, 7, 6, 6, 6))):
        plan = plan_engine_memory(engine, "llama-3.1-8b", "h100", Parallelism(pp=5))
        assert plan.layers_per_stage == layers
    custom = plan_engine_memory("sglang", "llama-3.1-8b", "h100", Parallelism(pp=2),
                                pp_layer_partition="20,12")
    assert custom.layers_per_stage == (20, 12)


def test_pipeline_stage_weights_by_hand():
    # Llama-3.1-70B, tp=1, pp=3: 80 layers -> [27, 27, 26]; a layer is 8192² (q) + 2·8192·1024
    # (k, v) + 8192² (o) + 3·8192·28672 + 2·8192 = 855,654,400 parameters; embedding = LM
    # head = 128,256·8192 = 1,050,673,152; the final norm 8,192 sits on the last stage
    s = resolve_setup("llama-3.1-70b", "h100", Parallelism(pp=3))
    layer, embed = 855_654_400, 1_050_673_152
    assert s.layers == (27, 27, 26)
    assert s.weights == (2 * (27 * layer + embed), 2 * 27 * layer,
                         2 * (26 * layer + embed + 8192))
    assert sum(s.weights) == 2 * 70_553_706_496  # Llama-3.1-70B's parameter count


def test_vllm_pipeline_uses_the_stage_with_fewest_blocks():
    # Llama-3.1-8B, pp=5 -> [6, 6, 7, 7, 6]; every stage has the same activation and
    # non-torch memory (the last stage's sampler is smaller than the layer activation)
    plan = plan_memory("llama-3.1-8b", "h100", Parallelism(pp=5))
    layers = [6, 6, 7, 7, 6]
    weights = [6 * LAYER_8B + EMBED_8B, 6 * LAYER_8B, 7 * LAYER_8B, 7 * LAYER_8B,
               6 * LAYER_8B + EMBED_8B + 8192]
    blocks = [math.floor((0.9 * H100 - w - ACT_8192 - NON_TORCH) / 65_536 / n)
              for w, n in zip(weights, layers, strict=True)]
    assert blocks[2] == min(blocks) == 158_708
    assert plan.layers_per_stage == tuple(layers)
    assert plan.worst_stage == 2
    assert plan.num_gpu_blocks == 158_708
    assert plan.weights_bytes == weights[2]
    assert plan.kv_bytes_per_token == 7 * 4096


# ------------------------------------------------------------------------- vLLM by hand
def test_vllm_budget_by_hand():
    # 0.9·85,520,809,984 − 16,060,522,496 − 838,860,800 − 268,435,456 = 59,800,910,233.6
    plan = plan_engine_memory("vllm", "llama-3.1-8b", "h100")
    kv = 0.9 * H100 - W_8B - ACT_8192 - NON_TORCH
    assert plan.available_kv_bytes == pytest.approx(kv) == pytest.approx(59_800_910_233.6)
    assert plan.num_gpu_blocks == math.floor(kv / 65_536 / 32) == 28_515
    assert plan.kv_tokens == 28_514 * 16  # one null block
    assert plan.memory_fraction_name == "gpu_memory_utilization"


# -------------------------------------------------------------------------------- SGLang
@pytest.mark.parametrize("mib,tp,expected", [
    (81_559, 1, 0.874),   # H100: reserved (9.5 + 1/2)·1024 = 10,240; 71,319 / 81,559
    (81_559, 8, 0.831),   # reserved (9.5 + 4)·1024 = 13,824; 67,735 / 81,559 = 0.8305
    (143_771, 8, 0.886),  # H200: reserved (12 + 4)·1024 = 16,384; 127,387 / 143,771
    (183_359, 8, 0.821),  # B200: reserved 32,768; 150,591 / 183,359
    (46_068, 1, 0.778),   # L40S (< 90 GiB class): 35,828 / 46,068
    (23_034, 1, 0.871),   # L4: reserved (2.8 + 0.1)·1024 = 2,969.6; 20,064.4 / 23,034
])
def test_sglang_default_mem_fraction_static(mib, tp, expected):
    assert sglang_default_mem_fraction_static(mib, tp) == expected


def test_sglang_budget_by_hand():
    # free before loading = 85,520,809,984 − 268,435,456 = 85,252,374,528; × 0.874 (default
    # on an H100 at tp=1) − 16,060,522,496 = 58,450,052,841.47 bytes; cell = 131,072
    plan = plan_engine_memory("sglang", "llama-3.1-8b", "h100")
    kv = (H100 - NON_TORCH) * 0.874 - W_8B
    assert plan.memory_fraction == 0.874
    assert plan.available_kv_bytes == pytest.approx(kv)
    assert plan.kv_tokens == plan.num_gpu_blocks == int(kv) // 131_072 == 445_938
    assert plan.block_size == 1
    assert plan.activation_bytes > 0 and plan.fits  # reported, not subtracted


def test_sglang_tp2_page_alignment_by_hand():
    # Llama-3.1-70B at tp=2: per rank 80·(855,638,016/2 + 16,384) + 2·525,336,576 + 8,192
    # = 35,277,512,704 parameters = 70,555,025,408 bytes; NCCL buffers for 2 ranks 342e6;
    # cell = (8/2 heads)·128·2·80 layers·2 bytes = 163,840
    plan = plan_engine_memory("sglang", "llama-3.1-70b", "h100", Parallelism(tp=2),
                              mem_fraction_static=0.85, page_size=64, max_model_len=8192)
    kv = (H100 - NON_TORCH - 342_000_000) * 0.85 - 70_555_025_408
    tokens = int(kv) // 163_840 // 64 * 64
    assert plan.weights_bytes == 70_555_025_408
    assert plan.kv_tokens == tokens == 9_856
    assert plan.num_gpu_blocks == tokens // 64
    capped = plan_engine_memory("sglang", "llama-3.1-70b", "h100", Parallelism(tp=2),
                                mem_fraction_static=0.85, page_size=64, max_model_len=1000,
                                max_total_tokens=5000)
    assert capped.kv_tokens == 5000 // 64 * 64


# -------------------------------------------------------------------------- TensorRT-LLM
def test_trtllm_budget_by_hand():
    # (85,520,809,984 − 16,060,522,496 − 838,860,800 − 268,435,456) × 0.9
    # = 61,517,692,108.8 bytes -> 469,342 tokens -> ceil(469,342 / 32) = 14,667 blocks
    plan = plan_engine_memory("trtllm", "llama-3.1-8b", "h100")
    kv = (H100 - W_8B - ACT_8192 - NON_TORCH) * 0.9
    assert plan.available_kv_bytes == pytest.approx(kv)
    tokens = math.floor(kv / 131_072)
    assert tokens == 469_342
    assert plan.num_gpu_blocks == math.ceil(tokens / 32) == 14_667
    assert plan.kv_tokens == 14_667 * 32
    small = plan_engine_memory("trtllm", "llama-3.1-8b", "h100", max_tokens=1000,
                               tokens_per_block=64, max_model_len=1000)
    assert small.num_gpu_blocks == math.ceil(1000 / 64) == 16


def test_engines_differ_as_their_rules_say():
    kv = {e: plan_engine_memory(e, "llama-3.1-8b", "h100").available_kv_bytes
          for e in ENGINES}
    # TensorRT-LLM takes 0.9 of what is left after everything; vLLM 0.9 of the device
    # minus everything, SGLang 0.874 of the free memory minus the weights only
    assert kv["trtllm"] - kv["vllm"] == pytest.approx(0.1 * (W_8B + ACT_8192 + NON_TORCH))
    assert kv["vllm"] > kv["sglang"]


def test_knobs_keep_each_engines_names():
    with pytest.raises(ValueError, match="gpu_memory_utilization is a vllm setting"):
        plan_engine_memory("sglang", "llama-3.1-8b", "h100", gpu_memory_utilization=0.8)
    with pytest.raises(ValueError, match="not a setting of any engine"):
        plan_engine_memory("vllm", "llama-3.1-8b", "h100", mem_fraction=0.8)
    with pytest.raises(ValueError, match="engine 'tgi' is not one of"):
        plan_engine_memory("tgi", "llama-3.1-8b", "h100")
    for engine, knob in (("sglang", "mem_fraction_static"),
                         ("trtllm", "free_gpu_memory_fraction")):
        for bad in (0.0, 1.0, float("nan")):
            with pytest.raises(SpecError, match=knob):
                plan_engine_memory(engine, "llama-3.1-8b", "h100", **{knob: bad})


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_says_when_weights_do_not_fit(engine):
    plan = plan_engine_memory(engine, "llama-3.1-70b", "h100")
    assert not plan.fits and plan.short_by_bytes > 0
    assert "131.4 GiB per GPU at tp=1" in plan.reason and "tp ≥ 4 fits" in plan.reason


# ------------------------------------------------------------ vLLM against vLLM's own logs
# vLLM logs "Available KV cache memory: X GiB" / "kv_cache_size=X GiB" (two decimals) and
# then the block count it allocated ("GPU KV cache size: N tokens" = blocks × 16, or
# "# GPU blocks: N"). Given X, the planner's blocks must match within 1 %.
LOGGED_KV = [
    # Meta-Llama-3.1-8B-Instruct, vLLM 0.15.1, GCE a2-highgpu-1g (A100 40GB), eager:
    # README of github.com/ilseokoh/vllm-gce — "19.28 GiB", "157,936 tokens"
    ("llama-3.1-8b", 19.28, 157_936 // 16),
    # Llama-3.1-8B-Instruct, RTX 3090, vllm-project/vllm#10517 (V0 log, same page math):
    # "kv_cache_size=3.81GiB ... GPU blocks: 1952" and "kv_cache_size=2.89GiB ... 1478"
    ("llama-3.1-8b", 3.81, 1952),
    ("llama-3.1-8b", 2.89, 1478),
    # Meta-Llama-3-8B, A100 40GB, vllm-project/vllm#12330: "reserved for KV Cache is
    # 11.12GiB ... # GPU blocks: 5691"
    ("meta-llama-3-8b", 11.12, 5691),
]


@pytest.mark.parametrize("model,kv_gib,logged_blocks", LOGGED_KV)
def test_vllm_blocks_from_logged_kv_bytes_within_1_percent(model, kv_gib, logged_blocks):
    plan = plan_memory(model, "h100", kv_cache_memory_bytes=kv_gib * GIB, max_model_len=8192)
    assert plan.num_gpu_blocks == pytest.approx(logged_blocks, rel=0.01)


def test_vllm_profile_rule_against_a_logged_h100_start():
    # vLLM's memory-profiling lines for an 8B Llama-3 on one H100 (V0 worker, same
    # accounting as V1 0.9+; quoted in a vLLM serving study guide as "Example 4-3"):
    #   total_gpu_memory (79.14GiB) x gpu_memory_utilization (0.90) = 71.22GiB
    #   model weights take 14.99GiB; non_torch_memory takes 0.12GiB;
    #   PyTorch activation peak memory takes 1.19GiB; ... KV Cache is 54.93GiB.
    # The device total is taken from the log (torch's total, below nvidia-smi's 81,559 MiB
    # in the catalog); defaults of that engine: 8,192 batched tokens, 256 sequences.
    h100 = resolve_gpu("h100").model_copy(update={"memory_bytes": 79.14 * GIB})
    plan = plan_memory("meta-llama-3-8b", h100, max_num_batched_tokens=8192, max_num_seqs=256)
    assert plan.available_kv_bytes == pytest.approx(54.93 * GIB, rel=0.01)
    logged_blocks = math.floor(54.93 * GIB / (16 * 4096 * 32))  # 28,124
    assert plan.num_gpu_blocks == pytest.approx(logged_blocks, rel=0.01)


def test_a_pools_kv_cache_follows_its_engines_memory_rule():
    """resolve() sizes an SGLang / TensorRT-LLM pool by that engine's rule (its capacity in
    tokens cut into the simulator's blocks, plus vLLM's null block), a vLLM pool and a pool
    without an engine by vLLM's, and a user's num_gpu_blocks wins over all of them."""
    from serveplan.resolution import resolve

    base = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100"}
    vllm = resolve({"pools": [base]}).pools[0].params
    for engine in ("sglang", "trtllm"):
        pool = resolve({"pools": [{**base, "engine": engine}]}).pools[0]
        p, plan = pool.params, pool.instance.memory
        assert plan["engine"] == engine
        assert p.num_gpu_blocks == plan["kv_tokens"] // p.block_size  # null block left out
        assert p.num_gpu_blocks != vllm.num_gpu_blocks
    set_by_user = resolve({"pools": [{**base, "engine": "sglang", "num_gpu_blocks": 1234}]})
    assert set_by_user.pools[0].params.num_gpu_blocks == 1233
