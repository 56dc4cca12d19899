"""TPOT under speculative decoding: the loop against the analytic expectation.

Llama-3.1-8B on one H100 (cost oracle, vLLM v1), a closed loop of ``c`` clients with
512-token prompts and 256-token outputs, speculation by ``ngram`` (free drafts) and
``eagle`` (a one-layer head priced by the oracle), ``k`` in {1, 2, 3, 5} and one
acceptance rate ``a`` for every position in {0.5, 0.7, 0.9}. Writes
``bench/results/specdec.{json,md}``.

The analytic TPOT of a steady batch of ``b`` decoding requests at context ``ctx``:

    E[tokens/step] = 1 + sum_{i=1..k} a^i
    t_step        = verify(b requests x (k + 1) tokens, ctx) + draft(b, k)
    TPOT          = t_step / E[tokens/step]

with ``verify`` and ``draft`` priced by the same oracle rows the loop uses (the drafter:
one pass over the step's tokens, then ``k - 1`` passes of one token per request), at
``ctx = prompt + output / 2`` and ``b = c``. Without speculation ``TPOT = decode(b, ctx)``.

    .venv/bin/python bench/bench_specdec.py [--requests 64 --clients 1 16]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from serveplan.kernels import roofline as K
from serveplan.kernels.roofline import P_STEP_OVERHEAD
from serveplan.resolution import resolve
from serveplan.sim.summary import summarize
from serveplan.simulation import simulate

RESULTS = Path(__file__).resolve().parent / "results"
ISL, OSL = 512, 256
BASE = {"model": "llama-3.1-8b", "gpu": "h100", "max_num_seqs": 64, "max_model_len": 4096,
        "enable_prefix_caching": False}


def _step(oracle, q, ctx, q_decode):
    """Seconds of one step of requests with ``q`` tokens at contexts ``ctx``."""
    q = np.asarray(q, dtype=np.int64)
    ctx = np.asarray(ctx, dtype=np.int64)
    agg, comp, comm = oracle.scratch()
    ops, mods, prm, gs = oracle.kernel_args
    return K.step_time_q(q, ctx, q.shape[0], ops, mods, prm, gs, agg, comp, comm,
                         float(q_decode))


def analytic_tpot(dep: dict, b: int) -> float:
    """The module docstring's TPOT for deployment ``dep`` at ``b`` decoding requests."""
    pool = resolve(dep).pool_specs()[0]
    ctx = ISL + OSL // 2
    sd = pool.speculative
    if sd is None:
        return float(pool.cost.decode_time(b, ctx))
    k = sd.num_speculative_tokens
    t = _step(pool.cost, np.full(b, k + 1), np.full(b, ctx - 1), k + 1)
    d = sd.draft_cost
    if d is not None:
        over = d.prm[P_STEP_OVERHEAD]
        t += _step(d, np.full(b, k + 1), np.full(b, ctx - 1), k + 1) - over
        t += sum(_step(d, np.ones(b), np.full(b, ctx + p), 1) - over for p in range(1, k))
    return t / sd.acceptance_length()


def loop_tpot(dep: dict, clients: int, n: int, seed: int = 0) -> tuple[float, float, float]:
    """Median TPOT, tokens per verify and wall seconds of one closed-loop run."""
    wl = {"kind": "closed-loop", "concurrency": clients, "num_requests": n, "isl": ISL,
          "osl": OSL}
    t0 = time.perf_counter()
    s = summarize(simulate({"pools": [{"role": "colocated", **dep}]}, wl, seed))
    wall = time.perf_counter() - t0
    return s["median_tpot_ms"] / 1e3, s.get("spec_tokens_per_verify", 1.0), wall


def cases():
    yield "off", 0, 0.0
    for method in ("ngram", "eagle"):
        for k in (1, 2, 3, 5):
            for a in (0.5, 0.7, 0.9):
                yield method, k, a


def run(requests: int, clients_list) -> list[dict]:
    rows = []
    for clients in clients_list:
        for method, k, a in cases():
            dep = dict(BASE)
            if method != "off":
                dep["speculative"] = {"method": method, "num_speculative_tokens": k,
                                      "acceptance": a}
            tpot, per_verify, wall = loop_tpot(dep, clients, requests)
            expect = analytic_tpot({"pools": [{"role": "colocated", **dep}]}, clients)
            rows.append({"clients": clients, "method": method, "k": k, "acceptance": a,
                         "loop_tpot_ms": tpot * 1e3, "analytic_tpot_ms": expect * 1e3,
                         "ratio": tpot / expect, "tokens_per_verify": per_verify,
                         "wall_s": wall})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def write(rows: list[dict], argv: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "specdec.json").write_text(json.dumps(rows, indent=1))
    lines = [f"# Speculative decoding: TPOT, loop vs analytic\n\n`{argv}`\n",
             "| clients | method | k | a | loop TPOT ms | analytic ms | loop/analytic | "
             "tokens/verify |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['clients']} | {r['method']} | {r['k']} | {r['acceptance']:.1f} | "
                     f"{r['loop_tpot_ms']:.3f} | {r['analytic_tpot_ms']:.3f} | "
                     f"{r['ratio']:.3f} | {r['tokens_per_verify']:.3f} |")
    lines += ["", NOTES]
    (RESULTS / "specdec.md").write_text("\n".join(lines) + "\n")


NOTES = """Analytic: ``verify(b x (k+1) tokens) + draft`` over ``1 + sum a^i`` tokens per step, at
``b = clients`` and the mid-output context (module docstring). Where the loop differs:

* one client: the loop's TPOT is 0-3 % above the formula, more for larger expected bursts:
  a request's last verify step costs a whole step but emits only the tokens it has left
  (a partial burst), and the context grows through the output;
* 16 clients: 6-23 % above. The closed loop keeps prefills coming: each request's life
  spans ~16 other requests' 512-token prefills, whose mixed steps (prefill phase, no CUDA
  graph, the verify tokens of 15 decodes beside the chunk) cost more than a verify step.
  Speculation shortens the decode phase but not the prefills, so their share grows: for
  ngram k = 5, a = 0.9 the steps carrying prefill tokens take 34 % of the busy time (9 %
  without speculation) and the mean pure-decode batch is 14.9, not 16;
* padding: a verify batch of 16 x (k + 1) tokens pads to vLLM's capture size (a multiple
  of k + 1, e.g. 96 for k = 5); the formula pads the same way, so it cancels here.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    rows = run(args.requests, args.clients)
    write(rows, "bench/bench_specdec.py --requests "
          f"{args.requests} --clients {' '.join(map(str, args.clients))}")


if __name__ == "__main__":
    main()
