"""Survival estimators for output lengths: offline Kaplan-Meier and SIBYL's online EMA buckets.

- :func:`kaplan_meier` — product-limit estimator from (possibly right-censored) durations,
  e.g. output lengths of finished requests (observed) and of requests still running or
  aborted at the end of a trace (censored).
- :class:`OnlineSurvival` — SIBYL's online estimator (``papers/sibyl.txt`` §4.2, Eq. 3-4):
  :math:`\\hat S` kept at bucket boundaries :math:`\\Delta, 2\\Delta, \\dots` and updated by an
  exponential moving average on every completion; it answers the conditional survival
  :math:`\\hat S(l_k(\\tau)) / \\hat S(l_k(t_{now}))` used by SIBYL's load projection (Eq. 6-7).
  Its state is plain NumPy arrays that a compiled simulator loop can own and pass to the
  kernels in :mod:`serveplan.kernels.survival` directly.
- :func:`calibration_error` — the estimation-error metric of SIBYL §5.2 (Figure 7): mean
  absolute error between predicted and true conditional survival on a dense
  (current length, target length) grid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from serveplan.kernels import survival as _k

__all__ = [
    "CalibrationError",
    "KaplanMeier",
    "OnlineSurvival",
    "bucket_prior",
    "calibration_error",
    "empirical_survival",
    "kaplan_meier",
]


# --------------------------------------------------------------------------------------------
# Kaplan-Meier
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KaplanMeier:
    """Kaplan-Meier estimate :math:`\\hat S(x) = P(L > x)` as a right-continuous step function.

    Attributes
    ----------
    times : ndarray, shape (m,)
        Distinct observed event times (ascending), :math:`t_1 < \\dots < t_m`.
    survival : ndarray, shape (m,)
        :math:`\\hat S(t_i)`, the value on :math:`[t_i, t_{i+1})`; :math:`\\hat S = 1` before
        :math:`t_1`.
    n_at_risk : ndarray of int, shape (m,)
        :math:`n_i`, number of durations :math:`\\ge t_i` (events and censorings).
    n_events : ndarray of int, shape (m,)
        :math:`d_i`, number of observed events at :math:`t_i`.
    """

    times: np.ndarray
    survival: np.ndarray
    n_at_risk: np.ndarray
    n_events: np.ndarray

    def __call__(self, x: ArrayLike) -> np.ndarray:
        """Evaluate :math:`\\hat S(x)` (1 before the first event; last value after the last)."""
        xa = np.asarray(x, dtype=np.float64)
        idx = np.searchsorted(self.times, xa, side="right")
        vals = np.concatenate(([1.0], self.survival))
        out = vals[idx]
        return out[()] if out.ndim == 0 else out

    def on_grid(self, grid: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(grid, S_hat(grid))`` for a 1-D grid of lengths."""
        g = np.asarray(grid, dtype=np.float64)
        return g, np.asarray(self(g))

    def bucket_prior(self, delta: float, n_buckets: int) -> np.ndarray:
        """:math:`\\hat S` at SIBYL's bucket boundaries ``(i+1)*delta``, to seed
        :class:`OnlineSurvival`: the step function's value there, :math:`P(L > l)` (the
        online estimator's convention, :mod:`serveplan.kernels.survival`)."""
        bounds = np.arange(1, n_buckets + 1, dtype=np.float64) * delta
        return np.asarray(self(bounds), dtype=np.float64)


def kaplan_meier(durations: ArrayLike, observed: ArrayLike | None = None) -> KaplanMeier:
    """Kaplan-Meier (product-limit) estimator of the survival function of durations.

    Parameters
    ----------
    durations : array_like, shape (n,)
        Durations (here: output lengths in tokens), finite and >= 0.
    observed : array_like of bool, shape (n,), optional
        True where the duration ended in the event (request finished), False where it is
        right-censored (request still running / aborted at that length). Default: all True.

    Returns
    -------
    KaplanMeier
        Step function with ``times``, ``survival``, ``n_at_risk``, ``n_events``; call it to
        evaluate :math:`\\hat S(x)` anywhere.

    Notes
    -----
    Kaplan & Meier (1958), "Nonparametric estimation from incomplete observations", JASA 53:

    .. math:: \\hat S(x) = \\prod_{t_i \\le x} \\left(1 - \\frac{d_i}{n_i}\\right),

    with :math:`t_i` the distinct event times, :math:`d_i` the events at :math:`t_i` and
    :math:`n_i` the number at risk (durations :math:`\\ge t_i`; a censoring tied with an event
    counts as at risk at that time). Without censoring it equals the empirical survival
    function :math:`\\#\\{L_j > x\\} / n`.

    Examples
    --------
    >>> km = kaplan_meier([1, 2, 2, 3], observed=[True, True, False, True])
    >>> km.times.tolist(), km.survival.round(4).tolist()
    ([1.0, 2.0, 3.0], [0.75, 0.5, 0.0])
    """
    d = np.asarray(durations, dtype=np.float64).ravel()
    if d.size == 0:
        raise ValueError("durations must be non-empty, got an empty array")
    ok = np.isfinite(d) & (d >= 0)
    if not np.all(ok):
        raise ValueError(f"durations must be finite and >= 0, got {float(d[~ok][0])!r}")
    e = _event_flags(observed, d.shape)
    order = np.argsort(d, kind="stable")
    d, e = d[order], e[order]
    uniq, first = np.unique(d, return_index=True)
    n_at_risk_all = d.size - first
    events_all = np.add.reduceat(e.astype(np.int64), first)
    keep = events_all > 0
    times = uniq[keep]
    n_i = n_at_risk_all[keep]
    d_i = events_all[keep]
    surv = np.cumprod(1.0 - d_i / n_i)
    return KaplanMeier(times=times, survival=surv, n_at_risk=n_i, n_events=d_i)


def bucket_prior(lengths: ArrayLike, delta: float, n_buckets: int) -> np.ndarray:
    """Kaplan-Meier estimate of a sample of output ``lengths`` (all observed) at the bucket
    boundaries ``(i+1)*delta``: the warm start of SIBYL's online estimator.

    Without censoring this is the empirical survival :math:`\\#\\{L_j > (i+1)\\Delta\\}/n`.
    """
    if not (np.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be finite and > 0, got {delta!r}")
    return kaplan_meier(lengths).bucket_prior(delta, int(n_buckets))


def _event_flags(observed: ArrayLike | None, shape: tuple[int, ...]) -> np.ndarray:
    """``observed`` as a bool array of ``shape`` (all True when None); 0/1 values accepted."""
    if observed is None:
        return np.ones(shape, dtype=bool)
    e = np.asarray(observed).ravel()
    if e.shape != shape:
        raise ValueError(f"observed must have the shape of durations {shape}, got {e.shape}")
    if e.dtype != bool:
        if not np.all(np.isin(e, (0, 1))):
            raise ValueError(f"observed must be boolean (0/1), got values {np.unique(e)!r}")
        e = e.astype(bool)
    return e


def empirical_survival(samples: ArrayLike, x: ArrayLike) -> np.ndarray:
    """Empirical survival :math:`\\#\\{L_j > x\\} / n` of a sample (vectorised over ``x``).

    Parameters
    ----------
    samples : array_like, shape (n,)
        Observed lengths.
    x : array_like
        Evaluation points.

    Returns
    -------
    ndarray
        Same shape as ``x``.
    """
    s = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    if s.size == 0:
        raise ValueError("samples must be non-empty, got an empty array")
    xa = np.asarray(x, dtype=np.float64)
    return 1.0 - np.searchsorted(s, xa, side="right") / s.size


# --------------------------------------------------------------------------------------------
# SIBYL online estimator
# --------------------------------------------------------------------------------------------


def _f64_1d(name: str, x: ArrayLike) -> np.ndarray:
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    return a


@dataclass(frozen=True)
class OnlineSurvival:
    """SIBYL's online survival estimator over length buckets (``papers/sibyl.txt`` §4.2).

    The dataclass is frozen but its state array is updated in place, so a simulator may hold
    ``est.surv`` (and the scalars ``est.delta``, ``est.alpha``) and call the kernels of
    :mod:`serveplan.kernels.survival` directly inside compiled code.

    Attributes
    ----------
    surv : ndarray of float64, shape (n_buckets,)
        The whole state: ``surv[i]`` is :math:`\\hat S((i+1)\\Delta)`, the EMA estimate of
        :math:`P(L > (i+1)\\Delta)` at bucket boundary :math:`(i+1)\\Delta`. The value at
        length 0 is implicit, :math:`\\hat S(0) = 1`. Non-increasing in ``i`` as long as
        the initial values are (every update adds a non-increasing indicator).
    delta : float
        Bucket width :math:`\\Delta` (tokens), > 0.
    alpha : float
        EMA smoothing factor :math:`\\alpha \\in (0, 1)`: the weight of the old value, so each
        completion moves every entry by a fraction :math:`1 - \\alpha` towards its indicator
        (effective memory :math:`\\approx 1 / (1 - \\alpha)` completions).

    Notes
    -----
    Update on each completion with final length :math:`L_{final}` (SIBYL Eq. 4):

    .. math:: \\hat S(l) \\leftarrow \\alpha \\hat S(l) + (1 - \\alpha)\\,
              \\mathbb{I}_{L_{final} > l}, \\qquad l \\in \\{\\Delta, 2\\Delta, \\dots\\}.

    The update is applied to *every* bucket. The paper's prose says "for all relevant buckets
    (:math:`l \\le L_{final}`)", but on those buckets the indicator is identically 1, so
    restricting the update to them would drive :math:`\\hat S` to 1 everywhere; the decay of
    buckets above :math:`L_{final}` is what makes Eq. (4) an estimator. The indicator is
    taken strict, :math:`\\mathbb{I}_{L_{final} > l}`, so the state estimates
    :math:`S(l) = P(L > l)` as Eq. 3 and Kaplan-Meier define it (the paper's Eq. 4 writes
    :math:`\\ge`; the two differ by the mass exactly at :math:`l`, e.g. the requests stopped
    at an output cap that is a multiple of :math:`\\Delta`).

    Off the boundaries :math:`\\hat S` is a right-continuous step function, as a Kaplan-Meier
    estimate: the value of the boundary at or below the length (1 below :math:`\\Delta`), held
    at ``surv[-1]`` beyond :math:`n\\Delta` (:mod:`serveplan.kernels.survival`, the one lookup
    SIBYL's router uses too). The initial state is a prior; the default (all ones) makes
    every active request certain to survive (SIBYL's PROB@1 variant, Appendix J) until
    completions have been seen; :func:`bucket_prior` (the Kaplan-Meier estimate of a sample)
    is the warm start.

    Conditional survival (SIBYL Eq. 3, 6): for a request at generated length :math:`l_{now}`
    projected to :math:`l_\\tau = l_{now} + v_k (\\tau - t_{now})`,
    :math:`P_k = \\hat S(l_\\tau) / \\hat S(l_{now})`, capped at 1, and 1 where
    :math:`\\hat S(l_{now}) = 0`. For pre-handoff shadow tasks (Eq. 7) pass ``l_now = 0``.
    """

    surv: np.ndarray
    delta: float
    alpha: float

    @classmethod
    def create(
        cls,
        max_length: float,
        delta: float,
        alpha: float,
        initial: ArrayLike | Callable[[np.ndarray], ArrayLike] | None = None,
    ) -> OnlineSurvival:
        """Allocate the state for lengths up to ``max_length`` in buckets of width ``delta``.

        Parameters
        ----------
        max_length : float
            Largest length to resolve (e.g. ``max_tokens``); ``n_buckets = ceil(max_length /
            delta)``.
        delta : float
            Bucket width :math:`\\Delta` (tokens), > 0.
        alpha : float
            EMA factor in (0, 1).
        initial : array_like or callable, optional
            Initial :math:`\\hat S` at the boundaries: an array of length ``n_buckets``, or a
            callable evaluated at the boundaries (e.g. a :class:`KaplanMeier` or a
            distribution's ``sf``). Default: ones.

        Returns
        -------
        OnlineSurvival
        """
        if not (np.isfinite(delta) and delta > 0):
            raise ValueError(f"delta must be finite and > 0, got {delta!r}")
        if not (np.isfinite(alpha) and 0 < alpha < 1):
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if not (np.isfinite(max_length) and max_length >= delta):
            raise ValueError(
                f"max_length must be finite and >= delta={delta!r}, got {max_length!r}"
            )
        n = int(np.ceil(max_length / delta))
        bounds = np.arange(1, n + 1, dtype=np.float64) * delta
        if initial is None:
            surv = np.ones(n)
        else:
            vals = initial(bounds) if callable(initial) else initial
            surv = np.array(vals, dtype=np.float64).ravel()
            if surv.shape != (n,):
                raise ValueError(f"initial must have {n} values (one per bucket), got {surv.shape}")
            ok = (surv >= 0) & (surv <= 1)
            if not np.all(ok):
                raise ValueError(f"initial survival values must be in [0, 1], got {surv[~ok][0]!r}")
        return cls(surv=surv, delta=float(delta), alpha=float(alpha))

    @property
    def n_buckets(self) -> int:
        """Number of stored boundaries."""
        return int(self.surv.shape[0])

    @property
    def boundaries(self) -> np.ndarray:
        """Bucket boundaries :math:`(i+1)\\Delta`, shape (n_buckets,)."""
        return np.arange(1, self.n_buckets + 1, dtype=np.float64) * self.delta

    def update(self, final_lengths: ArrayLike) -> None:
        """Apply Eq. (4) for each completion in ``final_lengths`` (in order), in place."""
        f = _f64_1d("final_lengths", final_lengths)
        ok = np.isfinite(f) & (f >= 0)
        if not np.all(ok):
            raise ValueError(f"final_lengths must be finite and >= 0, got {float(f[~ok][0])!r}")
        _k.ema_survival_update_many(self.surv, self.delta, self.alpha, f)

    def survival(self, lengths: ArrayLike) -> np.ndarray:
        """:math:`\\hat S` at ``lengths`` (1-D): the step function of the boundaries."""
        x = _f64_1d("lengths", lengths)
        out = np.empty_like(x)
        _k.survival_at(self.surv, self.delta, x, out)
        return out

    def conditional(self, l_now: ArrayLike, l_future: ArrayLike) -> np.ndarray:
        """Conditional survival :math:`\\hat S(l_{future}) / \\hat S(l_{now})` (SIBYL Eq. 3).

        Parameters
        ----------
        l_now, l_future : array_like, shape (n,)
            Current and projected generated lengths; ``l_future >= l_now`` expected (the ratio
            is capped at 1 otherwise).

        Returns
        -------
        ndarray, shape (n,)
        """
        a = _f64_1d("l_now", l_now)
        b = _f64_1d("l_future", l_future)
        if a.shape != b.shape:
            raise ValueError(
                f"l_now and l_future must have the same shape, got {a.shape} and {b.shape}"
            )
        out = np.empty_like(a)
        _k.conditional_survival(self.surv, self.delta, a, b, out)
        return out

    def projected_load(
        self,
        instance: ArrayLike,
        l_in: ArrayLike,
        l_now: ArrayLike,
        rate: ArrayLike,
        horizon: float,
        n_instances: int,
    ) -> np.ndarray:
        """SIBYL Type-1 projected load per instance (Eq. 6 summed as in Eq. 1).

        Parameters
        ----------
        instance : array_like of int, shape (n,)
            Instance index of each active request, in ``[0, n_instances)``.
        l_in, l_now, rate : array_like, shape (n,)
            Prompt length, generated length now, decode rate :math:`v_k` (tokens/s).
        horizon : float
            :math:`\\tau - t_{now}` (s), >= 0.
        n_instances : int
            Number of instances (length of the result).

        Returns
        -------
        ndarray, shape (n_instances,)
            :math:`\\sum_{k \\in Q_j^{run}} (l_k^{in} + l_k(\\tau)) \\hat S(l_k(\\tau)) /
            \\hat S(l_k(t_{now}))`.
        """
        inst = np.ascontiguousarray(instance, dtype=np.int64)
        a = _f64_1d("l_in", l_in)
        b = _f64_1d("l_now", l_now)
        v = _f64_1d("rate", rate)
        if not (inst.shape == a.shape == b.shape == v.shape):
            raise ValueError(
                "instance, l_in, l_now, rate must have one shape, got "
                f"{inst.shape}, {a.shape}, {b.shape}, {v.shape}"
            )
        if inst.size and (inst.min() < 0 or inst.max() >= n_instances):
            bad = inst[(inst < 0) | (inst >= n_instances)][0]
            raise ValueError(f"instance indices must be in [0, {n_instances}), got {int(bad)}")
        if not (np.isfinite(horizon) and horizon >= 0):
            raise ValueError(f"horizon must be finite and >= 0, got {horizon!r}")
        out = np.zeros(int(n_instances))
        _k.projected_active_load(self.surv, self.delta, inst, a, b, v, float(horizon), out)
        return out


# --------------------------------------------------------------------------------------------
# calibration error (SIBYL §5.2)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationError:
    """Result of :func:`calibration_error`.

    Attributes
    ----------
    mae : float
        Mean absolute error over the valid cells of the grid (SIBYL §5.2's metric).
    max_abs : float
        Largest absolute error over the valid cells (the paper also quotes this bound, e.g.
        "below 14%" on ShareGPT).
    surface : ndarray, shape (n_now, n_target)
        Absolute error per (current length, target length) cell; NaN where the cell is
        invalid (target < current, or true :math:`S(l_{now}) = 0`). Figure 7 plots this.
    """

    mae: float
    max_abs: float
    surface: np.ndarray


def calibration_error(
    estimator: OnlineSurvival | Callable[[np.ndarray, np.ndarray], np.ndarray],
    true_survival: Callable[[np.ndarray], ArrayLike] | ArrayLike,
    current_lengths: ArrayLike,
    target_lengths: ArrayLike,
) -> CalibrationError:
    """Calibration error of conditional survival predictions (SIBYL §5.2, Figure 7).

    Parameters
    ----------
    estimator : OnlineSurvival or callable
        The estimator, or a callable ``(l_now, l_future) -> P`` on flat arrays.
    true_survival : callable or array_like
        Ground truth: a callable :math:`S(x) = P(L > x)` (e.g. ``scipy.stats`` ``sf``), or a
        sample of test-set lengths (its empirical survival is used, as in the paper's
        "ground-truth conditional probabilities derived from the cumulative distribution
        functions of the test datasets").
    current_lengths, target_lengths : array_like, 1-D
        The dense grid of current lengths :math:`l_{now}` and target lengths :math:`l_\\tau`.

    Returns
    -------
    CalibrationError
        ``mae``, ``max_abs`` and the error ``surface``.

    Notes
    -----
    SIBYL §5.2: "we queried the estimator on a dense grid of current lengths and target
    lengths ..., calculating the mean absolute error between the predicted survival
    probability :math:`\\mathcal{P}` and ground-truth conditional probabilities". With
    :math:`P^*(a, b) = S(b) / S(a)`:

    .. math:: \\text{MAE} = \\frac{1}{|G|} \\sum_{(a, b) \\in G}
              |\\hat{\\mathcal{P}}(a, b) - P^*(a, b)|,\\qquad
              G = \\{(a, b): b \\ge a,\\ S(a) > 0\\}.
    """
    a = _f64_1d("current_lengths", current_lengths)
    b = _f64_1d("target_lengths", target_lengths)
    sf = _survival_function(true_survival)
    aa, bb = np.meshgrid(a, b, indexing="ij")
    s_a = sf(aa.ravel()).reshape(aa.shape)
    s_b = sf(bb.ravel()).reshape(bb.shape)
    valid = (bb >= aa) & (s_a > 0)
    if not np.any(valid):
        raise ValueError(
            "no valid (current, target) cell: need target >= current with S(current) > 0"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        truth = np.where(valid, s_b / s_a, np.nan)
    if isinstance(estimator, OnlineSurvival):
        pred = estimator.conditional(aa.ravel(), bb.ravel()).reshape(aa.shape)
    else:
        pred = np.asarray(estimator(aa.ravel(), bb.ravel()), dtype=np.float64).reshape(aa.shape)
    err = np.where(valid, np.abs(pred - truth), np.nan)
    return CalibrationError(mae=float(np.nanmean(err)), max_abs=float(np.nanmax(err)), surface=err)


def _survival_function(
    true_survival: Callable[[np.ndarray], ArrayLike] | ArrayLike,
) -> Callable[[np.ndarray], np.ndarray]:
    """:math:`S(x)` as a float64 callable: the given one, or a sample's empirical survival."""
    if callable(true_survival):

        def sf(x: np.ndarray) -> np.ndarray:
            return np.asarray(true_survival(x), dtype=np.float64)

    else:
        sample = np.asarray(true_survival, dtype=np.float64)

        def sf(x: np.ndarray) -> np.ndarray:
            return empirical_survival(sample, x)

    return sf
