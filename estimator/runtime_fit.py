"""Fit an engine's runtime terms to end-to-end measurements.

The terms (:class:`~serveplan.estimator.runtime.RuntimeTerms`) act on a run through the
simulator -- a front-end delay shifts every arrival of a closed loop, a per-step term
stretches every step -- so they are fitted with the simulator in the loop: ``predict(terms)``
returns the predicted medians (TTFT, TPOT) of every run, and :func:`fit_terms` minimises
a robust loss (soft L1) of the log ratios predicted / measured over the free terms, within
bounds (>= 0). The loss is not smooth in the terms -- a closed loop's clients fall in and
out of step as a delay changes, moving a median by whole steps -- so the search is
derivative-free (Powell's method within the bounds), not finite-difference gradients. Terms the runs cannot identify are not fitted: a tensor-parallel term needs
runs with tp > 1 and with tp = 1 (:func:`identifiable`).

The same function fits the shipped profiles (from ``../shared/data/e2e``, validated
leave-one-model-out by ``bench/accuracy_e2e.py``) and a user's own runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from .runtime import RuntimeTerms

SOFT_L1_SCALE = 0.1  # log-ratio residuals beyond ~10 % count linearly, not squared
# the terms fitted by default, their scale (seconds) and upper bound
FIT_TERMS = {"frontend_request_s": (5e-3, 0.5), "frontend_output_per_token_s": (1e-4, 5e-3),
             "tp_sync_per_layer_s": (1e-5, 1e-3), "step_cpu_s": (1e-3, 0.05)}


@dataclass(frozen=True)
class FitResult:
    """Fitted terms, the terms left alone (and why), and the errors before and after."""

    terms: RuntimeTerms
    fitted: tuple[str, ...]
    skipped: dict[str, str]
    err_before: np.ndarray  # |pred / meas - 1| per run: columns TTFT, TPOT
    err_after: np.ndarray

    def summary(self) -> dict:
        med = lambda e: [float(np.median(e[:, 0])), float(np.median(e[:, 1]))]  # noqa: E731
        return {"fitted": list(self.fitted), "skipped": self.skipped,
                "median_abs_err_before": med(self.err_before),
                "median_abs_err_after": med(self.err_after),
                "terms": self.terms.model_dump()}


def identifiable(names: Sequence[str], tp: np.ndarray) -> tuple[list[str], dict[str, str]]:
    """The terms the runs can identify, and the reason for each one they cannot."""
    keep, skipped = [], {}
    for name in names:
        if name == "tp_sync_per_layer_s" and not ((tp > 1).any() and (tp == 1).any()):
            skipped[name] = ("needs runs at tensor-parallel size 1 and > 1 (it is the "
                             "difference between them beyond the all-reduce time)")
            continue
        keep.append(name)
    return keep, skipped


def _errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred / meas - 1.0)


def fit_terms(predict: Callable[[RuntimeTerms], np.ndarray], measured: np.ndarray,
              tp: np.ndarray, base: RuntimeTerms | None = None,
              names: Sequence[str] = tuple(FIT_TERMS), max_evals: int = 200) -> FitResult:
    """Fit ``names`` (those the runs identify) of ``base`` to ``measured``.

    ``measured`` and ``predict(terms)`` are ``(n, 2)`` arrays of TTFT and TPOT medians in
    the same unit; ``tp`` is each run's tensor-parallel size.
    """
    base = base or RuntimeTerms()
    measured = np.asarray(measured, dtype=float)
    names, skipped = identifiable(names, np.asarray(tp))
    scale = np.array([FIT_TERMS[n][0] for n in names])
    upper = np.array([FIT_TERMS[n][1] for n in names]) / scale

    def terms_of(x) -> RuntimeTerms:
        return base.model_copy(update={n: float(v * s) for n, v, s in zip(names, x, scale, strict=True)})

    def loss(x) -> float:
        r = np.log(predict(terms_of(x)) / measured).ravel() / SOFT_L1_SCALE
        return float(np.sum(2.0 * (np.sqrt(1.0 + r * r) - 1.0)))

    before = _errors(predict(base), measured)
    if not names:
        return FitResult(base, (), skipped, before, before)
    x0 = np.minimum(np.array([getattr(base, n) for n in names]) / scale, upper)
    sol = minimize(loss, x0, method="Powell", bounds=list(zip(np.zeros_like(upper), upper,
                                                             strict=True)),
                   options={"maxfev": max_evals, "xtol": 1e-3, "ftol": 1e-6})
    terms = terms_of(np.clip(sol.x, 0.0, upper))
    return FitResult(terms, tuple(names), skipped, before, _errors(predict(terms), measured))


__all__ = ["FIT_TERMS", "FitResult", "fit_terms", "identifiable"]
