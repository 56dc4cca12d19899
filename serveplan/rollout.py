"""``serveplan.rollout``: an RL rollout burst with and without a mid-run layout switch.

>>> report = run_rollout(RolloutConfig.model_validate(read_yaml("examples/rl-rollout.yaml")))
...                                                                     # doctest: +SKIP
>>> report.summary()["speedup"]                                         # doctest: +SKIP

Both layouts resolve through the deployment path every simulation uses
(:func:`serveplan.resolution.resolve`: cost oracle, vLLM defaults, KV blocks from the
memory planner -- a layout that does not fit is refused, naming it). The burst
(:func:`serveplan.sim.rollout_workload.rollout_burst`) then runs twice on the same
requests: on layout A throughout, and switching to layout B at the first instant fewer
than the threshold are active (:func:`serveplan.sim.reconfig.run_with_switch`), paying the
pause of :mod:`serveplan.rollout_cost`.

Figures (``papers/frontier.txt`` §6.4): the makespan (the last trajectory's finish; all
arrive at 0), the effective decode throughput (output tokens / makespan), the number of
active trajectories over time, and the switch's instant and cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serveplan.estimator.memory import plan_memory
from serveplan.estimator.specs import Parallelism
from serveplan.resolution import ResolvedServing, resolve
from serveplan.rollout_config import Layout, RolloutConfig
from serveplan.rollout_cost import (
    LayoutBytes,
    PauseCost,
    choose_link,
    pause_cost,
    recompute_estimate,
)
from serveplan.sim.clients import length_dist
from serveplan.sim.reconfig import SwitchRun, active_series, run_with_switch, run_without_switch
from serveplan.sim.rollout_workload import rollout_burst

SERIES_POINTS = 200
"""Points of each active-count series in a summary (the full series stays in the runs)."""


def _deployment(cfg: RolloutConfig, layout: Layout) -> dict:
    pool = {"role": "colocated", "model": cfg.model, "gpu": cfg.gpu, "tp": layout.tp,
            "pp": layout.pp, "count": layout.dp, "scheduler": cfg.scheduler,
            **cfg.engine.model_dump(exclude_unset=True)}
    for name in ("dtype", "kv_dtype"):
        if getattr(cfg, name) is not None:
            pool[name] = getattr(cfg, name)
    return {"pools": [pool], "router": cfg.router}


def resolve_layout(cfg: RolloutConfig, name: str) -> ResolvedServing:
    """Resolve ``layout_a`` or ``layout_b``; a layout that cannot run is reported by name."""
    layout = getattr(cfg, name)
    try:
        return resolve(_deployment(cfg, layout))
    except ValueError as exc:  # SpecError and MemoryPlanError are ValueErrors
        raise ValueError(f"{name} ({layout.label}): {exc}") from None


def layout_bytes(resolved: ResolvedServing, layout: Layout) -> LayoutBytes:
    """Weight and KV bytes per GPU of a layout, from its memory plan."""
    plan = resolved.memory
    if plan is None:  # num_gpu_blocks was given: plan anyway, for the bytes
        o, p = resolved.oracle, resolved.params
        plan = plan_memory(o.model, o.gpu, Parallelism(tp=layout.tp, pp=layout.pp),
                           dtype=o.quantization, max_model_len=p.max_model_len,
                           block_size=p.block_size).as_dict()
    return LayoutBytes(float(plan["weights_bytes"]), float(plan["kv_bytes_per_token"]),
                       layout.tp * layout.pp)


def build_burst(cfg: RolloutConfig):
    """The rollout's trajectories (seeded by ``cfg.seed``)."""
    w = cfg.workload
    return rollout_burst(w.num_trajectories, length_dist(w.prompt), length_dist(w.output),
                         heavy_fraction=w.heavy_fraction,
                         heavy_output=length_dist(w.heavy_output), seed=cfg.seed)


@dataclass(frozen=True, eq=False)
class RolloutReport:
    """Both runs of one rollout and the switch's price."""

    config: RolloutConfig
    baseline: SwitchRun
    switched: SwitchRun
    pause: PauseCost | None
    recompute_s: float
    threshold: int

    def summary(self) -> dict:
        """The figures of both runs side by side (JSON-able)."""
        base, sw = run_figures(self.baseline), run_figures(self.switched)
        cfg = self.config
        return {
            "layout_a": cfg.layout_a.label, "layout_b": cfg.layout_b.label,
            "gpus": cfg.layout_a.gpus, "num_trajectories": len(self.baseline.t_finish),
            "threshold": self.threshold, "kv": cfg.reconfig.kv,
            "without_switch": base, "with_switch": sw,
            "speedup": base["makespan_s"] / sw["makespan_s"],
            "switch": self.switch_figures(),
        }

    def switch_figures(self) -> dict | None:
        run = self.switched
        if run.snapshot is None:
            return None
        mig = run.migration
        return {"t_switch_s": run.t_switch, "t_resume_s": run.t_resume,
                "active_at_switch": len(run.snapshot.ids),
                "kv_tokens_moved": int(mig.kv_kept.sum()),
                "contexts_recomputed": int((mig.kv_kept == 0).sum()),
                "recompute_estimate_s": self.recompute_s, "pause": self.pause.as_dict()}


def run_figures(run: SwitchRun) -> dict:
    """Makespan, output tokens, effective decode throughput and the active series."""
    makespan = float(np.max(run.t_finish))
    tokens = int(run.n_out.sum())
    t, active = active_series(run.t_finish)
    pick = np.unique(np.linspace(0, len(t) - 1, min(len(t), SERIES_POINTS)).astype(int))
    return {"makespan_s": makespan, "output_tokens": tokens,
            "decode_throughput_tok_s": tokens / makespan if makespan > 0 else float("nan"),
            "active_series": {"t_s": t[pick].tolist(), "active": active[pick].tolist()}}


def run_rollout(cfg: RolloutConfig, record_steps: int = 1 << 12) -> RolloutReport:
    """Simulate ``cfg``'s burst on layout A alone and with the switch to layout B."""
    res_a, res_b = resolve_layout(cfg, "layout_a"), resolve_layout(cfg, "layout_b")
    requests = build_burst(cfg)
    n = len(requests)
    thr = cfg.reconfig.count(n)
    spec_a, spec_b = res_a.pool_specs()[0], res_b.pool_specs()[0]
    rc = cfg.reconfig
    link = choose_link(res_b.oracle.gpu, cfg.layout_a.tp * cfg.layout_a.pp,
                       cfg.layout_b.tp * cfg.layout_b.pp, rc.link, rc.link_bw)
    size_b = layout_bytes(res_b, cfg.layout_b)
    priced = {}

    def pause(mig):
        priced["cost"] = pause_cost(mig, size_b, link, setup_s=rc.setup_s,
                                    override_s=rc.reconfig_cost_s)
        priced["recompute"] = recompute_estimate(mig, spec_b.cost,
                                                 spec_b.params.max_num_batched_tokens)
        return priced["cost"].total_s

    base = run_without_switch(requests, spec_a, router=cfg.router, record_steps=record_steps)
    switched = run_with_switch(requests, spec_a, spec_b, stop_done=n - thr + 1, pause=pause,
                               kv=rc.kv, router=cfg.router, record_steps=record_steps)
    return RolloutReport(cfg, base, switched, priced.get("cost"), priced.get("recompute", 0.0),
                         thr)


__all__ = ["RolloutReport", "build_burst", "layout_bytes", "resolve_layout", "run_figures",
           "run_rollout"]
