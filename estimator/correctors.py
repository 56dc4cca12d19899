"""Learned residual correctors: grid tables of log(measured / fitted roofline).

A corrector refines the fitted roofline of one op family with what the roofline cannot
know -- tile and wave quantisation, kernel selection, occupancy, split-KV heuristics. It
is a table of log corrections on a regular grid over a few physically meaningful features,
each on a log2 axis (:data:`FAMILY_AXES`):

=====================  ============================================================
family                 axes (log2 of)
=====================  ============================================================
``gemm``               m (tokens), n, k
``attention_prefill``  query length, batch x query heads, query heads per KV head
                       (GQA ratio), head dim
``attention_decode``   KV tokens read per request, batch x KV heads, GQA ratio, head dim
``moe``                token-expert assignments per expert, local experts, expert
                       matrix size (hidden x per-rank intermediate)
``allreduce``          message bytes, GPUs
``alltoall``           message bytes, GPUs
=====================  ============================================================

Fit (:mod:`serveplan.estimator.corrector_fit`). The table *is* the model: the prediction
at a point is the multilinear interpolation of the node values around it, so a measurement
row is a sparse linear combination of at most 2^D node values, and the node values are
solved for at once by penalised robust least squares (a scikit-learn regressor,
``GridRegressor``). Fitting the grid directly means no second approximation step: what is
fitted is what the kernel evaluates. This module only stores, evaluates and compiles
tables (NumPy only), so loading a profile imports neither scikit-learn nor SciPy.

Storage. A :class:`GridTable` (part of a :class:`~serveplan.estimator.profile.Profile`)
keeps the axes and the node values quantised to ``scale`` (2^-10 in log units, i.e.
0.1 %) as xz-compressed base64 int16 differences, a few KB per table. Stored tables may have
more axes than the kernel takes (up to 4 here); the ones fixed by the model are
interpolated out when an oracle is built (below).

Compilation. The kernel evaluates tables over features known only at run time (token
count, batch size, per-request means; :data:`serveplan.kernels.roofline.FEATURE_NAMES`).
:func:`specialize` turns a stored table into one op row's runtime table: axes whose
feature is fixed by the model (n and k of a GEMM, head dim, GPUs) are interpolated out;
axes that are a runtime feature times a constant (batch x heads, bytes = bytes/token x
tokens) are shifted by log2 of the constant. Both are exact for multilinear interpolation,
so the packed runtime table gives the stored table's value at every point. The packed
values are the factors ``exp(v)``; the kernel interpolates those (no ``exp`` per row), so
at grid nodes the factor is exactly ``exp(v)`` and between nodes it is the multilinear
interpolation of the node factors (:meth:`GridTable.factor`), which differs from
``exp`` of the interpolated log value by at most ``(dv)^2 / 8`` for neighbouring nodes
``dv`` apart.
"""

from __future__ import annotations

import base64
import itertools
import lzma
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from serveplan.kernels import roofline as K

from .routing import TRAFFIC_DISTRIBUTION

__all__ = [
    "FAMILY_AXES",
    "FAMILY_FEATURES",
    "AXIS_STEPS",
    "MOE_KERNEL_DTYPE",
    "Axis",
    "GridTable",
    "Runtime",
    "Static",
    "axes_for",
    "corner_weights",
    "interpolate",
    "pack_runtime",
    "specialize",
]

#: Features a corrector of each family may use as axes (the oracle binds all of them).
FAMILY_FEATURES: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": ("q_len", "batch_heads", "head_dim", "gqa_ratio", "batch", "heads"),
    "attention_decode": ("kv_len", "batch_kv_heads", "gqa_ratio", "head_dim", "batch",
                         "kv_heads"),
    "moe": ("tokens_per_expert", "local_experts", "expert_size", "hidden", "expert_inter"),
    "allreduce": ("message_bytes", "num_gpus"),
    "alltoall": ("message_bytes", "num_gpus"),
}

#: Axes (feature names) the calibration fits for each corrector family.
FAMILY_AXES: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": ("q_len", "batch_heads", "gqa_ratio", "head_dim"),
    "attention_decode": ("kv_len", "batch_kv_heads", "gqa_ratio", "head_dim"),
    "moe": ("tokens_per_expert", "local_experts", "expert_size"),
    "allreduce": ("message_bytes", "num_gpus"),
    "alltoall": ("message_bytes", "num_gpus"),
}

#: Grid step (log2 units) of each feature axis.
AXIS_STEPS: dict[str, float] = {
    "m": 0.5, "n": 1.0, "k": 1.0,
    "q_len": 1.0, "batch_heads": 1.0, "head_dim": 1.0,
    "kv_len": 1.0, "batch_kv_heads": 1.0, "gqa_ratio": 1.0,
    "tokens_per_expert": 1.0, "local_experts": 1.0, "expert_size": 1.0,
    "hidden": 1.0, "expert_inter": 1.0, "batch": 1.0, "heads": 1.0, "kv_heads": 1.0,
    "message_bytes": 1.0, "num_gpus": 1.0,
}

QUANT_SCALE = 2.0**-10  # log units per int16 step of the stored values (0.1 %)


class Axis(BaseModel):
    """One log2 axis: nodes at ``lo + i * step`` for ``i < n`` (log2 of ``feature``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    feature: str
    lo: float
    step: float = Field(gt=0)
    n: int = Field(ge=1)

    @property
    def nodes(self) -> np.ndarray:
        return self.lo + self.step * np.arange(self.n)


class GridTable(BaseModel):
    """A stored corrector: log corrections on a grid, and what it applies to.

    ``select`` names the measurement subset it was fitted on and the oracle rows it
    applies to (e.g. ``{"dtype": "bf16"}``, ``{"kv_dtype": "fp8"}``,
    ``{"phase": "decode"}``). ``values`` is base64 of the xz-compressed little-endian
    int16 differences along the first axis of the node values in units of ``scale``
    (C order over ``axes``; :meth:`log_values` undoes it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    family: str
    select: dict[str, str] = Field(default_factory=dict)
    axes: list[Axis]
    values: str
    scale: float = QUANT_SCALE
    n_rows: int = 0

    @model_validator(mode="after")
    def _check(self) -> GridTable:
        if self.family not in FAMILY_AXES:
            raise ValueError(f"corrector family {self.family!r} unknown; valid: "
                             f"{sorted(FAMILY_AXES)}")
        names = [a.feature for a in self.axes]
        bad = [n for n in names if n not in FAMILY_FEATURES[self.family]]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"{self.family} corrector axes {names}: each must be one of "
                             f"{list(FAMILY_FEATURES[self.family])}, without repeats")
        size = int(np.prod([a.n for a in self.axes]))
        try:
            got = len(lzma.decompress(base64.b64decode(self.values))) // 2
        except (ValueError, lzma.LZMAError) as exc:
            raise ValueError(f"{self.family} corrector values are not base64 xz data: "
                             f"{exc}") from None
        if got != size:
            raise ValueError(f"{self.family} corrector holds {got} values, its axes need {size}")
        return self

    @classmethod
    def from_values(cls, family: str, axes: list[Axis], values: np.ndarray,
                    select: dict[str, str] | None = None, n_rows: int = 0,
                    scale: float = QUANT_SCALE) -> GridTable:
        """Quantise ``values`` (log corrections, shape of the axes) into a table."""
        q = np.clip(np.rint(np.asarray(values, dtype=np.float64) / scale), -16383, 16383)
        delta = np.diff(q.astype(np.int64), axis=0, prepend=0)
        raw = lzma.compress(delta.astype("<i2").tobytes(), preset=9)
        return cls(family=family, select=dict(select or {}), axes=list(axes),
                   values=base64.b64encode(raw).decode("ascii"), scale=scale, n_rows=n_rows)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.n for a in self.axes)

    def log_values(self) -> np.ndarray:
        """Node values (log corrections), shaped like the grid."""
        delta = np.frombuffer(lzma.decompress(base64.b64decode(self.values)), dtype="<i2")
        q = np.cumsum(delta.astype(np.int64).reshape(self.shape), axis=0)
        return q.astype(np.float64) * self.scale

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        """Multilinear interpolation of the log values at log2 features ``X`` (rows x axes)."""
        return interpolate(X, self.axes, self.log_values())

    def factor(self, X: np.ndarray) -> np.ndarray:
        """The factor the kernel applies at log2 features ``X``: multilinear interpolation
        of the node factors ``exp(v)`` (exactly ``exp(v)`` at a node)."""
        return interpolate(X, self.axes, np.exp(self.log_values()))


def axes_for(names: tuple[str, ...], X: np.ndarray,
             steps: dict[str, float] | None = None) -> list[Axis]:
    """Axes named ``names`` covering the log2 features ``X`` (columns in that order)."""
    steps = {**AXIS_STEPS, **(steps or {})}
    axes = []
    for j, name in enumerate(names):
        step = steps[name]
        col = X[:, j][np.isfinite(X[:, j])]
        lo = np.floor(col.min() / step) * step
        hi = np.ceil(col.max() / step) * step
        axes.append(Axis(feature=name, lo=float(lo), step=step, n=int(round((hi - lo) / step)) + 1))
    return axes


def _axis_weights(x: np.ndarray, axis: Axis) -> tuple[np.ndarray, np.ndarray]:
    """Lower node index and weight per value, clamped as the kernel's ``_axis`` does."""
    u = (np.asarray(x, dtype=np.float64) - axis.lo) / axis.step
    u = np.where(np.isnan(u), 0.0, u)
    if axis.n == 1:
        return np.zeros(u.shape, dtype=np.int64), np.zeros(u.shape)
    u = np.clip(u, 0.0, axis.n - 1.0)
    i = np.minimum(np.floor(u).astype(np.int64), axis.n - 2)
    return i, u - i


def corner_weights(X: np.ndarray, axes: list[Axis]):
    """Yield ``(flat node index, weight)`` arrays for each of the 2^D cell corners.

    For row i of the log2 features ``X`` the corners of the grid cell around ``X[i]``
    (clamped to the grid, as the kernel clamps) carry the multilinear weights; summing
    ``weight * values[flat]`` over the corners interpolates.
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    shape = [a.n for a in axes]
    strides = np.cumprod([1] + shape[::-1])[:-1][::-1]
    idx_w = [_axis_weights(X[:, d], a) for d, a in enumerate(axes)]
    for corner in itertools.product((0, 1), repeat=len(axes)):
        flat = np.zeros(X.shape[0], dtype=np.int64)
        weight = np.ones(X.shape[0])
        for d, bit in enumerate(corner):
            i, w = idx_w[d]
            flat += np.minimum(i + bit, shape[d] - 1) * strides[d]
            weight *= w if bit else 1.0 - w
        yield flat, weight


def interpolate(X: np.ndarray, axes: list[Axis], node_values: np.ndarray) -> np.ndarray:
    """Multilinear interpolation of ``node_values`` (grid-shaped) at log2 features ``X``."""
    flat_values = np.ravel(node_values)
    out = np.zeros(np.atleast_2d(X).shape[0])
    for flat, weight in corner_weights(X, axes):
        out += weight * flat_values[flat]
    return out


# ----------------------------------------------------------------- compile for the kernel

@dataclass(frozen=True)
class Static:
    """A stored axis whose feature is fixed for the op row: interpolated out at ``value``."""

    value: float  # linear scale


@dataclass(frozen=True)
class Runtime:
    """A stored axis equal to a kernel feature times a constant: log2 x = log2 f + shift."""

    code: int  # serveplan.kernels.roofline.FEAT_*
    shift: float = 0.0  # log2 of the constant


def _contract(values: np.ndarray, axis: Axis, dim: int, value: float) -> np.ndarray:
    """Interpolate ``values`` along ``dim`` at linear feature ``value`` (clamped)."""
    i, w = _axis_weights(np.array([np.log2(value) if value > 0 else -np.inf]), axis)
    i, w = int(i[0]), float(w[0])
    lower = np.take(values, i, axis=dim)
    if w == 0.0:
        return lower
    upper = np.take(values, i + 1, axis=dim)
    return (1.0 - w) * lower + w * upper


def specialize(table: GridTable, bindings: dict[str, Static | Runtime],
               values: np.ndarray | None = None) -> tuple[list[tuple[int, float, float, int]],
                                                          np.ndarray]:
    """One op row's runtime grid from a stored table.

    Parameters
    ----------
    table : GridTable
        The stored corrector.
    bindings : dict
        Feature name -> :class:`Static` (fixed for the row) or :class:`Runtime`.
    values : ndarray, optional
        Node values to use instead of the table's log values (e.g. its factors).

    Returns
    -------
    (header, values)
        ``header``: per remaining axis ``(feature code, log2 lower edge, step, points)``;
        ``values``: the node values over those axes (C order).

    Notes
    -----
    Interpolating out a static axis and shifting a runtime axis commute with multilinear
    interpolation over the remaining axes, so the result equals the stored table
    evaluated at the bound features, everywhere.
    """
    vals = table.log_values() if values is None else np.asarray(values, dtype=np.float64)
    header = []
    dim = 0
    for axis in table.axes:
        bind = bindings[axis.feature]
        if isinstance(bind, Static):
            vals = _contract(vals, axis, dim, bind.value)
            continue
        header.append((int(bind.code), axis.lo - bind.shift, axis.step, axis.n))
        dim += 1
    if len(header) > K.CORR_MAX_DIMS:
        raise ValueError(f"{table.family}: {len(header)} runtime axes, the kernel takes at most "
                         f"{K.CORR_MAX_DIMS}")
    if not header:  # constant factor: a one-point axis on the token count
        header = [(K.FEAT_TOKENS, 0.0, 1.0, 1)]
        vals = np.reshape(vals, (1,))
    return header, np.asarray(vals, dtype=np.float64)


def pack_runtime(header: list[tuple[int, float, float, int]], values: np.ndarray) -> np.ndarray:
    """The packed kernel layout: ``[ndim, (code, lo, step, n) * ndim, values...]``."""
    out = [float(len(header))]
    for code, lo, step, n in header:
        out += [float(code), float(lo), float(step), float(n)]
    return np.concatenate([np.array(out), np.ravel(values)])


FALLBACK_SELECT = {"dtype": "bf16", "kv_dtype": "bf16"}

#: Measured MoE kernel (table ``moe:<value>``) that prices the oracle's experts of each
#: weight dtype, where it is not the dtype itself. The oracle's fp8 weights are
#: ``quant_method: fp8`` -- block-scaled checkpoints (DeepSeek-V3, Qwen3-*-FP8) or an
#: online ``--quantization fp8`` -- which vLLM runs with ``Fp8MoEMethod`` (AIConfigurator
#: ``moe_dtype`` ``fp8_block``, kernels ``vllm_fp8moe_*``) and TRT-LLM / SGLang with their
#: block-scaled fp8 MoE. AIConfigurator's ``fp8`` rows are a different quantisation method
#: (ModelOpt per-tensor FP8 checkpoints, vLLM ``vllm_modeloptfp8moe_*``), whose FlashInfer
#: CUTLASS path on H100/H200 measures 2-3x *slower* than bf16 even where the grouped
#: GEMMs are bandwidth-bound; its table prices those rows only. Without a ``fp8_block``
#: table the bf16 one applies (:func:`find_table`).
MOE_KERNEL_DTYPE = {"fp8": "fp8_block"}


#: Selection keys a table may leave out, and the value it then stands for: a MoE table
#: without a ``distribution`` was fitted on balanced routing.
SELECT_DEFAULTS = {"distribution": TRAFFIC_DISTRIBUTION["balanced"]}


def find_table(tables: dict[str, GridTable], family: str, **select: str) -> GridTable | None:
    """The table of ``family`` whose ``select`` agrees with every given key.

    A key of :data:`SELECT_DEFAULTS` not given means its default (a MoE lookup without a
    ``distribution`` wants a balanced-routing table). Without an exact match, a dtype
    selection falls back to the bf16 table (an fp8 op without its own table is corrected
    like its 16-bit counterpart, which shares most of its shape effects), then a skewed
    ``distribution`` to the balanced tables (a profile fitted before the power-law
    tables), and a phase selection to any table of the family.
    """
    want = (SELECT_DEFAULTS if family == "moe" else {}) | select
    dtype_relaxed = want | {k: FALLBACK_SELECT[k] for k in want if k in FALLBACK_SELECT}
    tries = [want, dtype_relaxed]
    defaults = {k: v for k, v in SELECT_DEFAULTS.items() if k in want}  # balanced routing
    if want | defaults != want:
        tries += [want | defaults, dtype_relaxed | defaults]
    for attempt in tries:
        for table in tables.values():
            if table.family == family and all(
                    table.select.get(k, SELECT_DEFAULTS.get(k)) == v for k, v in attempt.items()):
                return table
    if "phase" in select:
        return find_table(tables, family)
    return None


def packed_factors(table: GridTable, bindings: dict[str, Static | Runtime]) -> np.ndarray:
    """The kernel's packed runtime table (factors) of ``table`` bound for one op row."""
    header, values = specialize(table, bindings, np.exp(table.log_values()))
    return pack_runtime(header, values)
