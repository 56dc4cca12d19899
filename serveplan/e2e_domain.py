"""The measured runs an engine's runtime terms were fitted on, as the profile records them.

A runtime profile's terms (:mod:`serveplan.e2e_fit`) are fitted on the end-to-end rows of
one engine. They carry to a deployment like those rows' and are a guess for one unlike
them: the shipped SGLang terms, for one, come from large MoE models on Blackwell GPUs only.
:func:`fit_domain` summarises the rows -- their GPUs, their models, whether any model was
dense and any a mixture of experts, the GPUs of their engine instances, whether they ran
colocated or disaggregated, the engine versions they ran -- into the profile's
``domain`` (:class:`~serveplan.estimator.runtime.FitDomain`), which the simulation checks
every deployment of the engine against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from serveplan.deployments import instance_gpus
from serveplan.e2e import deployment
from serveplan.e2e_served import served
from serveplan.e2e_versions import engine_version
from serveplan.estimator.catalog import resolve_gpu, resolve_model
from serveplan.estimator.runtime import DOMAIN_ASPECTS, FitDomain, parse_version
from serveplan.pools_config import to_pools

__all__ = ["DOMAIN_SOURCE", "RowFacts", "domain_of", "fit_domain", "row_facts", "row_outside"]

DOMAIN_SOURCE = "measured runs of e2e/aic_silicon_blackwell (InferenceX's exports)"


@dataclass(frozen=True)
class RowFacts:
    """What a fit domain reads of one end-to-end row: the GPU as the catalog spells it, the
    HF model id and the served model's spec, the engine release (None: a nightly build or
    not recorded), the GPUs of each of its engine instances and whether it ran
    disaggregated."""

    gpu: str
    model: str
    spec: object
    version: str | None
    instance_gpus: tuple[int, ...]
    disaggregated: bool


def row_facts(row, data_dir: Path) -> RowFacts:
    """:class:`RowFacts` of ``row`` (an expressible :class:`~serveplan.e2e.E2ERow`): its
    instances as :func:`~serveplan.e2e.deployment` rebuilds them (a colocated instance, a
    prefill or a decode worker)."""
    pools = to_pools(deployment(row, data_dir)).pools
    return RowFacts(resolve_gpu(row.system).name, row.model,
                    resolve_model(served(row, data_dir).model),
                    engine_version(row.engine, row.version, row.measured),
                    tuple(instance_gpus(p) for p in pools), row.mode != "agg")


def domain_of(facts: Sequence[RowFacts], source: str = DOMAIN_SOURCE) -> FitDomain:
    """The fit domain of rows with these facts (:func:`fit_domain`)."""
    if not facts:
        raise ValueError("a fit domain needs at least one row")
    versions = sorted({parse_version(f.version) for f in facts if f.version is not None})
    span = tuple(".".join(map(str, v)) for v in (versions[0], versions[-1])) if versions else None
    return FitDomain.of(f"{len(facts):,} {source}, each run once", {f.gpu for f in facts},
                        {f.model: f.spec for f in facts}, span,
                        [n for f in facts for n in f.instance_gpus],
                        [f.disaggregated for f in facts])


def fit_domain(rows: Sequence, data_dir: Path, source: str = DOMAIN_SOURCE) -> FitDomain:
    """The domain of terms fitted on ``rows`` (one engine's expressible
    :class:`~serveplan.e2e.E2ERow`): GPU names as the catalog spells them, HF model ids,
    the GPUs of every instance the rows ran, whether they ran colocated or disaggregated,
    and the oldest and newest engine release the rows ran (release numbers only, as
    :func:`~serveplan.estimator.runtime.parse_version` compares them; a nightly build adds
    none)."""
    return domain_of([row_facts(r, data_dir) for r in rows], source)


def row_outside(domain: FitDomain, facts: RowFacts) -> dict[str, str]:
    """How a row with ``facts`` lies outside ``domain``, by aspect
    (:meth:`~serveplan.estimator.runtime.FitDomain.outside_by_aspect`; an instance size
    outside is named for the first instance outside)."""
    how: dict[str, str] = {}
    for size in facts.instance_gpus:
        found = domain.outside_by_aspect(facts.gpu, facts.spec, facts.version, size,
                                         facts.disaggregated)
        how.update({k: v for k, v in found.items() if k not in how})
    return {k: how[k] for k in DOMAIN_ASPECTS if k in how}
