"""One instance's engine runtime and the knobs it takes from it.

A knob the user set wins; otherwise the engine's default for its version and GPU class
(:mod:`serveplan.estimator.runtime`), else the config's. The CUDA-graph, all-reduce fusion
and attention-DP rules here are the engines' own (``docs/engines.md``);
:func:`serveplan.resolution.resolve_instance` applies them.
"""

from __future__ import annotations

from serveplan.deployments import instance_gpus
from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.oracle import sglang_cuda_graph_sizes, trtllm_cuda_graph_sizes
from serveplan.estimator.runtime import DP_SHARED_LIMITS, EngineRuntime, engine_runtime
from serveplan.estimator.specs import GPUSpec
from serveplan.pools_config import Deployment
from serveplan.quant_source import instance_model

__all__ = ["allreduce_fusion", "dp_rank_share", "graph_padding", "graph_sizes",
           "instance_runtime", "knob"]


def instance_runtime(d: Deployment, gpu: GPUSpec,
                     disaggregated: bool | None = None) -> EngineRuntime | None:
    """The instance's engine runtime (:func:`~serveplan.estimator.runtime.engine_runtime`)
    for its model, GPUs an instance and whether its deployment is disaggregated (None: not
    said), or None without an engine."""
    if d.engine is None:
        return None
    return engine_runtime(d.engine, d.engine_version, gpu.name, gpu.memory_bytes / 2**30,
                          d.runtime_profile, model=resolve_model(instance_model(d)),
                          instance_gpus=instance_gpus(d), disaggregated=disaggregated)


def knob(d: Deployment, name: str, rt: EngineRuntime | None, fallback=None):
    """A knob as the user set it, else the engine's default, else the config default (or
    ``fallback`` where the config has none)."""
    if name in d.model_fields_set or rt is None:
        value = getattr(d, name)
    elif name == "scheduler":
        return rt.entry.scheduler
    elif name in ("async_scheduling", "num_scheduler_steps"):
        return getattr(rt.entry, name)
    else:
        value = rt.defaults.get(name, getattr(d, name))
    return fallback if value is None else value


def graph_sizes(d: Deployment, rt: EngineRuntime | None, gpu: GPUSpec,
                 padding: bool) -> list[int] | None:
    """The instance's CUDA-graph capture sizes: as given, else the engine's own default
    (SGLang's by GPU memory and tp, TensorRT-LLM's by ``padding``), else None (the
    oracle's vLLM default)."""
    if d.cuda_graph_sizes is not None or rt is None or rt.engine == "vllm":
        return d.cuda_graph_sizes
    if rt.engine == "trtllm":
        return trtllm_cuda_graph_sizes(padding=padding)
    gib = gpu.memory_bytes / 2**30
    return sglang_cuda_graph_sizes(gib, d.tp, speculative=d.speculative is not None)


def graph_padding(d: Deployment, rt: EngineRuntime | None) -> bool:
    """Whether a decode step pads to the next capture size: as given, else all engines'
    default but TensorRT-LLM's (``cuda_graph_config.enable_padding`` False)."""
    if d.cuda_graph_padding is not None:
        return d.cuda_graph_padding
    return rt is None or rt.engine != "trtllm"


def allreduce_fusion(d: Deployment, rt: EngineRuntime | None) -> bool:
    """Norms fused into the all-reduces: as given, else the engine's default; never under
    attention DP (TensorRT-LLM's ``enable_fusion`` excludes it)."""
    return bool(knob(d, "allreduce_fusion", rt)) and d.dp == 1


def dp_rank_share(rt: EngineRuntime | None, d: Deployment, value: int, page: int = 1) -> int:
    """One attention data-parallel rank's share of a server-wide limit
    (:data:`~serveplan.estimator.runtime.DP_SHARED_LIMITS`; a chunk kept to whole pages of
    ``page`` tokens)."""
    if rt is None or rt.engine not in DP_SHARED_LIMITS or d.dp == 1:
        return value
    return max(page, value // d.dp // page * page)
