"""The KV capacity of one instance by each engine's own rule: vLLM, SGLang, TensorRT-LLM.

:func:`plan_engine_memory` takes the engine name and that engine's knobs under the engine's
own names and returns a :class:`~serveplan.estimator.memory.MemoryPlan` (blocks, tokens,
fits, short-by). The three rules, per GPU rank (``docs/memory.md`` has the sources):

vLLM (V1, ``gpu_memory_utilization``, default 0.9)
    ``kv = total × gpu_memory_utilization − weights − peak_activation − non_torch``;
    ``blocks = floor(kv / (block_size × bytes_per_token_layer) / layers)``, minimum over ranks,
    one block is the null block. See :func:`~serveplan.estimator.memory.plan_memory`.

SGLang (``mem_fraction_static``, default from TP×PP size and GPU memory)
    ``model_runner.profile_max_num_token``: ``rest = free_after_weights − free_before ×
    (1 − mem_fraction_static)``, i.e. ``kv = free_before × mem_fraction_static − weights``
    where ``free_before`` is the device memory free once CUDA and NCCL are up;
    ``max_total_num_tokens = int(kv) // cell_size`` (``cell_size`` = KV bytes of one token on
    all the rank's layers), capped by ``max_total_tokens``, aligned down to ``page_size``,
    minimum over pipeline ranks (which split the remainder layers onto the last stages).
    Activations and CUDA graphs live in the ``1 − mem_fraction_static`` head-room and are
    not subtracted.

TensorRT-LLM (PyTorch backend, ``free_gpu_memory_fraction``, default 0.9)
    ``_torch/pyexecutor/_util.py``: after a profiling run of ``max_num_tokens`` tokens,
    ``kv = (total − peak) × free_gpu_memory_fraction`` with ``peak`` = weights + activation
    peak + memory outside torch; ``max_tokens = kv // bytes_per_token``, capped by
    ``max_tokens``, minimum over ranks; ``blocks = ceil(max_tokens / tokens_per_block)``
    (``tokens_per_block`` default 32, ``KvCacheConfig``). Pipeline stages: the first
    ``remainder`` stages take one extra layer (``Mapping.pp_layers``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from .hybrid_memory import (
    sglang_linear_reserve,
    sglang_state_request_cap,
    sglang_swa_tokens,
    state_bytes,
)
from .memory import (
    GIB,
    KVBudget,
    MemoryPlan,
    Setup,
    check_fraction,
    check_int,
    finish_plan,
    plan_memory,
    resolve_setup,
    stage_tokens,
)
from .profile import Profile
from .quantization import Quantization
from .specs import Parallelism

MIB = 2.0**20

# knob -> default (None: derived from the deployment). The names are the engines' own.
ENGINE_KNOBS: dict[str, dict[str, object]] = {
    "vllm": {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 8192,
             "max_num_seqs": 256, "block_size": None, "kv_cache_memory_bytes": None,
             "num_gpu_blocks_override": None},
    "sglang": {"mem_fraction_static": None, "page_size": 1, "max_total_tokens": None,
               "chunked_prefill_size": None, "max_running_requests": None,
               "disable_radix_cache": None},
    "trtllm": {"free_gpu_memory_fraction": 0.9, "tokens_per_block": 32,
               "max_num_tokens": 8192, "max_tokens": None, "max_batch_size": 2048},
}
ENGINES = tuple(ENGINE_KNOBS)
ENGINE_RULES = {
    "vllm": "KV = total × gpu_memory_utilization − weights − peak activation − non-torch; "
            "blocks = KV / (block_size × bytes per token), min over ranks, one null block",
    "sglang": "KV = (total − non-torch) × mem_fraction_static − weights; "
              "tokens = KV / bytes per token, aligned to page_size, min over ranks",
    "trtllm": "KV = (total − weights − peak activation − non-torch) × "
              "free_gpu_memory_fraction; blocks = ceil(tokens / tokens_per_block)",
}


def plan_engine_memory(engine: str, model, gpu, parallel: Parallelism | None = None, *,
                       max_model_len: int | None = None,
                       dtype: str | Quantization | None = None,
                       kv_dtype: str | None = None, profile: Profile | None = None,
                       pp_layer_partition: str | Sequence[int] | None = None,
                       weights_role: str = "full", redundant_experts: int = 0,
                       **knobs) -> MemoryPlan:
    """KV plan of one instance under ``engine``'s rule (``vllm``, ``sglang``, ``trtllm``).

    ``knobs`` are that engine's settings by their own names (``ENGINE_KNOBS``); ``None``
    values mean the engine's default. A knob of another engine raises ``ValueError`` naming
    it and the engine it belongs to.
    """
    if engine not in ENGINE_KNOBS:
        raise ValueError(f"engine {engine!r} is not one of {ENGINES}")
    given = {k: v for k, v in knobs.items() if v is not None}
    for name in given:
        if name not in ENGINE_KNOBS[engine]:
            owner = [e for e, ks in ENGINE_KNOBS.items() if name in ks]
            where = f"a {owner[0]} setting" if owner else "not a setting of any engine"
            raise ValueError(f"{name} is {where}; engine {engine!r} takes "
                             f"{sorted(ENGINE_KNOBS[engine])}")
    common = dict(max_model_len=max_model_len, dtype=dtype, kv_dtype=kv_dtype,
                  profile=profile, pp_layer_partition=pp_layer_partition,
                  weights_role=weights_role, redundant_experts=redundant_experts)
    if engine == "vllm":
        return plan_memory(model, gpu, parallel, **common, **given)
    setup = resolve_setup(model, gpu, parallel, **common, pp_split=engine)
    settings = {**ENGINE_KNOBS[engine], **given}
    return (plan_sglang if engine == "sglang" else plan_trtllm)(setup, **settings)


# ---------------------------------------------------------------------------------- SGLang
def sglang_default_mem_fraction_static(gpu_memory_mib: float, tp: int, pp: int = 1) -> float:
    """SGLang's default ``mem_fraction_static`` (``server_args.py``, ``__post_init__``):
    ``round((gpu_mem − reserved) / gpu_mem, 3)`` with ``gpu_mem`` the device memory in MiB
    and ``reserved`` (MiB) by memory class, ``parallel = tp × pp``: < 35 GiB
    ``(2.8 + parallel/10) GiB``; < 90 GiB (H100, A100) ``(9.5 + parallel/2) GiB``; < 160 GiB
    (H20, H200) ``(12 + parallel/2) GiB``; else (B200, MI300) 32 GiB."""
    parallel = tp * pp
    if gpu_memory_mib < 35 * 1024:
        reserved = (2.8 + parallel / 10) * 1024
    elif gpu_memory_mib < 90 * 1024:
        reserved = (9.5 + parallel / 2) * 1024
    elif gpu_memory_mib < 160 * 1024:
        reserved = (12 + parallel / 2) * 1024
    else:
        reserved = 32 * 1024
    return round((gpu_memory_mib - reserved) / gpu_memory_mib, 3)


def sglang_default_chunked_prefill_size(gpu_memory_mib: float) -> int:
    """SGLang's default ``chunked_prefill_size`` by device memory (``server_args.py``)."""
    if gpu_memory_mib < 35 * 1024:
        return 2048
    return 8192 if gpu_memory_mib < 160 * 1024 else 16384


def plan_sglang(setup: Setup, *, mem_fraction_static: float | None = None, page_size: int = 1,
                max_total_tokens: int | None = None, chunked_prefill_size: int | None = None,
                max_running_requests: int | None = None,
                disable_radix_cache: bool | None = None) -> MemoryPlan:
    """SGLang's ``max_total_num_tokens`` (module docstring). The profile's non-torch memory
    (CUDA context, NCCL buffers) is what is already used when SGLang measures
    ``free_before``; the activation of a ``chunked_prefill_size`` forward is reported but,
    as in SGLang, not subtracted. Hybrid models: linear layers' states and the
    sliding-window split as :mod:`~.hybrid_memory` says (``disable_radix_cache`` sizes the
    state pool by ``max_running_requests``)."""
    g, par = setup.gpu, setup.par
    mib = g.memory_bytes / MIB
    msf = (sglang_default_mem_fraction_static(mib, par.tp, par.pp)
           if mem_fraction_static is None else mem_fraction_static)
    check_fraction("mem_fraction_static", msf, upper_inclusive=False)
    check_int("page_size", page_size)
    chunk = chunked_prefill_size or sglang_default_chunked_prefill_size(mib)
    for name, v in (("max_total_tokens", max_total_tokens), ("chunked_prefill_size", chunk),
                    ("max_running_requests", max_running_requests)):
        if v is not None:
            check_int(name, v)
    free_before = g.memory_bytes - setup.non_torch
    ceiling = free_before * msf
    text = (f"mem_fraction_static {msf:.3f} × {free_before / GIB:.1f} GiB free = "
            f"{ceiling / GIB:.1f} GiB holds the weights and the KV pool on {g.name}")
    acts = setup.activations(chunk, max_running_requests or min(chunk, 256))
    budget = KVBudget("sglang", "mem_fraction_static", msf, ceiling, setup.weights,
                      tuple(acts), setup.non_torch, text, charges_activation=False)
    budget, slots = _sglang_states(setup, budget, max_running_requests,
                                   not disable_radix_cache)
    per_stage = [sglang_swa_tokens(n, st) if st else n for n, st in
                 zip(stage_tokens(setup, budget), setup.kinds or [None] * par.pp, strict=True)]
    worst = min(range(par.pp), key=per_stage.__getitem__)
    capacity = per_stage[worst]  # pipeline ranks all-reduce the minimum
    if max_total_tokens is not None:
        capacity = min(capacity, max_total_tokens)
    capacity = capacity // page_size * page_size

    def refit(cand: Parallelism) -> bool:
        return plan_sglang(_with(setup, cand), mem_fraction_static=mem_fraction_static,
                           page_size=page_size, chunked_prefill_size=chunked_prefill_size,
                           max_running_requests=max_running_requests,
                           disable_radix_cache=disable_radix_cache).fits

    return finish_plan(setup, budget, block_size=page_size, num_blocks=capacity // page_size,
                       kv_tokens=capacity, worst=worst, refit=refit,
                       hybrid=_hybrid_fields(setup, worst, slots, "SGLang", capacity,
                                             sglang_state_request_cap(slots,
                                                                      not disable_radix_cache)))


def _sglang_states(setup: Setup, budget: KVBudget, max_running_requests: int | None,
                   radix_cache: bool) -> tuple[KVBudget, int]:
    """``budget`` with the linear layers' state pool charged on each stage, and its request
    slots (0 without linear layers)."""
    if not setup.model.num_linear_layers:
        return budget, 0
    reserved = [sglang_linear_reserve(setup.model, setup.par.tp, st, budget.available(s),
                                      max_running_requests, radix_cache, dp=setup.par.dp)
                for s, st in enumerate(setup.kinds)]
    charged = tuple(c + r for c, (r, _) in zip(budget.charged, reserved, strict=True))
    return replace(budget, charged=charged), min(n for _, n in reserved)


def _hybrid_fields(setup: Setup, worst: int, slots: int, engine: str,
                   tokens: int, request_cap: int = 0) -> dict | None:
    """The plan's hybrid fields for SGLang / TensorRT-LLM (``slots``: requests the state
    pool holds, 0 without one; ``tokens``: the KV capacity; ``request_cap``: the running
    requests the state pool allows, 0: no cap of its own)."""
    st = setup.kinds[worst] if setup.kinds else None
    if st is None or not (st.sliding or st.linear):
        return None
    kinds = (f"{st.full} full + {st.sliding} sliding (window {setup.model.sliding_window})"
             if st.sliding else f"{st.full} full + {st.linear} linear-state")
    return dict(kv_groups=f"{engine}: {kinds} layers on the worst stage",
                state_bytes_per_request=state_bytes(setup.model, setup.par.tp) * st.linear,
                max_concurrent_requests=min(slots or tokens, tokens // setup.max_len),
                state_request_cap=request_cap)


# ---------------------------------------------------------------------------- TensorRT-LLM
def plan_trtllm(setup: Setup, *, free_gpu_memory_fraction: float = 0.9,
                tokens_per_block: int = 32, max_num_tokens: int = 8192,
                max_tokens: int | None = None, max_batch_size: int = 2048) -> MemoryPlan:
    """TensorRT-LLM's KV blocks (PyTorch backend; module docstring). The profiling run holds
    ``max_num_tokens`` tokens split into dummy context requests of at most
    ``max_model_len`` tokens, so its sampler sees that many rows."""
    check_fraction("free_gpu_memory_fraction", free_gpu_memory_fraction,
                   upper_inclusive=False)
    for name, v in (("tokens_per_block", tokens_per_block), ("max_num_tokens", max_num_tokens),
                    ("max_batch_size", max_batch_size)):
        check_int(name, v)
    if max_tokens is not None:
        check_int("max_tokens", max_tokens)
    g = setup.gpu
    rows = math.ceil(max_num_tokens / min(max_num_tokens, setup.max_len))
    acts = setup.activations(max_num_tokens, rows)
    charged = tuple(w + a + setup.non_torch for w, a in zip(setup.weights, acts, strict=True))
    text = (f"{g.name} has {g.memory_bytes / GIB:.1f} GiB (the KV cache then gets "
            f"free_gpu_memory_fraction {free_gpu_memory_fraction:.2f} of what is left)")
    states = [state_bytes(setup.model, setup.par.tp) * st.linear * max_batch_size
              / free_gpu_memory_fraction for st in setup.kinds or ()]
    if any(states):  # MambaHybridCacheManager: max_batch_size states out of the KV memory
        charged = tuple(c + r for c, r in zip(charged, states, strict=True))
    budget = KVBudget("trtllm", "free_gpu_memory_fraction", free_gpu_memory_fraction,
                      g.memory_bytes, charged, tuple(acts), setup.non_torch, text,
                      kv_scale=free_gpu_memory_fraction)
    per_stage = stage_tokens(setup, budget)
    worst = min(range(setup.par.pp), key=per_stage.__getitem__)
    tokens = per_stage[worst]  # every rank all-reduces the minimum
    if max_tokens is not None:
        tokens = min(tokens, max_tokens)
    blocks = math.ceil(tokens / tokens_per_block)

    def refit(cand: Parallelism) -> bool:
        return plan_trtllm(_with(setup, cand), free_gpu_memory_fraction=free_gpu_memory_fraction,
                           tokens_per_block=tokens_per_block, max_num_tokens=max_num_tokens,
                           max_batch_size=max_batch_size).fits

    return finish_plan(setup, budget, block_size=tokens_per_block, num_blocks=blocks,
                       kv_tokens=blocks * tokens_per_block, worst=worst, refit=refit,
                       hybrid=_hybrid_fields(setup, worst, max_batch_size if any(states) else 0,
                                             "TensorRT-LLM", blocks * tokens_per_block))


def _with(setup: Setup, par: Parallelism) -> Setup:
    """``setup`` re-resolved for another parallelism (the tensor-parallel suggestion)."""
    return resolve_setup(setup.model, setup.gpu, par, max_model_len=setup.max_len,
                         dtype=setup.quantization, kv_dtype=None,
                         profile=setup.profile, pp_layer_partition=setup.partition,
                         pp_split=setup.split, redundant_experts=setup.redundant_experts)


__all__ = ["ENGINES", "ENGINE_KNOBS", "ENGINE_RULES", "plan_engine_memory", "plan_sglang", "plan_trtllm",
           "sglang_default_mem_fraction_static", "sglang_default_chunked_prefill_size"]
