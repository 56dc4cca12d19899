"""Event-simulator speed and memory. Writes bench/results/sim.{json,md}.

    .venv/bin/python bench/bench_sim.py [--repeats 7] [--big 1000000]

* Speed: 10,000 ShareGPT-like requests (lengths resampled from Vidur's ShareGPT trace) with
  Poisson arrivals at ~80% of capacity, on one Llama-3.1-8B / H100 instance with vLLM v1
  defaults (chunked prefill, 8192-token budget, prefix caching, KV blocks from the memory
  planner). Capacity is measured first: the throughput of the same requests all arriving
  at t = 0. The figure is the median wall time of ``run_engine`` after a warm-up run (JIT
  compile or cache load), and separately of the whole ``serveplan.simulate`` path
  (drawing the requests, the run and building the Dataset).
* Memory: peak RSS of a fresh process simulating ``--big`` requests (same lengths, same
  load), against the same process after imports and warm-up; steps are recorded into a
  fixed-capacity decimated buffer, so memory grows with requests, not steps.
* Compile: first run in a fresh process with an empty numba cache (cold) and with the
  package's cache (warm: measured in a second fresh process, after one that rebuilt the
  cache if a source had changed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SHAREGPT = (Path(__file__).resolve().parents[2] / "shared" / "data" / "vidur"
            / "processed_traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
MAX_MODEL_LEN = 8192
LOAD = 0.8


def _setup():
    from serveplan.sim.traces import read_vidur
    from serveplan.simulation import resolve_deployment

    resolved = resolve_deployment({"model": "llama-3.1-8b", "gpu": "h100",
                                   "max_model_len": MAX_MODEL_LEN})
    trace = read_vidur(SHAREGPT)
    return resolved, trace


def _requests(trace, n, rate, seed=0):
    from serveplan.sim import workload as W

    return W.generate_requests(n, W.PoissonArrivals(rate), trace.prompt_dist(),
                               trace.output_dist(), seed=seed)


def capacity(resolved, trace, n=10_000) -> float:
    """Requests/s when all ``n`` requests arrive at once (saturated engine)."""
    from serveplan.sim.engine import run_engine

    req = _requests(trace, n, 1.0)
    burst = req.with_arrivals(np.zeros(n))
    res = run_engine(burst, resolved.oracle, resolved.params)
    return n / float(np.nanmax(res.reqs.t_finish))


BIG_CODE = """
import os, resource, sys, time, json
sys.path.insert(0, {bench!r})
import bench_sim as B
from serveplan.sim.engine import run_engine

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

resolved, trace = B._setup()
small = B._requests(trace, 1000, {rate})
run_engine(small, resolved.oracle, resolved.params)
base = rss_kib()
req = B._requests(trace, {n}, {rate})
with_requests = rss_kib()
t = time.perf_counter()
res = run_engine(req, resolved.oracle, resolved.params)
wall = time.perf_counter() - t
print(json.dumps(dict(base_kib=base, requests_kib=with_requests, after_kib=rss_kib(),
                      peak_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      wall_s=wall, steps=res.num_steps, recorded=int(res.rec.meta[0]),
                      stride=int(res.rec.meta[1]))))
"""

COLD_CODE = """
import time, sys
sys.path.insert(0, {bench!r})
import bench_sim as B
from serveplan.sim.engine import run_engine
resolved, trace = B._setup()
req = B._requests(trace, 200, 5.0)
t = time.perf_counter()
run_engine(req, resolved.oracle, resolved.params)
print(time.perf_counter() - t)
"""


def _run_code(code: str, env_extra: dict | None = None) -> str:
    # compiled code throughout: a cold cache compiles here instead of running as Python
    env = {**os.environ, "SERVEPLAN_JIT": "compile", **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    args = ap.parse_args()

    import serveplan
    from serveplan.sim.engine import run_engine

    bench_dir = str(Path(__file__).resolve().parent)
    results: dict = {"command": "python bench/bench_sim.py", "repeats": args.repeats,
                     "machine": f"{platform.machine()} {os.cpu_count()} cpu(s)",
                     "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as cold:
        results["first_run_cold_cache_s"] = float(_run_code(
            COLD_CODE.format(bench=bench_dir), {"NUMBA_CACHE_DIR": cold}))
    # the first run rebuilds the package cache if any source changed since it was written
    _run_code(COLD_CODE.format(bench=bench_dir))
    results["first_run_warm_cache_s"] = float(_run_code(COLD_CODE.format(bench=bench_dir)))

    results.update(_timings(args, serveplan, run_engine))
    if args.big:
        big = json.loads(_run_code(BIG_CODE.format(bench=bench_dir, n=args.big,
                                                   rate=results["rate_req_s"])))
        big["requests"] = args.big
        results["big"] = big
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sim.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "sim.md").write_text(_markdown(results))
    print(_markdown(results))


def _timings(args, serveplan, run_engine) -> dict:
    """``run_engine`` and ``serveplan.simulate`` on the 80 %-load ShareGPT workload."""
    resolved, trace = _setup()
    cap = capacity(resolved, trace, args.n)
    rate = LOAD * cap
    req = _requests(trace, args.n, rate)
    run_engine(req, resolved.oracle, resolved.params)  # warm-up
    walls, cpus, res = [], [], None
    for _ in range(args.repeats):
        t, c = time.perf_counter(), time.process_time()
        res = run_engine(req, resolved.oracle, resolved.params)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    deployment = {"model": "llama-3.1-8b", "gpu": "h100", "max_model_len": MAX_MODEL_LEN}
    workload = {"kind": "trace", "path": str(SHAREGPT), "arrival": "poisson", "rate": rate,
                "num_requests": args.n}
    serveplan.simulate(deployment, workload)
    full = []
    for _ in range(max(3, args.repeats // 2)):
        t = time.perf_counter()
        ds = serveplan.simulate(deployment, workload)
        full.append(time.perf_counter() - t)
    summary = json.loads(ds.attrs["summary"])
    return {
        "requests": args.n,
        "capacity_req_s": cap,
        "rate_req_s": rate,
        "engine_steps": res.num_steps,
        "num_gpu_blocks": resolved.params.num_gpu_blocks + 1,
        "run_engine_median_s": float(np.median(walls)),
        "run_engine_runs_s": walls,
        "run_engine_cpu_median_s": float(np.median(cpus)),
        "load_average": os.getloadavg()[0],
        "us_per_step": float(np.median(walls)) / res.num_steps * 1e6,
        "simulate_median_s": float(np.median(full)),
        "summary": {k: summary[k] for k in ("request_throughput", "output_throughput",
                                            "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                                            "p99_tpot_ms", "mean_batch_size", "mean_kv_usage",
                                            "num_preemptions")},
    }


def _markdown(r: dict) -> str:
    s = r["summary"]
    lines = [
        "# Event simulator speed",
        "",
        f"Command: `{r['command']}` (median of {r['repeats']} runs after a warm-up run; "
        f"{r['machine']}, Python {r['python']}; load average {r['load_average']:.1f} when "
        f"the timing ended -- the machine is shared, so wall time can exceed CPU time).",
        "",
        f"Workload: {r['requests']:,} ShareGPT-like requests (Vidur's ShareGPT lengths "
        f"resampled), Poisson arrivals at {r['rate_req_s']:.2f} req/s = 80% of the measured "
        f"capacity {r['capacity_req_s']:.2f} req/s; one Llama-3.1-8B / H100 instance, vLLM v1 "
        f"defaults (chunked prefill, 8192-token budget, prefix caching), "
        f"{r['num_gpu_blocks']:,} KV blocks from the memory planner, max_model_len "
        f"{MAX_MODEL_LEN}.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| `run_engine`, {r['requests']:,} requests ({r['engine_steps']:,} engine steps), "
        f"wall | {r['run_engine_median_s'] * 1e3:.0f} ms | <= 1 s |",
        f"| same, CPU time of the process | {r['run_engine_cpu_median_s'] * 1e3:.0f} ms | |",
        f"| per engine step (wall) | {r['us_per_step']:.2f} µs | |",
        f"| `serveplan.simulate` (requests + run + Dataset) | "
        f"{r['simulate_median_s'] * 1e3:.0f} ms | |",
        f"| first run, cold numba cache (compile) | {r['first_run_cold_cache_s']:.1f} s | |",
        f"| first run, warm cache | {r['first_run_warm_cache_s']:.2f} s | |",
    ]
    if "big" in r:
        b = r["big"]
        per = (b["peak_kib"] - b["base_kib"]) * 1024 / b["requests"]
        lines += [
            f"| {b['requests']:,} requests: wall ({b['steps']:,} steps) | {b['wall_s']:.1f} s | |",
            f"| {b['requests']:,} requests: peak RSS | {b['peak_kib'] / 1024:.0f} MiB | bounded |",
            f"| &nbsp;&nbsp;RSS after imports and warm-up / with the requests drawn / after "
            f"the run | {b['base_kib'] / 1024:.0f} / {b['requests_kib'] / 1024:.0f} / "
            f"{b['after_kib'] / 1024:.0f} MiB | |",
            f"| &nbsp;&nbsp;peak minus warm-up, per request (workload + state arrays) | "
            f"{per:.0f} B | |",
            f"| step records kept (decimated) | {b['recorded']:,} (every {b['stride']}-th) | |",
        ]
    lines += [
        "",
        f"Simulated: {s['request_throughput']:.2f} req/s, {s['output_throughput']:.0f} output "
        f"tok/s; TTFT median {s['median_ttft_ms']:.0f} ms, P99 {s['p99_ttft_ms']:.0f} ms; "
        f"TPOT median {s['median_tpot_ms']:.1f} ms, P99 {s['p99_tpot_ms']:.1f} ms; mean batch "
        f"{s['mean_batch_size']:.1f}, mean KV usage {s['mean_kv_usage']:.2f}, "
        f"{s['num_preemptions']} preemptions.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
