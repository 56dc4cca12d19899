"""trtllm-bench's derived limits (serveplan/trtllm_bench.py), checked by hand against the
rule in TensorRT-LLM's ``bench/build/tuning.py`` and ``bench/benchmark/utils/general.py``."""

from __future__ import annotations

import pytest

from serveplan.trtllm_bench import bench_limits

# An 8B-parameter FP8 model of 32 layers, 8 KV heads of 128, FP8 KV cache, on an 80 GiB GPU:
# KV per token 2 x 32 x 8 x 128 x 1 B = 65,536 B = 2^-14 GiB; weights 8e9 B = 7.4506 GiB;
# the cache gets (80 - 7.4506) x 0.95 = 68.922 GiB.
LLAMA8 = dict(params=8e9, attention_layers=32, kv_heads=8, head_size=128, weights="fp8",
              kv_fp8=True, device_gib=80.0, tp=1, pp=1)
CACHE_GIB = (80.0 - 8e9 / 2 ** 30) * 0.95


def test_short_requests_hit_the_caps():
    """128 + 128 tokens: 68.922 / (256 x 2^-14) = 4411.0 requests -> raw_bs = 4096 (the cap),
    a multiple of 256; raw_tokens = 4096 x (1 + 1) = 8192, a multiple of 1024; the prompt
    floor 128 + 4096 is below it."""
    got = bench_limits(**LLAMA8, isl=128, osl=128)
    assert got.kv_requests == pytest.approx(CACHE_GIB / (256 / 2 ** 14))
    assert got.kv_requests == pytest.approx(4411.0, abs=0.1)
    assert (got.max_batch_size, got.max_num_tokens) == (4096, 8192)


def test_long_prompts_without_chunking_get_a_whole_prompt_per_step():
    """5000 + 500 tokens: 68.922 / (5500 x 2^-14) = 205.3 requests -> batch 32 x ceil(6.42)
    = 224; raw_tokens = 205.3 x 11 = 2258.6 -> 256 x ceil(8.82) = 2304, raised to
    5000 + 224 = 5224 because chunked prefill is off (trtllm-bench's default); with it on,
    2304 stays."""
    got = bench_limits(**LLAMA8, isl=5000, osl=500)
    assert got.kv_requests == pytest.approx(205.3, abs=0.1)
    assert (got.max_batch_size, got.max_num_tokens) == (224, 5224)
    chunked = bench_limits(**LLAMA8, isl=5000, osl=500, chunked_prefill=True)
    assert (chunked.max_batch_size, chunked.max_num_tokens) == (224, 2304)


def test_mid_sized_batches_round_to_128_and_small_ones_to_32():
    """1000 + 1000 tokens: 68.922 / (2000 x 2^-14) = 564.6 requests -> 128 x ceil(4.41) = 640;
    raw_tokens 564.6 x 2 = 1129.2 -> the floor 2048, and 1000 + 640 = 1640 is below it.
    500 + 2000 tokens over 2 pipeline stages whose memory leaves an 80 GiB cache before the
    fraction: 76 / (2500 x 2^-14) = 498.1 requests, 249.0 a stage -> 32 x ceil(7.78) = 256;
    raw_tokens 249.0 x 1.25 = 311.3 -> 2048, and 500 + 256 is below it."""
    got = bench_limits(**LLAMA8, isl=1000, osl=1000)
    assert (got.max_batch_size, got.max_num_tokens) == (640, 2048)
    pp2 = bench_limits(**{**LLAMA8, "pp": 2, "device_gib": 40.0 + 8e9 / 2 ** 31}, isl=500,
                       osl=2000)
    # two stages of (40 + 3.7253) GiB hold the same 7.4506 GiB of weights: cache 80 x 0.95
    assert pp2.kv_requests == pytest.approx(80.0 * 0.95 / (2500 / 2 ** 14))
    assert (pp2.max_batch_size, pp2.max_num_tokens) == (256, 2048)


def test_tensor_parallel_beyond_the_kv_heads_counts_one_head_per_rank():
    """tp 16 over 8 KV heads: each rank holds a head, so 16 heads' KV per token; weights in
    NVFP4 are half a byte a parameter; a 16-bit KV cache is 2 bytes an element."""
    got = bench_limits(**{**LLAMA8, "tp": 16, "weights": "nvfp4", "kv_fp8": False},
                       isl=1024, osl=1024)
    kv = 2 * 32 * 16 * 128 * 2 / 2 ** 30
    assert got.kv_requests == pytest.approx((80.0 * 16 - 4e9 / 2 ** 30) * 0.95 / (kv * 2048))


def test_what_trtllm_bench_refuses_is_refused():
    with pytest.raises(ValueError, match="exceed"):
        bench_limits(**{**LLAMA8, "params": 1e11, "weights": "bf16"}, isl=128, osl=128)
    with pytest.raises(ValueError, match="no request"):
        bench_limits(**{**LLAMA8, "device_gib": 7.5}, isl=100_000, osl=1000)
