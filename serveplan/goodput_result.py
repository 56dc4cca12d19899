r"""What a goodput search found, and how to say it: :class:`GoodputResult`.

The three rates of :mod:`serveplan.goodput` (:math:`\lambda^- \le \hat\lambda \le
\lambda^+`) are each the largest *evaluated* rate where their predicate held; the smallest
evaluated rate above each, where it failed, is kept as ``next_*``. The goodput's confidence
interval is therefore :math:`[\lambda^-, \text{next}^+)`: the SLO is met with confidence at
``low`` and confidently violated at ``next_high`` (or ``next_high`` is not a sustainable
rate). Its width includes the bisection's resolution ``rtol``: when one evaluated rate meets
the SLO with confidence and the next one up violates it with confidence, the interval is one
bracket wide, never zero.

Which goal binds is read at ``next_rate``, the first evaluated rate above the goodput: the
goal (TTFT or TPOT) whose attainment there falls furthest below its target, or
``capacity`` when no evaluated rate up to the highest verifiable one fails the SLO (the
result is then censored: a lower bound, in words) or the rate above is not sustainable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from serveplan.config import SLO
from serveplan.goodput_stats import Interval

__all__ = ["GOAL_NAMES", "GoodputResult", "RateCheck", "binding_goal"]

GOAL_NAMES = {"ttft": "TTFT", "tpot": "TPOT"}


@dataclass(frozen=True)
class RateCheck:
    """The SLO verdict at one arrival rate.

    ``attainment[k]`` is the interval of constraint ``k``'s fraction; ``ttft``/``tpot`` the
    SLO-percentile latencies (s) with their intervals; ``seeds`` the runs used;
    ``goal_attainment`` the fraction meeting each goal on its own (``ttft``, ``tpot``) and
    ``goal_target`` the target each is held to; ``sustainable`` is False where the analytic
    level's utilisation reaches 1.
    """

    rate: float
    seeds: int
    requests: int
    attainment: dict[str, Interval]
    targets: dict[str, float]
    ttft: Interval
    tpot: Interval
    goal_attainment: dict[str, float] = field(default_factory=dict)
    goal_target: float = float("nan")
    sustainable: bool = True

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


def binding_goal(check: RateCheck | None) -> str:
    """``TTFT``, ``TPOT`` or ``capacity``: what fails first at ``check`` (module docstring)."""
    if check is None or not check.sustainable or not check.goal_attainment:
        return "capacity"
    if check.point:
        return "capacity"  # the SLO holds there: the next rate failed for another reason
    goal = min(check.goal_attainment, key=lambda g: check.goal_attainment[g] - check.goal_target)
    return GOAL_NAMES[goal]


@dataclass(frozen=True)
class GoodputResult:
    r"""Goodput :math:`\hat\lambda \in [\lambda^-, \lambda^+]` (req/s) and how it was found.

    ``next_rate``/``next_low``/``next_high`` are the evaluated rates just above each (where
    the predicate failed; ``inf`` if none did); ``checks`` every evaluated rate, ascending;
    ``ceiling`` the highest rate the search may evaluate (module docstring of
    :mod:`serveplan.goodput`) and ``requests_per_run`` the requests each run contributes
    after its warm-up.
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
    ceiling: float = float("inf")
    requests_per_run: int = 0
    attrs: dict = field(default_factory=dict)

    @property
    def per_gpu(self) -> float:
        return self.rate / self.gpus if self.gpus else float("nan")

    @property
    def upper(self) -> float:
        """Upper end of the goodput's interval: the first rate confidently violating the SLO,
        else the capacity bound (no rate above it is sustainable)."""
        return float(min(self.next_high, self.capacity))

    @property
    def point_censored(self) -> bool:
        """The SLO held at the highest rate the search may evaluate: goodput is a lower bound."""
        return self.check_at(self.next_rate) is None and self.fidelity != "analytic"

    @property
    def binding(self) -> str:
        """``TTFT``, ``TPOT`` or ``capacity`` (module docstring)."""
        return binding_goal(self.check_at(self.next_rate))

    def check_at(self, rate: float) -> RateCheck | None:
        for c in self.checks:
            if c.rate == rate:
                return c
        return None

    def sentence(self) -> str:
        """The result in words: the goodput, its interval, and what binds."""
        p = f"P{self.slo.percentile:g}"
        if self.point_censored:
            util = self.ceiling / self.capacity if self.capacity > 0 else float("nan")
            return (f"Goodput is at least {self.rate:,.2f} req/s (censored): the SLO holds at "
                    f"{self.rate:,.2f} req/s, the highest rate that runs of "
                    f"{self.requests_per_run:,} requests can vouch for ({util:.1%} of the "
                    f"capacity bound {self.capacity:,.2f} req/s; nearer the bound the queue "
                    f"takes longer than the run to reach its steady state). Capacity binds, "
                    f"not the SLO; more requests per run move the limit toward the bound.")
        nxt = self.check_at(self.next_rate)
        what = _failure(nxt, self.slo, p)
        if self.rate <= 0.0:
            return (f"No rate meets the SLO: even at {self.next_rate:,.3g} req/s {what}.")
        return (f"Goodput {self.rate:,.2f} req/s ({self.confidence:.0%} interval "
                f"[{self.low:,.2f}, {self.upper:,.2f})); {self.binding} binds: at "
                f"{self.next_rate:,.2f} req/s {what}.")

    def to_dataset(self):
        """Evaluated rates as an ``xarray.Dataset`` (``rate`` x ``stat`` estimate/low/high)."""
        import xarray as xr

        from serveplan import __version__

        rates = np.array([c.rate for c in self.checks])
        stat = ["estimate", "low", "high"]
        p = f"P{self.slo.percentile:g}"
        data = {
            "ttft_p_s": (("rate", "stat"), np.array([c.ttft.as_tuple() for c in self.checks])
                         .reshape(-1, 3), {"units": "s", "long_name": f"{p} TTFT"}),
            "tpot_p_s": (("rate", "stat"), np.array([c.tpot.as_tuple() for c in self.checks])
                         .reshape(-1, 3), {"units": "s", "long_name": f"{p} TPOT"}),
            "verdict": (("rate",), np.array([c.verdict for c in self.checks], dtype=object)),
            "seeds_used": (("rate",), np.array([c.seeds for c in self.checks], dtype=np.int64)),
        }
        for k in (self.checks[0].attainment if self.checks else {}):
            data[f"attainment_{k}"] = (("rate", "stat"), np.array(
                [c.attainment[k].as_tuple() for c in self.checks]).reshape(-1, 3))
        attrs = {
            "goodput": self.rate, "goodput_low": self.low, "goodput_high": self.upper,
            "largest_plausible_rate": self.high, "goodput_per_gpu": self.per_gpu,
            "next_rate": self.next_rate, "next_low": self.next_low,
            "next_high": self.next_high, "fidelity": self.fidelity,
            "analytic_goodput": self.analytic, "capacity": self.capacity,
            "ceiling": self.ceiling, "requests_per_run": self.requests_per_run,
            "binding": self.binding, "t_min": self.t_min, "gpus": self.gpus,
            "seeds": json.dumps(list(self.seeds)), "confidence": self.confidence,
            "rtol": self.rtol, "censored": int(self.censored or self.point_censored),
            "summary": self.sentence(),
            "slo": self.slo.model_dump_json(), "serveplan_version": __version__,
            **{k: (v if isinstance(v, (int, float, str)) else json.dumps(v, default=float))
               for k, v in self.attrs.items()},
        }
        return xr.Dataset(data, coords={"rate": rates, "stat": stat}, attrs=attrs)


def _failure(check: RateCheck | None, slo: SLO, p: str) -> str:
    """How the SLO fails at ``check``, e.g. ``the P90 TTFT is 612 ms (goal 500 ms)``."""
    if check is None:
        return "the SLO was not evaluated"
    if not check.sustainable:
        return "the rate is not sustainable (utilisation >= 1)"
    goal = binding_goal(check)
    if slo.attainment is not None:
        return (f"{check.attainment['both'].estimate:.1%} of requests meet both goals "
                f"(target {slo.attainment:.0%}; {goal} alone: "
                f"{check.goal_attainment[goal.lower()]:.1%})")
    value = (check.ttft if goal == "TTFT" else check.tpot).estimate
    target = slo.ttft_ms if goal == "TTFT" else slo.tpot_ms
    return f"the {p} {goal} is {_ms(value * 1e3)} ms (goal {_ms(target)} ms)"


def _ms(x: float) -> str:
    """Milliseconds with thousands separators and a precision that suits the size."""
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return f"{x:,.0f}" if abs(x) >= 100 else (f"{x:.1f}" if abs(x) >= 1 else f"{x:.3g}")
