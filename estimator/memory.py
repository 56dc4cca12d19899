"""Memory planner: the KV cache one instance gets, by vLLM's rule (V1 engine, 0.9 – 0.11).

Per GPU rank (``shared/data/models/VLLM_KV_BUDGET.md`` §2, §5)::

    available_kv = total_memory × gpu_memory_utilization − weights − peak_activation − non_torch
    bytes/token/layer = 2 × max(1, H_kv // tp) × head_dim × kv_bytes          (MHA / GQA)
                      = (kv_lora_rank + qk_rope_head_dim) × kv_bytes          (MLA, not split)
    num_gpu_blocks = floor(available_kv / (block_size × bytes/token/layer) / layers_on_rank)

and every rank then uses the minimum over ranks. One block is vLLM's null block, so
``kv_tokens = (num_gpu_blocks − 1) × block_size``. Weights come from the same op table the
cost model uses (one source for both). The peak activation is an estimate of vLLM's
profiling forward of ``max_num_batched_tokens`` tokens and, on the last pipeline stage, its
sampler dummy run. Pipeline stages hold the layers vLLM's ``get_pp_indices`` gives them
(SGLang and TensorRT-LLM split the remainder differently: :func:`layers_per_stage`).

The parts every engine shares (the resolved deployment, the stage split, the fit checks and
the :class:`MemoryPlan`) live here; SGLang's and TensorRT-LLM's rules are in
:mod:`serveplan.estimator.engine_memory`, which also picks the rule by engine name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from serveplan.kernels import roofline as K

from .catalog import resolve_gpu, resolve_model
from .hybrid_memory import StageLayers, stage_layers, vllm_hybrid_plan
from .linear_attention import CHUNK, linear_dims
from .ops import MOD_EMBED, MOD_FFN, MOD_FNORM, MOD_HEAD, MOD_SAMPLE, build_ops, index_key_bytes
from .profile import Profile, load_profile
from .quantization import Quantization, resolve_quantization
from .specs import DTYPE_BYTES, GPUSpec, ModelSpec, Parallelism, SpecError

GIB = 2.0**30
# vllm/config/cache.py (0.10 – 0.11): BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


class MemoryPlanError(SpecError):
    """The deployment does not fit in GPU memory."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-rank memory budget of one instance (bytes) under one engine's rule, and the KV
    capacity that results. ``short_by_bytes`` is 0 when the plan fits, else how much memory
    per GPU is missing (see ``reason``)."""

    engine: str
    memory_fraction_name: str  # the engine's knob: gpu_memory_utilization, mem_fraction_static...
    memory_fraction: float
    total_bytes: float
    budget_bytes: float  # what the rule lets weights (+ charged terms) and the KV cache share
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    available_kv_bytes: float
    kv_bytes_per_token: float  # all attention layers on the rank
    kv_bytes_per_token_layer: float
    block_size: int
    page_bytes: float
    num_gpu_blocks: int
    kv_tokens: int  # tokens the scheduler can place (vLLM: the null block excluded)
    max_model_len: int
    layers_per_stage: tuple[int, ...]
    worst_stage: int
    fits: bool
    short_by_bytes: float = 0.0
    reason: str = ""
    # hybrid models (sliding-window / linear-attention layers, docs/memory.md)
    kv_groups: str = ""  # how the engine lays the layer kinds out
    state_bytes_per_request: float = 0.0  # linear layers' fixed state, one rank
    max_concurrent_requests: int = 0  # of max_model_len tokens (0: not computed)
    state_request_cap: int = 0  # running requests the state pool allows (0: no cap of its own)

    def as_dict(self) -> dict:
        return asdict(self)

    def raise_if_unfit(self) -> None:
        if not self.fits:
            raise MemoryPlanError(self.reason)


# ------------------------------------------------------------------------- pipeline split
def parse_layer_partition(partition: str | Sequence[int], num_layers: int,
                          pp: int) -> list[int]:
    """Layers per stage given as ``"5,6,5,6"`` (vLLM's ``VLLM_PP_LAYER_PARTITION``), checked
    as vLLM checks it: integers, one per stage, summing to the model's layers."""
    if isinstance(partition, str):
        try:
            parts = [int(x) for x in partition.split(",")]
        except ValueError:
            raise ValueError(f"pp_layer_partition: invalid partition string {partition!r}; "
                             f"expected comma-separated layer counts like '5,6,5,6'") from None
    else:
        parts = [int(x) for x in partition]
    if len(parts) != pp:
        raise ValueError(f"pp_layer_partition has {len(parts)} stages but pp={pp}")
    if sum(parts) != num_layers:
        raise ValueError(f"pp_layer_partition sums to {sum(parts)} layers but the model has "
                         f"num_hidden_layers={num_layers}")
    if min(parts) < 1:
        raise ValueError(f"pp_layer_partition: every stage needs >= 1 layer, got {parts}")
    return parts


PP_SPLITS = ("vllm", "sglang", "trtllm")


def layers_per_stage(num_layers: int, pp: int, partition: str | Sequence[int] | None = None,
                     split: str = "vllm") -> list[int]:
    """Layers of each pipeline stage as the engine splits them (``num_layers // pp`` each).

    The remainder goes one layer each to: ``vllm`` (``distributed/utils.py:
    get_pp_indices``) the stages just before the last (``partitions[-2]``,
    ``partitions[-3]``, ...), since the last also runs the final norm and LM head;
    ``sglang`` (its ``get_pp_indices``) the last ``remainder`` stages; ``trtllm``
    (``Mapping.pp_layers``, ``torch.tensor_split``) the first ``remainder`` stages.
    A ``partition`` (``VLLM_PP_LAYER_PARTITION`` / ``SGLANG_PP_LAYER_PARTITION`` /
    ``pp_partition``) replaces the rule.
    """
    if partition is not None:
        return parse_layer_partition(partition, num_layers, pp)
    if split not in PP_SPLITS:
        raise ValueError(f"split {split!r} is not one of {PP_SPLITS}")
    if not 1 <= pp <= num_layers:
        raise ValueError(f"pp={pp} must be between 1 and num_hidden_layers={num_layers}")
    base, rem = divmod(num_layers, pp)
    parts = [base] * pp
    extra = {"vllm": range(pp - 1 - rem, pp - 1), "sglang": range(pp - rem, pp),
             "trtllm": range(rem)}[split]
    for i in extra:
        parts[i] += 1
    return parts


def get_pp_indices(num_layers: int, pp_rank: int, pp_size: int,
                   partition: str | Sequence[int] | None = None,
                   split: str = "vllm") -> tuple[int, int]:
    """``(start_layer, end_layer)`` of stage ``pp_rank``, as vLLM's function of that name
    (``split`` picks another engine's rule, :func:`layers_per_stage`)."""
    parts = layers_per_stage(num_layers, pp_size, partition, split)
    start = sum(parts[:pp_rank])
    return start, start + parts[pp_rank]


# ----------------------------------------------------------------------- shared quantities
def kv_bytes_per_token_layer(model: ModelSpec, tp: int, kv_dtype: str | None = None) -> float:
    """KV bytes one token occupies in one attention layer on one rank (vLLM's page math;
    SGLang's and TensorRT-LLM's per-token cell is the same product). ``kv_dtype`` defaults
    to the checkpoint's KV cache dtype."""
    b = DTYPE_BYTES[kv_dtype or model.quantization.kv_cache]
    if model.attention == "mla":  # the latent, and sparse attention's indexer key
        return float((model.kv_lora_rank + model.qk_rope_head_dim) * b
                     + index_key_bytes(model))
    return float(2 * max(1, model.num_kv_heads // tp) * model.head_dim * b)


def default_block_size(model: ModelSpec) -> int:
    """vLLM on CUDA: 16, but 64 for MLA models (FlashMLA)."""
    return 64 if model.attention == "mla" else 16


WEIGHT_ROLES = ("full", "attention", "ffn")
"""Which weights an instance holds: all (``full``), all but the FFN (an attention instance
of attention/FFN disaggregation), or the FFN alone (an FFN instance)."""


def _weights_by_stage(model: ModelSpec, par: Parallelism, quant: Quantization,
                      layers: Sequence[int], role: str = "full",
                      redundant_experts: int = 0) -> list[float]:
    """Resident weight bytes of one rank of each pipeline stage (the op tables' bytes,
    scales included, as the cost oracle reads them), of the weights ``role`` holds; with
    ``redundant_experts`` EPLB replicas a rank holds ``(experts + redundant) / ep``."""
    ops = build_ops(model, par, quant, redundant_experts=redundant_experts).ops
    layer_rows = np.isin(ops[:, K.C_MODULE], [MOD_EMBED, MOD_FNORM, MOD_HEAD, MOD_SAMPLE],
                         invert=True)
    if role != "full":
        ffn = ops[:, K.C_MODULE] == MOD_FFN
        layer_rows &= ffn if role == "ffn" else ~ffn
    per_layer = float(np.sum(ops[layer_rows, K.C_PARAM] * ops[layer_rows, K.C_FRAC]))
    first = float(np.sum(ops[ops[:, K.C_MODULE] == MOD_EMBED, K.C_PARAM]))
    last = float(np.sum(ops[np.isin(ops[:, K.C_MODULE], [MOD_FNORM, MOD_HEAD]), K.C_PARAM]))
    if model.tie_word_embeddings and par.pp > 1:
        last += first  # the last stage holds its own copy of the tied embedding
    if role == "ffn":
        first = last = 0.0
    out = []
    for s, n in enumerate(layers):
        w = per_layer * n
        if s == 0:
            w += first
        if s == par.pp - 1:
            w += last
        out.append(w)
    return out


def weight_bytes(model: ModelSpec, quant: Quantization | None = None) -> float:
    """Bytes of every weight the op tables hold (embedding and LM head included), counted
    once, in ``quant``'s formats with their scales (default: the model's own)."""
    quant = model.quantization if quant is None else quant
    return _weights_by_stage(model, Parallelism(), quant, [model.num_layers])[0]


def parameter_count(model: ModelSpec) -> float:
    """The model's parameters: every weight the op tables hold (embedding and LM head
    included), counted once, whatever the checkpoint's storage format."""
    return weight_bytes(model, Quantization.unquantized()) / DTYPE_BYTES["bf16"]


def activation_peak_bytes(model: ModelSpec, par: Parallelism, max_num_batched_tokens: int,
                          max_num_seqs: int, sampler: bool = True) -> float:
    """Estimated peak torch allocation of a profiling forward pass (bytes per rank).

    The larger of (a) one layer's live tensors for ``T = max_num_batched_tokens`` tokens:
    hidden state and residual plus the widest intermediate (gate-up output and activation,
    the QKV + attention output, or the fused-MoE caches for ``top-k`` copies of each token,
    chunked at 32768 tokens), and (b) when ``sampler`` (the last pipeline stage) the
    sampler's dummy run: fp32 logits and probabilities over the full vocabulary for
    ``min(max_num_seqs, T)`` rows.
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
    if model.num_linear_layers:  # in_proj_qkvz output and the chunk states
        ld = linear_dims(model, t)
        widest = max(widest, T * (2 * ld.key + 2 * ld.val) * act
                     + T / CHUNK * ld.hv * ld.dk * ld.dv * act)
    if model.is_moe:
        inter = model.moe_intermediate_size / par.moe_tp
        chunk = min(T * par.dp, 32768.0)
        widest = max(widest, chunk * model.experts_per_token * (3 * inter + h) * act)
    rows = min(float(max_num_seqs), T)
    sampler_bytes = rows * model.vocab_size * 4.0 * 2 if sampler else 0.0
    return max(base + widest, sampler_bytes)


# -------------------------------------------------------------------- resolved deployment
@dataclass(frozen=True)
class Setup:
    """A deployment resolved once for the memory rules: specs, profile, stage split."""

    model: ModelSpec
    gpu: GPUSpec
    par: Parallelism
    profile: Profile
    quantization: Quantization
    layers: tuple[int, ...]
    weights: tuple[float, ...]  # per stage, one rank
    per_tok_layer: float
    max_len: int
    partition: str | tuple[int, ...] | None
    split: str = "vllm"
    kinds: tuple[StageLayers, ...] = ()  # layer kinds per stage (empty: all full attention)
    redundant_experts: int = 0  # EPLB replicas in the weights (moe_routing)

    @property
    def non_torch(self) -> float:
        """CUDA-context / workspace slack plus NCCL buffers of one rank (profile constants)."""
        return self.profile.non_torch_bytes + self.profile.nccl(self.par.tp * self.par.dp)

    def activations(self, tokens: int, rows: int) -> list[float]:
        """Peak activation of each stage (the sampler runs on the last one only)."""
        return [activation_peak_bytes(self.model, self.par, tokens, rows,
                                      sampler=s == self.par.pp - 1)
                for s in range(self.par.pp)]

    def kv_per_token(self, stage: int) -> float:
        """KV bytes of one token on the stage's layers that keep a per-token cache (all but
        linear-attention ones)."""
        layers = self.kinds[stage].attention if self.kinds else self.layers[stage]
        return self.per_tok_layer * layers

    @property
    def weight_dtype(self) -> str:
        """Short name of the weights' quantization (:attr:`Quantization.label`)."""
        return self.quantization.label

    @property
    def kv_dtype(self) -> str:
        return self.quantization.kv_cache


def resolve_setup(model, gpu, parallel: Parallelism | None = None, *,
                  max_model_len: int | None = None, dtype: str | Quantization | None = None,
                  kv_dtype: str | None = None, profile: Profile | None = None,
                  pp_layer_partition: str | Sequence[int] | None = None,
                  pp_split: str = "vllm", weights_role: str = "full",
                  redundant_experts: int = 0) -> Setup:
    """Resolve and check everything the engine rules share (raises ``SpecError`` /
    ``ValueError`` naming the bad field); ``pp_split`` is the engine whose pipeline split
    applies (:func:`layers_per_stage`). ``dtype`` / ``kv_dtype`` as for the cost oracle
    (:func:`~.quantization.resolve_quantization`); ``weights_role`` one of
    :data:`WEIGHT_ROLES`; ``redundant_experts``: EPLB's replicas of hot experts, whose
    weights every expert-parallel rank holds its share of."""
    if weights_role not in WEIGHT_ROLES:
        raise ValueError(f"weights_role must be one of {WEIGHT_ROLES}, got {weights_role!r}")
    m: ModelSpec = resolve_model(model)
    g: GPUSpec = resolve_gpu(gpu)
    par = parallel or Parallelism()
    par.check_model(m)
    if max_model_len is not None:
        check_int("max_model_len", max_model_len)
    layers = layers_per_stage(m.num_layers, par.pp, pp_layer_partition, pp_split)
    quant = resolve_quantization(m.quantization, m.dtype, dtype, kv_dtype)
    part = (pp_layer_partition if isinstance(pp_layer_partition, str | None)
            else tuple(pp_layer_partition))
    return Setup(
        model=m, gpu=g, par=par, profile=profile or load_profile(g), quantization=quant,
        layers=tuple(layers), weights=tuple(_weights_by_stage(m, par, quant, layers, weights_role,
                                                    redundant_experts)),
        per_tok_layer=kv_bytes_per_token_layer(m, par.tp, quant.kv_cache),
        max_len=int(max_model_len or m.max_position_embeddings), partition=part,
        split=pp_split, kinds=tuple(stage_layers(m, layers)))


def check_int(name: str, value, low: int = 1) -> None:
    """``value`` must be an integer >= ``low`` (the message names the knob)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise SpecError(f"{name} must be an integer >= {low}, got {value!r}")


def check_fraction(name: str, value, *, upper_inclusive: bool) -> None:
    """``value`` must be a finite number in (0, 1] or (0, 1)."""
    ok = isinstance(value, int | float) and math.isfinite(value) and value > 0 and (
        value <= 1 if upper_inclusive else value < 1)
    if not ok:
        interval = "(0, 1]" if upper_inclusive else "(0, 1)"
        raise SpecError(f"{name} must be in {interval}, got {value!r}")


# ------------------------------------------------------------------- the budget and checks
@dataclass(frozen=True)
class KVBudget:
    """How one engine's rule turns a stage's memory into KV bytes::

        kv_bytes(stage) = (ceiling − charged[stage]) × kv_scale

    ``charged`` is what the rule subtracts before the KV cache (vLLM and TensorRT-LLM:
    weights, peak activation and non-torch memory; SGLang: weights only, its non-torch
    memory is already gone from the free memory its ceiling starts from)."""

    engine: str
    knob: str
    fraction: float
    ceiling: float
    charged: tuple[float, ...]
    activation: tuple[float, ...]
    non_torch: float
    ceiling_text: str  # how the ceiling was reached, for messages
    charges_activation: bool = True
    kv_scale: float = 1.0

    def available(self, stage: int) -> float:
        return (self.ceiling - self.charged[stage]) * self.kv_scale


def stage_tokens(setup: Setup, budget: KVBudget) -> list[int]:
    """Whole tokens of KV each stage's budget holds (0 when the budget is negative)."""
    return [math.floor(max(budget.available(s), 0.0) / setup.kv_per_token(s))
            for s in range(setup.par.pp)]


def finish_plan(setup: Setup, budget: KVBudget, *, block_size: int, num_blocks: int,
                kv_tokens: int, worst: int, problem: tuple[str, float] | None = None,
                refit: Callable[[Parallelism], bool] | None = None,
                hybrid: dict | None = None) -> MemoryPlan:
    """The :class:`MemoryPlan` of a rule's capacity, with the fit checks every engine shares:
    the weights (and charged terms) fit under the ceiling, the rule's own extra ``problem``
    (message, bytes short) if any, and one ``max_model_len`` request fits in ``kv_tokens``.
    ``refit(parallelism)`` tells whether a larger tensor-parallel size would fit; ``hybrid``
    the plan's hybrid-model fields (``kv_groups``, ...)."""
    available = budget.available(worst)
    page = block_size * setup.per_tok_layer
    fits, short_by, reason = True, 0.0, ""
    if available <= 0:
        fits, short_by = False, budget.charged[worst] - budget.ceiling
        reason = _charged_text(setup, budget, worst) + f" but {budget.ceiling_text}: short by " \
            f"{short_by / GIB:.1f} GiB"
        suggestion = _fitting_tp(setup, refit) if refit else ""
        reason += f"; {suggestion}" if suggestion else "; no tp up to 64 fits on one instance"
    elif problem is not None:
        fits, (reason, short_by) = False, problem
    else:
        need_blocks = math.ceil(setup.max_len / block_size)
        usable = kv_tokens // block_size
        if usable < need_blocks:
            fits = False
            short_by = (need_blocks - usable) * page * setup.layers[worst]
            have = _usable_text(budget, num_blocks, usable)
            reason = (f"one request of max_model_len={setup.max_len} needs {need_blocks} KV "
                      f"blocks of {block_size} tokens but {have} "
                      f"({available / GIB:.2f} GiB for KV): short by {short_by / GIB:.2f} GiB;"
                      f" set max_model_len <= {usable * block_size} or use more GPUs")
    return MemoryPlan(
        engine=budget.engine, memory_fraction_name=budget.knob, memory_fraction=budget.fraction,
        total_bytes=setup.gpu.memory_bytes, budget_bytes=budget.ceiling,
        weights_bytes=setup.weights[worst], activation_bytes=budget.activation[worst],
        non_torch_bytes=budget.non_torch, available_kv_bytes=available,
        kv_bytes_per_token=setup.kv_per_token(worst),
        kv_bytes_per_token_layer=setup.per_tok_layer, block_size=int(block_size),
        page_bytes=page, num_gpu_blocks=int(num_blocks), kv_tokens=int(kv_tokens),
        max_model_len=setup.max_len, layers_per_stage=setup.layers, worst_stage=int(worst),
        fits=fits, short_by_bytes=float(short_by), reason=reason, **(hybrid or {}))


def _usable_text(budget: KVBudget, num_blocks: int, usable: int) -> str:
    if budget.engine == "vllm":
        return (f"num_gpu_blocks={num_blocks} leaves {usable} usable "
                f"(one is vLLM's null block)")
    return f"only {usable} fit"


def _charged_text(setup: Setup, budget: KVBudget, stage: int) -> str:
    par = setup.par
    text = (f"weights need {setup.weights[stage] / GIB:.1f} GiB per GPU at tp={par.tp}"
            + (f", pp={par.pp} (stage {stage}: {setup.layers[stage]} layers)"
               if par.pp > 1 else ""))
    if budget.charges_activation:
        text += (f" (plus {budget.activation[stage] / GIB:.1f} GiB activations and "
                 f"{budget.non_torch / GIB:.2f} GiB other)")
    return text


def _fitting_tp(setup: Setup, refit: Callable[[Parallelism], bool]) -> str:
    """'tp ≥ N fits' for the smallest valid tensor-parallel size whose plan fits (weights,
    activations and one ``max_model_len`` request's KV blocks)."""
    par = setup.par
    for tp in (2, 4, 8, 16, 32, 64):
        if tp <= par.tp:
            continue
        try:
            cand = Parallelism(tp=tp, pp=par.pp, ep=min(par.ep, tp) if par.ep > 1 else 1,
                               dp=par.dp)
            cand.check_model(setup.model)
        except (SpecError, ValueError):
            continue
        if refit(cand):
            return f"tp ≥ {tp} fits (with max_model_len={setup.max_len})"
    return ""


def _check_vllm_knobs(setup: Setup, utilization, max_num_batched_tokens, max_num_seqs,
                      block_size, num_gpu_blocks_override) -> int:
    """Refuse knob values vLLM would reject (``SpecError``); return the block size."""
    check_fraction("gpu_memory_utilization", utilization, upper_inclusive=True)
    check_int("max_num_batched_tokens", max_num_batched_tokens)
    check_int("max_num_seqs", max_num_seqs)
    bs = default_block_size(setup.model) if block_size is None else block_size
    if bs not in VLLM_BLOCK_SIZES or isinstance(bs, bool):
        raise SpecError(f"block_size must be one of vLLM's {VLLM_BLOCK_SIZES}, got {bs!r}")
    if num_gpu_blocks_override is not None:
        check_int("num_gpu_blocks_override", num_gpu_blocks_override)
    return bs


# ----------------------------------------------------------------------------- vLLM's rule
def plan_memory(model, gpu, parallel: Parallelism | None = None, *,
                gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
                max_num_seqs: int = 256, max_model_len: int | None = None,
                block_size: int | None = None, dtype: str | Quantization | None = None,
                kv_dtype: str | None = None, profile: Profile | None = None,
                kv_cache_memory_bytes: float | None = None,
                num_gpu_blocks_override: int | None = None,
                pp_layer_partition: str | Sequence[int] | None = None,
                weights_role: str = "full", redundant_experts: int = 0) -> MemoryPlan:
    """KV-cache plan of one instance as vLLM V1 computes it (see module docstring).

    Returns a :class:`MemoryPlan`; ``fits`` is False (with ``reason`` saying by how much
    and which tensor parallel size would fit) when weights plus activations exceed the
    budget, when ``kv_cache_memory_bytes`` or ``num_gpu_blocks_override`` ask for more KV
    than the GPU holds next to the weights, or when one ``max_model_len`` request does not
    fit in the KV cache. Knob values vLLM itself would reject raise ``SpecError``.
    ``weights_role``: :data:`WEIGHT_ROLES` (an attention instance holds no FFN weights);
    ``redundant_experts``: EPLB replicas (:func:`resolve_setup`).
    """
    setup = resolve_setup(model, gpu, parallel, max_model_len=max_model_len, dtype=dtype,
                          kv_dtype=kv_dtype, profile=profile,
                          pp_layer_partition=pp_layer_partition, weights_role=weights_role,
                          redundant_experts=redundant_experts)
    bs = _check_vllm_knobs(setup, gpu_memory_utilization, max_num_batched_tokens,
                           max_num_seqs, block_size, num_gpu_blocks_override)
    acts = setup.activations(max_num_batched_tokens, max_num_seqs)
    charged = tuple(w + a + setup.non_torch for w, a in zip(setup.weights, acts, strict=True))
    g = setup.gpu
    ceiling = g.memory_bytes * gpu_memory_utilization
    text = (f"{gpu_memory_utilization:.2f} × {g.memory_bytes / GIB:.1f} GiB = "
            f"{ceiling / GIB:.1f} GiB is available on {g.name}")
    problem = None
    if kv_cache_memory_bytes is not None:  # profiling skipped: the KV cache is that many bytes
        text, problem = _fixed_kv_budget(setup, charged, kv_cache_memory_bytes)
        ceiling, charged = float(kv_cache_memory_bytes), (0.0,) * setup.par.pp
    budget = KVBudget("vllm", "gpu_memory_utilization", gpu_memory_utilization, ceiling,
                      charged, tuple(acts), setup.non_torch, text)
    bs, num_blocks, kv_tokens, worst, hybrid = _vllm_blocks(setup, budget, bs, max_num_seqs,
                                                            num_gpu_blocks_override)
    if num_gpu_blocks_override is not None:
        need = num_blocks * bs * setup.per_tok_layer * (
            hybrid.pop("group_layers") if hybrid else setup.layers[worst])
        problem = problem or _override_problem(need, budget.available(worst), num_blocks)
    elif hybrid:
        hybrid.pop("group_layers")

    def refit(cand: Parallelism) -> bool:
        return plan_memory(
            setup.model, g, cand, gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            max_model_len=setup.max_len, block_size=bs, dtype=setup.quantization,
            kv_dtype=kv_dtype, profile=setup.profile, pp_layer_partition=setup.partition,
            weights_role=weights_role).fits

    return finish_plan(setup, budget, block_size=bs, num_blocks=num_blocks,
                       kv_tokens=kv_tokens, worst=worst, problem=problem, refit=refit,
                       hybrid=hybrid)



def _vllm_blocks(setup: Setup, budget: KVBudget, bs: int, max_num_seqs: int,
                 override: int | None) -> tuple[int, int, int, int, dict | None]:
    """``(block size, num_gpu_blocks, kv_tokens, worst stage, hybrid fields)`` by vLLM's
    rule: every layer full attention, or the hybrid allocator for a model whose
    ``layer_types`` mix kinds (:func:`~.hybrid_memory.vllm_hybrid_plan`)."""
    if setup.model.is_hybrid:
        return vllm_hybrid_plan(setup, budget, bs, max_num_seqs, override)
    page = bs * setup.per_tok_layer
    blocks = [math.floor(max(budget.available(s), 0.0) / page / setup.layers[s])
              for s in range(setup.par.pp)]
    worst = int(np.argmin(blocks))  # every rank computes its own count; vLLM keeps the minimum
    num_blocks = override or blocks[worst]  # may_override_num_blocks replaces the count
    return bs, num_blocks, max(num_blocks - 1, 0) * bs, worst, None


def _override_problem(need: float, available: float, blocks: int) -> tuple | None:
    """``num_gpu_blocks_override`` blocks that need more bytes than the budget leaves."""
    if 0 < available < need:
        return (f"num_gpu_blocks_override={blocks} needs {need / GIB:.2f} GiB of KV per GPU "
                f"but {available / GIB:.2f} GiB is available: short by "
                f"{(need - available) / GIB:.2f} GiB", need - available)
    return None


def _fixed_kv_budget(setup: Setup, charged, kv_bytes) -> tuple[str, tuple | None]:
    """Check ``kv_cache_memory_bytes`` (vLLM 0.10+: profiling is skipped and that many bytes
    are the KV cache of every rank). Returns the text for messages and the problem (message,
    bytes short) when it does not fit next to the heaviest stage's weights."""
    g = setup.gpu
    if not (isinstance(kv_bytes, int | float) and math.isfinite(kv_bytes) and kv_bytes > 0):
        raise SpecError(f"kv_cache_memory_bytes must be a finite number of bytes > 0, "
                        f"got {kv_bytes!r}")
    if kv_bytes > g.memory_bytes:
        raise SpecError(f"kv_cache_memory_bytes={kv_bytes:.4g} is more than {g.name} has "
                        f"({g.memory_bytes:.4g} bytes = {g.memory_bytes / GIB:.1f} GiB per GPU)")
    heaviest = max(charged)
    over = kv_bytes + heaviest - g.memory_bytes
    problem = None
    if over > 0:
        problem = (f"kv_cache_memory_bytes={kv_bytes / GIB:.2f} GiB plus "
                   f"{heaviest / GIB:.2f} GiB of weights, activations and other memory "
                   f"exceeds {g.name}'s {g.memory_bytes / GIB:.1f} GiB: short by "
                   f"{over / GIB:.2f} GiB", over)
    return f"kv_cache_memory_bytes={kv_bytes / GIB:.2f} GiB", problem


# ------------------------------------------------------------------------- a batch's need
@dataclass(frozen=True)
class BatchFit:
    """Whether a batch's KV fits at once in a plan's cache (per GPU of the worst stage)."""

    fits: bool
    blocks_needed: int
    blocks_available: int
    bytes_needed: float
    bytes_available: float


def batch_kv_fit(plan: MemoryPlan, batch: int, tokens_per_request: int) -> BatchFit:
    """``batch`` requests of ``tokens_per_request`` tokens each, in whole blocks of the plan's
    ``block_size``, against the blocks the scheduler can place (``kv_tokens``; for vLLM the
    null block is already left out)."""
    bs = plan.block_size
    need = batch * math.ceil(tokens_per_request / bs)
    have = plan.kv_tokens // bs
    block_bytes = bs * plan.kv_bytes_per_token
    return BatchFit(need <= have, need, have, need * block_bytes, have * block_bytes)
