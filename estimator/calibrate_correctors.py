"""Stage 2 of calibration: residual corrector tables, and the calibrated per-op prediction.

See :mod:`serveplan.estimator.calibrate` (module docstring) for the method; it re-exports
the public names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from serveplan.kernels import roofline as K

from .calibrate_rows import (
    DEFAULT_MOE_DISTRIBUTION,
    MIN_ROWS,
    POWER_LAW_MOE_DISTRIBUTION,
    oracle_dtype,
    select_training_rows,
)
from .catalog import resolve_gpu
from .corrector_fit import GridRegressor
from .correctors import FAMILY_AXES, GridTable, axes_for, find_table
from .opwork import corrector_features, op_times, op_work, phase_of
from .profile import Profile
from .specs import GPUSpec

__all__ = [
    "CORRECTOR_PLAN",
    "CORRECTOR_SETTINGS",
    "corrector_factors",
    "fit_correctors",
    "predict_measurements",
]

_MOE_DTYPES = ("bf16", "fp8", "fp8_block", "nvfp4", "int4")
_POWER_LAW = {"distribution": POWER_LAW_MOE_DISTRIBUTION}

#: Corrector tables fitted per GPU: (family, selection key, values of the key, selection
#: every table of the entry adds); the MoE fp8 kernels the oracle prices:
#: :data:`.correctors.MOE_KERNEL_DTYPE`. MoE tables come twice: on balanced routing
#: (``moe:<dtype>``) and on AIConfigurator's power-law routing
#: (``moe:<dtype>:power_law_1.01``, :attr:`.routing.MoERouting.traffic`).
CORRECTOR_PLAN = (
    ("gemm", "dtype", ("bf16", "fp8", "nvfp4"), {}),
    ("attention_prefill", "kv_dtype", ("bf16", "fp8"), {}),
    ("attention_decode", "kv_dtype", ("bf16", "fp8"), {}),
    ("moe", "dtype", _MOE_DTYPES, {}),
    ("moe", "dtype", _MOE_DTYPES, _POWER_LAW),
    ("allreduce", "phase", ("prefill", "decode"), {}),
    ("alltoall", None, (None,), {}),
)

#: Fit settings per corrector family (see GridRegressor).
CORRECTOR_SETTINGS = {
    "gemm": dict(smooth=0.05, ridge=1e-3, huber=0.05),
    "attention_prefill": dict(smooth=0.05, ridge=1e-3, huber=0.05),
    "attention_decode": dict(smooth=0.05, ridge=1e-3, huber=0.05),
    "moe": dict(smooth=0.1, ridge=1e-3, huber=0.05),
    "allreduce": dict(smooth=0.1, ridge=1e-3, huber=0.05),
    "alltoall": dict(smooth=0.1, ridge=1e-3, huber=0.05),
}


def fit_correctors(df: pd.DataFrame, gpu: GPUSpec, profile: Profile,
                   families: tuple[str, ...] | None = None,
                   min_rows: int = MIN_ROWS) -> dict[str, GridTable]:
    """Fit the residual corrector tables of one GPU against ``profile``'s roofline.

    Parameters
    ----------
    df : pandas.DataFrame
        Measurements of one GPU and engine.
    gpu : GPUSpec
        Its peaks.
    profile : Profile
        The fitted constants; the target is ``log(t_meas / t_profile)``.
    families : tuple of str, optional
        Restrict to these corrector families (default: all of :data:`CORRECTOR_PLAN`).
    min_rows : int
        Fewest rows a table is fitted on.

    Returns
    -------
    dict
        ``"<family>:<key value>" -> GridTable`` for every (family, selection) with at least
        ``min_rows`` rows.
    """
    w = op_work(df, gpu, profile.flash_tile)
    lat = df["latency_s"].to_numpy(dtype=np.float64)
    pred = op_times(w, gpu, profile)
    ok = w.valid & (lat > 0) & np.isfinite(pred) & (pred > 0)
    tables: dict[str, GridTable] = {}
    for family, key, values, extra in CORRECTOR_PLAN:
        if families is not None and family not in families:
            continue
        for value in values:
            select = ({key: value} if key else {}) | extra
            sel = select_training_rows(df, family, **select) & ok
            if sel.sum() < min_rows:
                continue
            names = FAMILY_AXES[family]
            X = corrector_features(df[sel], family, names)
            good = np.all(np.isfinite(X), axis=1)
            X, y = X[good], (np.log(lat[sel]) - np.log(pred[sel]))[good]
            if len(y) < min_rows:
                continue
            reg = GridRegressor(axes=axes_for(names, X), **CORRECTOR_SETTINGS[family])
            reg.fit(X, y)
            name = ":".join([family] + ([str(value)] if key else []) + list(extra.values()))
            tables[name] = reg.to_table(family, select)
    return tables


def _row_selections(df: pd.DataFrame, family: str, phase: np.ndarray) -> pd.DataFrame:
    """The :func:`~.correctors.find_table` selection each row of ``family`` is priced with
    (as the oracle picks), a column per key: GEMM and MoE by weight dtype, MoE also by
    router distribution, attention by KV dtype, all-reduce by phase; none for the rest."""
    if family in ("gemm", "moe"):
        sel = {"dtype": oracle_dtype(df["dtype"])}
        if family == "moe":  # the power-law table for its rows, else the balanced one
            dist = df["moe_distribution"].astype(str).to_numpy()
            sel["distribution"] = np.where(dist == POWER_LAW_MOE_DISTRIBUTION, dist,
                                           DEFAULT_MOE_DISTRIBUTION)
    elif family.startswith("attention"):
        sel = {"kv_dtype": oracle_dtype(df["kv_dtype"].astype(str).replace("", "bf16"))}
    elif family == "allreduce":
        sel = {"phase": np.where(phase == K.PHASE_DECODE, "decode", "prefill")}
    else:
        sel = {}
    return pd.DataFrame({k: np.asarray(v, dtype=str) for k, v in sel.items()},
                        index=pd.RangeIndex(len(df)))


def _selection_groups(sel: pd.DataFrame):
    """``(selection, row positions)`` for each distinct row of ``sel`` (one group of every
    row when it has no columns)."""
    if sel.columns.empty:
        yield {}, np.arange(len(sel))
        return
    for values, idx in sel.groupby(list(sel.columns), sort=True).indices.items():
        values = values if isinstance(values, tuple) else (values,)
        yield dict(zip(sel.columns, values, strict=True)), idx


def corrector_factors(df: pd.DataFrame, profile: Profile) -> np.ndarray:
    """Factor each row's time is multiplied by under ``profile``'s correctors (1 if none).

    A row gets the table the oracle would use for the same op (:func:`_row_selections`):
    MoE rows of AIConfigurator's ``power_law_1.01`` distribution the power-law table, of
    the other distributions, which no table was fitted on, the balanced one; attention by
    KV dtype also for sliding-window rows. Values are :meth:`GridTable.factor`, the
    kernel's interpolation.
    """
    out = np.ones(len(df))
    fam = df["op_family"].astype(str).to_numpy()
    phase = None
    for family in dict.fromkeys(f for f, *_ in CORRECTOR_PLAN):
        rows = np.flatnonzero(fam == family)
        if not len(rows):
            continue
        sub = df.iloc[rows]
        if phase is None:
            phase = phase_of(df)
        for select, pick in _selection_groups(_row_selections(sub, family, phase[rows])):
            table = find_table(profile.correctors, family, **select)
            if table is None:
                continue
            X = corrector_features(sub.iloc[pick], family, tuple(a.feature for a in table.axes))
            out[rows[pick]] = table.factor(X)
    return out


def predict_measurements(df: pd.DataFrame, gpu: str | GPUSpec, profile: Profile,
                         correctors: bool = True) -> np.ndarray:
    """Seconds the oracle would charge for each measured op under ``profile``.

    The fitted roofline of the single op (:func:`.opwork.op_times`), times the corrector
    factor when ``correctors``; NaN for rows the oracle cannot cost.
    """
    spec = resolve_gpu(gpu)
    t = op_times(op_work(df, spec, profile.flash_tile), spec, profile)
    if correctors and profile.correctors:
        t = t * corrector_factors(df, profile)
    return t
