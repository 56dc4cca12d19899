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

Goodput is reported as :math:`\hat\lambda \in [\lambda^-, \lambda^+]`. Each is found by
safeguarded regula falsi in log-rate on the smallest margin :math:`\min_k (p_k - t_k)`,
bracketed first by the analytic level's goodput (stepped up or down by a factor that starts
at ``grow`` = 1.1 and squares at each step until the bracket holds), ending when the bracket of each is narrower than ``rtol``; every evaluation updates
all three brackets. The evaluated rate just above each (``next_*``) is kept: there the
predicate fails.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy import stats

from serveplan.config import SLO, Deployment, Workload
from serveplan.deployments import PDDeployment, parse_deployment, strategy_name
from serveplan.fidelity import PreparedDeployment, resolve_fidelity
from serveplan.queueing.analytic import max_rate

__all__ = ["GoodputConfig", "GoodputOptions", "GoodputResult", "Interval", "RateCheck", "analytic_goodput", "attainment_interval",
           "check_rate", "constraints", "find_goodput", "quantile_interval", "run_goodput"]


# ----------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval."""

    estimate: float
    low: float
    high: float

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.estimate, self.low, self.high)


def _batch_means(runs: Sequence[np.ndarray], batches: int) -> np.ndarray:
    """Means of ``batches`` contiguous, near-equal batches of each run, all runs together."""
    out = []
    for run in runs:
        k = min(batches, run.size)
        if k == 0:
            continue
        edges = np.linspace(0, run.size, k + 1).astype(np.int64)
        out.append(np.add.reduceat(run, edges[:-1]) / np.diff(edges))
    return np.concatenate(out) if out else np.empty(0)


def _half_width(runs: Sequence[np.ndarray], confidence: float, batches: int) -> tuple:
    """``(p_hat, half_width)`` of the mean of the 0/1 ``runs`` (module docstring)."""
    pooled = np.concatenate([np.asarray(r, dtype=np.float64) for r in runs])
    n = pooled.size
    if n == 0:
        return float("nan"), float("nan")
    p = float(pooled.mean())
    alpha = 1.0 - confidence
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    p_ac = (pooled.sum() + z * z / 2.0) / (n + z * z)
    se = float(np.sqrt(p_ac * (1.0 - p_ac) / (n + z * z)))
    bm = _batch_means([np.asarray(r, dtype=np.float64) for r in runs], batches)
    crit = z
    if bm.size >= 2:
        se = max(se, float(bm.std(ddof=1) / np.sqrt(bm.size)))
        crit = float(stats.t.ppf(1.0 - alpha / 2.0, bm.size - 1))
    return p, crit * se


def attainment_interval(runs: Sequence[np.ndarray], confidence: float = 0.95,
                        batches: int = 10) -> Interval:
    r"""Fraction of requests meeting a goal, with a batch-means confidence interval.

    Parameters
    ----------
    runs : sequence of bool arrays
        Per run (seed), whether each request met the goal, in arrival order.
    confidence : float
        Two-sided level, e.g. 0.95.
    batches : int
        Contiguous batches per run.

    Notes
    -----
    :math:`\hat p` is the pooled fraction; the half-width is
    :math:`t_{1-\alpha/2, B-1}\max(s_B/\sqrt{B}, \sqrt{\tilde p(1-\tilde p)/(n+z^2)})` with
    :math:`s_B` the standard deviation of the :math:`B` batch means and :math:`\tilde p` the
    Agresti-Coull centre; the interval is clipped to [0, 1].

    Examples
    --------
    >>> iv = attainment_interval([np.ones(1000, bool)])
    >>> iv.estimate, iv.high, 0.99 < iv.low < 1.0
    (1.0, 1.0, True)
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    p, h = _half_width(runs, confidence, batches)
    return Interval(p, float(max(0.0, p - h)), float(min(1.0, p + h)))


def _first_value(values: np.ndarray, holds) -> float:
    """Smallest of the sorted ``values`` where ``holds(x)`` (assumed monotone) is true."""
    lo, hi = 0, values.size - 1
    if not holds(values[hi]):
        return float("inf")
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo])


def quantile_interval(runs: Sequence[np.ndarray], q: float, confidence: float = 0.95,
                      batches: int = 10) -> Interval:
    r"""The ``q``-quantile of pooled values and the interval that inverts the attainment CI.

    ``high`` is the smallest value :math:`x` whose attainment lower bound
    :math:`p^-(x) = \hat F(x) - h(x)` reaches ``q`` and ``low`` the smallest with
    :math:`\hat F(x) + h(x) \ge q` (:func:`attainment_interval` at ``x``), so "the upper CI
    of the quantile is within a goal" and "the goal's attainment is confidently at least
    ``q``" are the same statement. NaN values are dropped (one-token outputs have no
    TPOT); ``inf`` values count as large.
    """
    runs = [np.asarray(r, dtype=np.float64) for r in runs]
    runs = [r[~np.isnan(r)] for r in runs]
    pooled = np.concatenate(runs) if runs else np.empty(0)
    if pooled.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    x = float(np.quantile(pooled, q, method="inverted_cdf"))
    values = np.unique(pooled)

    def bounds(v):
        p, h = _half_width([r <= v for r in runs], confidence, batches)
        return p - h, p + h

    lo = _first_value(values, lambda v: bounds(v)[1] >= q)
    hi = _first_value(values, lambda v: bounds(v)[0] >= q)
    return Interval(x, min(lo, x), max(hi, x))


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


def _meets(c: Constraint, ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    ok = np.ones(ttft.shape, dtype=bool)
    if c.ttft_s is not None:
        ok &= ttft <= c.ttft_s
    if c.tpot_s is not None:
        ok &= ~(tpot > c.tpot_s)  # NaN (one-token output) meets any TPOT goal
    return ok


@dataclass(frozen=True)
class RateCheck:
    """The SLO verdict at one arrival rate.

    ``attainment[k]`` is the interval of constraint ``k``'s fraction; ``ttft``/``tpot`` the
    SLO-percentile latencies (s) with their intervals; ``seeds`` the runs used.
    """

    rate: float
    seeds: int
    requests: int
    attainment: dict[str, Interval]
    targets: dict[str, float]
    ttft: Interval
    tpot: Interval

    def margin(self, which: str) -> float:
        """Smallest ``p_k - target_k`` at the interval end ``which`` (estimate/low/high)."""
        vals = [getattr(iv, which) - self.targets[k] for k, iv in self.attainment.items()]
        return float(min(vals))

    @property
    def met(self) -> bool:
        """Every constraint's lower confidence bound reaches its target."""
        return self.margin("low") >= 0.0

    @property
    def point(self) -> bool:
        return self.margin("estimate") >= 0.0

    @property
    def plausible(self) -> bool:
        """No constraint's upper confidence bound is below its target."""
        return self.margin("high") >= 0.0

    @property
    def verdict(self) -> str:
        return "met" if self.met else ("violated" if not self.plausible else "uncertain")


def check_rate(prep: PreparedDeployment, rate: float, slo: SLO, *, fidelity: str = "auto",
               seeds: Sequence[int] = (0, 1, 2), confidence: float = 0.95,
               warmup: float = 0.1, batches: int = 10) -> RateCheck:
    """Simulate ``rate`` seed after seed until the SLO verdict is decided (or seeds run out).

    See the module docstring (sequential seeds, Bonferroni level per look).
    """
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    cons = constraints(slo)
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
            ok_runs[c.metric].append(_meets(c, ttft, tpot))
        att = {k: attainment_interval(v, level, batches) for k, v in ok_runs.items()}
        check = RateCheck(
            rate=float(rate), seeds=i + 1, requests=int(sum(t.size for t in ttfts)),
            attainment=att, targets={c.metric: c.target for c in cons},
            ttft=quantile_interval(ttfts, q, level, batches),
            tpot=quantile_interval(tpots, q, level, batches))
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
    cons = constraints(slo)
    q = slo.percentile / 100.0
    att = {c.metric: _analytic_attainment(est, c) for c in cons}
    ttft, tpot = est.ttft_quantile(q), est.tpot_quantile(q)
    out = []
    for i, r in enumerate(est.rates):
        a = {k: Interval(float(v[i]), float(v[i]), float(v[i])) for k, v in att.items()}
        out.append(RateCheck(float(r), 0, 0, a, {c.metric: c.target for c in cons},
                             Interval(float(ttft[i]), float(ttft[i]), float(ttft[i])),
                             Interval(float(tpot[i]), float(tpot[i]), float(tpot[i]))))
    return out


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
@dataclass(frozen=True)
class GoodputResult:
    r"""Goodput :math:`\hat\lambda \in [\lambda^-, \lambda^+]` (req/s) and how it was found.

    ``next_rate``/``next_low``/``next_high`` are the evaluated rates just above each (where
    the predicate failed); ``checks`` every evaluated rate, ascending.
    """

    rate: float
    low: float
    high: float
    next_rate: float
    next_low: float
    next_high: float
    fidelity: str
    analytic: float
    capacity: float
    t_min: float
    gpus: int
    checks: tuple[RateCheck, ...]
    slo: SLO
    seeds: tuple[int, ...]
    confidence: float
    rtol: float
    censored: bool = False
    attrs: dict = field(default_factory=dict)

    @property
    def per_gpu(self) -> float:
        return self.rate / self.gpus if self.gpus else float("nan")

    def check_at(self, rate: float) -> RateCheck | None:
        for c in self.checks:
            if c.rate == rate:
                return c
        return None

    def to_dataset(self):
        """Evaluated rates as an ``xarray.Dataset`` (``rate`` x ``stat`` estimate/low/high)."""
        import xarray as xr

        from serveplan import __version__

        rates = np.array([c.rate for c in self.checks])
        stat = ["estimate", "low", "high"]
        data = {
            "ttft_p_s": (("rate", "stat"), np.array([c.ttft.as_tuple() for c in self.checks])
                         .reshape(-1, 3), {"units": "s", "long_name":
                                           f"P{self.slo.percentile:g} TTFT"}),
            "tpot_p_s": (("rate", "stat"), np.array([c.tpot.as_tuple() for c in self.checks])
                         .reshape(-1, 3), {"units": "s", "long_name":
                                           f"P{self.slo.percentile:g} TPOT"}),
            "verdict": (("rate",), np.array([c.verdict for c in self.checks], dtype=object)),
            "seeds_used": (("rate",), np.array([c.seeds for c in self.checks], dtype=np.int64)),
        }
        for k in (self.checks[0].attainment if self.checks else {}):
            data[f"attainment_{k}"] = (("rate", "stat"), np.array(
                [c.attainment[k].as_tuple() for c in self.checks]).reshape(-1, 3))
        attrs = {
            "goodput": self.rate, "goodput_low": self.low, "goodput_high": self.high,
            "goodput_per_gpu": self.per_gpu, "next_rate": self.next_rate,
            "next_low": self.next_low, "next_high": self.next_high,
            "fidelity": self.fidelity, "analytic_goodput": self.analytic,
            "capacity": self.capacity, "t_min": self.t_min, "gpus": self.gpus,
            "seeds": json.dumps(list(self.seeds)), "confidence": self.confidence,
            "rtol": self.rtol, "censored": int(self.censored),
            "slo": self.slo.model_dump_json(), "serveplan_version": __version__,
            **{k: (v if isinstance(v, (int, float, str)) else json.dumps(v, default=float))
               for k, v in self.attrs.items()},
        }
        return xr.Dataset(data, coords={"rate": rates, "stat": stat}, attrs=attrs)


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
        return _analytic_result(prep, slo, lam_a, cap, rtol, common)

    book = _Brackets()

    def run(rate: float) -> RateCheck:
        c = check_rate(prep, rate, slo, fidelity=level, seeds=seeds, confidence=confidence,
                       warmup=warmup, batches=batches)
        book.add(c)
        return c

    start = lam_a if lam_a > 0 else 0.5 * cap
    censored = _step_to_brackets(run, book, start, max(4.0 * cap, 4.0 * start), grow, max_evals)
    _narrow_brackets(run, book, rtol, max_evals)
    return _bracketed_result(book, censored, common)


def _analytic_result(prep: PreparedDeployment, slo: SLO, lam_a: float, cap: float, rtol: float,
                     common: dict) -> GoodputResult:
    """Goodput at the analytic level: its goodput, with the analytic checks on a rate grid."""
    grid = np.unique(np.concatenate([np.geomspace(cap * 1e-2, cap, 24), [lam_a]]))
    grid = grid[grid > 0]
    nxt = lam_a * (1 + rtol)
    return GoodputResult(rate=lam_a, low=lam_a, high=lam_a, next_rate=nxt, next_low=nxt,
                         next_high=nxt, checks=tuple(analytic_checks(prep, grid, slo)), **common)


def _step_to_brackets(run, book: _Brackets, start: float, ceiling: float, grow: float,
                      max_evals: int) -> bool:
    """Step the rate up from ``start`` while the SLO is plausible (to ``ceiling``), then down
    until it is met (to ``start / 1000``), by factors ``grow``, ``grow**2``, ``grow**4``, ...;
    returns whether the last rate up was still plausible (censored)."""
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
    seeds: int = Field(3, ge=1, description="Replications, seeds seed .. seed + seeds - 1.")
    confidence: float = Field(0.95, gt=0, lt=1)
    rtol: float = Field(0.02, gt=0, lt=1)
    warmup: float = Field(0.1, ge=0, lt=1)
    num_requests: int | None = Field(None, ge=10)
    tau: float = Field(2.5, gt=0, description="BestServe's pseudo-batch scalar (request level).")


class GoodputConfig(BaseModel):
    """Everything ``serveplan goodput`` needs: deployment, workload, SLO, seed, options.

    The workload's ``rate`` is not used (it may be omitted for the synthetic kinds).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Deployment | PDDeployment
    workload: Workload
    slo: SLO
    seed: int = Field(0, ge=0)
    goodput: GoodputOptions = GoodputOptions()

    @field_validator("deployment", mode="before")
    @classmethod
    def _arch(cls, v):
        return parse_deployment(v) if isinstance(v, dict) else v

    @field_validator("workload", mode="before")
    @classmethod
    def _rate(cls, v):
        if isinstance(v, dict) and v.get("kind") in ("poisson", "gamma", "constant"):
            return {"rate": 1.0, **v}
        return v

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.goodput.seeds))


def run_goodput(cfg: GoodputConfig) -> GoodputResult:
    """Prepare the deployment and find its goodput as ``cfg`` says."""
    o = cfg.goodput
    prep = PreparedDeployment(cfg.deployment, cfg.workload, seeds=cfg.seeds,
                              num_requests=o.num_requests, tau=o.tau)
    g = find_goodput(prep, cfg.slo, fidelity=o.fidelity, seeds=cfg.seeds,
                     confidence=o.confidence, rtol=o.rtol, warmup=o.warmup)
    return replace(g, attrs={"config": cfg.model_dump_json(), "strategy":
                             strategy_name(prep.deployment), **prep.describe()})
