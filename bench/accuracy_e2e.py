"""End-to-end accuracy: serveplan against 3,337 measured deployments (B200 ... GB300).

For every row of ``../shared/data/e2e/aic_silicon_blackwell`` serveplan can express, the
same closed-loop load is simulated three ways: (a) the GPU steps alone (no engine runtime),
(b) the engine's runtime with unfitted terms (its scheduler, async scheduling, defaults),
(c) with runtime terms fitted leave-one-model-out (each model predicted by terms fitted on
the other models of the same engine; checkpoints of one architecture are one model,
:func:`serveplan.e2e_served.held_out_units`). The fits are first order in closed form
(:mod:`serveplan.e2e_fit`), in two steps: from (b), then around those terms from a
sample of the training rows simulated with them (:func:`fit_resimulated`); the eager
dispatch term, which has no closed form, takes each row's secant from one more simulation
with that term alone (:data:`EAGER_PROBE`); each held-out row is then simulated with its
fold's terms. The shipped profile's terms are fitted on all rows of an engine that has
rows of two or more models (``--write-profiles``), each row on its GPU as the catalog has
it (B300 at its measured speed; every prediction scored holds that speed out,
:mod:`accuracy_e2e_sims`).

Writes ``bench/results/accuracy_e2e.md``, ``.json`` and ``_rows.csv`` (every row's
measured and predicted means; ``--out NAME``: ``NAME.md`` ...).
Usage: ``python bench/accuracy_e2e.py [--data DIR] [--jobs 2] [--write-profiles]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from accuracy_e2e_breakdown import (
    distinct_measurements,
    engine_load_table,
    group_table,
    light_load_gaps,
    med_abs,
    osl_slopes,
    overall,
    overall_distinct,
    repeat_spread,
    verdict,
    worse_models,
)
from accuracy_e2e_domains import fold_domain_table, held_out_outside
from accuracy_e2e_layouts import agg_layout, best_layout, pd_layout
from accuracy_e2e_profiles import write_profiles
from accuracy_e2e_rowsfile import read_rows_csv, write_rows_csv
from accuracy_e2e_selfcal import SELF_TERMS, self_calibrated
from accuracy_e2e_selfcal import summary as selfcal_summary
from accuracy_e2e_sims import at_catalog_speed, predict_all, resolve_all, sim_key

from serveplan.e2e import expressible, load_rows
from serveplan.e2e_fit import (
    E2E_FIT_TERMS,
    EAGER_PROBE_S,
    EAGER_TERM,
    EXPERT_TERM,
    STEP_OVERHEAD_TERM,
    RowShape,
    fit_rows,
    measured_means,
    row_slopes,
)
from serveplan.e2e_select import OPTIONAL_TERMS, select_terms, term_sets
from serveplan.e2e_served import held_out_units
from serveplan.estimator.runtime import RuntimeTerms

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "e2e" / "aic_silicon_blackwell"
RESIM_ROWS = 100  # training rows a fit's second step simulates again (time: one run each)
EAGER_PROBE = "eager_probe"
"""The rows file's columns of every row simulated with only the eager term, at
:data:`~serveplan.e2e_fit.EAGER_PROBE_S`: with setting (b), that term's secant slopes."""


def lomo(rows, resolved, unfitted, layers, prefill_s, jobs=1, names=E2E_FIT_TERMS,
         resim_rows=RESIM_ROWS, optional=tuple(OPTIONAL_TERMS), units=None, counted=None,
         shipped_inputs=None):
    """Leave-one-model-out predictions per engine (each model simulated with terms fitted
    on the engine's other models), the folds' fit summaries, each model's fold terms, and
    each engine's fit on all its rows of the terms some fold checked (fitted without a
    model whose rows the term moves: a term only one model's rows identify is never
    checked, and does not ship); engines with one model are not fitted. ``units``: each
    row's held-out unit (default its model; :func:`serveplan.e2e_served.held_out_units`
    joins a model's twins, held out together); ``counted``: the rows the fits count (default
    all; :func:`distinct_measurements` counts each run once), every row is predicted;
    ``shipped_inputs``: the ``(resolved, prefill_s, unfitted)`` the engines' fits on all
    rows run on instead (:func:`accuracy_e2e_sims.at_catalog_speed`)."""
    ship_res, ship_pre, ship_unf = shipped_inputs or (resolved, prefill_s, unfitted)
    pred = np.full((len(rows), 2), np.nan)
    counted = np.ones(len(rows), dtype=bool) if counted is None else counted
    folds, full, fold_terms = [], {}, {}
    candidates = term_sets(names, optional)
    unit = list(units) if units is not None else [r.model for r in rows]
    by_engine = defaultdict(list)
    for k, r in enumerate(rows):
        by_engine[r.engine].append(k)
    for engine, idx in by_engine.items():
        models = sorted({unit[k] for k in idx})
        if len(models) < 2:
            full[engine] = {"fitted": False, "reason": f"one model only ({models[0]}): "
                            "a leave-one-model-out check is impossible"}
            continue
        start = (step_overhead_start([resolved[k] for k in idx])
                 if STEP_OVERHEAD_TERM in names else None)
        validated = set()
        for m in models:
            train = [k for k in idx if unit[k] != m and counted[k]]
            test = [k for k in idx if unit[k] == m]
            chosen, choice = _select(train, rows, unfitted, layers, prefill_s, candidates,
                                     start, unit)
            terms, summ = fit_resimulated(train, rows, resolved, unfitted, layers, prefill_s,
                                          chosen, start, jobs, resim_rows)
            summ.update(choice)
            fold_terms.update({(engine, rows[k].model): terms for k in test})
            pred[test] = predict_all([rows[k] for k in test], [resolved[k] for k in test],
                                     terms, jobs)
            held_out = " + ".join(sorted({rows[k].model for k in test}))
            folds.append({"engine": engine, "held_out": held_out, **summ})
            held = med_abs(pred[test], measured_means([rows[k] for k in test]))
            print(f"{engine}: held out {held_out} ({len(test)} rows): median abs TTFT/TPOT "
                  f"{100 * held[0]:.1f}/{100 * held[1]:.1f} %", file=sys.stderr, flush=True)
            validated |= {name for name in summ["fitted"] if any(
                moves(rows[k], unfitted[k], layers[k], name, prefill_s[k]) for k in test)}
        idx = [k for k in idx if counted[k]]
        chosen, choice = _shipped_set(idx, rows, ship_unf, layers, ship_pre, candidates,
                                      start, unit, folds[-len(models):])
        checked = [n for n in chosen if n in validated]
        terms, summ = fit_resimulated(idx, rows, ship_res, ship_unf, layers, ship_pre,
                                      checked, start, jobs, resim_rows)
        summ.update(choice)
        summ["skipped"].update({n: "no held-out model's rows check it" for n in chosen
                                if n not in validated and n not in summ["skipped"]})
        full[engine] = {**summ, "fitted": True, "terms": terms}
    return pred, folds, full, fold_terms


def _shipped_set(idx, rows, unfitted, layers, prefill_s, candidates, start, unit, folds):
    """The term set an engine's profile fits on all its rows ``idx``: its own inner choice
    (:func:`_select`) where its folds made theirs; where every fold had too few training
    models for one and kept the default set, that set -- the one its held-out check
    validated (chosen there among more models, SGLang's latency alone carried worse to its
    held-out models than the all-five set its folds fitted:
    ``bench/results/accuracy_e2e_shipped_set.md``)."""
    if any(f["scores"] is not None for f in folds):
        return _select(idx, rows, unfitted, layers, prefill_s, candidates, start, unit)
    first = next(iter(candidates))
    return tuple(candidates[first]), {"term_set": first, "scores": None, "why": (
        "no fold had the models for the inner choice: the default set, as its folds fitted")}


def _select(idx, rows, unfitted, layers, prefill_s, candidates, start, unit):
    """The term set to fit to the rows ``idx`` (:func:`serveplan.e2e_select.select_terms`,
    among ``candidates``, its inner check holding out ``unit`` by ``unit``) and the
    choice's summary."""
    return select_terms([rows[k] for k in idx], unfitted[idx], [layers[k] for k in idx],
                        [prefill_s[k] for k in idx], candidates, start,
                        [unit[k] for k in idx])


def fit_resimulated(idx, rows, resolved, unfitted, layers, prefill_s, names, start, jobs,
                    resim_rows=RESIM_ROWS):
    """Terms fitted to the rows ``idx`` in two first-order steps: from their term-free
    predictions ``unfitted`` (every row), then again around those first terms from
    :func:`resim_sample` of the rows simulated with them (the simulator responds more than
    the slopes at zero say, :mod:`serveplan.e2e_fit`); ``resim_rows`` 0: the first step
    alone. Returns the terms and the last fit's summary: after two steps its errors are
    the sample's (term-free, simulated at the first terms, first order at the second)."""
    fit_args = dict(names=names, layers=[layers[k] for k in idx],
                    prefill_s=[prefill_s[k] for k in idx])
    first, first_summ = fit_rows([rows[k] for k in idx], unfitted[idx], start=start,
                                 **fit_args)
    if resim_rows <= 0:
        return first, first_summ
    sample = [idx[i] for i in resim_sample([rows[k].model for k in idx], resim_rows)]
    sub = [rows[k] for k in sample]
    at_first = predict_all(sub, [resolved[k] for k in sample], first, jobs)
    fit_args.update(layers=[layers[k] for k in sample], prefill_s=[prefill_s[k] for k in sample])
    terms, summ = fit_rows(sub, at_first, **fit_args,
                           start={**(start or {}), **first.model_dump(include=set(names))})
    kept = set(first_summ["fitted"]) - set(summ["fitted"])  # not in the sample: step one's
    terms = terms.model_copy(update=first.model_dump(include=kept))
    meas = measured_means(sub)
    summ.update(fitted=first_summ["fitted"], skipped=first_summ["skipped"],
                terms=terms.model_dump(),
                median_abs_err_before=[float(v) for v in med_abs(unfitted[sample], meas)],
                median_abs_err_simulated_first_fit=[float(v) for v in med_abs(at_first, meas)],
                resimulated_rows=len(sample), rows=len(idx))
    return terms, summ


def resim_sample(models: list[str], cap: int) -> list[int]:
    """Positions of about ``cap`` of the rows whose models are ``models``, for the second
    fit step: all if there are no more than ``cap``, otherwise evenly spaced within each
    model's rows (in their order), each model's share in proportion to its rows (rounded,
    and at least one). Deterministic."""
    if len(models) <= cap:
        return list(range(len(models)))
    by_model = defaultdict(list)
    for i, m in enumerate(models):
        by_model[m].append(i)
    pick = []
    for pos in by_model.values():
        n = max(1, round(cap * len(pos) / len(models)))
        pick += [pos[j] for j in np.unique(np.linspace(0, len(pos) - 1, n).round().astype(int))]
    return sorted(pick)


def step_overhead_start(resolved) -> dict[str, float]:
    """The GPU profiles' step overhead the unfitted predictions ran with (one value: the
    first-order fit starts there)."""
    values = {p.instance.oracle.profile_step_overhead_s for res in resolved for p in res.pools}
    if len(values) != 1:
        raise ValueError(f"the rows' GPU profiles differ in step_overhead_s: {sorted(values)}")
    return {"step_overhead_s": values.pop()}


def moves(row, pred0, layers: RowShape, name: str, prefill_s: float) -> bool:
    """Whether the term ``name`` moves ``row``'s prediction (its first-order slope), so
    that a fold holding out ``row``'s model checks the term."""
    return bool(np.any(row_slopes(row, pred0, layers, (name,), prefill_s) != 0.0))


def held_out_check(rows, unfitted, fitted, full) -> None:
    """Ship an engine's fitted terms only if, held out model by model, they lower the
    median |error| of TTFT over the engine's rows and raise TPOT's by at most half a
    point against the unfitted runtime; else say why not. Models the terms make worse are
    named either way."""
    meas = measured_means(rows)
    for engine, info in full.items():
        if not info.get("fitted"):
            continue
        idx = [k for k, r in enumerate(rows) if r.engine == engine]
        before, after = med_abs(unfitted[idx], meas[idx]), med_abs(fitted[idx], meas[idx])
        info["median_abs_err_before"] = [float(v) for v in before]  # every row, not a sample
        info["median_abs_err_held_out"] = [float(v) for v in after]
        info["held_out_worse"] = worse_models(rows, idx, unfitted[idx], fitted[idx])
        if not (after[0] < before[0] and after[1] <= before[1] + 0.005):
            info["fitted"] = False
            info["reason"] = f"held out, the terms do not help: {verdict(before, after)}"


def as_shipped(rows, unfitted, fitted, full) -> np.ndarray:
    """Each row as its engine's profile ships: held out with fitted terms where the engine's
    terms ship, unfitted where they do not (the ship decision itself reads the held-out
    errors of :func:`held_out_check`, one yes/no per engine)."""
    ships = np.array([bool(full.get(r.engine, {}).get("fitted")) for r in rows])
    return np.where(ships[:, None], fitted, unfitted)


def ship_step_overhead_only(rows, resolved, unfitted, shipped, full, fold_terms, jobs):
    """For an engine whose terms do not ship: its fitted step overhead alone, held out
    model by model (each fold's value), ships if it lowers the median |error| of TPOT over
    the engine's rows and raises TTFT's by at most half a point. Updates ``full`` and the
    engine's rows of ``shipped`` (setting (d)) where it ships."""
    meas = measured_means(rows)
    for engine, info in full.items():
        terms = info.get("terms")
        if info.get("fitted") or terms is None or terms.step_overhead_s is None:
            continue
        idx = [k for k, r in enumerate(rows) if r.engine == engine]
        alt = np.full((len(idx), 2), np.nan)
        for m in sorted({rows[k].model for k in idx}):
            at = [j for j, k in enumerate(idx) if rows[k].model == m]
            step = RuntimeTerms(step_overhead_s=fold_terms[engine, m].step_overhead_s)
            alt[at] = predict_all([rows[idx[j]] for j in at], [resolved[idx[j]] for j in at],
                                  step, jobs)
        before, after = med_abs(unfitted[idx], meas[idx]), med_abs(alt, meas[idx])
        said = f"the step overhead alone, held out: {verdict(before, after)}"
        if after[1] < before[1] and after[0] <= before[0] + 0.005:
            info.update(fitted=True, terms=RuntimeTerms(step_overhead_s=terms.step_overhead_s),
                        median_abs_err_held_out=[float(v) for v in after],
                        held_out_worse=worse_models(rows, idx, unfitted[idx], alt),
                        reason=f"{info['reason']}; ships the step overhead alone: {said}")
            shipped[idx] = alt
        else:
            info["reason"] += f"; {said}"


def _command(args) -> str:
    """The command line that reproduces the report."""
    return ("python bench/accuracy_e2e.py"
            + (" --no-fit" if args.no_fit else "")
            + (" --write-profiles" if args.write_profiles else "")
            + (" --reuse" if args.reuse else "")
            + (f" --resimulate '{args.resimulate.pattern}'" if args.resimulate else "")
            + (" --report-only" if args.report_only else "")
            + (" --fit-step-overhead" if args.fit_step_overhead else "")
            + (" --eager-term" if args.eager_term else "")
            + (f" --resim-rows {args.resim_rows}" if args.resim_rows != RESIM_ROWS else "")
            + (f" --jobs {args.jobs}" if args.jobs > 1 else "")
            + (f" --out {args.out}" if args.out != "accuracy_e2e" else ""))


def _regex(text: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"not a regular expression: {err}") from None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the simulations")
    ap.add_argument("--write-profiles", action="store_true",
                    help="write each engine's fitted terms, provenance and fit domain into "
                         "its shipped runtime profile (with --report-only: the previous "
                         "run's fits)")
    ap.add_argument("--no-fit", action="store_true",
                    help="report settings (a) and (b) only: no leave-one-model-out fits")
    ap.add_argument("--reuse", action="store_true",
                    help="take settings (a) and (b) from the previous NAME_rows.csv (same "
                         "data and client; rows since found not expressible are left out) "
                         "and redo only the fits")
    ap.add_argument("--resimulate", metavar="REGEX", type=_regex,
                    help="with --reuse: simulate settings (a) and (b) again for the rows "
                         "whose id matches REGEX (their deployment changed since that run)")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild the report from the previous run's NAME_rows.csv and "
                         "NAME.json (its predictions and fits): no simulation, no fit")
    ap.add_argument("--fit-step-overhead", action="store_true",
                    help="fit each engine's GPU time per step outside the forward pass in "
                         "every fit (serveplan.e2e_fit.STEP_OVERHEAD_TERM; by default each "
                         "fit's nested choice takes it or leaves it)")
    ap.add_argument("--eager-term", action="store_true",
                    help="offer the eager dispatch term to each fit's choice (one more "
                         "simulation of every row for its slopes). Offered, vLLM's folds "
                         "took it and Llama-3.1-70B's held-out TTFT error went 9.1 -> 24.0 "
                         "%%: one cost per layer does not carry from MoE models to a dense one")
    ap.add_argument("--resim-rows", type=int, default=RESIM_ROWS, metavar="N",
                    help="training rows (about N, spread over the models) each fit simulates "
                         "again at its first step's terms for its second step")
    ap.add_argument("--out", default="accuracy_e2e",
                    help="report name in bench/results (NAME.md, NAME.json, NAME_rows.csv)")
    return ap


def _predict_settings(args, ok, resolved) -> dict:
    rows_csv = HERE / "results" / f"{args.out}_rows.csv"
    eager = RuntimeTerms(eager_dispatch_layer_s=EAGER_PROBE_S)
    if args.reuse or args.report_only:
        names = ("gpu_only", "engine_unfitted") + (("engine_fitted_lomo", "as_shipped")
                                                     if args.report_only else ())
        preds = read_rows_csv(rows_csv, ok, names,  # a rebuild keeps setting (e) too
                              optional=("self_calibrated", EAGER_PROBE) if args.report_only
                              else (EAGER_PROBE,) if args.eager_term else ())
        redo = [k for k, r in enumerate(ok) if args.resimulate and args.resimulate.search(r.id)]
        if redo:
            rows, res = [ok[k] for k in redo], [resolved[0][k] for k in redo]
            preds["gpu_only"][redo] = predict_all(rows, res, "gpu", args.jobs, args.data)
            preds["engine_unfitted"][redo] = predict_all(rows, res, RuntimeTerms(), args.jobs)
            if EAGER_PROBE in preds:
                preds[EAGER_PROBE][redo] = predict_all(rows, res, eager, args.jobs)
        if args.eager_term and EAGER_PROBE not in preds and not args.report_only:
            preds[EAGER_PROBE] = predict_all(ok, resolved[0], eager, args.jobs)
        return preds
    resolved = resolved[0]
    preds = {"gpu_only": predict_all(ok, resolved, "gpu", args.jobs, args.data),
             "engine_unfitted": predict_all(ok, resolved, RuntimeTerms(), args.jobs)}
    if args.eager_term:
        preds[EAGER_PROBE] = predict_all(ok, resolved, eager, args.jobs)
    return preds


def _fits(args, ok, preds, prev: dict | None, resolved, eager) -> tuple[list, dict]:
    """The leave-one-model-out fits (adding settings (c) and (d) to ``preds``; ``eager``:
    the rows' :data:`EAGER_PROBE` predictions), the shipped ones with every row at its
    catalog GPU's speed; with ``--report-only`` the earlier run's (``prev``: its report)
    fits and predictions."""
    if args.no_fit:
        return [], {}
    if prev is not None:
        return prev["folds"], prev["profiles"]
    resolved, prefill_s = resolved
    unfitted = preds["engine_unfitted"]
    layers = model_shapes(resolved, unfitted, eager)
    names = E2E_FIT_TERMS + (EXPERT_TERM, STEP_OVERHEAD_TERM) + (
        (EAGER_TERM,) if eager is not None else ())
    optional = ((EXPERT_TERM, EAGER_TERM) if args.fit_step_overhead
                else tuple(OPTIONAL_TERMS))
    units = held_out_units([r.model for r in ok], args.data)
    shipped_inputs = at_catalog_speed(ok, resolved, prefill_s, unfitted, args.data, args.jobs)
    fitted, folds, full, fold_terms = lomo(ok, resolved, unfitted, layers, prefill_s,
                                           args.jobs, names, args.resim_rows, optional,
                                           [units[r.model] for r in ok],
                                           distinct_measurements(ok), shipped_inputs)
    held_out_check(ok, unfitted, fitted, full)
    preds["engine_fitted_lomo"] = fitted
    preds["as_shipped"] = as_shipped(ok, unfitted, fitted, full)
    ship_step_overhead_only(ok, resolved, unfitted, preds["as_shipped"], full, fold_terms,
                            args.jobs)
    return folds, full


def model_shapes(resolved, unfitted=None, eager=None) -> list[RowShape]:
    """Each resolved deployment's model shape (its first pool's model) and, given the
    rows' unfitted and :data:`EAGER_PROBE` predictions, their eager-term secants (ms per
    second of the term)."""
    models = [res.pools[0].instance.oracle.model for res in resolved]
    if eager is None:
        return [RowShape(m.num_layers, m.expert_layers) for m in models]
    secant = (np.asarray(eager) - np.asarray(unfitted)) / EAGER_PROBE_S
    return [RowShape(m.num_layers, m.expert_layers, (float(t), float(p)))
            for m, (t, p) in zip(models, secant, strict=True)]


def _self_calibration(args, ok, meas, preds, resolved, prev,
                      earlier: np.ndarray | None) -> tuple[np.ndarray, dict] | None:
    """Setting (e) (:mod:`accuracy_e2e_selfcal`): each deployment's heavier rows predicted
    with terms fitted on its own light rows, and its summary; with ``--report-only`` the
    earlier run's (``earlier``: its rows file's column); None without fits (or with the step
    overhead fitted: (c) is not the default's)."""
    if args.no_fit or args.fit_step_overhead:
        return None
    if prev is not None:
        if "self_calibration" not in prev or earlier is None:
            return None
        return earlier, prev["self_calibration"]
    resolved, prefill_s = resolved
    layers = model_shapes(resolved)
    unfitted = preds["engine_unfitted"]

    def fit(idx):
        return fit_resimulated(idx, ok, resolved, unfitted, layers, prefill_s, SELF_TERMS,
                               None, args.jobs, args.resim_rows)

    def predict(idx, terms):
        return predict_all([ok[k] for k in idx], [resolved[k] for k in idx], terms, args.jobs)

    calibrated, fits = self_calibrated(ok, fit, predict)
    return calibrated, selfcal_summary(ok, meas, preds["engine_fitted_lomo"], calibrated, fits)


def _fold_domains(args, ok, meas, preds) -> list[dict]:
    """The held-out error inside and outside each fold's fit domain
    (:mod:`accuracy_e2e_domains`); none without fits."""
    if "engine_fitted_lomo" not in preds:
        return []
    units = held_out_units([r.model for r in ok], args.data)
    aspects = held_out_outside(ok, [units[r.model] for r in ok], args.data)
    return fold_domain_table(ok, meas, preds["engine_fitted_lomo"], aspects)


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    if args.no_fit and args.write_profiles:
        ap.error("--write-profiles needs fits: drop --no-fit")
    if args.resimulate and not args.reuse:
        ap.error("--resimulate re-runs rows of a --reuse run: add --reuse")
    if args.eager_term and (args.no_fit or args.report_only):
        ap.error("--eager-term offers a term to this run's fits: drop --no-fit / --report-only")
    t0 = time.time()
    rows = load_rows(args.data / "silicon_blackwell.csv")
    reasons = Counter(expressible(r, args.data) or "expressible" for r in rows)
    ok = [r for r in rows if expressible(r, args.data) is None]
    meas = measured_means(ok)
    resolved = None if args.report_only else resolve_all(ok, args.data)
    preds = _predict_settings(args, ok, resolved)
    earlier_calibrated = preds.pop("self_calibrated", None)  # setting (e), rebuilt below
    eager = preds.pop(EAGER_PROBE, None)  # the eager term's slopes, not a setting
    probe = {} if eager is None else {EAGER_PROBE: eager}
    results = HERE / "results"
    prev = (json.loads((results / f"{args.out}.json").read_text()) if args.report_only
            else None)  # the run whose predictions --report-only reports
    if not args.report_only:  # --reuse after a stop (a rebuild keeps every column it read)
        write_rows_csv(results / f"{args.out}_rows.csv", ok, meas, {**preds, **probe})
    folds, full = _fits(args, ok, preds, prev, resolved, eager)
    calibration = _self_calibration(args, ok, meas, preds, resolved, prev, earlier_calibrated)
    stamp = time.strftime("%Y-%m-%d") if prev is None else prev["date"]
    if args.write_profiles:  # with --report-only: the earlier run's fits, as it wrote them
        write_profiles(full, stamp, ok, args.data)
    report = {
        "command": _command(args),
        "date": stamp, "seconds": round(time.time() - t0, 1),
        "coverage": {"expressible": len(ok), "rows": len(rows), "reasons": dict(reasons)},
        "repeat_spread": repeat_spread(ok, sim_key),
        "groups": group_table(ok, meas, preds), "osl_slopes": osl_slopes(ok, preds),
        "by_load": engine_load_table(ok, meas, preds),
        "light_load_gaps": light_load_gaps(ok, meas, preds["engine_unfitted"]),
        "best_tp": best_layout(ok, preds, "agg", agg_layout),
        "best_pd_split": best_layout(ok, preds, "disagg", pd_layout), "folds": folds,
        "profiles": {e: {k: (v.model_dump() if isinstance(v, RuntimeTerms) else v)
                         for k, v in info.items()} for e, info in full.items()},
        "overall": overall(preds, meas),
        "overall_distinct": overall_distinct(ok, preds, meas),
        "fold_domains": _fold_domains(args, ok, meas, preds),
    }
    if prev is not None:  # the predictions are the earlier run's: so is its provenance
        report.update(command=prev["command"].split(" (report rebuilt")[0]
                      + f" (report rebuilt: {report['command']})",
                      date=prev["date"], seconds=prev["seconds"])
    columns = {**preds, **probe}
    if calibration is not None:
        columns["self_calibrated"], report["self_calibration"] = calibration
    (results / f"{args.out}.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
    write_rows_csv(results / f"{args.out}_rows.csv", ok, meas, columns)
    from accuracy_e2e_report import write_markdown

    write_markdown(report, results / f"{args.out}.md")
    print(f"wrote {results / args.out}.md ({report['seconds']} s)")


if __name__ == "__main__":
    main()
