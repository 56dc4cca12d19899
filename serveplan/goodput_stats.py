r"""Attainment statistics of the goodput search: batch-means confidence intervals.

Requests of one run are correlated (they queue behind each other), so a binomial interval on
the pooled requests would be too narrow. Each run (after dropping a warm-up fraction) is cut
into contiguous batches in arrival order; the batch attainment means of all seeds give a
Student-t interval for an attainment fraction :math:`p`, never narrower than the
Agresti-Coull binomial interval of the pooled requests. Percentile CIs (e.g. for P90 TTFT)
invert it: the order statistics at levels :math:`q \pm h`, with :math:`h` the batch-means
half-width of the indicator :math:`1\{x \le \hat x_q\}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["Interval", "attainment_interval", "quantile_interval"]


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval."""

    estimate: float
    low: float
    high: float

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.estimate, self.low, self.high)


def _batch_means(runs: Sequence[np.ndarray], batches: int) -> np.ndarray:
    """Means of ``batches`` contiguous, near-equal batches of each run, all runs together."""
    out = []
    for run in runs:
        k = min(batches, run.size)
        if k == 0:
            continue
        edges = np.linspace(0, run.size, k + 1).astype(np.int64)
        out.append(np.add.reduceat(run, edges[:-1]) / np.diff(edges))
    return np.concatenate(out) if out else np.empty(0)


def _half_width(runs: Sequence[np.ndarray], confidence: float, batches: int) -> tuple:
    """``(p_hat, half_width)`` of the mean of the 0/1 ``runs`` (module docstring)."""
    pooled = np.concatenate([np.asarray(r, dtype=np.float64) for r in runs])
    n = pooled.size
    if n == 0:
        return float("nan"), float("nan")
    p = float(pooled.mean())
    alpha = 1.0 - confidence
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    p_ac = (pooled.sum() + z * z / 2.0) / (n + z * z)
    se = float(np.sqrt(p_ac * (1.0 - p_ac) / (n + z * z)))
    bm = _batch_means([np.asarray(r, dtype=np.float64) for r in runs], batches)
    crit = z
    if bm.size >= 2:
        se = max(se, float(bm.std(ddof=1) / np.sqrt(bm.size)))
        crit = float(stats.t.ppf(1.0 - alpha / 2.0, bm.size - 1))
    return p, crit * se


def attainment_interval(runs: Sequence[np.ndarray], confidence: float = 0.95,
                        batches: int = 10) -> Interval:
    r"""Fraction of requests meeting a goal, with a batch-means confidence interval.

    Parameters
    ----------
    runs : sequence of bool arrays
        Per run (seed), whether each request met the goal, in arrival order.
    confidence : float
        Two-sided level, e.g. 0.95.
    batches : int
        Contiguous batches per run.

    Notes
    -----
    :math:`\hat p` is the pooled fraction; the half-width is
    :math:`t_{1-\alpha/2, B-1}\max(s_B/\sqrt{B}, \sqrt{\tilde p(1-\tilde p)/(n+z^2)})` with
    :math:`s_B` the standard deviation of the :math:`B` batch means and :math:`\tilde p` the
    Agresti-Coull centre; the interval is clipped to [0, 1].

    Examples
    --------
    >>> iv = attainment_interval([np.ones(1000, bool)])
    >>> iv.estimate, iv.high, 0.99 < iv.low < 1.0
    (1.0, 1.0, True)
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    p, h = _half_width(runs, confidence, batches)
    return Interval(p, float(max(0.0, p - h)), float(min(1.0, p + h)))


def _first_value(values: np.ndarray, holds) -> float:
    """Smallest of the sorted ``values`` where ``holds(x)`` (assumed monotone) is true."""
    lo, hi = 0, values.size - 1
    if not holds(values[hi]):
        return float("inf")
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo])


def quantile_interval(runs: Sequence[np.ndarray], q: float, confidence: float = 0.95,
                      batches: int = 10) -> Interval:
    r"""The ``q``-quantile of pooled values and the interval that inverts the attainment CI.

    ``high`` is the smallest value :math:`x` whose attainment lower bound
    :math:`p^-(x) = \hat F(x) - h(x)` reaches ``q`` and ``low`` the smallest with
    :math:`\hat F(x) + h(x) \ge q` (:func:`attainment_interval` at ``x``), so "the upper CI
    of the quantile is within a goal" and "the goal's attainment is confidently at least
    ``q``" are the same statement. NaN values are dropped (one-token outputs have no
    TPOT); ``inf`` values count as large.
    """
    runs = [np.asarray(r, dtype=np.float64) for r in runs]
    runs = [r[~np.isnan(r)] for r in runs]
    pooled = np.concatenate(runs) if runs else np.empty(0)
    if pooled.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    x = float(np.quantile(pooled, q, method="inverted_cdf"))
    values = np.unique(pooled)

    def bounds(v):
        p, h = _half_width([r <= v for r in runs], confidence, batches)
        return p - h, p + h

    lo = _first_value(values, lambda v: bounds(v)[1] >= q)
    hi = _first_value(values, lambda v: bounds(v)[0] >= q)
    return Interval(x, min(lo, x), max(hi, x))
