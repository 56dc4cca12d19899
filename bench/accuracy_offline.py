"""Offline throughput against TensorRT-LLM's published performance overview (validation only).

    .venv/bin/python bench/accuracy_offline.py [--jobs 2] [--only REGEX]

NVIDIA's TensorRT-LLM docs publish the output throughput of ``trtllm-bench throughput``
(every request queued at once, fixed ISL / OSL, PyTorch backend) on H100, H200, B200 and
GB200 (``ground_truth/tensorrt_llm_perf_overview``, its SOURCE.md). serveplan simulates
each published run with its engine runtime (``engine: trtllm``): the same requests all
sent at once, the limits ``trtllm-bench`` derives for that run
(:mod:`serveplan.trtllm_bench`), its KV memory fraction (0.95), CUDA graphs padded. The
tables were never fitted: they test the GPU step and the TensorRT-LLM scheduler at full
load, on Hopper too, which the end-to-end fits never saw.

Assumptions, where the docs are silent:

* the checkpoints' quantization is ModelOpt's (FP8 per tensor or NVFP4, LM head left out);
  DeepSeek-R1's FP4 takes the DeepSeek-V3.1 NVFP4 checkpoint's file (the same
  architecture), its FP8 and GPT-OSS their own block-scaled FP8 and MXFP4;
* the ModelOpt checkpoints' KV cache is FP8 (``trtllm-bench``'s ``_KV_CACHE_MAP`` gives FP8
  and NVFP4 checkpoints an FP8 cache, and the published Llama-3.1-8B H100 throughput at
  128/2048 is more than the HBM bandwidth allows with a 16-bit one); DeepSeek-R1 FP8 and
  GPT-OSS keep theirs in 16 bits (the map names neither format);
* ``DEPn`` is attention data parallel with the experts over all n GPUs, and so is a MoE
  model's ``TPn`` in the v1.0 table (its docs run MoE models with ``--ep`` and
  ``enable_attention_dp: true``; the EP size is not given);
* the capacity scheduler is TensorRT-LLM's default (``GUARANTEED_NO_EVICT``), the KV memory
  fraction 0.95 (the docs fall back to 0.90 where that ran out of memory, and do not say
  where).

Writes ``bench/results/accuracy_offline.{md,json}``.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "ground_truth" / "tensorrt_llm_perf_overview"
RESULTS = REPO / "bench" / "results"
TABLES = {"v1.0": ("trtllm_v1.0_perf_overview_total_output_tps.csv",
                   "total_output_tokens_per_s"),
          "dev-guide": ("trtllm_devguide_perf_overview_output_tps_per_gpu.csv",
                        "derived_total_output_tokens_per_s")}
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
            (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
            (500, 2000): 3000, (20000, 2000): 1000, (1024, 1024): 3000, (8192, 1024): 1500,
            (1024, 8192): 1500, (32768, 1024): 1000, (1024, 32768): 1000}
"""Requests per run by (ISL, OSL), as the docs list them (SOURCE.md)."""
GPUS = {"H100": "h100", "H200": "h200", "B200": "b200", "GB200": "gb200"}
_FP8 = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}
_FP4 = {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
        "exclude_modules": ["lm_head"]}
_MODELS = REPO / "estimator" / "data" / "models"
CHECKPOINTS = {
    ("llama-3.1-8b", "FP8"): ("meta-llama/Llama-3.1-8B", _FP8),
    ("llama-3.3-70b", "FP8"): ("meta-llama/Llama-3.3-70B-Instruct", _FP8),
    ("llama-3.3-70b", "FP4"): ("meta-llama/Llama-3.3-70B-Instruct", _FP4),
    ("llama-3.1-405b", "FP8"): ("meta-llama/Llama-3.1-405B", _FP8),
    ("llama-3.1-405b", "FP4"): ("meta-llama/Llama-3.1-405B", _FP4),
    ("qwen3-235b-a22b", "FP8"): ("Qwen/Qwen3-235B-A22B", _FP8),
    ("qwen3-235b-a22b", "FP4"): ("Qwen/Qwen3-235B-A22B", _FP4),
    ("qwen3-30b-a3b", "FP4"): ("Qwen/Qwen3-30B-A3B",
                               str(_MODELS / "nvidia--Qwen3-30B-A3B-NVFP4.hf_quant_config.json")),
    ("deepseek-r1", "FP8"): ("deepseek-ai/DeepSeek-R1", None),
    ("deepseek-r1", "FP4"): ("deepseek-ai/DeepSeek-R1",
                             str(_MODELS / "nvidia--DeepSeek-V3.1-NVFP4.hf_quant_config.json")),
    ("gpt-oss-120b", "FP4"): ("openai/gpt-oss-120b", None),
    ("gpt-oss-120b", "FP8"): ("openai/gpt-oss-120b", None),
}
"""(model, precision) -> (catalog model, the checkpoint's quantization: None for the
model's own, else a ModelOpt block or file)."""
CUDA_GRAPH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]
"""The docs' ``llm_options.yml`` (``cuda_graph_config``, with ``enable_padding``)."""


@dataclass(frozen=True)
class PerfRow:
    table: str
    model: str
    gpu: str
    parallelism: str
    tp: int
    pp: int
    dep: int
    precision: str
    isl: int
    osl: int
    measured: float  # output tokens/s over all the run's GPUs

    @property
    def key(self) -> str:
        return (f"{self.table}:{self.model}:{self.gpu}:{self.parallelism}:{self.precision}:"
                f"{self.isl}x{self.osl}")


def model_key(name: str) -> str:
    """The tables' model headings, both docs' spellings, as one name."""
    return name.lower().replace("llama v", "llama ").replace(" ", "-").replace("-r1-0528",
                                                                               "-r1")


def load_rows(data: Path) -> list[PerfRow]:
    rows = []
    for table, (name, column) in TABLES.items():
        with open(data / name, newline="") as f:
            for r in csv.DictReader(f):
                rows.append(PerfRow(table, model_key(r["model_table"]), r["gpu"],
                                    r["parallelism"], int(r["tp"] or 1), int(r["pp"] or 1),
                                    int(r["dep"] or 0), r["precision"], int(r["isl"]),
                                    int(r["osl"]), float(r[column])))
    return rows


def why_not(row: PerfRow) -> str | None:
    """Why serveplan cannot run ``row`` as published, or None."""
    if row.gpu not in GPUS:
        return f"GPU {row.gpu} is not in the catalog"
    if (row.model, row.precision) not in CHECKPOINTS:
        return f"model {row.model} ({row.precision}) is not in the catalog"
    if (row.isl, row.osl) not in REQUESTS:
        return "request count not published for these lengths"
    return None


def _kv_shape(model) -> tuple[int, int]:
    """(KV heads, head size) as ``trtllm-bench`` reads them from the HF config: an MLA
    model's ``num_key_value_heads`` (its attention heads) and ``hidden / heads``."""
    if model.kv_lora_rank:
        return model.num_heads, model.hidden_size // model.num_heads
    return model.num_kv_heads, model.head_dim


def limits(row: PerfRow, checkpoint: str, quantization):
    """The run's ``trtllm-bench`` limits (:func:`serveplan.trtllm_bench.bench_limits`)."""
    from serveplan.estimator.catalog import resolve_gpu, resolve_model
    from serveplan.quant_source import load_quantization
    from serveplan.trtllm_bench import GIB, bench_limits

    model = resolve_model(checkpoint)
    quant = (load_quantization(quantization, model) if quantization is not None
             else model.quantization)
    kv_heads, head_size = _kv_shape(model)
    ranks = attention_dp(row)
    tp = ranks if ranks > 1 else row.tp
    return bench_limits(params=stored_elements(model, quant), attention_layers=model.num_layers,
                        kv_heads=kv_heads, head_size=head_size,
                        weights=_weight_format(model, quant), kv_fp8=quant.kv_cache == "fp8",
                        device_gib=resolve_gpu(GPUS[row.gpu]).memory_bytes / GIB, tp=tp,
                        pp=row.pp, isl=row.isl, osl=row.osl)


def stored_elements(model, quant) -> float:
    """The checkpoint's tensor elements as its safetensors metadata counts them, which is
    what ``trtllm-bench`` takes for the parameter count: a 16-bit weight is one element,
    an 8-bit weight or scale one, a byte of packed 4-bit weights one (two weights). With
    ``P_u`` the weights left in 16 bits, the checkpoint's bytes less ``P_u``; ``P_u`` is what
    the bytes exceed the parameters by with every quantized class in plain FP8."""
    from serveplan.estimator.memory import parameter_count, weight_bytes
    from serveplan.estimator.quantization import WEIGHT_CLASSES, TensorFormat

    wide = ("bf16", "fp16", "fp32")
    as_fp8 = quant.model_copy(update={c: TensorFormat(kind="fp8") for c in WEIGHT_CLASSES
                                      if quant.weights(c).kind not in wide})
    unquantized = weight_bytes(model, as_fp8) - parameter_count(model)
    return weight_bytes(model, quant) - unquantized


def _weight_format(model, quant) -> str:
    """The checkpoint's quantization as ``trtllm-bench`` prices its weights: by the format
    of the largest weight class (the experts of a MoE model, else the MLP)."""
    kind = (quant.experts if model.num_experts else quant.mlp).kind
    return {"fp8_block": "fp8"}.get(kind, kind)


MOE_MODELS = ("qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-r1", "gpt-oss-120b")


def attention_dp(row: PerfRow) -> int:
    """Attention-DP ranks of the run: ``DEPn``; and a MoE model's ``TPn`` of the v1.0 table,
    whose docs run MoE models with ``--ep`` and ``enable_attention_dp: true`` in their
    ``llm_options.yml``; else 1."""
    if row.dep:
        return row.dep
    return row.tp if row.table == "v1.0" and row.model in MOE_MODELS else 1


SETTINGS = {"shipped": None, "trtllm_profile": "trtllm"}
"""Each row is simulated twice: with the GPU profile a pool runs by default (the vLLM-fitted
one, ``docs/calibration.md``) and with the GPU's TensorRT-LLM profile (``profile: trtllm``)."""


def deployment(row: PerfRow, profile: str | None = None) -> tuple[dict, dict]:
    """The run as a serveplan deployment, and the ``trtllm-bench`` limits it runs at."""
    checkpoint, quantization = CHECKPOINTS[(row.model, row.precision)]
    bench = limits(row, checkpoint, quantization)
    pool = {"role": "colocated", "model": checkpoint, "gpu": GPUS[row.gpu], "tp": row.tp,
            "pp": row.pp, "engine": "trtllm", "max_num_seqs": bench.max_batch_size,
            "max_num_batched_tokens": bench.max_num_tokens, "gpu_memory_utilization": 0.95,
            "max_model_len": row.isl + row.osl, "enable_prefix_caching": False,
            "cuda_graph_sizes": CUDA_GRAPH_SIZES, "cuda_graph_padding": True}
    if quantization is not None:
        pool["quantization"] = quantization
    if profile is not None:
        pool["profile"] = profile
    router = {}
    ranks = attention_dp(row)
    if ranks > 1:  # attention data parallel over the ranks, experts over all of them
        pool.update(tp=1, dp=ranks, ep=ranks)
        router = {"router": "least-outstanding-tokens"}
    return {"pools": [pool], **router}, asdict(bench)


def predict(row: PerfRow) -> dict:
    """Simulate ``row`` in each of :data:`SETTINGS`: its requests all sent at once; output
    tokens/s over the run (``error`` instead where serveplan refuses the row)."""
    from serveplan.simulation import simulate

    out = {"key": row.key, **asdict(row)}
    for setting, profile in SETTINGS.items():
        try:
            deploy, out["limits"] = deployment(row, profile)
            t = time.perf_counter()
            ds = simulate(deploy, {"kind": "vllm-bench-serve", "rate": "inf",
                                   "num_requests": REQUESTS[(row.isl, row.osl)],
                                   "isl": row.isl, "osl": row.osl})
        except Exception as exc:  # a row serveplan refuses is reported with its reason
            out["error"] = f"{type(exc).__name__}: {exc}"
            return out
        summary = json.loads(ds.attrs["summary"])
        out[setting] = {"predicted": summary["output_throughput"],
                        "error_pct": 100 * (summary["output_throughput"] / row.measured - 1),
                        "failed": summary["failed"], "mean_batch": summary["mean_batch_size"],
                        "max_kv_usage": summary["max_kv_usage"],
                        "sim_s": time.perf_counter() - t}
    return out


def _stats(errs: list[float]) -> str:
    if not errs:
        return "- | -"
    return (f"{statistics.median(abs(e) for e in errs):.1f} | "
            f"{statistics.median(errs):+.1f}")


def _line(label: str, results: list[dict]) -> str:
    cells = [_stats([r[s]["error_pct"] for r in results]) for s in SETTINGS]
    return f"| {label} | {len(results)} | " + " | ".join(cells) + " |"


def _groups(ok: list[dict], key) -> list[str]:
    labels = sorted({key(r) for r in ok})
    return [_line(label, [r for r in ok if key(r) == label]) for label in labels]


HEAD = ("| rows | n | median abs % | median signed % | median abs % (trtllm profile) | "
        "median signed % (trtllm profile) |\n|---|---|---|---|---|---|")


def report(results: list[dict], skipped: dict[str, int], command: str, seconds: float) -> str:
    ok = [r for r in results if "error" not in r]
    refused = [r for r in results if "error" in r]
    family = {"H100": "Hopper", "H200": "Hopper", "B200": "Blackwell", "GB200": "Blackwell"}
    out = [
        "# Offline throughput against TensorRT-LLM's performance overview",
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}, {seconds:.0f} s). Validation "
        "only: nothing in serveplan was fitted on these tables. Error = predicted / "
        "published output tokens/s - 1; first as a pool runs by default (the GPU's "
        "vLLM-fitted profile), then with `profile: trtllm` (the docstring of "
        "`bench/accuracy_offline.py` lists the assumptions the docs leave open).",
        "",
        f"{len(ok)} of {len(results) + sum(skipped.values())} published runs simulated"
        + (f"; {len(refused)} refused by serveplan (listed below)" if refused else "")
        + "; not expressible:",
        "",
        *[f"- {n} rows: {why}" for why, n in sorted(skipped.items(), key=lambda x: -x[1])],
        "",
        f"Simulations with failed requests (their throughput counts only the completed "
        f"ones): {sum(r[s]['failed'] > 0 for r in ok for s in SETTINGS)} of "
        f"{len(ok) * len(SETTINGS)}.",
        "",
        "## Overall and by GPU generation",
        "",
        HEAD, _line("all", ok),
        *_groups(ok, lambda r: family[r["gpu"]]),
        *_groups(ok, lambda r: f"{r['table']} table"),
        "",
        "## By model, GPU, precision and layout",
        "",
        HEAD,
        *_groups(ok, lambda r: f"{r['model']} {r['precision']} {r['gpu']} {r['parallelism']}"),
        "",
        "## By lengths (ISL x OSL)",
        "",
        HEAD,
        *_groups(ok, lambda r: f"{r['isl']:>5} x {r['osl']:<5}"),
    ]
    if refused:
        out += ["", "## Refused", ""] + [f"- {r['key']}: {r['error']}" for r in refused]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--only", help="simulate only the rows whose key matches this regex "
                                   "(the report then covers only them)")
    ap.add_argument("--out", default="accuracy_offline", help="name in bench/results")
    args = ap.parse_args()
    if not args.data.is_dir():
        sys.exit(f"{args.data}: no such folder (the TensorRT-LLM perf-overview tables)")
    rows = load_rows(args.data)
    skipped: dict[str, int] = {}
    todo = []
    for r in rows:
        why = why_not(r)
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
        elif args.only is None or re.search(args.only, r.key):
            todo.append(r)
    t = time.perf_counter()
    results = []
    with Pool(args.jobs) as pool:
        for k, result in enumerate(pool.imap(predict, todo), 1):
            results.append(result)
            print(f"[{k}/{len(todo)}] {result['key']}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t
    command = "python bench/accuracy_offline.py " + " ".join(sys.argv[1:])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(
        {"command": command.strip(), "seconds": seconds, "skipped": skipped,
         "rows": results}, indent=1))
    (RESULTS / f"{args.out}.md").write_text(report(results, skipped, command.strip(), seconds))
    print((RESULTS / f"{args.out}.md").read_text())


if __name__ == "__main__":
    main()
