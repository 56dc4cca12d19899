"""Speed of ``serveplan compare`` and ``calibrate --runs`` on runs of a realistic size.

Runs are serveplan simulations written in vLLM's format (llama-3.1-8b on one H100, vLLM
0.11, Poisson arrivals, prompts 256-2048 and outputs 32-256 tokens), generated with known
runtime terms: the deployment's own, with the terms ``calibrate --runs`` fits by default
(:data:`~serveplan.estimator.runtime_fit.FIT_TERMS`) set to :data:`TRUTH`, so the report
can say whether the fit recovers them. The figures are wall seconds, median of
``--rounds`` rounds, warm numba cache. Writes ``bench/results/compare.{json,md}``.

    python bench/bench_compare.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

from serveplan.e2e import with_terms
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.estimator.runtime_fit import FIT_TERMS
from serveplan.resolution import resolve
from serveplan.run_calibrate import RunCase, calibrate_runs
from serveplan.run_compare import as_bench_run, compare_run, replay
from serveplan.runs import read_run
from serveplan.runs.model import Load, run_from_arrays
from serveplan.runs.vllm import write_vllm

RESULTS = Path(__file__).resolve().parent / "results"
POOL = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100", "engine": "vllm",
        "engine_version": "0.11.0"}
TRUTH = {"frontend_output_s": 0.02, "frontend_prompt_token_s": 5e-6,
         "frontend_output_per_token_s": 2e-4}
"""The fitted terms' values in the generated runs (the others are the deployment's)."""


def true_terms(resolved) -> RuntimeTerms:
    base = next(p.instance.runtime.terms for p in resolved.pools if p.instance.runtime)
    return base.model_copy(update=TRUTH)


def make_run(resolved, n: int, rate: float, folder: Path) -> Path:
    rng = np.random.default_rng(int(rate))
    load = Load("rate", request_rate=rate)
    template = run_from_arrays(input_len=rng.integers(256, 2048, n),
                               output_len=rng.integers(32, 256, n), ttft_s=np.zeros(n),
                               e2e_s=np.zeros(n), load=load)
    ds = replay(template, with_terms(resolved, true_terms(resolved)), 0)
    path = folder / f"rate{rate:g}-n{n}.json"
    write_vllm(as_bench_run(ds, load, model="llama-3.1-8b"), path)
    return path


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    resolved = resolve({"pools": [POOL]})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in (1000, 5000):
            path = make_run(resolved, n, 10.0, folder)
            rows.append({"what": f"read + compare, {n:,} requests",
                         "seconds": [timed(lambda p=path: compare_run(read_run(p), resolved))
                                     for _ in range(args.rounds)]})
        paths = [make_run(resolved, 500, rate, folder) for rate in (5.0, 10.0, 15.0)]
        cases = [RunCase(read_run(p), resolved) for p in paths]
        out = folder / "terms.json"
        rows.append({"what": "calibrate --runs: 3 runs of 500 requests, fit + leave-one-out",
                     "seconds": [timed(lambda: calibrate_runs(cases, out))
                                 for _ in range(args.rounds)]})
        fitted = json.loads(out.read_text())["terms"]
    for row in rows:
        row["median_s"] = statistics.median(row["seconds"])
    truth = true_terms(resolved).model_dump()
    report = {"command": f"python bench/bench_compare.py --rounds {args.rounds}",
              "date": date.today().isoformat(), "rows": rows,
              "terms_true": {k: truth[k] for k in FIT_TERMS},
              "terms_fitted": {k: fitted[k] for k in FIT_TERMS}}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "compare.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# compare and calibrate --runs: speed", "",
             f"`{report['command']}` ({report['date']}; shared 2-core machine, warm numba "
             "cache). Median of the rounds.", "", "| what | median s | rounds s |",
             "|---|---|---|"]
    lines += [f"| {r['what']} | {r['median_s']:.2f} | "
              f"{', '.join(f'{s:.2f}' for s in r['seconds'])} |" for r in rows]
    lines += ["", "The terms calibrate --runs fits, as they generated the runs -> as fitted "
              "(seconds; the others are the deployment's in both):", ""]
    lines += [f"- {k}: {truth[k]:g} -> {fitted[k]:.4g}" for k in FIT_TERMS]
    (RESULTS / "compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
