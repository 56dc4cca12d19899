"""``serveplan.simulate``: configs in, an ``xarray.Dataset`` of per-request results out.

>>> ds = simulate({"model": "llama-3.1-8b", "gpu": "h100"},
...               {"kind": "poisson", "rate": 4, "num_requests": 200}, seed=0)  # doctest: +SKIP
>>> summarize(ds)["median_ttft_ms"]                                             # doctest: +SKIP

The facade resolves the deployment once (cost oracle, vLLM defaults, KV capacity from the
memory planner unless ``num_gpu_blocks`` is given), draws the requests from the workload
and runs :func:`serveplan.sim.engine.run_engine`. The resolved values go to the Dataset's
``attrs`` next to the input config, so a stored result says exactly what was simulated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import xarray as xr

from serveplan.config import (
    SLO,
    ClosedLoopWorkload,
    ConstantWorkload,
    Deployment,
    FixedLength,
    GammaWorkload,
    LogNormalLength,
    PoissonWorkload,
    SimulationConfig,
    TraceLength,
    TraceWorkload,
    UniformLength,
)
from serveplan.estimator.memory import default_block_size, plan_memory
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.specs import Parallelism
from serveplan.sim import traces
from serveplan.sim import workload as W
from serveplan.sim.engine import EngineParams, run_engine
from serveplan.sim.results import summarize, to_dataset
from serveplan.sim.state import Policy, Router

POLICIES = {"vllm-v1": Policy.VLLM_V1, "sglang": Policy.SGLANG,
            "prefill-priority": Policy.PREFILL_PRIORITY}
ROUTERS = {"round-robin": Router.ROUND_ROBIN,
           "least-outstanding-tokens": Router.LEAST_OUTSTANDING_TOKENS,
           "least-requests": Router.LEAST_REQUESTS}


@dataclass(frozen=True, eq=False)
class ResolvedDeployment:
    """A deployment with every default filled in: oracle, engine knobs, memory plan."""

    deployment: Deployment
    oracle: CostOracle
    params: EngineParams
    memory: dict | None  # the memory plan (None when num_gpu_blocks was given)

    def describe(self) -> dict:
        p = self.params
        return {
            **self.oracle.describe(),
            "scheduler": self.deployment.scheduler,
            "num_instances": self.deployment.num_instances,
            "router": self.deployment.router,
            "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "block_size": p.block_size,
            "num_gpu_blocks": p.num_gpu_blocks + 1,
            "usable_kv_blocks": p.num_gpu_blocks,
            "enable_prefix_caching": p.enable_prefix_caching,
            "enable_chunked_prefill": p.chunked,
            "long_prefill_token_threshold": p.long_prefill_token_threshold,
            "watermark": p.watermark,
            "max_model_len": p.max_model_len,
            "memory_plan": self.memory,
        }


def resolve_deployment(deployment: Deployment | dict) -> ResolvedDeployment:
    """Fill vLLM's defaults and size the KV cache.

    ``num_gpu_blocks`` counts vLLM's null block, so the engine gets one block fewer.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If the model does not fit (the memory planner's reason).
    """
    d = deployment if isinstance(deployment, Deployment) else Deployment.model_validate(deployment)
    oracle = CostOracle(d.model, d.gpu, tp=d.tp, pp=d.pp, ep=d.ep, dp=d.dp, dtype=d.dtype,
                        kv_dtype=d.kv_dtype, cuda_graph=d.cuda_graph, profile=d.profile,
                        max_num_seqs=d.max_num_seqs)
    max_len = d.max_model_len or oracle.model.max_position_embeddings
    policy = POLICIES[d.scheduler]
    chunked = d.enable_chunked_prefill and policy != Policy.PREFILL_PRIORITY
    mnbt = d.max_num_batched_tokens or (8192 if chunked else max(max_len, 2048))
    if not chunked and mnbt < max_len:
        raise ValueError(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_len}): "
            f"without chunked prefill ({d.scheduler}) a step must hold a whole prompt; raise "
            f"max_num_batched_tokens, lower max_model_len or enable chunked prefill")
    block_size = d.block_size or default_block_size(oracle.model)
    memory = None
    if d.num_gpu_blocks is not None:
        num_blocks = d.num_gpu_blocks
    else:
        plan = plan_memory(oracle.model, oracle.gpu,
                           Parallelism(tp=d.tp, pp=d.pp, ep=d.ep, dp=d.dp),
                           gpu_memory_utilization=d.gpu_memory_utilization,
                           max_num_batched_tokens=mnbt, max_num_seqs=d.max_num_seqs,
                           max_model_len=max_len, block_size=block_size,
                           dtype=oracle.weight_dtype, kv_dtype=d.kv_dtype,
                           profile=oracle.profile)
        plan.raise_if_unfit()
        num_blocks = plan.num_gpu_blocks
        memory = plan.as_dict()
    watermark = d.watermark if d.watermark is not None else (
        0.01 if policy == Policy.PREFILL_PRIORITY else 0.0)
    params = EngineParams(
        num_gpu_blocks=num_blocks - 1, policy=policy, max_num_seqs=d.max_num_seqs,
        max_num_batched_tokens=mnbt, block_size=block_size,
        enable_prefix_caching=d.enable_prefix_caching, enable_chunked_prefill=chunked,
        long_prefill_token_threshold=d.long_prefill_token_threshold, watermark=watermark,
        max_model_len=max_len)
    return ResolvedDeployment(d, oracle, params, memory)


# ----------------------------------------------------------------------------- workloads
def length_dist(spec) -> W.LengthDist:
    """The sampler for a length spec (an int is a fixed length)."""
    if isinstance(spec, int):
        return W.Fixed(spec)
    if isinstance(spec, FixedLength):
        return W.Fixed(spec.value)
    if isinstance(spec, UniformLength):
        return W.Uniform(spec.low, spec.high)
    if isinstance(spec, LogNormalLength):
        if spec.mean is not None:
            return W.LogNormal.from_mean(spec.mean, spec.sigma, spec.max)
        return W.LogNormal(spec.median, spec.sigma, spec.max)
    if isinstance(spec, TraceLength):
        tr = traces.read_trace(spec.path, skip_bad_lines=spec.skip_bad_lines)
        return tr.prompt_dist() if spec.column == "prompt" else tr.output_dist()
    raise TypeError(f"unknown length spec {spec!r}")


def _arrival_process(kind: str, rate: float, cv: float = 1.0):
    if kind == "poisson":
        return W.PoissonArrivals(rate)
    if kind == "gamma":
        return W.GammaArrivals(rate, cv)
    return W.ConstantArrivals(rate)


def build_requests(workload, seed: int = 0, *, block_size: int = 16) -> W.Requests:
    """Draw (or read) the requests of a workload config.

    Synthetic shared prefixes are hashed at ``block_size`` (the engine's block size).
    """
    if isinstance(workload, TraceWorkload):
        return _trace_requests(workload, seed)
    if isinstance(workload, ClosedLoopWorkload):
        arrivals = W.ClosedLoop(workload.concurrency)
    elif isinstance(workload, (PoissonWorkload, ConstantWorkload)):
        arrivals = _arrival_process(workload.kind, workload.rate)
    elif isinstance(workload, GammaWorkload):
        arrivals = W.GammaArrivals(workload.rate, workload.cv)
    else:
        raise TypeError(f"unknown workload {workload!r}")
    prefix = None
    if workload.prefix is not None:
        prefix = W.PrefixSharing(workload.prefix.num_groups, workload.prefix.prefix_len,
                                 block_size)
    return W.generate_requests(workload.num_requests, arrivals, length_dist(workload.isl),
                               length_dist(workload.osl), seed, prefix=prefix)


def _trace_requests(w: TraceWorkload, seed: int) -> W.Requests:
    tr = traces.read_trace(w.path, limit=w.num_requests, skip_bad_lines=w.skip_bad_lines)
    if len(tr) == 0:
        raise ValueError(f"{w.path}: no requests read")
    if w.arrival == "trace":
        if tr.arrival_s is None:
            raise ValueError(f"{w.path} has no timestamps; set workload.arrival to poisson, "
                             "gamma or constant and give a rate")
        req = tr.to_requests(time_scale=w.time_scale, rate=w.rate)
    else:
        n = w.num_requests or len(tr)
        req = tr.to_requests(arrival_s=np.zeros(len(tr)))
        req = W.tile_requests(req, n, gap_s=0.0) if n > len(req) else req.take(slice(0, n))
        return req.with_arrivals(_arrival_process(w.arrival, w.rate, w.cv).sample(n, seed))
    if w.num_requests is not None and w.num_requests > len(req):
        req = W.tile_requests(req, w.num_requests)
    return req


# ----------------------------------------------------------------------------- running
def run_config(cfg: SimulationConfig) -> xr.Dataset:
    """Simulate a validated :class:`~serveplan.config.SimulationConfig`."""
    if cfg.deployment.architecture == "pd":
        from serveplan.pd_simulation import run_pd_config

        return run_pd_config(cfg)
    resolved = resolve_deployment(cfg.deployment)
    requests = build_requests(cfg.workload, cfg.seed, block_size=resolved.params.block_size)
    d = resolved.deployment
    result = run_engine(requests, resolved.oracle, resolved.params,
                        num_instances=d.num_instances, router=ROUTERS[d.router],
                        record_steps=cfg.record_steps)
    from serveplan import __version__

    attrs = {
        "config": cfg.model_dump_json(),
        "resolved": json.dumps(resolved.describe(), default=float),
        "serveplan_version": __version__,
        "seed": cfg.seed,
    }
    ds = to_dataset(result, attrs=attrs)
    slo = cfg.slo.model_dump() if cfg.slo is not None else None
    ds.attrs["summary"] = json.dumps(summarize(ds, slo), default=float)
    return ds


def simulate(deployment: Deployment | dict, workload, seed: int = 0, *,
             slo: SLO | dict | None = None, record_steps: int = 1 << 16) -> xr.Dataset:
    """Simulate ``workload`` on ``deployment``; per-request results as a Dataset.

    Parameters
    ----------
    deployment : Deployment, PDDeployment or dict
        Model, GPU, parallelism, scheduler, router and vLLM engine knobs; or, with
        ``architecture: pd``, prefill and decode pools, a decode router and the KV link.
    workload : a workload model or dict
        ``kind`` poisson / gamma / constant / closed-loop / trace and its fields.
    seed : int
        Seed of the workload draw (the engine itself is deterministic).
    slo : SLO or dict, optional
        Adds the SLO verdict to ``attrs["summary"]``.
    record_steps : int
        Capacity of the per-step time series (decimated beyond).

    Returns
    -------
    xarray.Dataset
        Per-request variables on ``request``, time series on ``step``, per-instance
        totals on ``instance``; ``attrs``: ``config``, ``resolved``, ``summary`` (JSON),
        ``serveplan_version``. Write it with ``ds.to_netcdf(path, engine="h5netcdf")``.
    """
    cfg = SimulationConfig.model_validate({
        "deployment": deployment if isinstance(deployment, dict) else deployment.model_dump(),
        "workload": workload if isinstance(workload, dict) else workload.model_dump(),
        "slo": slo if slo is None or isinstance(slo, dict) else slo.model_dump(),
        "seed": seed,
        "record_steps": record_steps,
    })
    return run_config(cfg)
