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

The formulas live in :mod:`.mean_waits` (utilisation and mean waits) and
:mod:`.wait_quantiles` (waiting-time quantiles and the M/D/1 CDF); this module re-exports
them and holds BestServe's goodput search bracket.

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

from ._validate import _nonneg, _out, _positive
from .mean_waits import (
    allen_cunneen_wait,
    erlang_c,
    kingman_wait,
    md1_wait,
    mg1_wait,
    mm1_sojourn,
    mm1_wait,
    mmc_sojourn,
    mmc_wait,
    utilisation,
)
from .wait_quantiles import MD1_SERIES_SPAN as MD1_SERIES_SPAN  # re-exported, not in __all__
from .wait_quantiles import (
    exponential_tail_wait_quantile,
    ggc_wait_quantile,
    md1_wait_cdf,
    md1_wait_quantile,
    mm1_wait_quantile,
    mmc_wait_quantile,
)

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
