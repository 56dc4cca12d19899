"""Configuration schema: frozen pydantic models for deployments, workloads and SLOs.

A simulation file has four top-level keys::

    deployment:            # one colocated deployment (architecture: colocated)
      model: llama-3.1-8b
      gpu: h100
      tp: 1
      num_instances: 1
      router: round-robin
      scheduler: vllm-v1
      max_num_seqs: 256    # vLLM engine knobs, vLLM names and defaults
    workload:
      kind: poisson        # poisson | gamma | constant | closed-loop | vllm-bench-serve
                           # | inference-perf | trace | sessions (serveplan.sessions_config)
      rate: 6.0
      num_requests: 2000
      isl: {dist: lognormal, mean: 1024, sigma: 0.6}
      osl: 256
    slo: {ttft_ms: 500, tpot_ms: 50, percentile: 90}
    seed: 0

Every model forbids unknown keys and is immutable; constructing one has no side effects
(files named in it are read only when the simulation runs). Workload variants and length
distributions are discriminated unions (on ``kind`` and ``dist``).

A disaggregated deployment says ``architecture: pd`` and gives ``prefill`` and ``decode``
pools, each an :class:`InstanceConfig` plus ``num_instances`` (:class:`PDDeployment`)::

    deployment:
      architecture: pd
      prefill: {model: qwen3-32b, gpu: h20, num_instances: 4, max_num_seqs: 1}
      decode:  {model: qwen3-32b, gpu: h20, num_instances: 4}
      router: sibyl          # round-robin | least-loaded | least-requests | sibyl[-variant]
      assignment: early      # early (at dispatch) | late (at prefill end)

Either deployment may also be written as a list of role pools (:mod:`serveplan.pools_config`,
:class:`PoolsDeployment`)::

    deployment:
      pools:
        - {role: prefill, model: qwen3-32b, gpu: h20, count: 4, max_num_seqs: 1}
        - {role: decode,  model: qwen3-32b, gpu: h20, count: 4}
      router: least-loaded   # entry router: colocated instances, or prefill instances
      decode_router: sibyl   # plus the PD boundary options (assignment, placement, ...)

:class:`Deployment` keeps ``architecture: colocated`` as its default so existing files stay
valid. The deployment models live in :mod:`serveplan.pools_config` and are re-exported here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AliasChoices,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from serveplan.config_paths import set_path  # noqa: F401  (re-exported)
from serveplan.pools_config import (  # noqa: F401  (re-exported)
    DECODE_ROUTER_ALIASES,
    MAX_REQUESTS,
    MAX_TOKENS,
    AnyDeployment,
    DecodeRouterName,
    Deployment,
    DTypeName,
    EngineConfig,
    FittedThroughputConfig,
    InstanceConfig,
    PDDeployment,
    Pool,
    PoolConfig,
    PoolsDeployment,
    Requests,
    RouterName,
    SchedulerName,
    SibylConfig,
    Tokens,
    _error,
    _Frozen,
    at_least,
    at_most,
    parse_architecture,
    to_legacy,
    to_pools,
)
from serveplan.sessions_config import SessionsWorkload  # noqa: E402

# ----------------------------------------------------------------------------- lengths
MAX_SIGMA = 10.0
"""Largest lognormal ``sigma``: its lengths from P0.1 to P99.9 already span 26 orders of
magnitude (far larger ones overflow float64)."""
Clients = Annotated[int, at_most(MAX_REQUESTS, "each client has a preallocated front-end "
                                 "slot; more clients than a run's requests never all send")]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False, description="Requests per second.")]
Cv = Annotated[float, at_least(1e-3, "already constant gaps"), at_most(
    1e3, "all but a few requests already arrive at once"), Field(
    gt=0, description="Coefficient of variation of the gaps (gamma shape 1/cv^2).")]
TokenCount = Annotated[float, at_least(1e-3, "tokens; any smaller center already gives "
                                       "1-token lengths"), at_most(
    MAX_TOKENS, "tokens, above the longest context of any model, 10M")]


class FixedLength(_Frozen):
    dist: Literal["fixed"]
    value: Tokens = Field(ge=1)


class UniformLength(_Frozen):
    dist: Literal["uniform"]
    low: Tokens = Field(ge=1)
    high: Tokens = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LogNormalLength(_Frozen):
    """Lognormal lengths: give ``mean`` (of the continuous variable) or ``median``."""

    dist: Literal["lognormal"]
    mean: TokenCount | None = Field(None, gt=0)
    median: TokenCount | None = Field(None, gt=0)
    sigma: Annotated[float, at_most(MAX_SIGMA, "lengths from P0.1 to P99.9 then span 26 "
                                    "orders of magnitude")] = Field(gt=0)
    max: Tokens | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_center(self):
        if (self.mean is None) == (self.median is None):
            raise ValueError("give exactly one of mean and median")
        return self


class TraceLength(_Frozen):
    """Lengths resampled from a trace file's prompt or output column."""

    dist: Literal["trace"]
    path: str
    column: Literal["prompt", "output"]
    skip_bad_lines: bool = False


class ShareGPTLength(_Frozen):
    """ShareGPT as ``vllm bench serve`` or ``sglang.bench_serving`` (``--dataset-name
    sharegpt``) sample it (:class:`serveplan.sim.lengths.ShareGPTPairs`). ``column``: default
    ``prompt`` under ``isl``, ``output`` under ``osl``; with both, whole (prompt, reply) pairs
    in the client's order for the run's ``seed`` (its ``--seed``: vLLM's 0, SGLang's 1)."""

    dist: Literal["sharegpt"]
    column: Literal["prompt", "output"]
    sampler: Literal["vllm", "sglang"] = Field("vllm", description="Whose sampling: vllm (4+ "
        "tokens each, prompt <= 1024, total <= 2048) or sglang (2+ tokens each, no caps).")
    sharegpt_context_len: int | None = Field(None, ge=2, description=(
        "sglang.bench_serving --sharegpt-context-len: drop pairs longer than this in all."))

    @model_validator(mode="after")
    def _context_len_is_sglangs(self):
        if self.sharegpt_context_len is None or self.sampler == "sglang":
            return self
        raise ValueError("sharegpt_context_len is sglang.bench_serving's option; give "
                         "sampler: sglang with it")


LengthSpec = Annotated[FixedLength | UniformLength | LogNormalLength | TraceLength
                       | ShareGPTLength, Field(discriminator="dist")]
Length = Annotated[Tokens, Field(ge=1)] | LengthSpec


class PrefixConfig(_Frozen):
    """Synthetic shared prefixes: each request starts with one of ``num_groups`` prefixes
    (picked at random) of ``prefix_len`` tokens. aiperf's ``num_prefix_prompts`` and
    ``prefix_prompt_length`` are accepted for them; ``vllm bench serve --random-prefix-len``
    is ``{random_prefix_len: L}`` (one prefix)."""

    num_groups: Requests = Field(1, ge=1, validation_alias=AliasChoices(
        "num_groups", "num_prefix_prompts"))
    prefix_len: Tokens = Field(ge=0, validation_alias=AliasChoices(
        "prefix_len", "prefix_prompt_length", "random_prefix_len"))


# ----------------------------------------------------------------------------- workloads
class _Client(_Frozen):
    """Client habits every workload has (:mod:`serveplan.sim.clients`)."""

    warmup_request_count: Requests = Field(0, ge=0, description=(
        "aiperf --warmup-request-count: the first requests, left out of the statistics."))
    request_timeout_s: float | None = Field(None, gt=0, validation_alias=AliasChoices(
        "request_timeout_s", "request_timeout_seconds", "request_timeout"), description=(
        "Client timeout: a slower request (end to end) counts as failed."))


def _sharegpt_column(data, field: str, column: str):
    """``{dist: sharegpt}`` under ``isl`` / ``osl`` reads the prompt / output column."""
    spec = data.get(field) if isinstance(data, dict) else None
    if isinstance(spec, dict) and spec.get("dist") == "sharegpt" and "column" not in spec:
        data = {**data, field: {**spec, "column": column}}
    return data


class _Lengths(_Client):
    isl: Length = 1024
    osl: Length = 256
    prefix: PrefixConfig | None = None
    num_dataset_entries: Requests | None = Field(None, ge=1, description=(
        "aiperf --num-dataset-entries: draw this many prompts once and cycle through them."))
    dataset_sampling_strategy: Literal["sequential", "random", "shuffle"] = "sequential"

    @model_validator(mode="before")
    @classmethod
    def _sharegpt_columns(cls, data):
        return _sharegpt_column(_sharegpt_column(data, "isl", "prompt"), "osl", "output")


class _Synthetic(_Lengths):
    num_requests: Requests = Field(1000, ge=1)


class PoissonWorkload(_Synthetic):
    kind: Literal["poisson"]
    rate: Rate


class GammaWorkload(_Synthetic):
    kind: Literal["gamma"]
    rate: Rate
    cv: Cv = 1.0


class ConstantWorkload(_Synthetic):
    kind: Literal["constant"]
    rate: Rate


class ClosedLoopWorkload(_Synthetic):
    """``concurrency`` clients, each sending its next request when the previous finishes
    (aiperf / genai-perf ``--concurrency``), after ``think_time_s`` plus an exponential
    jitter of mean ``think_time_jitter_s``."""

    kind: Literal["closed-loop"]
    concurrency: Clients = Field(ge=1)
    think_time_s: float = Field(0.0, ge=0)
    think_time_jitter_s: float = Field(0.0, ge=0)


class VllmBenchWorkload(_Synthetic):
    """``vllm bench serve``: ``request_rate`` (``.inf``: all at once), ``burstiness`` (gamma
    shape of the gaps), ``max_concurrency`` (its semaphore: a due request waits while that
    many are in flight; with an infinite rate, a closed loop) and ``num_prompts``
    (``num_requests``), under vLLM's own option names."""

    kind: Literal["vllm-bench-serve"]
    rate: float = Field(float("inf"), gt=0, validation_alias=AliasChoices(
        "rate", "request_rate"), description="--request-rate (requests/s).")
    burstiness: Annotated[float, at_least(1e-6, "gamma shape of the gaps; 1e-6 already "
                                          "sends all but a few at once"), at_most(
        1e6, "gamma shape of the gaps; 1e6 is already constant")] = Field(1.0, gt=0)
    max_concurrency: Clients | None = Field(None, ge=1, description=(
        "--max-concurrency: requests in flight at most; a due request waits for a slot "
        "(its latencies count from its send)."))
    num_requests: Requests = Field(1000, ge=1, validation_alias=AliasChoices(
        "num_requests", "num_prompts"))
    random_range_ratio: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "--random-range-ratio of the random dataset: lengths uniform on [floor(L (1 - r)), "
        "ceil(L (1 + r))] around a fixed isl / osl L."))

    @model_validator(mode="after")
    def _range_needs_fixed_lengths(self):
        if self.random_range_ratio > 0:
            for name in ("isl", "osl"):
                if not isinstance(getattr(self, name), int):
                    raise ValueError(f"random_range_ratio samples around a fixed {name}: give "
                                     f"{name} as a number of tokens")
        return self

    @field_serializer("rate", "burstiness", when_used="json")
    def _inf_as_text(self, value: float) -> float | str:
        return "inf" if value == float("inf") else value  # JSON has no infinity


class InferencePerfStage(_Frozen):
    rate: float = Field(gt=0, description="Requests per second.")
    duration: float = Field(gt=0, description="Seconds.")


class InferencePerfWorkload(_Lengths):
    """inference-perf's ``load``: ``type`` constant or poisson, ``stages`` of ``rate`` and
    ``duration`` (``int(rate * duration)`` requests each), ``interval`` between stages; how
    stage boundaries are placed: :class:`serveplan.sim.arrivals.InferencePerfArrivals`."""

    kind: Literal["inference-perf"]
    type: Literal["constant", "poisson"] = "constant"
    stages: list[InferencePerfStage] = Field(min_length=1)
    interval: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _requests_bounded(self):
        total = sum(s.rate * s.duration for s in self.stages)
        if not total <= MAX_REQUESTS:  # (a product may overflow to inf)
            raise ValueError(f"stages send sum(rate x duration) = {total:,.4g} requests; at "
                             f"most {MAX_REQUESTS:,} (the simulator keeps ~300 bytes per "
                             "request)")
        return self


class TraceWorkload(_Client):
    """Requests read from a trace (Azure CSV, Mooncake JSONL, Vidur CSV).

    ``arrival: trace`` replays the file's timestamps (``time_scale`` times faster, or
    rescaled to mean ``rate``); another arrival process draws new times at ``rate`` (for
    length-only files such as ShareGPT). ``num_requests`` takes the first requests; more
    than the file holds is an error unless ``repeat: true``, which replays the trace again
    after its end.
    """

    kind: Literal["trace"]
    path: str
    arrival: Literal["trace", "poisson", "gamma", "constant"] = "trace"
    rate: Rate | None = None
    cv: Cv = 1.0
    time_scale: float = Field(1.0, gt=0)
    num_requests: Requests | None = Field(None, ge=1)
    repeat: bool = False
    skip_bad_lines: bool = False

    @model_validator(mode="after")
    def _rate_needed(self):
        if self.arrival != "trace" and self.rate is None:
            raise ValueError(f"arrival {self.arrival!r} needs a rate")
        if self.arrival == "trace" and self.rate is not None and self.time_scale != 1.0:
            raise ValueError("give rate or time_scale, not both")
        return self


Workload = Annotated[PoissonWorkload | GammaWorkload | ConstantWorkload | ClosedLoopWorkload
                     | VllmBenchWorkload | InferencePerfWorkload | TraceWorkload
                     | SessionsWorkload, Field(discriminator="kind")]
WORKLOAD_KINDS = {"poisson": PoissonWorkload, "gamma": GammaWorkload,
                  "constant": ConstantWorkload, "closed-loop": ClosedLoopWorkload,
                  "vllm-bench-serve": VllmBenchWorkload, "inference-perf": InferencePerfWorkload,
                  "trace": TraceWorkload, "sessions": SessionsWorkload}


# ----------------------------------------------------------------------------- SLO + run
class SLO(_Frozen):
    """Latency goals. Met when the ``percentile`` of each given metric is within its goal,
    or, with ``attainment``, when that fraction of requests meets both (DistServe)."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    percentile: float = Field(90.0, gt=0, le=100)
    attainment: float | None = Field(None, gt=0, le=1)


MAX_SPAN_S = 1e8
"""Longest time a simulated run may span (s, about 3 years). Times are float64 seconds,
which resolve latencies to ~15 ns at 1e8 s but not at all near 1e300 s (``--rate 1e-300``
would print 0 ms latencies)."""


def arrival_span(w) -> tuple[str, float] | None:
    """``(field, seconds)``: about how long the workload ``w`` sends requests for, and the
    field that sets it; None where only the trace file knows."""
    if isinstance(w, ClosedLoopWorkload):
        rounds = math.ceil(w.num_requests / w.concurrency)
        return "think_time_s", rounds * (w.think_time_s + w.think_time_jitter_s)
    if isinstance(w, InferencePerfWorkload):
        return "stages", sum(s.duration for s in w.stages) + w.interval * (len(w.stages) - 1)
    n = getattr(w, "num_requests", None)
    if w.rate is None or n is None or getattr(w, "arrival", None) == "trace":
        return None
    return "rate", n / w.rate


def check_arrivals(arrival_s, workload) -> None:
    """``ValueError`` naming the field that set them if drawn arrival times span more than
    :data:`MAX_SPAN_S` (as :class:`SimulationConfig` checks before the draw, for what only a
    trace file knows: its timestamps divided by ``time_scale``)."""
    t = np.asarray(arrival_s, dtype=np.float64)
    t = t[~np.isnan(t)]  # (a closed loop's later requests have no arrival yet)
    span = float(t.max() - min(float(t.min()), 0.0)) if t.size else 0.0
    if not span <= MAX_SPAN_S:
        replay = getattr(workload, "arrival", None) == "trace" and workload.rate is None
        field = "time_scale" if replay else "rate"
        raise ValueError(f"workload.{field}: the requests arrive over {span:.3g} s, more than "
                         f"{MAX_SPAN_S:g} s (about 3 years), where float64 seconds no longer "
                         "resolve latencies")


class SimulationConfig(_Frozen):
    """Everything ``serveplan simulate`` needs."""

    deployment: Deployment | PDDeployment | PoolsDeployment
    workload: Workload
    slo: SLO | None = None
    seed: int = Field(0, ge=0)
    record_steps: Annotated[int, at_most(1 << 20, "steps; longer runs are decimated, so more "
                                         "only costs memory")] = Field(
        1 << 16, ge=2, description="Step time-series capacity.")

    @field_validator("deployment", mode="wrap")
    @classmethod
    def _architecture(cls, v, handler):
        return parse_architecture(v) if isinstance(v, dict) else handler(v)

    @model_validator(mode="after")
    def _span(self):
        """A run longer than :data:`MAX_SPAN_S` is refused: its latencies would be noise."""
        found = arrival_span(self.workload)
        if found is not None and not found[1] <= MAX_SPAN_S:
            name, span = found
            w = self.workload
            what = (f"num_requests / rate = {w.num_requests:,} / {w.rate:.4g} req/s"
                    if name == "rate" else "its rounds of think time"
                    if name == "think_time_s" else "its stages")
            raise _error("SimulationConfig", ("workload", name),
                         f"the run would span {what} = {span:.3g} s, more than "
                         f"{MAX_SPAN_S:g} s (about 3 years), where float64 seconds no longer "
                         "resolve latencies", getattr(self.workload, name))
        return self


# ----------------------------------------------------------------------------- run size
MAX_SIM_BYTES = 1 << 30
"""Most memory the event simulator may preallocate for one run. Each field's bound keeps
it small alone, but the arrays are products (instances x KV blocks, instances x slots x
blocks per request, instances x requests): the run as a whole is checked too."""
GIB = float(1 << 30)


def simulator_bytes(pools, prompt, output, *, prefill_hold: int | None = None) -> dict:
    """Bytes the event simulator preallocates for a run, by part (``kv``, ``slots``,
    ``requests``), as ``sim/loop_api.py:_build_world`` lays it out: every instance gets a KV
    block pool as wide as the largest (20 B per block, 12 B per slot of a hash table of the
    next power of two above twice the blocks), request slots as many as the largest (a
    block table of the longest request's blocks at 4 B each, ~48 B more) and a waiting
    queue (4 B per request; decode instances: per slot); each request ~300 B.

    ``pools``: ``(params, num_instances, role)`` with the simulator's engine ``params``
    (``num_gpu_blocks``, ``max_num_seqs``, ``block_size``, ``max_model_len``).
    """
    n_inst, width, slots, longest, n, queue = _layout(pools, prompt, output, prefill_hold)
    table = 1 << max(4, math.ceil(math.log2(2 * width + 1)))
    return {"kv": n_inst * (20 * width + 12 * table), "slots": n_inst * slots * (4 * longest + 48),
            "requests": n_inst * 4 * queue + 300 * n}


def _layout(pools, prompt, output, prefill_hold: int | None) -> tuple[int, ...]:
    """``(instances, widest KV pool, most slots, longest request in blocks, requests, longest
    queue)`` of a run (:func:`simulator_bytes`)."""
    prompt, output = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
    n = int(prompt.size)
    hold = 256 if prefill_hold is None else int(prefill_hold)
    roles = [getattr(role, "name", str(role)).lower() for _, _, role in pools]
    params = [p for p, _, _ in pools]
    longest = 1
    for p in params:
        live = prompt < p.max_model_len
        if live.any():
            tokens = int(np.minimum(prompt + output, p.max_model_len)[live].max())
            longest = max(longest, min(-(-tokens // int(p.block_size)), int(p.num_gpu_blocks)))
    return (sum(int(k) for _, k, _ in pools), max(int(p.num_gpu_blocks) for p in params),
            max(int(p.max_num_seqs) + (hold if r == "prefill" else 0)
                for p, r in zip(params, roles, strict=True)),
            longest, n, max((int(p.max_num_seqs) if r == "decode" else n) + 1
                            for p, r in zip(params, roles, strict=True)))


def check_simulator_memory(pools, prompt, output, *, prefill_hold: int | None = None) -> None:
    """``ValueError`` naming what to lower if a run would preallocate more than
    :data:`MAX_SIM_BYTES` (:func:`simulator_bytes`)."""
    parts = simulator_bytes(pools, prompt, output, prefill_hold=prefill_hold)
    total = sum(parts.values())
    if total <= MAX_SIM_BYTES:
        return
    n_inst, width, slots, longest, n, _ = _layout(pools, prompt, output, prefill_hold)
    worst = max(parts, key=parts.get)
    field, advice = {
        "kv": ("deployment", "fewer instances (count, num_instances), fewer KV blocks "
                             "(num_gpu_blocks, gpu_memory_utilization) or a larger block_size"),
        "slots": ("deployment", "a smaller max_num_seqs, max_model_len or fewer instances"),
        "requests": ("workload.num_requests", "fewer requests or instances"),
    }[worst]
    raise ValueError(
        f"{field}: the simulator would preallocate {total / GIB:.1f} GiB for this run, more "
        f"than {MAX_SIM_BYTES / GIB:g} GiB: {n_inst:,} instances x {width:,} KV blocks "
        f"({parts['kv'] / GIB:.2f} GiB), x {slots:,} request slots of {longest:,} blocks "
        f"({parts['slots'] / GIB:.2f} GiB), x {n:,} requests ({parts['requests'] / GIB:.2f} "
        f"GiB); give {advice}")


# ----------------------------------------------------------------------------- loading
def read_yaml(path: str | Path) -> dict:
    """The mapping in a YAML file (empty file: ``{}``), its data-file paths made relative
    to the file's folder (:func:`anchor_paths`)."""
    from serveplan.user_input import yaml_mapping

    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"config file {path} {what}")
    data = yaml_mapping(path, "a YAML file", error=ValueError)
    return anchor_paths(data, path.parent)


DATA_FILE_FIELDS = ("workload.path", "workload.isl.path", "workload.osl.path")
"""Config fields that name a data file (a trace); relative values are relative to the YAML
file that holds them."""


def anchor_paths(data: dict, folder: Path) -> dict:
    """Copy of ``data`` with each relative :data:`DATA_FILE_FIELDS` path (also under a sweep
    file's ``base`` and in its ``grid`` values) joined to ``folder``; a binary file there is
    reported by name."""
    from serveplan.user_input import check_text_file

    def anchor(value, field):
        if not isinstance(value, str) or Path(value).expanduser().is_absolute():
            return value
        joined = os.path.normpath(folder / value)
        check_text_file(joined, "a trace (Mooncake .jsonl, Azure or Vidur CSV)", field=field)
        return joined

    for prefix in ("", "base."):
        for field in DATA_FILE_FIELDS:
            node = data.get("base") if prefix else data
            for part in field.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, str):
                data = set_path(data, prefix + field, anchor(node, prefix + field))
    grid = data.get("grid")
    if isinstance(grid, dict):
        grid = {k: [anchor(v, f"grid.{k}") for v in vs]
                if k in DATA_FILE_FIELDS and isinstance(vs, list) else vs
                for k, vs in grid.items()}
        data = {**data, "grid": grid}
    return data


def switch_workload_kind(workload: dict, kind: str) -> dict:
    """``workload`` turned into ``kind``, keeping the fields the new kind accepts."""
    cls = WORKLOAD_KINDS[kind]
    kept = {k: v for k, v in workload.items() if k in cls.model_fields}
    kept["kind"] = kind
    return kept


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                ) -> SimulationConfig:
    """Read a YAML file, apply dotted-key ``overrides`` (file < overrides), validate.

    Raises ``pydantic.ValidationError`` naming the bad fields.
    """
    data = read_yaml(path) if path is not None else {}
    for key, value in (overrides or {}).items():
        data = set_path(data, key, value)
    return SimulationConfig.model_validate(data)
