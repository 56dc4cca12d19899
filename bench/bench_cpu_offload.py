"""What a CPU KV tier buys on a prefix-heavy workload with tight GPU memory. Writes
bench/results/cpu_offload.{json,md}.

``examples/cpu-kv-offload.yaml`` (Llama-3.1-8B on one H100 at gpu_memory_utilization 0.3:
~4,000 GPU KV blocks; 64 shared 4,096-token prefixes, Poisson arrivals) run with the
example's CPU tier (32 GiB, store on evict), with a write-through tier, and without one,
at each of a few arrival rates and seeds; the table gives the median over seeds of each
run's TTFT (median and P90), output throughput and hit rates. Simulated figures, not
wall time: they are deterministic per seed.

    .venv/bin/python bench/bench_cpu_offload.py [--seeds 3 --requests 800 --rates 4 6]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from serveplan.config import SimulationConfig, read_yaml, set_path
from serveplan.simulation import run_config

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
EXAMPLE = ROOT / "examples" / "cpu-kv-offload.yaml"
TIERS = {"none": None, "32 GiB, evict": {"cpu_gb": 32, "store_on": "evict"},
         "32 GiB, compute": {"cpu_gb": 32, "store_on": "compute"}}
FIELDS = ("median_ttft_ms", "p90_ttft_ms", "output_throughput", "prefix_hit_rate",
          "gpu_prefix_hit_rate", "cpu_prefix_hit_rate", "cpu_load_time_s")


def one_run(tier, rate: float, seed: int, requests: int) -> dict:
    data = read_yaml(EXAMPLE)
    data = set_path(data, "deployment.pools.0.kv_offload", tier)
    data = set_path(data, "workload.rate", rate)
    data = set_path(data, "workload.num_requests", requests)
    data = set_path(data, "seed", seed)
    summary = json.loads(run_config(SimulationConfig.model_validate(data)).attrs["summary"])
    summary.setdefault("gpu_prefix_hit_rate", summary["prefix_hit_rate"])  # no tier: all GPU
    return {k: summary.get(k, 0.0) for k in FIELDS}


def measure(rates, seeds: int, requests: int) -> list[dict]:
    rows = []
    for rate in rates:
        for name, tier in TIERS.items():
            runs = [one_run(tier, rate, s, requests) for s in range(seeds)]
            row = {"rate": rate, "tier": name, "seeds": seeds}
            row.update({k: float(np.median([r[k] for r in runs])) for k in FIELDS})
            rows.append(row)
            print(row, flush=True)
    return rows


def write(rows, command: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cpu_offload.json").write_text(json.dumps(rows, indent=2) + "\n")
    head = ("| rate (req/s) | CPU tier | median TTFT (ms) | P90 TTFT (ms) | output tok/s | "
            "hit rate | GPU hits | CPU hits | load time (s) |")
    lines = ["# CPU KV tier on a prefix-heavy workload", "",
             f"`{command}`: `examples/cpu-kv-offload.yaml` (Llama-3.1-8B, one H100, "
             "gpu_memory_utilization 0.3, 64 shared prefixes of 4,096 tokens, 4,196-4,596-token "
             "prompts, 128 output tokens, Poisson). Medians over seeds of simulated figures.",
             "", head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rate']:g} | {r['tier']} | {r['median_ttft_ms']:,.0f} | "
                     f"{r['p90_ttft_ms']:,.0f} | {r['output_throughput']:,.0f} | "
                     f"{r['prefix_hit_rate']:.3f} | {r['gpu_prefix_hit_rate']:.3f} | "
                     f"{r['cpu_prefix_hit_rate']:.3f} | {r['cpu_load_time_s']:.2f} |")
    (RESULTS / "cpu_offload.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--requests", type=int, default=800)
    p.add_argument("--rates", type=float, nargs="+", default=[4.0, 6.0])
    a = p.parse_args(argv)
    rows = measure(a.rates, a.seeds, a.requests)
    rates = " ".join(f"{r:g}" for r in a.rates)
    write(rows, f"python bench/bench_cpu_offload.py --seeds {a.seeds} --requests "
                f"{a.requests} --rates {rates}")


if __name__ == "__main__":
    main()
