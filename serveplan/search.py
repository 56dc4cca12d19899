r"""Strategy search: every colocated and disaggregated deployment of a GPU budget, ranked.

BestServe's Optimizer (§3.5) enumerates serving strategies -- ``xm`` (x colocated
instances) and ``ypzd`` (y prefill + z decode instances) -- times tensor-parallel sizes,
finds each one's goodput by bisection with its simulator, and ranks them by goodput per GPU
("normalized goodput", §4.1). This module does the same, made fast:

1. **Enumerate** every ``xm`` with :math:`x\,t \le G` and every ``ypzd`` with
   :math:`y\,t_p + z\,t_d \le G` over the allowed tensor-parallel sizes (prefill and decode
   may differ), pipeline size and expert parallelism given by the spec.
2. **Prune by memory**: a TP size the model cannot be split over (``invalid``), or whose
   instance does not fit the memory planner (``oom``), is recorded with its reason and never
   evaluated.
3. **Analytic level** for every remaining strategy (microseconds to milliseconds each): its
   goodput and an *upper bound* on it. The bound is the throughput of the instance counts
   with prefill at its best batching and decode at the fastest batch whose step meets the
   TPOT goal, zero if one prefill alone exceeds the TTFT goal, times a 10% slack for the
   noise of a P90 (a heuristic bound, not a theorem: the P90 TPOT can sit below the step
   time of the mean batch). A strategy whose bound is zero cannot meet the SLO at any rate:
   it is ``pruned`` with the best TTFT or TPOT it can achieve (one request alone).
4. **Dominance**: scaling a strategy's instance counts by an integer never lowers its goodput
   per GPU -- round-robin over more colocated instances gives each a smoother (Erlang)
   input, and a larger prefill pool pools its queue while each decode instance keeps its
   load -- so only the largest multiple of each instance ratio that fits the budget is
   decided; the others are ``dominated`` (named in ``reason``).
5. **Branch and bound at the chosen fidelity**: strategies are visited in descending bound
   per GPU (ties: analytic goodput); each is decided by the statistically bracketed
   bisection of :mod:`serveplan.goodput`; once ``top`` strategies are decided, a strategy
   whose bound per GPU is below the ``top``-th best decided goodput per GPU is ``pruned``.
   At most ``max_decide`` strategies are decided; any others whose bound still exceeds the
   incumbent are reported ``budget`` (not decided). A decided goodput is never above the
   rate its runs can vouch for (below the capacity bound); where the SLO still holds there it
   is censored and ``binding`` says ``capacity`` (:mod:`serveplan.goodput`).

A search where no strategy has a positive goodput is refused by the command line with one
reason per strategy class (architecture x TP): :mod:`serveplan.search_report`.

The result is an ``xarray.Dataset`` on a ``strategy`` dim (rank order) with coords
architecture, name, instance counts, TP sizes and GPUs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from serveplan.afd_prepared import PreparedAFD
from serveplan.config import MAX_SIM_BYTES, SLO, Cv, Deployment, Length
from serveplan.deployments import PDDeployment, Pool, gpus, strategy_name
from serveplan.estimator.catalog import resolve_gpu, resolve_model
from serveplan.estimator.specs import SpecError
from serveplan.fidelity import PreparedDeployment, Workspace, resolve_fidelity, schedulers
from serveplan.goodput import Seeds, analytic_goodput, find_goodput, simulator_size
from serveplan.pools_config import MAX_GPUS, Gpus, Requests, Seqs, Tokens, _error
from serveplan.pricing import hourly_cost, price_table
from serveplan.search_afd import (
    afd_best_latencies,
    afd_family,
    afd_rows,
    afd_upper_bound,
    count_afd,
    is_afd,
)
from serveplan.search_dataset import strategy_dataset, strategy_label
from serveplan.search_report import search_table
from serveplan.user_input import UserError

__all__ = ["SearchSpec", "count_strategies", "enumerate_strategies", "run_search",
           "search_table"]

BOUND_SLACK = 1.1
MAX_STRATEGIES = 20_000
"""Most strategies a search enumerates. The ``ypzd`` space grows as the square of the GPU
budget (every prefill count times every decode count that fits, per TP pair; even the
non-dominated ratios are ~61% of it), and each strategy is a few ms at the analytic level
alone: 20,000 is about a minute (--gpus 128 over TP 1,2,4,8 is 48,000)."""


class SearchSpec(BaseModel):
    """What ``serveplan search`` explores (all fields have CLI flags)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    gpu: str = Field(description="GPU type, or several comma-separated (h100,h20): every "
                     "role pool may use any of them.")
    gpus: Gpus = Field(ge=1, description="GPU budget.")
    isl: Length = 2048
    osl: Length = 256
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    cv: Cv = 1.0
    slo: SLO = SLO(ttft_ms=1500, tpot_ms=70)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    dp: tuple[int, ...] = Field(
        (1,), description="Attention data-parallel ranks per instance to try (MoE models); "
        "an instance of tp x dp runs its experts expert-parallel over all tp x dp GPUs.")
    pp: Gpus = Field(1, ge=1)
    ep: Gpus = Field(1, ge=1, description="Expert-parallel size of dp 1 instances.")
    architectures: tuple[Literal["colocated", "pd", "afd"], ...] = Field(
        ("colocated", "pd"), description="afd (attention/FFN disaggregation) is opt-in.")
    same_tp: bool = Field(False, description="PD, AFD: every role uses the same TP.")
    micro_batches: tuple[Annotated[int, Field(ge=1, le=16)], ...] = Field(
        (1, 2), description="AFD: micro-batches (ping-pong lanes) of the attention "
        "instances to try.")
    max_num_seqs: Seqs = Field(256, ge=1)
    max_num_batched_tokens: Tokens | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: Tokens | None = Field(None, ge=2, description="Default: next power of 2 "
                                      "above the longest request, at least 4096.")
    scheduler: Literal["vllm-v1", "sglang", "prefill-priority"] = "vllm-v1"
    dtype: Literal["bf16", "fp16", "fp8"] | None = None
    fidelity: Literal["auto", "analytic", "request", "iteration"] = "auto"
    num_requests: Requests = Field(2000, ge=10)
    seeds: Seeds = Field(2, ge=1)
    seed: int = Field(0, ge=0)
    confidence: float = Field(0.95, gt=0, lt=1)
    rtol: float = Field(0.05, gt=0, lt=1)
    top: int = Field(3, ge=1, description="Strategies decided before bound pruning starts.")
    max_decide: int = Field(12, ge=1, description="Most strategies decided at fidelity.")
    rank_by: Literal["gpu", "dollar"] = Field("gpu", description="Rank by goodput per GPU or "
                                              "per dollar (requests per dollar).")
    prices: dict[str, float] = Field(default_factory=dict, description="Dollars per "
                                     "GPU-hour by GPU type, over the shipped defaults.")

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types, as given (the first is the baseline of spend ratio and cost
        efficiency)."""
        return tuple(dict.fromkeys(g.strip() for g in self.gpu.split(",") if g.strip()))

    @model_validator(mode="after")
    def _check(self):
        if not self.tp or any(t < 1 for t in self.tp):
            raise ValueError(f"tp must list sizes >= 1, got {self.tp!r}")
        if max(self.tp) > MAX_GPUS:
            raise _error("SearchSpec", ("tp",), f"sizes must be at most {MAX_GPUS:,} (GPUs "
                         f"of one instance), got {max(self.tp):,}", max(self.tp))
        self._check_dp()
        if "afd" in self.architectures and self.fidelity == "request":
            raise _error("SearchSpec", ("fidelity",), "the request level has no "
                         "attention/FFN model: give auto, iteration or analytic with afd",
                         self.fidelity)
        if not self.micro_batches:
            raise _error("SearchSpec", ("micro_batches",), "give at least one count",
                         self.micro_batches)
        n = count_strategies(self, stop=MAX_STRATEGIES)
        if n > MAX_STRATEGIES:
            sizes = ",".join(map(str, self.tp[:8])) + (",..." if len(self.tp) > 8 else "")
            raise _error("SearchSpec", ("gpus",), f"{self.gpus:,} GPUs over TP {sizes} "
                         f"({'+'.join(self.architectures)}) make "
                         f"more than {MAX_STRATEGIES:,} strategies (the ypzd space grows as "
                         "gpus squared, afd as gpus cubed; a few ms each): give fewer GPUs, "
                         "larger --tp sizes only, --same-tp or --arch colocated", self.gpus)
        return self

    def _check_dp(self) -> None:
        if not self.dp or min(self.dp) < 1:
            raise _error("SearchSpec", ("dp",), "give sizes >= 1", self.dp)
        if max(self.dp) > 1 and not resolve_model(self.model).is_moe:
            raise _error("SearchSpec", ("dp",), "dp > 1 instances run their experts "
                         f"expert-parallel over tp x dp GPUs; {self.model} has no MoE layers "
                         "(give dp 1)", max(self.dp))

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """The ``(tp, dp)`` instance shapes to try."""
        return tuple((t, d) for t in self.tp for d in self.dp)

    def shape_gpus(self, shape: tuple[int, int]) -> int:
        """GPUs of one instance of ``shape``."""
        return shape[0] * shape[1] * self.pp

    @field_validator("tp", "dp", "micro_batches")
    @classmethod
    def _distinct(cls, tp: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(dict.fromkeys(tp))  # a size given twice would list strategies twice

    def workload(self) -> dict:
        return {"kind": self.arrival, "rate": 1.0, "num_requests": self.num_requests,
                "isl": self.isl, "osl": self.osl,
                **({"cv": self.cv} if self.arrival == "gamma" else {})}

    def resolved_max_model_len(self) -> int:
        if self.max_model_len is not None:
            return self.max_model_len
        longest = _max_len(self.isl) + _max_len(self.osl)
        return max(4096, 1 << math.ceil(math.log2(longest)))

    def instance(self, tp: int, gpu: str | None = None, dp: int = 1) -> dict:
        """One instance's fields; with ``dp > 1`` its experts run expert-parallel over all
        ``tp x dp`` GPUs (vLLM ``--enable-expert-parallel``, SGLang and TensorRT-LLM wide EP)."""
        ep = tp * dp if dp > 1 else self.ep
        out = {"model": self.model, "gpu": gpu or self.gpu_types[0], "tp": tp, "pp": self.pp,
               "ep": ep, **({"dp": dp} if dp > 1 else {}),
               "max_num_seqs": self.max_num_seqs,
               "gpu_memory_utilization": self.gpu_memory_utilization,
               "max_model_len": self.resolved_max_model_len(), "scheduler": self.scheduler}
        if self.max_num_batched_tokens is not None:
            out["max_num_batched_tokens"] = self.max_num_batched_tokens
        if self.dtype is not None:
            out["dtype"] = self.dtype
        return out


def _max_len(spec) -> int:
    if isinstance(spec, int):
        return spec
    for name in ("value", "high", "max"):
        v = getattr(spec, name, None)
        if v:
            return int(v)
    mean = getattr(spec, "mean", None) or getattr(spec, "median", None) or 4096
    return int(mean * 8)


def _pd_counts(spec: SearchSpec):
    """``(shape_p, shape_d, y, z_max)``: per pair of ``(tp, dp)`` shapes and prefill count
    ``y``, decode counts ``1..z_max`` fit the budget (step 1; rows with ``z_max < 1`` are
    left out)."""
    g = spec.gpus
    for shape_p in spec.shapes:
        for shape_d in spec.shapes:
            if spec.same_tp and shape_p[0] != shape_d[0]:
                continue
            for y in range(1, g // spec.shape_gpus(shape_p) + 1):
                z_max = (g - y * spec.shape_gpus(shape_p)) // spec.shape_gpus(shape_d)
                if z_max >= 1:
                    yield shape_p, shape_d, y, z_max


def count_strategies(spec: SearchSpec, stop: int | None = None) -> int:
    """How many strategies :func:`enumerate_strategies` builds (without building them);
    with ``stop``, counting ends at the first count above it."""
    n, types = 0, len(spec.gpu_types)
    if "colocated" in spec.architectures:
        n += types * sum(spec.gpus // spec.shape_gpus(s) for s in spec.shapes)
    if "pd" in spec.architectures:
        for *_, z_max in _pd_counts(spec):
            n += types * types * z_max
            if stop is not None and n > stop:
                break
    if "afd" in spec.architectures and (stop is None or n <= stop):
        n += count_afd(spec, None if stop is None else stop - n)
    return n


def enumerate_strategies(spec: SearchSpec) -> list:
    """Every deployment of the budget: ``xm``, ``ypzd``, then ``XpYaZf`` (module
    docstring, step 1; :mod:`serveplan.search_afd`)."""
    out = []
    types = spec.gpu_types
    if "colocated" in spec.architectures:
        for gpu in types:
            for t, d in spec.shapes:
                for x in range(1, spec.gpus // spec.shape_gpus((t, d)) + 1):
                    out.append(Deployment(**spec.instance(t, gpu, d), num_instances=x))
    if "pd" in spec.architectures:
        for gpu_p in types:
            for gpu_d in types:
                for (tp_p, dp_p), (tp_d, dp_d), y, z_max in _pd_counts(spec):
                    for z in range(1, z_max + 1):
                        out.append(PDDeployment(
                            prefill=Pool(**spec.instance(tp_p, gpu_p, dp_p), num_instances=y),
                            decode=Pool(**spec.instance(tp_d, gpu_d, dp_d), num_instances=z)))
    if "afd" in spec.architectures:
        out += afd_rows(spec)
    return out


def _colocated_rate_bound(p_s: float, tokens: float, t_step, max_batch: float,
                          tpot_goal: float | None) -> float:
    r"""Per-instance rate bound of a colocated instance (module docstring, step 3).

    With prefill busy a fraction :math:`\lambda S` of the time, decode runs at :math:`h(B)
    (1-\lambda S)` tokens/s with TPOT :math:`t(B)/(1-\lambda S)`; so for each batch
    :math:`B`, :math:`\lambda \le h/(L + hS)` (throughput) and
    :math:`\lambda \le (1 - t(B)/g)/S` (TPOT goal :math:`g`). The bound is the best batch's.
    """
    b = np.arange(1.0, np.floor(max_batch) + 1.0)
    t = np.asarray(t_step(b), dtype=np.float64)
    h = b / t
    lam = h / (tokens + h * p_s)
    if tpot_goal is not None:
        lam = np.minimum(lam, np.maximum(1.0 - t / tpot_goal, 0.0) / p_s)
    return float(lam.max())


def upper_bound(prep: PreparedDeployment, slo: SLO) -> float:
    """Heuristic goodput upper bound (req/s), module docstring step 3 (AFD:
    :func:`serveplan.search_afd.afd_upper_bound`)."""
    if isinstance(prep, PreparedAFD):
        return afd_upper_bound(prep, slo, BOUND_SLACK)
    p, c = prep.prefill_costs, prep.decode_costs
    if slo.ttft_ms is not None and p.prefill_s + prep.kv_transfer_s > slo.ttft_ms / 1e3:
        return 0.0
    goal = None if slo.tpot_ms is None else slo.tpot_ms / 1e3
    d = prep.deployment
    if isinstance(d, PDDeployment):
        dec = np.inf
        if c.decode_tokens > 0:
            h = c.decode_peak[1] if goal is None else c.decode_rate_at(goal)
            dec = schedulers(d.decode) * h / c.decode_tokens
        bound = min(schedulers(d.prefill) / p.prefill_batched_s, dec)
    elif c.decode_tokens > 0:
        bound = schedulers(d) * _colocated_rate_bound(
            p.prefill_batched_s, c.decode_tokens, c.t_step, c.max_batch, goal)
    else:
        bound = schedulers(d) / p.prefill_batched_s
    return float(bound * BOUND_SLACK)


@dataclass
class _Row:
    deployment: object
    status: str = "pending"
    reason: str = ""
    bound: float = float("nan")
    analytic: float = float("nan")
    goodput: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    fidelity: str = ""
    ttft: float = float("nan")
    tpot: float = float("nan")
    seconds: float = 0.0
    prep: object = None
    binding: str = ""
    censored: bool = False
    summary: str = ""
    min_ttft: float = float("nan")
    min_tpot: float = float("nan")
    cost: float = float("nan")  # dollars per hour (NaN: a GPU type without a price)

    @property
    def gpus(self) -> int:
        return gpus(self.deployment)

    def per_gpu(self, value: float) -> float:
        return value / self.gpus

    def per_dollar(self, value: float) -> float:
        """Requests served per dollar at ``value`` req/s."""
        return 3600.0 * value / self.cost

    def score(self, value: float, rank_by: str) -> float:
        return self.per_dollar(value) if rank_by == "dollar" else self.per_gpu(value)


def _family(d, spec: SearchSpec) -> tuple[tuple, int]:
    """``(ratio key, multiple)``: strategies with one key differ only by an integer scale."""
    if is_afd(d):
        return afd_family(d)
    if isinstance(d, PDDeployment):
        y, z = d.prefill.num_instances, d.decode.num_instances
        g = math.gcd(y, z)
        return ("pd", d.prefill.gpu, d.decode.gpu, d.prefill.tp, d.decode.tp, d.prefill.dp,
                d.decode.dp, y // g, z // g), g
    return ("colocated", d.gpu, d.tp, d.dp), d.num_instances


def _mark_dominated(rows: list[_Row], spec: SearchSpec) -> None:
    """Module docstring, step 4."""
    best: dict[tuple, _Row] = {}
    for row in rows:
        if row.status != "pending":
            continue
        key, k = _family(row.deployment, spec)
        if key not in best or k > _family(best[key].deployment, spec)[1]:
            best[key] = row
    for row in rows:
        if row.status != "pending":
            continue
        top = best[_family(row.deployment, spec)[0]]
        if top is not row:
            row.status = "dominated"
            row.reason = f"goodput per GPU at most that of {strategy_label(top.deployment)}"


def _prepare(rows: list[_Row], spec: SearchSpec, ws: Workspace, seeds) -> None:
    workload = _workload(spec)
    for row in rows:
        try:
            kind = PreparedAFD if is_afd(row.deployment) else PreparedDeployment
            row.prep = kind(row.deployment, workload, seeds=seeds, workspace=ws)
        except SpecError as exc:
            reason = str(exc).splitlines()[0]
            fits = "GiB" in reason or "KV" in reason
            row.status = "oom" if fits else "invalid"
            row.reason = f"does not fit: {reason}" if fits else reason
            continue
        size = simulator_size(row.prep, spec.fidelity)
        if size > MAX_SIM_BYTES:  # (the largest feasible multiple is decided instead)
            row.status = "invalid"
            row.reason = (f"too large to simulate: {size / (1 << 30):.1f} GiB of simulator "
                          f"arrays, more than {MAX_SIM_BYTES / (1 << 30):g} GiB (--fidelity "
                          "request decides it)")
            continue
        row.bound = upper_bound(row.prep, spec.slo)
        row.analytic = analytic_goodput(row.prep, spec.slo)
        row.min_ttft, row.min_tpot = best_latencies(row.prep)


def best_latencies(prep: PreparedDeployment) -> tuple[float, float]:
    """``(TTFT, TPOT)`` in seconds of one request alone: the best the strategy can achieve
    (the TTFT includes the KV transfer of a disaggregated deployment; TPOT is NaN for
    one-token outputs)."""
    if isinstance(prep, PreparedAFD):
        return afd_best_latencies(prep)
    p, c = prep.prefill_costs, prep.decode_costs
    tpot = float(c.t_step(1.0)) if c.decode_tokens > 0 else float("nan")
    return float(p.prefill_s + prep.kv_transfer_s), tpot


def impossible_reason(row: _Row, slo: SLO) -> str:
    """Why a strategy whose bound is zero can meet the SLO at no rate (module docstring)."""
    for name, best, goal in (("TTFT", row.min_ttft, slo.ttft_ms),
                             ("TPOT", row.min_tpot, slo.tpot_ms)):
        if goal is not None and best * 1e3 > goal:
            return (f"SLO impossible: best achievable {name} is {best * 1e3:,.1f} ms (one "
                    f"request alone) > goal {goal:,.4g} ms")
    return "SLO impossible: one request alone misses it"


def _workload(spec: SearchSpec):
    from pydantic import TypeAdapter

    from serveplan.config import Workload

    return TypeAdapter(Workload).validate_python(spec.workload())


def run_search(spec: SearchSpec, *, workspace: Workspace | None = None, progress=None):
    """Run the search; returns an ``xarray.Dataset`` ranked by goodput per GPU.

    Parameters
    ----------
    spec : SearchSpec
        Model, GPU, budget, workload, SLO, fidelity and search knobs.
    workspace : Workspace, optional
        Shared caches (a fresh one by default).
    progress : callable, optional
        ``progress(done, total, name)`` after each decided strategy.
    """
    ws = workspace if workspace is not None else Workspace()
    seeds = tuple(range(spec.seed, spec.seed + spec.seeds))
    resolve_model(spec.model)  # an unknown or unreadable model or GPU: one error, not one
    for gpu in spec.gpu_types:  # "invalid" row per strategy
        resolve_gpu(gpu)
    prices = price_table(spec.prices)
    rows = [_Row(d) for d in enumerate_strategies(spec)]
    for row in rows:
        row.cost = _cost(row.deployment, prices, required=spec.rank_by == "dollar")
    t0 = time.perf_counter()
    _prepare(rows, spec, ws, seeds)
    _mark_dominated(rows, spec)
    ok = [r for r in rows if r.status == "pending"]
    rank_by = spec.rank_by
    ok.sort(key=lambda r: (-r.score(r.bound, rank_by), -r.score(r.analytic, rank_by), r.gpus))
    best: list[float] = []  # decided scores (goodput per GPU or per dollar), descending
    decided = 0
    for row in ok:
        incumbent = best[spec.top - 1] if len(best) >= spec.top else -1.0
        if row.score(row.bound, rank_by) < incumbent or row.bound == 0.0:
            row.status = "pruned"
            row.reason = ("analytic bound below the incumbent" if row.bound > 0 else
                          impossible_reason(row, spec.slo))
            continue
        if decided >= spec.max_decide:
            row.status, row.reason = "budget", f"max_decide={spec.max_decide} reached"
            continue
        _decide(row, spec, seeds)
        decided += 1
        best = sorted([*best, row.score(row.goodput, rank_by)], reverse=True)
        if progress is not None:
            progress(decided, len(ok), strategy_name(row.deployment))
    return strategy_dataset(rows, spec, time.perf_counter() - t0)


def _cost(deployment, prices, *, required: bool) -> float:
    """Dollars per hour; NaN for a GPU type without a price unless ranking needs it."""
    try:
        return hourly_cost(deployment, prices)
    except UserError:
        if required:
            raise
        return float("nan")


def _decide(row: _Row, spec: SearchSpec, seeds) -> None:
    t = time.perf_counter()
    level = resolve_fidelity(spec.fidelity, row.deployment)
    g = find_goodput(row.prep, spec.slo, fidelity=level, seeds=seeds,
                     confidence=spec.confidence, rtol=spec.rtol)
    row.status = "decided"
    row.goodput, row.low, row.high, row.fidelity = g.rate, g.low, g.upper, g.fidelity
    row.binding, row.censored, row.summary = g.binding, g.point_censored, g.sentence()
    at = g.check_at(g.rate)
    if at is not None:
        row.ttft, row.tpot = at.ttft.estimate, at.tpot.estimate
    row.seconds = time.perf_counter() - t
