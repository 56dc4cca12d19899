"""End-to-end accuracy: serveplan against 3,337 measured deployments (B200 ... GB300).

For every row of ``../shared/data/e2e/aic_silicon_blackwell`` serveplan can express, the
same closed-loop load is simulated three ways: (a) the GPU steps alone (no engine runtime),
(b) the engine's runtime with unfitted terms (its scheduler, async scheduling, defaults),
(c) with runtime terms fitted leave-one-model-out (each model predicted by terms fitted on
the other models of the same engine). The shipped profile's terms are then fitted on all
rows of an engine that has rows of two or more models (``--write-profiles``).

Writes ``bench/results/accuracy_e2e.md`` and ``.json`` (``--out NAME``: ``NAME.md``).
Usage: ``python bench/accuracy_e2e.py [--data DIR] [--fit-rounds 4] [--write-profiles]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from serveplan.e2e import expressible, load_rows, resolve_row, simulate_row, with_terms
from serveplan.e2e_versions import engine_version
from serveplan.estimator.runtime import RuntimeTerms, load_runtime_profile
from serveplan.estimator.runtime_fit import fit_terms

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "e2e" / "aic_silicon_blackwell"
PROFILES = HERE.parent / "estimator" / "data" / "runtime"


def sim_key(row):
    """What a simulation of ``row`` depends on: the row without its id and measurements
    (the measurement date only through the engine version it selects)."""
    version = engine_version(row.engine, row.version, row.measured)
    return replace(row, id="", ttft_ms=0.0, tpot_ms=0.0, measured="", version=version or "")


def unique_runs(rows):
    """The distinct simulations among ``rows``: (the index of each one's first row, the
    index of each row's simulation). Repeated measurements of one deployment and load are
    simulated once."""
    index, first, which = {}, [], []
    for k, r in enumerate(rows):
        key = sim_key(r)
        if key not in index:
            index[key] = len(first)
            first.append(k)
        which.append(index[key])
    return first, np.array(which, dtype=np.int64)


_SHARED: dict = {}  # rows and resolved deployments, inherited by forked workers


def _fork_map(fn, tasks, jobs: int) -> list:
    """``[fn(t) for t in tasks]``, on ``jobs`` forked worker processes when ``jobs > 1``
    (they inherit :data:`_SHARED`)."""
    if jobs <= 1 or len(tasks) < 2:
        return [fn(t) for t in tasks]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.map(fn, tasks, chunksize=1)


def _predict_task(task):
    """One simulation of :func:`predict_all`: ``(k, terms, rounds)``; ``terms`` None runs
    the row's deployment as resolved, ``"gpu"`` without the engine runtime."""
    k, terms, rounds = task
    rows, resolved = _SHARED["rows"], _SHARED["resolved"]
    if terms == "gpu":
        return simulate_row(rows[k], _SHARED["data"], engine=False, measured_rounds=rounds)
    res = with_terms(resolved[k], terms) if terms is not None else resolved[k]
    return simulate_row(rows[k], resolved=res, measured_rounds=rounds)


def predict_all(rows, resolved, terms=None, rounds=20, jobs=1, data=None) -> np.ndarray:
    """Median TTFT and TPOT (ms) of every row, each distinct simulation run once (on
    ``jobs`` processes; ``terms="gpu"``: the GPU steps alone, resolved from ``data``)."""
    first, which = unique_runs(rows)
    _SHARED.update(rows=rows, resolved=resolved, data=data)
    out = _fork_map(_predict_task, [(k, terms, rounds) for k in first], jobs)
    return np.array(out, dtype=float).reshape(len(first), 2)[which]


def fit_on(rows, resolved, rounds, max_runs=None) -> tuple[RuntimeTerms, dict]:
    """Terms fitted to ``rows``: one residual per distinct simulation, against the median
    of its repeated measurements; at most ``max_runs`` distinct simulations, evenly spaced
    in the rows' order (which is the CSV's: by model, system, parallelism, load)."""
    first, which = unique_runs(rows)
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in rows])
    keep = np.arange(len(first))
    if max_runs is not None and len(first) > max_runs:
        keep = np.unique(np.linspace(0, len(first) - 1, max_runs).round().astype(int))
    meas_u = np.array([np.median(meas[which == u], axis=0) for u in keep])
    reps, res_u = [rows[first[u]] for u in keep], [resolved[first[u]] for u in keep]
    tp = np.array([r.tp for r in reps])
    fit = fit_terms(lambda t: predict_all(reps, res_u, t, rounds), meas_u, tp, max_evals=60)
    return fit.terms, fit.summary()


def _fit_task(task):
    """One fit of :func:`lomo`: ``(train, test, rounds, max_runs)`` -> (terms, summary,
    predictions of ``test`` or None)."""
    train, test, rounds, max_runs = task
    rows, resolved = _SHARED["fit_rows"], _SHARED["fit_resolved"]
    terms, summ = fit_on([rows[k] for k in train], [resolved[k] for k in train], rounds,
                         max_runs)
    pred = (predict_all([rows[k] for k in test], [resolved[k] for k in test], terms)
            if test else None)
    return terms, summ, pred


def lomo(rows, resolved, rounds, every=1, max_runs=None, jobs=1):
    """Leave-one-model-out predictions per engine; engines with one model are not fitted.
    The fits are independent: ``jobs`` worker processes run them side by side."""
    pred = np.full((len(rows), 2), np.nan)
    folds, full, tasks, labels = [], {}, [], []
    by_engine = defaultdict(list)
    for k, r in enumerate(rows):
        by_engine[r.engine].append(k)
    for engine, idx in by_engine.items():
        models = sorted({rows[k].model for k in idx})
        if len(models) < 2:
            full[engine] = {"fitted": False, "reason": f"one model only ({models[0]}): "
                            "a leave-one-model-out check is impossible"}
            continue
        for m in models:
            train = [k for k in idx if rows[k].model != m][::every]
            tasks.append((train, [k for k in idx if rows[k].model == m], rounds, max_runs))
            labels.append((engine, m))
        tasks.append((idx[::every], [], rounds, max_runs))
        labels.append((engine, None))
    _SHARED.update(fit_rows=rows, fit_resolved=resolved)
    results = _fork_map(_fit_task, tasks, jobs)
    for (engine, m), task, (terms, summ, p) in zip(labels, tasks, results, strict=True):
        if m is None:
            full[engine] = {**summ, "fitted": True, "terms": terms}
        else:
            pred[task[1]] = p
            folds.append({"engine": engine, "held_out": m, **summ})
    return pred, folds, full


def _err(pred, meas):
    return pred / meas - 1.0


def group_table(rows, preds: dict[str, np.ndarray]) -> list[dict]:
    groups = defaultdict(list)
    for k, r in enumerate(rows):
        groups[(r.engine, r.model, r.system, r.mode)].append(k)
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in rows])
    table = []
    for key, idx in sorted(groups.items()):
        entry = {"engine": key[0], "model": key[1], "system": key[2], "mode": key[3],
                 "rows": len(idx)}
        for name, p in preds.items():
            e = _err(p[idx], meas[idx])
            ok = np.isfinite(e).all(axis=1)
            if not ok.any():
                continue
            e = e[ok]
            entry[name] = {"ttft_med_abs": float(np.median(np.abs(e[:, 0]))),
                           "ttft_bias": float(np.median(e[:, 0])),
                           "tpot_med_abs": float(np.median(np.abs(e[:, 1]))),
                           "tpot_bias": float(np.median(e[:, 1]))}
        table.append(entry)
    return table


def osl_slopes(rows, preds) -> list[dict]:
    """TTFT change from osl 1024 to 8192 at fixed engine, model, tp, isl and concurrency."""
    index = {(r.engine, r.model, r.tp, r.isl, r.concurrency, r.osl): k for k, r in
             enumerate(rows)}
    out = []
    for (e, m, tp, isl, c, osl), k in index.items():
        k2 = index.get((e, m, tp, isl, c, 8192))
        if osl != 1024 or k2 is None:
            continue
        row = {"engine": e, "model": m, "tp": tp, "isl": isl, "concurrency": c,
               "measured": rows[k2].ttft_ms - rows[k].ttft_ms}
        for name, p in preds.items():
            row[name] = float(p[k2, 0] - p[k, 0])
        out.append(row)
    return out


def best_tp(rows, preds) -> dict:
    """Per (engine, model, isl, osl, concurrency): is the TP with the highest output tokens/s
    per GPU (closed loop: c * osl / (TTFT + (osl - 1) TPOT) / tp) the measured best?"""
    groups = defaultdict(list)
    for k, r in enumerate(rows):
        groups[(r.engine, r.model, r.isl, r.osl, r.concurrency)].append(k)

    def per_gpu(k, ttft, tpot):
        r = rows[k]
        return r.concurrency * r.osl / ((ttft + (r.osl - 1) * tpot) / 1e3) / (r.tp * r.pp)

    result = {}
    for name, p in preds.items():
        agree = total = 0
        for idx in groups.values():
            if len({rows[k].tp for k in idx}) < 2 or not np.isfinite(p[idx]).all():
                continue
            meas_best = max(idx, key=lambda k: per_gpu(k, rows[k].ttft_ms, rows[k].tpot_ms))
            pred_best = max(idx, key=lambda k: per_gpu(k, *p[k]))
            agree += rows[meas_best].tp == rows[pred_best].tp
            total += 1
        result[name] = {"agree": agree, "groups": total}
    return result


def held_out_check(rows, unfitted, fitted, full) -> None:
    """Ship an engine's fitted terms only if, for every held-out model, they lower the
    median |error| of TTFT and of TPOT against the unfitted runtime; else say why not."""
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in rows])
    for engine, info in full.items():
        if not info.get("fitted"):
            continue
        worse = []
        for m in sorted({r.model for r in rows if r.engine == engine}):
            idx = [k for k, r in enumerate(rows) if r.engine == engine and r.model == m]
            before = np.median(np.abs(_err(unfitted[idx], meas[idx])), axis=0)
            after = np.median(np.abs(_err(fitted[idx], meas[idx])), axis=0)
            if (after > before).any():
                worse.append(f"{m}: TTFT {100 * before[0]:.0f} -> {100 * after[0]:.0f} %, "
                             f"TPOT {100 * before[1]:.0f} -> {100 * after[1]:.0f} %")
        if worse:
            info["fitted"] = False
            info["reason"] = ("terms fitted on the other models made the held-out model worse ("
                              + "; ".join(worse) + ")")


def write_profiles(full: dict, stamp: str) -> None:
    for engine, info in full.items():
        path = PROFILES / f"{engine}.json"
        prof = json.loads(path.read_text())
        if info.get("fitted"):
            prof["terms"] = info["terms"].model_dump()
            prof["provenance"] = {
                "terms": "fitted by bench/accuracy_e2e.py (serveplan.estimator.runtime_fit) on "
                         "the expressible rows of e2e/aic_silicon_blackwell for this engine, "
                         "validated leave-one-model-out (bench/results/accuracy_e2e.md)",
                "date": stamp, "median_abs_err_before": info["median_abs_err_before"],
                "median_abs_err_after": info["median_abs_err_after"]}
        else:
            prof["terms"] = {}
            prof["provenance"] = {"terms": f"not fitted: {info['reason']}", "date": stamp}
        path.write_text(json.dumps(prof, indent=2) + "\n")
        load_runtime_profile(engine)  # still valid


def _command(args) -> str:
    """The command line that reproduces the report."""
    fit = ("--no-fit" if args.no_fit else f"--fit-rounds {args.fit_rounds} --fit-every "
           f"{args.fit_every}" + (f" --fit-runs {args.fit_runs}" if args.fit_runs else "")
           + (" --write-profiles" if args.write_profiles else ""))
    return ("python bench/accuracy_e2e.py " + fit
            + (f" --jobs {args.jobs}" if args.jobs > 1 else "")
            + (f" --out {args.out}" if args.out != "accuracy_e2e" else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--fit-rounds", type=int, default=4,
                    help="measured rounds per client in the fitting runs (report: 20)")
    ap.add_argument("--fit-every", type=int, default=3,
                    help="fit on every k-th row of the training set (all rows are predicted)")
    ap.add_argument("--fit-runs", type=int, default=None,
                    help="at most this many distinct runs per fit, evenly spaced (default: all)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes for the simulations and the leave-one-model-out "
                         "fits")
    ap.add_argument("--write-profiles", action="store_true")
    ap.add_argument("--no-fit", action="store_true",
                    help="report settings (a) and (b) only: no leave-one-model-out fits "
                         "(they take most of the run's time)")
    ap.add_argument("--out", default="accuracy_e2e",
                    help="report name in bench/results (NAME.md and NAME.json)")
    args = ap.parse_args()
    if args.no_fit and args.write_profiles:
        ap.error("--write-profiles needs the fits: drop --no-fit")
    t0 = time.time()
    rows = load_rows(args.data / "silicon_blackwell.csv")
    reasons = Counter(expressible(r, args.data) or "expressible" for r in rows)
    ok = [r for r in rows if expressible(r, args.data) is None]
    first, which = unique_runs(ok)
    resolved_u = [resolve_row(ok[k], args.data) for k in first]
    resolved = [resolved_u[w] for w in which]
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in ok])
    gpu_only = predict_all(ok, resolved, "gpu", jobs=args.jobs, data=args.data)
    unfitted = predict_all(ok, resolved, RuntimeTerms(), jobs=args.jobs)
    preds = {"gpu_only": gpu_only, "engine_unfitted": unfitted}
    folds, full = [], {}
    if not args.no_fit:
        fitted, folds, full = lomo(ok, resolved, args.fit_rounds, args.fit_every,
                                   args.fit_runs, args.jobs)
        held_out_check(ok, unfitted, fitted, full)
        preds["engine_fitted_lomo"] = fitted
    stamp = time.strftime("%Y-%m-%d")
    if args.write_profiles:
        write_profiles(full, stamp)
    report = {
        "command": _command(args),
        "date": stamp, "seconds": round(time.time() - t0, 1),
        "coverage": {"expressible": len(ok), "rows": len(rows), "reasons": dict(reasons)},
        "groups": group_table(ok, preds), "osl_slopes": osl_slopes(ok, preds),
        "best_tp": best_tp(ok, preds), "folds": folds,
        "profiles": {e: {k: (v.model_dump() if isinstance(v, RuntimeTerms) else v)
                         for k, v in info.items()} for e, info in full.items()},
        "overall": {name: {"ttft_med_abs": float(np.nanmedian(np.abs(_err(p, meas)[:, 0]))),
                           "tpot_med_abs": float(np.nanmedian(np.abs(_err(p, meas)[:, 1])))}
                    for name, p in preds.items()},
    }
    out = HERE / "results" / f"{args.out}.json"
    out.write_text(json.dumps(report, indent=1, default=float) + "\n")
    from accuracy_e2e_report import write_markdown

    write_markdown(report, HERE / "results" / f"{args.out}.md")
    print(f"wrote {out} ({report['seconds']} s)")


if __name__ == "__main__":
    main()
