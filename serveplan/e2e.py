"""Measured end-to-end deployments: which ones serveplan can express, and their prediction.

A row of ``e2e/aic_silicon_blackwell/silicon_blackwell.csv`` (its SOURCE.md) is one real
deployment measured with aiperf in concurrency mode: ``silicon_concurrency`` clients (the
source column; ``batch_size`` where it is missing), each sending its next request (``isl``
tokens in, exactly ``osl`` out) when the previous one finished; ``20 x concurrency``
measured requests after ``2 x concurrency`` warm-up requests; medians of TTFT (client side)
and TPOT = (E2E - TTFT) / (osl - 1). The engine flags follow the generator's rules
(``methodology/*.rule``): ``max_num_seqs = batch_size`` per worker (per attention-DP rank)
and ``concurrency / (batch_size x dp)`` agg workers behind a round-robin router (the ranks
of one worker behind the engine's DP dispatch, :data:`~serveplan.e2e_disagg.DP_DISPATCH`),
a token budget of ``batch_size + isl + 1500`` (TRT-LLM: rounded up to 32-token blocks), ``max_model_len = isl + osl + 1500``,
prefix caching off, CUDA graphs for every batch size. The served checkpoint and its
precision come from :mod:`serveplan.e2e_served`, disaggregated rows from
:mod:`serveplan.e2e_disagg`; the KV block of MLA models follows each engine
(:data:`MLA_BLOCK`).

:func:`expressible` says why a row cannot be modelled (so a report counts coverage);
:func:`simulate_row` runs the same load on the named deployment and returns the same two
medians.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from serveplan.e2e_disagg import (
    DEFAULT_BLOCK,
    DP_DISPATCH,
    TRTLLM_BLOCK,
    disagg_pools,
    disagg_reason,
    layout_reason,
    moe_fields,
    token_budget,
)
from serveplan.e2e_served import is_mla, served
from serveplan.e2e_versions import engine_version, measured_date
from serveplan.estimator.catalog import resolve_gpu, resolve_model
from serveplan.estimator.memory import MemoryPlanError
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.estimator.specs import Parallelism, SpecError
from serveplan.resolution import resolve
from serveplan.sim.clients import CLIENT_SEND_JITTER_S
from serveplan.sim.workload import ClosedLoop, Requests

ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
WARMUP_ROUNDS, MEASURED_ROUNDS = 2, 20
MLA_BLOCK = {"vllm": 64, "sglang": 64, "trtllm": 32}
"""KV block (page) of an MLA model on Blackwell, by engine: vLLM's FlashMLA-style 64; SGLang
picks ``trtllm_mla`` on SM100 for DeepSeek-V3-style models and forces ``page_size`` 64
(``server_args.py``); TensorRT-LLM's ``tokens_per_block`` 32 (the generator's rule)."""
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")


@dataclass(frozen=True)
class Role:
    """One disaggregated role: workers, per-worker batch and parallelism (None: not
    recorded)."""

    workers: int | None
    batch: int | None
    tp: int
    pp: int
    dp: int
    ep: int


@dataclass(frozen=True)
class E2ERow:
    """One measured deployment (the CSV's columns serveplan uses).

    ``concurrency`` is the client count (``silicon_concurrency`` of the source, else
    ``batch_size``); ``batch_size`` the per-worker ``max_batch_size``, so an agg row runs
    ``concurrency / batch_size`` workers (the generator's ``estimated_concurrency``).
    """

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
    gemm_quant: str = ""
    moe_quant: str = ""
    batch_size: int | None = None
    prefill: Role | None = None
    decode: Role | None = None
    measured: str = ""  # the measurement date (``measured=`` of the source), if recorded

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.engine, self.model, self.system, self.mode)


def _int(value: str, default: int | None = 1) -> int | None:
    return int(float(value)) if value not in ("", None) else default


def _role(r: dict, prefix: str) -> Role:
    g = lambda k, d=1: _int(r[f"{prefix}_{k}"], d)  # noqa: E731
    return Role(workers=g("num_workers", None), batch=g("batch_size", None), tp=g("tp_size"),
                pp=g("pp_size"), dp=g("attention_dp_size"), ep=g("moe_ep_size"))


def _row(r: dict) -> E2ERow:
    m = _CONCURRENCY.search(r["silicon_data_source"] or "")
    batch = _int(r["batch_size"], None)
    disagg = r["mode"] == "disagg"
    return E2ERow(
        id=r["id"], engine=r["backend"], version=r["backend_version"] or "",
        model=r["model_path"], system=r["system"], precision=r["precision"], mode=r["mode"],
        isl=_int(r["isl"]), osl=_int(r["osl"]),
        concurrency=int(m.group(1)) if m else (batch or 1),
        tp=_int(r["tp_size"]), pp=_int(r["pp_size"]), dp=_int(r["attention_dp_size"]),
        ep=_int(r["moe_ep_size"]), ttft_ms=float(r["silicon_ttft_ms"]),
        tpot_ms=float(r["silicon_tpot_ms"]), gemm_quant=r["gemm_quant_mode"],
        moe_quant=r["moe_quant_mode"], batch_size=batch,
        prefill=_role(r, "prefill") if disagg else None,
        decode=_role(r, "decode") if disagg else None,
        measured=measured_date(r["silicon_data_source"]))


def load_rows(path: str | Path) -> list[E2ERow]:
    """Read the CSV (one :class:`E2ERow` per line)."""
    with open(path, newline="") as fh:
        return [_row(r) for r in csv.DictReader(fh)]


def agg_workers(row: E2ERow) -> int | str:
    """Agg workers: ``concurrency / (batch_size x dp)`` (the generator's rule; ``batch_size``
    is per attention-DP rank), or why not."""
    per_worker = (row.batch_size or 0) * row.dp  # 0: not recorded
    if per_worker == 0 or row.concurrency <= per_worker:
        return 1
    if row.concurrency % per_worker:
        return (f"agg worker count unknown (concurrency {row.concurrency} is not a multiple "
                f"of max_batch_size x attention DP {per_worker})")
    return row.concurrency // per_worker


def _topology_reason(row: E2ERow, model: str) -> str | None:
    """Why the row's workers cannot be laid out, or None."""
    if row.mode != "agg":
        reason = disagg_reason(row)
        workers = () if reason else tuple((r.tp, r.pp, r.ep)
                                          for r in (row.prefill, row.decode))
    else:
        count = agg_workers(row)
        reason = layout_reason(row.tp, row.dp, row.ep) or (
            count if isinstance(count, str) else None)
        workers = ((row.tp, row.pp, row.ep),)
    spec = resolve_model(model)
    for tp, pp, ep in workers:
        if ep > 1 and not spec.is_moe:
            return f"expert parallelism (moe_ep {ep}) on a dense model"
        try:
            Parallelism(tp=tp, pp=pp).check_model(spec)
        except SpecError:
            return ("recorded tp does not divide the attention heads (not one TP worker; "
                    "the row's layout cannot be rebuilt)")
    return reason


@lru_cache(maxsize=4096)
def _fit_reason(row: E2ERow, data_dir: Path) -> str | None:
    """Why the row's deployment does not resolve (its weights do not fit the engine's
    default memory rule: the run's memory flags are not recorded), or None."""
    try:
        resolve_row(row, data_dir)
    except MemoryPlanError:
        return "weights do not fit the engine's default memory fraction (flags not recorded)"
    return None


def expressible(row: E2ERow, data_dir: Path) -> str | None:
    """None if serveplan can model the row, else the reason it cannot."""
    s = served(row, data_dir)
    if isinstance(s, str):
        return s
    try:
        resolve_gpu(row.system)
    except SpecError:
        return f"GPU {row.system} not in the catalog"
    return _topology_reason(row, s.model) or _fit_reason(row, Path(data_dir))


def _pool(row: E2ERow, data_dir: Path, *, engine: bool, runtime_profile: str | None) -> dict:
    """The pool fields every role shares: model, GPU, precision, engine and KV block."""
    s = served(row, data_dir)
    pool = {"model": s.model, "gpu": row.system.removesuffix("_sxm"), "max_model_len": row.isl + row.osl + 1500,
            "enable_prefix_caching": False}
    if s.quantization is not None:
        pool["quantization"] = s.quantization
    if s.kv_dtype is not None:
        pool["kv_dtype"] = s.kv_dtype
    if is_mla(s.model):
        pool["block_size"] = MLA_BLOCK[row.engine]
    elif row.engine == "trtllm":
        pool["block_size"] = TRTLLM_BLOCK
    if engine:
        version = engine_version(row.engine, row.version, row.measured)
        pool.update(engine=ENGINES[row.engine], engine_version=version)
        if runtime_profile:
            pool["runtime_profile"] = runtime_profile
    return pool


def _agg_budget(row: E2ERow, seqs: int, base: dict) -> int:
    """An agg worker's token budget by the generator's rule: ``max_num_tokens = batch_size +
    isl + 1500`` (vLLM, TensorRT-LLM); SGLang's ``max_prefill_tokens = isl + 1500`` (its
    rule sets no ``max_num_tokens``; the default chunk size, 8192 or more on these GPUs, cuts
    no prompt of the sample shorter)."""
    tokens = row.isl + 1500 if row.engine == "sglang" else seqs + row.isl + 1500
    return token_budget(row.engine, tokens, base.get("block_size", DEFAULT_BLOCK))


def deployment(row: E2ERow, data_dir: Path, *, engine: bool = True,
               runtime_profile: str | None = None) -> dict:
    """The row's deployment as a pools config, with the generator's engine flags."""
    base = _pool(row, data_dir, engine=engine, runtime_profile=runtime_profile)
    if row.mode != "agg":
        return disagg_pools(row, base)
    seqs = row.batch_size or row.concurrency
    pool = {**base, "role": "colocated", "tp": row.tp, "pp": row.pp, "count": agg_workers(row),
            "max_num_seqs": seqs, "max_num_batched_tokens": _agg_budget(row, seqs, base),
            **moe_fields(row.tp, row.dp, row.ep)}
    if row.engine == "sglang" and engine:
        pool["enable_mixed_chunk"] = True  # the rule's ``agg enable_mixed_chunk = true``
    router = {"router": DP_DISPATCH[row.engine]} if row.dp > 1 else {}
    return {"pools": [pool], **router}


def closed_loop(row: E2ERow, rounds: int = WARMUP_ROUNDS + MEASURED_ROUNDS,
                send_jitter_s: float = CLIENT_SEND_JITTER_S, seed: int = 0) -> Requests:
    """The row's aiperf load: ``concurrency`` clients, ``rounds`` requests each, every send
    after an exponential jitter of mean ``send_jitter_s`` (:data:`CLIENT_SEND_JITTER_S`)."""
    n = rounds * row.concurrency
    return Requests(arrival_s=np.full(n, np.nan), prompt_len=np.full(n, row.isl),
                    output_len=np.full(n, row.osl), concurrency=row.concurrency,
                    client_delay_s=ClosedLoop(row.concurrency, 0.0, send_jitter_s)
                    .client_delays(n, seed))


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
                 measured_rounds: int = MEASURED_ROUNDS,
                 send_jitter_s: float = CLIENT_SEND_JITTER_S, **kw) -> tuple[float, float]:
    """Median TTFT and TPOT (ms) of the row's load on its deployment, warm-up discarded."""
    from serveplan.simulation import _run

    resolved = resolved if resolved is not None else resolve_row(row, data_dir, **kw)
    load = closed_loop(row, WARMUP_ROUNDS + measured_rounds, send_jitter_s)
    res = _run(resolved, load, record_steps=1)
    r = res.reqs
    finish = res.pd.t_finish[:len(r.prompt)]  # every role's finish (a PD run's: the decode's)
    keep = slice(WARMUP_ROUNDS * row.concurrency, None)
    ttft = (r.t_first - r.arrival)[keep]
    tpot = ((finish - r.t_first) / max(row.osl - 1, 1))[keep]
    return float(np.median(ttft) * 1e3), float(np.median(tpot) * 1e3)


__all__ = ["E2ERow", "Role", "agg_workers", "closed_loop", "deployment", "expressible", "load_rows",
           "resolve_row", "simulate_row", "with_terms"]
