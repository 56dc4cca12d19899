"""Benchmarks of the goodput machinery: one goodput, the strategy search, a 10k-cell sweep.

    .venv/bin/python bench/bench_goodput.py [--repeat 3] [--quick]

Writes ``bench/results/goodput.json`` and ``goodput.md`` (command, median and all runs).
Every timing is taken after a warm-up run (numba caches loaded, oracles built once).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from serveplan.config import SLO, PoissonWorkload
from serveplan.fidelity import PreparedDeployment
from serveplan.goodput import find_goodput
from serveplan.search import SearchSpec, run_search
from serveplan.sweep import SweepSpec, run_sweep

OUT = Path(__file__).resolve().parent / "results"


CPU: list[float] = []  # CPU seconds of the last timed() runs (the machine is shared)


def timed(fn, repeat: int) -> tuple[list[float], object]:
    fn()  # warm-up
    runs, last = [], None
    CPU.clear()
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        last = fn()
        runs.append(time.perf_counter() - t)
        CPU.append(time.process_time() - c)
    return runs, last


def bench_goodput(repeat: int, n: int) -> dict:
    dep = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "num_instances": 1,
           "max_model_len": 4096}
    w = PoissonWorkload(kind="poisson", rate=1.0, num_requests=n, isl=2048, osl=64)
    slo = SLO(ttft_ms=500, tpot_ms=50)

    def run():
        prep = PreparedDeployment(dep, w, seeds=(0, 1, 2))
        return find_goodput(prep, slo, fidelity="iteration", seeds=(0, 1, 2))

    runs, g = timed(run, repeat)
    return {"what": f"goodput, iteration level, 1x llama-3.1-8b/H100, {n} requests x 3 seeds "
            "(sequential), OP2-like 2048/64, P90 TTFT<=500ms TPOT<=50ms",
            "median_s": statistics.median(runs), "runs_s": runs, "cpu_s": list(CPU),
            "median_cpu_s": statistics.median(CPU), "goodput": g.rate,
            "interval": [g.low, g.high], "rates_evaluated": len(g.checks),
            "simulations": sum(c.seeds for c in g.checks)}


def engine_runtime_effect(n: int) -> list[dict]:
    """Goodput of one deployment with the GPU steps alone and with each engine's shipped
    runtime (scheduler, knob defaults, front end, fitted terms): what a search decides
    with and without the serving runtime around the step."""
    base = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "num_instances": 1,
            "max_model_len": 4096}
    w = PoissonWorkload(kind="poisson", rate=1.0, num_requests=n, isl=2048, osl=64)
    slo = SLO(ttft_ms=300, tpot_ms=50)
    out = []
    for engine in (None, "vllm", "sglang", "trtllm"):
        dep = {**base, **({"engine": engine} if engine else {})}
        g = find_goodput(PreparedDeployment(dep, w, seeds=(0, 1, 2)), slo,
                         fidelity="iteration", seeds=(0, 1, 2))
        out.append({"engine": engine or "none (GPU steps only)", "goodput": g.rate,
                    "interval": [g.low, g.high], "binding": g.binding})
    return out


def bench_search(repeat: int, archs) -> dict:
    spec = SearchSpec(model="llama-3.1-70b", gpu="h100", gpus=16, isl=2048, osl=256,
                      slo=SLO(ttft_ms=1500, tpot_ms=70), tp=(1, 2, 4, 8),
                      architectures=archs, fidelity="iteration")
    runs, ds = timed(lambda: run_search(spec), repeat)
    st = ds["status"].values
    return {"what": f"search, llama-3.1-70b on 16x H100, {'+'.join(archs)}, TP 1/2/4/8, "
            "iteration-level decisions (2000 requests, up to 2 seeds, rtol 5%)",
            "median_s": statistics.median(runs), "runs_s": runs, "cpu_s": list(CPU),
            "median_cpu_s": statistics.median(CPU), "strategies": int(st.size), "decided": int((st == "decided").sum()),
            "best": str(ds["name"].values[0])}


def sweep_spec(fidelity: str) -> SweepSpec:
    return SweepSpec(
        base={"deployment": {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1,
                             "num_instances": 1, "max_model_len": 4096},
              "workload": {"kind": "poisson", "rate": 4, "num_requests": 200, "isl": 1024,
                           "osl": 64},
              "slo": {"ttft_ms": 300, "tpot_ms": 30}},
        grid={"deployment.num_instances": [1, 2, 4, 8],
              "workload.rate": [float(r) for r in range(1, 26)],
              "seed": list(range(100))},
        fidelity=fidelity)


def bench_sweep(workers: int | None, fidelity: str) -> dict:
    spec = sweep_spec(fidelity)
    cells = 1
    for k in spec.shape:
        cells *= k
    client = None
    if workers:
        from dask.distributed import Client, LocalCluster

        client = Client(LocalCluster(n_workers=workers, threads_per_worker=1,
                                     processes=True, dashboard_address=None))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_sweep(sweep_spec(fidelity).model_copy(update={"grid": {"seed": [0]}}),
                      Path(tmp) / "warm.nc", client=client)  # warm-up
            t = time.perf_counter()
            run_sweep(spec, Path(tmp) / "s.nc", client=client)
            dt = time.perf_counter() - t
    finally:
        if client is not None:
            client.cluster.close()
            client.close()
    return {"what": f"{cells}-cell sweep at {fidelity} level (200 requests per cell), "
            f"{'serial' if not workers else f'Dask LocalCluster {workers} worker(s)'}",
            "cells": cells, "seconds": dt, "cells_per_s": cells / dt}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="Smaller goodput run, no sweep.")
    ap.add_argument("--no-sweep", action="store_true",
                    help="Keep the sweep figures of the last results file.")
    a = ap.parse_args()
    res = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "load_avg_at_start": os.getloadavg()}}
    res["goodput_iteration"] = bench_goodput(a.repeat, 2000 if a.quick else 10_000)
    res["search_iteration"] = bench_search(a.repeat, ("colocated", "pd"))
    res["engine_runtime"] = engine_runtime_effect(2000 if a.quick else 10_000)
    if a.no_sweep and (OUT / "goodput.json").exists():
        res["sweep"] = json.loads((OUT / "goodput.json").read_text()).get("sweep", [])
    elif not a.quick:
        res["sweep"] = [bench_sweep(None, "analytic"), bench_sweep(None, "request"),
                        bench_sweep(1, "request"), bench_sweep(2, "request")]
    OUT.mkdir(exist_ok=True)
    (OUT / "goodput.json").write_text(json.dumps(res, indent=2))
    lines = ["# Goodput benchmarks", "", f"Command: `{res['command']}` "
             f"(2 shared cores; load average at start {res['machine']['load_avg_at_start']})",
             "", "| benchmark | median wall | median CPU | runs (wall / CPU) |",
             "|---|---|---|---|"]
    for key in ("goodput_iteration", "search_iteration"):
        r = res[key]
        lines.append(f"| {r['what']} | {r['median_s']:.2f} s | {r['median_cpu_s']:.2f} s | "
                     + ", ".join(f"{x:.2f}/{y:.2f}" for x, y in zip(r["runs_s"], r["cpu_s"],
                                                                     strict=True)) + " |")
    for r in res.get("sweep", []):
        lines.append(f"| {r['what']} | {r['cells_per_s']:,.0f} cells/s | | "
                     f"{r['seconds']:.1f} s wall for {r['cells']} cells |")
    lines += ["", "Goodput (req/s) of 1x llama-3.1-8b/H100, 2048/64 Poisson, 10,000 requests x "
              "3 seeds, P90 TTFT <= 300 ms and TPOT <= 50 ms, iteration level, with the GPU "
              "steps alone and with each engine's shipped runtime:", "",
              "| engine | goodput | interval | binding goal |", "|---|---|---|---|"]
    for r in res["engine_runtime"]:
        lo, hi = r["interval"]
        lines.append(f"| {r['engine']} | {r['goodput']:.2f} | [{lo:.2f}, {hi:.2f}] | "
                     f"{r['binding']} |")
    (OUT / "goodput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
