"""Arrival processes: when requests arrive.

Renewal processes -- :class:`PoissonArrivals`, :class:`GammaArrivals`, :class:`ConstantArrivals`
-- draw a *unit-rate* pattern (mean inter-arrival 1 s) that does not depend on the rate, and
``sample(n, seed) == unit_pattern(n, seed) / rate`` bit for bit (common random numbers, see
:mod:`.workload`). :class:`TraceArrivals` replays trace timestamps; :class:`ClosedLoop` marks a
closed-loop workload whose arrivals the simulator sets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ._checks import SeedLike, as_array, check_int, check_positive, first_bad, make_rng


def _gaps_to_times(gaps: np.ndarray) -> np.ndarray:
    """First arrival at t = 0 (as ``vllm bench serve`` and the trace readers), then the gaps."""
    out = np.zeros(len(gaps) + 1, dtype=np.float64)
    np.cumsum(gaps, out=out[1:])
    return out


def scale_pattern(unit_pattern: np.ndarray, rate: float) -> np.ndarray:
    """Arrival times at ``rate`` from a unit-rate pattern: ``unit_pattern / rate``.

    Dividing one pattern by many rates is the common-random-numbers way to compare rates (e.g.
    inside a goodput bisection): order is kept and times scale exactly by ``1 / rate``.
    """
    return np.asarray(unit_pattern, dtype=np.float64) / check_positive("rate", rate)


@dataclass(frozen=True)
class _Renewal:
    """Renewal process with i.i.d. inter-arrival gaps of mean ``1 / rate``."""

    rate: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_positive("rate", self.rate))

    def _unit_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    @property
    def mean_gap_s(self) -> float:
        """Mean inter-arrival time, ``1 / rate``."""
        return 1.0 / self.rate

    def unit_pattern(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """``n`` arrival times of the same process at rate 1 (independent of ``rate``)."""
        n = check_int("n", n, 0)
        return _gaps_to_times(self._unit_gaps(max(n - 1, 0), make_rng(seed)))[:n]

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """``n`` sorted arrival times in seconds, the first at 0; ``unit_pattern(n, seed) / rate``."""
        return scale_pattern(self.unit_pattern(n, seed), self.rate)

    def with_rate(self, rate: float):
        """The same process at another mean rate."""
        return replace(self, rate=rate)


@dataclass(frozen=True)
class PoissonArrivals(_Renewal):
    """Poisson arrivals: exponential gaps with mean ``1 / rate``."""

    @property
    def cv(self) -> float:
        """Coefficient of variation of the gaps (std / mean): 1."""
        return 1.0

    def _unit_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.standard_exponential(n)


@dataclass(frozen=True)
class GammaArrivals(_Renewal):
    """Gamma-distributed gaps with mean ``1 / rate`` and coefficient of variation ``cv``.

    Notes
    -----
    Shape ``k = 1 / cv**2`` and scale ``1 / (k * rate)``, so ``E[gap] = 1 / rate`` and
    ``CV[gap] = cv``. ``cv = 1`` is Poisson; ``cv > 1`` is burstier (as in ``vllm bench serve
    --burstiness``, which is ``1 / cv**2``); ``cv -> 0`` approaches :class:`ConstantArrivals`.
    """

    cv: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "cv", check_positive("cv", self.cv))

    def _unit_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        shape = 1.0 / self.cv**2
        return rng.standard_gamma(shape, n) / shape


@dataclass(frozen=True)
class ConstantArrivals(_Renewal):
    """Evenly spaced arrivals every ``1 / rate`` seconds; the seed is ignored."""

    @property
    def cv(self) -> float:
        """Coefficient of variation of the gaps: 0."""
        return 0.0

    def _unit_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.ones(n)


@dataclass(frozen=True, eq=False)
class TraceArrivals:
    """Arrival times replayed from a trace, optionally faster or slower.

    Parameters
    ----------
    timestamps_s : float64[m]
        Trace timestamps in seconds, non-decreasing (any origin; replay starts at the first).
    time_scale : float
        Speed-up factor: ``2`` replays twice as fast (times divided by 2).

    Notes
    -----
    ``rate`` is the replayed mean rate, ``time_scale * (m - 1) / span``; :meth:`with_rate` picks the
    ``time_scale`` that gives a target mean rate. ``unit_pattern`` is the trace rescaled to mean
    rate 1. Traces need no seed: the pattern is the same at every rate (common random numbers).
    """

    timestamps_s: np.ndarray
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        t = as_array("timestamps_s", self.timestamps_s, np.float64)
        first_bad("timestamps_s", t, ~np.isfinite(t), "timestamps must be finite")
        if len(t) > 1 and np.any(t[1:] < t[:-1]):
            raise ValueError("timestamps_s must be sorted (non-decreasing)")
        object.__setattr__(self, "timestamps_s", t)
        object.__setattr__(self, "time_scale", check_positive("time_scale", self.time_scale))

    @property
    def trace_rate(self) -> float:
        """Mean rate of the trace as recorded, ``(m - 1) / span`` (NaN if the span is 0)."""
        t = self.timestamps_s
        span = float(t[-1] - t[0]) if len(t) > 1 else 0.0
        return (len(t) - 1) / span if span > 0 else float("nan")

    @property
    def rate(self) -> float:
        """Mean rate when replayed at ``time_scale``."""
        return self.time_scale * self.trace_rate

    def with_rate(self, rate: float) -> TraceArrivals:
        """Rescale the replay so that its mean rate is ``rate``."""
        rate = check_positive("rate", rate)
        if not np.isfinite(self.trace_rate):
            raise ValueError("cannot rescale a trace to a rate: it has fewer than 2 distinct times")
        return replace(self, time_scale=rate / self.trace_rate)

    def _head(self, n: int | None) -> np.ndarray:
        t = self.timestamps_s
        n = len(t) if n is None else check_int("n", n, 0)
        if n > len(t):
            raise ValueError(f"n = {n} exceeds the {len(t)} trace timestamps; see tile_requests")
        return t[:n] - (t[0] if len(t) else 0.0)

    def unit_pattern(self, n: int | None = None, seed: SeedLike = None) -> np.ndarray:
        """The first ``n`` times of the trace rescaled to mean rate 1; ``seed`` is ignored."""
        return self._head(n) * self.trace_rate

    def sample(self, n: int | None = None, seed: SeedLike = None) -> np.ndarray:
        """The first ``n`` (default all) times, relative to the first, divided by ``time_scale``."""
        return self._head(n) / self.time_scale


@dataclass(frozen=True)
class ClosedLoop:
    """Closed-loop load: ``concurrency`` clients, each sending its next request when one finishes.

    Contract with the simulator (``Requests.concurrency == concurrency``, ``arrival_s`` all NaN):

    * request ``i`` belongs to client ``i % concurrency``;
    * requests ``0 .. concurrency - 1`` arrive at t = 0;
    * request ``i >= concurrency`` arrives at the finish time (last token) of request
      ``i - concurrency``, the previous request of the same client (:func:`closed_loop_predecessor`),
      with zero think time.

    So exactly ``concurrency`` requests are in the system until the last ones drain. (``vllm bench
    serve --max-concurrency`` instead hands the next request to whichever slot frees first; with
    i.i.d. lengths both give the same steady state.)
    """

    concurrency: int

    def __post_init__(self) -> None:
        check_int("concurrency", self.concurrency, 1)

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """All-NaN arrival times (to be set by the simulator)."""
        return np.full(check_int("n", n, 0), np.nan)


ArrivalProcess = PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals | ClosedLoop
