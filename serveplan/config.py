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
      kind: poisson        # poisson | gamma | constant | closed-loop | trace
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

:class:`Deployment` keeps ``architecture: colocated`` as its default so existing files stay
valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SchedulerName = Literal["vllm-v1", "sglang", "prefill-priority"]
RouterName = Literal["round-robin", "least-outstanding-tokens", "least-requests"]
DecodeRouterName = Literal["round-robin", "least-loaded", "least-requests", "sibyl", "sibyl-p1",
                           "sibyl-no-type1", "sibyl-no-type2", "sibyl-no-type3",
                           "sibyl-reqlevel"]
DECODE_ROUTER_ALIASES = {"rr": "round-robin", "ils": "least-loaded", "ils-tokens": "least-loaded",
                         "ils-requests": "least-requests"}
DTypeName = Literal["bf16", "fp16", "fp8"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ----------------------------------------------------------------------------- deployment
class EngineConfig(_Frozen):
    """vLLM engine knobs (names and defaults as ``vllm serve``)."""

    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="Token budget per step. Default: 8192 with chunked prefill, "
        "else max(max_model_len, 2048) as vLLM.")
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    block_size: int | None = Field(None, ge=1, description="Default 16 (64 for MLA models).")
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(0, ge=0)
    num_gpu_blocks: int | None = Field(
        None, ge=2, description="Override the memory planner (vLLM num_gpu_blocks_override; "
        "one block is vLLM's null block).")
    max_model_len: int | None = Field(None, ge=2, description="Default: the model's context.")
    watermark: float | None = Field(
        None, ge=0.0, lt=1.0, description="Fraction of blocks kept free when admitting; "
        "default 0 (vLLM v1), 0.01 for prefill-priority (vLLM v0).")

    @model_validator(mode="after")
    def _budget_holds_seqs(self):
        mnbt = self.max_num_batched_tokens
        if mnbt is not None and mnbt < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({mnbt}) must be >= max_num_seqs "
                             f"({self.max_num_seqs}), as vLLM requires")
        return self


class InstanceConfig(EngineConfig):
    """One serving instance: model, hardware, parallelism, scheduler and engine knobs."""

    model: str = Field(description="Catalog name or HF config.json path.")
    gpu: str = Field(description="Catalog name or GPU YAML path.")
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    dtype: DTypeName | None = None
    kv_dtype: DTypeName | None = None
    cuda_graph: bool = True
    profile: str | None = Field(None, description="Calibration profile JSON path.")
    scheduler: SchedulerName = "vllm-v1"


class Deployment(InstanceConfig):
    """Colocated deployment: ``num_instances`` identical instances behind a router."""

    architecture: Literal["colocated"] = "colocated"
    num_instances: int = Field(1, ge=1)
    router: RouterName = "round-robin"


class Pool(InstanceConfig):
    """``num_instances`` identical instances of one role (a PD pool)."""

    num_instances: int = Field(1, ge=1)


class FittedThroughputConfig(_Frozen):
    """SIBYL's fitted decode throughput (Appendix I, Eq. 15): an instance running ``N``
    requests makes ``TPS(N) = alpha N^2 + beta N + gamma`` tokens/s, split equally; floored
    at ``min_tps``. Defaults: the paper's H20 / Qwen3-32B fit."""

    kind: Literal["fitted-throughput"] = "fitted-throughput"
    alpha: float = -0.423
    beta: float = 44.766
    gamma: float = -7.753
    min_tps: float = Field(1.0, gt=0)
    plateau: bool = Field(False, description="Hold TPS at its peak beyond the peak's batch "
                          "size (the paper's prose) instead of the raw quadratic (its simulator).")


class SibylConfig(_Frozen):
    """SIBYL router settings (``papers/sibyl.txt`` §4.2)."""

    delta: float = Field(128.0, gt=0, description="Survival bucket step (tokens).")
    alpha: float = Field(0.99, gt=0, lt=1, description="EMA weight of the old value (Eq. 4).")
    max_length: int | None = Field(None, ge=1, description="Longest output resolved; "
                                   "default: the decode pool's max_model_len.")
    pending_capacity: int | None = Field(None, ge=1, description="Pending slots per decode "
                                         "instance (default max(256, 8 n / n_decode)).")


class PDDeployment(_Frozen):
    """Prefill/decode disaggregation: a prefill pool hands KV caches to a decode pool.

    ``router`` binds each request to a decode instance, at dispatch (``assignment: early``)
    or at its prefill end (``late``); ``prefill_router`` picks its prefill instance. KV moves
    over NVLink between instances on one node and over the scale-out network otherwise
    (``placement``: ``packed`` puts the decode pool right after the prefill pool,
    ``separate`` on its own nodes); ``kv_link_bw`` (bytes/s per GPU) and
    ``kv_link_latency_s`` override the GPU's links. ``layerwise_transfer`` streams KV while
    the prefill runs (early assignment only). ``prefill_stage: delay`` replaces the prefill
    pool by SIBYL's infinite-server delay (each prefill alone, no queueing);
    ``decode_cost`` may be SIBYL's fitted throughput instead of the cost oracle.
    ``kv_connector`` names vLLM's KV connector for launch export.
    """

    architecture: Literal["pd"] = "pd"
    prefill: Pool
    decode: Pool
    router: DecodeRouterName = "round-robin"
    prefill_router: Literal["least-loaded", "round-robin"] = "least-loaded"
    assignment: Literal["early", "late"] = "early"
    layerwise_transfer: bool = False
    placement: Literal["packed", "separate"] = "packed"
    kv_link_bw: float | None = Field(None, gt=0)
    kv_link_latency_s: float | None = Field(None, ge=0)
    kv_connector: str = "NixlConnector"
    prefill_stage: Literal["engine", "delay"] = "engine"
    prefill_hold: int | None = Field(None, ge=0, description="Finished prefills whose KV an "
                                     "instance holds before admitting fewer (default 256).")
    decode_cost: Literal["oracle"] | FittedThroughputConfig = "oracle"
    sibyl: SibylConfig = SibylConfig()

    @field_validator("router", mode="before")
    @classmethod
    def _router_alias(cls, v):
        return DECODE_ROUTER_ALIASES.get(v, v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _layerwise_early(self):
        if self.layerwise_transfer and self.assignment != "early":
            raise ValueError("layerwise_transfer needs assignment: early (the decode instance "
                             "must be known when the prefill starts)")
        return self


def parse_architecture(v):
    """A deployment mapping validated as :class:`Deployment` or :class:`PDDeployment` by its
    ``architecture`` (default ``colocated``); models pass through."""
    if not isinstance(v, dict):
        return v
    arch = v.get("architecture", "colocated")
    if arch == "pd":
        return PDDeployment.model_validate(v)
    if arch == "colocated":
        return Deployment.model_validate(v)
    raise ValueError(f"architecture given an invalid value: {arch!r} (valid: 'colocated', 'pd')")


# ----------------------------------------------------------------------------- lengths
class FixedLength(_Frozen):
    dist: Literal["fixed"]
    value: int = Field(ge=1)


class UniformLength(_Frozen):
    dist: Literal["uniform"]
    low: int = Field(ge=1)
    high: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LogNormalLength(_Frozen):
    """Lognormal lengths: give ``mean`` (of the continuous variable) or ``median``."""

    dist: Literal["lognormal"]
    mean: float | None = Field(None, gt=0)
    median: float | None = Field(None, gt=0)
    sigma: float = Field(gt=0)
    max: int | None = Field(None, ge=1)

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


LengthSpec = Annotated[FixedLength | UniformLength | LogNormalLength | TraceLength,
                       Field(discriminator="dist")]
Length = Annotated[int, Field(ge=1)] | LengthSpec


class PrefixConfig(_Frozen):
    """Synthetic shared prefixes: each request starts with one of ``num_groups`` prefixes."""

    num_groups: int = Field(ge=1)
    prefix_len: int = Field(ge=0)


# ----------------------------------------------------------------------------- workloads
class _Synthetic(_Frozen):
    num_requests: int = Field(1000, ge=1)
    isl: Length = 1024
    osl: Length = 256
    prefix: PrefixConfig | None = None


class PoissonWorkload(_Synthetic):
    kind: Literal["poisson"]
    rate: float = Field(gt=0, description="Requests per second.")


class GammaWorkload(_Synthetic):
    kind: Literal["gamma"]
    rate: float = Field(gt=0)
    cv: float = Field(1.0, gt=0, description="Coefficient of variation of the gaps.")


class ConstantWorkload(_Synthetic):
    kind: Literal["constant"]
    rate: float = Field(gt=0)


class ClosedLoopWorkload(_Synthetic):
    """``concurrency`` clients, each sending its next request when the previous finishes."""

    kind: Literal["closed-loop"]
    concurrency: int = Field(ge=1)


class TraceWorkload(_Frozen):
    """Requests read from a trace (Azure CSV, Mooncake JSONL, Vidur CSV).

    ``arrival: trace`` replays the file's timestamps (``time_scale`` times faster, or
    rescaled to mean ``rate``); another arrival process draws new times at ``rate`` (for
    length-only files such as ShareGPT). ``num_requests`` takes the first requests, or
    tiles the trace when larger.
    """

    kind: Literal["trace"]
    path: str
    arrival: Literal["trace", "poisson", "gamma", "constant"] = "trace"
    rate: float | None = Field(None, gt=0)
    cv: float = Field(1.0, gt=0)
    time_scale: float = Field(1.0, gt=0)
    num_requests: int | None = Field(None, ge=1)
    skip_bad_lines: bool = False

    @model_validator(mode="after")
    def _rate_needed(self):
        if self.arrival != "trace" and self.rate is None:
            raise ValueError(f"arrival {self.arrival!r} needs a rate")
        if self.arrival == "trace" and self.rate is not None and self.time_scale != 1.0:
            raise ValueError("give rate or time_scale, not both")
        return self


Workload = Annotated[PoissonWorkload | GammaWorkload | ConstantWorkload | ClosedLoopWorkload
                     | TraceWorkload, Field(discriminator="kind")]
WORKLOAD_KINDS = {"poisson": PoissonWorkload, "gamma": GammaWorkload,
                  "constant": ConstantWorkload, "closed-loop": ClosedLoopWorkload,
                  "trace": TraceWorkload}


# ----------------------------------------------------------------------------- SLO + run
class SLO(_Frozen):
    """Latency goals. Met when the ``percentile`` of each given metric is within its goal,
    or, with ``attainment``, when that fraction of requests meets both (DistServe)."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    percentile: float = Field(90.0, gt=0, le=100)
    attainment: float | None = Field(None, gt=0, le=1)


class SimulationConfig(_Frozen):
    """Everything ``serveplan simulate`` needs."""

    deployment: Deployment | PDDeployment
    workload: Workload
    slo: SLO | None = None
    seed: int = Field(0, ge=0)
    record_steps: int = Field(1 << 16, ge=2, description="Step time-series capacity.")

    @field_validator("deployment", mode="wrap")
    @classmethod
    def _architecture(cls, v, handler):
        return parse_architecture(v) if isinstance(v, dict) else handler(v)


# ----------------------------------------------------------------------------- loading
def read_yaml(path: str | Path) -> dict:
    """The mapping in a YAML file (empty file: ``{}``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def switch_workload_kind(workload: dict, kind: str) -> dict:
    """``workload`` turned into ``kind``, keeping the fields the new kind accepts."""
    cls = WORKLOAD_KINDS[kind]
    kept = {k: v for k, v in workload.items() if k in cls.model_fields}
    kept["kind"] = kind
    return kept


def set_path(data: dict, dotted: str, value: Any) -> dict:
    """Copy of ``data`` with ``value`` at ``a.b.c`` (intermediate mappings created)."""
    out = dict(data)
    head, _, rest = dotted.partition(".")
    if rest:
        inner = out.get(head)
        out[head] = set_path(inner if isinstance(inner, dict) else {}, rest, value)
    else:
        out[head] = value
    return out


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                ) -> SimulationConfig:
    """Read a YAML file, apply dotted-key ``overrides`` (file < overrides), validate.

    Raises ``pydantic.ValidationError`` naming the bad fields.
    """
    data = read_yaml(path) if path is not None else {}
    for key, value in (overrides or {}).items():
        data = set_path(data, key, value)
    return SimulationConfig.model_validate(data)
