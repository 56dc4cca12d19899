"""RL-rollout layout switch (papers/frontier.txt §6.4) at a reduced scale.

Llama-3.1-70B (fp8 weights) on 32 H100s, vLLM v1, a burst of ``--trajectories``
trajectories (prompts lognormal, mean 512; outputs lognormal, mean 600; 5 % heavy, uniform
6,000-12,000 tokens). Layout A: DP16 x TP2 throughout; the switch: A, then DP4 x TP8 once
fewer than 10 % are active, paying the modelled pause (2 s setup + the TP-8 weight shard
over NVLink) with the KV recomputed on B (and, in a second row, transferred). Makespan and
effective decode throughput (output tokens / makespan) per seed, and their medians.
Writes bench/results/rollout_reconfig.{json,md}.

    SERVEPLAN_JIT=compile .venv/bin/python bench/rollout_reconfig.py [--trajectories 1000 --seeds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from serveplan.rollout import run_rollout
from serveplan.rollout_config import RolloutConfig

RESULTS = Path(__file__).resolve().parent / "results"
CONFIG = {
    "model": "llama-3.1-70b", "gpu": "h100", "dtype": "fp8",
    "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192,
               "enable_prefix_caching": False, "max_model_len": 16384},
    "layout_a": {"dp": 16, "tp": 2}, "layout_b": {"dp": 4, "tp": 8},
    "workload": {"prompt": {"dist": "lognormal", "mean": 512, "sigma": 0.5, "max": 2048},
                 "output": {"dist": "lognormal", "mean": 600, "sigma": 0.6, "max": 4096},
                 "heavy_fraction": 0.05,
                 "heavy_output": {"dist": "uniform", "low": 6000, "high": 12000}},
    "reconfig": {"threshold_fraction": 0.1, "setup_s": 2.0},
}


def one(seed: int, n: int, kv: str) -> dict:
    data = json.loads(json.dumps(CONFIG))
    data["seed"], data["workload"]["num_trajectories"] = seed, n
    data["reconfig"]["kv"] = kv
    t0 = time.perf_counter()
    s = run_rollout(RolloutConfig.model_validate(data)).summary()
    base, sw, switch = s["without_switch"], s["with_switch"], s["switch"]
    return {"seed": seed, "kv": kv, "wall_s": time.perf_counter() - t0,
            "makespan_a_s": base["makespan_s"], "makespan_switch_s": sw["makespan_s"],
            "tput_a": base["decode_throughput_tok_s"],
            "tput_switch": sw["decode_throughput_tok_s"], "speedup": s["speedup"],
            "t_switch_s": switch["t_switch_s"], "pause_s": switch["pause"]["total_s"],
            "active_at_switch": switch["active_at_switch"]}


def _table(rows: list[dict]) -> list[str]:
    lines = ["| kv | seed | makespan A (s) | makespan switch (s) | tok/s A | tok/s switch | "
             "speedup | switch at (s) | pause (s) | active at switch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kv']} | {r['seed']} | {r['makespan_a_s']:.1f} | "
                     f"{r['makespan_switch_s']:.1f} | {r['tput_a']:,.0f} | "
                     f"{r['tput_switch']:,.0f} | {r['speedup']:.2f}x | {r['t_switch_s']:.1f} | "
                     f"{r['pause_s']:.2f} | {r['active_at_switch']} |")
    return lines


def medians(rows: list[dict], kv: str) -> dict:
    sel = [r for r in rows if r["kv"] == kv]
    return {k: statistics.median(r[k] for r in sel)
            for k in ("makespan_a_s", "makespan_switch_s", "tput_a", "tput_switch", "speedup")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    rows = [one(seed, args.trajectories, kv) for kv in ("recompute", "transfer")
            for seed in range(args.seeds)]
    med = {kv: medians(rows, kv) for kv in ("recompute", "transfer")}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rollout_reconfig.json").write_text(json.dumps(
        {"config": CONFIG, "trajectories": args.trajectories, "rows": rows, "median": med},
        indent=2))
    lines = _table(rows) + ["", "| kv | median makespan A (s) | median makespan switch (s) | "
                            "median speedup |", "|---|---|---|---|"]
    lines += [f"| {kv} | {m['makespan_a_s']:.1f} | {m['makespan_switch_s']:.1f} | "
              f"{m['speedup']:.2f}x |" for kv, m in med.items()]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
