"""B300 against B200's borrowed profile: the step speed the paired deployments measure.

Every colocated deployment of ``e2e/aic_silicon_blackwell`` measured on a B200 node and on a
B300 node (same engine release, model, precision, layout, lengths and clients;
:func:`serveplan.e2e_gpu_speed.speed_pairs`) is simulated on both GPUs with the GPU steps
alone, the B300 on B200's profile as borrowed (no ``lender_speed``). Each pair's measured
B300 / B200 ratio against the predicted one gives its prefill (TTFT) and decode (TPOT)
speed (:func:`~serveplan.e2e_gpu_speed.pair_speeds`); their medians are the catalog's
``lender_speed`` of ``b300``. Also written: the speeds each engine's rows are held out
with (the other engines' pairs only), and each model's.

Writes ``bench/results/gpu_lender_speed.md`` and ``.json``.
Usage: ``python bench/gpu_lender_speed.py [--data DIR] [--jobs 2]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from accuracy_e2e import DATA
from accuracy_e2e_sims import fork_map

from serveplan.e2e import expressible, load_rows, simulate_row
from serveplan.e2e_gpu_speed import (
    gpu_yaml,
    lender_speed,
    measured,
    pair_speeds,
    speed_pairs,
    speed_without_engine,
)

HERE = Path(__file__).resolve().parent
BORROWER = "b300"
_SHARED: dict = {}


def _simulate(task):
    row, gpu = task
    return simulate_row(row, _SHARED["data"], engine=False, gpu=gpu)


def predict_pairs(pairs, data: Path, jobs: int) -> np.ndarray:
    """``(n, 2, 2)``: each pair's (lender, borrower) GPU-steps-alone (TTFT, TPOT), ms; the
    borrower on the lender's profile as is."""
    with tempfile.TemporaryDirectory() as tmp:
        as_lender = str(gpu_yaml(BORROWER, None, Path(tmp)))
        tasks = [t for p in pairs for t in ((p.lender[0], None), (p.borrower[0], as_lender))]
        _SHARED["data"] = data
        runs = fork_map(_simulate, tasks, jobs)
    return np.array(runs, dtype=float).reshape(len(pairs), 2, 2)


def _by(pairs, speeds, label) -> list[tuple[str, int, float, float]]:
    groups: dict[str, list[int]] = {}
    for k, p in enumerate(pairs):
        groups.setdefault(label(p), []).append(k)
    return [(g, len(ix), *np.median(speeds[ix], axis=0)) for g, ix in sorted(groups.items())]


def report(pairs, pred, meas, speeds, command: str, seconds: float) -> tuple[str, dict]:
    shipped = lender_speed(speeds)
    engines = sorted({p.engine for p in pairs})
    held = {e: speed_without_engine(pairs, speeds, e) for e in engines}
    models = sorted({p.model for p in pairs})
    without_model = {m: lender_speed(speeds[[p.model != m for p in pairs]]) for m in models}
    ratio_m = meas[:, 1] / meas[:, 0]
    ratio_p = pred[:, 1] / pred[:, 0]
    lines = [
        "# B300 against B200's borrowed profile: paired deployments",
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}, {seconds:.0f} s). "
        f"{len(pairs)} colocated deployments and loads measured on a B200 node and on a "
        "B300 node (same engine release, model, precision, layout, lengths and clients), "
        "each side simulated with the GPU steps alone, the B300 on B200's profile as "
        "borrowed. Speed = (predicted B300 / B200) / (measured B300 / B200), prefill from "
        "TTFT, decode from TPOT (`serveplan.e2e_gpu_speed`).",
        "",
        f"Measured B300 / B200, median: TTFT {np.median(ratio_m[:, 0]):.3f}, TPOT "
        f"{np.median(ratio_m[:, 1]):.3f}. Predicted on the borrowed profile: TTFT "
        f"{np.median(ratio_p[:, 0]):.3f}, TPOT {np.median(ratio_p[:, 1]):.3f}.",
        "",
        f"**Catalog `lender_speed` of b300 (all pairs): prefill {shipped['prefill']}, decode "
        f"{shipped['decode']}.**",
        "",
        "| pairs | n | prefill speed | decode speed |",
        "|---|---|---|---|",
    ]
    for title, label in (("engine", lambda p: p.engine), ("model", lambda p: p.model),
                         ("prompt tokens", lambda p: str(p.lender[0].isl)),
                         ("clients", lambda p: "<= 8" if p.lender[0].concurrency <= 8
                          else "> 8")):
        for g, n, sp, sd in _by(pairs, speeds, label):
            lines.append(f"| {title} {g} | {n} | {sp:.3f} | {sd:.3f} |")
    lines += ["", "Held out: an engine's rows on B300 are predicted with the speed of the "
              "other engines' pairs (`bench/accuracy_e2e.py`); without each model's pairs "
              "the speed would be:", "",
              "| without | prefill | decode |", "|---|---|---|"]
    lines += [f"| engine {e} | {s['prefill']} | {s['decode']} |" for e, s in held.items()
              if s is not None]
    lines += [f"| model {m} | {s['prefill']} | {s['decode']} |"
              for m, s in without_model.items()]
    data = {"command": command, "pairs": len(pairs), "lender_speed": shipped,
            "without_engine": held, "without_model": without_model,
            "pairs_detail": [{"lender": p.lender[0].id, "borrower": p.borrower[0].id,
                              "predicted_ms": pred[k].tolist(), "measured_ms": meas[k].tolist(),
                              "speed": speeds[k].tolist()} for k, p in enumerate(pairs)]}
    return "\n".join(lines) + "\n", data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = [r for r in load_rows(args.data / "silicon_blackwell.csv")
            if expressible(r, args.data) is None]
    pairs = speed_pairs(rows)
    if not pairs:
        print("no deployment was measured on both B200 and B300", file=sys.stderr)
        return 1
    pred = predict_pairs(pairs, args.data, args.jobs)
    meas = np.array([[measured(p.lender), measured(p.borrower)] for p in pairs])
    speeds = pair_speeds(pred, meas)
    command = "python bench/gpu_lender_speed.py " + " ".join(argv or sys.argv[1:])
    text, data = report(pairs, pred, meas, speeds, command.strip(), time.time() - t0)
    out = HERE / "results" / "gpu_lender_speed"
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
