"""Runtime terms fitted to the measured end-to-end rows, in closed form to first order.

A row simulated without runtime terms predicts the client's means ``(TTFT0, TPOT0)`` (ms).
The terms :data:`E2E_FIT_TERMS` move them, to first order, by (per second of the term):

* ``frontend_output_s`` -- TTFT by 1 (a latency on every token: the first and the last
  are both late, so TPOT does not move);
* ``frontend_prompt_token_s`` -- TTFT by the client's mean prompt length (the tokenizer
  before the engine sees the request; queueing left out: after the first burst a closed
  loop's sends are spread over its cycle);
* ``frontend_output_per_token_s`` -- TTFT by the tokens of the first token's step: an
  agg instance's running batch (its share of the clients, at most ``max_batch_size``), a
  disaggregated row's prefill batch;
* ``prefill_token_layer_s`` -- every prompt token's prefill by ``layers`` on the GPU.
  TTFT is made of prefill work -- the request's own and, in the burst and later queues,
  that of the requests ahead of it -- so it scales by the prefill's relative growth:
  ``TTFT0 x layers x prompt / prefill0`` (``prefill0``: the oracle's prefill of one
  mean prompt alone; without it, the own prefill only: ``layers x prompt``). TPOT: an agg
  rank's decode steps carry its clients' prompts, ``clients x prompt / output`` prompt
  tokens per step on average, each ``layers`` times the term;
* ``tp_sync_per_layer_s`` -- TPOT by the layers on a decoding instance with tp > 1 (every
  step), TTFT by the layers times the steps a request spends before its first token
  (``TTFT0 / TPOT0``) on a prefilling instance with tp > 1. Not in :data:`E2E_FIT_TERMS`:
  the rows' TPOT is met by the GPU steps alone, and fitted here the term bought TTFT with
  TPOT (held out: vLLM TPOT 11.7 -> 14.1 % median abs, ``bench/results/accuracy_e2e.md``
  of 2026-11-27);
* ``prefill_step_expert_layer_s`` -- on an agg row, TTFT by the model's MoE layers times
  experts (the request's own prefill step) and TPOT by that times the steps that carry a
  prompt per decode step (its clients' prompts over their outputs, at most every step).
  Dense models and disaggregated rows: 0 (the term is not charged on a disaggregated
  prefill instance, :mod:`serveplan.estimator.runtime`). Not in :data:`E2E_FIT_TERMS`: a
  candidate of the term-set choice (:data:`EXPERT_TERM`);
* ``disagg_handoff_s`` -- a disaggregated row's TTFT by 1 (every first token waits for its
  handoff), nothing on agg rows; fitted only where the rows include disaggregated ones;
* ``step_overhead_s`` -- the GPU time of every step outside the forward pass (it replaces
  the GPU profile's, from there: ``start``): TPOT by 1, TTFT by the steps before the first
  token (``TTFT0 / TPOT0``). Not in :data:`E2E_FIT_TERMS` (:data:`STEP_OVERHEAD_TERM`);
* ``eager_dispatch_layer_s`` -- no closed form: nothing until a step outside the CUDA
  graphs has more dispatch than GPU work, then ``layers`` per such step. Its slopes are
  simulated, a secant per row (:attr:`RowShape.eager`: the row simulated with the term at
  :data:`EAGER_PROBE_S` and without, over that value); a row without them cannot fit it.
  Not in :data:`E2E_FIT_TERMS` (:data:`EAGER_TERM`).

:func:`fit_rows` solves for the terms with these slopes
(:func:`~serveplan.estimator.runtime_fit.fit_first_order`) -- no simulation -- around the
predictions it is given: the term-free ones, or those at other terms (``start``).

The simulator responds more than these slopes say: in the first burst the requests
queue at the serial tokenizer (vLLM MiniMax-M2.5 fp8 on B300 at 256 clients: +25 ms of TTFT
simulated where the slope says +1 ms), and a delay that moves an arrival off a step
boundary makes it wait for the step in flight (about one decode step, +10 ms at 8
clients). At the point (40 ms, 2 us, 0.5 ms, 1e-7 s) of the first four terms the
simulated TTFT moves by a median 1.10x the slopes' prediction over the expressible rows
(10th-90th percentile 0.82-1.33x). ``bench/accuracy_e2e.py`` therefore fits in two steps:
from the term-free predictions, then again around those terms from a sample of the
training rows simulated with them (``fit_resimulated``), and checks the result with one
simulation per held-out row. Linearised instead at that fixed point, the held-out error
rose (simulated, median abs TTFT: vLLM 15.6 -> 16.1 %, SGLang 25.3 -> 26.8 %;
``bench/results/accuracy_e2e_notes.md``): the second step must start where the first one
lands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from serveplan.e2e import BENCH_CLIENT, E2ERow, agg_workers, row_client
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.estimator.runtime_fit import (
    TERM_SCALES,
    fit_first_order,
    identifiable,
)

E2E_FIT_TERMS = ("frontend_output_s", "frontend_prompt_token_s", "frontend_output_per_token_s",
                 "prefill_token_layer_s", "disagg_handoff_s")
"""The terms fitted to the measured rows (module docstring)."""
EXPERT_TERM = "prefill_step_expert_layer_s"
"""Offered to the term-set choice with and without the others (:mod:`serveplan.e2e_select`)."""
EAGER_TERM = "eager_dispatch_layer_s"
"""Offered to the term-set choice with and without, as :data:`EXPERT_TERM`; its slopes are
simulated (:attr:`RowShape.eager`)."""
EAGER_PROBE_S = 1e-3
"""The value of :data:`EAGER_TERM` a row is simulated at for its secant: the size the
measured Kimi-K2.5 rows put it at (``bench/results/eager_dispatch_probe.md``)."""
STEP_OVERHEAD_TERM = "step_overhead_s"
"""Offered to the term-set choice with and without, as :data:`EXPERT_TERM`
(``--fit-step-overhead`` forces it into every set). Forced on every engine (a run before
:data:`EXPERT_TERM`) it raised vLLM's held-out errors (TTFT / TPOT 12.5 / 6.4 -> 13.2 / 6.8
% median abs) and SGLang's TTFT error (27.0 -> 27.9 %) while it lowered TensorRT-LLM's
TPOT error (11.9 -> 9.8 %, its folds all at 0 ms),
``bench/results/accuracy_e2e_step_overhead.md``."""


@dataclass(frozen=True)
class RowShape:
    """What the slopes need of a row: its model's layers and MoE layers times routed experts
    (0: dense), and, where simulated, the ms of TTFT and TPOT per second of
    :data:`EAGER_TERM` (None: not simulated). A bare layer count stands for a dense
    model's."""

    layers: int
    expert_layers: int = 0
    eager: tuple[float, float] | None = None

    @classmethod
    def of(cls, shape: RowShape | int) -> RowShape:
        return shape if isinstance(shape, RowShape) else cls(int(shape))


def _first_token_batch(row: E2ERow) -> float:
    """Requests in the step of a first token: an agg rank's share of the clients (the
    deployment's workers, :func:`~serveplan.e2e.agg_workers`) up to its batch size."""
    if row.mode != "agg":
        return float(row.prefill.batch or 1)
    seqs, dp = row.batch_size or row.concurrency, max(row.dp, 1)  # dp 0: not recorded
    return float(min(seqs, row.concurrency / (agg_workers(row) * dp)))


def mean_lengths(row: E2ERow) -> tuple[float, float]:
    """The mean prompt and output lengths of the row's client (InferenceX's: uniform on
    [0.8 L, L]; aiperf's: fixed)."""
    if row_client(row) is BENCH_CLIENT:
        prompt, output = BENCH_CLIENT.length_laws(row)
        return prompt.mean, output.mean
    return float(row.isl), float(row.osl)


def _tp_first(row: E2ERow) -> tuple[int, int]:
    """Tensor-parallel sizes of the instance producing the first token and the decoder."""
    if row.mode == "agg":
        return row.tp, row.tp
    return row.prefill.tp, row.decode.tp


def _prefill_slopes(row: E2ERow, ttft0: float, layers: int,
                    prefill_s: float | None) -> tuple[float, float]:
    """TTFT and TPOT seconds per second of ``prefill_token_layer_s`` (module docstring)."""
    prompt, output = mean_lengths(row)
    work = layers * prompt  # token-layers of one mean prompt
    ttft = work * ttft0 * 1e-3 / prefill_s if prefill_s else work
    tpot = work * _first_token_batch(row) / max(output - 1.0, 1.0) if row.mode == "agg" else 0.0
    return ttft, tpot


def _expert_slopes(row: E2ERow, expert_layers: int) -> tuple[float, float]:
    """TTFT and TPOT seconds per second of ``prefill_step_expert_layer_s`` (nothing on a
    disaggregated row: not charged on its prefill instance, and its decoder prefills
    nothing)."""
    if row.mode != "agg":
        return 0.0, 0.0
    prompt_steps = _first_token_batch(row) / max(mean_lengths(row)[1] - 1.0, 1.0)
    return float(expert_layers), expert_layers * min(prompt_steps, 1.0)


def row_slopes(row: E2ERow, pred0: Sequence[float], layers: RowShape | int,
               names: Sequence[str] = E2E_FIT_TERMS,
               prefill_s: float | None = None) -> np.ndarray:
    """``(2, len(names))``: ms of TTFT and TPOT per second of each term (module docstring);
    ``layers``: the model's :class:`RowShape` (or its layer count: dense); ``prefill_s``:
    the oracle's prefill of one mean prompt alone (seconds), if known."""
    shape = RowShape.of(layers)
    layers = shape.layers
    ttft0, tpot0 = float(pred0[0]), float(pred0[1])
    tp_first, tp_decode = _tp_first(row)
    steps = ttft0 / tpot0 if tpot0 > 0 else 0.0
    slope = {
        "frontend_output_s": (1.0, 0.0),
        "frontend_prompt_token_s": (mean_lengths(row)[0], 0.0),
        "frontend_output_per_token_s": (_first_token_batch(row), 0.0),
        "tp_sync_per_layer_s": (layers * steps * (tp_first > 1), layers * (tp_decode > 1)),
        "prefill_token_layer_s": _prefill_slopes(row, ttft0, layers, prefill_s),
        EXPERT_TERM: _expert_slopes(row, shape.expert_layers),
        "disagg_handoff_s": (float(row.mode != "agg"), 0.0),
        "step_overhead_s": (steps, 1.0),
    }
    if shape.eager is not None:
        slope[EAGER_TERM] = (shape.eager[0] * 1e-3, shape.eager[1] * 1e-3)  # ms/s -> s/s
    unknown = [n for n in names if n not in slope]
    if unknown:
        raise ValueError(f"no first-order slope for {', '.join(unknown)}"
                         + (" (simulated: RowShape.eager)" if EAGER_TERM in unknown else ""))
    return 1e3 * np.array([slope[n] for n in names], dtype=float).T


def _start(name: str, start: dict[str, float] | None) -> float:
    """A term's value in the term-free predictions: 0, except the step overhead, which
    the predictions take from the GPU profile (``start`` must say its value)."""
    if start and name in start:
        return float(start[name])
    if RuntimeTerms.model_fields[name].default is None:
        raise ValueError(f"fit_rows: start must give {name}'s value in the predictions")
    return 0.0


def measured_means(rows: Sequence[E2ERow]) -> np.ndarray:
    """The rows' measured mean TTFT and TPOT (ms), ``(n, 2)``."""
    return np.array([[r.ttft_ms, r.tpot_ms] for r in rows], dtype=float).reshape(len(rows), 2)


def _slopes(rows, pred0, layers, names, prefill_s) -> np.ndarray:
    """Every row's :func:`row_slopes`, ``(n, 2, len(names))``."""
    work = prefill_s if prefill_s is not None else [None] * len(rows)
    return np.stack([row_slopes(r, p, n, names, w) for r, p, n, w in
                     zip(rows, pred0, layers, work, strict=True)]).reshape(len(rows), 2,
                                                                            len(names))


def first_order(rows: Sequence[E2ERow], pred0: np.ndarray, layers: Sequence[RowShape | int],
                terms: RuntimeTerms, names: Sequence[str],
                prefill_s: Sequence[float] | None = None,
                start: dict[str, float] | None = None) -> np.ndarray:
    """``pred0`` (``(n, 2)`` ms, at the terms' values in ``start``, else 0) moved to first
    order to ``terms``' values of ``names``."""
    pred0 = np.asarray(pred0, dtype=float)
    x = np.array([getattr(terms, n) for n in names], dtype=float)
    x0 = np.array([_start(n, start) for n in names])
    return pred0 + _slopes(rows, pred0, layers, names, prefill_s) @ (x - x0)


def fit_rows(rows: Sequence[E2ERow], pred0: np.ndarray, layers: Sequence[RowShape | int],
             names: Sequence[str] = E2E_FIT_TERMS,
             prefill_s: Sequence[float] | None = None,
             start: dict[str, float] | None = None) -> tuple[RuntimeTerms, dict]:
    """Terms fitted to ``rows`` from their term-free predictions ``pred0`` (``(n, 2)`` ms),
    each row's model shape (:class:`RowShape`, or its layer count) and, if known, the
    oracle's prefill of one mean prompt (``prefill_s``, seconds); ``start``: the value a
    term has in ``pred0`` where not 0 (the GPU profile's ``step_overhead_s``; every term
    must have one there). Returns the terms and a summary (fitted, skipped, median |error|
    of the first-order model before and after)."""
    meas = measured_means(rows)
    pred0 = np.asarray(pred0, dtype=float)
    tp = np.array([max(_tp_first(r)) for r in rows])
    names, skipped = identifiable(names, tp, np.array([r.mode != "agg" for r in rows]),
                                  np.array([RowShape.of(n).expert_layers for n in layers]))
    jac = _slopes(rows, pred0, layers, names, prefill_s)
    still = [j for j, n in enumerate(names) if n == EAGER_TERM and not np.any(jac[:, :, j])]
    if still:  # no row has an eager step whose dispatch outlasts its GPU work
        skipped[EAGER_TERM] = "moves no row's simulated prediction"
        names = [n for j, n in enumerate(names) if j not in still]
        jac = np.delete(jac, still, axis=2)
    upper = np.array([TERM_SCALES[n][1] for n in names])
    x0 = np.array([_start(n, start) for n in names])
    x = fit_first_order(pred0, jac, meas, x0, upper)
    after = pred0 + jac @ (x - x0)
    med = lambda p: [float(v) for v in np.median(np.abs(p / meas - 1.0), axis=0)]  # noqa: E731
    terms = RuntimeTerms(**{n: float(v) for n, v in zip(names, x, strict=True)})
    return terms, {"fitted": list(names), "skipped": skipped,
                   "median_abs_err_before": med(pred0),
                   "median_abs_err_after_first_order": med(after),
                   "terms": terms.model_dump()}


__all__ = ["E2E_FIT_TERMS", "EAGER_PROBE_S", "EAGER_TERM", "EXPERT_TERM", "STEP_OVERHEAD_TERM",
           "RowShape", "first_order", "fit_rows", "mean_lengths", "measured_means",
           "row_slopes"]
