"""Closed-form queueing approximations, vectorised over NumPy arrays.

Conventions shared by every function here:

- Rates are per second, times in seconds. Service is described by its *mean service time*
  ``mean_service`` (E[S]; the cost oracle produces times, not rates), so
  :math:`\\mu = 1 / E[S]` and the offered load is :math:`a = \\lambda E[S]`.
- All arguments broadcast against each other (NumPy rules); scalars in give NumPy scalars out.
- Utilisation :math:`\\rho = \\lambda E[S] / c \\ge 1` means no steady state: mean waits, sojourns
  and quantiles are returned as ``inf`` (explicitly, without a warning); probabilities of waiting
  are 1 and CDFs are 0. Invalid inputs (negative rates, non-positive service times, SCV < 0,
  quantile levels outside [0, 1], non-integer servers) raise ``ValueError`` naming the value.

References
----------
.. [K] L. Kleinrock, *Queueing Systems, Vol. 1: Theory*, Wiley, 1975 (M/M/1, M/M/c, P-K).
.. [Kin] J. F. C. Kingman, "The single server queue in heavy traffic", Proc. Cambridge Phil.
   Soc. 57 (1961) 902-904.
.. [AC] A. O. Allen, *Probability, Statistics, and Queueing Theory*, 2nd ed., Academic Press,
   1990, §6 (Allen-Cunneen approximation).
.. [Cr] C. D. Crommelin, "Delay probability formulae when the holding times are constant",
   P.O. Elect. Engrs. J. 25 (1932) 41-50; Erlang's series for M/D/1, see also
   V. B. Iversen, *Teletraffic Engineering and Network Planning*, DTU, 2015, §13.
.. [Asm] S. Asmussen, *Applied Probability and Queues*, 2nd ed., Springer, 2003, §XIII.5
   (Cramer-Lundberg asymptotics of the M/G/1 waiting time).
.. [BS] BestServe, ``papers/bestserve.txt`` §3.5, Algorithms 8 and 9.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln, lambertw

__all__ = [
    "allen_cunneen_wait",
    "bestserve_t_min",
    "erlang_c",
    "exponential_tail_wait_quantile",
    "ggc_wait_quantile",
    "goodput_bracket",
    "kingman_wait",
    "md1_wait",
    "md1_wait_cdf",
    "md1_wait_quantile",
    "mg1_wait",
    "mm1_sojourn",
    "mm1_wait",
    "mm1_wait_quantile",
    "mmc_sojourn",
    "mmc_wait",
    "mmc_wait_quantile",
    "utilisation",
]

#: Service-time multiples up to which Erlang's alternating series is summed for the M/D/1 CDF;
#: beyond it the Cramer-Lundberg tail is used (cancellation in the series costs about
#: ``log10(e) * 2 * rho * x`` digits at ``x`` service times; at 10 this is < 9 digits).
MD1_SERIES_SPAN = 10


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _arr(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _first_bad(a: np.ndarray, ok: np.ndarray) -> float:
    return float(np.broadcast_to(a, ok.shape)[~ok].flat[0])


def _nonneg(name: str, x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = np.isfinite(a) & (a >= 0)
    if not np.all(ok):
        raise ValueError(f"{name} must be finite and >= 0, got {_first_bad(a, ok)!r}")
    return a


def _positive(name: str, x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = np.isfinite(a) & (a > 0)
    if not np.all(ok):
        raise ValueError(f"{name} must be finite and > 0, got {_first_bad(a, ok)!r}")
    return a


def _servers(x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = np.isfinite(a) & (a >= 1) & (a == np.floor(a))
    if not np.all(ok):
        raise ValueError(f"servers must be an integer >= 1, got {_first_bad(a, ok)!r}")
    return a


def _level(x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = (a >= 0) & (a <= 1)
    if not np.all(ok):
        raise ValueError(f"quantile level q must be in [0, 1], got {_first_bad(a, ok)!r}")
    return a


def _out(x: np.ndarray) -> np.ndarray:
    """Return a NumPy scalar for 0-d results, the array otherwise."""
    return x[()] if x.ndim == 0 else x


def _scv(name: str, x: ArrayLike) -> np.ndarray:
    return _nonneg(name, x)


# --------------------------------------------------------------------------------------------
# utilisation, M/M/1, M/G/1, M/D/1
# --------------------------------------------------------------------------------------------


def utilisation(arrival_rate: ArrayLike, mean_service: ArrayLike, servers: ArrayLike = 1):
    r"""Server utilisation :math:`\rho = \lambda E[S] / c`.

    Parameters
    ----------
    arrival_rate : array_like
        Arrival rate :math:`\lambda` (1/s), >= 0.
    mean_service : array_like
        Mean service time :math:`E[S]` (s), > 0.
    servers : array_like of int, optional
        Number of servers :math:`c` (default 1).

    Returns
    -------
    ndarray or float
        :math:`\rho`. Values >= 1 are returned as they are (this is the one function that does
        not map overload to ``inf``: it is the quantity that tells you about it).

    Notes
    -----
    :math:`\rho = \lambda / (c\mu) = \lambda E[S] / c` [K]_.

    Examples
    --------
    >>> float(utilisation(2.0, 0.25))
    0.5
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    c = _servers(servers)
    return _out(lam * s / c)


def _overloaded(rho: np.ndarray, value: np.ndarray) -> np.ndarray:
    return np.where(rho < 1.0, value, np.inf)


def mm1_wait(arrival_rate: ArrayLike, mean_service: ArrayLike):
    r"""M/M/1 mean waiting time in queue :math:`W_q`.

    Parameters
    ----------
    arrival_rate : array_like
        Poisson arrival rate :math:`\lambda` (1/s), >= 0.
    mean_service : array_like
        Mean of the exponential service time :math:`1/\mu` (s), > 0.

    Returns
    -------
    ndarray or float
        :math:`W_q` in seconds; ``inf`` where :math:`\rho \ge 1`.

    Notes
    -----
    :math:`W_q = \rho / (\mu - \lambda) = \rho E[S] / (1 - \rho)` [K]_ (§3.2).

    Examples
    --------
    >>> float(mm1_wait(0.5, 1.0))
    1.0
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    rho = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        w = rho * s / (1.0 - rho)
    return _out(_overloaded(rho, w))


def mm1_sojourn(arrival_rate: ArrayLike, mean_service: ArrayLike):
    r"""M/M/1 mean sojourn (response) time :math:`W = 1/(\mu - \lambda)`.

    Parameters
    ----------
    arrival_rate, mean_service : array_like
        As in :func:`mm1_wait`.

    Returns
    -------
    ndarray or float
        :math:`W = E[S] / (1 - \rho)` in seconds; ``inf`` where :math:`\rho \ge 1`.

    Notes
    -----
    :math:`W = W_q + E[S] = 1 / (\mu - \lambda)` [K]_ (§3.2).
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    rho = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        w = s / (1.0 - rho)
    return _out(_overloaded(rho, w))


def mg1_wait(
    arrival_rate: ArrayLike,
    mean_service: ArrayLike,
    scv: ArrayLike | None = None,
    second_moment: ArrayLike | None = None,
):
    r"""M/G/1 mean waiting time (Pollaczek-Khinchine).

    Parameters
    ----------
    arrival_rate : array_like
        Poisson arrival rate :math:`\lambda` (1/s), >= 0.
    mean_service : array_like
        Mean service time :math:`E[S]` (s), > 0.
    scv : array_like, optional
        Squared coefficient of variation of service :math:`c_s^2 = Var[S]/E[S]^2` (>= 0).
    second_moment : array_like, optional
        :math:`E[S^2]` (s^2), >= :math:`E[S]^2`. Exactly one of ``scv`` and ``second_moment``
        must be given.

    Returns
    -------
    ndarray or float
        :math:`W_q` in seconds; ``inf`` where :math:`\rho \ge 1`.

    Notes
    -----
    Pollaczek-Khinchine mean-value formula [K]_ (§5.6):

    .. math:: W_q = \frac{\lambda E[S^2]}{2 (1 - \rho)}
                  = \frac{\rho E[S]}{1 - \rho} \cdot \frac{1 + c_s^2}{2}.

    Examples
    --------
    >>> float(mg1_wait(0.5, 1.0, scv=1.0))  # exponential service: M/M/1
    1.0
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    if (scv is None) == (second_moment is None):
        raise ValueError(
            f"give exactly one of scv and second_moment, got scv={scv!r}, "
            f"second_moment={second_moment!r}"
        )
    if scv is not None:
        cs2 = _scv("scv", scv)
    else:
        m2 = _positive("second_moment", second_moment)
        m2b, sb = np.broadcast_arrays(m2, s)
        ok = m2b >= sb * sb * (1.0 - 1e-12)
        if not np.all(ok):
            raise ValueError(
                f"second_moment must be >= mean_service**2, got {float(m2b[~ok].flat[0])!r} "
                f"with mean_service {float(sb[~ok].flat[0])!r}"
            )
        cs2 = np.maximum(m2 / (s * s) - 1.0, 0.0)
    rho = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        w = rho * s / (1.0 - rho) * (1.0 + cs2) / 2.0
    return _out(_overloaded(rho, w))


def md1_wait(arrival_rate: ArrayLike, service_time: ArrayLike):
    r"""M/D/1 mean waiting time.

    Parameters
    ----------
    arrival_rate : array_like
        Poisson arrival rate :math:`\lambda` (1/s), >= 0.
    service_time : array_like
        Constant service time :math:`D` (s), > 0.

    Returns
    -------
    ndarray or float
        :math:`W_q` in seconds; ``inf`` where :math:`\rho \ge 1`.

    Notes
    -----
    P-K with :math:`c_s^2 = 0` [K]_: :math:`W_q = \rho D / (2(1 - \rho)) = \rho / (2\mu(1-\rho))`.

    Examples
    --------
    >>> float(md1_wait(0.5, 1.0))
    0.5
    """
    return mg1_wait(arrival_rate, service_time, scv=0.0)


# --------------------------------------------------------------------------------------------
# M/M/c
# --------------------------------------------------------------------------------------------


def erlang_c(servers: ArrayLike, offered_load: ArrayLike):
    r"""Erlang C: probability that an arrival waits in an M/M/c queue.

    Parameters
    ----------
    servers : array_like of int
        Number of servers :math:`c >= 1`.
    offered_load : array_like
        Offered load :math:`a = \lambda / \mu = \lambda E[S]` (Erlangs), >= 0.

    Returns
    -------
    ndarray or float
        :math:`C(c, a) \in [0, 1]`; exactly 1 where :math:`a \ge c` (every arrival waits).

    Notes
    -----
    Computed stably through the Erlang B recursion [K]_ (§3.6)

    .. math:: B(0, a) = 1,\quad B(k, a) = \frac{a B(k-1, a)}{k + a B(k-1, a)},\qquad
              C(c, a) = \frac{B(c, a)}{1 - \rho (1 - B(c, a))},\ \rho = a / c,

    which equals :math:`\frac{a^c/c! \cdot c/(c-a)}{\sum_{k<c} a^k/k! + a^c/c! \cdot c/(c-a)}`.
    The cost is :math:`O(\max c)` vectorised steps.

    Examples
    --------
    >>> round(float(erlang_c(2, 1.0)), 12)
    0.333333333333
    """
    c = _servers(servers)
    a = _nonneg("offered_load", offered_load)
    c, a = np.broadcast_arrays(c, a)
    b = np.ones(c.shape)
    kmax = int(c.max()) if c.size else 0
    for k in range(1, kmax + 1):
        nb = a * b / (k + a * b)
        b = np.where(k <= c, nb, b)
    rho = a / c
    with np.errstate(divide="ignore", invalid="ignore"):
        pw = b / (1.0 - rho * (1.0 - b))
    return _out(np.where(rho < 1.0, pw, 1.0))


def mmc_wait(arrival_rate: ArrayLike, mean_service: ArrayLike, servers: ArrayLike):
    r"""M/M/c mean waiting time in queue.

    Parameters
    ----------
    arrival_rate : array_like
        Poisson arrival rate :math:`\lambda` (1/s), >= 0.
    mean_service : array_like
        Mean exponential service time :math:`1/\mu` (s), > 0.
    servers : array_like of int
        Number of servers :math:`c >= 1`.

    Returns
    -------
    ndarray or float
        :math:`W_q` in seconds; ``inf`` where :math:`\rho = \lambda E[S]/c \ge 1`.

    Notes
    -----
    :math:`W_q = C(c, a) / (c\mu - \lambda) = C(c, a) E[S] / (c - a)` with
    :math:`a = \lambda E[S]` and :math:`C` from :func:`erlang_c` [K]_ (§3.6).
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    c = _servers(servers)
    a = lam * s
    pw = np.asarray(erlang_c(c, a))
    with np.errstate(divide="ignore", invalid="ignore"):
        w = pw * s / (c - a)
    return _out(_overloaded(a / c, w))


def mmc_sojourn(arrival_rate: ArrayLike, mean_service: ArrayLike, servers: ArrayLike):
    r"""M/M/c mean sojourn time :math:`W = W_q + E[S]`; ``inf`` where :math:`\rho \ge 1`.

    Parameters
    ----------
    arrival_rate, mean_service, servers : array_like
        As in :func:`mmc_wait`.

    Returns
    -------
    ndarray or float
        Mean sojourn time (s).

    Notes
    -----
    :math:`W = C(c, a) E[S] / (c - a) + E[S]` [K]_ (§3.6).
    """
    w = np.asarray(mmc_wait(arrival_rate, mean_service, servers))
    return _out(w + _arr(mean_service))


# --------------------------------------------------------------------------------------------
# G/G/1 and G/G/c approximations
# --------------------------------------------------------------------------------------------


def kingman_wait(arrival_rate: ArrayLike, mean_service: ArrayLike, ca2: ArrayLike, cs2: ArrayLike):
    r"""G/G/1 mean waiting time, Kingman's heavy-traffic approximation.

    Parameters
    ----------
    arrival_rate : array_like
        Arrival rate :math:`\lambda` (1/s), >= 0.
    mean_service : array_like
        Mean service time :math:`E[S]` (s), > 0.
    ca2, cs2 : array_like
        Squared coefficients of variation of inter-arrival and service times (>= 0).

    Returns
    -------
    ndarray or float
        Approximate :math:`W_q` (s); ``inf`` where :math:`\rho \ge 1`.

    Notes
    -----
    Kingman's formula [Kin]_:

    .. math:: W_q \approx \frac{\rho}{1 - \rho} \cdot \frac{c_a^2 + c_s^2}{2} \cdot E[S].

    Exact for M/M/1 (:math:`c_a^2 = c_s^2 = 1`) and for M/G/1 (:math:`c_a^2 = 1`, P-K);
    an approximation otherwise, asymptotically exact as :math:`\rho \to 1`.
    """
    lam = _nonneg("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    a2 = _scv("ca2", ca2)
    b2 = _scv("cs2", cs2)
    rho = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        w = rho / (1.0 - rho) * (a2 + b2) / 2.0 * s
    return _out(_overloaded(rho, w))


def allen_cunneen_wait(
    arrival_rate: ArrayLike,
    mean_service: ArrayLike,
    servers: ArrayLike,
    ca2: ArrayLike,
    cs2: ArrayLike,
):
    r"""G/G/c mean waiting time, Allen-Cunneen approximation.

    Parameters
    ----------
    arrival_rate : array_like
        Arrival rate :math:`\lambda` (1/s), >= 0.
    mean_service : array_like
        Mean service time :math:`E[S]` (s), > 0.
    servers : array_like of int
        Number of servers :math:`c >= 1`.
    ca2, cs2 : array_like
        Squared coefficients of variation of inter-arrival and service times (>= 0).

    Returns
    -------
    ndarray or float
        Approximate :math:`W_q` (s); ``inf`` where :math:`\rho = \lambda E[S]/c \ge 1`.

    Notes
    -----
    Allen-Cunneen [AC]_: the M/M/c wait scaled by the variability factor,

    .. math:: W_q \approx \frac{C(c, a)}{c\mu - \lambda} \cdot \frac{c_a^2 + c_s^2}{2},

    with :math:`C(c, a)` the Erlang C probability (:func:`erlang_c`). It is exact for M/M/c
    and reduces to Kingman's formula (:func:`kingman_wait`) for :math:`c = 1`.
    """
    w = np.asarray(mmc_wait(arrival_rate, mean_service, servers))
    a2 = _scv("ca2", ca2)
    b2 = _scv("cs2", cs2)
    return _out(w * (a2 + b2) / 2.0)


# --------------------------------------------------------------------------------------------
# waiting-time quantiles
# --------------------------------------------------------------------------------------------


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
    rp = np.where(pos, r, 0.5)
    g, const = _md1_decay(rp)
    with np.errstate(over="ignore", under="ignore"):
        tail_cdf = 1.0 - const * np.exp(-g * np.where(np.isfinite(x), x, 0.0))
    tail_cdf = np.where(np.isinf(x), 1.0, tail_cdf)
    cdf = np.where(x > MD1_SERIES_SPAN, np.where(pos, tail_cdf, 1.0), cdf)
    cdf = np.where(x < 0, 0.0, cdf)
    cdf = np.where(stable, cdf, 0.0)
    return _out(np.clip(cdf, 0.0, 1.0))


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


# --------------------------------------------------------------------------------------------
# BestServe search bracket
# --------------------------------------------------------------------------------------------


def bestserve_t_min(prefill_time: ArrayLike, decode_time: ArrayLike):
    r"""BestServe's :math:`T_{\min}`: the minimum time to process one request.

    Parameters
    ----------
    prefill_time : array_like
        Estimator time of the prefill of one request alone (batch 1, prompt length s) (s), >= 0.
    decode_time : array_like
        Estimator time of the whole decode phase of that request alone (batch 1, the
        :math:`s_+` generated tokens) (s), >= 0.

    Returns
    -------
    ndarray or float
        :math:`T_{\min}` (s), > 0 required by :func:`goodput_bracket`.

    Notes
    -----
    BestServe §3.5, Algorithm 8 line 3 [BS]_: ":math:`T_{\min}`: min. time to process one
    request under :math:`\mathcal{S}`, as estimated by the Estimator". A request processed
    alone (no queueing, no batching interference) takes its prefill plus its decode, so
    :math:`T_{\min} = T_{\text{prefill}}(b{=}1) + T_{\text{decode}}(b{=}1)`. Under the
    paper's single-queue reading, :math:`1/T_{\min}` is the optimistic serving rate.
    """
    p = _nonneg("prefill_time", prefill_time)
    d = _nonneg("decode_time", decode_time)
    return _out(p + d)


def goodput_bracket(t_min: ArrayLike, lower: float = 0.1, factor: float = 1.2):
    r"""BestServe's initial bisection bracket :math:`[\lambda_\ell, \lambda_u]` for goodput.

    Parameters
    ----------
    t_min : array_like
        :math:`T_{\min}` (s), > 0 (see :func:`bestserve_t_min`).
    lower : float, optional
        Pessimistic lower bound :math:`\lambda_\ell` (req/s); BestServe uses 0.1.
    factor : float, optional
        Multiplier of the optimistic rate; BestServe uses 1.2.

    Returns
    -------
    tuple of (ndarray or float, ndarray or float)
        ``(lambda_l, lambda_u)`` with :math:`\lambda_u = 1.2 / T_{\min}`.

    Notes
    -----
    BestServe §3.5, Algorithm 8 lines 2-3 [BS]_: :math:`\lambda_\ell = 0.1`,
    :math:`\lambda_u = 1.2 / T_{\min}`, "slightly higher than the optimistic serving rate
    :math:`1/T_{\min}`, as exceeding this rate would cause the average queueing delay to
    grow indefinitely". Algorithm 8 then bisects while :math:`\lambda_u - \lambda_\ell >
    \epsilon` (the paper's line 7 prints ``<``, an evident typo) and Algorithm 9 accepts a
    rate when P90 TTFT and P90 TPOT are within :math:`(1 + \tau)` of their goals, τ = 0.1.

    Caveat: with several instances or batching, the true capacity can exceed
    :math:`1/T_{\min}`, so :math:`\lambda_u` is not guaranteed infeasible; a caller should
    check FEASIBLE(:math:`\lambda_u`) and grow the bracket if it holds.

    Examples
    --------
    >>> lo, hi = goodput_bracket(2.0)
    >>> float(lo), float(hi)
    (0.1, 0.6)
    """
    t = _positive("t_min", t_min)
    if not (np.isfinite(lower) and lower > 0):
        raise ValueError(f"lower must be finite and > 0, got {lower!r}")
    if not (np.isfinite(factor) and factor > 0):
        raise ValueError(f"factor must be finite and > 0, got {factor!r}")
    upper = factor / t
    return _out(np.broadcast_to(np.float64(lower), upper.shape).copy()), _out(upper)
