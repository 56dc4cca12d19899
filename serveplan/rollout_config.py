"""Rollout file schema: a burst of trajectories and a layout switch (``serveplan rollout``).

::

    model: llama-3.1-8b
    gpu: h100
    engine: {max_num_seqs: 256}          # vLLM knobs, shared by both layouts
    layout_a: {dp: 16, tp: 1, pp: 1}     # the burst: many replicas
    layout_b: {dp: 4, tp: 4, pp: 1}      # the tail: fewer, wider replicas, same GPUs
    workload:
      num_trajectories: 2000
      prompt: {dist: lognormal, mean: 512, sigma: 0.5, max: 4096}
      output: {dist: lognormal, mean: 600, sigma: 0.6, max: 4096}
      heavy_fraction: 0.05
      heavy_output: {dist: uniform, low: 8000, high: 16000}
    reconfig:
      threshold_fraction: 0.1            # switch when fewer than 10 % are active
      kv: recompute                      # recompute | transfer
      setup_s: 2.0
    seed: 0

``dp`` is the number of replicas (instances) of ``tp * pp`` GPUs each, the RL notation
DP x TP x PP. Both layouts must use the same number of GPUs; each must fit in memory
(checked by the memory planner when the file runs). Every model forbids unknown keys.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from serveplan.config import DTypeName, Length, LogNormalLength, UniformLength
from serveplan.pools_config import (
    EngineConfig,
    Gpus,
    Instances,
    Requests,
    RouterName,
    SchedulerName,
    _error,
    _Frozen,
)


class Layout(_Frozen):
    """``dp`` replicas of ``tp * pp`` GPUs each."""

    dp: Instances = Field(1, ge=1, description="Replicas (instances).")
    tp: Gpus = Field(1, ge=1)
    pp: Gpus = Field(1, ge=1)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def label(self) -> str:
        return f"DP{self.dp} x TP{self.tp} x PP{self.pp}"


class RolloutWorkload(_Frozen):
    """A burst of ``num_trajectories`` at t = 0 with a heavy output tail
    (:mod:`serveplan.sim.rollout_workload`)."""

    num_trajectories: Requests = Field(1000, ge=1)
    prompt: Length = LogNormalLength(dist="lognormal", mean=512, sigma=0.5, max=4096)
    output: Length = LogNormalLength(dist="lognormal", mean=600, sigma=0.6, max=4096)
    heavy_fraction: float = Field(0.05, ge=0.0, le=1.0, description=(
        "Fraction of trajectories whose output comes from heavy_output."))
    heavy_output: Length = UniformLength(dist="uniform", low=8000, high=16000)


class ReconfigPolicy(_Frozen):
    """When to switch from layout A to layout B and what the switch costs
    (:mod:`serveplan.rollout_cost`)."""

    threshold: Requests | None = Field(None, ge=1, description=(
        "Switch when fewer than this many trajectories are active."))
    threshold_fraction: float | None = Field(None, gt=0.0, le=1.0, description=(
        "Switch when fewer than this fraction of the batch is active (default 0.1)."))
    kv: Literal["recompute", "transfer"] = Field("recompute", description=(
        "recompute: B prefills each context again; transfer: running trajectories bring "
        "their KV over the link."))
    setup_s: float = Field(0.0, ge=0.0, allow_inf_nan=False, description=(
        "Fixed part of the pause (process groups, CUDA graphs, engine restart)."))
    link: Literal["auto", "scale-up", "scale-out"] = "auto"
    link_bw: float | None = Field(None, gt=0, allow_inf_nan=False, description=(
        "Bytes/s per GPU of the reshard link; default: the GPU's link (scale-up or out)."))
    reconfig_cost_s: float | None = Field(None, ge=0.0, allow_inf_nan=False, description=(
        "Measured pause: replaces setup + weights + KV transfer."))

    @model_validator(mode="after")
    def _one_threshold(self):
        if self.threshold is not None and self.threshold_fraction is not None:
            raise _error("ReconfigPolicy", ("threshold_fraction",),
                         "give threshold or threshold_fraction, not both",
                         self.threshold_fraction)
        return self

    def count(self, n: int) -> int:
        """The threshold in trajectories: switch when fewer than this many are active."""
        if self.threshold is not None:
            return self.threshold
        frac = 0.1 if self.threshold_fraction is None else self.threshold_fraction
        return max(1, math.ceil(round(frac * n, 9)))  # active < frac * n


class RolloutConfig(_Frozen):
    """A rollout file (module docstring)."""

    model: str = Field(description="Catalog name or HF config.json path.")
    gpu: str = Field(description="Catalog name or GPU YAML path.")
    dtype: DTypeName | None = None
    kv_dtype: DTypeName | None = None
    scheduler: SchedulerName = "vllm-v1"
    router: RouterName = "round-robin"
    engine: EngineConfig = EngineConfig()
    layout_a: Layout
    layout_b: Layout
    workload: RolloutWorkload = RolloutWorkload()
    reconfig: ReconfigPolicy = ReconfigPolicy()
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _same_gpus(self):
        a, b = self.layout_a, self.layout_b
        if a.gpus != b.gpus:
            raise _error("RolloutConfig", ("layout_b",),
                         f"uses {b.gpus} GPUs ({b.label}) but layout_a uses {a.gpus} "
                         f"({a.label}): a switch keeps the same GPUs", b.model_dump())
        n, thr = self.workload.num_trajectories, self.reconfig.threshold
        if thr is not None and thr > n:
            raise _error("RolloutConfig", ("reconfig", "threshold"),
                         f"must be at most workload.num_trajectories ({n}), got {thr}", thr)
        return self


__all__ = ["Layout", "ReconfigPolicy", "RolloutConfig", "RolloutWorkload"]
