"""Which loss should the runtime terms be fitted with: soft L1 or Cauchy, held out?

The fits minimise a robust loss of the log ratios predicted / measured
(:mod:`serveplan.estimator.runtime_fit`). Soft L1 pulls at a constant rate however far off
a row is, so the rows the runtime does not explain -- SGLang's DeepSeek fp4 runs of
2025-11-10 at 5-12 s of TTFT where the same layouts measured 0.2-2.6 s in 2026, DeepSeek-V3
on B300 at 2-5x B200's TTFT -- set the terms other models get. Cauchy's loss pulls less the
further off a row is. This probe fits each engine's shipped term set with each loss
leave-one-model-out, to first order (``serveplan.e2e_fit``'s slopes around each row's
unfitted prediction, no simulation), at the shipped scale (0.1) and at two wider ones, and
writes ``bench/results/e2e_loss_probe.md``. The report (``bench/accuracy_e2e.py``) fits
with the Cauchy loss at 0.1; its simulated figures are the ones that count.
Usage: ``python bench/e2e_loss_probe.py [--data DIR]``
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import numpy as np
from accuracy_e2e import DATA
from e2e_prefill_width_probe import FIRST_ORDER_CAVEAT, ROWS, held_out, probe_inputs, table

import serveplan.estimator.runtime_fit as runtime_fit
from serveplan.e2e_fit import RowShape, measured_means

OUT = Path(__file__).resolve().parent / "results" / "e2e_loss_probe.md"


def cauchy(pred: np.ndarray, measured: np.ndarray, scale: float) -> float:
    """Cauchy loss of the log ratios at ``scale`` (the shipped loss at 0.1)."""
    r = np.log(np.maximum(pred, 1e-3 * measured) / measured).ravel() / scale
    return float(np.sum(np.log1p(r * r)))


LOSSES = {"soft L1, 0.1 (before)": runtime_fit.soft_l1_loss,
          "Cauchy, 0.1 (shipped)": runtime_fit.robust_loss,
          "Cauchy, 0.2": partial(cauchy, scale=0.2),
          "Cauchy, 0.3": partial(cauchy, scale=0.3)}


def held_out_with(loss, inp: dict) -> np.ndarray:
    """The rows' first-order held-out predictions with the fits' loss set to ``loss``
    (soft L1 alone when it is soft L1: the Cauchy step starts from its minimum)."""
    shapes = [RowShape(m.num_layers, m.expert_layers) for m in inp["models"]]
    shipped = runtime_fit.robust_loss
    runtime_fit.robust_loss = loss
    try:
        return held_out(inp["rows"], inp["unfitted"], shapes, inp["prefill_s"], inp["unit"],
                        inp["counted"])
    finally:
        runtime_fit.robust_loss = shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    inp = probe_inputs(args.data)
    rows = inp["rows"]
    preds = {name: held_out_with(loss, inp) for name, loss in LOSSES.items()}
    OUT.write_text("\n".join([
        "# The fits' loss: soft L1 or Cauchy (first order, held out)", "",
        f"Command: `python bench/e2e_loss_probe.py`; rows: `{ROWS.name}`'s unfitted "
        f"predictions ({len(rows):,} rows). {FIRST_ORDER_CAVEAT}", "",
        *table(rows, inp["unit"], measured_means(rows), preds), ""]))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
