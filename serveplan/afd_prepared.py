r"""An attention/FFN-disaggregated deployment prepared for goodput and the strategy search.

:class:`PreparedAFD` is the :class:`~serveplan.fidelity.PreparedDeployment` of an
``architecture: afd`` deployment (:mod:`serveplan.afd`): a prefill pool, an attention pool
that decodes (its steps priced by :class:`~serveplan.sim.afd_cost.AFDStepCost` with the FFN
pool) and an FFN pool that holds no requests. It is resolved once, with
:func:`serveplan.resolution.resolve` and the workspace's caches (many strategies of a search
share their instance types), and evaluated at any rate at two levels:

* ``analytic`` -- the prefill/decode queueing estimate
  (:func:`serveplan.queueing.analytic.pd_estimate`) with the attention pool as the decode
  pool. Its step time at batch ``b`` is the AFD step with the FFN load of a symmetric pool:
  every other attention instance runs ``b`` requests too (``pool_tokens = (N_a - 1) b``).
* ``iteration`` -- the event loop (:func:`serveplan.simulation.run_resolved`), exactly what
  ``serveplan simulate`` runs for the deployment.

The request level (BestServe's per-request simulators) has no attention/FFN model and is
refused. The analytic level's KV transfer is the prefill/decode one
(:attr:`~serveplan.fidelity.PreparedDeployment.kv_transfer_s`: one mean prompt's KV over
NVLink when a prefill and an attention instance fit one node, the engine's handoff
included), and its TTFT includes the engine's front end, as the iteration level's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from serveplan.errors import UserError
from serveplan.fidelity import (
    InstanceModel,
    PreparedDeployment,
    RequestMetrics,
    Workspace,
    disaggregated_metrics,
    resolve_fidelity,
    set_run_options,
)
from serveplan.pools_config import PoolsDeployment
from serveplan.queueing import analytic as A

__all__ = ["AFDDecodeOracle", "PreparedAFD"]


@dataclass(frozen=True, eq=False)
class AFDDecodeOracle:
    """The attention pool's decode steps as the analytic level asks for them
    (``decode_time(batch, context)``, vectorised over ``batch``), other oracle questions
    answered by the attention instance's own oracle.

    ``others``: attention instances whose running requests the FFN pool serves besides
    this one's, each taken to run the same batch (0: this instance alone, the fastest step
    a batch can have).
    """

    cost: object  # AFDStepCost
    others: int

    @property
    def parallel(self):
        return self.cost.attention.parallel

    def prefill_time(self, batch, tokens):
        return self.cost.attention.prefill_time(batch, tokens)

    def decode_time(self, batch, context_len):
        b = np.atleast_1d(np.asarray(batch, dtype=np.float64))
        out = np.empty(b.shape)
        for k, n in enumerate(b):
            m = max(int(round(n)), 1)
            out[k] = self.cost.step_time(np.ones(m), np.full(m, int(round(context_len))),
                                         pool_tokens=float(self.others * m))
        return out if np.ndim(batch) else float(out[0])


class PreparedAFD(PreparedDeployment):
    """An AFD deployment and a workload, resolved once (module docstring).

    Parameters are those of :class:`~serveplan.fidelity.PreparedDeployment`; ``deployment``
    is a :class:`~serveplan.pools_config.PoolsDeployment` with ``architecture: afd``.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If a pool does not fit its GPUs (an FFN instance: its weights and largest pass).
    """

    def __init__(self, deployment: PoolsDeployment, workload, *, seeds=(0,),
                 num_requests: int | None = None, tau: float = 2.5,
                 workspace: Workspace | None = None):
        from serveplan.resolution import resolve

        if not isinstance(deployment, PoolsDeployment) or deployment.architecture != "afd":
            raise ValueError("PreparedAFD takes a pools deployment with architecture: afd")
        self.deployment = deployment
        set_run_options(self, workload, seeds, num_requests, tau, workspace)
        instance, ffn_pool = self.ws.resolvers()
        self.serving = resolve(deployment, instance=instance, ffn_pool=ffn_pool)
        pre, att = self.serving.pools
        self.prefill = InstanceModel(pre.config, pre.instance)
        self.decode = InstanceModel(att.config, att.instance)

    # ------------------------------------------------------------------ basics
    @property
    def is_pd(self) -> bool:
        return True  # requests cross from a prefill pool to the attention pool

    @property
    def counts(self) -> tuple[int, int, int]:
        """Prefill, attention and FFN instances."""
        d = self.deployment
        return tuple(d.pool(r).count for r in ("prefill", "attention", "ffn"))

    @property
    def step_cost(self):
        """The attention pool's :class:`~serveplan.sim.afd_cost.AFDStepCost`."""
        return self.serving.pools[1].cost

    def decode_costs_with(self, others: int) -> A.InstanceCosts:
        """The attention pool's analytic costs with ``others`` attention instances loading
        the FFN pool as much as this one (:class:`AFDDecodeOracle`)."""
        isl, osl = self.lengths
        inst, d = self.decode, self.deployment
        p = inst.params
        key = ("afd-decode", Workspace._key(inst.config), Workspace._key(d.pool("ffn")),
               d.pool("ffn").count, d.micro_batches, d.afd_link, d.afd_link_bw,
               d.afd_link_latency_s, int(others), self.workload.model_dump_json(),
               self.seeds[0])
        return self.ws.cached("costs", key, lambda: A.instance_costs(
            AFDDecodeOracle(self.step_cost, int(others)), isl, osl,
            max_num_seqs=p.max_num_seqs, kv_tokens=inst.kv_tokens,
            max_num_batched_tokens=p.max_num_batched_tokens))

    @cached_property
    def decode_costs(self) -> A.InstanceCosts:
        return self.decode_costs_with(self.counts[1] - 1)

    # ------------------------------------------------------------------ analytic level
    def analytic(self, rates) -> A.AnalyticEstimate:
        """Level-1 estimates at ``rates``, as a prefill/decode deployment's (the front
        end's latency included)."""
        n_p, n_a, _ = self.counts
        return self.behind_front_end(A.pd_estimate(
            rates, n_p, n_a, self.prefill_costs, self.decode_costs, self.kv_transfer_s,
            self.arrival_scv))

    def capacity(self) -> float:
        """Throughput bound ignoring latency goals (req/s): prefill at its best batching,
        the attention pool at its peak tokens/s under a symmetric FFN load."""
        n_p, n_a, _ = self.counts
        p, c = self.prefill_costs, self.decode_costs
        pre = n_p / p.prefill_batched_s
        if c.decode_tokens <= 0:
            return float(pre)
        return float(min(pre, n_a * c.decode_peak[1] / c.decode_tokens))

    def t_min(self) -> float:
        """One request alone: its prefill, KV transfer and decode (the FFN pool serving
        only it)."""
        p, c = self.prefill_costs, self.decode_costs_with(0)
        return float(p.prefill_s + self.kv_transfer_s + c.decode_tokens * float(c.t_step(1.0)))

    # ------------------------------------------------------------------ iteration level
    def evaluate(self, rate: float, seed: int, fidelity: str = "auto") -> RequestMetrics:
        from serveplan.simulation import run_resolved

        level = resolve_fidelity(fidelity, self.deployment)
        if level != "iteration":
            raise UserError(f"fidelity {level!r} has no attention/FFN model; an AFD "
                            "deployment is decided at the iteration level (or estimated "
                            "analytically)")
        return disaggregated_metrics(run_resolved(self.serving, self.requests_at(rate, seed)),
                                     rate, seed)

    def sim_layout(self) -> tuple:
        """``(pools, prompt, output, prefill_hold)`` of one run (the attention pool laid out
        as the decode stage it is), for :func:`serveplan.config.simulator_bytes`."""
        n_p, n_a, _ = self.counts
        req = self.unit_requests(self.seeds[0])
        pools = [(self.prefill.params, n_p, "prefill"), (self.decode.params, n_a, "decode")]
        return pools, req.prompt_len, req.output_len, self.deployment.prefill_hold

    def describe(self) -> dict:
        return {"deployment": self.deployment.model_dump(mode="json"),
                "workload": self.workload.model_dump(mode="json"), "gpus": self.gpus,
                "kv_transfer_s": self.kv_transfer_s,
                "prefill_kv_tokens": self.prefill.kv_tokens,
                "attention_kv_tokens": self.decode.kv_tokens,
                "ffn": self.serving.ffn.describe()}

