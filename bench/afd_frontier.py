"""Colocated vs prefill/decode vs attention/FFN disaggregation on H800 (Frontier §6.1).

Scenario ``llama70b`` (the paper's §6.1 setting): Llama-3.3-70B batch inference on a
256-GPU H800 budget. Scenario ``moe`` (a Step-3-like MoE at reduced scale): Qwen3-235B-A22B
on 64 H800, AFD with a tensor-parallel FFN (tp 8) and an expert-parallel one (ep 8), as
the paper's §5 AFD-TP / AFD-EP layouts. For each architecture a small grid
of layouts (GPU split between roles, tensor parallelism, batching limit ``max_num_seqs``)
runs a closed loop at a fraction of its decode slots (aiperf-style concurrency = ``load`` x
decode instances x ``max_num_seqs``, ``--loads``, Frontier's "load level"; the first round
of requests is warm-up, then ``--rounds`` - 1 rounds are measured). Each run gives
output throughput and p95 TTFT / TPOT; a layout meets the SLA when p95 TTFT is within the
TTFT bound (3,000 ms or 500 ms) and p95 TPOT within 20 ms (50 tokens/s per user, the
generation-speed target of the paper's Figure 13). The report lists every run and the best
layout per architecture and SLA, next to the paper's.

    python bench/afd_frontier.py [--scenario llama70b|moe]   # writes bench/results/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("SERVEPLAN_JIT", "compile")

import numpy as np  # noqa: E402

from serveplan.config import SimulationConfig  # noqa: E402
from serveplan.sim.clients import client_outcome  # noqa: E402
from serveplan.simulation import run_config  # noqa: E402

OUT = Path(__file__).parent / "results"
GPU = "h800"
SCENARIOS = {"llama70b": ("llama-3.3-70b", 256), "moe": ("qwen3-235b-a22b", 64)}
MODEL, BUDGET = SCENARIOS["llama70b"]
ISL, OSL, MAX_LEN = 2048, 256, 4096
TPOT_MS = 20.0
TPOT_RELAXED_MS = (30.0, 50.0)  # reported too: the frontier at looser generation speeds
TTFT_MS = (3000.0, 500.0)
PAPER = {3000.0: {"colocated": "27.7K", "pd": "137.4K (P:D 112:144)",
                  "afd": "116.2K (P:A:F 120:80:56)"},
         500.0: {"colocated": "--", "pd": "100.7K (P:D 144:112)",
                 "afd": "116.2K (P:A:F 120:80:56)"}}
SEQS = (16, 32, 64, 128)
LOADS = (0.25, 0.5, 1.0)
ROUNDS = 4
DECODE_ROUTER = "least-loaded"  # --decode-router; SIBYL's ILS: it herds (docs/loop.md)


def _pool(role, tp, count, **kw):
    return {"role": role, "model": MODEL, "gpu": GPU, "tp": tp, "count": count,
            "max_model_len": MAX_LEN, **kw}


def layouts():
    """``(architecture, label, deployment, decode slots)`` of the grid (BUDGET GPUs each)."""
    return _layouts_dense() if BUDGET == 256 else _layouts_moe()


def _layouts_moe():
    out = []
    for seqs in SEQS:
        out.append(("colocated", f"8x tp8 ep8 seqs{seqs}",
                    {"pools": [_pool("colocated", 8, 8, ep=8, max_num_seqs=seqs)]}, 8 * seqs))
        for p_n in (2, 3):
            out.append(("pd", f"P:D {8 * p_n}:{64 - 8 * p_n} (tp8 ep8) seqs{seqs}",
                        {"pools": [_pool("prefill", 8, p_n, ep=8, max_num_seqs=16),
                                   _pool("decode", 8, 8 - p_n, ep=8, max_num_seqs=seqs)],
                         "decode_router": DECODE_ROUTER}, (8 - p_n) * seqs))
        for ffn, ep in (("TP", 1), ("EP", 8)):
            out.append(("afd", f"AFD-{ffn} P:A:F 16:32:16 seqs{seqs}",
                        {"pools": [_pool("prefill", 8, 2, ep=8, max_num_seqs=16),
                                   _pool("attention", 4, 8, max_num_seqs=seqs),
                                   _pool("ffn", 8, 2, ep=ep)],
                         "decode_router": DECODE_ROUTER, "micro_batches": 2}, 8 * seqs))
    return out


def _layouts_dense():
    out = []
    for tp in (4, 8):
        for seqs in SEQS:
            n = BUDGET // tp
            out.append(("colocated", f"{n}x tp{tp} seqs{seqs}",
                        {"pools": [_pool("colocated", tp, n, max_num_seqs=seqs)]}, n * seqs))
    for p_gpus in (64, 112, 144):
        for seqs in SEQS:
            n_p, n_d = p_gpus // 4, (BUDGET - p_gpus) // 4
            out.append(("pd", f"P:D {p_gpus}:{BUDGET - p_gpus} seqs{seqs}",
                        {"pools": [_pool("prefill", 4, n_p, max_num_seqs=16),
                                   _pool("decode", 4, n_d, max_num_seqs=seqs)],
                         "decode_router": DECODE_ROUTER}, n_d * seqs))
    for p_gpus, a_gpus in ((120, 80), (96, 96), (64, 112)):
        f_gpus = BUDGET - p_gpus - a_gpus
        for seqs in SEQS:
            n_p, n_a, n_f = p_gpus // 4, a_gpus // 4, f_gpus // 8
            out.append(("afd", f"P:A:F {p_gpus}:{a_gpus}:{f_gpus} seqs{seqs}",
                        {"pools": [_pool("prefill", 4, n_p, max_num_seqs=16),
                                   _pool("attention", 4, n_a, max_num_seqs=seqs),
                                   _pool("ffn", 8, n_f)],
                         "decode_router": DECODE_ROUTER, "micro_batches": 2}, n_a * seqs))
    return out


def run_one(deployment, concurrency, seed, rounds=ROUNDS):
    n = max(rounds * concurrency, 2000)
    cfg = SimulationConfig.model_validate({
        "deployment": deployment, "seed": seed,
        "workload": {"kind": "closed-loop", "concurrency": concurrency, "num_requests": n,
                     "warmup_request_count": concurrency,
                     "isl": {"dist": "fixed", "value": ISL},
                     "osl": {"dist": "fixed", "value": OSL}}})
    t0 = time.perf_counter()
    ds = run_config(cfg)
    s = json.loads(ds.attrs["summary"])
    done = client_outcome(ds).completed  # the warm-up round left out, as in the summary
    return {"output_tok_s": s["output_throughput"], "p95_ttft_ms": _p95_ms(ds, "ttft_s", done),
            "p95_tpot_ms": _p95_ms(ds, "tpot_s", done), "completed": s["completed"],
            "wall_s": time.perf_counter() - t0}


def _p95_ms(ds, var, done) -> float:
    """P95 of a per-request variable over the measured requests (the summary reports P50,
    P90 and P99 only)."""
    x = ds[var].values[done]
    x = x[np.isfinite(x)]
    return float(np.percentile(x, 95) * 1e3) if x.size else float("nan")


def best(rows, arch, ttft, tpot=TPOT_MS):
    ok = [r for r in rows if r["architecture"] == arch and r["p95_ttft_ms"] <= ttft
          and r["p95_tpot_ms"] <= tpot]
    return max(ok, key=lambda r: r["output_tok_s"], default=None)


def report(rows, command) -> str:
    lines = [f"# Colocated vs PD vs AFD: {MODEL} on {BUDGET} H800", "",
             f"Command: `{command}`", "",
             f"{MODEL}, {BUDGET} H800, closed loop at a fraction of the decode slots (the "
             f"`concurrency` column), ISL {ISL} / "
             f"OSL {OSL} (fixed), first round of requests discarded, decode router "
             f"`{DECODE_ROUTER}`. SLA: p95 TTFT within the "
             f"bound and p95 TPOT <= {TPOT_MS:g} ms. Throughput = output tokens/s.", "",
             "## Best layout per architecture", "",
             "| TTFT bound | TPOT bound | architecture | best layout @ concurrency | output "
             "tok/s | p95 TTFT ms | p95 TPOT ms | paper (Fig. 13, TPOT 20 ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for tpot in (TPOT_MS, *TPOT_RELAXED_MS):
        for ttft in TTFT_MS:
            for arch in ("colocated", "pd", "afd"):
                b = best(rows, arch, ttft, tpot)
                cells = ([f"{b['layout']} @ {b['concurrency']}", f"{b['output_tok_s']:,.0f}",
                          f"{b['p95_ttft_ms']:,.0f}", f"{b['p95_tpot_ms']:.1f}"] if b
                         else ["none meets the SLA", "", "", ""])
                paper = PAPER[ttft][arch] if BUDGET == 256 and tpot == TPOT_MS else "--"
                lines.append(f"| {ttft:g} ms | {tpot:g} ms | {arch} | " + " | ".join(cells)
                             + f" | {paper} |")
    lines += ["", "## Every run", "", "| architecture | layout | concurrency | output tok/s | "
              "p95 TTFT ms | p95 TPOT ms | sim wall s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['architecture']} | {r['layout']} | {r['concurrency']} | "
                     f"{r['output_tok_s']:,.0f} | {r['p95_ttft_ms']:,.0f} | "
                     f"{r['p95_tpot_ms']:.1f} | {r['wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    global MODEL, BUDGET, DECODE_ROUTER
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", choices=tuple(SCENARIOS), default="llama70b")
    ap.add_argument("--only", choices=("colocated", "pd", "afd"), nargs="*")
    ap.add_argument("--loads", type=float, nargs="*", default=list(LOADS),
                    help="concurrency as fractions of the decode slots")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help="requests per client (the first round is warm-up)")
    ap.add_argument("--decode-router", default=DECODE_ROUTER,
                    help="decode (attention) pool router of the PD and AFD layouts; another "
                         "than the default writes afd_frontier_<router>.md beside the report")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the .md from the stored .json, running nothing")
    args = ap.parse_args(argv)
    MODEL, BUDGET = SCENARIOS[args.scenario]
    name = "afd_frontier" if args.scenario == "llama70b" else f"afd_{args.scenario}"
    if args.decode_router != DECODE_ROUTER:
        name, DECODE_ROUTER = f"{name}_{args.decode_router}", args.decode_router
    if args.report_only:
        stored = json.loads((OUT / f"{name}.json").read_text())
        (OUT / f"{name}.md").write_text(report(stored["runs"], stored["command"].strip()))
        return 0
    rows = []
    for arch, label, dep, slots in layouts():
        if args.only and arch not in args.only:
            continue
        for load in args.loads:
            conc = max(1, round(load * slots))
            r = {"architecture": arch, "layout": label, "concurrency": conc,
                 **run_one(dep, conc, args.seed, args.rounds)}
            print(json.dumps(r), flush=True)
            rows.append(r)
    command = "python bench/afd_frontier.py " + " ".join(argv if argv is not None
                                                         else sys.argv[1:])
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({"command": command, "runs": rows},
                                                 indent=1))
    (OUT / f"{name}.md").write_text(report(rows, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
