"""Schema of the per-op measurement table: columns, GPU / dtype names, validation, reading.

The schema itself is documented in :mod:`serveplan.estimator.measurements`, which
re-exports everything public here together with the source importers
(:mod:`.measurements_aic`, :mod:`.measurements_vidur`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "AIC_SYSTEM_TO_GPU",
    "FAMILY_FEATURES",
    "FLOAT_COLUMNS",
    "LATENCY_UNIT_COLUMNS",
    "MEASUREMENT_COLUMNS",
    "OP_FAMILIES",
    "STRING_COLUMNS",
    "ColumnSpec",
    "MeasurementError",
    "empty_measurements",
    "gpu_short_name",
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


def _col(d: pd.DataFrame, name: str) -> np.ndarray:
    return d[name].to_numpy(dtype=np.float64)


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
    _check_required_columns(df, source)
    present = _check_families(df, source)
    _check_family_features(df, source, present)
    _check_latency(df, source)
    _check_row_counts(df, source, min_rows)
    return df


def _check_required_columns(df: pd.DataFrame, source: str) -> None:
    """Raise if a required column is missing (naming any latency column in another unit)."""
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


def _check_families(df: pd.DataFrame, source: str) -> list[str]:
    """Raise on unknown ``op_family`` values; return the sorted families present."""
    family = df["op_family"]
    present = sorted({str(f) for f in family.unique()})
    bad_family = sorted(set(present) - set(OP_FAMILIES))
    if bad_family:
        raise MeasurementError(
            f"{source}: unknown op_family value(s) {bad_family} "
            f"({_rows(~family.isin(OP_FAMILIES).to_numpy())}); valid: {list(OP_FAMILIES)}"
        )
    return present


def _check_family_features(df: pd.DataFrame, source: str, present: list[str]) -> None:
    """Raise if a feature a present family needs is missing or NaN in its rows."""
    cols = set(df.columns)
    family = df["op_family"]
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


def _check_latency(df: pd.DataFrame, source: str) -> None:
    """Raise on NaN / infinite / non-numeric / negative ``latency_s``."""
    lat = pd.to_numeric(df["latency_s"], errors="coerce").to_numpy(dtype=np.float64)
    nonfinite = ~np.isfinite(lat)
    if nonfinite.any():
        raise MeasurementError(f"{source}: latency_s is NaN/inf/non-numeric in "
                               f"{_rows(nonfinite)}")
    negative = lat < 0
    if negative.any():
        raise MeasurementError(f"{source}: latency_s is negative in {_rows(negative)} "
                               f"(e.g. {lat[negative][0]!r})")


def _check_row_counts(df: pd.DataFrame, source: str, min_rows: int) -> None:
    """Raise if the table, or any of its (op_family, gpu) groups, has < ``min_rows`` rows."""
    if len(df) < min_rows:
        raise MeasurementError(f"{source}: {len(df)} rows, fewer than min_rows={min_rows}")
    if len(df):
        sizes = df.groupby(["op_family", "gpu"], sort=True, observed=True).size()
        small = sizes[sizes < min_rows]
        if len(small):
            groups = ", ".join(f"{f}/{g}: {c}" for (f, g), c in small.items())
            raise MeasurementError(f"{source}: (op_family/gpu) groups with fewer than "
                                   f"min_rows={min_rows} rows: {groups}")


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
