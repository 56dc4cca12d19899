"""One deployment, one workload, any arrival rate, at any level of the fidelity ladder.

:func:`evaluate` is the single switch between the levels (DESIGN.md, "Fidelity ladder")::

    evaluate(deployment, workload, rate, seed, fidelity) -> RequestMetrics

* ``analytic`` -- :mod:`serveplan.queueing.analytic` (no per-request samples; use
  :meth:`PreparedDeployment.analytic` for its percentile estimates);
* ``request`` -- BestServe's per-request simulators (:mod:`serveplan.sim.request_level`);
* ``iteration`` -- the event simulator, every engine step scheduled and costed, run as a
  simulation runs it (:func:`serveplan.simulation.run_resolved` on
  :attr:`PreparedDeployment.serving`: the engine's runtime, front end and handoff included).

``auto`` is ``iteration``; :attr:`RequestMetrics.fidelity` says which level produced a
result. All levels measure TTFT at the first token and TPOT over the remaining tokens; a
disaggregated request's first token is the end of its prefill at the analytic and request
levels, and at the iteration level as the engine serves it
(:attr:`~serveplan.resolution.ResolvedServing.first_token_source`).

Common random numbers: for each seed the workload is drawn once at rate 1 (the unit
pattern of :mod:`serveplan.sim.workload`) and every rate divides those arrival times by the
rate, so all rates see the same requests in the same order, only compressed in time.
:class:`PreparedDeployment` holds the resolved costs and the unit-rate requests, so a
goodput bisection pays for them once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from serveplan.config import (
    ClosedLoopWorkload,
    ConstantWorkload,
    Deployment,
    GammaWorkload,
    InstanceConfig,
    PoissonWorkload,
    TraceWorkload,
)
from serveplan.deployments import AnyDeployment, PDDeployment, gpus, parse_deployment
from serveplan.errors import UserError
from serveplan.queueing import analytic as A
from serveplan.sim import request_level as RL
from serveplan.sim import workload as W

__all__ = ["FIDELITIES", "PreparedDeployment", "RequestMetrics", "Workspace", "evaluate",
           "resolve_fidelity", "unit_workload"]

FIDELITIES = ("analytic", "request", "iteration")


@dataclass(frozen=True, eq=False)
class RequestMetrics:
    """Per-request latencies of one run (seconds; arrival order).

    ``ttft_s`` is ``inf`` for requests the engine rejected (prompt longer than
    ``max_model_len``); ``tpot_s`` is NaN for one-token outputs (it meets any TPOT goal).
    """

    rate: float
    seed: int
    fidelity: str
    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    def to_dataset(self):
        """The run as an ``xarray.Dataset`` on a ``request`` dim."""
        import xarray as xr

        dim = ("request",)
        return xr.Dataset(
            {"arrival_s": (dim, self.arrival_s, {"units": "s"}),
             "ttft_s": (dim, self.ttft_s, {"units": "s", "long_name": "time to first token"}),
             "tpot_s": (dim, self.tpot_s, {"units": "s", "long_name": "time per output token"}),
             "e2e_s": (dim, self.e2e_s, {"units": "s", "long_name": "end-to-end latency"}),
             "output_len": (dim, self.output_len)},
            coords={"request": np.arange(len(self))},
            attrs={"rate": self.rate, "seed": self.seed, "fidelity": self.fidelity})


def _metrics(rate, seed, fidelity, arrival, prompt_done, finish, output) -> RequestMetrics:
    out = np.asarray(output, dtype=np.float64)
    ttft = prompt_done - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - prompt_done) / (out - 1), np.nan)
    return RequestMetrics(float(rate), int(seed), fidelity, arrival, ttft, tpot,
                          finish - arrival, np.asarray(output, dtype=np.int64))


def disaggregated_metrics(res, rate: float, seed: int) -> RequestMetrics:
    """Per-request metrics of a disaggregated run (prefill/decode or attention/FFN): TTFT at
    the first token the client sees (:attr:`~serveplan.sim.loop_api.RunResult.first_token_times`),
    the finish of the decode (of the prefill for one-token outputs); a request the engine
    rejected has TTFT ``inf``."""
    from serveplan.sim.state import FINISHED_IGNORED

    p, dq = res.p_reqs, res.d_reqs
    first = np.where(p.status == FINISHED_IGNORED, np.inf, res.first_token_times)
    finish = np.where(dq.output > 1, res.pd.t_finish, p.t_finish)
    return _metrics(rate, seed, "iteration", p.arrival, first, finish, dq.output)


# ----------------------------------------------------------------------------- workloads
def as_workload(workload):
    """A workload model from a model or a mapping (a missing ``rate`` is set to 1)."""
    if isinstance(workload, dict):
        from pydantic import TypeAdapter

        from serveplan.config import Workload

        if workload.get("kind") in ("poisson", "gamma", "constant"):
            workload = {"rate": 1.0, **workload}
        return TypeAdapter(Workload).validate_python(workload)
    return workload


def unit_workload(workload):
    """``workload`` at rate 1 req/s (its unit pattern); errors for closed loops."""
    workload = as_workload(workload)
    if isinstance(workload, ClosedLoopWorkload):
        raise UserError("goodput needs an open-loop workload (poisson, gamma, constant or a "
                        "trace); a closed loop has no arrival rate to search over")
    if isinstance(workload, TraceWorkload):
        return workload.model_copy(update={"rate": 1.0, "time_scale": 1.0})
    return workload.model_copy(update={"rate": 1.0})


def set_run_options(prepared, workload, seeds, num_requests, tau, workspace) -> None:
    """The run options every prepared deployment keeps: its workspace, unit workload (with
    ``num_requests`` when given), seeds and BestServe's ``tau``."""
    prepared.ws = workspace if workspace is not None else Workspace()
    prepared.workload = unit_workload(workload)
    if num_requests is not None:
        prepared.workload = prepared.workload.model_copy(
            update={"num_requests": int(num_requests)})
    prepared.seeds = tuple(int(s) for s in seeds) or (0,)
    prepared.tau = float(tau)


def _schedule(unit: W.Requests) -> np.ndarray:
    """The requests' send times as a pattern to rescale: a staged load's without the drains
    between stages (a rate search scales the schedule, not the server's pace)."""
    return unit.arrival_s if unit.stages is None else unit.stages.sends_without_server()


def _arrival_scv(workload, unit: W.Requests) -> float:
    """Squared CV of inter-arrival times: exact for the synthetic kinds, from the data else."""
    if isinstance(workload, PoissonWorkload):
        return 1.0
    if isinstance(workload, ConstantWorkload):
        return 0.0
    if isinstance(workload, GammaWorkload):
        return float(workload.cv) ** 2
    gaps = np.diff(_schedule(unit))
    if gaps.size < 2 or gaps.mean() <= 0:
        return 1.0
    return float(gaps.var() / gaps.mean() ** 2)


# ----------------------------------------------------------------------------- instances
@dataclass(frozen=True, eq=False)
class InstanceModel:
    """One resolved instance type: cost oracle, engine parameters, KV capacity."""

    config: InstanceConfig
    resolved: object  # serveplan.simulation.ResolvedDeployment

    @property
    def oracle(self):
        return self.resolved.oracle

    @property
    def params(self):
        return self.resolved.params

    @property
    def kv_tokens(self) -> float:
        return float(self.params.num_gpu_blocks * self.params.block_size)

    @property
    def gpus(self) -> int:
        return self.config.tp * self.config.pp * self.config.dp


def schedulers(pool) -> int:
    """Schedulers a pool of ``num_instances`` instances runs: one per attention-DP rank
    (each with its own requests and KV, priced as one rank's steps)."""
    return pool.num_instances * pool.dp


class Workspace:
    """Caches shared by the deployments of one search or sweep, passed in explicitly.

    Resolved instances (oracle, engine defaults, memory plan) are keyed by their
    :class:`~serveplan.config.InstanceConfig` fields and weights role; unit-rate requests
    by workload and seed; analytic costs and request-level tables by instance and
    workload. Nothing here depends on the order of use, so a result is the same with a
    fresh or a warm workspace.
    """

    def __init__(self):
        self._requests: dict[tuple, W.Requests] = {}
        self._costs: dict[tuple, A.InstanceCosts] = {}
        self._tables: dict[tuple, RL.CostTables] = {}

    @staticmethod
    def _key(config: InstanceConfig) -> str:
        fields = {k: getattr(config, k) for k in InstanceConfig.model_fields}
        return json.dumps(fields, sort_keys=True, default=str)

    def cached_or_raise(self, key: tuple, make):
        """``make()`` once per ``key``; an error is cached and raised again (an instance
        that does not fit fails the same way for every strategy using it)."""
        def safe():
            try:
                return make()
            except Exception as exc:  # noqa: BLE001 -- re-raised below, every time
                return exc

        got = self.cached("costs", key, safe)
        if isinstance(got, Exception):
            raise got
        return got

    def resolved_instance(self, d, weights_role: str = "full", disaggregated: bool | None = None):
        """:func:`serveplan.resolution.resolve_instance` of a deployment's instance type,
        once per instance fields, weights role and whether its deployment is
        disaggregated."""
        from serveplan.resolution import resolve_instance

        return self.cached_or_raise(("instance", weights_role, disaggregated, self._key(d)),
                                    lambda: resolve_instance(d, weights_role, disaggregated))

    def resolvers(self):
        """``(instance, ffn_pool)`` resolvers for :func:`serveplan.resolution.resolve` that
        share these caches (an FFN pool once per configuration and largest pass)."""
        from serveplan.afd import resolve_ffn

        def ffn_pool(pool, max_tokens):
            key = ("ffn", self._key(pool), pool.count, int(max_tokens))
            return self.cached_or_raise(key, lambda: resolve_ffn(pool, max_tokens))

        return self.resolved_instance, ffn_pool

    def instance(self, config: InstanceConfig) -> InstanceModel:
        """The resolved instance; a memory-planner error is cached and raised again."""
        fields = {k: getattr(config, k) for k in InstanceConfig.model_fields}
        return InstanceModel(config, self.resolved_instance(Deployment(**fields)))

    def unit_requests(self, workload, seed: int, block_size: int) -> W.Requests:
        key = (workload.model_dump_json(), int(seed), int(block_size))
        if key not in self._requests:
            from serveplan.simulation import build_requests

            self._requests[key] = build_requests(workload, int(seed), block_size=block_size)
        return self._requests[key]

    def cached(self, store: str, key: tuple, make):
        table = self._costs if store == "costs" else self._tables
        if key not in table:
            table[key] = make()
        return table[key]


def resolve_fidelity(fidelity: str, deployment: AnyDeployment) -> str:
    """The level that will run: ``auto`` is ``iteration`` (the reference level)."""
    if fidelity not in (*FIDELITIES, "auto"):
        raise UserError(f"fidelity given an invalid value: {fidelity!r} "
                        f"(valid: auto, {', '.join(FIDELITIES)})")
    return "iteration" if fidelity == "auto" else fidelity


class PreparedDeployment:
    """A deployment and a workload, resolved once, evaluated at many rates and seeds.

    Parameters
    ----------
    deployment : Deployment, PDDeployment or mapping
        What to evaluate.
    workload : workload model
        Its ``rate`` is ignored (rates are chosen per evaluation); ``num_requests`` is the
        run length unless ``num_requests`` is given here.
    seeds : sequence of int
        Seeds whose requests the request-level cost tables must cover (tables depend on
        these and nothing else, so results do not depend on evaluation order).
    num_requests : int, optional
        Override of the workload's number of requests.
    tau : float
        BestServe's pseudo-batch balancing scalar for the request level (eq. 9; 2.5).
    workspace : Workspace, optional
        Caches shared with other deployments (a search); a private one by default.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If an instance does not fit in GPU memory (the memory planner's reason).
    UserError
        For a closed-loop workload.
    """

    def __init__(self, deployment, workload, *, seeds=(0,), num_requests: int | None = None,
                 tau: float = 2.5, workspace: Workspace | None = None):
        self.deployment: AnyDeployment = parse_deployment(deployment)
        set_run_options(self, workload, seeds, num_requests, tau, workspace)
        d = self.deployment
        if isinstance(d, PDDeployment):
            self.prefill = self.ws.instance(d.prefill)
            self.decode = self.ws.instance(d.decode)
        else:
            self.prefill = self.decode = self.ws.instance(d)

    # ------------------------------------------------------------------ basics
    @property
    def is_pd(self) -> bool:
        return isinstance(self.deployment, PDDeployment)

    @property
    def gpus(self) -> int:
        return gpus(self.deployment)

    def unit_requests(self, seed: int) -> W.Requests:
        """The seed's requests at 1 req/s (drawn once, then cached)."""
        return self.ws.unit_requests(self.workload, seed, self.prefill.params.block_size)

    @cached_property
    def arrival_scv(self) -> float:
        return _arrival_scv(self.workload, self.unit_requests(self.seeds[0]))

    @cached_property
    def lengths(self) -> tuple[object, object]:
        """Prompt and output length distributions (exact moments for synthetic workloads)."""
        from serveplan.simulation import length_dist

        w = self.workload
        if not isinstance(w, TraceWorkload):
            return length_dist(w.isl), length_dist(w.osl)
        req = self.unit_requests(self.seeds[0])
        return W.Empirical(req.prompt_len), W.Empirical(req.output_len)

    # ------------------------------------------------------------------ analytic level
    def _costs(self, inst: InstanceModel) -> A.InstanceCosts:
        isl, osl = self.lengths
        p = inst.params

        def make():
            return A.instance_costs(inst.oracle, isl, osl, max_num_seqs=p.max_num_seqs,
                                    kv_tokens=inst.kv_tokens,
                                    max_num_batched_tokens=p.max_num_batched_tokens)

        return self.ws.cached("costs", (Workspace._key(inst.config),
                                        self.workload.model_dump_json(), self.seeds[0]), make)

    @cached_property
    def prefill_costs(self) -> A.InstanceCosts:
        return self._costs(self.prefill)

    @cached_property
    def decode_costs(self) -> A.InstanceCosts:
        return self.prefill_costs if not self.is_pd else self._costs(self.decode)

    @cached_property
    def kv_transfer_s(self) -> float:
        """Mean KV-transfer time of one request (0 for colocated deployments)."""
        if not self.is_pd:
            return 0.0
        per_token, latency = self._kv_link
        return float(per_token * self.lengths[0].mean + latency)

    @cached_property
    def _kv_link(self) -> tuple[float, float]:
        """Seconds per prompt token and latency of one request's KV transfer on the
        serving link (:attr:`~serveplan.resolution.ResolvedServing.handoff_link`: the
        engine's handoff included): over NVLink when a prefill and a decode instance fit
        in one node, else over the scale-out link."""
        link = self.serving.handoff_link
        gpu = self.prefill.oracle.gpu
        kind = 0 if self.prefill.gpus + self.decode.gpus <= gpu.gpus_per_node else 1
        return float(link.seconds_per_token[kind]), float(link.latency_s[kind])

    @cached_property
    def front_end(self):
        """The engine's API server (:class:`~serveplan.sim.runtime.FrontEnd`; None without
        an engine or terms)."""
        fe = self.serving.front_end()
        return fe if fe is not None and fe.active else None

    def analytic(self, rates) -> A.AnalyticEstimate:
        """Level-1 estimates at ``rates`` (vectorised; microseconds per rate); TTFT
        includes the front end's latency for a mean prompt (its queueing and its work per
        output token are the simulators')."""
        d = self.deployment
        if isinstance(d, PDDeployment):
            est = A.pd_estimate(rates, schedulers(d.prefill), schedulers(d.decode),
                                self.prefill_costs, self.decode_costs, self.kv_transfer_s,
                                self.arrival_scv)
        else:
            est = A.colocated_estimate(rates, schedulers(d), self.prefill_costs,
                                       self.arrival_scv)
        return self.behind_front_end(est)

    def behind_front_end(self, est: A.AnalyticEstimate) -> A.AnalyticEstimate:
        """``est`` with the front end's latency for a mean prompt added to its TTFT
        (request setup, the prompt's tokenization, the first token's output path)."""
        fe = self.front_end
        if fe is None:
            return est
        late = fe.request_s + fe.prompt_token_s * self.lengths[0].mean + fe.output_s
        return replace(est, ttft_mean=est.ttft_mean + late, _ttft_offset=est._ttft_offset + late)

    def capacity(self) -> float:
        r"""Throughput upper bound (req/s) ignoring latency goals: prefill at its best
        batching and decode at its peak tokens/s (BestServe's :math:`1/T_{\min}` refined
        for batching and several instances)."""
        d = self.deployment
        p, c = self.prefill_costs, self.decode_costs
        _, h = c.decode_peak
        dec = c.decode_tokens / h
        if isinstance(d, PDDeployment):
            pre = schedulers(d.prefill) / p.prefill_batched_s
            return float(min(pre, schedulers(d.decode) / dec if dec > 0 else np.inf))
        return float(schedulers(d) / (p.prefill_batched_s + dec))

    def t_min(self) -> float:
        r"""BestServe's :math:`T_{\min}`: one request alone, prefill plus its whole decode."""
        p, c = self.prefill_costs, self.decode_costs
        return float(p.prefill_s + c.decode_tokens * float(c.t_step(1.0))
                     + self.kv_transfer_s)

    # ------------------------------------------------------------------ request level
    @cached_property
    def _tables(self):
        req = [self.unit_requests(s) for s in self.seeds]
        prompt = np.concatenate([r.prompt_len for r in req])
        output = np.concatenate([r.output_len for r in req])

        # the tables depend on the distinct lengths only (fixed lengths: not on the seed)
        lengths = hashlib.sha256(np.unique(prompt).tobytes()
                                 + np.unique(prompt + output / 2.0).tobytes()).hexdigest()

        def tables(inst: InstanceModel):
            p = inst.params
            key = (Workspace._key(inst.config), lengths, self.tau)
            return self.ws.cached("tables", key, lambda: RL.cost_tables(
                inst.oracle, prompt, output, max_prefill_batch=p.max_num_seqs,
                max_decode_batch=int(np.floor(p.max_num_seqs / self.tau)) + 1))

        pre = tables(self.prefill)
        return pre, (pre if not self.is_pd else tables(self.decode))

    def _request_level(self, req: W.Requests, rate: float, seed: int) -> RequestMetrics:
        """BestServe's per-request simulators behind the engine's front end: requests
        reach the engine through its first-come first-served server, and every token the
        client later by its output latency."""
        d, fe = self.deployment, self.front_end
        pre_tab, dec_tab = self._tables
        sent, p, o = req.arrival_s, req.prompt_len, req.output_len
        a = sent if fe is None else fe.engine_arrivals(sent, p)
        if isinstance(d, PDDeployment):
            pp, dp = self.prefill.params, self.decode.params
            per_token, latency = self._kv_link
            kv = p * per_token + latency
            first, finish = RL.pd_times(
                a, p, o, pre_tab, dec_tab, num_prefill=schedulers(d.prefill),
                num_decode=schedulers(d.decode), prefill_max_num_seqs=pp.max_num_seqs,
                prefill_max_num_batched_tokens=pp.max_num_batched_tokens,
                decode_max_num_seqs=dp.max_num_seqs, decode_kv_tokens=self.decode.kv_tokens,
                kv_transfer_s=kv, tau=self.tau)
        else:
            pp = self.prefill.params
            first, finish = RL.colocated_times(
                a, p, o, pre_tab, num_instances=schedulers(d), max_num_seqs=pp.max_num_seqs,
                max_num_batched_tokens=pp.max_num_batched_tokens,
                kv_tokens=self.prefill.kv_tokens, tau=self.tau)
        late = 0.0 if fe is None else fe.output_s
        return _metrics(rate, seed, "request", sent, first + late, finish + late, o)

    # ------------------------------------------------------------------ iteration level
    @cached_property
    def serving(self):
        """The deployment resolved as :func:`serveplan.simulation.run_config` runs it (every
        pool with its engine's runtime and front end, the KV link with the engine's
        handoff), from the workspace's caches."""
        from serveplan.resolution import resolve

        instance, ffn_pool = self.ws.resolvers()
        return resolve(self.deployment, instance=instance, ffn_pool=ffn_pool)

    def _iteration_level(self, req: W.Requests, rate: float, seed: int) -> RequestMetrics:
        """The event simulator through the one call a simulation makes
        (:func:`serveplan.simulation.run_resolved`)."""
        from serveplan.sim.state import FINISHED_IGNORED
        from serveplan.simulation import run_resolved

        res = run_resolved(self.serving, req)
        if self.serving.disaggregated:
            return disaggregated_metrics(res, rate, seed)
        r = res.reqs
        first = np.where(r.status == FINISHED_IGNORED, np.inf, r.t_first)
        return _metrics(rate, seed, "iteration", r.arrival, first, r.t_finish, r.n_out)

    # ------------------------------------------------------------------ entry point
    def requests_at(self, rate: float, seed: int) -> W.Requests:
        """The seed's requests with arrivals at ``rate`` (unit pattern / rate)."""
        if not (np.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a finite number > 0, got {rate!r}")
        unit = self.unit_requests(seed)
        return unit.with_arrivals(W.scale_pattern(_schedule(unit), rate))

    def evaluate(self, rate: float, seed: int, fidelity: str = "auto") -> RequestMetrics:
        """Per-request metrics at ``rate`` for ``seed`` (simulation levels only)."""
        level = resolve_fidelity(fidelity, self.deployment)
        if level == "analytic":
            raise UserError("the analytic level has no per-request samples; use "
                            "PreparedDeployment.analytic(rates) for its estimates")
        req = self.requests_at(rate, seed)
        if level == "request":
            return self._request_level(req, rate, seed)
        return self._iteration_level(req, rate, seed)

    def describe(self) -> dict:
        """Resolved facts for result attrs."""
        d = self.deployment
        out = {"deployment": json.loads(d.model_dump_json()),
               "workload": json.loads(self.workload.model_dump_json()),
               "gpus": self.gpus, "tau": self.tau,
               "kv_transfer_s": self.kv_transfer_s,
               "prefill_kv_tokens": self.prefill.kv_tokens,
               "decode_kv_tokens": self.decode.kv_tokens}
        return out


def evaluate(deployment, workload, rate: float, seed: int = 0,
             fidelity: str = "auto") -> RequestMetrics:
    """Per-request TTFT/TPOT/E2E of ``deployment`` under ``workload`` at ``rate`` req/s.

    The one place where the fidelity ladder is switched (module docstring). For many rates
    or seeds build a :class:`PreparedDeployment` once and call its ``evaluate``.
    """
    return PreparedDeployment(deployment, workload, seeds=(seed,)).evaluate(rate, seed, fidelity)
