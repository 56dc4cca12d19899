"""Deployments the planner compares: colocated (``xm``) and prefill/decode disaggregated (``ypzd``).

Both deployment models, :class:`~serveplan.config.Deployment` and
:class:`~serveplan.config.PDDeployment` (``architecture: pd`` with ``prefill`` and ``decode``
pools, each an :class:`~serveplan.config.InstanceConfig` plus ``num_instances``), live in
:mod:`serveplan.pools_config` and are re-exported here. :func:`parse_deployment` reads either
from a mapping (``architecture`` defaults to ``colocated``), and turns the pool form
(:class:`~serveplan.pools_config.PoolsDeployment`, a ``pools`` list) into the one of them
it describes. Names follow BestServe: ``4m`` is four colocated instances, ``3p2d`` three
prefill and two decode instances.
"""

from __future__ import annotations

from serveplan.pools_config import (
    Deployment,
    InstanceConfig,
    PDDeployment,
    Pool,
    PoolsDeployment,
    parse_architecture,
    to_legacy,
)

__all__ = ["PDDeployment", "Pool", "gpus", "instance_gpus", "parse_deployment", "pool_gpus",
           "strategy_name"]


AnyDeployment = Deployment | PDDeployment


def parse_deployment(data) -> AnyDeployment:
    """A :class:`Deployment` or :class:`PDDeployment` from a model or a mapping (the pool
    form converted)."""
    if isinstance(data, (Deployment, PDDeployment)):
        return data
    if isinstance(data, PoolsDeployment):
        return to_legacy(data)
    if not isinstance(data, dict):
        raise TypeError(f"a deployment must be a mapping, got {type(data).__name__}")
    if "pools" not in data and data.get("architecture", "colocated") not in ("colocated",
                                                                               "pd"):
        raise ValueError(f"deployment.architecture given an invalid value: "
                         f"{data['architecture']!r} (valid: 'colocated', 'pd')")
    return to_legacy(parse_architecture(data))


def strategy_name(d: AnyDeployment | PoolsDeployment) -> str:
    """BestServe's notation: ``4m`` or ``3p2d``; ``4p8a2f`` for attention/FFN
    disaggregation (prefill, attention, FFN instances)."""
    if isinstance(d, PoolsDeployment) and d.architecture == "afd":
        return "".join(f"{d.pool(role).count}{role[0]}" for role in ("prefill", "attention",
                                                                     "ffn"))
    d = to_legacy(d)
    if isinstance(d, PDDeployment):
        return f"{d.prefill.num_instances}p{d.decode.num_instances}d"
    return f"{d.num_instances}m"


def instance_gpus(c: InstanceConfig) -> int:
    """GPUs one instance of a pool runs on: its tensor, pipeline and attention-DP ranks."""
    return c.tp * c.pp * c.dp


def pool_gpus(d: AnyDeployment | PoolsDeployment) -> list[tuple[str, int]]:
    """``[(gpu type as given, GPUs)]``, one entry per role pool of the deployment."""
    if isinstance(d, PoolsDeployment):
        return [(p.gpu, p.count * instance_gpus(p)) for p in d.pools]
    if isinstance(d, PDDeployment):
        return [(p.gpu, p.num_instances * instance_gpus(p)) for p in (d.prefill, d.decode)]
    return [(d.gpu, d.num_instances * instance_gpus(d))]


def gpus(d: AnyDeployment | PoolsDeployment) -> int:
    """GPUs the deployment uses."""
    return sum(n for _, n in pool_gpus(d))
