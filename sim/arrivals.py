"""Arrival processes: when requests arrive.

Renewal processes -- :class:`PoissonArrivals`, :class:`GammaArrivals`, :class:`ConstantArrivals`
-- draw a *unit-rate* pattern (mean inter-arrival 1 s) that does not depend on the rate, and
``sample(n, seed) == unit_pattern(n, seed) / rate`` bit for bit (common random numbers, see
:mod:`.workload`). :class:`TraceArrivals` replays trace timestamps; :class:`ClosedLoop` marks a
closed-loop workload whose arrivals the simulator sets.

The benchmark clients' own schedules: :class:`VllmBenchArrivals` (``vllm bench serve
--request-rate --burstiness``, rescaled to ``n / rate``) and :class:`InferencePerfArrivals`
(inference-perf's ``constant`` and ``poisson`` load types over stages).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ._checks import SeedLike, as_array, as_pair, check_int, check_positive, first_bad, make_rng


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
      plus its think time (``Requests.client_delay_s``, from :meth:`client_delays`).

    So exactly ``concurrency`` requests are in the system until the last ones drain, as with
    aiperf / genai-perf ``--concurrency``. (``vllm bench serve --max-concurrency`` with an
    infinite ``--request-rate`` instead hands the next request to whichever slot frees first;
    with i.i.d. lengths both give the same steady state.)
    """

    concurrency: int
    think_time_s: float = 0.0
    think_time_jitter_s: float = 0.0

    def __post_init__(self) -> None:
        check_int("concurrency", self.concurrency, 1)
        for name in ("think_time_s", "think_time_jitter_s"):
            object.__setattr__(self, name,
                               check_positive(name, getattr(self, name), allow_zero=True))

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """All-NaN arrival times (to be set by the simulator)."""
        return np.full(check_int("n", n, 0), np.nan)

    def client_delays(self, n: int, seed: SeedLike = None) -> np.ndarray | None:
        """Think time before each request: ``think_time_s + think_time_jitter_s * E`` with
        ``E ~ Exp(1)`` (so the jitter is exponential with mean ``think_time_jitter_s``); 0 for
        the first ``concurrency`` requests, which every client sends at t = 0. ``None``
        without think time."""
        n = check_int("n", n, 0)
        if self.think_time_s == 0 and self.think_time_jitter_s == 0:
            return None
        delay = self.think_time_s + self.think_time_jitter_s * make_rng(
            seed).standard_exponential(n)
        delay[: self.concurrency] = 0.0
        return delay


@dataclass(frozen=True)
class VllmBenchArrivals:
    """Send times of ``vllm bench serve --request-rate R --burstiness B``.

    Parameters
    ----------
    rate : float
        ``--request-rate`` in requests/s; ``inf`` sends every request at t = 0.
    burstiness : float
        ``--burstiness``: the gamma shape of the gaps (1: Poisson; ``inf``: even gaps).
    max_concurrency : int, optional
        ``--max-concurrency``: a request whose time has come waits (first come first
        served) while this many are in flight -- the benchmark's semaphore, which the
        simulator applies (:attr:`serveplan.sim.requests.Requests.max_concurrency`); its
        latencies count from the send. ``sample`` gives the schedule, not the sends.

    Notes
    -----
    ``get_request`` in ``vllm/benchmarks/serve.py``: ``n`` gaps ``g_i ~ Gamma(shape=B,
    scale=1 / (R B))`` (mean ``1 / R``; ``1 / R`` exactly when ``B = inf``), cumulative sums
    ``d_i = g_0 + ... + g_i``, then rescaled so the last is ``n / R``:
    ``t_i = (n / R) d_i / d_{n-1}``. So the first request is sent at ``t_0 > 0`` (after one
    gap), not at 0, and the schedule is not a renewal process (its gaps are conditioned on
    their sum). ``unit_pattern`` is the schedule at ``R = 1`` and ``sample = unit_pattern / R``
    exactly (common random numbers). vLLM draws from NumPy's global legacy state; these come
    from the given seed, so the law is the same but not the numbers.
    """

    rate: float = 1.0
    burstiness: float = 1.0
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        for name in ("rate", "burstiness"):
            value = float(getattr(self, name))
            if not value > 0:  # inf allowed, NaN rejected
                raise ValueError(f"{name} must be > 0 (inf allowed), got {value!r}")
            object.__setattr__(self, name, value)
        if self.max_concurrency is not None:
            object.__setattr__(self, "max_concurrency",
                               check_int("max_concurrency", self.max_concurrency, 1))

    def unit_pattern(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """``n`` send times at rate 1, the last at ``n``."""
        n = check_int("n", n, 0)
        b = self.burstiness
        gaps = np.ones(n) if np.isinf(b) else make_rng(seed).standard_gamma(b, n) / b
        d = np.cumsum(gaps)
        return d * (n / d[-1]) if n and d[-1] > 0 else d

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """``n`` sorted send times in seconds (all 0 at an infinite rate)."""
        if np.isinf(self.rate):
            return np.zeros(check_int("n", n, 0))
        return scale_pattern(self.unit_pattern(n, seed), self.rate)

    def with_rate(self, rate: float) -> VllmBenchArrivals:
        """The same schedule at another ``--request-rate``."""
        return replace(self, rate=rate)


INFERENCE_PERF_QUEUE_FILL_S = 1.0
"""inference-perf's multi-process load generator schedules a stage's requests from 1 s after
the stage starts (``start_time = time.perf_counter() + 1``), to fill its request queue."""


def _normalised_gaps(k: int, span: float, rng: np.random.Generator) -> np.ndarray:
    """inference-perf ``ConstantLoadTimer(rate=k / span, duration=span)``: ``k`` exponential
    gaps rescaled to sum to ``span`` (the last request lands exactly at ``span``)."""
    gaps = rng.standard_exponential(k)
    return np.cumsum(gaps * (span / gaps.sum()))


def _poisson_offsets(rate: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """inference-perf ``PoissonLoadTimer``: 1-s windows, ``Poisson(rate)`` requests in each,
    spread over it by :func:`_normalised_gaps`; an empty window is skipped. The first
    ``count`` times."""
    out: list[np.ndarray] = []
    have, start = 0, 0.0
    while have < count:
        k = int(rng.poisson(rate))
        if k:
            out.append(start + _normalised_gaps(k, 1.0, rng))
            have += k
        start += 1.0
    return np.concatenate(out)[:count] if out else np.zeros(0)


@dataclass(frozen=True, eq=False)
class StagePlan:
    """Load stages that drain: stage ``k + 1`` starts once every request of stage ``k`` has
    finished as its client sees it (inference-perf's ``load.stages``).

    Parameters
    ----------
    stage : int64[n]
        Each request's stage: non-decreasing from 0, no stage left out.
    offset_s : float64[n]
        Stage 0: its send times. A later stage: seconds from the previous stage's drain
        (its last response) to the send.
    """

    stage: np.ndarray
    offset_s: np.ndarray

    def __post_init__(self) -> None:
        stage, offset = as_pair(("stage", self.stage, np.int64),
                                ("offset_s", self.offset_s, np.float64))
        if len(stage):
            step = np.diff(stage, prepend=0)
            first_bad("stage", stage, (step < 0) | (step > 1) | (stage < 0),
                      "stages must start at 0 and go up one at a time")
            if stage[0] != 0:
                raise ValueError(f"stage[0] must be 0, got {stage[0]}")
        first_bad("offset_s", offset, ~np.isfinite(offset) | (offset < 0),
                  "offsets must be finite and >= 0")
        object.__setattr__(self, "stage", stage)
        object.__setattr__(self, "offset_s", offset)

    def __len__(self) -> int:
        return len(self.stage)

    @property
    def first_index(self) -> np.ndarray:
        """int64[stages + 1]: the first request of each stage, then ``n``."""
        n_stages = int(self.stage[-1]) + 1 if len(self.stage) else 0
        return np.searchsorted(self.stage, np.arange(n_stages + 1)).astype(np.int64)

    def head(self, m: int) -> StagePlan:
        """The plan of the first ``m`` requests."""
        return StagePlan(self.stage[:m], self.offset_s[:m])

    def sends_without_server(self) -> np.ndarray:
        """Send times if every stage drained as its last request was sent (each stage's
        offsets from the previous stage's last send): the schedule alone, as
        :meth:`InferencePerfArrivals.sample` gives it, for uses that rescale it."""
        out = self.offset_s.copy()
        first = self.first_index
        for s in range(1, len(first) - 1):
            out[first[s]:first[s + 1]] += out[first[s] - 1]
        return out


@dataclass(frozen=True)
class InferencePerfArrivals:
    """Send times of an inference-perf load (``load.type``, ``load.stages``, ``load.interval``).

    Parameters
    ----------
    type : {"constant", "poisson"}
        inference-perf's ``load.type``.
    stages : sequence of (rate, duration)
        ``load.stages``: requests/s and seconds; stage ``k`` sends ``int(rate * duration)``
        requests (``LoadGenerator.run_stage``).
    interval : float
        ``load.interval``: seconds between a stage's end and the next stage's start (default
        1.0, as inference-perf).

    Notes
    -----
    ``constant`` is not evenly spaced: ``ConstantLoadTimer`` draws ``N`` exponential gaps of
    mean ``1 / rate`` and rescales them to sum to ``duration``, so a stage's requests are a
    Poisson process conditioned on ``N`` arrivals in the stage, the last exactly at its end.
    ``poisson`` draws ``Poisson(rate)`` requests per 1-s window, each window spread the same
    way (an empty window skipped), and takes the first ``N``.

    Stage boundaries: inference-perf starts stage ``k + 1`` ``interval`` seconds after every
    request of stage ``k`` has *finished* (it waits for the drain), and schedules from
    :data:`INFERENCE_PERF_QUEUE_FILL_S` after a stage starts. Finishing times are the
    simulator's output, so :meth:`staged` gives the first stage's send times and a
    :class:`StagePlan` with which the simulator sends each later stage once the previous one
    has drained (:func:`serveplan.sim.workload.generate_requests` uses it). :meth:`sample`
    gives send times alone, each stage taken to end when its last request is *sent*: the
    real starts when the server keeps up, lower bounds when it does not. A stage of
    ``int(rate * duration) = 0`` requests adds the queue fill and its interval.
    """

    type: str
    stages: tuple[tuple[float, float], ...]
    interval: float = 1.0

    def __post_init__(self) -> None:
        if self.type not in ("constant", "poisson"):
            raise ValueError(f"type must be 'constant' or 'poisson', got {self.type!r}")
        if not self.stages:
            raise ValueError("stages must list at least one (rate, duration)")
        stages = tuple((check_positive(f"stages[{i}].rate", r),
                        check_positive(f"stages[{i}].duration", d))
                       for i, (r, d) in enumerate(self.stages))
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "interval",
                           check_positive("interval", self.interval, allow_zero=True))

    @property
    def counts(self) -> np.ndarray:
        """Requests per stage, ``int(rate * duration)``."""
        return np.array([int(r * d) for r, d in self.stages], dtype=np.int64)

    @property
    def num_requests(self) -> int:
        return int(self.counts.sum())

    def stage_of(self) -> np.ndarray:
        """The stage index of each request, in send order."""
        return np.repeat(np.arange(len(self.stages)), self.counts)

    def _from_stage_start(self, n: int | None, seed: SeedLike) -> list[np.ndarray]:
        """Each stage's send times from the stage's start (the queue fill included)."""
        if n is not None and check_int("n", n, 0) != self.num_requests:
            raise ValueError(f"the stages send {self.num_requests} requests, not n = {n}")
        rng = make_rng(seed)
        out = []
        for (rate, duration), count in zip(self.stages, self.counts, strict=True):
            if self.type == "constant":
                within = _normalised_gaps(int(count), duration, rng) if count else np.zeros(0)
            else:
                within = _poisson_offsets(rate, int(count), rng)
            out.append(INFERENCE_PERF_QUEUE_FILL_S + within)
        return out

    def sample(self, n: int | None = None, seed: SeedLike = None) -> np.ndarray:
        """All :attr:`num_requests` send times in seconds (``n``, if given, must equal it),
        each stage taken to drain as its last request is sent (class notes)."""
        return self.staged(n, seed)[1].sends_without_server()

    def staged(self, n: int | None = None, seed: SeedLike = None
               ) -> tuple[np.ndarray, StagePlan]:
        """``(arrival_s, plan)``: the first stage's send times (NaN for the later stages'
        requests) and the :class:`StagePlan` that sends each later stage ``interval`` after
        the previous one drained. Same draws as :meth:`sample` for the same seed."""
        stage, offset = [], []
        gap = 0.0  # from the previous stage's drain to this stage's start
        for times in self._from_stage_start(n, seed):
            if len(times) == 0:  # an empty stage: its queue fill and its interval
                gap += INFERENCE_PERF_QUEUE_FILL_S + self.interval
                continue
            stage.append(np.full(len(times), len(stage), dtype=np.int64))
            offset.append(gap + times)
            gap = self.interval
        plan = StagePlan(np.concatenate(stage) if stage else np.zeros(0, dtype=np.int64),
                         np.concatenate(offset) if offset else np.zeros(0))
        arrival = np.where(plan.stage == 0, plan.offset_s, np.nan)
        return arrival, plan


ArrivalProcess = (PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals | ClosedLoop
                  | VllmBenchArrivals | InferencePerfArrivals)
