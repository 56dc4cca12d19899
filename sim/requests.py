"""The request container: :class:`Requests`, a frozen structure of arrays (no per-request
Python objects) holding arrival times, prompt and output lengths and, optionally, the
prefix-block hash ids that the KV block manager uses for prefix caching; and what is done to a
whole set of requests (:func:`tile_requests`, :func:`closed_loop_predecessor`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ._checks import as_array, check_int, check_positive, first_bad
from .arrivals import StagePlan, TraceArrivals

MOONCAKE_BLOCK_SIZE = 512
"""Tokens per prefix hash block in the Mooncake FAST'25 traces."""


def ragged_take(values: np.ndarray, offsets: np.ndarray, idx: np.ndarray):
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
    warmup : int
        The first ``warmup`` requests are warm-up requests (aiperf ``--warmup-request-count``):
        they run like any other but the statistics leave them out (:mod:`.clients`).
    timeout_s : float, optional
        The client's timeout: a request whose end-to-end latency exceeds it counts as failed
        in the statistics (the simulated server still serves it to the end).
    client_delay_s : float64[n], optional
        Closed loop only: seconds between the finish of a client's previous request and the
        send of request ``i`` (think time); entries of the first ``concurrency`` requests are
        unused. See :mod:`.clients` for what the compiled loop does with it.
    sessions : serveplan.sim.sessions.SessionPlan, optional
        Rows are rounds of stateful sessions: the first ``sessions.num_first`` rows are the
        sessions' first rounds (arrivals sorted), later rounds follow with NaN arrivals (the
        simulator sends each after its previous round and tool delay).
    max_concurrency : int, optional
        Open loop only: the client sends a due request only while fewer than this many are
        in flight, the others waiting in order (``vllm bench serve --max-concurrency``).
    stages : serveplan.sim.arrivals.StagePlan, optional
        Open-loop load in stages that drain (inference-perf): the first stage's requests
        have their send times, later stages' NaN (the simulator sends each stage at its
        offsets once the previous one has finished).

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
    warmup: int = 0
    timeout_s: float | None = None
    client_delay_s: np.ndarray | None = None
    sessions: object | None = None
    stages: StagePlan | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "arrival_s", as_array("arrival_s", self.arrival_s, np.float64))
        for name in ("prompt_len", "output_len"):
            put(self, name, as_array(name, getattr(self, name), np.int64))
        n = len(self.arrival_s)
        for name in ("prompt_len", "output_len"):
            a = getattr(self, name)
            if len(a) != n:
                raise ValueError(f"{name} has {len(a)} entries but arrival_s has {n}")
            first_bad(name, a, a < 1, "lengths must be >= 1")
        arr = self.arrival_s
        if self.stages is not None:
            self._validate_stages(arr)
        elif self.sessions is not None:
            self.sessions.check_arrivals(arr)
        elif self.concurrency is None:
            first_bad("arrival_s", arr, ~np.isfinite(arr) | (arr < 0),
                       "arrival times must be finite and >= 0 (NaN only with concurrency)")
            if n > 1 and np.any(arr[1:] < arr[:-1]):
                i = int(np.argmax(arr[1:] < arr[:-1])) + 1
                raise ValueError(f"arrival_s must be sorted: arrival_s[{i}] = {arr[i].item()!r} < "
                                 f"arrival_s[{i - 1}] = {arr[i - 1].item()!r}")
        else:
            put(self, "concurrency", check_int("concurrency", self.concurrency, 1))
            first_bad("arrival_s", arr, ~np.isnan(arr),
                       f"closed-loop requests (concurrency={self.concurrency}) must have all "
                       "arrival_s NaN; the simulator sets them")
        self._validate_hashes(n)
        self._validate_client(n)

    def _validate_stages(self, arr: np.ndarray) -> None:
        st = self.stages
        if self.concurrency is not None or self.sessions is not None:
            raise ValueError("stages are an open-loop load: give them without concurrency "
                             "or sessions")
        if len(st) != len(arr):
            raise ValueError(f"stages has {len(st)} entries but arrival_s has {len(arr)}")
        first = st.stage == 0
        first_bad("arrival_s", arr, first & (arr != st.offset_s),
                  "the first stage's arrivals must be its offsets (stages.offset_s)")
        first_bad("arrival_s", arr, ~first & ~np.isnan(arr),
                  "later stages' arrivals must be NaN; the simulator sets them")
        head = arr[first]
        if np.any(head[1:] < head[:-1]):
            raise ValueError("arrival_s must be sorted within the first stage")

    def _validate_hashes(self, n: int) -> None:
        given = [x is not None for x in (self.hash_ids, self.hash_offsets, self.hash_block_size)]
        if not any(given):
            return
        if not all(given):
            raise ValueError("hash_ids, hash_offsets and hash_block_size must be given together; "
                             f"got hash_ids={given[0]}, hash_offsets={given[1]}, "
                             f"hash_block_size={self.hash_block_size!r}")
        put = object.__setattr__
        put(self, "hash_block_size", check_int("hash_block_size", self.hash_block_size, 1))
        ids = as_array("hash_ids", self.hash_ids, np.int64)
        off = as_array("hash_offsets", self.hash_offsets, np.int64)
        put(self, "hash_ids", ids)
        put(self, "hash_offsets", off)
        if len(off) != n + 1:
            raise ValueError(f"hash_offsets must have n + 1 = {n + 1} entries, got {len(off)}")
        if off[0] != 0 or off[-1] != len(ids):
            raise ValueError(f"hash_offsets must start at 0 and end at len(hash_ids) = {len(ids)}, "
                             f"got {off[0]} and {off[-1]}")
        first_bad("hash_ids", ids, ids < 0, "hash ids must be >= 0")
        counts = np.diff(off)
        need = -(-self.prompt_len // self.hash_block_size)
        if np.any(counts != need):
            i = int(np.argmax(counts != need))
            raise ValueError(f"request {i} has {counts[i]} hash ids (hash_offsets[{i}:{i + 2}]) "
                             f"but prompt_len {self.prompt_len[i]} needs ceil(prompt_len / "
                             f"hash_block_size={self.hash_block_size}) = {need[i]}")

    def _validate_client(self, n: int) -> None:
        put = object.__setattr__
        put(self, "warmup", check_int("warmup", self.warmup, 0))
        if self.warmup > n:
            raise ValueError(f"warmup = {self.warmup} exceeds the {n} requests")
        if self.timeout_s is not None:
            put(self, "timeout_s", check_positive("timeout_s", self.timeout_s))
        if self.client_delay_s is not None:
            if self.concurrency is None:
                raise ValueError("client_delay_s needs a closed-loop workload (concurrency)")
            d = as_array("client_delay_s", self.client_delay_s, np.float64)
            if len(d) != n:
                raise ValueError(f"client_delay_s has {len(d)} entries but arrival_s has {n}")
            first_bad("client_delay_s", d, ~np.isfinite(d) | (d < 0),
                      "delays must be finite and >= 0")
            put(self, "client_delay_s", d)
        if self.max_concurrency is not None:
            put(self, "max_concurrency", check_int("max_concurrency", self.max_concurrency, 1))
            if self.concurrency is not None or self.sessions is not None or \
                    self.stages is not None:
                raise ValueError("max_concurrency caps an open-loop client: give it without "
                                 "concurrency, sessions or stages")

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
        """Requests at ``index`` (a slice or integer array; arrivals must stay sorted).

        Warm-up requests taken must come first; ``warmup`` becomes their number.
        """
        idx = np.arange(len(self), dtype=np.int64)[index]
        fields: dict = {}
        if self.hash_ids is not None:
            fields["hash_ids"], fields["hash_offsets"] = ragged_take(
                self.hash_ids, self.hash_offsets, idx)
        if self.client_delay_s is not None:
            fields["client_delay_s"] = self.client_delay_s[idx]
        is_warmup = idx < self.warmup
        warmup = int(is_warmup.sum())
        if not is_warmup[:warmup].all():
            raise ValueError("take: warm-up requests must stay the leading requests")
        if self.stages is not None:
            if not np.array_equal(idx, np.arange(len(idx))):
                raise ValueError("take: staged requests can only be cut to their first ones")
            fields["stages"] = self.stages.head(len(idx))
        return replace(self, arrival_s=self.arrival_s[idx], prompt_len=self.prompt_len[idx],
                       output_len=self.output_len[idx], warmup=warmup, **fields)

    def with_arrivals(self, arrival_s: np.ndarray, concurrency: int | None = None) -> Requests:
        """The same requests with new arrival times (and closed-loop setting; no stages)."""
        return replace(self, arrival_s=arrival_s, concurrency=concurrency, stages=None,
                       max_concurrency=self.max_concurrency if concurrency is None else None)

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

    Notes
    -----
    Warm-up requests stay those of the first copy.
    """
    n = check_int("n", n, 0)
    m = len(requests)
    if m == 0:
        raise ValueError("cannot tile an empty Requests")
    if requests.stages is not None:
        raise ValueError("cannot tile staged requests: their stages drain one after another")
    reps = -(-n // m)
    arr = requests.arrival_s
    span = float(arr[-1] - arr[0]) if not requests.is_closed_loop else 0.0
    if gap_s is None:
        gap_s = span / (m - 1) if m > 1 else 0.0
    period = span + check_positive("gap_s", gap_s, allow_zero=True)
    fields = dict(arrival_s=np.tile(arr, reps) + np.repeat(np.arange(reps) * period, m),
                  prompt_len=np.tile(requests.prompt_len, reps),
                  output_len=np.tile(requests.output_len, reps))
    if requests.client_delay_s is not None:
        fields["client_delay_s"] = np.tile(requests.client_delay_s, reps)
    if requests.hash_ids is not None:
        ids, off = requests.hash_ids, requests.hash_offsets
        stride = int(ids.max()) + 1 if distinct_hashes and len(ids) else 0
        fields["hash_ids"] = np.tile(ids, reps) + np.repeat(np.arange(reps) * stride, len(ids))
        fields["hash_offsets"] = np.concatenate(
            [[0], (off[1:][None, :] + (np.arange(reps) * len(ids))[:, None]).ravel()])
    return replace(requests, **fields).take(slice(0, n))


def closed_loop_predecessor(requests: Requests) -> np.ndarray:
    """For a closed-loop workload, the request whose finish releases request ``i`` (-1: t = 0)."""
    if requests.concurrency is None:
        raise ValueError("requests are open-loop (concurrency is None)")
    return np.arange(len(requests), dtype=np.int64) - requests.concurrency

