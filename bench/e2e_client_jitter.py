"""How much the closed loop's client send jitter moves the end-to-end predictions.

A sample of the Blackwell rows serveplan can express (seeded), each simulated with the
engine runtime (setting (b) of ``accuracy_e2e.py``) and the clients' sends delayed by an
exponential jitter of mean 0 (a deterministic closed loop), 0.3, 1 (the shipped
``CLIENT_SEND_JITTER_S``) and 3 ms. Writes ``bench/results/e2e_client_jitter.md``: per
setting the median |error| of TTFT and TPOT against the measured medians, and the median
|change| of each row's TTFT from the 1 ms prediction.

Usage: ``python bench/e2e_client_jitter.py [--rows 60] [--rounds 3] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from accuracy_e2e import DATA, unique_runs

from serveplan.e2e import expressible, load_rows, resolve_row, simulate_row
from serveplan.sim.clients import CLIENT_SEND_JITTER_S

HERE = Path(__file__).resolve().parent
JITTERS_MS = (0.0, 0.3, 1.0, 3.0)


def sample_rows(n: int, seed: int) -> list:
    rows = load_rows(DATA / "silicon_blackwell.csv")
    ok = [r for r in rows if expressible(r, DATA) is None]
    first, _ = unique_runs(ok)
    pick = np.random.default_rng(seed).choice(len(first), size=min(n, len(first)), replace=False)
    return [ok[first[k]] for k in sorted(pick)]


def predictions(rows, rounds: int) -> np.ndarray:
    """``(len(JITTERS_MS), len(rows), 2)``: predicted TTFT, TPOT (ms)."""
    out = np.empty((len(JITTERS_MS), len(rows), 2))
    for k, row in enumerate(rows):
        resolved = resolve_row(row, DATA)
        for j, ms in enumerate(JITTERS_MS):
            out[j, k] = simulate_row(row, resolved=resolved, measured_rounds=rounds,
                                     send_jitter_s=ms * 1e-3)
    return out


def report(rows, pred, command: str, seconds: float) -> str:
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in rows])
    ref = pred[JITTERS_MS.index(CLIENT_SEND_JITTER_S * 1e3)]
    lines = ["# Client send jitter and the end-to-end predictions", "",
             f"{len(rows)} distinct deployments and loads sampled from the expressible rows; "
             "engine runtime, no runtime terms.", "",
             f"Command: `{command}` ({seconds:.0f} s, single run).", "",
             "| jitter (mean, ms) | TTFT median abs err % | TTFT bias % | TPOT median abs err % "
             "| median abs TTFT change vs 1 ms % |", "|---|---|---|---|---|"]
    for j, ms in enumerate(JITTERS_MS):
        err = pred[j] / meas - 1.0
        change = np.abs(pred[j, :, 0] / ref[:, 0] - 1.0)
        lines.append(f"| {ms:g} | {100 * np.median(np.abs(err[:, 0])):.1f} | "
                     f"{100 * np.median(err[:, 0]):+.1f} | "
                     f"{100 * np.median(np.abs(err[:, 1])):.1f} | {100 * np.median(change):.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=60, help="deployments and loads to sample")
    ap.add_argument("--rounds", type=int, default=3, help="measured closed-loop rounds")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample")
    args = ap.parse_args()
    start = time.perf_counter()
    rows = sample_rows(args.rows, args.seed)
    pred = predictions(rows, args.rounds)
    command = (f"python bench/e2e_client_jitter.py --rows {args.rows} --rounds {args.rounds} "
               f"--seed {args.seed}")
    text = report(rows, pred, command, time.perf_counter() - start)
    out = HERE / "results" / "e2e_client_jitter.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
