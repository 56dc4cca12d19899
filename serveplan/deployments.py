"""Deployments the planner compares: colocated (``xm``) and prefill/decode disaggregated (``ypzd``).

The colocated :class:`~serveplan.config.Deployment` comes from :mod:`serveplan.config`.
:class:`PDDeployment` is defined here, shaped as ``serveplan.config`` announces its future
PD member (``architecture: pd`` with ``prefill`` and ``decode`` pools, each an
:class:`~serveplan.config.InstanceConfig` plus ``num_instances``), so that moving it there is
a rename. :func:`parse_deployment` reads either from a mapping (``architecture`` defaults
to ``colocated``). Names follow BestServe: ``4m`` is four colocated instances, ``3p2d``
three prefill and two decode instances.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from serveplan.config import Deployment, InstanceConfig

__all__ = ["PDDeployment", "Pool", "gpus", "parse_deployment", "strategy_name"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pool(InstanceConfig):
    """``num_instances`` identical instances of one role."""

    num_instances: int = Field(1, ge=1)


class PDDeployment(_Frozen):
    """Prefill/decode disaggregation: a prefill pool hands KV caches to a decode pool.

    ``kv_link_bw`` is the per-GPU bandwidth (bytes/s) of the KV transfer; by default the
    GPU's scale-up link (NVLink) when one prefill and one decode instance fit in a node,
    else its scale-out network. ``kv_connector`` names vLLM's KV connector for launch export.
    """

    architecture: Literal["pd"] = "pd"
    prefill: Pool
    decode: Pool
    kv_link_bw: float | None = Field(None, gt=0)
    kv_link_latency_s: float | None = Field(None, ge=0)
    kv_connector: str = "NixlConnector"


AnyDeployment = Deployment | PDDeployment


def parse_deployment(data) -> AnyDeployment:
    """A :class:`Deployment` or :class:`PDDeployment` from a model or a mapping."""
    if isinstance(data, (Deployment, PDDeployment)):
        return data
    if not isinstance(data, dict):
        raise TypeError(f"a deployment must be a mapping, got {type(data).__name__}")
    arch = data.get("architecture", "colocated")
    if arch == "pd":
        return PDDeployment.model_validate(data)
    if arch == "colocated":
        return Deployment.model_validate(data)
    raise ValueError(f"deployment.architecture given an invalid value: {arch!r} "
                     "(valid: 'colocated', 'pd')")


def strategy_name(d: AnyDeployment) -> str:
    """BestServe's notation: ``4m`` or ``3p2d``."""
    if isinstance(d, PDDeployment):
        return f"{d.prefill.num_instances}p{d.decode.num_instances}d"
    return f"{d.num_instances}m"


def _instance_gpus(c: InstanceConfig) -> int:
    return c.tp * c.pp * c.dp


def gpus(d: AnyDeployment) -> int:
    """GPUs the deployment uses."""
    if isinstance(d, PDDeployment):
        return (d.prefill.num_instances * _instance_gpus(d.prefill)
                + d.decode.num_instances * _instance_gpus(d.decode))
    return d.num_instances * _instance_gpus(d)
