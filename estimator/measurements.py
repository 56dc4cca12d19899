"""Per-op GPU measurements in one long-format table, and importers that fill it.

The table is the training input of the efficiency fit and of the learned residual
correctors: one row is one measured call of one operator on one GPU. Every source
(AIConfigurator's collected database, Vidur's profiles, a user's own CSV) is converted
to this schema once, so the fitters never see a source's units or column names.

Schema
------
Identity columns (strings):

``op_family``
    What kind of op: one of :data:`OP_FAMILIES` (``gemm``, ``attention_prefill``,
    ``attention_decode``, ``moe``, ``moe_dispatch``, ``moe_combine``, ``allreduce``,
    ``allgather``, ``reduce_scatter``, ``alltoall``, ``p2p``, ``elementwise``,
    ``norm``, ``rope``, ``embedding``).
``op_name``
    The source's own label (``gemm``, ``context_attention``, ``mlp_up_proj`` ...).
``gpu``
    Our short GPU name (``h100``, ``h200``, ``b200``, ``a100-80gb``, ``l40s`` ...);
    see :func:`gpu_short_name`.
``engine``, ``engine_version``, ``engine_build``
    Framework that dispatched the kernel (``vllm``, ``trtllm``, ``sglang``, ``nccl``,
    ``oneccl``, ``vidur``), its version (for AIC: the version directory, which is how
    AIC keys its data), and the version string stored in the rows themselves, which
    can be a dev build or the older version a table was reused from.
``dtype``
    Compute / payload dtype, normalised (``bf16``, ``fp16``, ``fp8``, ``fp8_block``,
    ``nvfp4``, ``int8_sq``, ...; see :func:`normalize_dtype`).
``kv_dtype``
    KV-cache dtype (attention only; empty string elsewhere).
``kernel``, ``source``, ``moe_distribution``
    Optional: the kernel/backend the framework chose, where the row came from, and the
    MoE router token distribution label (``balanced``, ``power_law_1.2``).

Feature columns (float64, ``NaN`` where a feature does not apply):

============== ====== ===========================================================
column         unit   meaning
============== ====== ===========================================================
m, n, k        1      GEMM ``Y[m, n] = X[m, k] @ W[n, k]^T``; m = tokens
batch_size     1      sequences in the attention call
query_len      tok    new (query) tokens per sequence (prefill: prompt; decode: 1)
kv_len         tok    tokens already in the KV cache per sequence before the call
num_heads      1      query heads per GPU (after TP)
num_kv_heads   1      KV heads per GPU (after TP)
head_dim       1      head dimension
window_size    tok    sliding-window length, 0 = full attention
num_tokens     tok    tokens entering the op on this GPU (MoE, elementwise, a2a)
hidden_size    1      model hidden size (MoE, elementwise, a2a)
inter_size     1      MoE expert intermediate size (per expert, before TP)
num_experts    1      routed experts (global)
topk           1      experts per token
tp             1      tensor-parallel degree the shapes correspond to
ep             1      expert-parallel degree
moe_alpha      1      router skew: power-law exponent of expert popularity,
                      0 = balanced
num_gpus       1      GPUs taking part in a collective
num_nodes      1      nodes spanned by a collective
message_bytes  B      payload per GPU of a collective (elements x dtype bytes)
latency_s      s      measured time of ONE call on one GPU (always seconds)
============== ====== ===========================================================

Which features must be present (non-NaN) for which family is in
:data:`FAMILY_FEATURES`; :func:`validate_measurements` enforces it.

Sources
-------
:func:`load_aiconfigurator` reads NVIDIA AIConfigurator's per-op parquet tables
(latency in ms per op, except ``moe_a2a`` in µs); :func:`load_vidur` reads Vidur's
``mlp.csv`` and network CSVs (ms per op, median of repeats). :func:`read_measurements`
reads a CSV/Parquet already in this schema (accepting ``latency_ms``/``latency_us``).
Details and caveats are in ``docs/measurements.md``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "AIC_SYSTEM_TO_GPU",
    "FAMILY_FEATURES",
    "LATENCY_UNIT_COLUMNS",
    "MEASUREMENT_COLUMNS",
    "OP_FAMILIES",
    "ColumnSpec",
    "MeasurementError",
    "empty_measurements",
    "gpu_short_name",
    "load_aiconfigurator",
    "load_vidur",
    "normalize_dtype",
    "read_measurements",
    "validate_measurements",
]


class MeasurementError(ValueError):
    """A measurement table that does not follow the schema, or an unreadable source."""


@dataclass(frozen=True)
class ColumnSpec:
    """Declared type, unit and meaning of one schema column.

    Attributes
    ----------
    dtype : str
        ``"string"`` for identity columns, ``"float64"`` for features and latency.
    unit : str
        Physical unit (``"s"``, ``"B"``, ``"tok"``) or ``"1"`` for counts / labels.
    description : str
        One-line meaning.
    required : bool
        Whether every table must carry the column (features are required per family,
        see :data:`FAMILY_FEATURES`).
    """

    dtype: str
    unit: str
    description: str
    required: bool = False


def _s(description: str, required: bool = False) -> ColumnSpec:
    return ColumnSpec("string", "1", description, required)


def _f(unit: str, description: str, required: bool = False) -> ColumnSpec:
    return ColumnSpec("float64", unit, description, required)


MEASUREMENT_COLUMNS: dict[str, ColumnSpec] = {
    "op_family": _s("op kind, one of OP_FAMILIES", required=True),
    "op_name": _s("the source's own op label"),
    "gpu": _s("short GPU name (h100, a100-80gb, ...)", required=True),
    "engine": _s("framework that ran the kernel (vllm, trtllm, sglang, nccl, vidur, ...)",
                 required=True),
    "engine_version": _s("framework / library version (AIC: the version directory)"),
    "engine_build": _s("version string stored in the rows, if any (may be a dev build "
                       "or the version the data was reused from)"),
    "dtype": _s("compute or payload dtype (bf16, fp16, fp8, ...)", required=True),
    "kv_dtype": _s("KV-cache dtype (attention only)"),
    "kernel": _s("kernel or backend the framework dispatched"),
    "source": _s("where the row came from"),
    "moe_distribution": _s("MoE router token distribution label"),
    "m": _f("1", "GEMM rows (tokens)"),
    "n": _f("1", "GEMM output columns"),
    "k": _f("1", "GEMM reduction dimension"),
    "batch_size": _f("1", "sequences in the attention call"),
    "query_len": _f("tok", "new tokens per sequence"),
    "kv_len": _f("tok", "tokens already cached per sequence"),
    "num_heads": _f("1", "query heads per GPU"),
    "num_kv_heads": _f("1", "KV heads per GPU"),
    "head_dim": _f("1", "attention head dimension"),
    "window_size": _f("tok", "sliding window, 0 = full attention"),
    "num_tokens": _f("tok", "tokens entering the op on this GPU"),
    "hidden_size": _f("1", "hidden size"),
    "inter_size": _f("1", "MoE expert intermediate size"),
    "num_experts": _f("1", "routed experts (global)"),
    "topk": _f("1", "experts per token"),
    "tp": _f("1", "tensor-parallel degree"),
    "ep": _f("1", "expert-parallel degree"),
    "moe_alpha": _f("1", "power-law exponent of expert popularity, 0 = balanced"),
    "num_gpus": _f("1", "GPUs in the collective"),
    "num_nodes": _f("1", "nodes spanned by the collective"),
    "message_bytes": _f("B", "collective payload per GPU"),
    "latency_s": _f("s", "time of one call on one GPU", required=True),
}

STRING_COLUMNS: tuple[str, ...] = tuple(
    c for c, spec in MEASUREMENT_COLUMNS.items() if spec.dtype == "string"
)
FLOAT_COLUMNS: tuple[str, ...] = tuple(
    c for c, spec in MEASUREMENT_COLUMNS.items() if spec.dtype == "float64"
)

_ATTENTION_FEATURES = ("batch_size", "query_len", "kv_len", "num_heads", "num_kv_heads",
                       "head_dim")
_COLLECTIVE_FEATURES = ("num_gpus", "message_bytes")

#: Feature columns that must be present and finite for each op family.
FAMILY_FEATURES: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": _ATTENTION_FEATURES,
    "attention_decode": _ATTENTION_FEATURES,
    "moe": ("num_tokens", "hidden_size", "inter_size", "num_experts", "topk"),
    "moe_dispatch": ("num_tokens", "hidden_size", "num_experts", "topk", "ep"),
    "moe_combine": ("num_tokens", "hidden_size", "num_experts", "topk", "ep"),
    "allreduce": _COLLECTIVE_FEATURES,
    "allgather": _COLLECTIVE_FEATURES,
    "reduce_scatter": _COLLECTIVE_FEATURES,
    "alltoall": _COLLECTIVE_FEATURES,
    "p2p": _COLLECTIVE_FEATURES,
    "elementwise": ("num_tokens", "hidden_size"),
    "norm": ("num_tokens", "hidden_size"),
    "rope": ("num_tokens", "num_heads", "num_kv_heads", "head_dim"),
    "embedding": ("num_tokens", "hidden_size"),
}

#: The op families a measurement row may have.
OP_FAMILIES: tuple[str, ...] = tuple(FAMILY_FEATURES)

#: Accepted latency columns and their factor to seconds.
LATENCY_UNIT_COLUMNS: dict[str, float] = {
    "latency_s": 1.0,
    "latency_ms": 1e-3,
    "latency_us": 1e-6,
}

#: AIConfigurator system directory -> our GPU short name.
AIC_SYSTEM_TO_GPU: dict[str, str] = {
    "h100_sxm": "h100",
    "h100_pcie": "h100-pcie",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "a100_sxm": "a100-80gb",
    "a100_pcie": "a100-80gb-pcie",
    "a30": "a30",
    "l40s": "l40s",
    "l4": "l4",
    "b60": "arc-pro-b60",
    "rtx_pro_6000_server": "rtx-pro-6000",
}

# torch.cuda.get_device_name() strings (lower case) -> short name.
_DEVICE_NAME_TO_GPU: dict[str, str] = {
    "nvidia h100 80gb hbm3": "h100",
    "nvidia h100": "h100",
    "nvidia h100 pcie": "h100-pcie",
    "nvidia h100 nvl": "h100-nvl",
    "nvidia h200": "h200",
    "nvidia b200": "b200",
    "nvidia a100-sxm4-80gb": "a100-80gb",
    "nvidia a100-sxm4-40gb": "a100-40gb",
    "nvidia a100 80gb pcie": "a100-80gb-pcie",
    "nvidia l40s": "l40s",
    "nvidia l4": "l4",
    "intel(r) arc(tm) pro b60 graphics": "arc-pro-b60",
    "intel(r) graphics [0xe211]": "arc-pro-b60",  # PCI id of the Arc Pro B60
}

# Vidur device / node directory names -> short name (see docs/measurements.md).
_VIDUR_DEVICE_TO_GPU: dict[str, str] = {
    "a100": "a100-80gb",
    "h100": "h100",
    "a40": "a40",
}
_VIDUR_NODE_TO_GPU: dict[str, str] = {
    "a100_dgx": "a100-80gb",
    "h100_dgx": "h100",
    "a100_pairwise_nvlink": "a100-80gb-pcie",
    "h100_pairwise_nvlink": "h100-nvl",
    "a40_pairwise_nvlink": "a40",
}

_KNOWN_SHORT_NAMES = frozenset(
    set(AIC_SYSTEM_TO_GPU.values()) | set(_DEVICE_NAME_TO_GPU.values())
    | set(_VIDUR_NODE_TO_GPU.values()) | {"a100-40gb"}
)


def gpu_short_name(name: str) -> str:
    """Our short GPU name for an AIC system name, a CUDA device name, or a short name.

    Parameters
    ----------
    name : str
        ``"h100_sxm"``, ``"NVIDIA H100 80GB HBM3"`` or ``"h100"`` (case-insensitive).

    Returns
    -------
    str
        The short name, e.g. ``"h100"``.

    Raises
    ------
    MeasurementError
        If the name is unknown; the message lists the accepted names.

    Examples
    --------
    >>> gpu_short_name("NVIDIA A100-SXM4-80GB")
    'a100-80gb'
    >>> gpu_short_name("h200_sxm")
    'h200'
    """
    key = str(name).strip().lower()
    if key in _KNOWN_SHORT_NAMES:
        return key
    if key in AIC_SYSTEM_TO_GPU:
        return AIC_SYSTEM_TO_GPU[key]
    if key in _DEVICE_NAME_TO_GPU:
        return _DEVICE_NAME_TO_GPU[key]
    valid = sorted(_KNOWN_SHORT_NAMES | set(AIC_SYSTEM_TO_GPU) | set(_DEVICE_NAME_TO_GPU))
    raise MeasurementError(f"unknown GPU name {name!r}; known names: {valid}")


_DTYPE_ALIASES: dict[str, str] = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "half": "fp16",
    "float16": "fp16",
    "fp16": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
    "fp8": "fp8",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "int8": "int8",
    "sq": "int8_sq",
}

#: Bytes per element of the payload dtypes that appear in collective tables.
_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1}


def normalize_dtype(name: str) -> str:
    """Normalise a source's dtype label (``"bfloat16"`` -> ``"bf16"``, ``"half"`` -> ``"fp16"``).

    Labels without an alias (``"fp8_block"``, ``"nvfp4"``, ``"int4_wo"``, ...) are
    returned lower-cased and unchanged.

    Examples
    --------
    >>> normalize_dtype("bfloat16"), normalize_dtype("half"), normalize_dtype("sq")
    ('bf16', 'fp16', 'int8_sq')
    """
    key = str(name).strip().lower()
    return _DTYPE_ALIASES.get(key, key)


def _dtype_bytes(dtype: str, where: str) -> int:
    try:
        return _DTYPE_BYTES[dtype]
    except KeyError:
        raise MeasurementError(
            f"{where}: cannot convert elements to bytes for dtype {dtype!r}; "
            f"known payload dtypes: {sorted(_DTYPE_BYTES)}"
        ) from None


# ----------------------------------------------------------------------------- schema


def empty_measurements() -> pd.DataFrame:
    """An empty table with every schema column and its dtype."""
    return _conform(pd.DataFrame(index=pd.RangeIndex(0)))


def _as_category(values, n: int) -> pd.Categorical:
    """A categorical of length ``n`` from a scalar string or an array of labels ('' for NA)."""
    if values is None or isinstance(values, str):
        return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[values or ""])
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        cat = pd.Categorical(values)
        if cat.isna().any():
            if "" not in cat.categories:
                cat = cat.add_categories([""])
            cat = cat.fillna("")
        if all(isinstance(c, str) for c in cat.categories):
            return cat
        values = np.asarray(cat.astype(str), dtype=object)
    codes, uniques = pd.factorize(pd.Series(values, copy=False))  # NA -> -1
    labels = [str(u) for u in uniques]
    if (codes < 0).any():
        if "" not in labels:
            labels.append("")
        codes = np.where(codes < 0, labels.index(""), codes)
    if len(set(labels)) != len(labels):  # distinct values with equal str(), e.g. 1 and "1"
        return pd.Categorical(np.asarray(labels, dtype=object)[codes])
    return pd.Categorical.from_codes(codes, categories=labels)


def _assemble(parts: list[dict], lengths: list[int]) -> pd.DataFrame:
    """Concatenate column dicts (arrays or scalar strings) into one schema-ordered table.

    String columns become categoricals (merged with ``union_categoricals``), schema
    float columns float64 with NaN where a part lacks them. Columns outside the schema
    are kept after the schema columns.
    """
    from pandas.api.types import union_categoricals

    total = int(sum(lengths))
    names = list(MEASUREMENT_COLUMNS)
    for part in parts:
        names += [c for c in part if c not in names]
    out: dict[str, object] = {}
    for col in names:
        is_float = col in FLOAT_COLUMNS or (
            col not in STRING_COLUMNS
            and any(col in p and _is_numeric(p[col]) for p in parts)
        )
        if is_float:
            chunks = [np.asarray(p[col], dtype=np.float64) if col in p
                      else np.full(n, np.nan) for p, n in zip(parts, lengths, strict=True)]
            out[col] = np.concatenate(chunks) if chunks else np.empty(0)
        else:
            cats = [_as_category(p.get(col), n) for p, n in zip(parts, lengths, strict=True)]
            out[col] = (union_categoricals(cats) if cats
                        else pd.Categorical.from_codes([], categories=[""]))
    return pd.DataFrame(out, index=pd.RangeIndex(total))


def _is_numeric(values) -> bool:
    if isinstance(values, str) or values is None:
        return False
    dtype = getattr(values, "dtype", None)
    return dtype is not None and (np.issubdtype(dtype, np.number)
                                  if isinstance(dtype, np.dtype) else
                                  pd.api.types.is_numeric_dtype(dtype))


def _conform(df: pd.DataFrame) -> pd.DataFrame:
    """Add missing schema columns (NaN / empty string), cast dtypes, order columns.

    String columns become categoricals with ``""`` for missing values; extra columns
    are kept after the schema columns.
    """
    part = {}
    for col in df.columns:
        if col in FLOAT_COLUMNS:
            part[col] = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        elif col in STRING_COLUMNS:
            part[col] = _as_category(df[col], len(df))
        else:
            part[col] = df[col].to_numpy()
    return _assemble([part], [len(df)])


def _rows(mask: np.ndarray, limit: int = 10) -> str:
    idx = np.flatnonzero(mask)
    shown = ", ".join(str(i) for i in idx[:limit])
    more = f" and {len(idx) - limit} more" if len(idx) > limit else ""
    return f"rows [{shown}]{more}"


def validate_measurements(
    df: pd.DataFrame, source: str = "measurements", min_rows: int = 1
) -> pd.DataFrame:
    """Check a table against the schema; return it unchanged if it passes.

    Parameters
    ----------
    df : pandas.DataFrame
        Candidate table.
    source : str
        Name used in error messages (a file path, ``"aiconfigurator"`` ...).
    min_rows : int
        Fewest rows a fit needs. Checked for the whole table and for every
        ``(op_family, gpu)`` group in it.

    Returns
    -------
    pandas.DataFrame
        ``df`` itself.

    Raises
    ------
    MeasurementError
        Naming, in this order: missing required columns (and any latency column in an
        unknown unit), unknown op families, missing family features (column or NaN
        rows), negative / non-finite latencies (with 0-based row positions), and
        too few rows.
    """
    if min_rows < 0:
        raise MeasurementError(f"min_rows must be >= 0, got {min_rows!r}")
    cols = set(df.columns)
    missing = [c for c, spec in MEASUREMENT_COLUMNS.items() if spec.required and c not in cols]
    if missing:
        msg = f"{source}: missing required column(s) {missing}"
        if "latency_s" in missing:
            other = sorted(c for c in cols if c.lower().startswith("latency"))
            if other:
                msg += (f"; found latency column(s) {other} in an unknown unit, "
                        f"accepted latency columns: {sorted(LATENCY_UNIT_COLUMNS)}")
        raise MeasurementError(msg)

    family = df["op_family"]
    present = sorted({str(f) for f in family.unique()})
    bad_family = sorted(set(present) - set(OP_FAMILIES))
    if bad_family:
        raise MeasurementError(
            f"{source}: unknown op_family value(s) {bad_family} "
            f"({_rows(~family.isin(OP_FAMILIES).to_numpy())}); valid: {list(OP_FAMILIES)}"
        )

    problems = []
    for fam in present:
        in_fam = (family.astype(str) == fam).to_numpy() if family.dtype == object \
            else (family == fam).to_numpy()
        for feat in FAMILY_FEATURES[fam]:
            if feat not in cols:
                problems.append(f"column {feat!r} (needed by op_family {fam!r}) is missing")
                continue
            values = pd.to_numeric(df[feat], errors="coerce").to_numpy(dtype=np.float64)
            bad = in_fam & ~np.isfinite(values)
            if bad.any():
                problems.append(f"{feat!r} is NaN/non-numeric for op_family {fam!r} in "
                                f"{_rows(bad)}")
    if problems:
        raise MeasurementError(f"{source}: " + "; ".join(problems))

    lat = pd.to_numeric(df["latency_s"], errors="coerce").to_numpy(dtype=np.float64)
    nonfinite = ~np.isfinite(lat)
    if nonfinite.any():
        raise MeasurementError(f"{source}: latency_s is NaN/inf/non-numeric in "
                               f"{_rows(nonfinite)}")
    negative = lat < 0
    if negative.any():
        raise MeasurementError(f"{source}: latency_s is negative in {_rows(negative)} "
                               f"(e.g. {lat[negative][0]!r})")

    if len(df) < min_rows:
        raise MeasurementError(f"{source}: {len(df)} rows, fewer than min_rows={min_rows}")
    if len(df):
        sizes = df.groupby(["op_family", "gpu"], sort=True, observed=True).size()
        small = sizes[sizes < min_rows]
        if len(small):
            groups = ", ".join(f"{f}/{g}: {c}" for (f, g), c in small.items())
            raise MeasurementError(f"{source}: (op_family/gpu) groups with fewer than "
                                   f"min_rows={min_rows} rows: {groups}")
    return df


def read_measurements(path: str | Path, min_rows: int = 1) -> pd.DataFrame:
    """Read a CSV or Parquet file in the measurement schema.

    A ``latency_ms`` or ``latency_us`` column is accepted in place of ``latency_s``
    and converted. Missing optional columns are added (NaN / empty string).

    Parameters
    ----------
    path : str or Path
        ``*.csv`` or ``*.parquet`` / ``*.pq``.
    min_rows : int
        Passed to :func:`validate_measurements`.

    Returns
    -------
    pandas.DataFrame
        The validated table, schema columns first.

    Raises
    ------
    MeasurementError
        Unknown file suffix, an unknown latency unit column (the message lists the
        accepted ones), or any schema violation.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        df = pd.read_csv(path, keep_default_na=True)
    elif suffix in (".parquet", ".pq"):
        df = pd.read_parquet(path)
    else:
        raise MeasurementError(f"{path}: unknown file type {suffix!r}; "
                               f"valid: ['.csv', '.parquet', '.pq']")
    latency_cols = [c for c in df.columns if str(c).lower().startswith("latency")]
    known = [c for c in latency_cols if c in LATENCY_UNIT_COLUMNS]
    unknown = [c for c in latency_cols if c not in LATENCY_UNIT_COLUMNS]
    if unknown:
        raise MeasurementError(f"{path}: latency column(s) {unknown} in an unknown unit; "
                               f"accepted latency columns: {sorted(LATENCY_UNIT_COLUMNS)}")
    if len(known) > 1:
        raise MeasurementError(f"{path}: more than one latency column {known}; keep one of "
                               f"{sorted(LATENCY_UNIT_COLUMNS)}")
    if known and known[0] != "latency_s":
        col = known[0]
        df = df.copy()
        values = pd.to_numeric(df.pop(col), errors="coerce")
        df["latency_s"] = values * LATENCY_UNIT_COLUMNS[col]
    for col in ("op_family", "gpu", "engine", "dtype"):
        if col in df.columns:
            df[col] = df[col].astype(str)
    missing = [c for c, s in MEASUREMENT_COLUMNS.items() if s.required and c not in df.columns]
    if missing:  # report before _conform fills them in
        validate_measurements(df, source=str(path), min_rows=min_rows)
    out = _conform(df)
    return validate_measurements(out, source=str(path), min_rows=min_rows)


# ----------------------------------------------------------------------- AIConfigurator

_AIC_ENGINES = ("vllm", "trtllm", "sglang", "nccl", "oneccl")

# op_family -> (AIC op-family dir, table file name, framework dirs it can live under)
_AIC_TABLES: dict[str, tuple[str, str]] = {
    "gemm": ("gemm", "gemm_perf.parquet"),
    "attention_prefill": ("attention", "context_attention_perf.parquet"),
    "attention_decode": ("attention", "generation_attention_perf.parquet"),
    "moe": ("moe", "moe_perf.parquet"),
    "custom_allreduce": ("comm", "custom_allreduce_perf.parquet"),
    "nccl": ("comm", "nccl_perf.parquet"),
    "oneccl": ("comm", "oneccl_perf.parquet"),
    "moe_a2a": ("comm", "moe_a2a_perf.parquet"),
}
_AIC_FAMILY_TABLES: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm",),
    "attention_prefill": ("attention_prefill",),
    "attention_decode": ("attention_decode",),
    "moe": ("moe",),
    "allreduce": ("custom_allreduce", "nccl", "oneccl"),
    "allgather": ("nccl", "oneccl"),
    "reduce_scatter": ("nccl", "oneccl"),
    "alltoall": ("nccl", "oneccl"),
    "moe_dispatch": ("moe_a2a",),
    "moe_combine": ("moe_a2a",),
}
_COLLECTIVE_OP_TO_FAMILY = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
}


def _as_set(values: Iterable[str] | str | None, name: str, valid: Iterable[str] | None):
    if values is None:
        return None
    items = {values} if isinstance(values, str) else set(values)
    items = {str(v) for v in items}
    if valid is not None:
        valid = set(valid)
        bad = sorted(items - valid)
        if bad:
            raise MeasurementError(f"{name} given invalid value(s) {bad}; valid: {sorted(valid)}")
    return items


def _aic_current_versions(systems_dir: Path, system: str) -> dict[str, set[str]]:
    """The versions AIC queries for one system (``query_versions.yaml``; NCCL from yaml)."""
    import yaml  # local import: only needed for versions="current"

    result: dict[str, set[str]] = {}
    qfile = systems_dir / "query_versions.yaml"
    if qfile.is_file():
        q = yaml.safe_load(qfile.read_text()) or {}
        merged = dict(q.get("defaults") or {})
        merged.update((q.get("overrides") or {}).get(system) or {})
        for fw, slot in merged.items():
            if isinstance(slot, Mapping) and slot.get("current"):
                result[str(fw)] = {str(slot["current"])}
    sfile = systems_dir / f"{system}.yaml"
    if sfile.is_file():
        spec = yaml.safe_load(sfile.read_text()) or {}
        ver = (spec.get("misc") or {}).get("nccl_version")
        if ver:
            result["nccl"] = {str(ver)}
    return result


def _col(d: pd.DataFrame, name: str) -> np.ndarray:
    return d[name].to_numpy(dtype=np.float64)


def _cat_map(series: pd.Series, func) -> pd.Categorical:
    """Map the categories of a (categorical) label column; ``None`` results become NA."""
    cat = pd.Categorical(series)
    mapped = [func(str(c)) for c in cat.categories]
    uniq = list(dict.fromkeys(m for m in mapped if m is not None))
    where = {m: i for i, m in enumerate(uniq)}
    lookup = np.array([where.get(m, -1) if m is not None else -1 for m in mapped] + [-1])
    return pd.Categorical.from_codes(lookup[cat.codes], categories=uniq or [""])


def _cat_values(series: pd.Series, func) -> np.ndarray:
    """Float values computed once per category of a label column (NaN for NA)."""
    cat = pd.Categorical(series)
    lookup = np.array([func(str(c)) for c in cat.categories] + [np.nan], dtype=np.float64)
    return lookup[cat.codes]


def _dtype_col(d: pd.DataFrame, name: str) -> pd.Categorical:
    return _cat_map(d[name], normalize_dtype)


def _power_law_alpha(label: str) -> float:
    if label == "balanced":
        return 0.0
    match = re.fullmatch(r"power_law_([0-9.]+)", label)
    return float(match.group(1)) if match else np.nan


def _aic_convert(table: str, d: pd.DataFrame, where: str, families: set[str] | None):
    """Map one AIC table to a dict of schema columns (``_rows``: the rows kept)."""
    if table == "gemm":
        return {"op_family": "gemm", "dtype": _dtype_col(d, "gemm_dtype"),
                "m": _col(d, "m"), "n": _col(d, "n"), "k": _col(d, "k"),
                "latency_s": _col(d, "latency") * 1e-3}
    if table in ("attention_prefill", "attention_decode"):
        if "beam_width" in d.columns:
            d = d[d["beam_width"].to_numpy() == 1]
        window = _col(d, "window_size") if "window_size" in d.columns else np.zeros(len(d))
        return {"op_family": table, "dtype": _dtype_col(d, "attn_dtype"),
                "kv_dtype": _dtype_col(d, "kv_cache_dtype"),
                "batch_size": _col(d, "batch_size"), "query_len": _col(d, "isl"),
                "kv_len": _col(d, "step"), "num_heads": _col(d, "num_heads"),
                "num_kv_heads": _col(d, "num_key_value_heads"),
                "head_dim": _col(d, "head_dim"), "window_size": window,
                "latency_s": _col(d, "latency") * 1e-3, "_rows": d}
    if table == "moe":
        alpha = _cat_values(d["distribution"], _power_law_alpha)
        if np.isnan(alpha).any():
            bad = sorted({str(x) for x in d["distribution"][np.isnan(alpha)].unique()})
            warnings.warn(f"{where}: unrecognised MoE distribution label(s) {bad}; "
                          f"moe_alpha left NaN", stacklevel=3)
        return {"op_family": "moe", "dtype": _dtype_col(d, "moe_dtype"),
                "num_tokens": _col(d, "num_tokens"), "hidden_size": _col(d, "hidden_size"),
                "inter_size": _col(d, "inter_size"), "num_experts": _col(d, "num_experts"),
                "topk": _col(d, "topk"), "tp": _col(d, "moe_tp_size"),
                "ep": _col(d, "moe_ep_size"), "moe_distribution": pd.Categorical(d["distribution"]),
                "moe_alpha": alpha, "latency_s": _col(d, "latency") * 1e-3}
    if table in ("custom_allreduce", "nccl", "oneccl"):
        dcol = next(c for c in d.columns if c.endswith("_dtype"))
        dtype = _dtype_col(d, dcol)
        nbytes = _cat_values(pd.Series(dtype), lambda t: _dtype_bytes(t, where))
        fam = _cat_map(d["op_name"], _COLLECTIVE_OP_TO_FAMILY.get)
        unmapped = np.asarray(fam.isna())
        if unmapped.any():
            bad = sorted({str(x) for x in d["op_name"][unmapped].unique()})
            warnings.warn(f"{where}: skipping rows with unmapped collective op(s) {bad}",
                          stacklevel=3)
        keep = ~unmapped
        if families is not None:
            keep &= np.asarray(fam.isin(sorted(families)))
        d = d[keep]
        out = {"op_family": fam[keep], "dtype": dtype[keep],
               "num_gpus": _col(d, "num_gpus"),
               "message_bytes": _col(d, "message_size") * nbytes[keep],
               "latency_s": _col(d, "latency") * 1e-3, "_rows": d}
        if table == "custom_allreduce" and "backend" in d.columns:
            out["kernel"] = pd.Categorical(d["backend"])
        return out
    if table == "moe_a2a":
        fam = _cat_map(d["phase"], {"dispatch": "moe_dispatch", "combine": "moe_combine"}.get)
        keep = ~np.asarray(fam.isna())
        if families is not None:
            keep &= np.asarray(fam.isin(sorted(families)))
        d = d[keep]
        return {"op_family": fam[keep],
                "dtype": _dtype_col(d, "comm_dtype"),
                "num_tokens": _col(d, "num_tokens"), "hidden_size": _col(d, "hidden_size"),
                "num_experts": _col(d, "num_experts"), "topk": _col(d, "topk"),
                "ep": _col(d, "ep_size"), "num_gpus": _col(d, "ep_size"),
                "num_nodes": _col(d, "node_num"),
                "kernel": pd.Categorical(d["comm_backend"]),
                # moe_a2a latency is in microseconds, unlike every other AIC table
                "latency_s": _col(d, "latency") * 1e-6, "_rows": d}
    raise AssertionError(table)  # pragma: no cover


def load_aiconfigurator(
    root: str | Path,
    systems: Iterable[str] | str | None = None,
    families: Iterable[str] | str | None = None,
    engines: Iterable[str] | str | None = None,
    versions: Iterable[str] | str | None = None,
    min_rows: int = 1,
) -> pd.DataFrame:
    """Import AIConfigurator's measured per-op tables into the measurement schema.

    Reads ``<root>/systems/data/<system>/<op dir>/<framework>/<version>/<table>.parquet``
    (``root`` may also point at ``systems/`` or ``systems/data/``). Filters are applied
    before any file is opened.

    Parameters
    ----------
    root : str or Path
        The ``aiconfigurator`` data folder.
    systems : str or iterable of str, optional
        AIC system dirs (``"h100_sxm"``) or our GPU short names (``"h100"``).
        Default: every system present.
    families : str or iterable of str, optional
        Our op families to import, a subset of ``gemm, attention_prefill,
        attention_decode, moe, moe_dispatch, moe_combine, allreduce, allgather,
        reduce_scatter, alltoall``. Default: all of them.
    engines : str or iterable of str, optional
        Framework dirs: ``vllm``, ``trtllm``, ``sglang``, ``nccl``, ``oneccl``.
    versions : str or iterable of str, optional
        Version dirs to keep (``"0.24.0"``, ``"2.27.3"``), or ``"current"`` for the
        version AIC itself queries per (system, framework) -- ``query_versions.yaml``,
        and ``misc.nccl_version`` of the system yaml for NCCL; engines without such an
        entry keep every version. Default: every version dir.
    min_rows : int
        Passed to :func:`validate_measurements` (use 0 to allow an empty result).

    Returns
    -------
    pandas.DataFrame
        Schema columns plus ``source`` (relative file path) and ``kernel``
        (``kernel_source``; ``backend`` for the custom all-reduce, which tells graph
        from eager replay; ``comm_backend`` for MoE all-to-all).

    Raises
    ------
    MeasurementError
        If ``root`` has no ``systems/data`` tree, a filter names an unknown value, or
        the result fails validation.

    Notes
    -----
    Unit conversions: ``latency`` is ms per op call -> ``latency_s = latency / 1e3``,
    except ``moe_a2a_perf`` whose ``latency`` is in µs (``/ 1e6``). Collective
    ``message_size`` counts elements; ``message_bytes = message_size x bytes(dtype)``.
    Prefill attention rows get ``query_len = isl`` and ``kv_len = step`` (always 0),
    decode rows ``query_len = isl`` (1) and ``kv_len = step``. Only ``beam_width == 1``
    rows are kept. MoE ``moe_alpha`` is the power-law exponent of the
    ``distribution`` label (``balanced`` -> 0). Not imported: MLA, sparse / linear
    attention, quantize, mHC, wide-EP MoE and DeepEP tables.
    """
    data_dir = _find_aic_data(Path(root))
    systems_dir = data_dir.parent
    present = sorted(p.name for p in data_dir.iterdir() if p.is_dir())
    if systems is not None:
        wanted = {systems} if isinstance(systems, str) else set(systems)
        chosen = []
        valid = set(present) | {AIC_SYSTEM_TO_GPU.get(s, s) for s in present}
        bad = sorted(str(w) for w in wanted if str(w) not in valid)
        if bad:
            raise MeasurementError(f"systems given invalid value(s) {bad}; valid: {sorted(valid)}")
        for s in present:
            if s in wanted or AIC_SYSTEM_TO_GPU.get(s, s) in wanted:
                chosen.append(s)
    else:
        chosen = present
    fam_set = _as_set(families, "families", _AIC_FAMILY_TABLES)
    eng_set = _as_set(engines, "engines", _AIC_ENGINES)
    current = isinstance(versions, str) and versions == "current"
    ver_set = None if current else _as_set(versions, "versions", None)
    tables = sorted({t for f in (fam_set or _AIC_FAMILY_TABLES) for t in _AIC_FAMILY_TABLES[f]})

    parts: list[dict] = []
    lengths: list[int] = []
    for system in chosen:
        gpu = gpu_short_name(system) if system.lower() in AIC_SYSTEM_TO_GPU else system.lower()
        keep_versions = _aic_current_versions(systems_dir, system) if current else None
        for table in tables:
            op_dir, fname = _AIC_TABLES[table]
            for path in sorted((data_dir / system / op_dir).glob(f"*/*/{fname}")):
                engine, version = path.parent.parent.name, path.parent.name
                if eng_set is not None and engine not in eng_set:
                    continue
                if ver_set is not None and version not in ver_set:
                    continue
                if keep_versions is not None and engine in keep_versions \
                        and version not in keep_versions[engine]:
                    continue
                rel = path.relative_to(systems_dir.parent).as_posix()
                part = _read_aic_table(path, table, rel, fam_set)
                if part is None:
                    continue
                _check_device(part.pop("_device"), gpu, rel)
                part.update(gpu=gpu, engine=engine, engine_version=version, source=rel)
                parts.append(part)
                lengths.append(len(part["latency_s"]))
    out = _assemble(parts, lengths)
    return validate_measurements(out, source=f"aiconfigurator {data_dir}", min_rows=min_rows)


def _find_aic_data(root: Path) -> Path:
    for cand in (root / "systems" / "data", root / "data", root):
        if cand.name == "data" and cand.parent.name == "systems" and cand.is_dir():
            return cand
    raise MeasurementError(f"{root}: no AIConfigurator 'systems/data' directory found "
                           f"(expected <root>/systems/data/<system>/<family>/<framework>/"
                           f"<version>/*.parquet)")


def _read_aic_table(path: Path, table: str, rel: str, families: set[str] | None):
    schema = pq.read_schema(path)
    labels = [f.name for f in schema
              if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    d = pq.read_table(path, read_dictionary=labels).to_pandas()
    if "latency" not in d.columns:
        raise MeasurementError(f"{rel}: no 'latency' column; columns: {list(d.columns)}")
    part = _aic_convert(table, d, rel, families)
    rows = part.pop("_rows", d)
    if len(rows) == 0:
        return None
    if "kernel" not in part and "kernel_source" in rows.columns:
        part["kernel"] = pd.Categorical(rows["kernel_source"])
    part["op_name"] = pd.Categorical(rows["op_name"])
    if "version" in rows.columns:
        part["engine_build"] = pd.Categorical(rows["version"])
    part["_device"] = ([str(x) for x in rows["device"].unique()]
                       if "device" in rows.columns else [])
    return part


def _check_device(devices, gpu: str, rel: str) -> None:
    for dev in devices:
        try:
            short = gpu_short_name(dev)
        except MeasurementError:
            warnings.warn(f"{rel}: unrecognised device name {dev!r}; rows kept as {gpu!r}",
                          stacklevel=3)
            continue
        if short != gpu:
            warnings.warn(f"{rel}: device {dev!r} ({short}) differs from the system "
                          f"directory's GPU {gpu!r}; rows kept as {gpu!r}", stacklevel=3)


# -------------------------------------------------------------------------------- Vidur

_LFS_PREFIX = b"version https://git-lfs"

# Vidur mlp.csv op -> op_family
_VIDUR_OPS: dict[str, str] = {
    "attn_pre_proj": "gemm",
    "attn_post_proj": "gemm",
    "mlp_up_proj": "gemm",
    "mlp_down_proj": "gemm",
    "mlp_act": "elementwise",
    "add": "elementwise",
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "attn_rope": "rope",
    "emb": "embedding",
}


def _is_lfs_pointer(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(len(_LFS_PREFIX)) == _LFS_PREFIX


def load_vidur(
    root: str | Path,
    statistic: str = "median",
    engine_version: str = "7d47513",
    min_rows: int = 1,
) -> pd.DataFrame:
    """Import Vidur's measured profiles (``profiling/compute/**/mlp.csv`` and network CSVs).

    Parameters
    ----------
    root : str or Path
        The ``vidur`` data folder (holding ``profiling/``), or ``profiling/`` itself.
    statistic : {"median", "mean", "min", "max"}
        Which ``time_stats.<op>.<statistic>`` to use. Vidur trains on the median.
    engine_version : str
        Recorded as ``engine_version`` (the microsoft/vidur snapshot the copy is from).
    min_rows : int
        Passed to :func:`validate_measurements`.

    Returns
    -------
    pandas.DataFrame
        Schema rows with ``engine = "vidur"``, ``dtype = "fp16"`` and a ``model``
        column (``org/name``) kept as an extra.

    Raises
    ------
    MeasurementError
        If ``root`` has no ``profiling`` folder or ``statistic`` is invalid.

    Notes
    -----
    ``mlp.csv`` times are ms for one call of one op of one layer on one GPU of a TP
    group; shapes are derived from the model columns with ``d = n_embd / n_head``:
    QKV GEMM ``n = (n_head + 2 n_kv_head) d / tp, k = n_embd``; O GEMM ``n = n_embd,
    k = n_head d / tp``; up GEMM ``n = (2 if gated else 1) n_expanded_embd / tp``; down
    GEMM ``n = n_embd, k = n_expanded_embd / tp``; ``m = num_tokens``. Element-wise,
    norm, rope and embedding rows carry ``num_tokens`` and the width they act on.
    Network ``size`` is a count of fp16 elements (``message_bytes = 2 size``).
    Git-LFS pointer files are skipped with a warning; ``attention.csv`` files are
    never imported (the real ones are not in this copy; any present may be the
    synthetic stand-in).
    """
    if statistic not in ("median", "mean", "min", "max"):
        raise MeasurementError(f"statistic given an invalid value: {statistic!r}; "
                               f"valid: ['median', 'mean', 'min', 'max']")
    root = Path(root)
    prof = root if root.name == "profiling" else root / "profiling"
    if not prof.is_dir():
        raise MeasurementError(f"{root}: no Vidur 'profiling' directory found")
    parts = []
    for path in sorted(prof.glob("compute/*/*/*/*.csv")):
        rel = path.relative_to(prof.parent).as_posix()
        if _is_lfs_pointer(path):
            warnings.warn(f"{rel}: Git-LFS pointer, not data; skipped", stacklevel=2)
            continue
        if path.name != "mlp.csv":
            warnings.warn(f"{rel}: only mlp.csv is imported from compute/; skipped",
                          stacklevel=2)
            continue
        device = path.parent.parent.parent.name
        gpu = _VIDUR_DEVICE_TO_GPU.get(device, device)
        model = f"{path.parent.parent.name}/{path.parent.name}"
        frame = _vidur_mlp(pd.read_csv(path), statistic, gpu, model, rel)
        parts.append({c: frame[c].to_numpy() for c in frame.columns})
    for path in sorted(prof.glob("network/*/*.csv")):
        rel = path.relative_to(prof.parent).as_posix()
        if _is_lfs_pointer(path):
            warnings.warn(f"{rel}: Git-LFS pointer, not data; skipped", stacklevel=2)
            continue
        if path.name not in ("all_reduce.csv", "send_recv.csv"):
            warnings.warn(f"{rel}: not a network profile; skipped", stacklevel=2)
            continue
        node = path.parent.name
        gpu = _VIDUR_NODE_TO_GPU.get(node, node)
        frame = _vidur_network(pd.read_csv(path), statistic, gpu, rel)
        parts.append({c: frame[c].to_numpy() for c in frame.columns})
    for part in parts:
        part.update(engine="vidur", engine_version=engine_version, dtype="fp16")
    out = _assemble(parts, [len(p["latency_s"]) for p in parts])
    return validate_measurements(out, source=f"vidur {prof}", min_rows=min_rows)


def _vidur_mlp(d: pd.DataFrame, stat: str, gpu: str, model: str, rel: str) -> pd.DataFrame:
    need = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp",
            "num_tokens", "num_tensor_parallel_workers"]
    missing = [c for c in need if c not in d.columns]
    if missing:
        raise MeasurementError(f"{rel}: missing column(s) {missing}")
    tokens = _col(d, "num_tokens")
    tp = _col(d, "num_tensor_parallel_workers")
    n_head, n_kv = _col(d, "n_head"), _col(d, "n_kv_head")
    embd, inter = _col(d, "n_embd"), _col(d, "n_expanded_embd")
    gated = d["use_gated_mlp"].astype(str).str.lower().isin(["true", "1"]).to_numpy()
    head_dim = embd / n_head
    shapes = {
        "attn_pre_proj": dict(m=tokens, n=(n_head + 2 * n_kv) * head_dim / tp, k=embd),
        "attn_post_proj": dict(m=tokens, n=embd, k=n_head * head_dim / tp),
        "mlp_up_proj": dict(m=tokens, n=np.where(gated, 2.0, 1.0) * inter / tp, k=embd),
        "mlp_down_proj": dict(m=tokens, n=embd, k=inter / tp),
        "mlp_act": dict(num_tokens=tokens, hidden_size=inter / tp),
        "add": dict(num_tokens=tokens, hidden_size=embd),
        "input_layernorm": dict(num_tokens=tokens, hidden_size=embd),
        "post_attention_layernorm": dict(num_tokens=tokens, hidden_size=embd),
        "attn_rope": dict(num_tokens=tokens, num_heads=n_head / tp, num_kv_heads=n_kv / tp,
                          head_dim=head_dim),
        "emb": dict(num_tokens=tokens, hidden_size=embd),
    }
    frames = []
    for op, family in _VIDUR_OPS.items():
        col = f"time_stats.{op}.{stat}"
        if col not in d.columns:
            continue
        lat = _col(d, col) * 1e-3  # Vidur times are ms
        keep = np.isfinite(lat)
        cols = {"op_family": family, "op_name": op, "gpu": gpu, "source": rel,
                "model": model, "tp": tp, "latency_s": lat}
        for key, val in shapes[op].items():
            cols[key] = val
        frames.append(pd.DataFrame(cols)[keep])
    return pd.concat(frames, ignore_index=True)


def _vidur_network(d: pd.DataFrame, stat: str, gpu: str, rel: str) -> pd.DataFrame:
    collective = d["collective"].astype(str)
    fam = collective.map({"all_reduce": "allreduce", "send_recv": "p2p"})
    if fam.isna().any():
        raise MeasurementError(f"{rel}: unknown collective(s) "
                               f"{sorted(set(collective[fam.isna()]))}; "
                               f"valid: ['all_reduce', 'send_recv']")
    lat = np.full(len(d), np.nan)
    for name in collective.unique():
        col = f"time_stats.{name}.{stat}"
        if col not in d.columns:
            raise MeasurementError(f"{rel}: missing column {col!r}")
        mask = (collective == name).to_numpy()
        lat[mask] = _col(d, col)[mask] * 1e-3
    workers = _col(d, "num_workers")
    per_node = _col(d, "devices_per_node")
    return pd.DataFrame({
        "op_family": fam.to_numpy(dtype=object), "op_name": collective.to_numpy(dtype=object),
        "gpu": gpu, "source": rel, "num_gpus": workers,
        "num_nodes": np.ceil(workers / per_node),
        "message_bytes": _col(d, "size") * 2.0,  # fp16 elements
        "latency_s": lat,
    })

