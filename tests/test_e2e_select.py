"""Choosing the runtime terms to fit by a leave-one-model-out check inside the training
rows (``serveplan.e2e_select``), on rows whose measured TTFT is built by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from serveplan.e2e import E2ERow
from serveplan.e2e_fit import EAGER_TERM, EXPERT_TERM, RowShape, first_order, row_slopes
from serveplan.e2e_select import LATENCY_TERMS, TERM_SETS, select_terms, term_sets
from serveplan.estimator.runtime import RuntimeTerms


def _rows(models, concurrencies=(4, 64)):
    return [E2ERow(id=f"{m}-{c}", engine="trtllm", version="1", model=m, system="b200_sxm",
                   precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=c,
                   batch_size=c, tp=1, pp=1, dp=1, ep=1, ttft_ms=0.0, tpot_ms=10.0)
            for m in models for c in concurrencies]


def _measured(rows, ttft):
    return [replace(r, ttft_ms=float(t)) for r, t in zip(rows, ttft, strict=True)]


def test_the_set_that_carries_to_the_held_out_model_wins():
    """Every row's term-free TTFT is 100 ms and TPOT 10 ms; measured, 130 ms everywhere (a
    30 ms latency). A set of the latency alone fits 30 ms on any two models and predicts
    the third exactly: score 0. A set of the per-token term alone must put one value on
    the 4- and 64-request steps, so no value predicts both 30 ms gaps: its score is above
    0, and the latency wins although it is the second candidate."""
    rows = _measured(_rows("abc"), [130.0] * 6)
    pred0 = np.tile([100.0, 10.0], (6, 1))
    sets = {"per_token": ("frontend_output_per_token_s",), "latency": ("frontend_output_s",)}
    names, summary = select_terms(rows, pred0, [80] * 6, [0.05] * 6, sets)
    assert summary["term_set"] == "latency" and names == ("frontend_output_s",)
    assert summary["scores"]["latency"] == pytest.approx(0.0, abs=1e-6)
    assert summary["scores"]["per_token"] > 0.1


def test_a_common_per_token_effect_keeps_every_term():
    """Measured 130 ms + 1 ms per request of the first token's step on every model (134
    and 194 ms): every term fits it on any two models (score 0), the latency alone cannot
    (a constant misses one of the two lengths): every term stays."""
    rows = _rows("abc")
    rows = _measured(rows, [130.0 + r.concurrency for r in rows])
    pred0 = np.tile([100.0, 10.0], (6, 1))
    names, summary = select_terms(rows, pred0, [80] * 6, [0.05] * 6)
    assert summary["term_set"] == "all" and names == TERM_SETS["all"]
    assert summary["scores"]["latency"] > summary["scores"]["all"] + 0.05


def test_a_shared_latency_keeps_the_default_set():
    """Measured 130 ms on every row: both sets fit it (score 0 up to the optimiser's
    last digits): a tie keeps the first set, every term."""
    rows = _measured(_rows("abc"), [130.0] * 6)
    pred0 = np.tile([100.0, 10.0], (6, 1))
    names, summary = select_terms(rows, pred0, [80] * 6, [0.05] * 6)
    assert summary["term_set"] == "all" and names == TERM_SETS["all"]
    assert summary["scores"]["all"] == pytest.approx(0.0, abs=1e-6)


def test_too_few_models_to_check_keep_the_first_set():
    rows = _measured(_rows("ab"), [130.0] * 4)
    names, summary = select_terms(rows, np.tile([100.0, 10.0], (4, 1)), [80] * 4, [None] * 4)
    assert names == TERM_SETS["all"] and summary == {"term_set": "all", "scores": None}


def test_term_sets_keep_a_forced_term_in_every_set():
    """``--fit-step-overhead``: the step overhead not optional, so in every set."""
    sets = term_sets(TERM_SETS["all"] + ("step_overhead_s",), optional=(EXPERT_TERM,))
    assert sets["latency"] == LATENCY_TERMS + ("step_overhead_s",)
    assert sets["all"][-1] == "step_overhead_s"
    assert set(sets) == {"all", "latency"}  # no expert term asked for: no sets with it


def test_optional_terms_double_the_candidates():
    """By default the step overhead is offered with and without, like the expert term:
    two base sets x 2 x 2, each label naming what it adds."""
    sets = term_sets(TERM_SETS["all"] + (EXPERT_TERM, "step_overhead_s"))
    assert len(sets) == 8 and next(iter(sets)) == "all"
    assert sets["latency+experts+step"] == LATENCY_TERMS + (EXPERT_TERM, "step_overhead_s")
    assert sets["latency+step"] == LATENCY_TERMS + ("step_overhead_s",)
    assert sets["all"] == TERM_SETS["all"]


def test_the_eager_term_doubles_them_again():
    """With the eager dispatch term among the names: 2 base sets x 2 x 2 x 2, the eager
    term last where a set has it."""
    sets = term_sets(TERM_SETS["all"] + (EXPERT_TERM, "step_overhead_s", EAGER_TERM))
    assert len(sets) == 16
    assert sets["latency+experts+step+eager"] == LATENCY_TERMS + (
        EXPERT_TERM, "step_overhead_s", EAGER_TERM)
    assert sets["all+eager"] == TERM_SETS["all"] + (EAGER_TERM,)
    assert EAGER_TERM not in sets["all+experts+step"]


def test_the_expert_term_is_offered_with_and_without_the_others():
    sets = term_sets(TERM_SETS["all"] + (EXPERT_TERM, "step_overhead_s"), optional=(EXPERT_TERM,))
    assert sets["latency+experts"] == LATENCY_TERMS + ("step_overhead_s", EXPERT_TERM)
    assert sets["all+experts"] == TERM_SETS["all"] + ("step_overhead_s", EXPERT_TERM)
    assert EXPERT_TERM not in sets["all"] + sets["latency"]


def test_a_gap_that_grows_with_the_experts_picks_the_expert_term():
    """Models a, b, c with 0, 4,608 and 14,848 MoE layer-experts, measured as a 10 ms
    latency and 7 us per layer-expert make them (TTFT +10, +42.3, +113.9 ms; TPOT by the
    prompt-carrying steps): a latency fitted on two models misses the third; the latency
    with the expert term predicts every model exactly."""
    rows = _rows("abc")
    size = {"a": 0, "b": 36 * 128, "c": 58 * 256}
    shapes = [RowShape(61, size[r.model]) for r in rows]
    pred0 = np.tile([100.0, 10.0], (6, 1))
    truth = [p + row_slopes(r, p, n, ("frontend_output_s", EXPERT_TERM)) @ [0.01, 7e-6]
             for r, p, n in zip(rows, pred0, shapes, strict=True)]
    rows = [replace(r, ttft_ms=float(t[0]), tpot_ms=float(t[1]))
            for r, t in zip(rows, truth, strict=True)]
    names, summary = select_terms(rows, pred0, shapes, [0.05] * 6,
                                  term_sets(TERM_SETS["all"] + (EXPERT_TERM,)))
    assert EXPERT_TERM in names
    assert summary["scores"][summary["term_set"]] == pytest.approx(0.0, abs=1e-4)
    assert summary["scores"]["latency"] > 0.05


def test_a_fit_with_the_step_overhead_starts_where_the_predictions_are():
    """With ``step_overhead_s`` among the names (``--fit-step-overhead``), its value in the
    predictions (0.5 ms) must reach every inner fit. Measured 130 ms everywhere: both sets
    (each with the step overhead) fit it, a tie keeps every term."""
    rows = _measured(_rows("abc"), [130.0] * 6)
    pred0 = np.tile([100.0, 10.0], (6, 1))
    names, summary = select_terms(rows, pred0, [80] * 6, [0.05] * 6,
                                  term_sets(TERM_SETS["all"] + ("step_overhead_s",),
                                            optional=()),
                                  start={"step_overhead_s": 5e-4})
    assert summary["term_set"] == "all" and names[-1] == "step_overhead_s"
    assert summary["scores"]["all"] == pytest.approx(0.0, abs=1e-6)


def test_first_order_by_hand():
    """TTFT 100 ms, TPOT 10 ms at a step overhead of 0.5 ms. A 30 ms latency adds 30 ms of
    TTFT; the step overhead at 1.5 ms adds 1 ms to TPOT and 1 ms to each of the 100 / 10 =
    10 steps before the first token: TTFT 140 ms, TPOT 11 ms."""
    row = _rows("a", (4,))
    terms = RuntimeTerms(frontend_output_s=0.03, step_overhead_s=1.5e-3)
    got = first_order(row, np.array([[100.0, 10.0]]), [80], terms,
                      ("frontend_output_s", "step_overhead_s"), start={"step_overhead_s": 5e-4})
    np.testing.assert_allclose(got, [[140.0, 11.0]])


def test_twins_are_held_out_as_one_model():
    """The first test's rows, with models a and b one architecture (unit ``a + b``): two
    units are too few for the inner check (it needs three), so the first set stays, where
    three models chose the latency."""
    rows = _measured(_rows("abc"), [130.0] * 6)
    sets = {"per_token": ("frontend_output_per_token_s",), "latency": ("frontend_output_s",)}
    units = ["a + b" if r.model in "ab" else r.model for r in rows]
    names, summary = select_terms(rows, np.tile([100.0, 10.0], (6, 1)), [80] * 6,
                                  [0.05] * 6, sets, units=units)
    assert names == ("frontend_output_per_token_s",)
    assert summary == {"term_set": "per_token", "scores": None}
