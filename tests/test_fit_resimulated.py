"""The end-to-end report's two-step fit (``bench/accuracy_e2e.py``: ``fit_resimulated``):
fitted from the term-free predictions, re-simulated at those terms, fitted again around
them. Checked against a stand-in simulator whose TTFT responds ``g`` times as much as the
first-order slope says (the hand computation is in each test)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from serveplan.e2e import E2ERow, Role

P0_TTFT, TPOT = 100.0, 10.0  # ms: the term-free prediction of every row
TRUE_LATENCY = 0.020  # s of frontend_output_s that the stand-in needs to meet the rows


def _rows(gain: float) -> list[E2ERow]:
    ttft = P0_TTFT + gain * 1e3 * TRUE_LATENCY
    return [E2ERow(id=f"r{k}", engine="vllm", version="0.19.0", model="m", system="b200_sxm",
                   precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=8, tp=1, pp=1,
                   dp=1, ep=1, ttft_ms=ttft, tpot_ms=TPOT) for k in range(3)]


def _fit(accuracy_e2e, monkeypatch, gain: float, resim_rows: int = 300):
    """The stand-in: TTFT = 100 ms + gain x the latency (the slope says 1 x). Returns the
    terms, the fit's summary and the ids of the rows each simulation ran."""
    simulated = []

    def simulate(rows, resolved, terms, jobs):
        simulated.append([r.id for r in rows])
        return np.array([[P0_TTFT + gain * 1e3 * terms.frontend_output_s, TPOT]] * len(rows))

    monkeypatch.setattr(accuracy_e2e, "predict_all", simulate)
    rows = _rows(gain)
    unfitted = np.array([[P0_TTFT, TPOT]] * len(rows))
    terms, summary = accuracy_e2e.fit_resimulated(
        [0, 1, 2], rows, [None] * 3, unfitted, [80] * 3, [0.05] * 3, ("frontend_output_s",),
        None, 1, resim_rows)
    return terms, summary, simulated


def test_the_second_step_corrects_a_simulator_that_responds_more(accuracy_e2e, monkeypatch):
    """Measured TTFT 100 + 1.5 x 20 = 130 ms. Step one, slope 1: x1 = 30 ms. Simulated
    there: 100 + 1.5 x 30 = 145 ms. Step two, around x1 with slope 1: 145 + (x - 30) = 130,
    x2 = 15 ms = (2g - g^2) x 20 ms: 5 ms from the 20 the rows need, where step one was
    10 ms off ((g - 1)^2 against (g - 1) of 20 ms). Errors: term-free |100 / 130 - 1|,
    at x1 |145 / 130 - 1|."""
    terms, summary, _ = _fit(accuracy_e2e, monkeypatch, gain=1.5)
    assert terms.frontend_output_s == pytest.approx(0.015, rel=1e-3)
    assert summary["median_abs_err_before"][0] == pytest.approx(30 / 130)
    assert summary["median_abs_err_simulated_first_fit"][0] == pytest.approx(15 / 130)


def test_a_simulator_as_linear_as_the_slopes_keeps_the_first_terms(accuracy_e2e, monkeypatch):
    """Gain 1: step one lands on 20 ms, the simulation there meets the rows, and step two
    does not move."""
    terms, summary, _ = _fit(accuracy_e2e, monkeypatch, gain=1.0)
    assert terms.frontend_output_s == pytest.approx(TRUE_LATENCY, rel=1e-3)
    assert summary["median_abs_err_simulated_first_fit"][0] == pytest.approx(0.0, abs=1e-4)


def test_the_second_step_simulates_a_proportional_spread_sample(accuracy_e2e):
    """Models a x 6, b x 3, cap 6: more rows than the cap, so a gets round(6 x 6 / 9) = 4
    evenly spaced of its positions 0-5 (linspace(0, 5, 4) = 0, 1.67, 3.33, 5 -> 0, 2, 3, 5)
    and b gets 2 of positions 6-8 (its first and last); at or under the cap, every row."""
    models = ["a"] * 6 + ["b"] * 3
    assert accuracy_e2e.resim_sample(models, 6) == [0, 2, 3, 5, 6, 8]
    assert accuracy_e2e.resim_sample(models, 9) == list(range(9))


def test_a_capped_second_step_fits_on_the_sample_alone(accuracy_e2e, monkeypatch):
    """With a cap of 2 of the 3 rows only rows 0 and 2 are simulated again (linspace(0, 2,
    2)), and the stand-in's terms come out as in the uncapped case (every row is alike)."""
    terms, summary, simulated = _fit(accuracy_e2e, monkeypatch, gain=1.5, resim_rows=2)
    assert simulated == [["r0", "r2"]]
    assert (summary["resimulated_rows"], summary["rows"]) == (2, 3)
    assert terms.frontend_output_s == pytest.approx(0.015, rel=1e-3)


def test_no_resimulated_rows_is_the_first_step_alone(accuracy_e2e, monkeypatch):
    """``resim_rows`` 0: nothing is simulated, and the terms are step one's x1 = 30 ms
    (measured 130 ms, term-free 100 ms, slope 1)."""
    terms, _, simulated = _fit(accuracy_e2e, monkeypatch, gain=1.5, resim_rows=0)
    assert simulated == []
    assert terms.frontend_output_s == pytest.approx(0.030, rel=1e-3)


def test_a_term_the_sample_cannot_identify_keeps_its_first_step_value(accuracy_e2e,
                                                                       monkeypatch):
    """Rows agg, disaggregated, agg; the stand-in adds the handoff on the disaggregated row
    (slope 1, as the fit's). Measured: agg 130 ms, disaggregated 130 + 40 = 170 ms. Step
    one on all three: frontend 30 ms, handoff 40 ms. A cap of 2 simulates rows 0 and 2
    again, both agg: the handoff cannot be fitted there and keeps 40 ms, frontend goes to
    15 ms as in the agg-only case, and the summary still lists both terms as fitted."""
    def simulate(rows, resolved, terms, jobs):
        return np.array([[P0_TTFT + 1.5e3 * terms.frontend_output_s
                          + (1e3 * terms.disagg_handoff_s if r.mode != "agg" else 0.0), TPOT]
                         for r in rows])

    monkeypatch.setattr(accuracy_e2e, "predict_all", simulate)
    role = Role(workers=1, batch=None, tp=1, pp=1, dp=1, ep=1)
    rows = _rows(1.5)
    rows[1] = replace(rows[1], mode="disagg", prefill=role, decode=role, ttft_ms=170.0)
    unfitted = np.array([[P0_TTFT, TPOT]] * len(rows))
    names = ("frontend_output_s", "disagg_handoff_s")
    terms, summary = accuracy_e2e.fit_resimulated(
        [0, 1, 2], rows, [None] * 3, unfitted, [80] * 3, [0.05] * 3, names, None, 1,
        resim_rows=2)
    assert terms.disagg_handoff_s == pytest.approx(0.040, rel=1e-3)
    assert terms.frontend_output_s == pytest.approx(0.015, rel=1e-3)
    assert summary["fitted"] == list(names) and summary["skipped"] == {}


def test_twins_are_held_out_together(accuracy_e2e, monkeypatch):
    """Models b and c need a 20 ms latency, a and its twin a2 (one unit, ``a + a2``) 60 ms;
    the stand-in simulates TTFT = 100 ms + the latency, as the slope says. Held out by unit,
    the twins' fold is fitted on b and c alone: 20 ms, 120 ms predicted for both twins (a
    fold holding a out alone would have had a2's 60 ms rows to fit on). Three folds, the
    twins' labelled ``a + a2``."""
    monkeypatch.setattr(accuracy_e2e, "predict_all", lambda rows, resolved, terms, jobs: np.array(
        [[P0_TTFT + 1e3 * terms.frontend_output_s, TPOT]] * len(rows)))
    need = {"a": 60.0, "a2": 60.0, "b": 20.0, "c": 20.0}
    rows = [replace(_rows(1.0)[0], id=f"{m}{k}", model=m, ttft_ms=P0_TTFT + need[m])
            for m in need for k in range(2)]
    units = ["a + a2" if r.model in ("a", "a2") else r.model for r in rows]
    unfitted = np.array([[P0_TTFT, TPOT]] * len(rows))
    pred, folds, _, fold_terms = accuracy_e2e.lomo(
        rows, [None] * len(rows), unfitted, [80] * len(rows), [0.05] * len(rows),
        names=("frontend_output_s",), resim_rows=0, optional=(), units=units)
    assert [f["held_out"] for f in folds] == ["a + a2", "b", "c"]
    assert pred[:4, 0] == pytest.approx([120.0] * 4, rel=1e-3)
    assert fold_terms["vllm", "a2"].frontend_output_s == pytest.approx(0.020, rel=1e-3)


def test_rows_the_fits_do_not_count_are_still_predicted(accuracy_e2e, monkeypatch):
    """Models a, b, c, two rows each, needing 20 ms (TTFT = 100 ms + the latency), except c's
    second row at 500 ms, which the fits do not count (``counted``; in the report, a copy of
    another row's run). Every fold and the engine's full fit land on 20 ms: a and b are
    predicted at 120 ms, and so is the uncounted row, which is predicted like any other.
    Counted, the same row pulls the folds that train on it off 20 ms."""
    monkeypatch.setattr(accuracy_e2e, "predict_all", lambda rows, resolved, terms, jobs: np.array(
        [[P0_TTFT + 1e3 * terms.frontend_output_s, TPOT]] * len(rows)))
    rows = [replace(_rows(1.0)[0], id=f"{m}{k}", model=m, ttft_ms=P0_TTFT + 20.0)
            for m in "abc" for k in range(2)]
    rows[5] = replace(rows[5], ttft_ms=P0_TTFT + 500.0)
    n = len(rows)
    args = (rows, [None] * n, np.array([[P0_TTFT, TPOT]] * n), [80] * n, [0.05] * n)
    kw = dict(names=("frontend_output_s",), resim_rows=0, optional=())
    counted = np.array([True] * 5 + [False])
    pred, _, full, fold_terms = accuracy_e2e.lomo(*args, **kw, counted=counted)
    assert pred[:, 0] == pytest.approx([120.0] * n, rel=1e-3)
    assert full["vllm"]["terms"].frontend_output_s == pytest.approx(0.020, rel=1e-3)
    _, _, _, all_rows = accuracy_e2e.lomo(*args, **kw)
    assert all_rows["vllm", "a"].frontend_output_s > 0.0201


def test_model_shapes_carry_each_rows_eager_secant(accuracy_e2e):
    """A row simulated at 1 ms per layer of eager dispatch 40 ms / 2 ms slower than without
    has a secant of 40 / 1e-3 = 40e3 ms of TTFT (2e3 of TPOT) per second of the term; a row
    it does not move, 0; without the probe's predictions, none (the term cannot be fitted)."""
    from types import SimpleNamespace

    from serveplan.e2e_fit import EAGER_PROBE_S, RowShape

    assert EAGER_PROBE_S == 1e-3
    model = SimpleNamespace(num_layers=61, expert_layers=58 * 256)
    res = SimpleNamespace(pools=[SimpleNamespace(instance=SimpleNamespace(
        oracle=SimpleNamespace(model=model)))])
    unfitted = np.array([[100.0, 10.0], [50.0, 5.0]])
    probe = np.array([[140.0, 12.0], [50.0, 5.0]])
    shapes = accuracy_e2e.model_shapes([res, res], unfitted, probe)
    assert shapes[0].layers == 61 and shapes[0].expert_layers == 14848
    assert shapes[0].eager == pytest.approx((40e3, 2e3))
    assert shapes[1].eager == (0.0, 0.0)
    assert accuracy_e2e.model_shapes([res], unfitted[:1]) == [RowShape(61, 14848)]


def test_the_shipped_fit_runs_on_the_shipped_inputs(accuracy_e2e, monkeypatch):
    """Models a, b, c need a 20 ms latency over the folds' term-free 100 ms. The shipped
    inputs (a faster GPU, as the catalog has it) put every row's term-free TTFT at 90 ms:
    the engine's fit on all rows lands on 120 - 90 = 30 ms, while every fold, and so every
    held-out prediction, stays at 20 ms and 120 ms."""
    monkeypatch.setattr(accuracy_e2e, "predict_all", lambda rows, resolved, terms, jobs: np.array(
        [[P0_TTFT + 1e3 * terms.frontend_output_s, TPOT]] * len(rows)))
    rows = [replace(_rows(1.0)[0], id=f"{m}{k}", model=m, ttft_ms=P0_TTFT + 20.0)
            for m in "abc" for k in range(2)]
    n = len(rows)
    shipped = ([None] * n, [0.05] * n, np.array([[P0_TTFT - 10.0, TPOT]] * n))
    pred, _, full, fold_terms = accuracy_e2e.lomo(
        rows, [None] * n, np.array([[P0_TTFT, TPOT]] * n), [80] * n, [0.05] * n,
        names=("frontend_output_s",), resim_rows=0, optional=(), shipped_inputs=shipped)
    assert pred[:, 0] == pytest.approx([120.0] * n, rel=1e-3)
    assert fold_terms["vllm", "a"].frontend_output_s == pytest.approx(0.020, rel=1e-3)
    assert full["vllm"]["terms"].frontend_output_s == pytest.approx(0.030, rel=1e-3)
