"""``serveplan.simulate``: configs in, an ``xarray.Dataset`` of per-request results out.

>>> ds = simulate({"model": "llama-3.1-8b", "gpu": "h100"},
...               {"kind": "poisson", "rate": 4, "num_requests": 200}, seed=0)  # doctest: +SKIP
>>> summarize(ds)["median_ttft_ms"]                                             # doctest: +SKIP

One path for every architecture: :func:`serveplan.resolution.resolve` turns the deployment
(any form: colocated, ``architecture: pd``, or role ``pools``) into role pools, each
resolved once (cost oracle, vLLM defaults, KV capacity from the memory planner unless
``num_gpu_blocks`` is given; the KV link between prefill and decode pools); the requests
are drawn from the workload and :func:`serveplan.sim.loop_api.run_pools` runs them. The
resolved values go to the Dataset's ``attrs`` next to the input config, so a stored result
says exactly what was simulated.
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from serveplan._version import __version__
from serveplan.config import (
    SLO,
    AnyDeployment,
    ClosedLoopWorkload,
    ConstantWorkload,
    FixedLength,
    GammaWorkload,
    LogNormalLength,
    PoissonWorkload,
    SimulationConfig,
    TraceLength,
    TraceWorkload,
    UniformLength,
)
from serveplan.resolution import (
    POLICIES,
    ROUTERS,
    ResolvedDeployment,
    ResolvedServing,
    resolve,
    resolve_deployment,
)
from serveplan.sim import traces
from serveplan.sim import workload as W
from serveplan.sim.loop_api import run_pools
from serveplan.sim.results import summarize, to_dataset


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
def _run(resolved: ResolvedServing, requests, record_steps: int = 1 << 16, *,
         router: str | None = None):
    """Run ``requests`` on a resolved deployment: the one call into the simulator.

    ``router`` overrides the router a comparison varies: the decode router of a
    prefill/decode deployment, the entry router of a colocated one.
    """
    pd = resolved.architecture == "pd"
    entry = resolved.router if pd else (router or resolved.router)
    return run_pools(requests, resolved.pool_specs(), router=entry,
                     handoff=resolved.handoff(router if pd else None),
                     record_steps=record_steps, frontend=resolved.front_end())


def make_dataset(cfg: SimulationConfig, resolved: ResolvedServing, result) -> xr.Dataset:
    """The Dataset of a run, with the config, resolved values and summary in ``attrs``."""
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


def run_resolved(resolved: ResolvedServing, requests, *, router: str | None = None,
                 record_steps: int = 1 << 16):
    """Run ``requests`` on a resolved deployment (``router`` overrides the decode router of
    a prefill/decode deployment, the router of a colocated one); the simulator's result."""
    return _run(resolved, requests, record_steps, router=router)


def run_config(cfg: SimulationConfig) -> xr.Dataset:
    """Simulate a validated :class:`~serveplan.config.SimulationConfig` (any deployment
    form): resolve, draw the requests, run, build the Dataset."""
    resolved = resolve(cfg.deployment)
    requests = build_requests(cfg.workload, cfg.seed, block_size=resolved.block_size)
    result = _run(resolved, requests, cfg.record_steps)
    return make_dataset(cfg, resolved, result)


def simulate(deployment: AnyDeployment | dict, workload, seed: int = 0, *,
             slo: SLO | dict | None = None, record_steps: int = 1 << 16) -> xr.Dataset:
    """Simulate ``workload`` on ``deployment``; per-request results as a Dataset.

    Parameters
    ----------
    deployment : Deployment, PDDeployment, PoolsDeployment or dict
        Model, GPU, parallelism, scheduler, router and vLLM engine knobs; or, with
        ``architecture: pd``, prefill and decode pools, a decode router and the KV link;
        or a list of role ``pools`` (:mod:`serveplan.pools_config`).
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


__all__ = ["POLICIES", "ROUTERS", "ResolvedDeployment", "ResolvedServing", "build_requests",
           "length_dist", "make_dataset", "resolve", "resolve_deployment", "run_config",
           "run_resolved", "simulate"]
