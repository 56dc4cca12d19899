"""Waiting-time quantiles: exponential-tail (M/M/1, M/M/c, approximate G/G/c) and the exact
M/D/1 waiting-time CDF and quantile.

Conventions and references: see :mod:`serveplan.queueing.formulas`, which re-exports these.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln, lambertw

from ._validate import _arr, _first_bad, _level, _nonneg, _out, _positive, _servers
from .mean_waits import allen_cunneen_wait, erlang_c, mm1_wait, mmc_wait

__all__ = [
    "MD1_SERIES_SPAN",
    "exponential_tail_wait_quantile",
    "ggc_wait_quantile",
    "md1_wait_cdf",
    "md1_wait_quantile",
    "mm1_wait_quantile",
    "mmc_wait_quantile",
]

#: Service-time multiples up to which Erlang's alternating series is summed for the M/D/1 CDF;
#: beyond it the Cramer-Lundberg tail is used (cancellation in the series costs about
#: ``log10(e) * 2 * rho * x`` digits at ``x`` service times; at 10 this is < 9 digits).
MD1_SERIES_SPAN = 10


def exponential_tail_wait_quantile(q: ArrayLike, mean_wait: ArrayLike, prob_wait: ArrayLike):
    r"""Quantile of a waiting time with an atom at 0 and an exponential tail.

    Parameters
    ----------
    q : array_like
        Quantile level in [0, 1] (0.9 for P90).
    mean_wait : array_like
        Mean waiting time :math:`W_q` (s), >= 0 (``inf`` gives ``inf`` above the atom).
    prob_wait : array_like
        :math:`\pi = P(W > 0)` in [0, 1].

    Returns
    -------
    ndarray or float
        :math:`w_q` (s).

    Notes
    -----
    Assumes :math:`P(W > t) = \pi e^{-\pi t / W_q}` (conditional wait exponential with mean
    :math:`W_q/\pi`), which is the exact law for M/M/1 and M/M/c. Then

    .. math:: w_q = 0 \text{ if } q \le 1 - \pi, \quad
              w_q = \frac{W_q}{\pi} \ln\frac{\pi}{1 - q} \text{ otherwise.}
    """
    q = _level(q)
    w = _arr(mean_wait)
    ok = ~(w < 0) & ~np.isnan(w)
    if not np.all(ok):
        raise ValueError(f"mean_wait must be >= 0, got {_first_bad(w, ok)!r}")
    pi = _arr(prob_wait)
    ok = (pi >= 0) & (pi <= 1)
    if not np.all(ok):
        raise ValueError(f"prob_wait must be in [0, 1], got {_first_bad(pi, ok)!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        t = w / pi * np.log(pi / (1.0 - q))
    res = np.where(q <= 1.0 - pi, 0.0, t)
    res = np.where((q > 1.0 - pi) & (np.isinf(w) | (q >= 1.0)), np.inf, res)
    return _out(res)


def mm1_wait_quantile(q: ArrayLike, arrival_rate: ArrayLike, mean_service: ArrayLike):
    r"""Exact quantile of the M/M/1 (FCFS) waiting time in queue.

    Parameters
    ----------
    q : array_like
        Quantile level in [0, 1].
    arrival_rate, mean_service : array_like
        As in :func:`mm1_wait`.

    Returns
    -------
    ndarray or float
        Quantile (s); ``inf`` where :math:`\rho \ge 1` (and q > 0).

    Notes
    -----
    :math:`P(W_q > t) = \rho e^{-(\mu - \lambda) t}` [K]_, so :math:`w_q = 0` for
    :math:`q \le 1 - \rho` and :math:`w_q = \ln(\rho / (1-q)) / (\mu - \lambda)` otherwise.
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    rho = lam * s
    w = np.asarray(mm1_wait(lam, s))
    return exponential_tail_wait_quantile(q, w, np.minimum(rho, 1.0))


def mmc_wait_quantile(
    q: ArrayLike, arrival_rate: ArrayLike, mean_service: ArrayLike, servers: ArrayLike
):
    r"""Exact quantile of the M/M/c (FCFS) waiting time in queue.

    Parameters
    ----------
    q : array_like
        Quantile level in [0, 1].
    arrival_rate, mean_service, servers : array_like
        As in :func:`mmc_wait`.

    Returns
    -------
    ndarray or float
        Quantile (s); ``inf`` where :math:`\rho \ge 1` (and q > 0).

    Notes
    -----
    :math:`P(W_q > t) = C(c, a)\, e^{-(c\mu - \lambda) t}` [K]_ (§3.6), so
    :math:`w_q = \ln(C / (1-q)) / (c\mu - \lambda)` for :math:`q > 1 - C`, else 0.
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    c = _servers(servers)
    pw = np.asarray(erlang_c(c, lam * s))
    w = np.asarray(mmc_wait(lam, s, c))
    return exponential_tail_wait_quantile(q, w, pw)


def ggc_wait_quantile(
    q: ArrayLike,
    arrival_rate: ArrayLike,
    mean_service: ArrayLike,
    servers: ArrayLike,
    ca2: ArrayLike,
    cs2: ArrayLike,
):
    r"""APPROXIMATE quantile of the G/G/c waiting time (exponential tail, Allen-Cunneen mean).

    Parameters
    ----------
    q : array_like
        Quantile level in [0, 1].
    arrival_rate, mean_service, servers, ca2, cs2 : array_like
        As in :func:`allen_cunneen_wait`.

    Returns
    -------
    ndarray or float
        Approximate quantile (s); ``inf`` where :math:`\rho \ge 1` (and q > 0).

    Notes
    -----
    This is an approximation, not a known law: the waiting time is taken to have an atom
    :math:`1 - \pi` at 0 with :math:`\pi = C(c, a)` (Erlang C) and an exponential tail whose
    mean matches the Allen-Cunneen mean :math:`W_q^{AC}` [AC]_:
    :math:`P(W > t) \approx \pi \exp(-\pi t / W_q^{AC})`; see
    :func:`exponential_tail_wait_quantile`. It is exact for M/M/c
    (:math:`c_a^2 = c_s^2 = 1`). For c = 1 the atom is :math:`1 - \rho`, which is exact for
    M/G/1 but not for G/G/1. For M/D/1 use :func:`md1_wait_quantile` instead.
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    c = _servers(servers)
    pw = np.asarray(erlang_c(c, lam * s))
    w = np.asarray(allen_cunneen_wait(lam, s, c, ca2, cs2))
    return exponential_tail_wait_quantile(q, w, pw)


def _md1_decay(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cramer-Lundberg decay g (per service time) and constant C for M/D/1, 0 < rho < 1."""
    # rho (e^g - 1) = g  <=>  y e^{-y} = rho e^{-rho} with y = g + rho, y > 1 (branch -1).
    y = -np.real(lambertw(-rho * np.exp(-rho), k=-1))
    g = y - rho
    for _ in range(3):  # Newton polish on f(g) = rho (e^g - 1) - g near the branch point
        eg = np.exp(g)
        f = rho * (eg - 1.0) - g
        fp = rho * eg - 1.0
        g = np.where(fp > 0, g - f / fp, g)
    const = (1.0 - rho) / (rho * np.exp(g) - 1.0)
    return g, const


def _md1_series_cdf(x: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Erlang/Crommelin series for P(W <= x D), x in [0, MD1_SERIES_SPAN], 0 <= rho < 1."""
    k = np.arange(MD1_SERIES_SPAN + 1, dtype=np.float64).reshape((-1,) + (1,) * x.ndim)
    u = rho * (k - x)  # <= 0 for the terms kept
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mag = np.where(k == 0, 0.0, k * np.log(np.abs(u)))  # log |u|^k (0^0 = 1)
        term = np.sign(u) ** k * np.exp(mag - gammaln(k + 1.0) - u)
    term = np.where((k <= np.floor(x)) & np.isfinite(term), term, 0.0)
    return np.clip((1.0 - rho) * term.sum(axis=0), 0.0, 1.0)


def md1_wait_cdf(t: ArrayLike, arrival_rate: ArrayLike, service_time: ArrayLike):
    r"""CDF of the M/D/1 (FCFS) waiting time in queue, :math:`P(W_q \le t)`.

    Parameters
    ----------
    t : array_like
        Time (s). Negative t gives 0.
    arrival_rate : array_like
        Poisson arrival rate :math:`\lambda` (1/s), >= 0.
    service_time : array_like
        Constant service time :math:`D` (s), > 0.

    Returns
    -------
    ndarray or float
        :math:`P(W_q \le t)`; 0 where :math:`\rho \ge 1` (the wait is infinite).

    Notes
    -----
    With :math:`x = t / D` and :math:`\rho = \lambda D`, Erlang's (Crommelin's) exact series [Cr]_

    .. math:: P(W_q \le t) = (1 - \rho) \sum_{k=0}^{\lfloor x \rfloor}
              \frac{[\rho (k - x)]^k}{k!} e^{-\rho (k - x)}

    is summed for :math:`x \le` ``MD1_SERIES_SPAN`` (= 10). The series alternates and loses
    about :math:`0.87 \rho x` significant digits to cancellation, so beyond that span the
    Cramer-Lundberg tail [Asm]_ is used:

    .. math:: P(W_q > t) \simeq C e^{-\gamma x},\quad \rho (e^\gamma - 1) = \gamma,\quad
              C = \frac{1 - \rho}{\rho e^\gamma - 1},

    with :math:`\gamma = -W_{-1}(-\rho e^{-\rho}) - \rho` (Lambert W, then Newton-polished).
    The other roots of the characteristic equation are complex with real parts well below
    :math:`-\gamma`, so at 10 service times the tail is accurate to far better than the
    series' own rounding (checked in the tests at the switch point).

    Examples
    --------
    >>> round(float(md1_wait_cdf(0.0, 0.5, 1.0)), 12)  # atom at zero = 1 - rho
    0.5
    """
    tt = _arr(t)
    if np.any(np.isnan(tt)):
        raise ValueError(f"t must not be NaN, got {_first_bad(tt, ~np.isnan(tt))!r}")
    lam = _nonneg("arrival_rate", arrival_rate)
    d = _positive("service_time", service_time)
    tt, lam, d = np.broadcast_arrays(tt, lam, d)
    rho = lam * d
    x = tt / d
    stable = rho < 1.0
    r = np.where(stable, rho, 0.5)
    xs = np.clip(x, 0.0, MD1_SERIES_SPAN)
    cdf = _md1_series_cdf(xs, r)
    pos = r > 0
    cdf = np.where(x > MD1_SERIES_SPAN, np.where(pos, _md1_tail_cdf(x, r, pos), 1.0), cdf)
    cdf = np.where(x < 0, 0.0, cdf)
    cdf = np.where(stable, cdf, 0.0)
    return _out(np.clip(cdf, 0.0, 1.0))


def _md1_tail_cdf(x: np.ndarray, r: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Cramer-Lundberg approximation ``1 - C e^{-g x}`` of P(W <= x D) (1 at x = inf)."""
    rp = np.where(pos, r, 0.5)
    g, const = _md1_decay(rp)
    with np.errstate(over="ignore", under="ignore"):
        tail_cdf = 1.0 - const * np.exp(-g * np.where(np.isfinite(x), x, 0.0))
    return np.where(np.isinf(x), 1.0, tail_cdf)


def md1_wait_quantile(q: ArrayLike, arrival_rate: ArrayLike, service_time: ArrayLike):
    r"""Quantile of the M/D/1 (FCFS) waiting time in queue, from the exact CDF.

    Parameters
    ----------
    q : array_like
        Quantile level in [0, 1].
    arrival_rate, service_time : array_like
        As in :func:`md1_wait_cdf`.

    Returns
    -------
    ndarray or float
        :math:`\inf\{t : P(W_q \le t) \ge q\}` (s); ``inf`` where :math:`\rho \ge 1` and q > 0.

    Notes
    -----
    0 for :math:`q \le 1 - \rho` (atom at zero). If the quantile lies beyond
    ``MD1_SERIES_SPAN`` service times it is the closed form
    :math:`t = D \ln(C / (1 - q)) / \gamma` of the Cramer-Lundberg tail (see
    :func:`md1_wait_cdf`); otherwise it is found by vectorised bisection (60 halvings, i.e. to
    double precision in :math:`[0, 10 D]`) on Erlang's series.
    """
    q = _level(q)
    lam = _nonneg("arrival_rate", arrival_rate)
    d = _positive("service_time", service_time)
    q, lam, d = np.broadcast_arrays(q, lam, d)
    rho = lam * d
    stable = rho < 1.0
    r = np.where(stable & (rho > 0), rho, 0.5)
    g, const = _md1_decay(r)
    qq = np.where(q < 1.0, q, 0.5)
    with np.errstate(divide="ignore"):
        x_tail = np.log(const / (1.0 - qq)) / g
    lo = np.zeros(q.shape)
    hi = np.full(q.shape, float(MD1_SERIES_SPAN))
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = _md1_series_cdf(mid, r) < qq
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    x = np.where(x_tail > MD1_SERIES_SPAN, x_tail, hi)
    res = np.where(q <= 1.0 - rho, 0.0, x * d)
    res = np.where((q > 1.0 - rho) & ((q >= 1.0) | ~stable), np.inf, res)
    return _out(res)
