"""Prefill/decode disaggregation (xPyD): :func:`run_pd`, the one loop with two pools.

A disaggregated deployment is a ``PREFILL`` pool and a ``DECODE`` pool joined by a
:class:`~serveplan.sim.pools.Handoff` (:mod:`serveplan.sim.pools`); this module is its
convenience entry point. The events of the request path are in :mod:`serveplan.sim.disagg`.
"""

from __future__ import annotations

from dataclasses import replace

from .costs import FittedThroughputCost, prefill_seconds
from .kvlink import KVLink
from .loop_api import RunResult, run_pools
from .pools import Handoff, PoolSpec, Role

PDResult = RunResult
PREFILL_ROUTERS = ("least-loaded", "round-robin")


def run_pd(requests, prefill: PoolSpec, decode: PoolSpec, *, link: KVLink | None = None,
           router: str = "round-robin", prefill_router: str = "least-loaded",
           assignment: str = "early", layerwise: bool = False, prefill_stage: str = "engine",
           sibyl_delta: float = 128.0, sibyl_alpha: float = 0.99,
           sibyl_max_length: int | None = None, pending_capacity: int | None = None,
           prefill_hold: int | None = None, first_token: str = "prefill",
           record_steps: int = 1 << 16, max_steps: int | None = None) -> RunResult:
    """Simulate ``requests`` on a disaggregated deployment.

    ``prefill`` and ``decode`` are the two pools (their ``role`` is set here; a decode pool
    may use a :class:`FittedThroughputCost`); ``prefill_router`` (``least-loaded``: fewest
    outstanding prefill tokens, or ``round-robin``) picks the prefill instance; the other
    options are those of :class:`~serveplan.sim.pools.Handoff`.

    Raises
    ------
    ValueError
        On invalid options, a request that can never fit an instance, or a stall.
    """
    if prefill_router not in PREFILL_ROUTERS:
        raise ValueError(f"prefill_router given an invalid value: {prefill_router!r} "
                         f"(valid: {', '.join(PREFILL_ROUTERS)})")
    handoff = Handoff(router=router, assignment=assignment, layerwise=layerwise, link=link,
                      prefill_stage=prefill_stage, sibyl_delta=sibyl_delta,
                      sibyl_alpha=sibyl_alpha, sibyl_max_length=sibyl_max_length,
                      pending_capacity=pending_capacity, prefill_hold=prefill_hold,
                      first_token=first_token)
    pools = [replace(prefill, role=Role.PREFILL), replace(decode, role=Role.DECODE)]
    return run_pools(requests, pools, router=prefill_router, handoff=handoff,
                     record_steps=record_steps, max_steps=max_steps)


__all__ = ["FittedThroughputCost", "KVLink", "PDResult", "PoolSpec", "prefill_seconds",
           "run_pd"]
