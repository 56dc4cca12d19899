"""The end-to-end report's rows file (``bench/results/accuracy_e2e_rows.csv``): every
expressible row's identity, measured means and each setting's predicted means, written by
``bench/accuracy_e2e.py`` and read back by its ``--reuse`` and ``--report-only``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

ROW_FIELDS = ("id", "engine", "model", "system", "mode", "isl", "osl", "concurrency", "tp")


def write_rows_csv(path: Path, rows, meas, preds: dict) -> None:
    """Every expressible row: its identity, measured and predicted means (ms, ten significant
    digits, so that a `--report-only` rebuild reproduces the run's figures)."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow([*ROW_FIELDS, "ttft_ms", "tpot_ms",
                      *(f"{name}_{m}" for name in preds for m in ("ttft_ms", "tpot_ms"))])
        for k, r in enumerate(rows):
            out.writerow([getattr(r, f) for f in ROW_FIELDS]
                         + [f"{v:.10g}" for v in meas[k]]
                         + [f"{v:.10g}" for p in preds.values() for v in p[k]])


def read_rows_csv(path: Path, rows, names, optional=()) -> dict:
    """The predictions ``names`` of a previous run's rows file for ``rows`` (``--reuse``),
    which the file must hold in the same order; rows of the file that ``rows`` lacks (since
    found not expressible) are left out, and said so. Those of ``optional`` too, where the
    file has them."""
    with path.open(newline="") as fh:
        table = list(csv.DictReader(fh))
    wanted = {r.id for r in rows}
    kept = [t for t in table if t["id"] in wanted]
    if [t["id"] for t in kept] != [r.id for r in rows]:
        raise SystemExit(f"{path}: not the rows of this data (run without --reuse)")
    if len(kept) < len(table):
        print(f"{path.name}: {len(table) - len(kept)} rows of the previous run are no longer "
              "expressible; left out")
    names = [*names, *(n for n in optional if kept and f"{n}_ttft_ms" in kept[0])]
    return {n: np.array([[float(t[f"{n}_ttft_ms"]), float(t[f"{n}_tpot_ms"])] for t in kept])
            for n in names}
