"""Engine knobs of an instance (vLLM's names) and the checks a run makes before it starts."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .engine_policies import kv_tokens_to_admit
from .state import (
    K_ADP_BALANCE,
    K_ADP_BATCH_WAIT,
    K_ADP_TIMEOUT,
    K_ASYNC,
    K_BLOCK,
    K_CHUNKED,
    K_GROUP_SIZE,
    K_LONG_PREFILL,
    K_LPM,
    K_MAX_MODEL_LEN,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_MIXED_CHUNK,
    K_MULTI_STEP,
    K_NEW_TOKEN_RATIO,
    K_POLICY,
    K_PREFIX,
    K_RECV_INTERVAL,
    K_SEQ_CAP,
    K_SLOTS,
    K_WAIT_ITERS,
    K_WAIT_TOKENS,
    K_WATERMARK,
    N_KNOBS,
    Policy,
)


@dataclass(frozen=True)
class EngineParams:
    """Engine knobs of one instance, with vLLM's names (all instances share them).

    ``watermark`` is the fraction of blocks kept free when admitting waiting requests
    (vLLM's ``watermark``; 0 in vLLM v1 0.8-0.11, 0.01 in vLLM v0).

    Runtime behaviour around the step: ``async_scheduling`` (the next step is scheduled
    while this one runs: a request reaching the engine during step k joins step k+2 at the
    earliest, and the step's CPU work overlaps the GPU's), ``num_scheduler_steps`` (vLLM
    <= 0.6 multi-step: a decode-only batch runs that many steps per scheduling and its
    tokens reach the client together), SGLang's ``enable_mixed_chunk``,
    ``scheduler_recv_interval`` (new requests read every that many decode iterations), initial
    ``new_token_ratio`` (its reservation of future decode tokens; 0 = none) and
    ``schedule_policy`` (``fcfs``, or ``lpm``: the waiting queue by longest cached prefix,
    :mod:`serveplan.sim.sglang_lpm`; needs the ``sglang`` policy with ``new_token_ratio > 0``).
    TensorRT-LLM's attention-DP balance (``attention_dp_balance``, its
    ``attention_dp_timeout_iters`` and ``attention_dp_batching_wait_iters``) holds new
    contexts across the ranks of a lockstep group
    (:func:`~serveplan.sim.engine_policies.trt_balance_adp`).
    """

    num_gpu_blocks: int
    policy: Policy = Policy.VLLM_V1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    watermark: float = 0.0
    max_model_len: int = 131072
    async_scheduling: bool = False
    num_scheduler_steps: int = 1
    enable_mixed_chunk: bool = False
    scheduler_recv_interval: int = 1
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    new_token_ratio: float = 0.0
    schedule_policy: str = "fcfs"
    attention_dp_balance: bool = False
    attention_dp_timeout_iters: int = 50
    attention_dp_batching_wait_iters: int = 10

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "block_size",
                     "max_model_len", "num_scheduler_steps", "scheduler_recv_interval"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be >= 0, got "
                             f"{self.long_prefill_token_threshold!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark!r}")
        for name in ("batch_wait_timeout_iters", "attention_dp_timeout_iters",
                     "attention_dp_batching_wait_iters"):
            value = getattr(self, name)
            if int(value) != value or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not 0.0 <= self.batch_wait_max_tokens_ratio <= 1.0:
            raise ValueError("batch_wait_max_tokens_ratio must be in [0, 1], got "
                             f"{self.batch_wait_max_tokens_ratio!r}")
        if self.attention_dp_balance and self.policy not in (Policy.TRTLLM_NO_EVICT,
                                                             Policy.TRTLLM_MAX_UTILIZATION):
            raise ValueError("attention_dp_balance is TensorRT-LLM's (attention_dp_config."
                             f"enable_balance): it needs a trtllm policy, got {self.policy!r}")
        if not 0.0 <= self.new_token_ratio <= 1.0:
            raise ValueError(f"new_token_ratio must be in [0, 1], got {self.new_token_ratio!r}")
        if self.schedule_policy not in ("fcfs", "lpm"):
            raise ValueError("schedule_policy must be 'fcfs' or 'lpm', got "
                             f"{self.schedule_policy!r}")
        if self.schedule_policy == "lpm" and not (self.policy == Policy.SGLANG
                                                  and self.new_token_ratio > 0):
            raise ValueError("schedule_policy 'lpm' is SGLang's: it needs policy sglang with "
                             "new_token_ratio > 0 (SGLang's scheduler)")
        if self.policy == Policy.SGLANG and self.new_token_ratio > 0 and self.chunked and \
                self.max_num_batched_tokens % self.block_size:
            raise ValueError(  # SGLang asserts it: chunked_prefill_size % page_size == 0
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be a multiple of "
                f"block_size ({self.block_size}) for SGLang's chunked prefill")

    @property
    def chunked(self) -> bool:
        """Whether prefills may be split (never under ``prefill-priority``)."""
        return self.enable_chunked_prefill and self.policy != Policy.PREFILL_PRIORITY

    def knob_row(self) -> np.ndarray:
        row = np.zeros(N_KNOBS, dtype=np.int64)
        row[K_POLICY] = int(self.policy)
        row[K_MAX_SEQS] = self.max_num_seqs
        row[K_MAX_TOKENS] = self.max_num_batched_tokens
        row[K_BLOCK] = self.block_size
        row[K_PREFIX] = int(self.enable_prefix_caching)
        row[K_CHUNKED] = int(self.chunked)
        row[K_LONG_PREFILL] = self.long_prefill_token_threshold
        row[K_WATERMARK] = int(self.watermark * self.num_gpu_blocks)
        row[K_MAX_MODEL_LEN] = self.max_model_len
        row[K_SEQ_CAP] = self.max_num_seqs
        row[K_SLOTS] = self.max_num_seqs
        row[K_ASYNC] = int(self.async_scheduling)
        row[K_MULTI_STEP] = self.num_scheduler_steps
        row[K_MIXED_CHUNK] = int(self.enable_mixed_chunk)
        row[K_RECV_INTERVAL] = self.scheduler_recv_interval
        if self.batch_wait_timeout_iters > 0 and self.batch_wait_max_tokens_ratio > 0:
            row[K_WAIT_ITERS] = self.batch_wait_timeout_iters
            row[K_WAIT_TOKENS] = math.ceil(self.batch_wait_max_tokens_ratio
                                           * self.max_num_batched_tokens)
        row[K_NEW_TOKEN_RATIO] = round(self.new_token_ratio * 1000)
        row[K_LPM] = int(self.schedule_policy == "lpm")
        row[K_ADP_BALANCE] = int(self.attention_dp_balance)
        row[K_ADP_TIMEOUT] = self.attention_dp_timeout_iters
        row[K_ADP_BATCH_WAIT] = self.attention_dp_batching_wait_iters
        row[K_GROUP_SIZE] = 1
        return row


def clip_lengths(prompt: np.ndarray, output: np.ndarray, max_model_len: int):
    """vLLM's limits: prompts of ``max_model_len`` tokens or more are rejected; outputs stop
    at ``max_model_len`` total tokens. Returns ``(output_clipped, ignored)``."""
    ignored = prompt >= max_model_len
    out = np.where(ignored, 1, np.minimum(output, max_model_len - prompt))
    return out.astype(np.int64), ignored


def check_capacity(prompt, output, ignored, params: EngineParams) -> int:
    """Blocks one request may need at most; errors when a request could never run."""
    live = ~ignored
    if not live.any():
        return 1
    peak = prompt + output - 1  # tokens whose KV is computed by the last step
    # KV an empty instance must hold to admit the request at all (TRT-LLM no-evict and
    # SGLang's reservation admit only with head-room to completion)
    need = kv_tokens_to_admit(params.policy, params.new_token_ratio, prompt, output)
    blocks = -(-need // params.block_size)
    worst = int(np.argmax(np.where(live, blocks, 0)))
    if blocks[worst] > params.num_gpu_blocks:
        raise ValueError(
            f"request {worst} needs {blocks[worst]} KV blocks ({prompt[worst]} prompt + "
            f"{output[worst]} output tokens, block_size={params.block_size}) but the instance "
            f"has num_gpu_blocks={params.num_gpu_blocks}; lower max_model_len or add KV memory")
    if not params.chunked:
        # a whole prompt -- or, where preemption recomputes, prompt and output so far; TRT-LLM's
        # no-evict scheduler never preempts
        peak = prompt if params.policy == Policy.TRTLLM_NO_EVICT else peak
        longest = int(np.argmax(np.where(live, peak, 0)))
        if peak[longest] > params.max_num_batched_tokens:
            raise ValueError(
                f"without chunked prefill a step must hold a whole prompt (or a recompute "
                f"after preemption): request {longest} needs {peak[longest]} tokens but "
                f"max_num_batched_tokens={params.max_num_batched_tokens}; raise it or enable "
                f"chunked prefill")
    return int(max(blocks[live].max(), 1))


__all__ = ["EngineParams", "check_capacity", "clip_lengths"]
