"""The measured runs an engine's runtime terms were fitted on, as the profile records them.

A runtime profile's terms (:mod:`serveplan.e2e_fit`) are fitted on the end-to-end rows of
one engine. They carry to a deployment like those rows' and are a guess for one unlike
them: the shipped SGLang terms, for one, come from large MoE models on Blackwell GPUs only.
:func:`fit_domain` summarises the rows -- their GPUs, their models, whether any model was
dense and any a mixture of experts, the GPUs of their engine instances, the engine
versions they ran -- into the profile's
``domain`` (:class:`~serveplan.estimator.runtime.FitDomain`), which the simulation checks
every deployment of the engine against.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from serveplan.deployments import instance_gpus
from serveplan.e2e import deployment
from serveplan.e2e_served import served
from serveplan.e2e_versions import engine_version
from serveplan.estimator.catalog import resolve_gpu, resolve_model
from serveplan.estimator.runtime import FitDomain, parse_version
from serveplan.pools_config import to_pools

__all__ = ["DOMAIN_SOURCE", "fit_domain"]

DOMAIN_SOURCE = "measured runs of e2e/aic_silicon_blackwell (InferenceX's exports)"


def fit_domain(rows: Sequence, data_dir: Path, source: str = DOMAIN_SOURCE) -> FitDomain:
    """The domain of terms fitted on ``rows`` (one engine's expressible
    :class:`~serveplan.e2e.E2ERow`): GPU names as the catalog spells them, HF model ids,
    the GPUs of every instance the rows ran (a colocated instance, a prefill or a decode
    worker, as :func:`~serveplan.e2e.deployment` rebuilds it), and the oldest and newest
    engine release the rows ran (release numbers only, as
    :func:`~serveplan.estimator.runtime.parse_version` compares them; a nightly build adds
    none)."""
    if not rows:
        raise ValueError("a fit domain needs at least one row")
    specs = {r.model: resolve_model(served(r, data_dir).model) for r in rows}
    versions = sorted({parse_version(v) for r in rows
                       if (v := engine_version(r.engine, r.version, r.measured)) is not None})
    span = tuple(".".join(map(str, v)) for v in (versions[0], versions[-1])) if versions else None
    sizes = [instance_gpus(p) for r in rows for p in to_pools(deployment(r, data_dir)).pools]
    return FitDomain.of(f"{len(rows):,} {source}, each run once",
                        {resolve_gpu(r.system).name for r in rows}, specs, span, sizes)
