"""Simulating a disaggregated (``architecture: pd``) deployment: configs in, a Dataset out.

:func:`serveplan.simulate` and ``serveplan simulate`` land here for a
:class:`~serveplan.config.PDDeployment`. Each pool is resolved like a colocated deployment
(cost oracle, vLLM defaults, KV blocks from the memory planner), the KV link is derived from
the model's per-rank KV layout and the GPUs' links (:meth:`serveplan.sim.pd.KVLink.from_specs`),
and :func:`serveplan.sim.pd.run_pd` runs the requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import xarray as xr

from serveplan.config import Deployment, PDDeployment, Pool, SimulationConfig
from serveplan.sim.pd import FittedThroughputCost, KVLink, PDResult, PoolSpec, run_pd
from serveplan.sim.pd_results import summarize_pd, to_pd_dataset


@dataclass(frozen=True, eq=False)
class ResolvedPD:
    """A PD deployment with both pools resolved and its KV link."""

    deployment: PDDeployment
    prefill: object  # serveplan.simulation.ResolvedDeployment
    decode: object
    link: KVLink
    decode_cost: object

    @property
    def prefill_spec(self) -> PoolSpec:
        return PoolSpec(self.prefill.params, self.prefill.oracle,
                        self.deployment.prefill.num_instances)

    @property
    def decode_spec(self) -> PoolSpec:
        return PoolSpec(self.decode.params, self.decode_cost, self.deployment.decode.num_instances)

    def describe(self) -> dict:
        d = self.deployment
        link = self.link
        return {
            "architecture": "pd",
            "strategy": f"{d.prefill.num_instances}p{d.decode.num_instances}d",
            "prefill": {**self.prefill.describe(), "num_instances": d.prefill.num_instances},
            "decode": {**self.decode.describe(), "num_instances": d.decode.num_instances,
                       "decode_cost": (d.decode_cost if isinstance(d.decode_cost, str)
                                       else d.decode_cost.model_dump())},
            "router": d.router,
            "prefill_router": d.prefill_router,
            "assignment": d.assignment,
            "layerwise_transfer": d.layerwise_transfer,
            "prefill_stage": d.prefill_stage,
            "placement": d.placement,
            "kv_bytes_per_token": link.bytes_per_token,
            "kv_seconds_per_token": {"scale_up": link.seconds_per_token[0],
                                     "scale_out": link.seconds_per_token[1]},
            "kv_latency_s": {"scale_up": link.latency_s[0], "scale_out": link.latency_s[1]},
            "sibyl": d.sibyl.model_dump(),
        }


def _pool_deployment(pool: Pool) -> Deployment:
    return Deployment.model_validate(pool.model_dump())


def resolve_pd(deployment: PDDeployment | dict) -> ResolvedPD:
    """Resolve both pools (defaults, memory plans) and the KV link.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If a pool's model does not fit its GPUs (the memory planner's reason).
    """
    from serveplan.simulation import resolve_deployment

    d = deployment if isinstance(deployment, PDDeployment) else \
        PDDeployment.model_validate(deployment)
    pre = resolve_deployment(_pool_deployment(d.prefill))
    dec = resolve_deployment(_pool_deployment(d.decode))
    link = KVLink.from_specs(pre.oracle, dec.oracle, d.prefill.num_instances,
                             d.decode.num_instances, placement=d.placement,
                             bandwidth=d.kv_link_bw, latency_s=d.kv_link_latency_s)
    cost = dec.oracle
    if not isinstance(d.decode_cost, str):
        c = d.decode_cost
        cost = FittedThroughputCost(c.alpha, c.beta, c.gamma, c.min_tps, c.plateau)
    return ResolvedPD(d, pre, dec, link, cost)


def run_resolved(resolved: ResolvedPD, requests, *, router: str | None = None,
                 record_steps: int = 1 << 16) -> PDResult:
    """Run ``requests`` on a resolved PD deployment (``router`` overrides its router)."""
    d = resolved.deployment
    s = d.sibyl
    return run_pd(requests, resolved.prefill_spec, resolved.decode_spec, link=resolved.link,
                  router=router or d.router, prefill_router=d.prefill_router,
                  assignment=d.assignment, layerwise=d.layerwise_transfer,
                  prefill_stage=d.prefill_stage, sibyl_delta=s.delta, sibyl_alpha=s.alpha,
                  sibyl_max_length=s.max_length, pending_capacity=s.pending_capacity,
                  prefill_hold=d.prefill_hold, record_steps=record_steps)


def pd_dataset(cfg: SimulationConfig, resolved: ResolvedPD, result: PDResult) -> xr.Dataset:
    """The Dataset of a run, with the config, resolved values and summary in ``attrs``."""
    from serveplan import __version__

    attrs = {
        "config": cfg.model_dump_json(),
        "resolved": json.dumps(resolved.describe(), default=float),
        "serveplan_version": __version__,
        "seed": cfg.seed,
    }
    ds = to_pd_dataset(result, attrs=attrs)
    slo = cfg.slo.model_dump() if cfg.slo is not None else None
    ds.attrs["summary"] = json.dumps(summarize_pd(ds, slo), default=float)
    return ds


def run_pd_config(cfg: SimulationConfig) -> xr.Dataset:
    """Simulate a validated config whose deployment is a :class:`PDDeployment`."""
    from serveplan.simulation import build_requests

    resolved = resolve_pd(cfg.deployment)
    requests = build_requests(cfg.workload, cfg.seed,
                              block_size=resolved.prefill.params.block_size)
    result = run_resolved(resolved, requests, record_steps=cfg.record_steps)
    return pd_dataset(cfg, resolved, result)


__all__ = ["ResolvedPD", "pd_dataset", "resolve_pd", "run_pd_config", "run_resolved"]
