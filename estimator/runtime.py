"""Engine runtime profiles: each engine's scheduler, defaults and runtime terms, by version.

The cost oracle prices a GPU step; a serving engine adds its own runtime around it -- the
API server, the CPU work of each step, how it overlaps the two, its scheduler and its
default knobs, all of which change from version to version. A :class:`RuntimeProfile`
holds that for one engine (``data/runtime/<engine>.json``):

* ``versions`` -- version ranges, newest first, each with the scheduler the engine runs,
  whether it schedules asynchronously (overlaps CPU work and the next step's scheduling
  with the running step), multi-step decoding, and its knob defaults (by GPU memory class
  where the engine's defaults depend on it);
* ``terms`` -- the runtime terms (:class:`RuntimeTerms`), fitted from end-to-end runs
  (``provenance`` says which) by :mod:`serveplan.estimator.runtime_fit`.

:func:`engine_runtime` picks the version entry and returns what a deployment needs:
:class:`EngineRuntime` (knob defaults, the per-pool
:class:`~serveplan.sim.runtime.StepRuntime` and the deployment's
:class:`~serveplan.sim.runtime.FrontEnd`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serveplan.sim.runtime import FrontEnd, StepRuntime

from .memory import parameter_count
from .notes import announce_once
from .specs import SpecError
from .validation import file_problems

ENGINE_NAMES = ("vllm", "sglang", "trtllm")
DP_SHARED_LIMITS = ("sglang",)
"""Engines whose running-request and chunk limits are server-wide, divided among the
attention-DP ranks (SGLang's ``max_running_requests`` and ``chunked_prefill_size`` under
``--enable-dp-attention``: ``TpModelWorker``, ``ServerArgs``); vLLM and TensorRT-LLM give
every rank the whole limit."""
SchedulerName = Literal["vllm-v1", "sglang", "prefill-priority", "trtllm-no-evict",
                        "trtllm-max-utilization"]


class RuntimeTerms(BaseModel):
    """Seconds the runtime adds around the GPU step (see :mod:`serveplan.sim.runtime`).

    ``tp_sync_per_layer_s`` is charged once per layer per step on instances with
    tensor-parallel size > 1 (rank synchronisation and collective launch beyond the
    all-reduce's transfer time). ``prefill_token_layer_s`` is charged per prompt token
    and layer of a step on the GPU: the prefill work an engine does beyond the forward
    pass the oracle prices from per-op measurements (its quantisation, routing and
    normalisation kernels between the measured ops, eager launches of large steps).
    ``disagg_handoff_s`` is the request path of a disaggregated deployment beyond moving
    the KV: the orchestrator's hop from the prefill worker to the decode worker, the
    transfer's setup and registration and the decode side's pickup of the arrived KV --
    a latency on every handoff (requests do not queue behind it), counted in TTFT.
    ``prefill_step_expert_layer_s`` is charged once per step that carries prompt tokens,
    per MoE layer and routed expert of the model: such steps run outside CUDA graphs, and
    the work an engine does per expert of each MoE layer in them beyond the GPU kernels
    the oracle prices (on the end-to-end rows, TensorRT-LLM's and SGLang's colocated
    light-load time beyond the priced steps grows with the model's MoE layers times
    experts; the mechanism is not measured here, the term is its empirical form). Not on a
    disaggregated prefill instance: TensorRT-LLM's disaggregated runs of the same models
    show no such time (at light load their TTFT is, in the median, below the simulated
    engine's alone), and charged there the term cut those instances' prefill capacity.
    ``step_overhead_s`` replaces the GPU profile's time per step outside the forward pass
    (``Profile.step_overhead_s``, 0.5 ms, a default no per-op table measures: the sampler,
    the input preparation kernels and the idle gap between steps as this engine runs
    them); None keeps the profile's. ``eager_dispatch_layer_s`` is the CPU time per layer an
    engine spends issuing a step outside CUDA graphs beyond the per-op dispatch the GPU
    profile holds (its framework's work between kernels); it overlaps the GPU work as
    dispatch does (:meth:`~serveplan.estimator.oracle.CostOracle.with_runtime`), so a step
    whose GPU work outlasts it does not pay it, and graph steps never do.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    frontend_request_s: float = Field(0.0, ge=0)
    frontend_prompt_token_s: float = Field(0.0, ge=0)
    frontend_output_s: float = Field(0.0, ge=0)
    frontend_output_per_token_s: float = Field(0.0, ge=0)
    step_cpu_s: float = Field(0.0, ge=0)
    step_cpu_per_request_s: float = Field(0.0, ge=0)
    step_cpu_per_token_s: float = Field(0.0, ge=0)
    tp_sync_per_layer_s: float = Field(0.0, ge=0)
    prefill_token_layer_s: float = Field(0.0, ge=0)
    prefill_step_expert_layer_s: float = Field(0.0, ge=0)
    disagg_handoff_s: float = Field(0.0, ge=0)
    step_overhead_s: float | None = Field(None, ge=0)
    eager_dispatch_layer_s: float = Field(0.0, ge=0)

    def oracle_terms(self) -> tuple[float | None, float]:
        """The terms the cost oracle prices (``CostOracle.with_runtime``'s arguments)."""
        return self.step_overhead_s, self.eager_dispatch_layer_s

    def front_end(self) -> FrontEnd:
        return FrontEnd(self.frontend_request_s, self.frontend_prompt_token_s,
                        self.frontend_output_s, self.frontend_output_per_token_s)

    def step_runtime(self, num_layers: int, tp: int, expert_layers: int = 0,
                     prefill_instance: bool = False) -> StepRuntime:
        """The per-step terms of an instance of a model with ``num_layers`` layers and
        ``expert_layers`` MoE layers times routed experts (0: dense); ``prefill_instance``:
        a disaggregated prefill instance (the expert term is not charged there)."""
        sync = self.tp_sync_per_layer_s * num_layers if tp > 1 else 0.0
        per_prompt_step = (0.0 if prefill_instance else
                           self.prefill_step_expert_layer_s * expert_layers)
        return StepRuntime(self.step_cpu_s, self.step_cpu_per_request_s,
                           self.step_cpu_per_token_s, sync,
                           self.prefill_token_layer_s * num_layers, per_prompt_step)


class KnobDefaults(BaseModel):
    """An engine's own defaults for the knobs serveplan models (None: not set)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    watermark: float | None = Field(None, ge=0, lt=1)
    block_size: int | None = Field(None, ge=1)
    new_token_ratio: float | None = Field(None, ge=0, le=1)
    enable_mixed_chunk: bool | None = None
    scheduler_recv_interval: int | None = Field(None, ge=1)
    batch_wait_timeout_iters: int | None = Field(None, ge=0)
    batch_wait_max_tokens_ratio: float | None = Field(None, ge=0, le=1)
    allreduce_fusion: bool | None = None


class VersionEntry(BaseModel):
    """One version range of an engine (``min`` inclusive, ``max`` exclusive)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min: str = "0"
    max: str | None = None
    label: str
    scheduler: SchedulerName
    async_scheduling: bool = False
    num_scheduler_steps: int = Field(1, ge=1)
    piecewise_cuda_graph: bool = Field(
        False, description="mixed steps up to the largest CUDA-graph capture size run as "
                           "piecewise graphs around eager attention (vLLM V1's torch.compile)")
    defaults: KnobDefaults = KnobDefaults()
    large_gpu_defaults: KnobDefaults | None = Field(
        None, description="overrides on GPUs with >= large_gpu_min_gib of memory")
    large_gpu_min_gib: float = 70.0
    large_gpu_excludes: tuple[str, ...] = ()
    source: str = ""

    def contains(self, version: tuple[int, ...]) -> bool:
        lo = parse_version(self.min)
        return lo <= version and (self.max is None or version < parse_version(self.max))


MODES = {False: "colocated", True: "disaggregated"}
"""A fit domain's name for how a deployment serves, by whether it is disaggregated."""
DOMAIN_ASPECTS = ("gpu", "mode", "instance", "kind", "size", "version")
"""What :meth:`FitDomain.outside_by_aspect` checks: the GPU, colocated or disaggregated, the
GPUs an instance, dense or MoE, the model's parameters, the engine release."""


class FitDomain(BaseModel):
    """The measured deployments a profile's terms were fitted on: their GPUs, their models
    (whether any was dense, any a mixture of experts, and the smallest and largest
    model's parameters), the fewest and most GPUs an engine instance of theirs ran on,
    whether they ran colocated or disaggregated, and the engine versions they ran. A
    deployment outside them gets
    the terms all the same; :meth:`outside` says how it lies outside, so the simulation
    can say that its runtime is extrapolated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    gpus: tuple[str, ...]
    models: tuple[str, ...]
    dense: bool
    moe: bool
    versions: tuple[str, str] | None = None  # oldest and newest, where the rows say
    # smallest and largest model, billions of parameters (none: not recorded)
    params_b: tuple[float, float] | None = None
    # fewest and most GPUs of one engine instance (a colocated instance, a prefill or a
    # decode worker) among the runs (none: not recorded)
    gpus_per_instance: tuple[int, int] | None = None
    # how the runs served: colocated, disaggregated (prefill/decode) or both (none: not
    # recorded)
    modes: tuple[Literal["colocated", "disaggregated"], ...] | None = None

    @classmethod
    def of(cls, source: str, gpus, models: dict, versions: tuple[str, str] | None = None,
           instance_gpus: Sequence[int] = (), disaggregated: Sequence[bool] = ()) -> FitDomain:
        """The domain of runs on ``gpus`` of ``models`` (name -> ``ModelSpec``): which of
        dense and MoE they cover and their sizes are read from the specs (the size range
        widened to a tenth of a billion, so that each fitted model lies inside it);
        ``instance_gpus``: the GPUs of each of their engine instances, ``disaggregated``:
        whether each run was (either empty: not recorded)."""
        sizes = [parameter_count(m) / 1e9 for m in models.values()]
        return cls(source=source, gpus=tuple(sorted(set(gpus))), models=tuple(sorted(models)),
                   dense=any(not m.is_moe for m in models.values()),
                   moe=any(m.is_moe for m in models.values()), versions=versions,
                   params_b=(math.floor(10 * min(sizes)) / 10, math.ceil(10 * max(sizes)) / 10),
                   gpus_per_instance=(min(instance_gpus), max(instance_gpus))
                   if instance_gpus else None,
                   modes=tuple(MODES[flag] for flag in (False, True) if flag in disaggregated)
                   or None)

    @field_validator("params_b", "gpus_per_instance")
    @classmethod
    def _range(cls, value, info):
        if value is not None and not 0 < value[0] <= value[1]:
            raise ValueError(f"{info.field_name} must be (smallest, largest) > 0, "
                             f"got {list(value)}")
        return value

    @field_validator("modes")
    @classmethod
    def _modes(cls, value):
        if value is not None and (not value or len(set(value)) < len(value)):
            raise ValueError("modes must name colocated, disaggregated or both, once each")
        return value

    def outside(self, gpu_name: str, model, version: str | None = None,
                instance_gpus: int | None = None, disaggregated: bool | None = None,
                ) -> list[str]:
        """How a deployment of ``model`` (a ``ModelSpec``) on ``gpu_name`` at ``version``
        (None: the profile's newest), ``instance_gpus`` GPUs an instance and
        ``disaggregated`` or not (None: either not checked), lies outside the fitted runs;
        empty if it does not."""
        return list(self.outside_by_aspect(gpu_name, model, version, instance_gpus,
                                           disaggregated).values())

    def outside_by_aspect(self, gpu_name: str, model, version: str | None = None,
                          instance_gpus: int | None = None,
                          disaggregated: bool | None = None) -> dict[str, str]:
        """:meth:`outside`'s findings by the aspect they concern (one of
        :data:`DOMAIN_ASPECTS`), in that order."""
        how = {}
        if gpu_name not in self.gpus:
            how["gpu"] = f"the GPU ({gpu_name}) is not among theirs ({', '.join(self.gpus)})"
        if (disaggregated is not None and self.modes is not None
                and MODES[disaggregated] not in self.modes):
            how["mode"] = f"it runs {MODES[disaggregated]}; theirs ran {self.modes[0]} only"
        if instance_gpus is not None and self.gpus_per_instance is not None:
            low, high = self.gpus_per_instance
            if not low <= instance_gpus <= high:
                how["instance"] = (f"an instance runs on {instance_gpus} GPU(s); theirs on "
                                   f"{low} to {high}")
        kind, covered = ("dense", self.dense) if not model.is_moe else ("a MoE model", self.moe)
        if not covered:
            only = "MoE" if self.moe else "dense"
            how["kind"] = (f"{model.name} is {kind}; they were {only} models only "
                           f"({', '.join(m.split('/')[-1] for m in self.models)})")
        if self.params_b is not None:
            size, (low, high) = parameter_count(model) / 1e9, self.params_b
            if not low <= size <= high:
                how["size"] = (f"{model.name} has {size:,.1f} B parameters; theirs had "
                               f"{low:,.1f} to {high:,.1f} B")
        if version is not None and self.versions is not None and not (
                parse_version(self.versions[0]) <= parse_version(version)
                <= parse_version(self.versions[1])):
            how["version"] = (f"version {version} is outside theirs ({self.versions[0]} to "
                              f"{self.versions[1]})")
        return how


class RuntimeProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Literal["vllm", "sglang", "trtllm"]
    versions: tuple[VersionEntry, ...]
    terms: RuntimeTerms = RuntimeTerms()
    provenance: dict[str, Any] = Field(default_factory=dict)
    domain: FitDomain | None = Field(
        None, description="the measured runs the terms were fitted on (none: not recorded)")

    def fitted_json(self, terms: RuntimeTerms, provenance: dict[str, Any],
                    domain: FitDomain) -> str:
        """This profile (its versions and defaults) with ``terms`` fitted on the runs of
        ``domain``, as the JSON ``runtime_profile:`` / ``--runtime-profile`` load."""
        prof = self.model_copy(update={"terms": terms, "provenance": provenance,
                                       "domain": domain})
        return json.dumps(prof.model_dump(mode="json"), indent=2, default=float) + "\n"

    def entry(self, version: str | None) -> VersionEntry:
        """The version entry for ``version`` (None: the newest)."""
        if version is None:
            return self.versions[0]
        v = parse_version(version)
        for e in self.versions:
            if e.contains(v):
                return e
        known = ", ".join(f"[{e.min}, {e.max or '...'})" for e in self.versions)
        raise SpecError(f"{self.engine} version {version!r} is outside the versions this "
                        f"profile knows ({known})")


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.19.0"``, ``"1.2.0rc6.post2"`` -> ``(0, 19, 0)``, ``(1, 2, 0)``: the release
    numbers (pre-release and local parts are ignored)."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(text))
    if not m:
        raise SpecError(f"cannot read an engine version from {text!r} (expected e.g. 0.19.0)")
    return tuple(int(x) for x in m.group(1).split("."))


def load_runtime_profile(engine: str, path: str | Path | None = None) -> RuntimeProfile:
    """The shipped profile of ``engine`` (or the JSON at ``path``)."""
    if engine not in ENGINE_NAMES and path is None:
        raise SpecError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    source = Path(path) if path is not None else resources.files(
        "serveplan.estimator").joinpath("data", "runtime", f"{engine}.json")
    try:
        text = source.read_text()
        prof = RuntimeProfile.model_validate(json.loads(text))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"cannot read the runtime profile of {engine}: {exc}") from None
    except ValidationError as exc:
        raise SpecError(file_problems(exc, source, text, root="runtime profile")) from None
    if prof.engine != engine:  # its terms and knob defaults are another engine's
        raise SpecError(f"runtime_profile: {source} is a runtime profile of {prof.engine}, "
                        f"not of {engine} (the engine it was given for)")
    return prof


@dataclass(frozen=True)
class EngineRuntime:
    """What a deployment takes from its engine's profile (see :func:`engine_runtime`)."""

    engine: str
    version: str
    entry: VersionEntry
    defaults: dict = field(default_factory=dict)
    terms: RuntimeTerms = RuntimeTerms()
    outside_fit: tuple[str, ...] = ()  # how the deployment lies outside the terms' runs

    def step_runtime(self, model, tp: int, prefill_instance: bool = False) -> StepRuntime:
        """The per-step terms of an instance of ``model`` (a ``ModelSpec``) at ``tp``."""
        return self.terms.step_runtime(model.num_layers, tp, model.expert_layers,
                                       prefill_instance)

    def front_end(self) -> FrontEnd:
        return self.terms.front_end()

    def describe(self) -> dict:
        return {"engine": self.engine, "engine_version": self.version,
                "engine_profile": self.entry.label, "scheduler": self.entry.scheduler,
                "async_scheduling": self.entry.async_scheduling,
                "num_scheduler_steps": self.entry.num_scheduler_steps,
                "runtime_terms": self.terms.model_dump(),
                **({"runtime_terms_outside_fit": list(self.outside_fit)}
                   if self.outside_fit else {})}


def _announce_extrapolation(engine: str, prof: RuntimeProfile, how: list[str]) -> None:
    """Say once per process, on stderr, that a deployment's runtime terms are carried
    outside the runs they were fitted on."""
    t = prof.terms
    latency = ", ".join(f"{label} {1e3 * v:.0f} ms" for label, v in (
        ("front-end latency", t.frontend_output_s), ("handoff", t.disagg_handoff_s)) if v)
    announce_once(f"{engine}'s runtime terms{f' ({latency})' if latency else ''} were "
                  f"fitted on {prof.domain.source}, and this deployment lies outside them: "
                  f"{'; '.join(how)}. Its predicted latencies carry them unvalidated; "
                  "`serveplan calibrate --runs` fits them to your own benchmark runs "
                  "(docs/runtime.md).")


def engine_runtime(engine: str, version: str | None, gpu_name: str, gpu_mem_gib: float,
                   profile_path: str | Path | None = None, model=None,
                   instance_gpus: int | None = None,
                   disaggregated: bool | None = None) -> EngineRuntime:
    """The version entry of ``engine`` for ``version`` on a GPU (name, memory): knob
    defaults with the engine's GPU-class rule applied, and the runtime terms. Given the
    ``model`` (a ``ModelSpec``), a deployment outside the runs the terms were fitted on
    (:class:`FitDomain`; its instance size and whether it is disaggregated checked where
    ``instance_gpus`` and ``disaggregated`` are given) is announced once and recorded
    (``outside_fit``)."""
    prof = load_runtime_profile(engine, profile_path)
    entry = prof.entry(version)
    defaults = entry.defaults.model_dump(exclude_none=True)
    large = entry.large_gpu_defaults
    if large is not None and gpu_mem_gib >= entry.large_gpu_min_gib and not any(
            x in gpu_name.lower() for x in entry.large_gpu_excludes):
        defaults.update(large.model_dump(exclude_none=True))
    how = []
    if model is not None and prof.domain is not None and prof.terms != RuntimeTerms():
        how = prof.domain.outside(gpu_name, model, version, instance_gpus, disaggregated)
    if how:
        _announce_extrapolation(engine, prof, how)
    return EngineRuntime(engine, version or f"{entry.min}+", entry, defaults, prof.terms,
                         tuple(how))


__all__ = ["DOMAIN_ASPECTS", "DP_SHARED_LIMITS", "ENGINE_NAMES", "EngineRuntime", "FitDomain",
           "KnobDefaults", "MODES", "RuntimeProfile", "RuntimeTerms", "VersionEntry",
           "engine_runtime", "load_runtime_profile", "parse_version"]
