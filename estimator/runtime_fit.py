"""Fit an engine's runtime terms to end-to-end measurements.

The terms (:class:`~serveplan.estimator.runtime.RuntimeTerms`) act on a run through the
simulator: a front-end delay adds to every first token, a per-step term stretches every
step. Around a point ``x`` of the terms, a run's predicted medians (TTFT, TPOT) move to
first order as ``pred(x') = pred(x) + J (x' - x)``, with ``J`` the sensitivity of each
median to each term. :func:`fit_first_order` minimises a robust loss (Cauchy, started from
the convex soft-L1 solution) of the log ratios predicted / measured of that linear model
within bounds (>= 0): a smooth problem that needs no simulation. :func:`fit_terms` wraps it with the simulator in the loop: ``J``
by finite differences of ``predict(terms)`` (one simulation per term; steps of one term
scale, so that a closed loop whose clients fall in and out of step gives the average
slope, not a jump), a linear solve, then the simulated loss at the solution -- halving the
step towards the start while it is worse -- and again from there. Terms the runs cannot
identify are not fitted: a tensor-parallel term needs runs with tp > 1 and with tp = 1
(:func:`identifiable`), and a term that moves no median (e.g. CPU work an async engine
hides behind the GPU step) is reported as such.

Default terms: the front end's latency (``frontend_output_s``: every token, the first
included, reaches the client that much later; a latency, not a serialised service), its
work per output token of a step (``frontend_output_per_token_s``: the first token waits for
its step's other tokens), the tokenizer's work per prompt token (serialised), and the
tensor-parallel synchronisation per layer, and a disaggregated request's handoff from
prefill to decode beyond the KV transfer.

The same functions fit the shipped profiles (from ``../shared/data/e2e``, validated
leave-one-model-out by ``bench/accuracy_e2e.py``, which supplies ``J`` in closed form,
:mod:`serveplan.e2e_fit`) and a user's own runs (``serveplan calibrate --runs``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from .profile import Profile
from .runtime import RuntimeTerms

LOSS_SCALE = 0.1  # log-ratio residuals beyond ~10 % count less than squared
FIT_TERMS = ("frontend_output_s", "frontend_prompt_token_s", "frontend_output_per_token_s",
             "tp_sync_per_layer_s", "disagg_handoff_s")  # fitted by default
# every fittable term's scale (seconds: the finite-difference step) and upper bound
TERM_SCALES = {"frontend_output_s": (5e-3, 1.0), "frontend_prompt_token_s": (1e-5, 1e-3),
               "frontend_output_per_token_s": (1e-4, 5e-3), "tp_sync_per_layer_s": (1e-5, 1e-3),
               "frontend_request_s": (5e-3, 0.5), "step_cpu_s": (1e-3, 0.05),
               "step_cpu_per_request_s": (1e-5, 1e-3), "step_cpu_per_token_s": (1e-6, 1e-4),
               "prefill_token_layer_s": (2e-7, 1e-5), "disagg_handoff_s": (5e-3, 2.0),
               "prefill_step_expert_layer_s": (2e-6, 1e-4),
               "step_overhead_s": (1e-4, 1e-2), "eager_dispatch_layer_s": (1e-4, 5e-3)}
_NO_EFFECT = 1e-9  # a Jacobian column below this (relative) moves no median


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


def identifiable(names: Sequence[str], tp: np.ndarray,
                 disaggregated: np.ndarray | None = None,
                 expert_layers: np.ndarray | None = None) -> tuple[list[str], dict[str, str]]:
    """The terms the runs can identify, and the reason for each one they cannot
    (``disaggregated``: which runs hand requests from prefill to decode; None: none;
    ``expert_layers``: each run's model's MoE layers times experts; None: not known)."""
    keep, skipped = [], {}
    colocated = np.ones(len(tp), bool) if disaggregated is None else ~np.asarray(disaggregated)
    for name in names:
        if (name == "prefill_step_expert_layer_s" and expert_layers is not None
                and not np.any(np.asarray(expert_layers)[colocated])):
            skipped[name] = ("needs colocated runs of a mixture-of-experts model (it is per "
                             "expert, not charged on disaggregated prefill instances)")
            continue
        if name == "tp_sync_per_layer_s" and not ((tp > 1).any() and (tp == 1).any()):
            skipped[name] = ("needs runs at tensor-parallel size 1 and > 1 (it is the "
                             "difference between them beyond the all-reduce time)")
            continue
        if name == "disagg_handoff_s" and (disaggregated is None or not np.any(disaggregated)):
            skipped[name] = ("needs disaggregated runs (it delays the handoff from prefill "
                             "to decode)")
            continue
        keep.append(name)
    return keep, skipped


def _log_ratios(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Log ratios predicted / measured in units of :data:`LOSS_SCALE` (non-positive
    predictions count as a thousandth of the measurement)."""
    return np.log(np.maximum(pred, 1e-3 * measured) / measured).ravel() / LOSS_SCALE


def soft_l1_loss(pred: np.ndarray, measured: np.ndarray) -> float:
    """Soft-L1 loss of the log ratios: convex, so its minimum is where any start leads;
    :func:`fit_first_order` starts the redescending :func:`robust_loss` from it."""
    r = _log_ratios(pred, measured)
    return float(np.sum(2.0 * (np.sqrt(1.0 + r * r) - 1.0)))


def robust_loss(pred: np.ndarray, measured: np.ndarray) -> float:
    """Cauchy loss of the log ratios, ``sum log(1 + r^2)``: quadratic within
    :data:`LOSS_SCALE`, and a run many times further off pulls less the further it is, where
    soft L1 pulls it at a constant rate. So a model or a batch of runs the runtime does not
    explain (a stalled engine, a host slower than the rest) moves the terms little. Held
    out, the change from soft L1 lowered every engine's median TTFT error to first order
    and, simulated, vLLM's and TensorRT-LLM's but not SGLang's
    (``bench/results/accuracy_e2e_notes.md``)."""
    r = _log_ratios(pred, measured)
    return float(np.sum(np.log1p(r * r)))


def fit_first_order(pred0: np.ndarray, jac: np.ndarray, measured: np.ndarray,
                    x0: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Terms ``x`` in ``[0, upper]`` minimising :func:`robust_loss` of ``pred0 + jac @ (x -
    x0)``; ``pred0`` and ``measured`` are ``(n, k)`` (the end-to-end fits: TTFT and TPOT,
    ``k = 2``), ``jac`` is ``(n, k, m)`` in the units of the predictions per unit of the
    terms. The Cauchy loss is not convex: the search starts at the minimum of the convex
    :func:`soft_l1_loss` (an M-estimate started from a unique one), so the answer does not
    turn on ``x0``."""
    scale = np.where(upper > 0, upper, 1.0)
    js = jac * scale  # work in units of the bounds: x = u * scale, u in [0, 1]
    u0 = np.clip(x0 / scale, 0.0, 1.0)
    bounds = [(0.0, 1.0)] * len(u0)
    u = u0
    for loss in (soft_l1_loss, robust_loss):
        u = minimize(lambda v, loss=loss: loss(pred0 + js @ (v - u0), measured), u,
                     method="L-BFGS-B", bounds=bounds).x
    return np.clip(u, 0.0, 1.0) * scale


def _value(base: RuntimeTerms, name: str) -> float:
    """``base``'s value of a term; an unset step overhead is the GPU profiles' default."""
    value = getattr(base, name)
    return Profile.model_fields[name].default if value is None else value


def _terms(base: RuntimeTerms, names: Sequence[str], x: np.ndarray) -> RuntimeTerms:
    return base.model_copy(update={n: float(v) for n, v in zip(names, x, strict=True)})


def _jacobian(predict, base, names, x, p0) -> np.ndarray:
    cols = []
    for i, name in enumerate(names):
        step = np.zeros(len(names))
        step[i] = TERM_SCALES[name][0]
        cols.append((predict(_terms(base, names, x + step)) - p0) / step[i])
    return np.stack(cols, axis=-1)


def _step(predict, base, names, x, p, measured, budget):
    """One linearised step from ``x`` (predictions ``p``): the new point, its predictions,
    the terms that moved no median, and the ``predict`` calls spent."""
    jac = _jacobian(predict, base, names, x, p)
    spent = len(names)
    flat = np.abs(jac).max(axis=(0, 1)) <= _NO_EFFECT * np.abs(p).max()
    upper = np.array([TERM_SCALES[n][1] for n in names])
    x_new = fit_first_order(p, jac, measured, x, np.where(flat, x, upper))
    for _ in range(3):  # the linear model overshoots where the medians are not linear
        p_new = predict(_terms(base, names, x_new))
        spent += 1
        if robust_loss(p_new, measured) < robust_loss(p, measured) or spent >= budget:
            break
        x_new = (x + x_new) / 2.0
    return x_new, p_new, flat, spent


def fit_terms(predict: Callable[[RuntimeTerms], np.ndarray], measured: np.ndarray,
              tp: np.ndarray, base: RuntimeTerms | None = None,
              names: Sequence[str] = FIT_TERMS, max_evals: int = 20,
              disaggregated: np.ndarray | None = None) -> FitResult:
    """Fit ``names`` (those the runs identify) of ``base`` to ``measured``, with the
    simulator in the loop (module docstring); at most about ``max_evals`` calls of
    ``predict``.

    ``measured`` and ``predict(terms)`` are ``(n, 2)`` arrays of TTFT and TPOT medians in
    the same unit; ``tp`` is each run's tensor-parallel size, ``disaggregated`` whether
    it hands requests from prefill to decode.
    """
    base = base or RuntimeTerms()
    measured = np.asarray(measured, dtype=float)
    names, skipped = identifiable(names, np.asarray(tp), disaggregated)
    p = predict(base)
    before = np.abs(p / measured - 1.0)
    x = np.array([_value(base, n) for n in names], dtype=float)
    flat = np.zeros(len(names), dtype=bool)
    evals = 1
    while names and evals + len(names) + 1 <= max_evals:
        x_new, p_new, flat, spent = _step(predict, base, names, x, p, measured,
                                          max_evals - evals)
        evals += spent
        if robust_loss(p_new, measured) >= robust_loss(p, measured):
            break
        converged = np.allclose(x_new, x, rtol=1e-2, atol=1e-9)
        x, p = x_new, p_new
        if converged:
            break
    for name in np.array(names)[flat]:
        skipped[str(name)] = "moves no median of these runs (e.g. CPU work an async engine hides)"
    fitted = tuple(n for n, f in zip(names, flat, strict=True) if not f)
    return FitResult(_terms(base, names, x), fitted, skipped, before,
                     np.abs(p / measured - 1.0))


__all__ = ["FIT_TERMS", "FitResult", "TERM_SCALES", "fit_first_order", "fit_terms",
           "identifiable", "robust_loss", "soft_l1_loss"]
