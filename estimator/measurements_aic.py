"""Import NVIDIA AIConfigurator's per-op parquet tables into the measurement schema.

See :mod:`serveplan.estimator.measurements` for the schema and ``docs/measurements.md``
for the caveats of this source.

Unit conversions: ``latency`` is ms per op call -> ``latency_s = latency / 1e3``,
except ``moe_a2a_perf`` whose ``latency`` is in µs (``/ 1e6``). Collective
``message_size`` counts elements; ``message_bytes = message_size x bytes(dtype)``.
Prefill attention rows get ``query_len = isl`` and ``kv_len = step`` (always 0),
decode rows ``query_len = isl`` (1) and ``kv_len = step``. Only ``beam_width == 1``
rows are kept. MoE ``moe_alpha`` is the power-law exponent of the
``distribution`` label (``balanced`` -> 0). TensorRT-LLM's per-tensor fp8 GEMM rows lose
the dynamic input-scale time of their shape (:func:`_static_input_scale`). Not imported: MLA,
sparse / linear attention, mHC, wide-EP MoE and DeepEP tables, and the quantize tables
(but for that use).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.interpolate import RegularGridInterpolator

from .measurements_schema import (
    AIC_SYSTEM_TO_GPU,
    MeasurementError,
    _assemble,
    _col,
    _dtype_bytes,
    gpu_short_name,
    normalize_dtype,
    validate_measurements,
)

__all__ = ["load_aiconfigurator"]

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
        return _aic_attention(table, d)
    if table == "moe":
        return _aic_moe(d, where)
    if table in ("custom_allreduce", "nccl", "oneccl"):
        return _aic_collective(table, d, where, families)
    if table == "moe_a2a":
        return _aic_moe_a2a(d, families)
    raise AssertionError(table)  # pragma: no cover


def _aic_attention(table: str, d: pd.DataFrame) -> dict:
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


def _aic_moe(d: pd.DataFrame, where: str) -> dict:
    alpha = _cat_values(d["distribution"], _power_law_alpha)
    if np.isnan(alpha).any():
        bad = sorted({str(x) for x in d["distribution"][np.isnan(alpha)].unique()})
        # stacklevel 5: _aic_moe < _aic_convert < _read_aic_table < _aic_system_parts
        # < load_aiconfigurator
        warnings.warn(f"{where}: unrecognised MoE distribution label(s) {bad}; "
                      f"moe_alpha left NaN", stacklevel=5)
    return {"op_family": "moe", "dtype": _dtype_col(d, "moe_dtype"),
            "num_tokens": _col(d, "num_tokens"), "hidden_size": _col(d, "hidden_size"),
            "inter_size": _col(d, "inter_size"), "num_experts": _col(d, "num_experts"),
            "topk": _col(d, "topk"), "tp": _col(d, "moe_tp_size"),
            "ep": _col(d, "moe_ep_size"), "moe_distribution": pd.Categorical(d["distribution"]),
            "moe_alpha": alpha, "latency_s": _col(d, "latency") * 1e-3}


def _aic_collective(table: str, d: pd.DataFrame, where: str,
                    families: set[str] | None) -> dict:
    dcol = next(c for c in d.columns if c.endswith("_dtype"))
    dtype = _dtype_col(d, dcol)
    nbytes = _cat_values(pd.Series(dtype), lambda t: _dtype_bytes(t, where))
    fam = _cat_map(d["op_name"], _COLLECTIVE_OP_TO_FAMILY.get)
    unmapped = np.asarray(fam.isna())
    if unmapped.any():
        bad = sorted({str(x) for x in d["op_name"][unmapped].unique()})
        warnings.warn(f"{where}: skipping rows with unmapped collective op(s) {bad}",
                      stacklevel=5)
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


def _aic_moe_a2a(d: pd.DataFrame, families: set[str] | None) -> dict:
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
    Unit conversions and the tables not imported: see the module docstring.
    """
    data_dir = _find_aic_data(Path(root))
    chosen = _aic_systems(data_dir, systems)
    filters = _aic_filters(families, engines, versions)
    parts: list[dict] = []
    for system in chosen:
        parts += _aic_system_parts(data_dir, system, filters)
    out = _assemble(parts, [len(p["latency_s"]) for p in parts])
    return validate_measurements(out, source=f"aiconfigurator {data_dir}", min_rows=min_rows)


class _AicFilters(NamedTuple):
    """The validated ``families`` / ``engines`` / ``versions`` filters of one import."""

    tables: list[str]
    families: set[str] | None
    engines: set[str] | None
    versions: set[str] | None
    current: bool


def _aic_systems(data_dir: Path, systems: Iterable[str] | str | None) -> list[str]:
    """The AIC system dirs to read: all present, or those named (dir or GPU short name)."""
    present = sorted(p.name for p in data_dir.iterdir() if p.is_dir())
    if systems is None:
        return present
    wanted = {systems} if isinstance(systems, str) else set(systems)
    chosen = []
    valid = set(present) | {AIC_SYSTEM_TO_GPU.get(s, s) for s in present}
    bad = sorted(str(w) for w in wanted if str(w) not in valid)
    if bad:
        raise MeasurementError(f"systems given invalid value(s) {bad}; valid: {sorted(valid)}")
    for s in present:
        if s in wanted or AIC_SYSTEM_TO_GPU.get(s, s) in wanted:
            chosen.append(s)
    return chosen


def _aic_filters(families, engines, versions) -> _AicFilters:
    fam_set = _as_set(families, "families", _AIC_FAMILY_TABLES)
    eng_set = _as_set(engines, "engines", _AIC_ENGINES)
    current = isinstance(versions, str) and versions == "current"
    ver_set = None if current else _as_set(versions, "versions", None)
    tables = sorted({t for f in (fam_set or _AIC_FAMILY_TABLES) for t in _AIC_FAMILY_TABLES[f]})
    return _AicFilters(tables, fam_set, eng_set, ver_set, current)


def _aic_system_parts(data_dir: Path, system: str, filters: _AicFilters) -> list[dict]:
    """Schema column dicts of every table file of one system that passes the filters."""
    systems_dir = data_dir.parent
    gpu = gpu_short_name(system) if system.lower() in AIC_SYSTEM_TO_GPU else system.lower()
    keep_versions = _aic_current_versions(systems_dir, system) if filters.current else None
    parts = []
    for table in filters.tables:
        op_dir, fname = _AIC_TABLES[table]
        for path in sorted((data_dir / system / op_dir).glob(f"*/*/{fname}")):
            engine, version = path.parent.parent.name, path.parent.name
            if filters.engines is not None and engine not in filters.engines:
                continue
            if filters.versions is not None and version not in filters.versions:
                continue
            if keep_versions is not None and engine in keep_versions \
                    and version not in keep_versions[engine]:
                continue
            rel = path.relative_to(systems_dir.parent).as_posix()
            part = _read_aic_table(path, table, rel, filters.families)
            if part is None:
                continue
            if table == "gemm" and engine == "trtllm":
                _static_input_scale(part, path, rel)
            _check_device(part.pop("_device"), gpu, rel)
            part.update(gpu=gpu, engine=engine, engine_version=version, source=rel)
            parts.append(part)
    return parts


#: TensorRT-LLM's per-tensor fp8 GEMM rows were timed without a calibrated input scale
#: (AIC's ``collect_gemm.py`` loads no ``input_scale``), so each row includes the dynamic
#: scale computation (``quantize_e4m3_per_tensor``: an amax pass over the activation) that a
#: served fp8 checkpoint, whose input scales are static, does not run. AIC measures that
#: part on its own (``quantize/<fw>/<version>/computescale_perf.parquet``: dynamic minus
#: static quantisation of an ``[m, k]`` activation).
_COMPUTE_SCALE = ("quantize", "computescale_perf.parquet")


def _static_input_scale(part: dict, gemm_path: Path, rel: str) -> None:
    """Take the dynamic input-scale computation out of TensorRT-LLM's fp8 GEMM rows.

    Each ``fp8`` row loses the compute-scale time of its ``(m, k)``, read from the table of
    the same system and version and interpolated bilinearly in ``(log2 m, log2 k)``
    (exact on AIC's grid, which the GEMM rows share); the rows' ``kernel`` becomes
    ``torch_flow_static_scale``. Without that table the rows are kept as measured, with a
    warning.

    Notes
    -----
    On AIC 0.12.0 the subtraction leaves, at ``m <= 64``, 0.94-0.99x the block-scaled fp8
    GEMM of the same shape (raw rows: 1.15-1.75x) on B200, H100, H200 and L40S, and never
    less than a quarter of a row.
    """
    fp8 = np.asarray(part["dtype"] == "fp8")
    if not fp8.any():
        return
    system_dir = gemm_path.parents[3]
    table = system_dir / _COMPUTE_SCALE[0] / gemm_path.parent.parent.name / \
        gemm_path.parent.name / _COMPUTE_SCALE[1]
    if not table.is_file():
        warnings.warn(f"{rel}: no {table.relative_to(system_dir.parent)}; TensorRT-LLM fp8 "
                      f"GEMM rows kept with their dynamic input scale", stacklevel=4)
        return
    cs = pd.read_parquet(table, columns=["m", "k", "latency"])
    grid = cs.pivot_table(index="m", columns="k", values="latency", aggfunc="mean")
    interp = RegularGridInterpolator(
        (np.log2(grid.index.to_numpy(float)), np.log2(grid.columns.to_numpy(float))),
        grid.to_numpy(float), bounds_error=False, fill_value=None)
    m = np.clip(part["m"][fp8], grid.index.min(), grid.index.max())
    k = np.clip(part["k"][fp8], grid.columns.min(), grid.columns.max())
    scale_s = np.maximum(interp(np.column_stack([np.log2(m), np.log2(k)])), 0.0) * 1e-3
    latency = part["latency_s"].copy()
    latency[fp8] -= scale_s
    if (latency[fp8] <= 0).any():
        raise MeasurementError(f"{rel}: an fp8 GEMM row is not longer than the compute-scale "
                               f"time of its shape in {table.name}; the two tables disagree")
    part["latency_s"] = latency
    kernel = np.asarray(part["kernel"], dtype=object).copy()
    kernel[fp8] = "torch_flow_static_scale"
    part["kernel"] = pd.Categorical(kernel)


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
                          stacklevel=4)
            continue
        if short != gpu:
            warnings.warn(f"{rel}: device {dev!r} ({short}) differs from the system "
                          f"directory's GPU {gpu!r}; rows kept as {gpu!r}", stacklevel=4)
