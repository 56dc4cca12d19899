"""Model, GPU and parallelism specs: validated, frozen, and free of side effects.

A :class:`ModelSpec` is the architecture facts the cost model needs, parsed once from a
Hugging Face ``config.json``; a :class:`GPUSpec` is one accelerator's peaks; a
:class:`Parallelism` is how one instance is split over GPUs. Everything downstream
(op tables, memory planner, kernels) reads these and nothing else.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .errors import SpecError
from .hf_config import model_fields
from .quantization import DTYPE_BYTES, DType, Quantization

COMPUTE_DTYPES = (*DTYPE_BYTES, "fp4")
LayerType = Literal["full_attention", "sliding_attention", "linear_attention"]
"""Kinds of decoder layer, by Hugging Face's ``layer_types`` names."""
"""Dtypes a GPU may list a peak for (``fp4``: Blackwell's FP4 tensor cores)."""


# ----------------------------------------------------------------------------- input files
TEXT_HEAD = 1 << 16
"""Bytes of a file read to tell text from binary."""


def not_text_message(path, problem: str, expected: str) -> str:
    """``PATH is not a text file (problem); expected ...``: one wording for binary input."""
    return f"{path} is not a text file ({problem}); expected {expected}"


def decode_problem(exc: UnicodeDecodeError) -> str:
    return f"byte {exc.start} is not UTF-8"


def text_problem(head: bytes, *, whole: bool) -> str | None:
    """Why the bytes ``head`` are not UTF-8 text (a NUL byte, an invalid byte), or None.

    ``whole``: ``head`` is the whole file; otherwise a character cut at its end passes."""
    nul = head.find(b"\x00")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if whole or exc.start < len(head) - 3:  # not a character cut by the read
            nul = nul if 0 <= nul < exc.start else -1
            return f"byte {nul} is NUL" if nul >= 0 else decode_problem(exc)
    return f"byte {nul} is NUL" if nul >= 0 else None


def file_text_problem(path) -> str | None:
    """:func:`text_problem` of the first :data:`TEXT_HEAD` bytes of the file ``path``."""
    with open(path, "rb") as f:
        head = f.read(TEXT_HEAD)
    return text_problem(head, whole=len(head) < TEXT_HEAD)


def read_text_file(path, expected: str) -> str:
    """The UTF-8 text of ``path``; :class:`SpecError` naming the file if it is binary
    (``expected`` says what it should be, e.g. ``a Hugging Face config.json``)."""
    data = Path(path).read_bytes()
    problem = text_problem(data, whole=True)
    if problem is not None:
        raise SpecError(not_text_message(path, problem, expected))
    return data.decode("utf-8")


class ModelSpec(BaseModel):
    """Architecture of a decoder-only LLM, as the cost model sees it.

    Attention flavours: ``gqa`` (MHA and MQA are special cases) and ``mla``
    (DeepSeek's multi-head latent attention). MLP flavours: ``gated`` (SwiGLU/GeGLU:
    gate, up, down) and ``plain`` (OPT: fc1, activation, fc2). MoE layers replace the
    MLP on ``num_moe_layers`` of the layers.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model_type: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(ge=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool = False
    dtype: DType = "bf16"
    norm: Literal["rms", "layer"] = "rms"
    mlp: Literal["gated", "plain"] = "gated"
    attention: Literal["gqa", "mla"] = "gqa"
    qkv_bias: bool = False
    linear_bias: bool = False
    qk_norm: bool = False
    # "head": each head's q and k normed on their own (Qwen3); "layer": the whole q and k
    # projections normed together (MiniMax-M2's qk_norm_type per_layer), so the variance
    # of heads split over tensor-parallel ranks is all-reduced (vLLM, SGLang and
    # TensorRT-LLM's MiniMaxText01RMSNormTP)
    qk_norm_scope: Literal["head", "layer"] = "head"
    norms_per_layer: int = 2
    learned_positions: bool = False
    # sliding-window attention: window (tokens) applied on a fraction of the layers
    sliding_window: int = 0
    sliding_fraction: float = Field(0.0, ge=0.0, le=1.0)
    # mixture of experts
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    num_moe_layers: int = 0
    # multi-head latent attention (DeepSeek-V2/V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): a lightning indexer of
    # index_n_heads x index_head_dim scores every cached token for each query, and MLA
    # attends to the index_topk best (0: dense MLA)
    index_topk: int = Field(0, ge=0)
    index_n_heads: int = Field(0, ge=0)
    index_head_dim: int = Field(0, ge=0)
    # multi-token prediction layers shipped with the checkpoint (DeepSeek-V3's
    # num_nextn_predict_layers): the drafter of speculative decoding's ``mtp`` method
    num_nextn_predict_layers: int = Field(0, ge=0)
    # hybrid layouts (gpt-oss, Qwen3-Next / Qwen3.5): the kind of every layer, by HF's names
    # (:data:`LAYER_TYPES`); empty: every layer full attention but ``sliding_fraction``
    layer_types: tuple[LayerType, ...] = ()
    attention_sinks: bool = False  # gpt-oss: a learned logit per head in the softmax
    attn_output_gate: bool = False  # Qwen3-Next / 3.5: q_proj also gives a sigmoid gate
    # gated DeltaNet linear attention on the ``linear_attention`` layers
    linear_num_key_heads: int = Field(0, ge=0)
    linear_num_value_heads: int = Field(0, ge=0)
    linear_key_head_dim: int = Field(0, ge=0)
    linear_value_head_dim: int = Field(0, ge=0)
    linear_conv_kernel_dim: int = Field(0, ge=0)
    linear_state_dtype: DType = "fp32"  # the recurrent (SSM) state; HF ``mamba_ssm_dtype``
    # how the checkpoint stores each weight class and the KV cache (16-bit by default)
    quantization: Quantization = Field(None, validate_default=False)  # set before validation

    @model_validator(mode="before")
    @classmethod
    def _default_quantization(cls, data):
        """Without a quantization, every tensor is in the model's 16-bit dtype."""
        if isinstance(data, dict) and data.get("quantization") is None:
            data = {**data, "quantization": Quantization.unquantized(data.get("dtype", "bf16"))}
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.attention == "gqa" and self.num_heads % self.num_kv_heads:
            raise SpecError(
                f"num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )
        if self.num_moe_layers > self.num_layers:
            raise SpecError("num_moe_layers exceeds num_hidden_layers")
        if self.num_moe_layers and not (self.num_experts and self.experts_per_token):
            raise SpecError("a MoE model needs num_experts and experts_per_token")
        if self.attention == "mla" and not (self.kv_lora_rank and self.qk_rope_head_dim):
            raise SpecError("an MLA model needs kv_lora_rank and qk_rope_head_dim")
        if self.index_topk and not (self.attention == "mla" and self.index_n_heads
                                    and self.index_head_dim):
            raise SpecError("sparse attention (index_topk) needs MLA attention, index_n_heads "
                            "and index_head_dim")
        self._check_layer_types()
        return self

    def _check_layer_types(self) -> None:
        """``layer_types`` has one entry per layer, agrees with ``sliding_fraction``, and
        linear-attention layers come with their dimensions."""
        if not self.layer_types:
            return
        if len(self.layer_types) != self.num_layers:
            raise SpecError(f"layer_types has {len(self.layer_types)} entries but "
                            f"num_hidden_layers is {self.num_layers}")
        sliding = self.layer_types.count("sliding_attention") / self.num_layers
        if abs(sliding - self.sliding_fraction) > 1e-12 or (sliding and not self.sliding_window):
            raise SpecError(f"layer_types has a sliding fraction of {sliding:g} but "
                            f"sliding_fraction={self.sliding_fraction:g}, "
                            f"sliding_window={self.sliding_window}")
        dims = (self.linear_num_key_heads, self.linear_num_value_heads,
                self.linear_key_head_dim, self.linear_value_head_dim,
                self.linear_conv_kernel_dim)
        if self.num_linear_layers and not all(dims):
            raise SpecError("linear_attention layers need linear_num_key_heads, "
                            "linear_num_value_heads, linear_key_head_dim, "
                            "linear_value_head_dim and linear_conv_kernel_dim")
        if self.num_linear_layers and self.linear_num_value_heads % self.linear_num_key_heads:
            raise SpecError(f"linear_num_value_heads ({self.linear_num_value_heads}) must be "
                            f"a multiple of linear_num_key_heads ({self.linear_num_key_heads})")

    @property
    def num_linear_layers(self) -> int:
        """Layers of gated DeltaNet linear attention (no KV cache: a fixed state)."""
        return self.layer_types.count("linear_attention")

    @property
    def linear_fraction(self) -> float:
        return self.num_linear_layers / self.num_layers

    @property
    def is_hybrid(self) -> bool:
        """Layers of more than one kind given one by one (``layer_types``): the memory
        planner groups them as vLLM's hybrid KV-cache allocator does."""
        return len(set(self.layer_types)) > 1

    @property
    def is_moe(self) -> bool:
        return self.num_moe_layers > 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def expert_layers(self) -> int:
        """MoE layers times routed experts (0 for a dense model)."""
        return self.num_moe_layers * self.num_experts

    @classmethod
    def from_hf_config(cls, cfg: dict, name: str | None = None, *,
                       hf_quant_config: dict | None = None,
                       source: str | None = None) -> ModelSpec:
        """Parse a Hugging Face ``config.json`` dict (:mod:`~.hf_config`).

        Supported ``model_type``: llama, mistral, qwen2, qwen3, phi3, gemma2, opt,
        mixtral, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, minimax_m2, gpt_oss,
        qwen3_next and qwen3_5_moe (Qwen3.5's ``text_config``) (others with
        Llama-like field names are read as dense GQA decoders). The checkpoint's
        ``quantization_config`` -- or ModelOpt's ``hf_quant_config.json`` given as
        ``hf_quant_config`` -- becomes :attr:`quantization` (:mod:`~.quant_config`);
        ``source`` names the file in errors.
        """
        return cls(**model_fields(cfg, name, hf_quant=hf_quant_config, source=source))


STEP_PHASES = ("prefill", "decode")
"""The phases whose op rows the oracle prices with their own efficiencies."""


def check_phase_speed(what: str, speed: dict[str, float]) -> None:
    """Raise :class:`SpecError` unless ``speed`` maps phases (:data:`STEP_PHASES`) to
    finite numbers > 0."""
    bad = [k for k in speed if k not in STEP_PHASES]
    if bad:
        raise SpecError(f"{what}: unknown phase(s) {bad}; valid: {list(STEP_PHASES)}")
    for phase, value in speed.items():
        if not (math.isfinite(value) and value > 0):
            raise SpecError(f"{what}: {phase} must be a finite number > 0, got {value!r}")


class GPUSpec(BaseModel):
    """Peaks of one accelerator (decimal units: B/s, FLOP/s; bytes; seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    full_name: str = ""
    aliases: tuple[str, ...] = ()
    memory_bytes: float = Field(gt=0)
    mem_bw: float = Field(gt=0)
    flops: dict[str, float]
    scaleup_bw: float = Field(gt=0)
    scaleup_latency_s: float = Field(5e-6, ge=0)
    scaleout_bw: float = Field(gt=0)
    scaleout_latency_s: float = Field(1e-5, ge=0)
    gpus_per_node: int = Field(8, gt=0)
    host_bw: float | None = Field(None, gt=0, description="GPU <-> host memory, bytes/s per "
                                  "direction per GPU, effective (the CPU KV tier's link); "
                                  "None: unknown")
    host_latency_s: float = Field(1e-5, ge=0)
    profile_from: str | None = Field(None, description="the GPU whose shipped calibration "
                                     "profiles this one uses when it has none of its own "
                                     "(same SM architecture); None: the Profile defaults")
    lender_speed: dict[str, float] | None = Field(
        None, description="with profile_from: how much faster than the lender's profile "
        "on this GPU's own peaks its steps run, per phase ('prefill', 'decode'; 1.1: 10 % "
        "less GPU time in that phase's compute and memory work; collectives and kernel "
        "launches as the lender's), measured on deployments run on both GPUs; None: 1")

    @field_validator("flops")
    @classmethod
    def _check_flops(cls, flops: dict[str, float]) -> dict[str, float]:
        if "bf16" not in flops and "fp16" not in flops:
            raise SpecError("flops: needs a bf16 or fp16 entry")
        bad = [k for k in flops if k not in COMPUTE_DTYPES]
        if bad:
            raise SpecError(f"flops: unknown dtype(s) {bad}; "
                            f"valid: {list(COMPUTE_DTYPES)}")
        return flops

    @field_validator("lender_speed")
    @classmethod
    def _check_lender_speed(cls, speed: dict[str, float] | None,
                            info: ValidationInfo) -> dict[str, float] | None:
        if speed is not None:
            check_phase_speed("lender_speed", speed)
            if info.data.get("profile_from") is None:
                raise SpecError("lender_speed: needs profile_from (the "
                                "GPU whose profile it speeds up)")
        return speed

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for ``dtype``; a dtype the GPU has no tensor cores for (fp8 on A100,
        fp4 before Blackwell) falls back to the 16-bit peak."""
        if dtype in self.flops:
            return self.flops[dtype]
        return self.flops.get("bf16", self.flops.get("fp16"))


class Parallelism(BaseModel):
    """How one serving instance is split: tensor, pipeline, expert, data (attention) parallel.

    ``ep`` experts are spread over ``ep`` groups of the ``tp * dp`` ranks (``ep`` must
    divide ``tp * dp``); each expert is sharded over the :attr:`moe_tp` ranks of its group.
    vLLM's ``--enable-expert-parallel`` spans every rank (``ep = tp * dp``, ``moe_tp = 1``);
    SGLang's ``--ep-size`` and TensorRT-LLM's ``moe_expert_parallel_size`` may mix both
    (``tp 8, ep 4``: every expert on 2 ranks). Without expert parallelism the experts are
    sharded over all ``tp * dp`` ranks, attention DP included (vLLM: "the expert layers
    form a DP x TP tensor-parallel group"; SGLang and TensorRT-LLM likewise).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> Parallelism:
        if (self.tp * self.dp) % self.ep:
            raise SpecError(f"ep ({self.ep}) must divide tp*dp ({self.tp * self.dp})")
        return self

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def moe_tp(self) -> int:
        """Ranks one expert is sharded over: the ``tp * dp / ep`` ranks of an
        expert-parallel group (all ``tp * dp`` ranks without expert parallelism)."""
        return self.tp * self.dp // self.ep

    def check_model(self, m: ModelSpec) -> None:
        """Raise :class:`SpecError` if ``m`` cannot be split this way (as vLLM would)."""
        if m.num_heads % self.tp:
            raise SpecError(
                f"tp={self.tp} does not divide num_attention_heads={m.num_heads} of {m.name}"
            )
        if m.attention == "gqa" and m.num_kv_heads < self.tp and self.tp % m.num_kv_heads:
            raise SpecError(
                f"tp={self.tp} is not a multiple of num_key_value_heads={m.num_kv_heads}"
            )
        if m.attention == "gqa" and m.num_kv_heads >= self.tp and m.num_kv_heads % self.tp:
            raise SpecError(
                f"tp={self.tp} does not divide num_key_value_heads={m.num_kv_heads}"
            )
        if self.pp > m.num_layers:
            raise SpecError(f"pp={self.pp} exceeds num_hidden_layers={m.num_layers}")
        if self.ep > 1 and not m.is_moe:
            raise SpecError(f"ep={self.ep} given but {m.name} has no experts")
        if m.is_moe and m.num_experts % self.ep:
            raise SpecError(f"ep={self.ep} does not divide num_experts={m.num_experts}")
        if m.num_linear_layers and m.linear_num_key_heads % self.tp:
            raise SpecError(f"tp={self.tp} does not divide linear_num_key_heads="
                            f"{m.linear_num_key_heads} of {m.name}")
