"""Would a per-system or per-version scale on the fitted runtime terms carry to unseen models?

The shipped runtime terms are one set per engine. On the B300 rows the measured time
outside the GPU steps looks smaller than on B200 (``accuracy_e2e_notes.md``), and engine
versions differ; either could be a factor on the terms, per system generation or per
version. This probe checks that to first order from the end-to-end rows file alone: a
row's fitted terms add ``(c) - (b)`` to its TTFT (held out minus unfitted); for each engine
and group of rows (the B300 / GB300 rows, the others left alone; or each engine version
as recorded) it
scales that share by a factor fitted (the fits' loss, :func:`robust_loss`, on TTFT) to the
group's rows of the engine's *other* held-out units, and applies it to the held-out unit's
rows of the group -- leave-one-model-out, as the terms themselves are checked. A group
with fewer than :data:`MIN_ROWS` such rows keeps the factor 1. The in-sample row (every
unit's rows in its own factor) is the most such a factor could do, not a validation.

First order: the share is taken to move linearly with the factor (the simulator responds
to the terms about 1.1x their first-order slopes, ``serveplan.e2e_fit``), and TPOT is left
as it is. It fits nothing that ships. Writes ``bench/results/e2e_group_scale_probe.md``.
Usage: ``python bench/e2e_group_scale_probe.py [--data DIR] [--rows FILE]``
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

from serveplan.e2e import load_rows
from serveplan.e2e_served import held_out_units
from serveplan.estimator.runtime_fit import robust_loss

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "e2e" / "aic_silicon_blackwell"
ROWS = HERE / "results" / "accuracy_e2e_rows.csv"
OUT = HERE / "results" / "e2e_group_scale_probe.md"
MIN_ROWS = 10  # fewer rows of other units in a group: no factor (1)
BLACKWELL_ULTRA = ("b300_sxm", "gb300")
GROUPINGS = {
    "B300 / GB300 rows":
        lambda row, rec: "b300" if rec["system"] in BLACKWELL_ULTRA else None,
    "engine version as recorded": lambda row, rec: row.version or "(not recorded)",
}


def _factor(meas, unfitted, fitted) -> float:
    """The factor on ``fitted - unfitted`` (TTFT, ms) that best fits ``meas``."""
    share = fitted - unfitted

    def loss(f):
        return robust_loss(unfitted + f * share, meas)

    return float(minimize_scalar(loss, bounds=(0.0, 3.0), method="bounded").x)


def scaled(recs, unit, group, in_sample=False) -> tuple[np.ndarray, dict]:
    """Every row's TTFT with its (engine, group)'s factor fitted on the other units' rows
    (or on all, ``in_sample``), and the factors by (engine, group, unit)."""
    meas, unf, fit = (np.array([float(r[k]) for r in recs]) for k in
                      ("ttft_ms", "engine_unfitted_ttft_ms", "engine_fitted_lomo_ttft_ms"))
    cells = defaultdict(list)
    for k, r in enumerate(recs):
        cells[(r["engine"], group[k])].append(k)
    out, factors = fit.copy(), {}
    for (engine, grp), idx in cells.items():
        if grp is None:  # a row the grouping leaves alone
            continue
        for u in sorted({unit[k] for k in idx}):
            train = [k for k in idx if in_sample or unit[k] != u]
            f = _factor(meas[train], unf[train], fit[train]) if len(train) >= MIN_ROWS else 1.0
            factors[(engine, grp, u)] = f
            test = [k for k in idx if unit[k] == u]
            out[test] = unf[test] + f * (fit[test] - unf[test])
    return out, factors


def _med_abs(pred, meas) -> float:
    return float(100 * np.median(np.abs(pred / meas - 1.0)))


def _table(recs, rows, unit, groups) -> list[str]:
    """The error table over ``recs`` (the rows file's records; ``rows``: their measured
    rows) for each grouping in ``groups``, and the held-out factors."""
    meas = np.array([float(r["ttft_ms"]) for r in recs])
    base = np.array([float(r["engine_fitted_lomo_ttft_ms"]) for r in recs])
    engines = sorted({r["engine"] for r in recs})
    cols = ["all", *engines]
    sel = {"all": np.ones(len(recs), bool),
           **{e: np.array([r["engine"] == e for r in recs]) for e in engines}}
    lines = ["| grouping | setting | " + " | ".join(f"{c} ({sel[c].sum()})" for c in cols)
             + " |", "|---|---|" + "---|" * len(cols)]
    lines.append("| -- | (c) held out, as fitted | "
                 + " | ".join(f"{_med_abs(base[sel[c]], meas[sel[c]]):.1f}" for c in cols) + " |")
    notes = []
    for name, rule in groups.items():
        group = [rule(row, r) for row, r in zip(rows, recs, strict=True)]
        for setting, in_sample in (("factor held out", False), ("factor in sample", True)):
            pred, factors = scaled(recs, unit, group, in_sample)
            lines.append(f"| {name} | {setting} | " + " | ".join(
                f"{_med_abs(pred[sel[c]], meas[sel[c]]):.1f}" for c in cols) + " |")
            if not in_sample:
                notes += [f"- {name}, {e} / {g}, {u} held out: {f:.2f}"
                          for (e, g, u), f in sorted(factors.items()) if f != 1.0]
    return lines + ["", "Held-out factors (1 where the other units have too few rows):", "",
                    *notes]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--rows", type=Path, default=ROWS, help="the end-to-end rows file")
    args = ap.parse_args()
    by_id = {r.id: r for r in load_rows(args.data / "silicon_blackwell.csv")}
    with args.rows.open() as fh:
        recs = list(csv.DictReader(fh))
    units = held_out_units([r["model"] for r in recs], args.data)
    table = _table(recs, [by_id[r["id"]] for r in recs], [units[r["model"]] for r in recs],
                   GROUPINGS)
    OUT.write_text("\n".join([
        "# Per-group scales on the fitted runtime terms, to first order", "",
        "Median abs TTFT error (%) over the expressible rows (row counts in the header): the "
        "held-out predictions (c) of `bench/results/accuracy_e2e_rows.csv`, then with the "
        "fitted terms' share of each row's TTFT scaled per engine and group "
        "(`bench/e2e_group_scale_probe.py`, first order; nothing here ships). Command: "
        "`python bench/e2e_group_scale_probe.py`.", "", *table, ""]))
    print(OUT.read_text())


if __name__ == "__main__":
    main()
