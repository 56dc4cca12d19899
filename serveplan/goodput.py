r"""Goodput: the highest arrival rate at which a deployment meets its SLO, as an interval.

BestServe's Optimizer (§3.5, Algorithm 8) bisects the rate between
:math:`\lambda_\ell = 0.1` and :math:`\lambda_u = 1.2/T_{\min}`, and its FEASIBLE test
(Algorithm 9) accepts a rate when the simulated P90 TTFT and TPOT are within
:math:`(1+\tau)` of the goals, :math:`\tau = 0.1` -- a relaxation the paper itself calls
"not well-educated", there to absorb the run-to-run noise of the P90. Here the noise is
measured instead of absorbed:

**The SLO as attainment fractions.** "P-th percentile of TTFT :math:`\le g`" holds iff the
fraction :math:`p_{ttft} = P(\text{TTFT} \le g) \ge P/100`; likewise for TPOT. DistServe's
form ("a fraction :math:`\ge a` of requests meets both goals") is :math:`p_{both} \ge a`. So
every SLO form is a set of constraints :math:`p_k \ge \text{target}_k`.

**Confidence intervals by batch means.** Requests of one run are correlated (they queue
behind each other), so a binomial interval on the pooled requests would be too narrow. Each
run (after dropping a warm-up fraction) is cut into contiguous batches in arrival order; the
batch attainment means of all seeds give a Student-t interval for :math:`p_k`, never
narrower than the Agresti-Coull binomial interval of the pooled requests. Percentile CIs
(e.g. for P90 TTFT) invert it: the order statistics at levels :math:`q \pm h`, with
:math:`h` the batch-means half-width of the indicator :math:`1\{x \le \hat x_q\}`.

**Sequential seeds.** A rate is simulated for the first seed; more seeds are added only
while the interval of some constraint still contains its target. Each look uses level
:math:`1 - \alpha/(K m)` (Bonferroni over the :math:`K` looks and :math:`m` constraints), so
the error of a rate's verdict is at most :math:`\alpha`.

**Common random numbers.** Every rate replays the same unit-rate requests compressed in time
(:class:`~serveplan.fidelity.PreparedDeployment`), so attainment is (near) monotone in the
rate and differences between rates are not seed noise.

**Three rates.** With :math:`\hat p, p^-, p^+` the estimate and interval ends,

* :math:`\lambda^- = \sup\{\lambda : p^-_k(\lambda) \ge t_k\ \forall k\}`: the SLO is met with
  confidence (the upper CI of each percentile is within its goal);
* :math:`\hat\lambda = \sup\{\lambda : \hat p_k \ge t_k\}`: the point estimate;
* :math:`\lambda^+ = \sup\{\lambda : p^+_k \ge t_k\}`: not rejected.

Goodput is reported as :math:`\hat\lambda` with the interval :math:`[\lambda^-,
\text{next}^+)` (:mod:`serveplan.goodput_result`). Each is found by safeguarded regula falsi
in log-rate on the smallest margin :math:`\min_k (p_k - t_k)`, bracketed first by the
analytic level's goodput (stepped up or down by a factor that starts at ``grow`` = 1.1 and
squares at each step until the bracket holds), ending when the bracket of each is narrower
than ``rtol``; every evaluation updates all three brackets. The evaluated rate just above
each (``next_*``) is kept: there the predicate fails.

**Sustainable rates only.** A rate at or above the capacity bound :math:`C`
(:meth:`~serveplan.fidelity.PreparedDeployment.capacity`: prefill at its best batching and
decode at its peak tokens/s) is not sustainable: the queue grows without limit, and a finite
run only hides it, because its first requests find an empty system. Below :math:`C` a run
still shows the steady state only if it is longer than the queue's relaxation time, which
for M/M/1 at utilisation :math:`\rho` is :math:`1/(\mu(1-\sqrt\rho)^2)` (Abate & Whitt,
"Transient behavior of the M/M/1 queue", 1987), i.e. :math:`\rho/(1-\sqrt\rho)^2` arrivals.
That is at most the :math:`n` requests a run keeps after its warm-up iff
:math:`\rho \le n/(1+\sqrt n)^2`, so the search evaluates no rate above the *ceiling*
:math:`C\,n/(1+\sqrt n)^2` (0.954 C for n = 1,800; at the analytic level, which is the
steady state itself, the ceiling is :math:`C`). Where the SLO still holds at the ceiling the
goodput is *censored*: at least the highest rate met, capacity binds rather than the SLO, and
longer runs move the ceiling toward :math:`C`. (Measured on ``examples/llama8b-h100.yaml`` at
the iteration level: 20,000-request runs saturate at 28.5 req/s against :math:`C` = 28.94,
and their P90 TTFT passes 500 ms at 28 req/s, while 2,000-request runs at 28.9 req/s still
show a P90 TTFT of 0.15 s. The search with 2,000-request runs now reports "at least 27.62
req/s, censored"; with 20,000-request runs, 27.86 req/s, TTFT-bound.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serveplan.afd_prepared import PreparedAFD
from serveplan.config import (
    SLO,
    Deployment,
    Workload,
    check_simulator_memory,
    simulator_bytes,
)
from serveplan.deployments import PDDeployment, parse_deployment, strategy_name
from serveplan.fidelity import PreparedDeployment, resolve_fidelity, schedulers
from serveplan.goodput_result import GoodputResult, RateCheck
from serveplan.goodput_stats import Interval, attainment_interval, quantile_interval
from serveplan.pools_config import PoolsDeployment, Requests, at_most, parse_architecture
from serveplan.queueing.analytic import max_rate
from serveplan.search_afd import is_afd
from serveplan.sim.summary import meets_goals

MAX_SEEDS = 1000
"""Most replications per rate (``seeds``)."""
Seeds = Annotated[int, at_most(MAX_SEEDS, "replications per rate, each a whole simulated run")]

__all__ = ["GoodputConfig", "GoodputOptions", "GoodputResult", "Interval", "RateCheck",
           "analytic_goodput", "attainment_interval", "check_rate", "constraints",
           "find_goodput", "meets", "quantile_interval", "rate_ceiling", "run_goodput",
           "verifiable_utilisation"]


# ----------------------------------------------------------------------------- SLO checks
@dataclass(frozen=True)
class Constraint:
    """``P(metric <= goal_s) >= target`` (metric ``ttft``, ``tpot`` or ``both``)."""

    metric: str
    target: float
    ttft_s: float | None
    tpot_s: float | None


def constraints(slo: SLO) -> list[Constraint]:
    """The attainment constraints an SLO stands for (module docstring)."""
    t = None if slo.ttft_ms is None else slo.ttft_ms / 1e3
    p = None if slo.tpot_ms is None else slo.tpot_ms / 1e3
    if t is None and p is None:
        raise ValueError("the SLO needs a ttft_ms or a tpot_ms goal")
    if slo.attainment is not None:
        return [Constraint("both", float(slo.attainment), t, p)]
    q = slo.percentile / 100.0
    out = []
    if t is not None:
        out.append(Constraint("ttft", q, t, None))
    if p is not None:
        out.append(Constraint("tpot", q, None, p))
    return out


def goals(slo: SLO) -> list[Constraint]:
    """Each goal of ``slo`` on its own, at the SLO's target (to tell which goal binds)."""
    target = float(slo.attainment if slo.attainment is not None else slo.percentile / 100.0)
    out = []
    if slo.ttft_ms is not None:
        out.append(Constraint("ttft", target, slo.ttft_ms / 1e3, None))
    if slo.tpot_ms is not None:
        out.append(Constraint("tpot", target, None, slo.tpot_ms / 1e3))
    return out


def meets(c: Constraint, ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """Which requests (seconds) meet constraint ``c``: a request never served (TTFT ``inf``,
    e.g. a prompt longer than ``max_model_len``) misses every goal; a one-token output (TPOT
    NaN) meets any TPOT goal (:func:`serveplan.sim.summary.meets_goals`)."""
    return meets_goals(ttft, tpot, c.ttft_s, c.tpot_s)


def check_rate(prep: PreparedDeployment, rate: float, slo: SLO, *, fidelity: str = "auto",
               seeds: Sequence[int] = (0, 1, 2), confidence: float = 0.95,
               warmup: float = 0.1, batches: int = 10) -> RateCheck:
    """Simulate ``rate`` seed after seed until the SLO verdict is decided (or seeds run out).

    See the module docstring (sequential seeds, Bonferroni level per look).
    """
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    cons, alone = constraints(slo), goals(slo)
    q = slo.percentile / 100.0
    level = 1.0 - (1.0 - confidence) / (len(seeds) * len(cons))
    ok_runs: dict[str, list] = {c.metric: [] for c in cons}
    ttfts, tpots = [], []
    check = None
    for i, seed in enumerate(seeds):
        m = prep.evaluate(rate, seed, fidelity)
        start = int(np.floor(warmup * len(m)))
        ttft, tpot = m.ttft_s[start:], m.tpot_s[start:]
        ttfts.append(ttft)
        tpots.append(tpot)
        for c in cons:
            ok_runs[c.metric].append(meets(c, ttft, tpot))
        att = {k: attainment_interval(v, level, batches) for k, v in ok_runs.items()}
        pooled = (np.concatenate(ttfts), np.concatenate(tpots))
        check = RateCheck(
            rate=float(rate), seeds=i + 1, requests=int(pooled[0].size),
            attainment=att, targets={c.metric: c.target for c in cons},
            ttft=quantile_interval(ttfts, q, level, batches),
            tpot=quantile_interval(tpots, q, level, batches),
            goal_attainment={g.metric: float(meets(g, *pooled).mean()) for g in alone},
            goal_target=alone[0].target)
        if check.verdict != "uncertain":
            break
    return check


def _analytic_attainment(est, c: Constraint) -> np.ndarray:
    p = np.ones(est.rates.shape)
    if c.ttft_s is not None:
        p = p * est.ttft_cdf(c.ttft_s)
    if c.tpot_s is not None:
        p = p * est.tpot_cdf(c.tpot_s)
    return np.where(est.feasible, p, 0.0)


def analytic_checks(prep: PreparedDeployment, rates, slo: SLO) -> list[RateCheck]:
    """Level-1 verdicts at ``rates`` (exact intervals: the analytic level has no noise)."""
    est = prep.analytic(rates)
    cons, alone = constraints(slo), goals(slo)
    q = slo.percentile / 100.0
    att = {c.metric: _analytic_attainment(est, c) for c in cons}
    each = {g.metric: _analytic_attainment(est, g) for g in alone}
    ttft, tpot = est.ttft_quantile(q), est.tpot_quantile(q)

    def exact(x: float) -> Interval:
        return Interval(float(x), float(x), float(x))

    return [RateCheck(float(r), 0, 0, {k: exact(v[i]) for k, v in att.items()},
                      {c.metric: c.target for c in cons}, exact(ttft[i]), exact(tpot[i]),
                      goal_attainment={k: float(v[i]) for k, v in each.items()},
                      goal_target=alone[0].target, sustainable=bool(est.feasible[i]))
            for i, r in enumerate(est.rates)]


def analytic_goodput(prep: PreparedDeployment, slo: SLO, *, rtol: float = 1e-3) -> float:
    """Largest rate whose analytic estimates meet the SLO (0 if none); vectorised scan."""
    cons = constraints(slo)
    upper = 1.5 * prep.capacity()

    def ok(rates):
        est = prep.analytic(rates)
        good = np.ones(est.rates.shape, dtype=bool)
        for c in cons:
            good &= _analytic_attainment(est, c) >= c.target
        return good

    return max_rate(ok, upper, rtol=rtol)


# ----------------------------------------------------------------------------- bisection
class _Brackets:
    """Evaluated rates and, per predicate, the largest true rate below the smallest false."""

    PREDICATES = ("point", "met", "plausible")
    MARGIN = {"point": "estimate", "met": "low", "plausible": "high"}

    def __init__(self):
        self.checks: dict[float, RateCheck] = {}

    def add(self, c: RateCheck) -> None:
        self.checks[c.rate] = c

    def bracket(self, pred: str) -> tuple[RateCheck | None, RateCheck | None]:
        rates = sorted(self.checks)
        false = [r for r in rates if not getattr(self.checks[r], pred)]
        hi = false[0] if false else None
        true = [r for r in rates if getattr(self.checks[r], pred) and (hi is None or r < hi)]
        lo = true[-1] if true else None
        return (self.checks[lo] if lo is not None else None,
                self.checks[hi] if hi is not None else None)


def _next_rate(lo: RateCheck, hi: RateCheck, which: str) -> float:
    """Regula falsi in log-rate on the margin, kept within the middle 60% of the bracket."""
    fa, fb = lo.margin(which), hi.margin(which)
    la, lb = np.log(lo.rate), np.log(hi.rate)
    frac = fa / (fa - fb) if fa - fb > 0 else 0.5
    frac = min(max(frac, 0.2), 0.8)
    return float(np.exp(la + frac * (lb - la)))


def find_goodput(prep: PreparedDeployment, slo: SLO, *, fidelity: str = "auto",
                 seeds: Sequence[int] = (0, 1, 2), confidence: float = 0.95,
                 rtol: float = 0.02, warmup: float = 0.1, batches: int = 10,
                 grow: float = 1.1, max_evals: int = 60) -> GoodputResult:
    """Goodput of a prepared deployment at ``fidelity`` (module docstring).

    Parameters
    ----------
    prep : PreparedDeployment
        Deployment and workload (its ``seeds`` should include ``seeds``).
    slo : SLO
        Goals and form (percentile or attainment).
    fidelity : {'auto', 'analytic', 'request', 'iteration'}
        Level that decides each rate; the analytic level always brackets.
    seeds : sequence of int
        Seeds of the replications (used sequentially, see :func:`check_rate`).
    confidence : float
        Confidence of each rate's verdict.
    rtol : float
        Relative width at which each bracket stops.
    warmup : float
        Fraction of each run's first requests left out of the statistics.
    grow : float
        First factor by which the bracket grows or shrinks (squared at each further step).
    max_evals : int
        Safety cap on the number of evaluated rates.
    """
    level = resolve_fidelity(fidelity, prep.deployment)
    cap = prep.capacity()
    lam_a = analytic_goodput(prep, slo)
    common = dict(fidelity=level, analytic=lam_a, capacity=cap, t_min=prep.t_min(),
                  gpus=prep.gpus, slo=slo, seeds=tuple(seeds), confidence=confidence,
                  rtol=rtol)
    if level == "analytic":
        return _analytic_result(prep, slo, lam_a, cap, rtol, {**common, "ceiling": cap})
    ceiling, n = rate_ceiling(prep, warmup)
    common.update(ceiling=ceiling, requests_per_run=n)

    book = _Brackets()

    def run(rate: float) -> RateCheck:
        c = check_rate(prep, rate, slo, fidelity=level, seeds=seeds, confidence=confidence,
                       warmup=warmup, batches=batches)
        book.add(c)
        return c

    start = min(lam_a if lam_a > 0 else 0.5 * cap, ceiling)
    censored = _step_to_brackets(run, book, start, ceiling, grow, max_evals)
    _narrow_brackets(run, book, rtol, max_evals)
    return _bracketed_result(book, censored, common)


def verifiable_utilisation(n: int) -> float:
    r"""Highest utilisation whose steady state a run of ``n`` requests shows:
    :math:`n/(1+\sqrt n)^2` (module docstring, "Sustainable rates only").

    >>> round(verifiable_utilisation(1800), 4)
    0.9545
    """
    return float(n / (1.0 + math.sqrt(n)) ** 2) if n > 0 else 0.0


def rate_ceiling(prep: PreparedDeployment, warmup: float) -> tuple[float, int]:
    """``(ceiling, n)``: the highest rate a simulated run of ``prep`` can vouch for, and the
    requests ``n`` each run keeps after dropping the ``warmup`` fraction."""
    total = len(prep.unit_requests(prep.seeds[0]).prompt_len)
    n = total - int(np.floor(warmup * total))
    return prep.capacity() * verifiable_utilisation(n), n


def _analytic_result(prep: PreparedDeployment, slo: SLO, lam_a: float, cap: float, rtol: float,
                     common: dict) -> GoodputResult:
    """Goodput at the analytic level: its goodput, with the analytic checks on a rate grid
    that includes the goodput and the rate just above it (where the SLO or stability fails)."""
    nxt = lam_a * (1 + rtol) if lam_a > 0 else cap * 1e-4
    grid = np.unique(np.concatenate([np.geomspace(cap * 1e-2, cap, 24), [lam_a, nxt]]))
    grid = grid[grid > 0]
    return GoodputResult(rate=lam_a, low=lam_a, high=lam_a, next_rate=nxt, next_low=nxt,
                         next_high=nxt, checks=tuple(analytic_checks(prep, grid, slo)), **common)


def _step_to_brackets(run, book: _Brackets, start: float, ceiling: float, grow: float,
                      max_evals: int) -> bool:
    """Step the rate up from ``start`` while the SLO is plausible (to ``ceiling``, the highest
    verifiable rate, never beyond), then down until it is met (to ``start / 1000``), by
    factors ``grow``, ``grow**2``, ``grow**4``, ...; returns whether the last rate up was
    still plausible (censored)."""
    floor = start * 1e-3
    c = run(start)
    r, f = start, grow
    while c.plausible and r < ceiling and len(book.checks) < max_evals:
        r, f = min(r * f, ceiling), f * f
        c = run(r)
    censored = c.plausible
    r, f = start, grow
    c = book.checks[start]
    while not c.met and r > floor and len(book.checks) < max_evals:
        r, f = max(r / f, floor), f * f
        c = run(r)
    return censored


def _narrow_brackets(run, book: _Brackets, rtol: float, max_evals: int) -> None:
    """Regula falsi on each predicate's bracket until it is narrower than ``rtol``."""
    for pred in _Brackets.PREDICATES:
        which = _Brackets.MARGIN[pred]
        while len(book.checks) < max_evals:
            lo, hi = book.bracket(pred)
            if lo is None or hi is None or hi.rate <= lo.rate * (1.0 + rtol):
                break
            run(_next_rate(lo, hi, which))


def _bracketed_result(book: _Brackets, censored: bool, common: dict) -> GoodputResult:
    """The three goodputs (largest rate where each predicate holds) and the rates above."""
    found = {}
    for pred in _Brackets.PREDICATES:
        lo, hi = book.bracket(pred)
        found[pred] = (lo.rate if lo is not None else 0.0,
                       hi.rate if hi is not None else float("inf"))
    checks = tuple(book.checks[r] for r in sorted(book.checks))
    return GoodputResult(rate=found["point"][0], low=found["met"][0],
                         high=found["plausible"][0], next_rate=found["point"][1],
                         next_low=found["met"][1], next_high=found["plausible"][1],
                         checks=checks, censored=bool(censored), **common)


# ----------------------------------------------------------------------------- config
class GoodputOptions(BaseModel):
    """How ``serveplan goodput`` searches (the ``goodput:`` section of its YAML)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fidelity: Literal["auto", "analytic", "request", "iteration"] = "auto"
    seeds: Seeds = Field(3, ge=1, description="Replications, seeds seed .. seed + seeds - 1.")
    confidence: float = Field(0.95, gt=0, lt=1)
    rtol: float = Field(0.02, gt=0, lt=1)
    warmup: float = Field(0.1, ge=0, lt=1)
    num_requests: Requests | None = Field(None, ge=10)
    tau: float = Field(2.5, gt=0, description="BestServe's pseudo-batch scalar (request level).")


class GoodputConfig(BaseModel):
    """Everything ``serveplan goodput`` needs: deployment, workload, SLO, seed, options.

    The workload's ``rate`` is not used (it may be omitted for the synthetic kinds).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Deployment | PDDeployment | PoolsDeployment
    workload: Workload
    slo: SLO
    seed: int = Field(0, ge=0)
    goodput: GoodputOptions = GoodputOptions()

    @field_validator("deployment", mode="before")
    @classmethod
    def _arch(cls, v):
        """Colocated and PD in their own form; attention/FFN disaggregation in the pool
        form (it has no other)."""
        if not isinstance(v, dict):
            return v
        d = parse_architecture(v)
        return d if is_afd(d) else parse_deployment(d)

    @field_validator("workload", mode="before")
    @classmethod
    def _rate(cls, v):
        if isinstance(v, dict) and v.get("kind") in ("poisson", "gamma", "constant"):
            return {"rate": 1.0, **v}
        return v

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.goodput.seeds))


def simulator_size(prep: PreparedDeployment, fidelity: str) -> float:
    """Bytes the event simulator preallocates for one run of ``prep`` at ``fidelity``
    (:func:`serveplan.config.simulator_bytes`; 0 below the iteration level)."""
    if resolve_fidelity(fidelity, prep.deployment) != "iteration":
        return 0.0
    pools, prompt, output, hold = _sim_layout(prep)
    return float(sum(simulator_bytes(pools, prompt, output, prefill_hold=hold).values()))


def _sim_layout(prep: PreparedDeployment) -> tuple:
    """``(pools, prompt, output, prefill_hold)`` of one run of ``prep``."""
    if hasattr(prep, "sim_layout"):  # a deployment that lays out its own pools (AFD)
        return prep.sim_layout()
    d = prep.deployment
    pools = ([(prep.prefill.params, schedulers(d.prefill), "prefill"),
              (prep.decode.params, schedulers(d.decode), "decode")] if prep.is_pd
             else [(prep.prefill.params, schedulers(d), "colocated")])
    req = prep.unit_requests(prep.seeds[0])
    return pools, req.prompt_len, req.output_len, getattr(d, "prefill_hold", None)


def run_goodput(cfg: GoodputConfig) -> GoodputResult:
    """Prepare the deployment and find its goodput as ``cfg`` says (a run too large for
    memory is refused first, :func:`serveplan.config.check_simulator_memory`)."""
    o = cfg.goodput
    kind = PreparedAFD if is_afd(cfg.deployment) else PreparedDeployment
    prep = kind(cfg.deployment, cfg.workload, seeds=cfg.seeds, num_requests=o.num_requests,
                tau=o.tau)
    if resolve_fidelity(o.fidelity, prep.deployment) == "iteration":
        pools, prompt, output, hold = _sim_layout(prep)
        check_simulator_memory(pools, prompt, output, prefill_hold=hold)
    g = find_goodput(prep, cfg.slo, fidelity=o.fidelity, seeds=cfg.seeds,
                     confidence=o.confidence, rtol=o.rtol, warmup=o.warmup)
    return replace(g, attrs={"config": cfg.model_dump_json(), "strategy":
                             strategy_name(prep.deployment), **prep.describe()})
