"""serveplan: plan LLM serving deployments on one CPU.

The public Python API: :class:`CostOracle` (step costs), :func:`plan_memory` (KV blocks),
and the catalog resolvers. Importing this package compiles nothing.
"""

from serveplan._version import __version__ as __version__
from serveplan.estimator.catalog import list_gpus, list_models, resolve_gpu, resolve_model
from serveplan.estimator.memory import MemoryPlan, plan_memory
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import Profile, load_profile
from serveplan.estimator.specs import GPUSpec, ModelSpec, Parallelism

__all__ = [
    "CostOracle",
    "GPUSpec",
    "MemoryPlan",
    "ModelSpec",
    "Parallelism",
    "Profile",
    "list_gpus",
    "list_models",
    "load_profile",
    "plan_memory",
    "resolve_gpu",
    "resolve_model",
    "simulate",
]


def __getattr__(name: str):
    if name == "simulate":  # lazy: the simulator imports xarray
        from serveplan.simulation import simulate

        return simulate
    raise AttributeError(f"module 'serveplan' has no attribute {name!r}")
