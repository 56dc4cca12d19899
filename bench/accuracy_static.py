"""TensorRT-LLM's 2023 performance tables as a batch-level check (validation only).

``ground_truth/tensorrt_llm_perf_overview`` (its SOURCE.md) holds two older tables:
static-batch peak throughputs (``gptSessionBenchmark``: one context phase for the whole
batch, then its generation steps; TensorRT-LLM v0.5-0.6) and first-token latencies at batch 1.
Each is priced as the Argonne runs are (``accuracy.batch_latency``: one prefill step of the
batch, then ``osl - 1`` decode steps) with the GPU's TensorRT-LLM profile; a first token is
one prefill step. Assumed, where the docs are silent: LLaMA 7B / 13B / 70B are Llama-2's,
FP8 runs keep weights and the KV cache in FP8 (the FP8 builds of those tables), FP16 ones in
FP16. GPT-J and Falcon are not in the catalog.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

MODELS = {"LLaMA 7B": "meta-llama/Llama-2-7b-hf", "llama_13b": "meta-llama/Llama-2-13b-hf",
          "LLaMA 70B": "meta-llama/Llama-2-70b-hf", "llama_70b": "meta-llama/Llama-2-70b-hf"}
GPUS = {"H100": "h100", "H200": "h200", "A100": "a100-80gb", "L40S": "l40s"}
STATIC = "trtllm_v0.6_static_batch_max_throughput.csv"
FIRST_TOKEN = "trtllm_v0.5_batch1_first_token_latency.csv"


def _oracle(model: str, gpu: str, tp: int, precision: str, cache: dict):
    from serveplan.estimator.oracle import CostOracle
    from serveplan.estimator.profile import load_profile

    key = (model, gpu, tp, precision)
    if key not in cache:
        dtype = "fp8" if precision == "FP8" else "fp16"
        cache[key] = CostOracle(model, gpu, tp=tp, dtype=dtype, kv_dtype=dtype,
                                profile=load_profile(gpu, "trtllm"))
    return cache[key]


def _static_rows(folder: Path, cache: dict, batch_latency) -> list[dict]:
    rows = []
    with open(folder / STATIC, newline="") as f:
        for r in csv.DictReader(f):
            if r["model"] not in MODELS or r["gpu"] not in GPUS:
                continue
            tp, b, i, o = (int(r[k]) for k in ("tp", "batch_size", "isl", "osl"))
            total = float(r["throughput"]) * (tp if r["throughput_unit"].endswith("per_gpu")
                                              else 1)
            oracle = _oracle(MODELS[r["model"]], GPUS[r["gpu"]], tp, r["precision"], cache)
            predicted = b * o / batch_latency(oracle, b, i, o)
            rows.append({"kind": "static batch", "version": r["trtllm_version"],
                         "gpu": r["gpu"], "model": r["model"], "precision": r["precision"],
                         "tp": tp, "batch": b, "isl": i, "osl": o,
                         "measured": total, "predicted": predicted, "unit": "output tok/s"})
    return rows


def _first_token_rows(folder: Path, cache: dict) -> list[dict]:
    rows = []
    with open(folder / FIRST_TOKEN, newline="") as f:
        for r in csv.DictReader(f):
            if r["model"] not in MODELS or r["gpu"] not in GPUS:
                continue
            tp, i = int(r["tp"]), int(r["isl"])
            oracle = _oracle(MODELS[r["model"]], GPUS[r["gpu"]], tp, r["precision"], cache)
            rows.append({"kind": "first token", "version": r["trtllm_version"],
                         "gpu": r["gpu"], "model": r["model"], "precision": r["precision"],
                         "tp": tp, "batch": 1, "isl": i, "osl": 1,
                         "measured": float(r["first_token_latency_ms"]),
                         "predicted": 1e3 * float(oracle.prefill_time(1, i)), "unit": "ms"})
    return rows


def static_level(folder: Path, batch_latency) -> dict:
    """Every expressible row of both tables, predicted; ``batch_latency`` prices a batch."""
    cache: dict = {}
    rows = _static_rows(folder, cache, batch_latency) + _first_token_rows(folder, cache)
    for r in rows:
        r["rel_err"] = r["predicted"] / r["measured"] - 1.0
    summary = []
    for kind in ("static batch", "first token"):
        for gpu in GPUS:
            for tp in ("1", ">1"):
                errs = np.array([r["rel_err"] for r in rows if r["kind"] == kind
                                 and r["gpu"] == gpu and (r["tp"] == 1) == (tp == "1")])
                if len(errs):
                    summary.append({"kind": kind, "gpu": gpu, "tp": tp, "n": len(errs),
                                    "median": float(np.median(np.abs(errs))),
                                    "median_signed": float(np.median(errs))})
    return {"summary": summary, "rows": rows}


def static_markdown(res: dict) -> list[str]:
    out = ["", "## TensorRT-LLM's 2023 tables: static batches and first tokens (validation "
           "only, not fitted)", "",
           "From `bench/accuracy_static.py` (its docstring has the assumptions): a static batch "
           "is priced as the Argonne runs are, with the GPU's TensorRT-LLM profile; a first "
           "token (batch 1) is one prefill step. Throughput error = predicted / published "
           "output tokens/s - 1 (all the run's GPUs; the H100 and H200 tables print tokens/s "
           "per GPU, the A100 and L40S ones tokens/s, taken as the run's); latency error "
           "likewise.", "",
           "| table | GPU | tp | rows | median abs % | median signed % |",
           "|---|---|---|---|---|---|"]
    out += [f"| {s['kind']} | {s['gpu']} | {s['tp']} | {s['n']} | {100 * s['median']:.1f} | "
            f"{100 * s['median_signed']:+.1f} |" for s in res["summary"]]
    out += ["", "| table | version | GPU | model | precision | tp | batch | isl | osl | "
            "published | predicted | error % |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['kind']} | {r['version']} | {r['gpu']} | {r['model']} | {r['precision']} | "
            f"{r['tp']} | {r['batch']} | {r['isl']} | {r['osl']} | {r['measured']:,.0f} "
            f"{r['unit']} | {r['predicted']:,.0f} | {100 * r['rel_err']:+.1f} |"
            for r in res["rows"]]
    return out
