"""One loop against its predecessor: the same two runs timed on two package trees.

    .venv/bin/python bench/bench_loop.py --before /path/to/old/package --rounds 3

Times the 10,000-request colocated run of ``bench_sim.py`` (``run_engine``, Llama-3.1-8B /
H100, ShareGPT lengths at 80 % load) and the 64P + 256D / 100,000-request run of
``bench_pd.py`` (``run_pd``, SIBYL router) in child processes, alternating between the
current tree and ``--before`` (a directory holding an importable ``serveplan`` package of
an earlier commit, e.g. a ``git worktree`` laid out as the installed package) round by
round, so both see the same machine load. Each child warms up (compiles or loads its
numba cache) first. Writes ``bench/results/loop.{json,md}``: medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"

CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
import numpy as np
from bench_sim import _setup, _requests, capacity, LOAD
from serveplan.estimator.oracle import CostOracle
from serveplan.sim.engine import EngineParams, run_engine
from serveplan.sim.pd import KVLink, PoolSpec, run_pd
from serveplan.sim.workload import LogNormal, PoissonArrivals, generate_requests
resolved, trace = _setup()
req = _requests(trace, 10_000, LOAD * capacity(resolved, trace, 10_000))
run_engine(req, resolved.oracle, resolved.params)
colo = []
for _ in range({repeats}):
    t = time.perf_counter(); run_engine(req, resolved.oracle, resolved.params)
    colo.append(time.perf_counter() - t)
oracle = CostOracle("llama-3.1-8b", "h100")
params = EngineParams(num_gpu_blocks=30000, max_model_len=8192)
pre, dec = PoolSpec(params, oracle, 64), PoolSpec(params, oracle, 256)
link = KVLink.from_specs(oracle, oracle, 64, 256)
gen = lambda n, s: generate_requests(n, PoissonArrivals(1500.0), LogNormal.from_mean(512, 0.8, 4096),
                                     LogNormal.from_mean(256, 0.8, 2048), seed=s)
run_pd(gen(200, 1), pre, dec, link=link, router="sibyl", record_steps=1024)
big = gen(100_000, 0)
t = time.perf_counter()
res = run_pd(big, pre, dec, link=link, router="sibyl", record_steps=1 << 14)
pd_s = time.perf_counter() - t
print(json.dumps({{"colocated_s": float(np.median(colo)), "pd_s": pd_s,
                   "pd_steps": int(res.num_steps)}}))
"""


def _child(tree: str | None, repeats: int) -> dict:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree
    code = CHILD.format(bench=str(BENCH), repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd="/" if tree else None)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="directory with the earlier serveplan")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5, help="colocated runs per child")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for k in range(args.rounds):
        for label, tree in (("before", args.before), ("after", None)):
            t = time.perf_counter()
            runs[label].append(_child(tree, args.repeats))
            print(f"round {k + 1} {label}: {runs[label][-1]} ({time.perf_counter() - t:.0f} s)",
                  flush=True)
    med = {label: {key: float(np.median([r[key] for r in rs])) for key in rs[0]}
           for label, rs in runs.items()}
    cmd = "python bench/bench_loop.py " + " ".join(sys.argv[1:])
    out = {"command": cmd, "rounds": args.rounds, "repeats": args.repeats, "median": med,
           "runs": runs, "load_average": os.getloadavg()[0]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "loop.json").write_text(json.dumps(out, indent=2) + "\n")
    b, a = med["before"], med["after"]
    md = [f"# One loop vs two loops: simulator speed\n\n`{cmd}` (before = the two-loop "
          f"simulator of commit 3d67e85). Medians over {args.rounds} alternating rounds on a "
          "shared 2-core machine; each colocated figure is itself a median of "
          f"{args.repeats} runs.\n",
          "| run | before | after | after / before |", "|---|---|---|---|",
          f"| colocated, 10,000 ShareGPT requests, 1 x H100 (`run_engine`) | "
          f"{b['colocated_s']:.3f} s | {a['colocated_s']:.3f} s | "
          f"{a['colocated_s'] / b['colocated_s']:.2f} |",
          f"| PD 64P + 256D, 100,000 requests, SIBYL (`run_pd`, {int(a['pd_steps']):,} steps) | "
          f"{b['pd_s']:.2f} s | {a['pd_s']:.2f} s | {a['pd_s'] / b['pd_s']:.2f} |"]
    (RESULTS / "loop.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
