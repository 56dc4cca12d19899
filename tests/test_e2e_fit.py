"""First-order runtime terms for the measured rows: the slopes by hand, and terms recovered
from rows generated with them."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.e2e import E2ERow, Role
from serveplan.e2e_fit import EAGER_TERM, EXPERT_TERM, RowShape, fit_rows, row_slopes

NAMES = ("frontend_output_s", "frontend_prompt_token_s", "frontend_output_per_token_s",
         "tp_sync_per_layer_s")


def _row(**kw) -> E2ERow:
    base = dict(id="x", engine="vllm", version="0.19.0", model="m", system="b200_sxm",
                precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=64, tp=4, pp=1,
                dp=1, ep=1, ttft_ms=1.0, tpot_ms=1.0, batch_size=16)
    return E2ERow(**{**base, **kw})


def _measured_as(rows, pred0, shapes, names, true, prefill_s=None) -> list[E2ERow]:
    """``rows`` measured as the first-order model says they move from ``pred0`` with the
    terms ``names`` at ``true``."""
    work = prefill_s or [None] * len(rows)
    out = []
    for r, p, n, w in zip(rows, pred0, shapes, work, strict=True):
        ttft, tpot = np.array(p) + row_slopes(r, p, n, names, w) @ true
        out.append(E2ERow(**{**vars(r), "ttft_ms": float(ttft), "tpot_ms": float(tpot)}))
    return out


def test_slopes_of_an_agg_row_by_hand():
    """64 clients on max_batch_size 16: 4 workers, 16 running each, so the first token's
    step holds 16 tokens. TTFT0 / TPOT0 = 100 / 10 = 10 steps of 80 layers at tp 4.
    ms per s: latency 1e3; prompt: the client's mean prompt, (819 + 1024) / 2 = 921.5 ->
    921.5e3; per token 16e3; sync TTFT 80 x 10 x 1e3 = 8e5, TPOT 80e3."""
    s = row_slopes(_row(), (100.0, 10.0), 80, NAMES)
    assert s[0] == pytest.approx([1e3, 921.5e3, 16e3, 8e5])
    assert s[1] == pytest.approx([0.0, 0.0, 0.0, 8e4])
    tp1 = row_slopes(_row(tp=1), (100.0, 10.0), 80, NAMES)
    assert tp1[:, 3] == pytest.approx([0.0, 0.0])  # no sync on one GPU


def test_slopes_of_a_disaggregated_row_follow_each_role():
    """The first token comes from the prefill (batch 1, tp 1: no sync in TTFT); the
    decoder (tp 8) pays the sync every step."""
    row = _row(mode="disagg", prefill=Role(2, 1, 1, 1, 1, 1), decode=Role(1, 64, 8, 1, 1, 1))
    s = row_slopes(row, (200.0, 20.0), 61, NAMES)
    assert s[0] == pytest.approx([1e3, 921.5e3, 1e3, 0.0])
    assert s[1] == pytest.approx([0.0, 0.0, 0.0, 61e3])
    handoff = ("disagg_handoff_s",)  # every first token waits for the handoff, once
    assert row_slopes(row, (200.0, 20.0), 61, handoff)[:, 0] == pytest.approx([1e3, 0.0])
    assert row_slopes(_row(), (200.0, 20.0), 61, handoff)[:, 0] == pytest.approx([0.0, 0.0])


def test_the_handoff_is_fitted_only_from_disaggregated_rows():
    """Agg rows alone leave the handoff out (with why); with disaggregated rows whose
    TTFT runs 80 ms over the prediction, and agg rows on it, the handoff is 80 ms and the
    front end's latency 0."""
    names = ("frontend_output_s", "disagg_handoff_s")
    agg = [_row(ttft_ms=100.0, tpot_ms=10.0) for _ in range(3)]
    _, summary = fit_rows(agg, np.array([[100.0, 10.0]] * 3), [61] * 3, names)
    assert "disaggregated" in summary["skipped"]["disagg_handoff_s"]
    pd = [_row(mode="disagg", prefill=Role(2, 1, 1, 1, 1, 1), decode=Role(1, 64, 8, 1, 1, 1),
               ttft_ms=280.0, tpot_ms=20.0) for _ in range(3)]
    pred0 = np.array([[100.0, 10.0]] * 3 + [[200.0, 20.0]] * 3)
    terms, _ = fit_rows(agg + pd, pred0, [61] * 6, names)
    assert terms.disagg_handoff_s == pytest.approx(0.080, rel=1e-3)
    assert terms.frontend_output_s == pytest.approx(0.0, abs=1e-5)


def test_terms_are_recovered_from_rows_generated_with_them():
    rng = np.random.default_rng(0)
    rows, pred0, layers = [], [], []
    for _ in range(40):
        r = _row(isl=int(rng.choice([1024, 8192])), concurrency=int(rng.choice([4, 16, 64])),
                 batch_size=None, tp=int(rng.choice([1, 2, 4])))
        p0 = (float(rng.uniform(30, 300)), float(rng.uniform(5, 30)))
        rows.append(r)
        pred0.append(p0)
        layers.append(int(rng.choice([36, 61, 80])))
    true = np.array([0.04, 2e-5, 6e-4, 3e-5])
    rows = _measured_as(rows, pred0, layers, NAMES, true)
    terms, summary = fit_rows(rows, np.array(pred0), layers, NAMES)
    got = [getattr(terms, n) for n in NAMES]
    assert got == pytest.approx(true, rel=1e-3)
    assert summary["median_abs_err_after_first_order"][0] < 1e-4
    assert summary["median_abs_err_before"][0] > 0.1


def test_an_unrecorded_attention_dp_counts_as_one():
    """Some rows record attention_dp_size 0: one rank, as the deployment builder reads it."""
    assert row_slopes(_row(dp=0), (100.0, 10.0), 80, NAMES) == pytest.approx(
        row_slopes(_row(dp=1), (100.0, 10.0), 80, NAMES))


def test_prefill_slopes_by_hand():
    """InferenceX lengths: mean prompt and output (819 + 1024) / 2 = 921.5. 80 layers,
    TTFT0 100 ms, the oracle's prefill of one mean prompt 50 ms: TTFT grows with the
    prefill's relative growth, 100 ms x 80 x 921.5 / 0.05 s -> 1e3 x 80 x 921.5 x 2 =
    1.4744e8 ms per s; without the prefill time, the own prompt only: 7.372e7. TPOT: 16
    clients on the rank, 80 x 16 x 921.5 / 920.5 token-layers a decode step -> x 1e3. A
    disaggregated decoder prefills nothing: 0."""
    from serveplan.e2e_fit import E2E_FIT_TERMS

    name = ("prefill_token_layer_s",)
    s = row_slopes(_row(), (100.0, 10.0), 80, name, prefill_s=0.05)
    assert s[0, 0] == pytest.approx(1.4744e8)
    assert s[1, 0] == pytest.approx(1e3 * 80 * 16 * 921.5 / 920.5)
    assert row_slopes(_row(), (100.0, 10.0), 80, name)[0, 0] == pytest.approx(7.372e7)
    pd = _row(mode="disagg", prefill=Role(2, 1, 1, 1, 1, 1), decode=Role(1, 64, 8, 1, 1, 1))
    assert row_slopes(pd, (100.0, 10.0), 80, name, prefill_s=0.05)[1, 0] == 0.0
    assert "prefill_token_layer_s" in E2E_FIT_TERMS and "tp_sync_per_layer_s" not in E2E_FIT_TERMS


def test_prefill_term_is_recovered():
    rng = np.random.default_rng(1)
    rows, pred0, layers, pre = [], [], [], []
    for _ in range(30):
        rows.append(_row(isl=int(rng.choice([1024, 8192])), concurrency=int(rng.choice([4, 64])),
                         batch_size=None))
        pred0.append((float(rng.uniform(30, 900)), float(rng.uniform(5, 30))))
        layers.append(int(rng.choice([61, 80])))
        pre.append(float(rng.uniform(0.02, 0.3)))
    names = ("frontend_output_s", "prefill_token_layer_s")
    true = np.array([0.02, 3e-7])
    rows = _measured_as(rows, pred0, layers, names, true, pre)
    terms, _ = fit_rows(rows, np.array(pred0), layers, names, prefill_s=pre)
    assert [terms.frontend_output_s, terms.prefill_token_layer_s] == pytest.approx(true, rel=1e-3)


def test_step_overhead_slopes_by_hand():
    """Every step costs the overhead once: TPOT by 1 ms per ms, TTFT by the TTFT0 / TPOT0 =
    100 / 10 = 10 steps before the first token."""
    s = row_slopes(_row(), (100.0, 10.0), 80, ("step_overhead_s",))
    assert s[:, 0] == pytest.approx([10e3, 1e3])


def test_step_overhead_is_fitted_from_the_profiles_value_down_or_up():
    """Rows predicted with the GPU profile's 0.5 ms per step and measured as if each step
    cost 0.1 ms: the fit starts at 0.5 ms and comes down to 0.1 ms (with the front end's
    latency, 30 ms, alongside); the first-order model then meets every row."""
    rng = np.random.default_rng(2)
    rows, pred0 = [], []
    names = ("frontend_output_s", "step_overhead_s")
    for _ in range(30):
        r = _row(concurrency=int(rng.choice([4, 16, 64])), batch_size=None)
        p0 = (float(rng.uniform(30, 300)), float(rng.uniform(5, 30)))
        delta = np.array([0.03, 0.1e-3 - 0.5e-3])  # from the start: 0 and 0.5 ms
        t = np.array(p0) + row_slopes(r, p0, 61, names) @ delta
        rows.append(E2ERow(**{**vars(r), "ttft_ms": t[0], "tpot_ms": t[1]}))
        pred0.append(p0)
    terms, summary = fit_rows(rows, np.array(pred0), [61] * 30, names,
                              start={"step_overhead_s": 0.5e-3})
    assert [terms.frontend_output_s, terms.step_overhead_s] == pytest.approx([0.03, 0.1e-3],
                                                                              rel=1e-3)
    assert max(summary["median_abs_err_after_first_order"]) < 1e-4
    with pytest.raises(ValueError, match="step_overhead_s"):
        fit_rows(rows, np.array(pred0), [61] * 30, names)  # its value in pred0 is unknown


def test_expert_slopes_by_hand():
    """DeepSeek-V3: 58 MoE layers x 256 experts = 14,848 per prompt-carrying step. TTFT: the
    request's own prefill step, 14,848e3 ms per s. TPOT: 16 clients on the rank prefill
    once per 920.5 decode steps each (InferenceX mean output 921.5), 16 / 920.5 of the
    steps carry a prompt: 14,848e3 x 16 / 920.5. A disaggregated row pays nothing (the
    term is not charged on its prefill instance, and its decoder prefills nothing); a dense
    model (a bare layer count) has no experts."""
    shape = RowShape(61, 58 * 256)
    s = row_slopes(_row(), (100.0, 10.0), shape, (EXPERT_TERM,))
    assert s[:, 0] == pytest.approx([14848e3, 14848e3 * 16 / 920.5])
    pd = _row(mode="disagg", prefill=Role(2, 1, 1, 1, 1, 1), decode=Role(1, 64, 8, 1, 1, 1))
    assert row_slopes(pd, (100.0, 10.0), shape, (EXPERT_TERM,))[:, 0] == pytest.approx(
        [0.0, 0.0])
    assert row_slopes(_row(), (100.0, 10.0), 80, (EXPERT_TERM,))[:, 0] == pytest.approx([0, 0])
    every_step = _row(concurrency=4096, batch_size=4096, osl=128)  # > 1 prompt a step
    assert row_slopes(every_step, (100.0, 10.0), shape, (EXPERT_TERM,))[1, 0] == \
        pytest.approx(14848e3)


def test_expert_term_is_recovered_beside_a_latency_and_skipped_on_dense_rows():
    """Rows of a MoE (14,848) and a dense model generated with a 20 ms latency and 7 us
    per expert-layer: both come back; dense rows alone cannot identify the expert term."""
    rng = np.random.default_rng(3)
    rows, pred0, shapes = [], [], []
    for _ in range(30):
        rows.append(_row(isl=int(rng.choice([1024, 8192])), concurrency=int(rng.choice([4, 64])),
                         batch_size=None))
        pred0.append((float(rng.uniform(30, 900)), float(rng.uniform(5, 30))))
        shapes.append(RowShape(61, int(rng.choice([0, 58 * 256]))))
    names = ("frontend_output_s", EXPERT_TERM)
    true = np.array([0.02, 7e-6])
    rows = _measured_as(rows, pred0, shapes, names, true)
    terms, _ = fit_rows(rows, np.array(pred0), shapes, names)
    assert [terms.frontend_output_s, terms.prefill_step_expert_layer_s] == pytest.approx(
        true, rel=1e-3)
    _, summary = fit_rows(rows, np.array(pred0), [RowShape(80)] * len(rows), names)
    assert "mixture-of-experts" in summary["skipped"][EXPERT_TERM]
    pd = [E2ERow(**{**vars(r), "mode": "disagg", "prefill": Role(1, 1, 8, 1, 1, 1),
                    "decode": Role(1, 64, 8, 1, 1, 1)}) for r in rows]
    _, summary = fit_rows(pd, np.array(pred0), shapes, names)  # MoE, but disaggregated only
    assert "colocated" in summary["skipped"][EXPERT_TERM]


def test_eager_slopes_are_the_rows_simulated_secants():
    """The eager term has no closed form: a row's slopes are its simulated secant (ms of
    TTFT / TPOT per second of the term), taken as given; a row without one cannot fit it."""
    s = row_slopes(_row(), (100.0, 10.0), RowShape(61, 0, (40e3, 2e3)), (EAGER_TERM,))
    assert s[:, 0] == pytest.approx([40e3, 2e3])
    with pytest.raises(ValueError, match="simulated"):
        row_slopes(_row(), (100.0, 10.0), RowShape(61), (EAGER_TERM,))


def test_eager_term_is_recovered_and_skipped_where_it_moves_no_row():
    """Rows generated with a 20 ms latency and 0.8 ms per layer of eager dispatch, half of
    them without an eager step that outlasts its GPU work (secant 0): both terms come
    back. Where no row moves, the term is skipped, not fitted to 0."""
    rng = np.random.default_rng(5)
    rows, pred0, shapes = [], [], []
    for k in range(30):
        rows.append(_row(concurrency=int(rng.choice([4, 64])), batch_size=None))
        pred0.append((float(rng.uniform(30, 900)), float(rng.uniform(5, 30))))
        moved = k % 2 == 0
        shapes.append(RowShape(61, 0, (float(rng.uniform(20e3, 60e3)) * moved,
                                       float(rng.uniform(0, 3e3)) * moved)))
    names = ("frontend_output_s", EAGER_TERM)
    true = np.array([0.02, 8e-4])
    rows = _measured_as(rows, pred0, shapes, names, true)
    terms, summary = fit_rows(rows, np.array(pred0), shapes, names)
    assert [terms.frontend_output_s, terms.eager_dispatch_layer_s] == pytest.approx(
        true, rel=1e-3)
    assert summary["fitted"] == list(names)
    still = [RowShape(61, 0, (0.0, 0.0))] * len(rows)
    terms, summary = fit_rows(rows, np.array(pred0), still, names)
    assert summary["fitted"] == ["frontend_output_s"]
    assert "moves no row" in summary["skipped"][EAGER_TERM]
