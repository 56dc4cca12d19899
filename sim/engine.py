"""Colocated instances behind a router: :func:`run_engine`, the one loop with one pool.

A colocated deployment is one pool of role ``COLOCATED`` (:mod:`serveplan.sim.pools`);
this module is its convenience entry point. The loop itself is
:func:`serveplan.sim.loop.run_loop`; steps are :mod:`serveplan.sim.step`.
"""

from __future__ import annotations

from .costs import AffineStepCost
from .loop_api import RunResult, run_pools
from .params import EngineParams, clip_lengths
from .pools import DPTokens, PoolSpec, Role
from .recorder import Rec, make_rec, recorded_steps
from .state import Router

EngineResult = RunResult


def run_engine(requests, cost, params: EngineParams, *, num_instances: int = 1,
               router: Router | int | str = Router.ROUND_ROBIN, record_steps: int = 1 << 16,
               max_steps: int | None = None, policy=None, lockstep: int = 1,
               dp_tokens: DPTokens = DPTokens.MAX) -> RunResult:
    """Simulate ``requests`` on ``num_instances`` colocated instances.

    Parameters
    ----------
    requests : serveplan.sim.workload.Requests
        Arrival times (NaN for closed loop), prompt and output lengths, optional prefix
        hash ids.
    cost : serveplan.estimator.oracle.CostOracle or AffineStepCost
        Prices each step: the oracle's kernel on the actual batch, or an affine formula.
    params : EngineParams
        Scheduler policy and engine knobs of every instance.
    num_instances : int
        Colocated (data-parallel) instances behind the router.
    router : Router or str
        Routing policy code or name.
    record_steps : int
        Capacity of the per-step time series; longer runs are decimated by powers of two.
    max_steps : int, optional
        Stop with an error after this many engine steps (default: unlimited).
    policy : callable, optional
        A Python research scheduler ``policy(ctx)`` filling each batch through a
        :class:`~serveplan.sim.pyhook.SchedulerContext` (``params.policy`` is then
        ignored); slower. The built-in policies never use it.
    lockstep : int
        Consecutive instances that step together (attention-DP ranks of one engine,
        :class:`~serveplan.sim.pools.PoolSpec`).
    dp_tokens : DPTokens
        The tokens the MoE layers of such a group see (:class:`~serveplan.sim.pools.DPTokens`).

    Raises
    ------
    ValueError
        If a request can never be scheduled (too few KV blocks, or a whole prompt larger
        than the token budget without chunked prefill), or the run stalls.
    """
    if num_instances < 1:
        raise ValueError(f"num_instances must be >= 1, got {num_instances!r}")
    pool = PoolSpec(params, cost, num_instances, Role.COLOCATED, lockstep=lockstep,
                    dp_tokens=dp_tokens)
    return run_pools(requests, [pool], router=router, record_steps=record_steps,
                     max_steps=max_steps, policy=policy)


__all__ = ["AffineStepCost", "EngineParams", "EngineResult", "Rec", "clip_lengths", "make_rec",
           "recorded_steps", "run_engine"]
