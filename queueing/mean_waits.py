"""Mean waits of single- and multi-server queues: utilisation, M/M/1, M/G/1, M/D/1, Erlang C,
M/M/c, Kingman and Allen-Cunneen.

Conventions and references: see :mod:`serveplan.queueing.formulas`, which re-exports these.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validate import _arr, _nonneg, _out, _positive, _scv, _servers

__all__ = [
    "allen_cunneen_wait",
    "erlang_c",
    "kingman_wait",
    "md1_wait",
    "mg1_wait",
    "mm1_sojourn",
    "mm1_wait",
    "mmc_sojourn",
    "mmc_wait",
    "utilisation",
]


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
