"""The engine limits ``trtllm-bench throughput`` picks when it is not given them.

TensorRT-LLM's benchmark derives a run's ``max_batch_size`` and ``max_num_tokens`` from the
model, the mapping and the dataset's lengths (``tensorrt_llm/bench/build/tuning.py``:
``calc_engine_setting`` and ``finetune_setting``), so its published throughputs ran at those
limits. The rule, in GiB:

* KV bytes per token: ``2 x attention layers x max(tp, kv heads) x head size x KV bytes``
  (``head size`` as the HF config states it; KV bytes 1 for an FP8 cache, else 2);
* weights: ``parameters x weight bytes`` (1 for FP8, 0.5 for NVFP4, else 2), the whole
  model whatever the parallelism;
* requests the KV cache holds: ``(device memory x tp x pp - weights) x fraction /
  (KV bytes per token x (isl + osl))`` (``fraction``: ``kv_cache_free_gpu_mem_fraction``,
  0.95 unless given);
* ``raw_bs = min(requests, 4096) / pp``; ``raw_tokens = min(raw_bs x (1 + isl / osl),
  32768)``;
* ``max_batch_size``: ``raw_bs`` rounded up to a multiple of 32 (at least 64) below 256, of
  128 below 1024, else of 256;
* ``max_num_tokens``: ``raw_tokens`` rounded up to a multiple of 256 (at least 2048) below
  4096, of 512 below 8192, else of 1024; without chunked prefill (its default) at least
  ``isl + max_batch_size``, so that a whole prompt fits a step beside the running batch
  (``bench/benchmark/utils/general.py``: ``get_settings``).

Device memory is what NVML reports as the GPU's total (the catalog's ``memory_bytes``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024 ** 3
WEIGHT_BYTES = {"fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5}
"""Bytes per parameter by the checkpoint's quantization (``BYTES_PER_ELEM``); others: 2."""


@dataclass(frozen=True)
class BenchLimits:
    """What ``trtllm-bench`` would run with, and the KV requests it planned them from."""

    max_batch_size: int
    max_num_tokens: int
    kv_requests: float


def bench_limits(*, params: float, attention_layers: int, kv_heads: int, head_size: int,
                 weights: str, kv_fp8: bool, device_gib: float, tp: int, pp: int,
                 isl: int, osl: int, fraction: float = 0.95,
                 chunked_prefill: bool = False) -> BenchLimits:
    """``trtllm-bench``'s ``max_batch_size`` and ``max_num_tokens`` (module docstring) for a
    model of ``params`` parameters stored as ``weights`` (``fp8``, ``nvfp4``, else 16-bit);
    raises ``ValueError`` where trtllm-bench refuses the mapping."""
    if min(tp, pp, isl, osl) < 1 or not 0 < fraction <= 1:
        raise ValueError("bench_limits: tp, pp, isl and osl must be >= 1 and fraction in (0, 1]")
    kv_gib = (2 * attention_layers * max(tp, kv_heads) * head_size * (1 if kv_fp8 else 2)
              / GIB)
    engine_gib = params * WEIGHT_BYTES.get(weights, 2.0) / GIB
    available = device_gib * tp * pp - engine_gib
    if available <= 0:
        raise ValueError(f"the weights ({engine_gib:.1f} GiB) exceed the {tp * pp} GPUs' "
                         f"{device_gib * tp * pp:.1f} GiB")
    requests = available * fraction / (kv_gib * (isl + osl))
    if requests < 1:
        raise ValueError("the KV cache holds no request of this length")
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    batch, tokens = _round_batch(raw_bs), _round_tokens(raw_tokens)
    if not chunked_prefill:
        tokens = max(tokens, isl + batch)
    return BenchLimits(batch, tokens, requests)


def _round_batch(raw: float) -> int:
    if raw < 256:
        return max(64, 32 * math.ceil(raw / 32))
    step = 128 if raw < 1024 else 256
    return step * math.ceil(raw / step)


def _round_tokens(raw: float) -> int:
    if raw < 4096:
        return max(2048, 256 * math.ceil(raw / 256))
    step = 512 if raw < 8192 else 1024
    return step * math.ceil(raw / step)
