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
                           # | inference-perf | trace
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

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from serveplan.pools_config import (  # noqa: F401  (re-exported)
    DECODE_ROUTER_ALIASES,
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
    RouterName,
    SchedulerName,
    SibylConfig,
    _Frozen,
    parse_architecture,
    to_legacy,
    to_pools,
)


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


class ShareGPTLength(_Frozen):
    """ShareGPT as ``vllm bench serve --dataset-name sharegpt`` samples it (shipped data,
    :class:`serveplan.sim.lengths.ShareGPTPairs`). ``column`` defaults to ``prompt`` under
    ``isl`` and ``output`` under ``osl``; with both, requests get whole (prompt, reply) pairs
    in vLLM's order for the run's ``seed`` (vLLM's ``--seed``)."""

    dist: Literal["sharegpt"]
    column: Literal["prompt", "output"]


LengthSpec = Annotated[FixedLength | UniformLength | LogNormalLength | TraceLength
                       | ShareGPTLength, Field(discriminator="dist")]
Length = Annotated[int, Field(ge=1)] | LengthSpec


class PrefixConfig(_Frozen):
    """Synthetic shared prefixes: each request starts with one of ``num_groups`` prefixes
    (picked at random) of ``prefix_len`` tokens. aiperf's ``num_prefix_prompts`` and
    ``prefix_prompt_length`` are accepted for them; ``vllm bench serve --random-prefix-len``
    is ``{random_prefix_len: L}`` (one prefix)."""

    num_groups: int = Field(1, ge=1, validation_alias=AliasChoices(
        "num_groups", "num_prefix_prompts"))
    prefix_len: int = Field(ge=0, validation_alias=AliasChoices(
        "prefix_len", "prefix_prompt_length", "random_prefix_len"))


# ----------------------------------------------------------------------------- workloads
class _Client(_Frozen):
    """Client habits every workload has (:mod:`serveplan.sim.clients`)."""

    warmup_request_count: int = Field(0, ge=0, description=(
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
    num_dataset_entries: int | None = Field(None, ge=1, description=(
        "aiperf --num-dataset-entries: draw this many prompts once and cycle through them."))
    dataset_sampling_strategy: Literal["sequential", "random", "shuffle"] = "sequential"

    @model_validator(mode="before")
    @classmethod
    def _sharegpt_columns(cls, data):
        return _sharegpt_column(_sharegpt_column(data, "isl", "prompt"), "osl", "output")


class _Synthetic(_Lengths):
    num_requests: int = Field(1000, ge=1)


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
    """``concurrency`` clients, each sending its next request when the previous finishes
    (aiperf / genai-perf ``--concurrency``), after ``think_time_s`` plus an exponential
    jitter of mean ``think_time_jitter_s``."""

    kind: Literal["closed-loop"]
    concurrency: int = Field(ge=1)
    think_time_s: float = Field(0.0, ge=0)
    think_time_jitter_s: float = Field(0.0, ge=0)


class VllmBenchWorkload(_Synthetic):
    """``vllm bench serve``: ``request_rate`` (``.inf``: all at once), ``burstiness`` (gamma
    shape of the gaps), ``max_concurrency`` (with an infinite rate: a closed loop) and
    ``num_prompts`` (``num_requests``), under vLLM's own option names."""

    kind: Literal["vllm-bench-serve"]
    rate: float = Field(float("inf"), gt=0, validation_alias=AliasChoices(
        "rate", "request_rate"), description="--request-rate (requests/s).")
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, ge=1)
    num_requests: int = Field(1000, ge=1, validation_alias=AliasChoices(
        "num_requests", "num_prompts"))

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
    rate: float | None = Field(None, gt=0)
    cv: float = Field(1.0, gt=0)
    time_scale: float = Field(1.0, gt=0)
    num_requests: int | None = Field(None, ge=1)
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
                     | VllmBenchWorkload | InferencePerfWorkload | TraceWorkload,
                     Field(discriminator="kind")]
WORKLOAD_KINDS = {"poisson": PoissonWorkload, "gamma": GammaWorkload,
                  "constant": ConstantWorkload, "closed-loop": ClosedLoopWorkload,
                  "vllm-bench-serve": VllmBenchWorkload, "inference-perf": InferencePerfWorkload,
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

    deployment: Deployment | PDDeployment | PoolsDeployment
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
    """The mapping in a YAML file (empty file: ``{}``), its data-file paths made relative
    to the file's folder (:func:`anchor_paths`)."""
    from serveplan.user_input import decode_problem, not_text_message

    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"config file {path} {what}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(not_text_message(path, decode_problem(exc), "a YAML file")) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{path}{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
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


def set_path(data: dict | list, dotted: str, value: Any) -> dict | list:
    """Copy of ``data`` with ``value`` at ``a.b.c`` (intermediate mappings created).

    A numeric part indexes a list: ``deployment.pools.1.max_num_seqs``.
    """
    head, _, rest = dotted.partition(".")
    if isinstance(data, list):
        if not head.lstrip("-").isdigit() or not -len(data) <= int(head) < len(data):
            raise ValueError(f"{dotted}: {head!r} is not an index of a list of {len(data)}")
        out, key = list(data), int(head)
        inner = out[key]
    else:
        out, key = dict(data), head
        inner = out.get(head)
    if rest:
        out[key] = set_path(inner if isinstance(inner, (dict, list)) else {}, rest, value)
    else:
        out[key] = value
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
