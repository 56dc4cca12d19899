"""Memory planner: how many KV blocks vLLM (V1 engine, 0.9 – 0.11) gives one instance.

Per GPU rank (``shared/data/models/VLLM_KV_BUDGET.md`` §2, §5)::

    available_kv = total_memory × gpu_memory_utilization − weights − peak_activation − non_torch
    bytes/token/layer = 2 × max(1, H_kv // tp) × head_dim × kv_bytes          (MHA / GQA)
                      = (kv_lora_rank + qk_rope_head_dim) × kv_bytes          (MLA, not split)
    num_gpu_blocks = floor(available_kv / (block_size × bytes/token/layer) / layers_on_rank)

and every rank then uses the minimum over ranks. One block is vLLM's null block, so
``kv_tokens = (num_gpu_blocks − 1) × block_size``. Weights come from the same op table the
cost model uses (one source for both). The peak activation is an estimate of vLLM's
profiling forward of ``max_num_batched_tokens`` tokens and its sampler dummy run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from serveplan.kernels import roofline as K

from .catalog import resolve_gpu, resolve_model
from .ops import MOD_EMBED, MOD_FNORM, MOD_HEAD, MOD_SAMPLE, build_ops
from .profile import Profile, load_profile
from .specs import DTYPE_BYTES, GPUSpec, ModelSpec, Parallelism, SpecError

GIB = 2.0**30


class MemoryPlanError(SpecError):
    """The deployment does not fit in GPU memory."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-rank memory budget of one instance (bytes), and the resulting KV capacity."""

    total_bytes: float
    gpu_memory_utilization: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    available_kv_bytes: float
    kv_bytes_per_token: float  # all attention layers on the rank
    kv_bytes_per_token_layer: float
    block_size: int
    page_bytes: float
    num_gpu_blocks: int
    kv_tokens: int
    max_model_len: int
    fits: bool
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def raise_if_unfit(self) -> None:
        if not self.fits:
            raise MemoryPlanError(self.reason)


def kv_bytes_per_token_layer(model: ModelSpec, tp: int, kv_dtype: str | None = None) -> float:
    """KV bytes one token occupies in one attention layer on one rank (vLLM's page math)."""
    b = DTYPE_BYTES[kv_dtype or model.dtype]
    if model.attention == "mla":
        return float((model.kv_lora_rank + model.qk_rope_head_dim) * b)
    return float(2 * max(1, model.num_kv_heads // tp) * model.head_dim * b)


def default_block_size(model: ModelSpec) -> int:
    """vLLM on CUDA: 16, but 64 for MLA models (FlashMLA)."""
    return 64 if model.attention == "mla" else 16


def _weights_by_stage(model: ModelSpec, par: Parallelism, dtype, kv_dtype) -> list[float]:
    """Resident weight bytes of one rank of each pipeline stage."""
    table = build_ops(model, par, dtype, kv_dtype)
    ops = table.ops
    layer_rows = np.isin(ops[:, K.C_MODULE], [MOD_EMBED, MOD_FNORM, MOD_HEAD, MOD_SAMPLE],
                         invert=True)
    per_layer = float(np.sum(ops[layer_rows, K.C_PARAM] * ops[layer_rows, K.C_FRAC]))
    first = float(np.sum(ops[ops[:, K.C_MODULE] == MOD_EMBED, K.C_PARAM]))
    last = float(np.sum(ops[np.isin(ops[:, K.C_MODULE], [MOD_FNORM, MOD_HEAD]), K.C_PARAM]))
    if model.tie_word_embeddings and par.pp > 1:
        last += first  # the last stage holds its own copy of the tied embedding
    layers = _layers_per_stage(model.num_layers, par.pp)
    out = []
    for s, n in enumerate(layers):
        w = per_layer * n
        if s == 0:
            w += first
        if s == par.pp - 1:
            w += last
        out.append(w)
    return out


def _layers_per_stage(num_layers: int, pp: int) -> list[int]:
    """vLLM's even split: earlier stages take the remainder one layer each."""
    base, rem = divmod(num_layers, pp)
    return [base + (1 if s < rem else 0) for s in range(pp)]


def activation_peak_bytes(model: ModelSpec, par: Parallelism, max_num_batched_tokens: int,
                          max_num_seqs: int) -> float:
    """Estimated peak torch allocation of vLLM's profiling run (bytes per rank).

    The larger of (a) one layer's live tensors for ``T = max_num_batched_tokens`` tokens:
    hidden state and residual plus the widest intermediate (gate-up output and activation,
    the QKV + attention output, or the fused-MoE caches for ``top-k`` copies of each token,
    chunked at 32768 tokens), and (b) the sampler's dummy run: fp32 logits and
    probabilities over the full vocabulary for ``min(max_num_seqs, T)`` rows.
    """
    T = float(max_num_batched_tokens)
    act = 2.0
    t = par.tp
    h = model.hidden_size
    base = 2 * T * h * act
    widest = 0.0
    if model.intermediate_size and model.num_dense_layers:
        widest = max(widest, T * 3 * model.intermediate_size / t * act)
    hq = model.num_heads / t
    hkv = max(1, model.num_kv_heads // t)
    widest = max(widest, T * ((hq + 2 * hkv) * model.head_dim + hq * model.head_dim) * act)
    if model.is_moe:
        inter = model.moe_intermediate_size / (1 if par.ep > 1 else t)
        chunk = min(T * par.dp, 32768.0)
        widest = max(widest, chunk * model.experts_per_token * (3 * inter + h) * act)
    rows = min(float(max_num_seqs), T)
    sampler = rows * model.vocab_size * 4.0 * 2
    return max(base + widest, sampler)


def plan_memory(model, gpu, parallel: Parallelism | None = None, *,
                gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
                max_num_seqs: int = 256, max_model_len: int | None = None,
                block_size: int | None = None, dtype: str | None = None,
                kv_dtype: str | None = None, profile: Profile | None = None,
                kv_cache_memory_bytes: float | None = None,
                num_gpu_blocks_override: int | None = None) -> MemoryPlan:
    """KV-cache plan of one instance as vLLM V1 computes it (see module docstring).

    Returns a :class:`MemoryPlan`; ``fits`` is False (with ``reason`` saying by how much
    and which tensor parallel size would fit) when weights plus activations exceed the
    budget or one ``max_model_len`` request does not fit in the KV cache.
    """
    m: ModelSpec = resolve_model(model)
    g: GPUSpec = resolve_gpu(gpu)
    par = parallel or Parallelism()
    par.check_model(m)
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise SpecError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    for name, v in (("max_num_batched_tokens", max_num_batched_tokens),
                    ("max_num_seqs", max_num_seqs)):
        if v < 1:
            raise SpecError(f"{name} must be >= 1, got {v}")
    prof = profile or load_profile(g.name)
    bs = block_size or default_block_size(m)
    if bs < 1:
        raise SpecError(f"block_size must be >= 1, got {bs}")
    max_len = max_model_len or m.max_position_embeddings
    wdt = dtype or ("fp8" if m.checkpoint_fp8 else m.dtype)

    weights_stage = _weights_by_stage(m, par, wdt, kv_dtype)
    layers_stage = _layers_per_stage(m.num_layers, par.pp)
    act = activation_peak_bytes(m, par, max_num_batched_tokens, max_num_seqs)
    non_torch = prof.non_torch_bytes + prof.nccl(par.tp * par.dp)
    per_tok_layer = kv_bytes_per_token_layer(m, par.tp, kv_dtype)
    page = bs * per_tok_layer
    requested = g.memory_bytes * gpu_memory_utilization

    # every rank computes its own block count; vLLM keeps the minimum
    blocks = []
    for w, n_layers in zip(weights_stage, layers_stage, strict=True):
        avail = (kv_cache_memory_bytes if kv_cache_memory_bytes is not None
                 else requested - w - act - non_torch)
        blocks.append(math.floor(max(avail, 0.0) / page / n_layers))
    worst = int(np.argmin(blocks))
    w, n_layers = weights_stage[worst], layers_stage[worst]
    available = (kv_cache_memory_bytes if kv_cache_memory_bytes is not None
                 else requested - w - act - non_torch)
    num_blocks = blocks[worst] if num_gpu_blocks_override is None else num_gpu_blocks_override
    kv_tokens = max(num_blocks - 1, 0) * bs

    fits, reason = True, ""
    if available <= 0:
        fits = False
        need = w + act + non_torch
        reason = (
            f"weights need {w / GIB:.1f} GiB per GPU at tp={par.tp}"
            + (f", pp={par.pp}" if par.pp > 1 else "")
            + f" (plus {act / GIB:.1f} GiB activations and {non_torch / GIB:.2f} GiB other) "
            f"but {gpu_memory_utilization:.2f} × {g.memory_bytes / GIB:.1f} GiB = "
            f"{requested / GIB:.1f} GiB is available on {g.name}: short by "
            f"{(need - requested) / GIB:.1f} GiB"
        )
        suggestion = _fitting_tp(m, g, par, gpu_memory_utilization, max_num_batched_tokens,
                                 max_num_seqs, wdt, kv_dtype, prof, max_len, bs)
        reason += f"; {suggestion}" if suggestion else "; no tp up to 64 fits on one instance"
    else:
        need_blocks = math.ceil(max_len / bs)
        if num_blocks < need_blocks + 1:
            fits = False
            fit_len = max(num_blocks - 1, 0) * bs
            reason = (
                f"one request of max_model_len={max_len} needs {need_blocks} KV blocks "
                f"but only {max(num_blocks - 1, 0)} fit ({available / GIB:.2f} GiB for KV); "
                f"set max_model_len <= {fit_len} or use more GPUs"
            )
    return MemoryPlan(
        total_bytes=g.memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        weights_bytes=w,
        activation_bytes=act,
        non_torch_bytes=non_torch,
        available_kv_bytes=available,
        kv_bytes_per_token=per_tok_layer * n_layers,
        kv_bytes_per_token_layer=per_tok_layer,
        block_size=bs,
        page_bytes=page,
        num_gpu_blocks=int(num_blocks),
        kv_tokens=int(kv_tokens),
        max_model_len=int(max_len),
        fits=fits,
        reason=reason,
    )


def _fitting_tp(m, g, par, util, mnbt, mns, wdt, kv_dtype, prof, max_len, bs) -> str:
    """'tp ≥ N fits' for the smallest valid tensor-parallel size that holds the weights,
    the activations and one ``max_len`` request's KV blocks."""
    for tp in (2, 4, 8, 16, 32, 64):
        if tp <= par.tp:
            continue
        try:
            cand = Parallelism(tp=tp, pp=par.pp, ep=min(par.ep, tp) if par.ep > 1 else 1,
                               dp=par.dp)
            cand.check_model(m)
        except (SpecError, ValueError):
            continue
        w = max(_weights_by_stage(m, cand, wdt, kv_dtype))
        act = activation_peak_bytes(m, cand, mnbt, mns)
        layers = max(_layers_per_stage(m.num_layers, par.pp))
        one_request = (math.ceil(max_len / bs) + 1) * bs * layers * \
            kv_bytes_per_token_layer(m, tp, kv_dtype)
        need = w + act + prof.non_torch_bytes + prof.nccl(tp * par.dp) + one_request
        if need < g.memory_bytes * util:
            return f"tp ≥ {tp} fits (with max_model_len={max_len})"
    return ""
