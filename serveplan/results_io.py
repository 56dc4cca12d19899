"""Writing and reading result Datasets as NetCDF.

``engine="h5netcdf"`` (NetCDF-4) needs ``h5py``; where it is missing the file is written
as NetCDF-3 by SciPy instead. Both are read back by plain ``xarray.open_dataset``.
Writes are atomic: a temporary file in the same folder is renamed over the target.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import xarray as xr

__all__ = ["netcdf_engine", "read_netcdf", "write_netcdf"]


def netcdf_engine() -> str:
    """``h5netcdf`` when ``h5py`` is importable, else ``scipy`` (NetCDF-3)."""
    return "h5netcdf" if importlib.util.find_spec("h5py") is not None else "scipy"


def write_netcdf(ds: xr.Dataset, path: str | Path) -> Path:
    """Write ``ds`` to ``path`` atomically (parent folders created)."""
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
    """The Dataset in ``path``, loaded into memory (the file is closed again)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with xr.open_dataset(path) as ds:
        return ds.load()
