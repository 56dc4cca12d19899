"""Names of the former disaggregated facade, kept for code that imports them from here.

Every architecture now goes through one path (:mod:`serveplan.simulation`: resolve the
deployment into role pools with :func:`serveplan.resolution.resolve`, run them, build the
Dataset). :func:`resolve_pd` is :func:`~serveplan.resolution.resolve` restricted to
prefill/decode deployments; :class:`ResolvedPD` is its result type
(:class:`~serveplan.resolution.ResolvedServing`).
"""

from __future__ import annotations

import xarray as xr

from serveplan.config import PDDeployment, PoolsDeployment, SimulationConfig
from serveplan.resolution import ResolvedServing, resolve
from serveplan.simulation import make_dataset, run_config, run_resolved

ResolvedPD = ResolvedServing


def resolve_pd(deployment: PDDeployment | PoolsDeployment | dict) -> ResolvedServing:
    """Resolve both pools (defaults, memory plans) and the KV link of a prefill/decode
    deployment.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If a pool's model does not fit its GPUs (the memory planner's reason).
    ValueError
        If the deployment is not a prefill/decode one.
    """
    resolved = resolve(deployment)
    if resolved.architecture != "pd":
        raise ValueError("resolve_pd takes a prefill/decode deployment; got a "
                         f"{resolved.architecture} one")
    return resolved


def pd_dataset(cfg: SimulationConfig, resolved: ResolvedServing, result) -> xr.Dataset:
    """The Dataset of a run, with the config, resolved values and summary in ``attrs``."""
    return make_dataset(cfg, resolved, result)


def run_pd_config(cfg: SimulationConfig) -> xr.Dataset:
    """Simulate a validated config whose deployment is a prefill/decode one."""
    return run_config(cfg)


__all__ = ["ResolvedPD", "pd_dataset", "resolve_pd", "run_pd_config", "run_resolved"]
