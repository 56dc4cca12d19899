"""Decode steady state: the batch-size fixed point :math:`B = \\lambda E[L_{out}] t_{step}(B)`.

Derivation (Little's law). In steady state the decode stage holds on average :math:`B`
requests (the running batch). A request stays in decode for :math:`E[L_{out}]` steps, each
taking :math:`t_{step}(B)` seconds when the batch is :math:`B`, so its mean time in decode is
:math:`E[L_{out}]\\, t_{step}(B)`. Little's law :math:`N = \\lambda T` gives

.. math:: B = \\lambda\\, E[L_{out}]\\, t_{step}(B),

equivalently: the token demand :math:`\\lambda E[L_{out}]` equals the decode throughput
:math:`h(B) = B / t_{step}(B)` tokens/s. The time per output token (TPOT) estimate is
:math:`t_{step}(B)`. This is level 1 ("analytic") of the fidelity ladder in DESIGN.md; it
assumes every output token costs one step at the mean batch (no preemption, no step-to-step
variability, prefill interference accounted for elsewhere).

Method
------
Let :math:`t_e(B) = t_{step}(\\max(B, b_{min}))` and :math:`h(B) = B / t_e(B)`. The
fixed points are the solutions of :math:`h(B) = \\lambda E[L_{out}]`. As :math:`h(0) =
0`, the smallest fixed point is the first upward crossing: ``h`` is scanned on a grid
of ``n_grid`` points in :math:`(0, B_{max}]` (once, shared by all rates), the first
grid cell where :math:`h \\ge \\lambda E[L_{out}]` brackets it, and vectorised bisection
(60 halvings) refines it inside the bracket. Crossings narrower than a grid cell can only
be missed if ``h`` is non-monotone there.

Affine step time :math:`t_{step}(B) = a + bB` (with :math:`B \\ge b_{min}`) has the closed
form :math:`B = \\lambda L a / (1 - \\lambda L b)`, feasible iff :math:`\\lambda L b < 1`
and that :math:`B \\le B_{max}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["DecodeSteadyState", "decode_fixed_point"]


@dataclass(frozen=True)
class DecodeSteadyState:
    """Decode-stage steady state for each arrival rate.

    Attributes
    ----------
    batch : ndarray
        Mean running batch :math:`B` (smallest fixed point); ``inf`` where infeasible.
    tpot : ndarray
        :math:`t_{step}(\\max(B, b_{min}))` (s per output token); ``inf`` where infeasible.
    utilisation : ndarray
        :math:`\\lambda E[L_{out}] / \\max_{0 < B \\le B_{max}} h(B)`, the fraction of the
        decode stage's peak token throughput (over the search grid) that is demanded.
        Finite even when infeasible (then >= 1 up to grid resolution).
    feasible : ndarray of bool
        False where no fixed point exists in :math:`(0, B_{max}]`.
    """

    batch: np.ndarray
    tpot: np.ndarray
    utilisation: np.ndarray
    feasible: np.ndarray


def _mean_length(mean_output_len: float | object) -> float:
    m = getattr(mean_output_len, "mean", mean_output_len)
    if callable(m):
        m = m()
    m = float(m)
    if not (np.isfinite(m) and m > 0):
        raise ValueError(f"mean output length must be finite and > 0, got {m!r}")
    return m


def decode_fixed_point(
    arrival_rate: ArrayLike,
    mean_output_len: float | object,
    t_step: Callable[[np.ndarray], ArrayLike],
    max_batch: float,
    min_batch: float = 1.0,
    n_grid: int = 1024,
) -> DecodeSteadyState:
    """Solve :math:`B = \\lambda E[L_{out}] t_{step}(\\max(B, b_{min}))` for the smallest root.

    Parameters
    ----------
    arrival_rate : array_like
        Request arrival rates :math:`\\lambda` (1/s), >= 0; any shape.
    mean_output_len : float or object with ``.mean``
        :math:`E[L_{out}]` in tokens (decode steps per request), or a length distribution
        carrying its mean (attribute or method ``mean``).
    t_step : callable
        Vectorised ``t_step(B) -> seconds per decode step`` at (real-valued) batch size
        ``B``; called with 1-D float arrays in :math:`[b_{min}, B_{max}]`. Must be finite and
        > 0 there (e.g. the cost oracle's decode step time at the workload's mean context).
    max_batch : float
        :math:`B_{max}` (e.g. ``max_num_seqs`` or the KV-cache limit), >= ``min_batch``.
    min_batch : float, optional
        :math:`b_{min}` (default 1): a running request is always in a batch of at least
        itself, so below one concurrent request the stage runs batch-1 steps a fraction
        :math:`B` of the time. Set 0 to use ``t_step`` down to 0.
    n_grid : int, optional
        Points of the scan for the first crossing (default 1024, geometric + linear).

    Returns
    -------
    DecodeSteadyState
        Arrays shaped like ``arrival_rate``.

    Notes
    -----
    Grid scan for the first upward crossing, then bisection (module docstring, "Method").
    If :math:`h(B) < \\lambda E[L_{out}]` on the whole grid (in particular
    :math:`\\lambda E[L_{out}] t_{step}(B_{max}) > B_{max}`), the decode stage cannot keep
    up: the result is ``batch = tpot = inf`` and ``feasible = False``, never a finite number.

    Examples
    --------
    >>> r = decode_fixed_point(2.0, 100.0, lambda b: 0.01 + 0.001 * b, max_batch=256)
    >>> round(float(r.batch), 6), bool(r.feasible)
    (2.5, True)
    """
    lam = _check_rates(arrival_rate)
    mean_len = _mean_length(mean_output_len)
    _check_batch_args(min_batch, max_batch, n_grid)
    t_eff = partial(_effective_step, t_step, min_batch)
    grid, h = _throughput_grid(t_eff, max_batch, n_grid)
    demand = (lam * mean_len).ravel()
    batch, feasible = _first_crossing(grid, h, demand, t_eff)
    tpot = np.where(feasible, t_eff(np.where(feasible, batch, min_batch)), np.inf)
    util = demand / float(h.max())
    shape = lam.shape
    return DecodeSteadyState(batch=batch.reshape(shape), tpot=tpot.reshape(shape),
                             utilisation=util.reshape(shape), feasible=feasible.reshape(shape))


def _check_rates(arrival_rate: ArrayLike) -> np.ndarray:
    lam = np.asarray(arrival_rate, dtype=np.float64)
    ok = np.isfinite(lam) & (lam >= 0)
    if not np.all(ok):
        raise ValueError(f"arrival_rate must be finite and >= 0, got {float(lam[~ok].flat[0])!r}")
    return lam


def _effective_step(
    t_step: Callable[[np.ndarray], ArrayLike], min_batch: float, b: np.ndarray
) -> np.ndarray:
    """:math:`t_e(B) = t_{step}(\\max(B, b_{min}))` as a float64 array shaped like ``b``."""
    return np.asarray(t_step(np.maximum(b, min_batch)), dtype=np.float64).reshape(b.shape)


def _check_batch_args(min_batch: float, max_batch: float, n_grid: int) -> None:
    if not (np.isfinite(min_batch) and min_batch >= 0):
        raise ValueError(f"min_batch must be finite and >= 0, got {min_batch!r}")
    if not (np.isfinite(max_batch) and max_batch > 0 and max_batch >= min_batch):
        raise ValueError(
            f"max_batch must be finite, > 0 and >= min_batch={min_batch!r}, got {max_batch!r}"
        )
    if n_grid < 2:
        raise ValueError(f"n_grid must be >= 2, got {n_grid!r}")


def _throughput_grid(
    t_eff: Callable[[np.ndarray], np.ndarray], max_batch: float, n_grid: int
) -> tuple[np.ndarray, np.ndarray]:
    """The scan grid on (0, B_max] and the decode throughput ``h = B / t_eff(B)`` on it."""
    # grid on (0, B_max]: geometric near 0 (small batches), linear over the range
    geo = np.geomspace(max_batch * 1e-6, max_batch, n_grid // 2)
    lin = np.linspace(0.0, max_batch, n_grid - n_grid // 2 + 1)[1:]
    grid = np.unique(np.concatenate((geo, lin)))
    tg = t_eff(grid)
    bad = ~(np.isfinite(tg) & (tg > 0))
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"t_step must be finite and > 0 on (0, max_batch], got {tg[i]!r} at batch {grid[i]!r}"
        )
    return grid, grid / tg


def _first_crossing(
    grid: np.ndarray, h: np.ndarray, demand: np.ndarray,
    t_eff: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Smallest B with ``h(B) = demand`` (bracketed on the grid, then bisected), and feasibility.

    ``batch`` is 0 where the demand is 0 and ``inf`` where ``h`` never reaches the demand.
    """
    # first grid index with h >= demand (h need not be monotone: running max is)
    hmax = np.maximum.accumulate(h)
    idx = np.searchsorted(hmax, demand, side="left")
    feasible = idx < grid.size
    zero = demand == 0.0
    safe = np.minimum(idx, grid.size - 1)
    lo = np.where(safe > 0, grid[np.maximum(safe - 1, 0)], 0.0)
    hi = grid[safe]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = mid / t_eff(mid) < demand  # f(mid) = demand * t(mid) - mid > 0
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    batch = np.where(zero, 0.0, hi)
    batch = np.where(feasible, batch, np.inf)
    return batch, feasible
