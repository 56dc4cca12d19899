"""1,024 GPUs, 100,000 requests at iteration level: wall time and peak memory.

Two deployments of Llama-3.1-70B on 1,024 H100:

* PD: 48 prefill + 80 decode instances, all TP8 (384 + 640 GPUs);
* AFD: 48 prefill instances (TP8, 384 GPUs), 96 attention instances (TP4, 384 GPUs) and
  32 FFN instances (TP8, 256 GPUs), two micro-batches.

100,000 Poisson requests (ISL lognormal mean 1,024, OSL lognormal mean 256), vLLM v1
scheduling, KV over the GPUs' links, least-loaded decode router. Each measurement runs in
a fresh process (so peak RSS is the run's own): resolve, draw the requests, run the loop;
the loop's wall time and the process's peak RSS are reported, median of ``--repeats``
(compilation excluded: the numba cache is warmed first).

    python bench/bench_scale.py [--requests 100000 --repeats 3 --rate 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MODEL, GPU = "llama-3.1-70b", "h100"


def deployment(kind: str) -> dict:
    def pool(role, tp, count, **kw):
        return {"role": role, "model": MODEL, "gpu": GPU, "tp": tp, "count": count,
                "max_model_len": 8192, **kw}
    if kind == "pd":
        return {"pools": [pool("prefill", 8, 48, max_num_seqs=32), pool("decode", 8, 80)],
                "decode_router": "least-loaded"}
    return {"pools": [pool("prefill", 8, 48, max_num_seqs=32), pool("attention", 4, 96),
                      pool("ffn", 8, 32)],
            "decode_router": "least-loaded", "micro_batches": 2}


def gpus(dep: dict) -> int:
    return sum(p["tp"] * p["count"] for p in dep["pools"])


def measure(kind: str, n: int, rate: float) -> dict:
    """One run in this process: the loop's seconds, simulated seconds, steps, peak RSS."""
    from serveplan.config import SimulationConfig
    from serveplan.sim.results import summarize, to_dataset
    from serveplan.simulation import build_requests, resolve, run_resolved
    cfg = SimulationConfig.model_validate({
        "deployment": deployment(kind), "seed": 0,
        "workload": {"kind": "poisson", "rate": rate, "num_requests": n,
                     "isl": {"dist": "lognormal", "mean": 1024, "sigma": 0.6, "max": 6144},
                     "osl": {"dist": "lognormal", "mean": 256, "sigma": 0.6, "max": 1536}}})
    resolved = resolve(cfg.deployment)
    requests = build_requests(cfg.workload, cfg.seed, block_size=resolved.block_size)
    t0 = time.perf_counter()
    res = run_resolved(resolved, requests, record_steps=1 << 12)
    wall = time.perf_counter() - t0
    s = summarize(to_dataset(res))
    return {"wall_s": wall, "steps": res.num_steps, "simulated_s": s["duration_s"],
            "completed": s["completed"], "p90_ttft_ms": s["p90_ttft_ms"],
            "p90_tpot_ms": s["p90_tpot_ms"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def fresh_process(kind: str, n: int, rate: float) -> dict:
    env = {**os.environ, "SERVEPLAN_JIT": "compile"}
    out = subprocess.run([sys.executable, __file__, "--one", kind, "--requests", str(n),
                          "--rate", str(rate)], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(rows: dict, command: str, n: int) -> str:
    lines = ["# 1,024 GPUs at iteration level", "", f"Command: `{command}`", "",
             f"Llama-3.1-70B on 1,024 H100, {n:,} Poisson requests, each run in a fresh "
             "process (numba cache warm); medians of the repeats, one core (the loop is "
             "single-threaded) of a shared 2-core machine.", "",
             "| deployment | GPUs | loop wall s (median) | runs | peak RSS MiB | steps | "
             "simulated s | p90 TTFT ms | p90 TPOT ms | target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, runs in rows.items():
        med = statistics.median(r["wall_s"] for r in runs)
        r0 = runs[0]
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
        lines.append(f"| {kind} | {gpus(deployment(kind))} | {med:.1f} | {walls} | "
                     f"{max(r['peak_rss_mib'] for r in runs):,.0f} | {r0['steps']:,} | "
                     f"{r0['simulated_s']:.0f} | {r0['p90_ttft_ms']:,.0f} | "
                     f"{r0['p90_tpot_ms']:.1f} | <= 30 s, <= 2 GiB |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", choices=("pd", "afd"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.requests, args.rate)))
        return 0
    fresh_process("pd", 200, args.rate)  # compile once, outside the measurements
    fresh_process("afd", 200, args.rate)
    rows = {kind: [fresh_process(kind, args.requests, args.rate)
                   for _ in range(args.repeats)] for kind in ("pd", "afd")}
    command = "python bench/bench_scale.py " + " ".join(sys.argv[1:] if argv is None
                                                        else argv)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps({"command": command, "runs": rows},
                                                   indent=1))
    (RESULTS / "scale.md").write_text(report(rows, command.strip(), args.requests))
    print((RESULTS / "scale.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
