"""Which runtime terms to fit to an engine's rows: chosen by a leave-one-model-out check
inside those rows, to first order.

More terms fit the training rows better and can carry worse to a model they have not
seen: on TensorRT-LLM's rows the per-output-token term of the first token's step, fitted
on the other models, put 1.9 ms per request of the step on gpt-oss-120b (TTFT +96 % held
out, ``bench/results/accuracy_e2e_notes.md``). :func:`select_terms` fits each candidate
set (:data:`TERM_SETS`) to all but one of the rows' models at a time and scores the set by
the first-order error of the models left out (median |error| of TTFT plus that of TPOT,
pooled over the left-out rows; :func:`~serveplan.e2e_fit.fit_rows`'s slopes, no
simulation). The lowest score wins if it beats the first set's by more than :data:`TIE`
(the optimiser's last digits are no evidence); otherwise, and on rows of fewer than
:data:`MIN_MODELS` models, the first set stays. Used inside each held-out fold, the choice
never sees the fold's held-out model (a nested check), so the held-out error stays
honest.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from serveplan.e2e import E2ERow
from serveplan.e2e_fit import (
    E2E_FIT_TERMS,
    EAGER_TERM,
    EXPERT_TERM,
    STEP_OVERHEAD_TERM,
    RowShape,
    first_order,
    fit_rows,
    measured_means,
)

LATENCY_TERMS = ("frontend_output_s", "disagg_handoff_s")
"""A constant latency on every token (and the disaggregated handoff): the fewest terms."""
BASE_SETS = {"all": E2E_FIT_TERMS, "latency": LATENCY_TERMS}
"""The base candidates, the default first."""
OPTIONAL_TERMS = {EXPERT_TERM: "experts", STEP_OVERHEAD_TERM: "step", EAGER_TERM: "eager"}
"""Terms offered to the choice with and without (each doubles the candidates), and the
label a set with one gets (``latency+experts+step``)."""
TIE = 1e-3
"""Score margin (0.1 point of summed median |error|) a set must beat the first set by."""
MIN_MODELS = 3
"""Models the rows need for the inner check: two for a fit, one to hold out, twice."""


def term_sets(names: Sequence[str],
              optional: Sequence[str] = tuple(OPTIONAL_TERMS)) -> dict[str, tuple[str, ...]]:
    """The candidates for a fit of ``names``: the base sets (:data:`BASE_SETS`) among them,
    each also with every term of ``optional`` that ``names`` has (and without it); a term
    beyond both (the step overhead forced with ``optional`` without it) is kept in every
    set."""
    optional = [t for t in OPTIONAL_TERMS if t in optional and t in names]
    extra = tuple(n for n in names if n not in E2E_FIT_TERMS and n not in optional)
    sets = {label: tuple(n for n in terms if n in names) + extra
            for label, terms in BASE_SETS.items()}
    for term in optional:
        sets |= {f"{label}+{OPTIONAL_TERMS[term]}": terms + (term,)
                 for label, terms in sets.items()}
    return sets


TERM_SETS = term_sets(E2E_FIT_TERMS + (EXPERT_TERM,))
"""The default candidates: all five terms or the latency, each with and without the
per-expert term of prompt-carrying steps (:data:`~serveplan.e2e_fit.EXPERT_TERM`)."""


def held_out_first_order(rows, pred0, layers, prefill_s, names, models, start=None,
                         counted=None) -> np.ndarray:
    """Every row's first-order prediction with ``names`` fitted to the rows of the other
    ``models`` (each row's held-out unit); ``counted``: the rows a fit may train on
    (default all; every row is predicted)."""
    out = np.empty_like(pred0)
    for m in sorted(set(models)):
        train = [i for i, mm in enumerate(models)
                 if mm != m and (counted is None or counted[i])]
        test = [i for i, mm in enumerate(models) if mm == m]
        pick = lambda seq, idx: [seq[i] for i in idx]  # noqa: E731
        terms, summ = fit_rows(pick(rows, train), pred0[train], pick(layers, train), names,
                               pick(prefill_s, train), start)
        out[test] = first_order(pick(rows, test), pred0[test], pick(layers, test), terms,
                                summ["fitted"], pick(prefill_s, test), start)
    return out


def select_terms(rows: Sequence[E2ERow], pred0: np.ndarray, layers: Sequence[RowShape | int],
                 prefill_s: Sequence[float | None],
                 candidates: dict[str, tuple[str, ...]] | None = None,
                 start: dict[str, float] | None = None,
                 units: Sequence[str] | None = None) -> tuple[tuple[str, ...], dict]:
    """The candidate term set (default :data:`TERM_SETS`) with the lowest first-order
    leave-one-model-out score on ``rows`` (module docstring) from their term-free
    predictions ``pred0`` (``(n, 2)`` ms), and a summary: the chosen set's name and every
    set's score (None when the rows have too few models to check). ``start``: a term's
    value in ``pred0`` where not 0, as :func:`~serveplan.e2e_fit.fit_rows` takes it.
    ``units``: each row's held-out unit (default its model; a model's twins share one,
    :func:`serveplan.e2e_served.held_out_units`)."""
    candidates = TERM_SETS if candidates is None else candidates
    models = list(units) if units is not None else [r.model for r in rows]
    first = next(iter(candidates))
    if len(set(models)) < MIN_MODELS:
        return tuple(candidates[first]), {"term_set": first, "scores": None}
    pred0 = np.asarray(pred0, dtype=float)
    meas = measured_means(rows)
    scores = {}
    for name, names in candidates.items():
        pred = held_out_first_order(rows, pred0, layers, prefill_s, names, models, start)
        scores[name] = float(np.sum(np.median(np.abs(pred / meas - 1.0), axis=0)))
    best = min(candidates, key=lambda n: scores[n])
    best = best if scores[best] < scores[first] - TIE else first
    return tuple(candidates[best]), {"term_set": best, "scores": scores}


__all__ = ["BASE_SETS", "LATENCY_TERMS", "MIN_MODELS", "OPTIONAL_TERMS", "TERM_SETS", "TIE",
           "held_out_first_order", "select_terms", "term_sets"]
