"""Measured end-to-end deployments: which ones serveplan can express, and their prediction.

A row of ``e2e/aic_silicon_blackwell/silicon_blackwell.csv`` (its SOURCE.md) is one real
deployment measured with aiperf in concurrency mode: ``batch_size`` clients, each sending
its next request (``isl`` tokens in, exactly ``osl`` out) when the previous one finished;
``20 x concurrency`` measured requests after ``2 x concurrency`` warm-up requests; medians
of TTFT (client side) and TPOT = (E2E - TTFT) / (osl - 1). The engine flags follow the
generator's rules (``methodology/*.rule``): ``max_num_seqs = batch_size``, a token budget
of ``batch_size + isl + 1500`` (TRT-LLM: rounded up to 32-token blocks), ``max_model_len =
isl + osl + 1500``, prefix caching off, CUDA graphs for every batch size.

:func:`expressible` says why a row cannot be modelled (so a report counts coverage);
:func:`simulate_row` runs the same load on the named deployment and returns the same two
medians.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.estimator.specs import SpecError
from serveplan.resolution import resolve
from serveplan.sim.workload import Requests

MODEL_CONFIGS = "model_configs"
CATALOG_MODELS = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b"}
NOT_MODELLED = {  # model -> the architecture feature serveplan does not model yet
    "deepseek-ai/DeepSeek-R1": "MLA attention", "deepseek-ai/DeepSeek-V3": "MLA attention",
    "nvidia/DeepSeek-R1-NVFP4": "MLA attention", "nvidia/DeepSeek-V3.1-NVFP4": "MLA attention",
    "moonshotai/Kimi-K2.5": "MLA attention", "zhipuai/GLM-5": "MLA attention",
    "Qwen/Qwen3.5-397B-A17B": "hybrid linear attention",
    "openai/gpt-oss-120b": "sliding-window attention with sinks",
}
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
WARMUP_ROUNDS, MEASURED_ROUNDS = 2, 20


@dataclass(frozen=True)
class E2ERow:
    """One measured deployment (the CSV's columns serveplan uses)."""

    id: str
    engine: str
    version: str
    model: str
    system: str
    precision: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    dp: int
    ep: int
    ttft_ms: float
    tpot_ms: float

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.engine, self.model, self.system, self.mode)


def _int(value: str, default: int = 1) -> int:
    return int(float(value)) if value not in ("", None) else default


def load_rows(path: str | Path) -> list[E2ERow]:
    """Read the CSV (one :class:`E2ERow` per line)."""
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append(E2ERow(
                id=r["id"], engine=r["backend"], version=r["backend_version"] or "",
                model=r["model_path"], system=r["system"], precision=r["precision"],
                mode=r["mode"], isl=_int(r["isl"]), osl=_int(r["osl"]),
                concurrency=_int(r["batch_size"]), tp=_int(r["tp_size"]), pp=_int(r["pp_size"]),
                dp=_int(r["attention_dp_size"]), ep=_int(r["moe_ep_size"]),
                ttft_ms=float(r["silicon_ttft_ms"]), tpot_ms=float(r["silicon_tpot_ms"])))
    return rows


def model_ref(row: E2ERow, data_dir: Path) -> str:
    """The catalog name or the HF config shipped beside the data."""
    if row.model in CATALOG_MODELS:
        return CATALOG_MODELS[row.model]
    return str(data_dir / MODEL_CONFIGS / (row.model.replace("/", "--") + "_config.json"))


def expressible(row: E2ERow, data_dir: Path) -> str | None:
    """None if serveplan can model the row, else the reason it cannot."""
    if row.mode != "agg":
        return "disaggregated rows: only DeepSeek / NVFP4 models (not modelled)"
    if row.precision not in ("fp8", "bf16"):
        return f"{row.precision} weights not modelled"
    if row.model in NOT_MODELLED:
        return f"{NOT_MODELLED[row.model]} not modelled"
    try:
        resolve_gpu(row.system.removesuffix("_sxm"))
    except SpecError:
        return f"GPU {row.system} not in the catalog"
    if not Path(model_ref(row, data_dir)).exists() and row.model not in CATALOG_MODELS:
        return "model config not shipped"
    if row.dp > 1 or row.ep > 1:
        return "attention DP / expert parallel rows (EP stragglers not modelled)"
    return None


def deployment(row: E2ERow, data_dir: Path, *, engine: bool = True,
               runtime_profile: str | None = None) -> dict:
    """The row's deployment as a pools config, with the generator's engine flags."""
    budget = row.concurrency + row.isl + 1500
    if row.engine == "trtllm":
        budget = -(-budget // 32) * 32
    pool = {"role": "colocated", "model": model_ref(row, data_dir),
            "gpu": row.system.removesuffix("_sxm"), "tp": row.tp, "pp": row.pp, "count": 1,
            "dtype": row.precision, "kv_dtype": row.precision,
            "max_num_seqs": row.concurrency, "max_num_batched_tokens": budget,
            "max_model_len": row.isl + row.osl + 1500, "enable_prefix_caching": False}
    if engine:
        pool.update(engine=ENGINES[row.engine], engine_version=row.version or None)
        if runtime_profile:
            pool["runtime_profile"] = runtime_profile
    return {"pools": [pool]}


def closed_loop(row: E2ERow, rounds: int = WARMUP_ROUNDS + MEASURED_ROUNDS) -> Requests:
    n = rounds * row.concurrency
    return Requests(arrival_s=np.full(n, np.nan), prompt_len=np.full(n, row.isl),
                    output_len=np.full(n, row.osl), concurrency=row.concurrency)


def resolve_row(row: E2ERow, data_dir: Path, **kw):
    """The row's resolved deployment (:func:`serveplan.resolution.resolve`)."""
    return resolve(deployment(row, data_dir, **kw))


def with_terms(resolved, terms: RuntimeTerms):
    """``resolved`` with its engine's runtime terms replaced (for fitting)."""
    pools = []
    for p in resolved.pools:
        inst = p.instance
        if inst.runtime is not None:
            inst = replace(inst, runtime=replace(inst.runtime, terms=terms))
        pools.append(replace(p, instance=inst))
    return replace(resolved, pools=tuple(pools))


def simulate_row(row: E2ERow, data_dir: Path | None = None, *, resolved=None,
                 measured_rounds: int = MEASURED_ROUNDS, **kw) -> tuple[float, float]:
    """Median TTFT and TPOT (ms) of the row's load on its deployment, warm-up discarded."""
    from serveplan.simulation import _run

    resolved = resolved if resolved is not None else resolve_row(row, data_dir, **kw)
    res = _run(resolved, closed_loop(row, WARMUP_ROUNDS + measured_rounds), record_steps=1)
    r = res.reqs
    keep = slice(WARMUP_ROUNDS * row.concurrency, None)
    ttft = (r.t_first - r.arrival)[keep]
    tpot = ((r.t_finish - r.t_first) / max(row.osl - 1, 1))[keep]
    return float(np.median(ttft) * 1e3), float(np.median(tpot) * 1e3)


__all__ = ["E2ERow", "closed_loop", "deployment", "expressible", "load_rows", "resolve_row",
           "simulate_row", "with_terms"]
