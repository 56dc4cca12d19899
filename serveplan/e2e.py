"""Measured end-to-end deployments: which ones serveplan can express, and their prediction.

A row of ``e2e/aic_silicon_blackwell/silicon_blackwell.csv`` is one real deployment measured
end to end at a fixed client concurrency (``silicon_concurrency`` of the source column;
``batch_size`` where it is missing). Its SOURCE.md describes aiperf medians over 20 rounds;
the rows themselves say otherwise, and the client modelled here is the one they came from
(:class:`BenchClient`, evidence in ``docs/validate.md``): InferenceX's benchmark runner, a
fork of vLLM's ``benchmark_serving.py`` -- ``--dataset-name random --random-range-ratio 0.8
--num-prompts 10 x C --max-concurrency C --request-rate inf --num-warmups 2 x C
--ignore-eos`` -- whose *means* of TTFT and of per-request TPOT the columns hold.

The engine flags are those the row ran: InferenceX's launch scripts for its rows
(:mod:`serveplan.e2e_recipes`, which also reads a DP-attention worker's GPUs as InferenceX
counts them), else the generator's rules (``methodology/*.rule``): ``max_num_seqs =
batch_size`` per worker (per attention-DP rank) and ``concurrency / (batch_size x dp)`` agg
workers behind a round-robin router (the ranks of one worker behind the engine's DP
dispatch, :data:`~serveplan.e2e_disagg.DP_DISPATCH`), a token budget of ``batch_size + isl +
1500`` (TRT-LLM: rounded up to 32-token blocks), ``max_model_len = isl + osl + 1500``,
prefix caching off, CUDA graphs captured for every batch size (``cuda_graph_batch_sizes =
range(1, max_batch_size + 1)``). The served checkpoint and its
precision come from :mod:`serveplan.e2e_served`, disaggregated rows from
:mod:`serveplan.e2e_disagg`; the KV block of MLA models follows each engine
(:data:`MLA_BLOCK`).

:func:`expressible` says why a row cannot be modelled (so a report counts coverage);
:func:`simulate_row` runs the same client on the named deployment and returns the same two
means.
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
    every_batch_size,
    layout_reason,
    moe_fields,
    server_wide,
    token_budget,
)
from serveplan.e2e_recipes import AUTO_KV, layout, mtp_depth, prompts_per_client, recipe_knobs
from serveplan.e2e_served import is_mla, served
from serveplan.e2e_versions import engine_version, measured_date
from serveplan.estimator.catalog import resolve_gpu, resolve_model
from serveplan.estimator.memory import MemoryPlanError
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.estimator.specs import Parallelism, SpecError
from serveplan.resolution import resolve
from serveplan.sim.clients import CLIENT_SEND_JITTER_S
from serveplan.sim.workload import ClosedLoop, Requests, Uniform

ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
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
    moe_tp: int = 1
    prefill: Role | None = None
    decode: Role | None = None
    measured: str = ""  # the measurement date (``measured=`` of the source), if recorded
    source: str = ""  # ``silicon_data_source``: which campaign (and so which client) measured it

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.engine, self.model, self.system, self.mode)


def _int(value: str, default: int | None = 1) -> int | None:
    return int(float(value)) if value not in ("", None) else default


def _size(value: str) -> int:
    """A parallel size: unrecorded or 0 (the generator's own campaign writes 0 for
    "no attention DP" on dense models) is 1."""
    return max(_int(value), 1)


def _role(r: dict, prefix: str) -> Role:
    g = lambda k, d=1: _int(r[f"{prefix}_{k}"], d)  # noqa: E731
    return Role(workers=g("num_workers", None), batch=g("batch_size", None), tp=g("tp_size"),
                pp=g("pp_size"), dp=_size(r[f"{prefix}_attention_dp_size"]), ep=g("moe_ep_size"))


def _row(r: dict) -> E2ERow:
    m = _CONCURRENCY.search(r["silicon_data_source"] or "")
    batch = _int(r["batch_size"], None)
    disagg = r["mode"] == "disagg"
    return E2ERow(
        id=r["id"], engine=r["backend"], version=r["backend_version"] or "",
        model=r["model_path"], system=r["system"], precision=r["precision"], mode=r["mode"],
        isl=_int(r["isl"]), osl=_int(r["osl"]),
        concurrency=int(m.group(1)) if m else (batch or 1),
        tp=_int(r["tp_size"]), pp=_int(r["pp_size"]), dp=_size(r["attention_dp_size"]),
        ep=_int(r["moe_ep_size"]), ttft_ms=float(r["silicon_ttft_ms"]),
        tpot_ms=float(r["silicon_tpot_ms"]), gemm_quant=r["gemm_quant_mode"],
        moe_quant=r["moe_quant_mode"], batch_size=batch, moe_tp=_int(r["moe_tp_size"]),
        prefill=_role(r, "prefill") if disagg else None,
        decode=_role(r, "decode") if disagg else None,
        measured=measured_date(r["silicon_data_source"]),
        source=r["silicon_data_source"] or "")


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


MTP_REASON = ("ran MTP speculative decoding (an InferenceX *-mtp variant's image, sweep or "
              "layout); serveplan models speculative decoding under vLLM's scheduler only")


def expressible(row: E2ERow, data_dir: Path) -> str | None:
    """None if serveplan can model the row, else the reason it cannot."""
    s = served(row, data_dir)
    if isinstance(s, str):
        return s
    try:
        resolve_gpu(row.system)
    except SpecError:
        return f"GPU {row.system} not in the catalog"
    if row_client(row) is BENCH_CLIENT and mtp_depth(row):
        return MTP_REASON
    return _topology_reason(row, s.model) or _fit_reason(row, Path(data_dir))


def _pool(row: E2ERow, data_dir: Path, *, engine: bool, runtime_profile: str | None,
          gpu: str | None = None) -> dict:
    """The pool fields every role shares: model, GPU (``gpu``: a catalog name or GPU YAML
    in place of the row's system), precision, engine and KV block."""
    s = served(row, data_dir)
    pool = {"model": s.model, "gpu": gpu or row.system.removesuffix("_sxm"),
            "max_model_len": row.isl + row.osl + 1500, "enable_prefix_caching": False}
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


_RUNTIME_KNOBS = ("async_scheduling", "scheduler_recv_interval", "enable_mixed_chunk",
                  "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                  "attention_dp_config", "allreduce_fusion")


def _engine_flags(row: E2ERow, base: dict, engine: bool) -> dict:
    """An agg worker's engine flags: its InferenceX recipe (:mod:`serveplan.e2e_recipes`)
    for the rows InferenceX's client measured, else the generator's rule (module
    docstring); the runtime's own knobs only with the engine runtime."""
    knobs = recipe_knobs(row) if row_client(row) is BENCH_CLIENT else None
    if knobs is None:
        seqs = row.batch_size or row.concurrency  # per DP rank when recorded
        ranks = row.dp if row.batch_size else 1
        knobs = {"max_num_seqs": server_wide(row.engine, seqs, ranks),
                 "max_num_batched_tokens": server_wide(row.engine, _agg_budget(row, seqs, base),
                                                       ranks),
                 "cuda_graph_sizes": every_batch_size(seqs)}
        if row.engine == "sglang":
            knobs["enable_mixed_chunk"] = True  # the rule's ``agg enable_mixed_chunk = true``
    if engine:
        return knobs
    # without the engine the memory rule is vLLM's: another engine's fraction means otherwise
    drop = _RUNTIME_KNOBS + (() if row.engine == "vllm" else ("gpu_memory_utilization",))
    return {k: v for k, v in knobs.items() if k not in drop}


def deployment(row: E2ERow, data_dir: Path, *, engine: bool = True,
               runtime_profile: str | None = None, gpu: str | None = None) -> dict:
    """The row's deployment as a pools config, with the engine flags it ran
    (:func:`_engine_flags`); ``gpu`` replaces the row's GPU (a GPU YAML of it with other
    constants, :func:`serveplan.e2e_gpu_speed.gpu_yaml`)."""
    base = _pool(row, data_dir, engine=engine, runtime_profile=runtime_profile, gpu=gpu)
    if row.mode != "agg":
        return disagg_pools(row, base)
    tp, dp, ep = layout(row) if row_client(row) is BENCH_CLIENT else (row.tp, row.dp, row.ep)
    pool = {**base, "role": "colocated", "tp": tp, "pp": row.pp, "count": agg_workers(row),
            **_engine_flags(row, base, engine), **moe_fields(tp, dp, ep)}
    if pool.get("kv_dtype") == AUTO_KV:  # the script's KV is the checkpoint's own
        del pool["kv_dtype"]
    router = {"router": DP_DISPATCH[row.engine]} if row.dp > 1 else {}
    return {"pools": [pool], **router}


@dataclass(frozen=True)
class BenchClient:
    """The benchmark client of the measured rows: InferenceX's ``benchmark_serving.py``.

    * ``--dataset-name random --random-range-ratio 0.8``: every request's input and output
      lengths are integers uniform on ``[int(0.8 L), L]`` (``np.random.seed(0)``, the inputs
      drawn before the outputs); random token ids, so no two prompts share a prefix;
    * ``--num-prompts 10 x C --max-concurrency C --request-rate inf``: every request is
      created at once behind a semaphore of ``C``, so the first ``C`` leave together and
      each completion releases the next one at once (a closed loop of ``C`` clients); the
      2025 DeepSeek fp8 sweeps on B200 sent 50 x C (20 x C at 8k outputs);
    * ``--num-warmups 2 x C``: the warm-up requests finish before the measured ones start,
      so these begin with a burst on an idle engine (the warm-ups repeat one prompt and
      prefix caching is off: nothing of theirs is left to reuse); the runs before late
      January 2026 sent one test prompt instead, which leaves the engine as idle (what a
      cold engine's first requests pay beyond that is not modelled);
    * ``--ignore-eos``: exactly the sampled output length is generated.

    The statistics are means over the measured requests: TTFT, and TPOT = (E2E - TTFT) /
    (output - 1) per request with more than one output token.
    """

    prompts_per_client: int = 10
    range_ratio: float = 0.8
    seed: int = 0

    def lengths(self, length: int, n: int, rs: np.random.RandomState) -> np.ndarray:
        """``n`` lengths of nominal ``length``, drawn as the client draws them."""
        low = max(int(length * self.range_ratio), 1)
        return rs.randint(low, length + 1, size=n).astype(np.int64)

    def requests(self, row: E2ERow) -> Requests:
        """The measured requests of ``row``: ``prompts_per_client x concurrency`` of them
        (the runner's count where it set its own: :func:`~serveplan.e2e_recipes.
        prompts_per_client`), in send order."""
        n = (prompts_per_client(row) or self.prompts_per_client) * row.concurrency
        rs = np.random.RandomState(self.seed)  # the client's legacy global-state draws
        prompt, output = self.lengths(row.isl, n, rs), self.lengths(row.osl, n, rs)
        return Requests(arrival_s=np.full(n, np.nan), prompt_len=prompt, output_len=output,
                        concurrency=row.concurrency)

    def length_laws(self, row: E2ERow) -> tuple[Uniform, Uniform]:
        """The input and output length laws (for analytic use)."""
        lo = lambda length: max(int(length * self.range_ratio), 1)  # noqa: E731
        return Uniform(lo(row.isl), row.isl), Uniform(lo(row.osl), row.osl)


BENCH_CLIENT = BenchClient()


@dataclass(frozen=True)
class AiperfClient:
    """aiperf ``--concurrency C --request-count 20 x C --warmup-request-count 2 x C`` with
    fixed lengths (``--isl``/``--osl``, stddev 0, ``ignore_eos``): the client of the
    generator's ``bench_run.sh.j2``, which the few rows of the generator's own gap-analysis
    campaign (their source names a Dynamo image) ran. aiperf drains the warm-up before it
    profiles, so the measured requests start with a burst of ``C``; each client sends again
    when its response ends, after the credit's trip back through aiperf's timing manager
    (:data:`~serveplan.sim.clients.CLIENT_SEND_JITTER_S`, exponential). Statistics as
    :class:`BenchClient`'s (the column holds one statistic, the mean)."""

    rounds: int = 20
    send_jitter_s: float = CLIENT_SEND_JITTER_S
    seed: int = 0

    def requests(self, row: E2ERow) -> Requests:
        n = self.rounds * row.concurrency
        delays = ClosedLoop(row.concurrency, 0.0, self.send_jitter_s).client_delays(n, self.seed)
        return Requests(arrival_s=np.full(n, np.nan), prompt_len=np.full(n, row.isl),
                        output_len=np.full(n, row.osl), concurrency=row.concurrency,
                        client_delay_s=delays)


AIPERF_CLIENT = AiperfClient()
_AIPERF_SOURCE = re.compile(r"gtl_job_id|dynamo_version")


def row_client(row: E2ERow) -> BenchClient | AiperfClient:
    """The client that measured ``row``: aiperf for the generator's gap-analysis campaign
    (its source records a Dynamo image), InferenceX's client for every other row."""
    return AIPERF_CLIENT if _AIPERF_SOURCE.search(row.source) else BENCH_CLIENT


def resolve_row(row: E2ERow, data_dir: Path, **kw):
    """The row's resolved deployment (:func:`serveplan.resolution.resolve`)."""
    return resolve(deployment(row, data_dir, **kw))


def with_terms(resolved, terms: RuntimeTerms):
    """``resolved`` with its engine's runtime terms replaced (for fitting): the step
    overhead they set (or the GPU profile's, if None) prices every step of its pools, their
    eager dispatch every step outside CUDA graphs."""
    pools = []
    for p in resolved.pools:
        inst, cost = p.instance, p.cost
        if inst.runtime is not None:
            oracle = inst.oracle.with_runtime(*terms.oracle_terms())
            cost = oracle if cost is inst.oracle else cost
            inst = replace(inst, runtime=replace(inst.runtime, terms=terms), oracle=oracle)
        pools.append(replace(p, instance=inst, cost=cost))
    return replace(resolved, pools=tuple(pools))


def bench_means(load: Requests, result) -> tuple[float, float]:
    """Mean TTFT and mean TPOT (ms) of a simulator ``result`` of the requests ``load``, as
    the benchmark computes them: TPOT = (E2E - TTFT) / (output - 1) per request with more
    than one output token, averaged over those requests (0 if there are none)."""
    r, first = result.reqs, result.first_token_times
    finish = result.pd.t_finish[:len(r.prompt)]  # every role's finish (a PD run's: the decode's)
    many = load.output_len > 1
    tpot = (finish - first)[many] / (load.output_len[many] - 1)
    mean_tpot = float(np.mean(tpot) * 1e3) if many.any() else 0.0
    return float(np.mean(first - r.arrival) * 1e3), mean_tpot


def simulate_row(row: E2ERow, data_dir: Path | None = None, *, resolved=None,
                 client: BenchClient | AiperfClient | None = None, **kw) -> tuple[float, float]:
    """Mean TTFT and mean TPOT (ms) of the row's client (default :func:`row_client`) on
    its deployment."""
    from serveplan.simulation import _run

    resolved = resolved if resolved is not None else resolve_row(row, data_dir, **kw)
    load = (client or row_client(row)).requests(row)
    return bench_means(load, _run(resolved, load, record_steps=1))


__all__ = ["AIPERF_CLIENT", "BENCH_CLIENT", "AiperfClient", "BenchClient", "E2ERow", "Role",
           "agg_workers", "bench_means", "deployment", "expressible", "load_rows",
           "resolve_row", "row_client", "simulate_row", "with_terms"]
