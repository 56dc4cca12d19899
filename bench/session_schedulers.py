"""Frontier §6.3 at a reduced scale: session-aware schedulers on the agentic trace.

Frontier simulates Llama-3.1-405B-FP8 on 1,024 H800s (prefill/decode disaggregated) and
reports, against vLLM's scheduler: skip-join MLFQ -1.45 % p95 answer-visible TTFT (aTTFT)
and -2.3 % (-2.54 % in Appendix B.2) hidden planning throughput; H2Q-BR -30.4 % p95 aTTFT
and +23.2 % hidden planning throughput. Here: Llama-3.1-8B on H100s, colocated or P/D
(``--arch pd``, optionally with a CPU KV tier on the prefill instances, ``--cpu-gb``, as
Frontier enables KV offloading), the Table 7
templates (4 hidden planning rounds + 1 answer round, Short / Heavy tail), a fixed tool
delay, Poisson session arrivals, several seeds; schedulers ``vllm-v1`` (FCFS),
``skip-join-mlfq`` and ``h2q-br`` with their default knobs (docs/sessions.md). Only the
order of work differs between them; the batch rules are vLLM v1's in all three.

    .venv/bin/python bench/session_schedulers.py [--sessions 300 --rate 1.5 --budget 8192 --seeds 0 1 2 3 4]
    .venv/bin/python bench/session_schedulers.py --arch pd --cpu-gb 64 --rate 4 --out session_schedulers_pd

Writes bench/results/session_schedulers.{json,md} (or ``--out NAME``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("SERVEPLAN_JIT", "compile")  # time the compiled loop, not Python

from serveplan.simulation import simulate  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SCHEDULERS = ("vllm-v1", "skip-join-mlfq", "h2q-br")


def _pool(role: str, count: int, scheduler: str, args) -> dict:
    pool = {"role": role, "model": "llama-3.1-8b", "gpu": "h100", "count": count,
            "scheduler": scheduler, "max_num_batched_tokens": args.budget,
            "max_model_len": 131072}
    if args.cpu_gb and role != "decode":  # the tier sits where the history is reused
        pool["kv_offload"] = {"cpu_gb": args.cpu_gb}
    return pool


def deployment(scheduler: str, args) -> dict:
    """Colocated instances, or Frontier's P/D layout: the session scheduler orders the
    prefill pool's work (it ranks prefills by session history), decode runs vLLM v1's."""
    if args.arch == "colocated":
        return {"pools": [_pool("colocated", args.instances, scheduler, args)]}
    return {"pools": [_pool("prefill", args.prefill, scheduler, args),
                      _pool("decode", args.decode, "vllm-v1", args)],
            "decode_router": "least-requests"}


def layout(args) -> str:
    """The deployment in words, for the report."""
    where = "instance" if args.arch == "colocated" else "prefill instance"
    tier = f", a {args.cpu_gb:g} GiB CPU KV tier per {where}" if args.cpu_gb else ""
    if args.arch == "colocated":
        return f"{args.instances}x H100 colocated{tier}"
    return (f"{args.prefill} prefill + {args.decode} decode H100 (P/D, least-requests "
            f"decode router){tier}")


def one_run(scheduler: str, seed: int, args) -> dict:
    """The figures of one scheduler and seed."""
    workload = {"kind": "sessions", "num_sessions": args.sessions, "rate": args.rate,
                "generator": {"type": "frontier", "heavy_fraction": args.heavy,
                              "tool_delay_s": args.tool_delay}}
    t0 = time.perf_counter()
    ds = simulate(deployment(scheduler, args), workload, seed=seed)
    wall = time.perf_counter() - t0
    s = json.loads(ds.attrs["summary"])
    attft = ds["answer_ttft_s"].values
    first = ds["round"].values == 0
    heavy = np.zeros(ds.sizes["session"], dtype=bool)
    heavy[ds["session_id"].values[first]] = ds["new_prompt_tokens"].values[first] == 32768
    return {"scheduler": scheduler, "seed": seed, "wall_s": wall,
            "p95_attft_s": s["p95_answer_ttft_ms"] / 1e3,
            "p95_attft_short_s": float(np.nanpercentile(attft[~heavy], 95)),
            "p95_attft_heavy_s": float(np.nanpercentile(attft[heavy], 95)) if heavy.any()
            else float("nan"),
            "hidden_tps": s["hidden_planning_throughput"],
            "mean_makespan_s": s["mean_session_makespan_ms"] / 1e3,
            "history_hit_rate": s["followup_history_hit_rate"],
            "heavy_sessions": int(heavy.sum())}


def _median(rows, scheduler, key):
    return float(np.median([r[key] for r in rows if r["scheduler"] == scheduler]))


def report(rows, args, cmd: str) -> str:
    keys = ("p95_attft_s", "p95_attft_short_s", "p95_attft_heavy_s", "hidden_tps",
            "mean_makespan_s")
    base = {k: _median(rows, "vllm-v1", k) for k in keys}
    lines = [
        "# Session-aware schedulers on Frontier's agentic trace (reduced scale)", "",
        f"Command: `{cmd}`", "",
        f"Llama-3.1-8B, {layout(args)} (vLLM v1 batch rules, {args.budget:,}-"
        f"token budget, chunked prefill, prefix caching); {args.sessions} sessions of Frontier "
        f"Table 7 (heavy-tail fraction {args.heavy}), Poisson at {args.rate} sessions/s, "
        f"tool delay {args.tool_delay} s; seeds {', '.join(map(str, args.seeds))}. Medians "
        "over seeds; change vs vllm-v1 in parentheses.", "",
        "| scheduler | p95 aTTFT (s) | p95 aTTFT Short (s) | p95 aTTFT Heavy (s) "
        "| hidden planning (tok/s) | mean makespan (s) |",
        "|---|---|---|---|---|---|"]
    for sch in SCHEDULERS:
        cells = []
        for k in keys:
            v = _median(rows, sch, k)
            rel = "" if sch == "vllm-v1" else f" ({100 * (v / base[k] - 1):+.1f} %)"
            cells.append(f"{v:,.2f}{rel}" if k != "hidden_tps" else f"{v:,.0f}{rel}")
        lines.append(f"| {sch} | " + " | ".join(cells) + " |")
    lines += ["", "Per seed:", "", "| scheduler | seed | p95 aTTFT (s) | hidden (tok/s) "
              "| heavy sessions | history hit rate | wall (s) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scheduler']} | {r['seed']} | {r['p95_attft_s']:.2f} | "
                     f"{r['hidden_tps']:,.0f} | {r['heavy_sessions']} | "
                     f"{r['history_hit_rate']:.3f} | {r['wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=300)
    p.add_argument("--rate", type=float, default=1.5, help="sessions per second")
    p.add_argument("--heavy", type=float, default=0.1, help="heavy-tail fraction")
    p.add_argument("--tool-delay", type=float, default=1.0)
    p.add_argument("--arch", choices=("colocated", "pd"), default="colocated")
    p.add_argument("--instances", type=int, default=2, help="colocated instances")
    p.add_argument("--prefill", type=int, default=2, help="prefill instances (--arch pd)")
    p.add_argument("--decode", type=int, default=2, help="decode instances (--arch pd)")
    p.add_argument("--cpu-gb", type=float, default=0.0,
                   help="GiB of CPU KV tier per instance (0: none)")
    p.add_argument("--budget", type=int, default=8192, help="max_num_batched_tokens")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="session_schedulers")
    args = p.parse_args(argv)
    rows = []
    for seed in args.seeds:
        for sch in SCHEDULERS:
            rows.append(one_run(sch, seed, args))
            print(json.dumps(rows[-1]), flush=True)
    cmd = "python bench/session_schedulers.py " + " ".join(sys.argv[1:] if argv is None else argv)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(
        {"args": vars(args), "runs": rows}, indent=1))
    (RESULTS / f"{args.out}.md").write_text(report(rows, args, cmd.strip()))
    print(report(rows, args, cmd.strip()))


if __name__ == "__main__":
    main()
