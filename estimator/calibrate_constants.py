"""Stage 1 of calibration: robust fit of the roofline constants per op family.

See :mod:`serveplan.estimator.calibrate` (module docstring) for the method; it re-exports
the public names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from serveplan.kernels import roofline as K

from .calibrate_rows import MIN_ROWS, select_training_rows
from .opwork import OpWork, op_work
from .profile import Efficiency, PhaseEfficiency, Profile
from .specs import GPUSpec

__all__ = ["FLASH_TILES", "LOSS_SCALE", "ConstantsFit", "apply_constants", "fit_constants"]

LOSS_SCALE = 0.1  # soft-L1 scale of the constants fit, log units
#: FlashAttention query tiles tried: 128 (K/V re-read from HBM per query tile) or one tile
#: per request (K/V read once, i.e. re-reads served by L2); the better attention fit wins.
FLASH_TILES = (128, 1 << 20)
_LOG_E_MIN = np.log(0.01)
_FIXED_MAX_US = 100.0


@dataclass
class ConstantsFit:
    """Fitted constants of one family: e_c, e_m per phase, fixed seconds per kernel."""

    family: str
    ec: tuple[float, float]
    em: tuple[float, float]
    fixed_s: float
    n_rows: int
    median_abs_log_err: float
    comm_latency_s: float | None = None
    flash_tile: int | None = None
    cost: float = 0.0


def _compute_predict(theta, w: OpWork, sel, phases, mem_bw):
    """Roofline + fixed seconds of rows ``sel`` for packed parameters ``theta``."""
    n_ph = len(phases)
    ec = np.exp(theta[:n_ph])
    em = np.exp(theta[n_ph:2 * n_ph])
    t0 = theta[2 * n_ph] * 1e-6
    idx = np.searchsorted(phases, w.phase[sel]) if n_ph > 1 else np.zeros(sel.sum(), int)
    t = np.maximum(w.work[sel] / (ec[idx] * w.peak[sel]), w.traffic[sel] / (em[idx] * mem_bw))
    return t + w.count[sel] * t0


def _fit_compute(w: OpWork, lat: np.ndarray, sel: np.ndarray, gpu: GPUSpec, init: Profile,
                 family: str, per_phase: bool) -> ConstantsFit:
    """Robust fit of (e_c, e_m per phase, fixed) for the rows ``sel`` of one family."""
    phases = np.unique(w.phase[sel]) if per_phase else np.array([0])
    names = ("prefill", "decode")
    x0 = [np.log(init.eff(family, names[p]).ec) for p in phases]
    x0 += [np.log(init.eff(family, names[p]).em) for p in phases]
    x0 += [init.kernel_fixed(family) * 1e6]
    lo = [_LOG_E_MIN] * (2 * len(phases)) + [0.0]
    hi = [0.0] * (2 * len(phases)) + [_FIXED_MAX_US]
    x0 = np.clip(x0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
    log_lat = np.log(lat[sel])

    def resid(theta):
        return np.log(_compute_predict(theta, w, sel, phases, gpu.mem_bw)) - log_lat

    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=LOSS_SCALE,
                        x_scale="jac")
    n_ph = len(phases)
    ec, em = np.exp(res.x[:n_ph]), np.exp(res.x[n_ph:2 * n_ph])
    if per_phase:
        ec_out = [init.eff(family, n).ec for n in names]
        em_out = [init.eff(family, n).em for n in names]
        for j, p in enumerate(phases):
            ec_out[p], em_out[p] = ec[j], em[j]
    else:
        ec_out, em_out = [ec[0]] * 2, [em[0]] * 2
    return ConstantsFit(family, tuple(map(float, ec_out)), tuple(map(float, em_out)),
                        float(res.x[-1] * 1e-6), int(sel.sum()),
                        float(np.median(np.abs(res.fun))), cost=float(res.cost))


def _comm_predict(theta, w: OpWork, sel, phases, gpu: GPUSpec):
    eff = np.exp(theta[:len(phases)])
    lat = theta[len(phases)] * 1e-6
    idx = np.searchsorted(phases, w.phase[sel]) if len(phases) > 1 else np.zeros(sel.sum(), int)
    out = np.empty(sel.sum())
    rows = np.flatnonzero(sel)
    for j, i in enumerate(rows):
        fn = K.allreduce_time if w.comm[i] == 1 else K.alltoall_time
        out[j] = fn(w.nbytes[i], w.group[i], gpu.scaleup_bw, lat, eff[idx[j]])
    return out


def _fit_comm(w: OpWork, lat: np.ndarray, sel: np.ndarray, gpu: GPUSpec,
              init: Profile) -> ConstantsFit:
    """Robust fit of the collective efficiency per phase and the per-step latency."""
    phases = np.unique(w.phase[sel])
    names = ("prefill", "decode")
    lat0 = init.comm_latency_s if init.comm_latency_s is not None else gpu.scaleup_latency_s
    x0 = [np.log(init.eff("comm", names[p]).em) for p in phases] + [lat0 * 1e6]
    lo = [_LOG_E_MIN] * len(phases) + [0.0]
    hi = [0.0] * len(phases) + [_FIXED_MAX_US]
    x0 = np.clip(x0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
    log_lat = np.log(lat[sel])

    def resid(theta):
        return np.log(_comm_predict(theta, w, sel, phases, gpu)) - log_lat

    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=LOSS_SCALE,
                        x_scale="jac")
    eff = [init.eff("comm", n).em for n in names]
    for j, p in enumerate(phases):
        eff[p] = float(np.exp(res.x[j]))
    if len(phases) == 1:
        eff = [eff[phases[0]]] * 2
    return ConstantsFit("comm", tuple(eff), tuple(eff), 0.0, int(sel.sum()),
                        float(np.median(np.abs(res.fun))), comm_latency_s=float(res.x[-1] * 1e-6))


def fit_constants(df: pd.DataFrame, gpu: GPUSpec, init: Profile | None = None,
                  min_rows: int = MIN_ROWS) -> dict[str, ConstantsFit]:
    """Fit each family's roofline constants to the measurements of one GPU.

    Parameters
    ----------
    df : pandas.DataFrame
        Measurements of one GPU and engine (schema of :mod:`.measurements`).
    gpu : GPUSpec
        Its peaks.
    init : Profile, optional
        Starting point and fallback for families without data (default constants).
    min_rows : int
        Fewest usable rows a family is fitted on.

    Returns
    -------
    dict
        ``family -> ConstantsFit`` for the families with at least ``min_rows`` usable rows
        (``gemm``, ``attention``, ``moe``, ``comm``).
    """
    init = init or Profile()
    lat = df["latency_s"].to_numpy(dtype=np.float64)
    fits: dict[str, ConstantsFit] = {}
    plan = (("gemm", ("gemm",), {"dtype": "bf16"}, False),
            ("attention", ("attention_prefill", "attention_decode"), {"kv_dtype": "bf16"}, True),
            ("moe", ("moe",), {"dtype": "bf16"}, False))
    for family, sources, select, per_phase in plan:
        sel = np.zeros(len(df), dtype=bool)
        for src in sources:
            sel |= select_training_rows(df, src, **select)
        sel &= lat > 0
        if sel.sum() < min_rows:
            continue
        tiles = FLASH_TILES if family == "attention" else (init.flash_tile,)
        best = None
        for tile in tiles:
            w = op_work(df[sel], gpu, tile)
            ok = w.valid
            if ok.sum() < min_rows:
                continue
            fit = _fit_compute(w, lat[sel], ok, gpu, init, family, per_phase)
            fit.flash_tile = int(tile) if family == "attention" else None
            if best is None or fit.cost < best.cost:
                best = fit
        if best is not None:
            fits[family] = best
    w = op_work(df, gpu, init.flash_tile)
    usable = w.valid & (lat > 0)
    sel = select_training_rows(df, "allreduce") & usable
    if sel.sum() >= min_rows:
        fits["comm"] = _fit_comm(w, lat, sel, gpu, init)
    return fits


def apply_constants(base: Profile, fits: dict[str, ConstantsFit], **updates) -> Profile:
    """``base`` with the fitted families' efficiencies, fixed times and comm latency."""
    eff = dict(base.efficiency)
    fixed = dict(base.kernel_fixed_family_s)
    comm_latency = base.comm_latency_s
    tile = base.flash_tile
    for fam, fit in fits.items():
        if fit.flash_tile:
            tile = fit.flash_tile
        eff[fam] = PhaseEfficiency(
            prefill=Efficiency(ec=min(fit.ec[0], 1.0), em=min(fit.em[0], 1.0)),
            decode=Efficiency(ec=min(fit.ec[1], 1.0), em=min(fit.em[1], 1.0)))
        if fam == "comm":
            comm_latency = fit.comm_latency_s
        else:
            fixed[fam] = fit.fixed_s
    return base.model_copy(update={"efficiency": eff, "kernel_fixed_family_s": fixed,
                                   "comm_latency_s": comm_latency, "flash_tile": tile,
                                   **updates})
