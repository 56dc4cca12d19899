"""Time of one SIBYL routing decision: projected loads of 256 decode instances with 100
active decodes and 4 pending prefills each, then the argmin. Writes
bench/results/sibyl_decision.{json,md}.

    .venv/bin/python bench/bench_sibyl.py [--instances 256 --active 100 --pending 4]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from serveplan.kernels.sibyl import argmin_load, projected_loads, survival_tables

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--instances", type=int, default=256)
    ap.add_argument("--active", type=int, default=100)
    ap.add_argument("--pending", type=int, default=4)
    ap.add_argument("--decisions", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, cap = args.instances, max(args.active, args.pending) + 16
    surv = np.sort(rng.uniform(0, 1, 64))[::-1]
    tab, inv = survival_tables(surv)
    act_count = np.full(n, args.active, dtype=np.int64)
    pend_count = np.full(n, args.pending, dtype=np.int64)
    act_lin = rng.integers(10, 2000, (n, cap)).astype(float)
    act_len = rng.integers(0, 8000, (n, cap)).astype(float)
    act_rate = rng.uniform(20, 60, (n, cap))
    pend_lin = rng.integers(10, 2000, (n, cap)).astype(float)
    pend_start = rng.uniform(0, 2, (n, cap))
    eligible = np.ones(n, dtype=np.bool_)
    out = np.empty(n)

    def decide(tau):
        projected_loads(0.0, tau, 35.0, tab, inv, 128.0, act_count, act_lin, act_len,
                        act_rate, pend_count, pend_lin, pend_start, 0, out)
        return argmin_load(out, eligible)

    decide(0.5)
    times = []
    for k in range(args.decisions):
        t = time.perf_counter()
        decide(0.2 + (k % 10) * 0.1)
        times.append(time.perf_counter() - t)
    res = {
        "command": "python bench/bench_sibyl.py",
        "instances": n, "active_per_instance": args.active,
        "pending_per_instance": args.pending,
        "median_us": float(np.median(times) * 1e6),
        "p99_us": float(np.percentile(times, 99) * 1e6),
        "target_us": 50.0, "paper_ms": 5.07,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sibyl_decision.json").write_text(json.dumps(res, indent=2) + "\n")
    md = (f"# SIBYL routing decision\n\nCommand: `{res['command']}` ({args.decisions} decisions)."
          f"\n\n| instances × active (+pending) | median | p99 | target | paper |\n"
          f"|---|---|---|---|---|\n| {n} × {args.active} (+{args.pending}) | "
          f"{res['median_us']:.1f} µs | {res['p99_us']:.1f} µs | ≤ 50 µs | 5.07 ms |\n")
    (RESULTS / "sibyl_decision.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
