"""Writing and reading result Datasets as NetCDF, with their kind and units.

Every file serveplan writes carries ``attrs["kind"]`` (one of :data:`KINDS`) and a
``units`` attribute on every numeric variable and coordinate (:func:`stamp`, from the one
table :data:`UNITS`). :func:`read_result` opens a file and checks its kind, so a command
given the wrong file says what it got and which command writes what it needs.

``engine="h5netcdf"`` (NetCDF-4) needs ``h5py``; where it is missing the file is written
as NetCDF-3 by SciPy instead. Both are read back by plain ``xarray.open_dataset``.
Writes are atomic: a temporary file in the same folder is renamed over the target.
"""

from __future__ import annotations

import importlib.util
import os
from numbers import Real
from pathlib import Path

import numpy as np
import xarray as xr

from serveplan.errors import UserError

__all__ = ["KINDS", "UNITS", "check_variables", "missing_units", "netcdf_engine", "read_netcdf",
           "read_result",
           "result_kind", "stamp", "unit_of", "write_netcdf"]

KINDS = {
    "simulate": "serveplan simulate CONFIG --out FILE.nc",
    "goodput": "serveplan goodput CONFIG --out FILE.nc",
    "search": "serveplan search ... --out FILE.nc",
    "sweep": "serveplan sweep GRID --out FILE.nc",
    "pareto": "serveplan pareto RESULT --out FILE.nc",
    "compare-routers": "serveplan compare-routers CONFIG --out FILE.nc",
    "compare": "serveplan compare RESULT ... --out FILE.nc",
}
"""Result kinds and the command that writes each."""

UNITS = {
    # suffixes ("*..."); the longest matching one wins, an exact name beats any suffix
    "*_s": "s", "*_ms": "ms", "*_bytes": "B", "*_tok_s": "tokens/s",
    "*_tok_s_per_gpu": "tokens/s/GPU", "*_per_gpu": "req/s/GPU", "*_len": "tokens",
    "*_tokens": "tokens", "*_tokens_computed": "tokens", "*_rps": "req/s",
    "*goodput": "req/s", "*goodput_low": "req/s", "*goodput_high": "req/s",
    "*_usage": "1", "*_instance": "1", "*_blocks": "blocks", "attainment_*": "1",
    "*_success": "1", "*_gap": "1",
    # request rates and token rates
    "rate": "req/s", "arrival_rate": "req/s", "upper_bound": "req/s",
    "tok_s_per_user": "tokens/s/user", "throughput_per_gpu": "tokens/s/GPU",
    # token counts
    "isl": "tokens", "osl": "tokens", "num_tokens": "tokens", "output_len_requested": "tokens",
    "max_num_batched_tokens": "tokens", "max_model_len": "tokens", "block_size": "tokens",
    "prefix_len": "tokens", "tokens_computed": "tokens",
    # bytes, GPUs, instances, requests, steps
    "kv_bytes": "B", "kv_blocks_used": "blocks", "decide_seconds": "s", "gpus": "GPUs", "tp": "GPUs", "pp": "GPUs", "dp": "GPUs", "ep": "GPUs",
    "tp_prefill": "GPUs", "tp_decode": "GPUs", "num_instances": "instances",
    "count": "instances", "n_prefill": "instances", "n_decode": "instances",
    "batch_size": "requests", "mean_batch_size": "requests", "num_waiting": "requests",
    "num_running": "requests", "requests_served": "requests", "max_num_seqs": "requests",
    "num_requests": "requests", "concurrency": "requests", "num_steps": "steps",
    # dimensionless: fractions, indices, counts of events, seeds
    "utilisation": "1", "slo_attainment": "1", "optimal_assignment": "1",
    "optimal_assignment_requests": "1", "gpu_memory_utilization": "1", "seed": "1",
    "seeds_used": "1", "seeds": "1", "censored": "1", "point": "1", "rank": "1",
    "strategy": "1", "request": "1", "instance": "1",
    "step": "1", "routed_to": "1", "num_preemptions": "1", "percentile": "1", "cv": "1",
    "time_scale": "1", "router": "1",
    # money
    "cost_per_hour": "USD/h", "goodput_per_dollar": "requests/USD", "spend_ratio": "1",
    "cost_efficiency": "1",
}
"""Variable name -> unit. ``1`` is dimensionless (CF convention)."""


def unit_of(name: str) -> str | None:
    """The unit of a variable called ``name`` (grid coordinates that collide with a
    variable are stored as ``<name>_cell``), or None if :data:`UNITS` does not know it."""
    name = name.removesuffix("_cell")
    if name in UNITS:
        return UNITS[name]
    best = None
    for key, unit in UNITS.items():
        if not key.startswith("*") and not key.endswith("*"):
            continue
        pattern = key.strip("*")
        hit = name.endswith(pattern) if key.startswith("*") else name.startswith(pattern)
        if hit and (best is None or len(pattern) > len(best[0])):
            best = (pattern, unit)
    return None if best is None else best[1]


def _numeric(da) -> bool:
    return da.dtype.kind in "iuf" and "flag_values" not in da.attrs


def stamp(ds: xr.Dataset, kind: str) -> xr.Dataset:
    """Copy of ``ds`` with ``attrs["kind"] = kind`` and a ``units`` attribute on every
    numeric variable and coordinate that has none (from :data:`UNITS`)."""
    if kind not in KINDS:
        raise ValueError(f"kind given an invalid value: {kind!r} (valid: {', '.join(KINDS)})")
    out = ds.copy()
    out.attrs["kind"] = kind
    for name in out.variables:
        da = out[name]
        unit = unit_of(str(name))
        if _numeric(da) and "units" not in da.attrs and unit is not None:
            out[name].attrs["units"] = unit
    return out


def missing_units(ds: xr.Dataset) -> list[str]:
    """Numeric variables and coordinates of ``ds`` without a ``units`` attribute."""
    return sorted(str(n) for n in ds.variables if _numeric(ds[n]) and "units" not in ds[n].attrs)


def result_kind(ds: xr.Dataset) -> str | None:
    """``attrs["kind"]``, or for files written before every writer set it, the kind their
    attributes show (None: not a serveplan result)."""
    kind = ds.attrs.get("kind")
    if kind:
        return str(kind)
    markers = (("goodput", "goodput"), ("grid_fields", "sweep"), ("search_seconds", "search"),
               ("summary", "simulate"), ("rows", "compare-routers"))
    return next((k for attr, k in markers if attr in ds.attrs), None)


def netcdf_engine() -> str:
    """``h5netcdf`` when ``h5py`` is importable, else ``scipy`` (NetCDF-3)."""
    return "h5netcdf" if importlib.util.find_spec("h5py") is not None else "scipy"


def write_netcdf(ds: xr.Dataset, path: str | Path, kind: str | None = None) -> Path:
    """Write ``ds`` to ``path`` atomically (parent folders created), stamped with ``kind``
    (default: :func:`result_kind` of ``ds``) and units."""
    kind = kind or result_kind(ds)
    if kind is None:
        raise ValueError("write_netcdf needs a kind: the Dataset has no 'kind' attribute")
    ds = stamp(ds, kind)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        ds.to_netcdf(tmp, engine=netcdf_engine())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_netcdf(path: str | Path) -> xr.Dataset:
    """The Dataset in ``path``, loaded into memory (the file is closed again); a file that
    is not NetCDF is reported by name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with xr.open_dataset(path) as ds:
            return ds.load()
    except (ValueError, OSError, TypeError):
        raise UserError(f"{path} is not a serveplan NetCDF result (xarray cannot read it as "
                        "NetCDF)") from None


def read_result(path: str | Path, kinds: tuple[str, ...], purpose: str) -> xr.Dataset:
    """:func:`read_netcdf` of a result whose kind is one of ``kinds``; otherwise an error
    saying what ``path`` is and which command writes what ``purpose`` needs."""
    ds = read_netcdf(path)
    kind = result_kind(ds)
    if kind in kinds:
        return ds
    need = " or ".join(f"a {k} result ({KINDS[k]})" for k in kinds)
    got = (f"is a {kind} result" if kind else
           "is a NetCDF file but not a serveplan result (no 'kind' attribute)")
    raise UserError(f"{path} {got}; {purpose} needs {need}")


def check_variables(ds: xr.Dataset, path: str | Path, purpose: str, *,
                    numbers: tuple[str, ...] = (), texts: tuple[str, ...] = (),
                    attrs: tuple[str, ...] = (), number_attrs: tuple[str, ...] = ()) -> None:
    """Refuse a result without a variable or attribute ``purpose`` reads, or with other
    values than numbers where it reads numbers (``numbers``: variables, ``number_attrs``:
    attributes): one error naming the file and the name (a file written by another
    serveplan version, or edited)."""
    what = f"a {result_kind(ds) or 'serveplan'} result"
    for name in (*attrs, *number_attrs):
        if name not in ds.attrs:
            raise UserError(f"{path}: {what} without its {name!r} attribute (written by "
                            f"another serveplan version, or edited?); {purpose} reads it")
    for name in (*numbers, *texts):
        if name not in ds.variables:
            raise UserError(f"{path}: {what} without the variable {name!r} (written by "
                            f"another serveplan version, or edited?); {purpose} reads it")
    for name in numbers:
        if ds[name].dtype.kind not in "iuf":
            held = _VALUE_WORDS.get(ds[name].dtype.kind, str(ds[name].dtype))
            raise UserError(f"{path}: variable {name!r} holds {held} values; {purpose} "
                            "reads numbers there")
    for name in number_attrs:
        value = ds.attrs[name]
        if not isinstance(value, Real) or isinstance(value, bool | np.bool_):
            raise UserError(f"{path}: attribute {name!r} is {value!r}, not a number; "
                            f"{purpose} reads a number there")


_VALUE_WORDS = {"U": "text", "S": "text", "O": "text (or mixed)", "b": "true/false",
                "M": "date", "m": "time-span", "c": "complex"}
