"""How far the shipped runtime terms move when the B300 rows run at the catalog's speed.

``bench/accuracy_e2e.py`` simulates every B300 row at the speed the other engine's paired
deployments measure (``accuracy_e2e_gpus``), its held-out check and the shipped fit alike;
a user's B300 runs at the catalog's ``lender_speed`` (all pairs). This probe repeats an
engine's shipped fit (``fit_resimulated`` on each run once, the shipped term set) twice:
on the rows as the report simulated them, which must give the shipped terms, and with the
B300 rows simulated again at the catalog's speed. It reads the last report's rows file and
JSON and writes ``bench/results/e2e_shipped_speed_probe.md``.

Usage: ``python bench/e2e_shipped_speed_probe.py [--engine vllm ...] [--jobs 2]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from accuracy_e2e import (
    DATA,
    HERE,
    fit_resimulated,
    model_shapes,
    predict_all,
    prefill_seconds,
    resolve_all,
    step_overhead_start,
)
from accuracy_e2e_breakdown import distinct_measurements
from accuracy_e2e_gpus import HELD_OUT_GPU
from accuracy_e2e_rowsfile import read_rows_csv

from serveplan.e2e import expressible, load_rows, resolve_row
from serveplan.e2e_fit import E2E_FIT_TERMS, STEP_OVERHEAD_TERM
from serveplan.estimator.runtime import RuntimeTerms


def shipped_fits(engine: str, jobs: int) -> tuple[int, dict, dict, dict]:
    """The engine's B300 rows, and its shipped fit on the report's rows, at the catalog's
    B300 speed, and as shipped."""
    ok = [r for r in load_rows(DATA / "silicon_blackwell.csv") if expressible(r, DATA) is None]
    mine = [k for k, r in enumerate(ok) if r.engine == engine]
    rows = [ok[k] for k in mine]
    report = json.loads((HERE / "results" / "accuracy_e2e.json").read_text())
    shipped = report["profiles"][engine]
    names = [n for n in E2E_FIT_TERMS if n not in shipped["skipped"]]
    unfitted = read_rows_csv(HERE / "results" / "accuracy_e2e_rows.csv", ok,
                             ["engine_unfitted"])["engine_unfitted"][mine]
    idx = [k for k, c in enumerate(distinct_measurements(rows)) if c]
    resolved, prefill_s = resolve_all(rows, DATA)  # the B300 rows at the held-out speed
    layers = model_shapes(resolved)
    start = step_overhead_start(resolved) if STEP_OVERHEAD_TERM in names else None
    as_report, _ = fit_resimulated(idx, rows, resolved, unfitted, layers, prefill_s, names,
                                   start, jobs)
    b300 = [k for k, r in enumerate(rows) if r.id in HELD_OUT_GPU]
    for k in b300:
        resolved[k] = resolve_row(rows[k], DATA)  # the catalog's speed
        prefill_s[k] = prefill_seconds(rows[k], resolved[k])
    unfitted[b300] = predict_all([rows[k] for k in b300], [resolved[k] for k in b300],
                                 RuntimeTerms(), jobs)
    at_catalog, _ = fit_resimulated(idx, rows, resolved, unfitted, layers, prefill_s, names,
                                    start, jobs)
    pick = lambda t: {n: getattr(t, n) for n in names}  # noqa: E731
    return len(b300), pick(as_report), pick(at_catalog), {n: shipped["terms"][n]
                                                          for n in names}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", action="append", choices=("vllm", "sglang"),
                    help="engines with B300 rows (repeatable; default both)")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.time()
    lines = ["# Shipped runtime terms with the B300 rows at the catalog's speed", "",
             f"Command: `python bench/e2e_shipped_speed_probe.py "
             f"{' '.join(argv or sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}). Each "
             "engine's shipped fit, repeated on the report's rows (B300 at the other "
             "engine's pairs' speed) and with its B300 rows at the catalog's "
             "`lender_speed`.", "",
             "| engine | B300 rows | term | report's rows | catalog speed | shipped |",
             "|---|---|---|---|---|---|"]
    for engine in args.engine or ("vllm", "sglang"):
        n, report, catalog, shipped = shipped_fits(engine, args.jobs)
        lines += [f"| {engine} | {n} | {t} | {report[t]:.4g} | {catalog[t]:.4g} | "
                  f"{shipped[t]:.4g} |" for t in report]
    lines += ["", f"{time.time() - t0:.0f} s."]
    out = HERE / "results" / "e2e_shipped_speed_probe.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
