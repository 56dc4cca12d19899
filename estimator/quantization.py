"""Quantization as data: how each class of weights, the KV cache and the attention math are
stored and computed.

A :class:`Quantization` gives every weight class of a decoder (:data:`WEIGHT_CLASSES`) a
:class:`TensorFormat` -- a named storage format with its bits per element and its scale
layout -- plus the KV cache's dtype and the attention kernel's compute dtype. The op tables
charge each weight its format's bytes, scales included; the memory planner sums the same
bytes (it reads them from the op tables); the cost oracle prices each GEMM at the peak of
the dtype it computes in on the GPU at hand (:meth:`TensorFormat.compute_dtype`). One
parser (:mod:`~.quant_config`) builds it from a checkpoint's ``quantization_config`` or
ModelOpt's ``hf_quant_config.json``; :meth:`Quantization.uniform` is the ``--dtype``
shorthand.

Formats, with bytes per element ``bits / 8 + scale bytes / group`` (:data:`FORMATS`):

===========  ====  ==============================  ====================================
format       bits  scales                          computes in
===========  ====  ==============================  ====================================
bf16, fp16   16    none                            the activations' dtype
fp32         32    none                            the activations' dtype
fp8          8     per tensor or channel (≈ 0)     fp8 where the GPU has it
fp8_block    8     fp32 per 128 x 128 block        fp8 where the GPU has it
nvfp4        4     e4m3 per 16 elements            fp4 where the GPU has it (Blackwell);
                                                   else weight-only, 16-bit math
mxfp4        4     e8m0 per 32 elements            fp8 (W4A8) where fp4 exists, else 16-bit
int4         4     fp16 per group (128) [+ zero]   16-bit (w4a16)
int8         8     per channel (≈ 0)               int8 where the GPU lists it, else 16-bit
===========  ====  ==============================  ====================================

A per-tensor or per-channel scale is one number per tensor or per output row (a few bytes
per thousand elements) and is not counted; NVFP4's second-level fp32 per-tensor scale
neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import SpecError

__all__ = [
    "DTYPE_BYTES",
    "FORMATS",
    "WEIGHT_CLASSES",
    "DType",
    "FormatKind",
    "Quantization",
    "TensorFormat",
    "corrector_dtype",
    "resolve_quantization",
]

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
"""Bytes of one element of a plain (unscaled) dtype: activations, KV cache, 16-bit weights."""
DType = Literal["bf16", "fp16", "fp8", "fp32", "int8"]
FormatKind = Literal["bf16", "fp16", "fp32", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4",
                     "int8"]
AttentionDType = Literal["bf16", "fp16", "fp8"]

WEIGHT_CLASSES = ("embedding", "qkv", "o_proj", "mlp", "shared_experts", "router", "experts",
                  "lm_head")
"""Weight classes a :class:`Quantization` sets apart: token (and learned position)
embeddings; attention input projections (q, k, v; MLA's q_a, q_b, kv_a, kv_b); the attention
output projection; the MLP of dense layers; the shared experts and the router (gate) of MoE
layers; the routed experts; the LM head."""


@dataclass(frozen=True)
class FormatInfo:
    """One storage format: element bits, scale bytes, default elements per scale (0: one
    scale per tensor or output channel, not counted) and the compute rule: ``(peak key,
    compute dtype)`` pairs tried in order on the GPU's ``flops``; none matching, the
    activations' dtype."""

    bits: float
    scale_bytes: float
    group: int
    compute: tuple[tuple[str, str], ...]


FORMATS: dict[str, FormatInfo] = {
    "bf16": FormatInfo(16, 0.0, 0, ()),
    "fp16": FormatInfo(16, 0.0, 0, ()),
    "fp32": FormatInfo(32, 0.0, 0, ()),
    "fp8": FormatInfo(8, 4.0, 0, (("fp8", "fp8"),)),
    "fp8_block": FormatInfo(8, 4.0, 128 * 128, (("fp8", "fp8"),)),
    "nvfp4": FormatInfo(4, 1.0, 16, (("fp4", "fp4"),)),
    "mxfp4": FormatInfo(4, 1.0, 32, (("fp4", "fp8"),)),
    "int4": FormatInfo(4, 2.0, 128, ()),
    "int8": FormatInfo(8, 4.0, 0, (("int8", "int8"),)),
}


class TensorFormat(BaseModel):
    """Storage of one weight class: a :data:`FORMATS` kind and its scale group.

    ``group_size`` elements share one scale (0: the kind's default, e.g. 16 for NVFP4,
    16384 = 128 x 128 for block fp8); ``zero_point``: an asymmetric integer format also
    stores one zero per group, at the element width; ``weight_only``: the activations stay
    16-bit (e.g. ModelOpt's W4A16_NVFP4), so the GEMMs compute in the activations' dtype.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FormatKind
    group_size: int = Field(0, ge=0)
    zero_point: bool = False
    weight_only: bool = False

    @property
    def group(self) -> int:
        """Elements per scale (0: one scale per tensor or channel, not counted)."""
        return self.group_size or FORMATS[self.kind].group

    @property
    def bytes_per_element(self) -> float:
        """Bytes one weight occupies, its share of the scales (and zeros) included."""
        info = FORMATS[self.kind]
        per_group = info.scale_bytes + (info.bits / 8.0 if self.zero_point else 0.0)
        return info.bits / 8.0 + (per_group / self.group if self.group else 0.0)

    @property
    def is_16bit(self) -> bool:
        return self.kind in ("bf16", "fp16", "fp32")

    def compute_dtype(self, flops: Mapping[str, float], act: str) -> str:
        """Dtype the GEMMs of these weights run in on a GPU with peaks ``flops``: the first
        rule of the kind whose peak the GPU lists, else the activations' ``act``."""
        if self.weight_only:
            return act
        for key, dtype in FORMATS[self.kind].compute:
            if key in flops:
                return dtype
        return act


def _plain(kind: str) -> TensorFormat:
    return TensorFormat(kind=kind)


class Quantization(BaseModel):
    """Storage of every weight class, the KV cache dtype and the attention compute dtype.

    ``method`` says where it came from: ``none`` (a 16-bit checkpoint), ``dtype`` (the
    ``--dtype`` shorthand) or the checkpoint's quantization method (``fp8``, ``modelopt``,
    ``compressed-tensors``, ``awq``, ``gptq``, ``mxfp4``). ``attention`` is the dtype of the
    attention math (QK^T and PV); ``fp8`` runs it on fp8 tensor cores where the GPU has them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = "none"
    embedding: TensorFormat = _plain("bf16")
    qkv: TensorFormat = _plain("bf16")
    o_proj: TensorFormat = _plain("bf16")
    mlp: TensorFormat = _plain("bf16")
    shared_experts: TensorFormat = _plain("bf16")
    router: TensorFormat = _plain("bf16")
    experts: TensorFormat = _plain("bf16")
    lm_head: TensorFormat = _plain("bf16")
    kv_cache: DType = "bf16"
    attention: AttentionDType = "bf16"

    @classmethod
    def unquantized(cls, act: str = "bf16") -> Quantization:
        """Every tensor in the activations' 16-bit dtype ``act``."""
        return cls.uniform(act, act, method="none")

    @classmethod
    def uniform(cls, dtype: str, act: str = "bf16", *, method: str = "dtype") -> Quantization:
        """The ``--dtype`` shorthand: every weight class, embedding and LM head included, in
        format ``dtype``; KV cache and attention math in the activations' ``act``."""
        if dtype not in FORMATS:
            raise SpecError(f"dtype must be one of {sorted(FORMATS)}, got {dtype!r}")
        fmt = _plain(dtype)
        return cls(method=method, kv_cache=act, attention=act,
                   **{c: fmt for c in WEIGHT_CLASSES})

    def weights(self, wclass: str) -> TensorFormat:
        """The format of weight class ``wclass`` (one of :data:`WEIGHT_CLASSES`)."""
        if wclass not in WEIGHT_CLASSES:
            raise SpecError(f"unknown weight class {wclass!r}; valid: {WEIGHT_CLASSES}")
        return getattr(self, wclass)

    def bytes_per_element(self, wclass: str) -> float:
        """Bytes per weight of class ``wclass``, scales included."""
        return self.weights(wclass).bytes_per_element

    def bytes_by_class(self) -> dict[str, float]:
        """:meth:`bytes_per_element` of every weight class."""
        return {c: self.bytes_per_element(c) for c in WEIGHT_CLASSES}

    @property
    def label(self) -> str:
        """Short name: the quantized formats of the weights joined by ``+`` (e.g. ``nvfp4``,
        ``fp8_block``), or the 16-bit dtype when nothing is quantized."""
        kinds = {self.weights(c).kind for c in WEIGHT_CLASSES}
        quantized = sorted(k for k in kinds if k not in ("bf16", "fp16", "fp32"))
        return "+".join(quantized) if quantized else self.qkv.kind


def corrector_dtype(fmt: TensorFormat) -> str:
    """The ``dtype`` key of the corrector tables that price GEMMs of weights in ``fmt``:
    ``bf16`` for 16-bit weights, ``fp8`` for per-tensor and block-scaled fp8, else the
    format's name (tables missing for it fall back to bf16's,
    :func:`~.correctors.find_table`)."""
    if fmt.is_16bit:
        return "bf16"
    return "fp8" if fmt.kind in ("fp8", "fp8_block") else fmt.kind


def resolve_quantization(checkpoint: Quantization, act: str,
                         dtype: str | Quantization | None = None,
                         kv_dtype: str | None = None) -> Quantization:
    """The quantization a deployment runs with.

    Parameters
    ----------
    checkpoint : Quantization
        The model's own (:attr:`~.specs.ModelSpec.quantization`).
    act : str
        The activations' 16-bit dtype.
    dtype : str or Quantization, optional
        None keeps ``checkpoint``; a string is the :meth:`Quantization.uniform` shorthand;
        a :class:`Quantization` is used as given.
    kv_dtype : str, optional
        Overrides the KV cache dtype (None: the checkpoint's, or the activations' under
        the shorthand).

    Returns
    -------
    Quantization
    """
    if dtype is None:
        quant = checkpoint
    elif isinstance(dtype, Quantization):
        quant = dtype
    else:
        quant = Quantization.uniform(str(dtype), act)
    if kv_dtype is not None:
        if kv_dtype not in DTYPE_BYTES:
            raise SpecError(f"kv_dtype must be one of {sorted(DTYPE_BYTES)}, got {kv_dtype!r}")
        quant = quant.model_copy(update={"kv_cache": kv_dtype})
    return quant
