"""Request arrays and the synthetic workloads that fill them.

The simulator consumes one :class:`Requests` object: a frozen structure of arrays (no per-request
Python objects) holding arrival times, prompt and output lengths and, optionally, the prefix-block
hash ids that the KV block manager uses for prefix caching.

Building blocks, all seeded explicitly (an ``int``, a :class:`numpy.random.SeedSequence` or a
:class:`numpy.random.Generator`; never global random state):

* arrival processes -- :class:`PoissonArrivals`, :class:`GammaArrivals`, :class:`ConstantArrivals`,
  :class:`TraceArrivals` and the closed-loop marker :class:`ClosedLoop`;
* length distributions that carry their moments -- :class:`Fixed`, :class:`Uniform`,
  :class:`LogNormal`, :class:`Empirical`;
* synthetic shared prefixes -- :class:`PrefixSharing`, :func:`synthetic_prefix_hashes`;
* :func:`generate_requests` ties them together; :func:`tile_requests` repeats a trace.

Common random numbers: every renewal process draws a *unit-rate* pattern (mean inter-arrival 1 s)
that does not depend on the rate, and ``sample(n, seed) == unit_pattern(n, seed) / rate`` bit for
bit. :func:`generate_requests` draws arrivals, prompt lengths, output lengths and prefix groups from
four independent child streams of the seed, so calling it with the same seed at another rate gives
the same lengths and the same arrival pattern, only scaled -- what a goodput bisection needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from scipy import special

SeedLike = int | np.random.SeedSequence | np.random.Generator | None
"""A seed for :func:`numpy.random.default_rng`; a Generator is used (and advanced) as is."""

MOONCAKE_BLOCK_SIZE = 512
"""Tokens per prefix hash block in the Mooncake FAST'25 traces."""

_MAX_LEN = 1 << 62  # cap for unclipped samples so that the int64 cast is defined


def _rng(seed: SeedLike) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    value = float(value)
    ok = np.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


def _check_int(name: str, value: int, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------------
# The request container
# --------------------------------------------------------------------------------------------------


def _as_array(name: str, x: object, dtype: type) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if dtype is np.int64 and a.size and a.dtype.kind not in "iu":
        if a.dtype.kind != "f" or not np.all(np.isfinite(a) & (a == np.round(a))):
            raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def _first_bad(name: str, a: np.ndarray, bad: np.ndarray, rule: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {a[i].item()!r}; {rule}")


def _ragged_take(values: np.ndarray, offsets: np.ndarray, idx: np.ndarray):
    """Gather rows ``idx`` of a ragged array; return ``(values, offsets)`` of the result."""
    counts = offsets[idx + 1] - offsets[idx]
    new_offsets = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    shift = np.repeat(offsets[idx] - new_offsets[:-1], counts)
    return values[shift + np.arange(new_offsets[-1], dtype=np.int64)], new_offsets


@dataclass(frozen=True, eq=False)
class Requests:
    """Per-request workload arrays (structure of arrays), validated on construction.

    Parameters
    ----------
    arrival_s : float64[n]
        Arrival times in seconds from 0, non-decreasing. For a closed-loop workload
        (``concurrency`` set) all entries are NaN; see :class:`ClosedLoop` for the contract.
    prompt_len, output_len : int64[n]
        Prompt (input) and output tokens per request, both >= 1.
    hash_ids : int64[total], optional
        Prefix-block hash ids, >= 0, one per ``hash_block_size`` tokens of the prompt (the last,
        partial block included): request ``i`` owns ``hash_ids[hash_offsets[i]:hash_offsets[i+1]]``
        and ``hash_offsets[i+1] - hash_offsets[i] == ceil(prompt_len[i] / hash_block_size)``.
        Equal ids at the same position mean the KV of that block (and of all blocks before it) can
        be reused, as in Mooncake traces.
    hash_offsets : int64[n+1], optional
        Offsets into ``hash_ids``; ``hash_offsets[0] == 0`` and ``hash_offsets[-1] == len(hash_ids)``.
    hash_block_size : int, optional
        Tokens per hash block (Mooncake: 512). Required with ``hash_ids``.
    concurrency : int, optional
        Number of closed-loop clients; ``None`` for an open-loop workload.

    Raises
    ------
    ValueError
        Naming the field (and the first bad index) when the arrays are inconsistent.

    Notes
    -----
    The dataclass is frozen but numpy arrays stay writable; do not modify them in place, build a new
    object (:meth:`with_arrivals`, :meth:`take`) so that validation runs again.
    """

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    hash_ids: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    hash_block_size: int | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "arrival_s", _as_array("arrival_s", self.arrival_s, np.float64))
        for name in ("prompt_len", "output_len"):
            put(self, name, _as_array(name, getattr(self, name), np.int64))
        n = len(self.arrival_s)
        for name in ("prompt_len", "output_len"):
            a = getattr(self, name)
            if len(a) != n:
                raise ValueError(f"{name} has {len(a)} entries but arrival_s has {n}")
            _first_bad(name, a, a < 1, "lengths must be >= 1")
        arr = self.arrival_s
        if self.concurrency is None:
            _first_bad("arrival_s", arr, ~np.isfinite(arr) | (arr < 0),
                       "arrival times must be finite and >= 0 (NaN only with concurrency)")
            if n > 1 and np.any(arr[1:] < arr[:-1]):
                i = int(np.argmax(arr[1:] < arr[:-1])) + 1
                raise ValueError(f"arrival_s must be sorted: arrival_s[{i}] = {arr[i].item()!r} < "
                                 f"arrival_s[{i - 1}] = {arr[i - 1].item()!r}")
        else:
            put(self, "concurrency", _check_int("concurrency", self.concurrency, 1))
            _first_bad("arrival_s", arr, ~np.isnan(arr),
                       f"closed-loop requests (concurrency={self.concurrency}) must have all "
                       "arrival_s NaN; the simulator sets them")
        self._validate_hashes(n)

    def _validate_hashes(self, n: int) -> None:
        given = [x is not None for x in (self.hash_ids, self.hash_offsets, self.hash_block_size)]
        if not any(given):
            return
        if not all(given):
            raise ValueError("hash_ids, hash_offsets and hash_block_size must be given together; "
                             f"got hash_ids={given[0]}, hash_offsets={given[1]}, "
                             f"hash_block_size={self.hash_block_size!r}")
        put = object.__setattr__
        put(self, "hash_block_size", _check_int("hash_block_size", self.hash_block_size, 1))
        ids = _as_array("hash_ids", self.hash_ids, np.int64)
        off = _as_array("hash_offsets", self.hash_offsets, np.int64)
        put(self, "hash_ids", ids)
        put(self, "hash_offsets", off)
        if len(off) != n + 1:
            raise ValueError(f"hash_offsets must have n + 1 = {n + 1} entries, got {len(off)}")
        if off[0] != 0 or off[-1] != len(ids):
            raise ValueError(f"hash_offsets must start at 0 and end at len(hash_ids) = {len(ids)}, "
                             f"got {off[0]} and {off[-1]}")
        _first_bad("hash_ids", ids, ids < 0, "hash ids must be >= 0")
        counts = np.diff(off)
        need = -(-self.prompt_len // self.hash_block_size)
        if np.any(counts != need):
            i = int(np.argmax(counts != need))
            raise ValueError(f"request {i} has {counts[i]} hash ids (hash_offsets[{i}:{i + 2}]) "
                             f"but prompt_len {self.prompt_len[i]} needs ceil(prompt_len / "
                             f"hash_block_size={self.hash_block_size}) = {need[i]}")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def has_hashes(self) -> bool:
        """Whether prefix hash ids are present."""
        return self.hash_ids is not None

    @property
    def is_closed_loop(self) -> bool:
        """Whether arrivals are left to the simulator (``concurrency`` set)."""
        return self.concurrency is not None

    @property
    def mean_rate(self) -> float:
        """Mean arrival rate ``(n - 1) / (last - first arrival)`` in requests/s (NaN if undefined)."""
        n = len(self)
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if n > 1 else 0.0
        return (n - 1) / span if span > 0 else float("nan")

    def hashes(self, i: int) -> np.ndarray:
        """Hash ids of request ``i`` (a view)."""
        if self.hash_ids is None:
            raise ValueError("these requests carry no hash_ids")
        return self.hash_ids[self.hash_offsets[i]:self.hash_offsets[i + 1]]

    def take(self, index: slice | np.ndarray) -> Requests:
        """Requests at ``index`` (a slice or integer array; arrivals must stay sorted)."""
        idx = np.arange(len(self), dtype=np.int64)[index]
        hashes = {}
        if self.hash_ids is not None:
            ids, off = _ragged_take(self.hash_ids, self.hash_offsets, idx)
            hashes = dict(hash_ids=ids, hash_offsets=off)
        return replace(self, arrival_s=self.arrival_s[idx], prompt_len=self.prompt_len[idx],
                       output_len=self.output_len[idx], **hashes)

    def with_arrivals(self, arrival_s: np.ndarray, concurrency: int | None = None) -> Requests:
        """The same requests with new arrival times (and closed-loop setting)."""
        return replace(self, arrival_s=arrival_s, concurrency=concurrency)

    def retimed(self, *, time_scale: float = 1.0, rate: float | None = None) -> Requests:
        """Replay the arrivals faster or slower; see :class:`TraceArrivals`."""
        arrivals = TraceArrivals(self.arrival_s, time_scale)
        if rate is not None:
            arrivals = arrivals.with_rate(rate)
        return self.with_arrivals(arrivals.sample(len(self)))


def tile_requests(requests: Requests, n: int, *, gap_s: float | None = None,
                  distinct_hashes: bool = True) -> Requests:
    """Repeat ``requests`` back to back until there are ``n`` of them (the last copy truncated).

    Parameters
    ----------
    requests : Requests
        The trace to repeat (``m`` requests).
    n : int
        Number of requests wanted (may be smaller than ``m``: then this is a head).
    gap_s : float, optional
        Time between the last arrival of one copy and the first of the next; default the mean
        inter-arrival time of ``requests`` (0 if undefined). Closed-loop arrivals stay NaN.
    distinct_hashes : bool
        If true (default), copy ``k`` adds ``k * (max hash id + 1)`` to its hash ids so that copies
        do not share prefix blocks with each other; if false, copies reuse the original ids.
    """
    n = _check_int("n", n, 0)
    m = len(requests)
    if m == 0:
        raise ValueError("cannot tile an empty Requests")
    reps = -(-n // m)
    arr = requests.arrival_s
    span = float(arr[-1] - arr[0]) if not requests.is_closed_loop else 0.0
    if gap_s is None:
        gap_s = span / (m - 1) if m > 1 else 0.0
    period = span + _check_positive("gap_s", gap_s, allow_zero=True)
    fields = dict(arrival_s=np.tile(arr, reps) + np.repeat(np.arange(reps) * period, m),
                  prompt_len=np.tile(requests.prompt_len, reps),
                  output_len=np.tile(requests.output_len, reps))
    if requests.hash_ids is not None:
        ids, off = requests.hash_ids, requests.hash_offsets
        stride = int(ids.max()) + 1 if distinct_hashes and len(ids) else 0
        fields["hash_ids"] = np.tile(ids, reps) + np.repeat(np.arange(reps) * stride, len(ids))
        fields["hash_offsets"] = np.concatenate(
            [[0], (off[1:][None, :] + (np.arange(reps) * len(ids))[:, None]).ravel()])
    return replace(requests, **fields).take(slice(0, n))


# --------------------------------------------------------------------------------------------------
# Arrival processes
# --------------------------------------------------------------------------------------------------


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
    return np.asarray(unit_pattern, dtype=np.float64) / _check_positive("rate", rate)


@dataclass(frozen=True)
class _Renewal:
    """Renewal process with i.i.d. inter-arrival gaps of mean ``1 / rate``."""

    rate: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _check_positive("rate", self.rate))

    def _unit_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    @property
    def mean_gap_s(self) -> float:
        """Mean inter-arrival time, ``1 / rate``."""
        return 1.0 / self.rate

    def unit_pattern(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """``n`` arrival times of the same process at rate 1 (independent of ``rate``)."""
        n = _check_int("n", n, 0)
        return _gaps_to_times(self._unit_gaps(max(n - 1, 0), _rng(seed)))[:n]

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
        object.__setattr__(self, "cv", _check_positive("cv", self.cv))

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
        t = _as_array("timestamps_s", self.timestamps_s, np.float64)
        _first_bad("timestamps_s", t, ~np.isfinite(t), "timestamps must be finite")
        if len(t) > 1 and np.any(t[1:] < t[:-1]):
            raise ValueError("timestamps_s must be sorted (non-decreasing)")
        object.__setattr__(self, "timestamps_s", t)
        object.__setattr__(self, "time_scale", _check_positive("time_scale", self.time_scale))

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
        rate = _check_positive("rate", rate)
        if not np.isfinite(self.trace_rate):
            raise ValueError("cannot rescale a trace to a rate: it has fewer than 2 distinct times")
        return replace(self, time_scale=rate / self.trace_rate)

    def _head(self, n: int | None) -> np.ndarray:
        t = self.timestamps_s
        n = len(t) if n is None else _check_int("n", n, 0)
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
        _check_int("concurrency", self.concurrency, 1)

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """All-NaN arrival times (to be set by the simulator)."""
        return np.full(_check_int("n", n, 0), np.nan)


def closed_loop_predecessor(requests: Requests) -> np.ndarray:
    """For a closed-loop workload, the request whose finish releases request ``i`` (-1: t = 0)."""
    if requests.concurrency is None:
        raise ValueError("requests are open-loop (concurrency is None)")
    return np.arange(len(requests), dtype=np.int64) - requests.concurrency


ArrivalProcess = PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals | ClosedLoop


# --------------------------------------------------------------------------------------------------
# Length distributions
# --------------------------------------------------------------------------------------------------


class LengthDist:
    """Integer length distribution on ``{1, 2, ...}`` that carries its own moments.

    Subclasses define ``sample(n, seed) -> int64[n]``, ``mean``, ``var`` and ``sf(x) = P(L > x)``;
    the moments are those of the sampled integers, so one object feeds both the sampler and the
    analytic formulas (e.g. ``E[S^2] = var + mean**2`` in Pollaczek-Khinchine).
    """

    mean: float
    var: float

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        raise NotImplementedError

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        raise NotImplementedError

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        """``P(L <= x)``."""
        return 1.0 - self.sf(x)

    @property
    def std(self) -> float:
        return float(np.sqrt(self.var))

    @property
    def second_moment(self) -> float:
        """``E[L^2] = var + mean^2``."""
        return self.var + self.mean**2


@dataclass(frozen=True)
class Fixed(LengthDist):
    """Every request has ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        _check_int("value", self.value, 1)

    @property
    def mean(self) -> float:
        return float(self.value)

    @property
    def var(self) -> float:
        return 0.0

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        return np.full(_check_int("n", n, 0), self.value, dtype=np.int64)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) < self.value).astype(np.float64)


@dataclass(frozen=True)
class Uniform(LengthDist):
    """Integers uniform on ``low .. high`` inclusive.

    Notes
    -----
    ``mean = (low + high) / 2`` and ``var = ((high - low + 1)**2 - 1) / 12``.
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        _check_int("low", self.low, 1)
        _check_int("high", self.high, self.low)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def var(self) -> float:
        return ((self.high - self.low + 1) ** 2 - 1) / 12

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        return _rng(seed).integers(self.low, self.high + 1, _check_int("n", n, 0), dtype=np.int64)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        k = np.floor(np.asarray(x, dtype=np.float64))
        return np.clip((self.high - k) / (self.high - self.low + 1), 0.0, 1.0)


@dataclass(frozen=True)
class LogNormal(LengthDist):
    """Lognormal lengths, rounded up to integers and clipped to ``[1, clip_max]``.

    Parameters
    ----------
    median : float
        Median ``exp(mu)`` of the underlying continuous lognormal ``X``.
    sigma : float
        Standard deviation of ``log X`` (> 0).
    clip_max : int, optional
        Largest length (e.g. the model's context limit); no cap if ``None``.

    Notes
    -----
    Samples are ``L = min(max(ceil(X), 1), clip_max)``. ``mean``, ``var`` and ``sf`` are exact for
    ``L`` (not for ``X``): with ``S(k) = P(X > k)``, ``P(L > k) = S(k)`` for ``1 <= k < clip_max``,
    ``E[L] = 1 + sum_{k=1}^{M-1} S(k)`` and ``E[L^2] = 1 + sum_{k=1}^{M-1} (2k + 1) S(k)``. The sums
    run term by term up to ``k = 2**16`` and continue with the midpoint rule in closed form, using
    the lognormal partial moments ``E[X^j; a < X < b] = exp(j mu + j^2 sigma^2 / 2)
    (Phi((mu + j sigma^2 - ln a) / sigma) - Phi((mu + j sigma^2 - ln b) / sigma))``.
    Use :meth:`from_mean` to give the mean of ``X`` instead of its median.
    """

    median: float
    sigma: float
    clip_max: int | None = None

    _TERMS = 1 << 16

    def __post_init__(self) -> None:
        _check_positive("median", self.median)
        _check_positive("sigma", self.sigma)
        if self.clip_max is not None:
            _check_int("clip_max", self.clip_max, 1)

    @classmethod
    def from_mean(cls, mean: float, sigma: float, clip_max: int | None = None) -> LogNormal:
        """Lognormal whose continuous ``X`` has mean ``mean``: ``median = mean exp(-sigma^2/2)``."""
        mean = _check_positive("mean", mean)
        return cls(mean * np.exp(-_check_positive("sigma", sigma) ** 2 / 2), sigma, clip_max)

    def _sf_x(self, x: np.ndarray) -> np.ndarray:
        return special.ndtr((np.log(self.median) - np.log(x)) / self.sigma)

    @cached_property
    def _moments(self) -> tuple[float, float]:
        m = np.inf if self.clip_max is None else float(self.clip_max)
        k = np.arange(1, int(min(m, self._TERMS)), dtype=np.float64)
        s = self._sf_x(k)
        m1, m2 = 1.0 + s.sum(), 1.0 + ((2 * k + 1) * s).sum()
        if m > self._TERMS:  # tail: sum_{k=K}^{M-1} g(k) S(k) ~ integral over [K - 1/2, M - 1/2]
            a, b = self._TERMS - 0.5, m - 0.5
            mu, s2 = np.log(self.median), self.sigma**2

            def partial(j: int) -> float:
                z = [(mu + j * s2 - np.log(v)) / self.sigma for v in (a, b)]
                return np.exp(j * mu + j * j * s2 / 2) * (special.ndtr(z[0]) - special.ndtr(z[1]))

            sa = float(self._sf_x(np.array(a)))
            sb = 0.0 if np.isinf(b) else float(self._sf_x(np.array(b)))
            bsb, b2sb = (0.0, 0.0) if np.isinf(b) else (b * sb, (b * b + b) * sb)
            m1 += bsb - a * sa + partial(1)
            m2 += b2sb - (a * a + a) * sa + partial(2) + partial(1)
        return float(m1), float(m2 - m1 * m1)

    @property
    def mean(self) -> float:
        return self._moments[0]

    @property
    def var(self) -> float:
        return self._moments[1]

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        z = _rng(seed).standard_normal(_check_int("n", n, 0))
        x = np.ceil(self.median * np.exp(self.sigma * z))
        return np.clip(x, 1, self.clip_max or _MAX_LEN).astype(np.int64)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        k = np.floor(np.asarray(x, dtype=np.float64))
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(k < 1, 1.0, self._sf_x(np.maximum(k, 1.0)))
        if self.clip_max is not None:
            out = np.where(k >= self.clip_max, 0.0, out)
        return out


@dataclass(frozen=True, eq=False)
class Empirical(LengthDist):
    """Resampling with replacement from observed lengths (e.g. a trace column).

    Notes
    -----
    ``mean`` and ``var`` are the moments of the observed values with ``ddof = 0``, which are the
    exact moments of resampling.
    """

    values: np.ndarray

    def __post_init__(self) -> None:
        v = _as_array("values", self.values, np.int64)
        if len(v) == 0:
            raise ValueError("values must not be empty")
        _first_bad("values", v, v < 1, "lengths must be >= 1")
        object.__setattr__(self, "values", v)

    @cached_property
    def _sorted(self) -> np.ndarray:
        return np.sort(self.values)

    @cached_property
    def mean(self) -> float:
        return float(self.values.mean())

    @cached_property
    def var(self) -> float:
        return float(self.values.var())

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        return self.values[_rng(seed).integers(0, len(self.values), _check_int("n", n, 0))]

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        below = np.searchsorted(self._sorted, np.asarray(x, dtype=np.float64), side="right")
        return 1.0 - below / len(self.values)


# --------------------------------------------------------------------------------------------------
# Synthetic shared prefixes
# --------------------------------------------------------------------------------------------------


def synthetic_prefix_hashes(prompt_len: np.ndarray, group: np.ndarray, prefix_len: int,
                            block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash ids for prompts whose first ``prefix_len`` tokens are shared within a group.

    Parameters
    ----------
    prompt_len : int64[n]
        Prompt lengths (>= 1).
    group : int64[n]
        Prefix group of each request, ``0 .. G - 1``; a negative group shares nothing.
    prefix_len : int
        Tokens shared by all requests of a group (>= 0).
    block_size : int
        Tokens per hash block.

    Returns
    -------
    hash_ids, hash_offsets : int64 arrays
        As in :class:`Requests`. Block ``j`` of request ``i`` (tokens ``[j B, (j+1) B)``) is
        shared iff it lies entirely in the shared prefix, ``(j + 1) B <= min(prefix_len,
        prompt_len[i])``; its id is ``group * (prefix_len // B) + j``. Every other block (the one
        straddling the prefix end, the rest of the prompt) gets a fresh id, counting up from
        ``G * (prefix_len // B)``. So equal prefixes give equal leading ids, as in vLLM and Mooncake,
        where a block's hash covers all tokens up to its end.
    """
    prompt_len = _as_array("prompt_len", prompt_len, np.int64)
    group = _as_array("group", group, np.int64)
    if len(group) != len(prompt_len):
        raise ValueError(f"group has {len(group)} entries but prompt_len has {len(prompt_len)}")
    _first_bad("prompt_len", prompt_len, prompt_len < 1, "lengths must be >= 1")
    prefix_len = _check_int("prefix_len", prefix_len, 0)
    block_size = _check_int("block_size", block_size, 1)
    counts = -(-prompt_len // block_size)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    req = np.repeat(np.arange(len(counts)), counts)
    pos = np.arange(offsets[-1], dtype=np.int64) - offsets[:-1][req]
    per_group = prefix_len // block_size
    shared_blocks = np.where(group >= 0, np.minimum(prefix_len, prompt_len) // block_size, 0)
    shared = pos < shared_blocks[req]
    ids = np.empty(offsets[-1], dtype=np.int64)
    ids[shared] = group[req[shared]] * per_group + pos[shared]
    first_fresh = (int(group.max()) + 1 if len(group) else 0) * per_group
    ids[~shared] = first_fresh + np.arange(np.count_nonzero(~shared), dtype=np.int64)
    return ids, offsets


@dataclass(frozen=True)
class PrefixSharing:
    """Synthetic prefix sharing: ``num_groups`` shared prefixes of ``prefix_len`` tokens each.

    Each request picks a group uniformly at random and gets ``prefix_len`` shared tokens in front of
    its sampled prompt (as ``vllm bench serve --random-prefix-len``), so its prompt length is
    ``prefix_len + sampled``. ``block_size`` is the hash granularity written to
    ``Requests.hash_block_size`` (vLLM's default KV block is 16 tokens).
    """

    num_groups: int
    prefix_len: int
    block_size: int = 16

    def __post_init__(self) -> None:
        _check_int("num_groups", self.num_groups, 1)
        _check_int("prefix_len", self.prefix_len, 0)
        _check_int("block_size", self.block_size, 1)


# --------------------------------------------------------------------------------------------------
# Putting it together
# --------------------------------------------------------------------------------------------------


def generate_requests(n: int, arrivals: ArrivalProcess, prompt_len: LengthDist,
                      output_len: LengthDist, seed: SeedLike = None, *,
                      prefix: PrefixSharing | None = None) -> Requests:
    """Draw ``n`` synthetic requests.

    Parameters
    ----------
    n : int
        Number of requests.
    arrivals : PoissonArrivals, GammaArrivals, ConstantArrivals, TraceArrivals or ClosedLoop
        Arrival process; :class:`ClosedLoop` gives NaN arrivals and sets ``concurrency``.
    prompt_len, output_len : LengthDist
        Length distributions (``prefix.prefix_len`` is added to the prompt when given).
    seed : int, SeedSequence or Generator
        Randomness. Arrivals, prompt lengths, output lengths and prefix groups come from four
        independent child streams (``Generator.spawn``), so changing one component (e.g. the rate
        or the arrival process) leaves the others unchanged for the same seed.
    prefix : PrefixSharing, optional
        Synthetic shared prefixes; without it the requests carry no hash ids.

    Examples
    --------
    >>> a = generate_requests(4, PoissonArrivals(2.0), Fixed(8), Uniform(1, 4), seed=0)
    >>> b = generate_requests(4, PoissonArrivals(8.0), Fixed(8), Uniform(1, 4), seed=0)
    >>> bool(np.allclose(a.arrival_s, 4 * b.arrival_s)), bool((a.output_len == b.output_len).all())
    (True, True)
    """
    n = _check_int("n", n, 0)
    rng_arr, rng_in, rng_out, rng_grp = _rng(seed).spawn(4)
    prompt = prompt_len.sample(n, rng_in)
    hashes: dict = {}
    if prefix is not None:
        prompt = prompt + prefix.prefix_len
        group = rng_grp.integers(0, prefix.num_groups, n)
        ids, off = synthetic_prefix_hashes(prompt, group, prefix.prefix_len, prefix.block_size)
        hashes = dict(hash_ids=ids, hash_offsets=off, hash_block_size=prefix.block_size)
    closed = isinstance(arrivals, ClosedLoop)
    return Requests(arrival_s=arrivals.sample(n, rng_arr), prompt_len=prompt,
                    output_len=output_len.sample(n, rng_out),
                    concurrency=arrivals.concurrency if closed else None, **hashes)
