"""Held out, the term set an engine ships: the end-to-end report's folds refitted with it.

``bench/accuracy_e2e.py`` checks its fitting *procedure* leave-one-model-out: each fold
chooses its own term set by an inner check among its training models, or keeps the default
set (all five terms) when it has too few of them for one. SGLang's folds have two training
models each, so all of them fit all five terms -- while the profile SGLang shipped, fitted on
all its models, carried the set its own inner check chose (the front end's latency alone):
its held-out figure was not one of the terms a user got. This check refits every fold of an
engine with the shipped set, simulates each held-out model with its fold's values, and sets
the result beside the report's. (It found SGLang's latency alone worse held out; a profile
whose folds could not choose now ships their set, ``accuracy_e2e._shipped_set``, so by
default the check now finds only engines with a fold that chose otherwise.)

It is weaker than the report's check in one way, and says so: the set was chosen with every
model in view, the held-out one included (among the term-set candidates of
:data:`serveplan.e2e_select.TERM_SETS`); only the values are fitted without it. It reads
the previous full run (``NAME.json`` and ``NAME_rows.csv``: its term-free predictions, its
fold errors) and writes ``NAME_shipped_set.md`` / ``.json``.

Usage: ``python bench/accuracy_e2e_shipped_set.py [--engine sglang] [--jobs 2]``; by
default every engine whose folds fitted a set other than the shipped one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from accuracy_e2e import DATA, RESIM_ROWS, lomo, model_shapes
from accuracy_e2e_breakdown import distinct_measurements, med_abs
from accuracy_e2e_rowsfile import read_rows_csv
from accuracy_e2e_sims import resolve_all

from serveplan.e2e import expressible, load_rows
from serveplan.e2e_fit import E2E_FIT_TERMS, EXPERT_TERM, STEP_OVERHEAD_TERM, measured_means
from serveplan.e2e_select import term_sets
from serveplan.e2e_served import held_out_units

HERE = Path(__file__).resolve().parent
CANDIDATES = term_sets(E2E_FIT_TERMS + (EXPERT_TERM, STEP_OVERHEAD_TERM))
"""Every set a fit may choose, by label (``latency+experts+step`` ...)."""


def engines_to_check(report: dict) -> list[str]:
    """Engines some fold of which fitted another set than the engine's profile ships."""
    return sorted({f["engine"] for f in report["folds"]
                   if f.get("term_set") != report["profiles"][f["engine"]].get("term_set")})


def check_engine(engine, rows, report, unfitted, folds_pred, jobs, data) -> dict:
    """The engine's folds refitted with its shipped set: per held-out unit and over all its
    rows, median |error| of TTFT and TPOT with the folds' own sets and with the shipped."""
    label = report["profiles"][engine]["term_set"]
    idx = [k for k, r in enumerate(rows) if r.engine == engine]
    sub = [rows[k] for k in idx]
    resolved, prefill_s = resolve_all(sub, data)
    units = held_out_units([r.model for r in sub], data)
    pred, folds, _, _ = lomo(sub, resolved, unfitted[idx], model_shapes(resolved), prefill_s,
                             jobs, CANDIDATES[label], RESIM_ROWS, (),
                             [units[r.model] for r in sub], distinct_measurements(sub))
    meas = measured_means(sub)
    own = folds_pred[idx]
    by_unit = {}
    for unit in sorted(set(units.values())):
        at = np.array([units[r.model] == unit for r in sub])
        by_unit[unit] = {"rows": int(at.sum()), "folds_set": _pct(med_abs(own[at], meas[at])),
                         "shipped_set": _pct(med_abs(pred[at], meas[at]))}
    return {"shipped_set": label, "terms": list(CANDIDATES[label]), "rows": len(idx),
            "folds_set": _pct(med_abs(own, meas)), "shipped": _pct(med_abs(pred, meas)),
            "by_held_out": by_unit, "folds": folds, "pred": pred.tolist(), "row_ids": [
                r.id for r in sub]}


def _pct(pair) -> list[float]:
    return [round(100.0 * float(v), 1) for v in pair]


def overall_with(rows, meas, columns: dict[str, np.ndarray], checks: dict) -> list[float]:
    """Median |error| over every row with the checked engines' held-out predictions
    replaced by the shipped set's."""
    pred = columns["engine_fitted_lomo"].copy()
    where = {r.id: k for k, r in enumerate(rows)}
    for check in checks.values():
        for rid, p in zip(check["row_ids"], check["pred"], strict=True):
            pred[where[rid]] = p
    return _pct(med_abs(pred, meas))


def write_markdown(out: dict, path: Path) -> None:
    lines = ["# Held out, the term set each engine ships", "",
             f"Command: `{out['command']}` ({out['date']}, {out['seconds']} s). Reads the "
             f"end-to-end report of {out['report_date']} (`{out['report']}`).", "",
             "Each fold of the engines below refitted with the term set the engine's "
             "profile ships (its values fitted without the held-out model; the set itself "
             "was chosen with every model in view), beside the report's folds, which "
             "choose their own set or keep all five terms when too few models train them. "
             "Median |error| of the mean TTFT / TPOT, %.", "",
             "| engine | held out | rows | folds' own sets | shipped set |",
             "|---|---|---:|---:|---:|"]
    for engine, check in out["engines"].items():
        for unit, u in check["by_held_out"].items():
            lines.append(f"| {engine} | {unit} | {u['rows']} | {_fmt(u['folds_set'])} | "
                         f"{_fmt(u['shipped_set'])} |")
        lines.append(f"| **{engine}** ({check['shipped_set']}: "
                     f"{', '.join(check['terms'])}) | all | {check['rows']} | "
                     f"**{_fmt(check['folds_set'])}** | **{_fmt(check['shipped'])}** |")
    lines += ["", f"Every expressible row ({out['rows']}), the other engines as the report "
              f"has them: {_fmt(out['overall_report'])} with the folds' own sets, "
              f"{_fmt(out['overall_shipped'])} with the shipped sets. The report's figure "
              "stays the headline: it checks the whole procedure, set choice included.", ""]
    path.write_text("\n".join(lines))


def _fmt(pair) -> str:
    return f"{pair[0]:.1f} / {pair[1]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the simulations")
    ap.add_argument("--engine", action="append",
                    help="engine to check (repeatable); default: every engine whose folds "
                         "fitted another set than the shipped one")
    ap.add_argument("--report", default="accuracy_e2e",
                    help="the full run's report name in bench/results")
    args = ap.parse_args()
    t0 = time.time()
    results = HERE / "results"
    report = json.loads((results / f"{args.report}.json").read_text())
    rows = [r for r in load_rows(args.data / "silicon_blackwell.csv")
            if expressible(r, args.data) is None]
    columns = read_rows_csv(results / f"{args.report}_rows.csv", rows,
                            ("engine_unfitted", "engine_fitted_lomo"))
    engines = args.engine or engines_to_check(report)
    unknown = sorted(e for e in set(engines)
                     if not report["profiles"].get(e, {}).get("term_set"))
    if unknown:
        ap.error(f"--engine: no fitted profile for {', '.join(unknown)} in {args.report}.json")
    checks = {e: check_engine(e, rows, report, columns["engine_unfitted"],
                              columns["engine_fitted_lomo"], args.jobs, args.data)
              for e in engines}
    meas = measured_means(rows)
    out = {"command": "python bench/accuracy_e2e_shipped_set.py --jobs "
                      f"{args.jobs}" + "".join(f" --engine {e}" for e in args.engine or ()),
           "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - t0, 1),
           "report": f"bench/results/{args.report}.json", "report_date": report["date"],
           "rows": len(rows), "engines": checks,
           "overall_report": _pct(med_abs(columns["engine_fitted_lomo"], meas)),
           "overall_shipped": overall_with(rows, meas, columns, checks)}
    name = f"{args.report}_shipped_set"
    (results / f"{name}.json").write_text(json.dumps(out, indent=1, default=float) + "\n")
    write_markdown(out, results / f"{name}.md")
    print(f"wrote {results / name}.md ({out['seconds']} s)")


if __name__ == "__main__":
    main()
