"""One in-memory form for a benchmark run of any tool: :class:`BenchRun` and its :class:`Load`.

Conventions (DESIGN.md): times in seconds, per-request arrays in *send order* (the order the
client sent the requests, by send time where the file records it), percentiles over
requests. What the file does not record is ``None`` (a whole array) or a sentinel (one
entry): ``-1`` for an unknown token count, NaN for an unknown time. A failed request has
NaN ``ttft_s`` / ``e2e_s``, ``output_len == -1`` and no inter-token gaps.

``summary`` holds what the file itself reports, normalised to seconds and to these keys:
``{stat}_{metric}_s`` with ``stat`` in ``mean, p50 (the median), std, min, max, pNN`` and
``metric`` in ``ttft, tpot, itl, e2e`` (plus tool-specific ones: ``ntpot``, ...);
``request_throughput``, ``output_throughput``, ``total_token_throughput``,
``request_goodput`` (requests/s, tokens/s); ``completed``, ``failed``, ``duration_s``,
``total_input_tokens``, ``total_output_tokens``; ``mean_input_len``, ``mean_output_len``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

KINDS = ("rate", "concurrency", "stages")
ARRIVALS = ("poisson", "gamma", "constant", "trace")
TOOLS = ("vllm", "sglang", "aiperf", "genai-perf", "guidellm", "inference-perf",
         "serveplan")
RAMP_UP = ("linear", "exponential")
DETAIL_FLAGS = {"vllm": "rerun vllm bench serve with --save-detailed",
                "sglang": "rerun sglang.bench_serving with --output-details",
                "genai-perf": "keep perf_analyzer's profile_export.json beside the summary",
                "guidellm": "rerun guidellm benchmark without --output-sampling / "
                            "--sample-requests"}


@dataclass(frozen=True)
class Load:
    """How the client sent its requests.

    Parameters
    ----------
    kind : {"rate", "concurrency", "stages"}
        Open loop at ``request_rate``; closed loop of ``concurrency`` clients; or
        inference-perf's ``stages``.
    request_rate : float
        Requests/s (``inf``: all at once; NaN: not recorded).
    burstiness : float
        Gamma shape of the gaps (vLLM ``--burstiness``, aiperf ``--arrival-smoothness``):
        1 is Poisson, ``inf`` even gaps.
    concurrency : int, optional
        Closed-loop clients (kind ``concurrency``), or the cap a rate-driven client held
        (vLLM ``--max-concurrency`` with a finite rate, aiperf ``--concurrency`` with
        ``--request-rate``).
    stages : tuple of (rate, duration)
        inference-perf ``load.stages`` in requests/s and seconds.
    arrival : {"poisson", "gamma", "constant", "trace"}
        The gap law; ``trace`` is a recorded schedule (aiperf ``--fixed-schedule``,
        inference-perf ``trace_replay``) that only the send times reproduce.
    seed : int, optional
        The client's seed where the file records it.
    stage_interval_s : float
        inference-perf ``load.interval``: seconds between stages.
    ramp_up : (strategy, start rps, end rps), optional
        vLLM ``--ramp-up-strategy`` (``linear`` / ``exponential``) and its end points.
    """

    kind: str
    request_rate: float = math.inf
    burstiness: float = 1.0
    concurrency: int | None = None
    stages: tuple[tuple[float, float], ...] = ()
    arrival: str = "poisson"
    seed: int | None = None
    stage_interval_s: float = 1.0
    ramp_up: tuple[str, float, float] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival must be one of {ARRIVALS}, got {self.arrival!r}")
        rate, b = float(self.request_rate), float(self.burstiness)
        if rate <= 0:
            raise ValueError(f"request_rate must be > 0 (inf allowed, NaN: unknown), got {rate}")
        if not b > 0:
            raise ValueError(f"burstiness must be > 0 (inf allowed), got {b}")
        object.__setattr__(self, "request_rate", rate)
        object.__setattr__(self, "burstiness", b)
        if self.concurrency is not None and (isinstance(self.concurrency, bool)
                                             or int(self.concurrency) != self.concurrency
                                             or self.concurrency < 1):
            raise ValueError(f"concurrency must be an integer >= 1, got {self.concurrency!r}")
        if self.kind == "concurrency" and self.concurrency is None:
            raise ValueError("kind 'concurrency' needs concurrency")
        stages = tuple((float(r), float(d)) for r, d in self.stages)
        if any(not (r > 0 and d > 0 and math.isfinite(r * d)) for r, d in stages):
            raise ValueError(f"stages must be (rate > 0, duration > 0) pairs, got {stages}")
        if self.kind == "stages" and not stages:
            raise ValueError("kind 'stages' needs at least one (rate, duration) stage")
        object.__setattr__(self, "stages", stages)
        if not self.stage_interval_s >= 0:
            raise ValueError(f"stage_interval_s must be >= 0, got {self.stage_interval_s}")
        if self.ramp_up is not None:
            strategy, lo, hi = self.ramp_up
            if strategy not in RAMP_UP or not (0 < float(lo) <= float(hi)):
                raise ValueError(f"ramp_up must be ({'|'.join(RAMP_UP)}, start > 0, end >= "
                                 f"start), got {self.ramp_up!r}")
            object.__setattr__(self, "ramp_up", (strategy, float(lo), float(hi)))


def describe_load(load: Load) -> str:
    """A load in a few words: ``4 clients``, ``8 req/s poisson``, ``all at once``."""
    if load.kind == "concurrency":
        return f"{load.concurrency} client{'s' if load.concurrency != 1 else ''}"
    if load.kind == "stages":
        return f"{len(load.stages)} stages"
    cap = f", at most {load.concurrency} in flight" if load.concurrency else ""
    if math.isinf(load.request_rate):
        return "all at once" + cap
    if math.isnan(load.request_rate):
        return "recorded sends" + cap
    return f"{load.request_rate:.4g} req/s {load.arrival}{cap}"


def vllm_tpot(success, output_len, ttft_s, e2e_s) -> np.ndarray:
    """vLLM's TPOT per request (``calculate_metrics``): ``(e2e - ttft) / (output_len - 1)``
    for successful requests with ``output_len > 1``; NaN elsewhere."""
    ok = success & (output_len > 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, (e2e_s - ttft_s) / (output_len - 1), np.nan)


_ARRAYS = {"input_len": np.int64, "output_len": np.int64, "success": np.bool_,
           "ttft_s": np.float64, "e2e_s": np.float64, "send_s": np.float64,
           "stage": np.int64}


@dataclass(frozen=True, eq=False)
class BenchRun:
    """A benchmark run read from a tool's result files (module docstring for the units).

    Attributes
    ----------
    path : Path
        The file or folder read.
    tool : str
        ``vllm``, ``sglang``, ``aiperf``, ``genai-perf``, ``guidellm``, ``inference-perf``
        (``serveplan`` for a simulation).
    model : str or None
        The model the client named.
    load : Load
        How the requests were sent.
    input_len, output_len : int64[n] or None
        Prompt and generated tokens per request (-1: unknown, e.g. a failed request's
        output).
    success : bool[n] or None
        Whether the client counted the request as completed.
    ttft_s, e2e_s : float64[n] or None
        Time to first token and end-to-end latency from the send (NaN where failed).
    itl_s, itl_offsets : float64[total], int64[n + 1] or None
        Gaps between consecutive chunks/tokens as the tool records them; request ``i`` owns
        ``itl_s[itl_offsets[i]:itl_offsets[i + 1]]`` (empty for failed requests).
    send_s : float64[n] or None
        Send times relative to the first send, where the file has timestamps.
    stage : int64[n] or None
        The load stage of each request (inference-perf).
    summary : dict
        What the file reports, normalised (module docstring).
    extras : dict
        Other figures the file has (prefix-cache hits, the requested output length, ...).
    warnings : tuple of str
        What the importer (and the replay, :mod:`.workload`) had to assume.
    part : int, optional
        Which run of a file of several (``FILE:N``: an SGLang line, a GuideLLM benchmark).
    """

    path: Path
    tool: str
    model: str | None
    load: Load
    input_len: np.ndarray | None = None
    output_len: np.ndarray | None = None
    success: np.ndarray | None = None
    ttft_s: np.ndarray | None = None
    e2e_s: np.ndarray | None = None
    itl_s: np.ndarray | None = None
    itl_offsets: np.ndarray | None = None
    send_s: np.ndarray | None = None
    stage: np.ndarray | None = None
    summary: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    part: int | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "path", Path(self.path))
        if self.tool not in TOOLS:
            raise ValueError(f"tool must be one of {TOOLS}, got {self.tool!r}")
        for name, dtype in _ARRAYS.items():
            if getattr(self, name) is not None:
                put(self, name, np.ascontiguousarray(getattr(self, name), dtype=dtype))
        per = [name for name in ("input_len", "output_len", "success", "ttft_s", "e2e_s")
               if getattr(self, name) is not None]
        if per and len(per) != 5:
            raise ValueError(f"per-request arrays come together; got only {per}")
        n = len(self.success) if self.success is not None else None
        for name in _ARRAYS:
            a = getattr(self, name)
            if a is not None and (n is None or a.shape != (n,)):
                raise ValueError(f"{name} has shape {a.shape}; expected ({n},)")
        self._check_itl(n)
        if self.send_s is not None and not np.all(np.isfinite(self.send_s)):
            raise ValueError("send_s must be finite")
        put(self, "warnings", tuple(self.warnings))

    def _check_itl(self, n: int | None) -> None:
        if (self.itl_s is None) != (self.itl_offsets is None):
            raise ValueError("itl_s and itl_offsets come together")
        if self.itl_s is None:
            return
        if n is None:
            raise ValueError("itl_s needs the per-request arrays")
        put = object.__setattr__
        put(self, "itl_s", np.ascontiguousarray(self.itl_s, dtype=np.float64))
        off = np.ascontiguousarray(self.itl_offsets, dtype=np.int64)
        put(self, "itl_offsets", off)
        if off.shape != (n + 1,) or off[0] != 0 or off[-1] != len(self.itl_s) or np.any(
                np.diff(off) < 0):
            raise ValueError(f"itl_offsets must be n + 1 = {n + 1} non-decreasing offsets from "
                             f"0 to len(itl_s) = {len(self.itl_s)}")

    @property
    def name(self) -> str:
        """The run as the user named it: the file's name, ``:N`` for one run of several."""
        return self.path.name if self.part is None else f"{self.path.name}:{self.part}"

    @property
    def detail_hint(self) -> str:
        """How to get per-request records from this run's tool, for a message."""
        return DETAIL_FLAGS.get(self.tool, "rerun the benchmark keeping per-request records")

    @property
    def has_requests(self) -> bool:
        """Whether the file had per-request records."""
        return self.success is not None

    @property
    def n(self) -> int:
        """Requests sent: the per-request records, else the summary's completed + failed."""
        if self.success is not None:
            return len(self.success)
        done = self.summary.get("completed", 0.0) + self.summary.get("failed", 0.0)
        return int(done) if math.isfinite(done) else 0

    def itls(self, i: int) -> np.ndarray:
        """Inter-token gaps of request ``i`` (a view)."""
        if self.itl_s is None:
            raise ValueError(f"{self.path.name} has no inter-token gaps")
        return self.itl_s[self.itl_offsets[i]:self.itl_offsets[i + 1]]

    def per_request_tpot_s(self) -> np.ndarray:
        """vLLM's TPOT per request: ``(e2e - ttft) / (output_len - 1)`` for successful
        requests with ``output_len > 1``; NaN elsewhere (float64[n])."""
        if not self.has_requests:
            raise ValueError(f"{self.path.name} has no per-request records")
        return vllm_tpot(self.success, self.output_len, self.ttft_s, self.e2e_s)

    def with_warnings(self, *messages: str) -> BenchRun:
        """The same run with ``messages`` appended to its warnings."""
        return replace(self, warnings=self.warnings + tuple(messages)) if messages else self


def _relative(send_s) -> np.ndarray:
    t = np.asarray(send_s, dtype=np.float64)
    return t - t.min() if t.size else t


def run_from_arrays(*, input_len, output_len, ttft_s, e2e_s, success=None, itls=None,
                    send_s=None, load: Load | None = None, model: str | None = None,
                    path: str | Path = "serveplan", tool: str = "serveplan",
                    summary: dict | None = None) -> BenchRun:
    """A :class:`BenchRun` from per-request arrays (e.g. a simulation, for
    :func:`~serveplan.runs.vllm.write_vllm`).

    ``itls`` is a list of per-request gap arrays (or ``None``); ``success`` defaults to the
    requests with a finite TTFT. Failed requests get NaN times and ``output_len = -1``.
    ``send_s`` (arrival times, in send order) is made relative to the first send, as in a
    run read from a file; pass ``summary={"duration_s": ...}`` to keep a duration measured
    from another origin (the writer otherwise takes the last response after the first send).
    """
    ttft = np.asarray(ttft_s, dtype=np.float64)
    ok = np.isfinite(ttft) if success is None else np.asarray(success, dtype=bool)
    itl_s = itl_offsets = None
    if itls is not None:
        from ._io import ragged

        itl_s, itl_offsets = ragged([np.asarray(g, dtype=np.float64) if keep else np.zeros(0)
                                     for g, keep in zip(itls, ok, strict=True)])
    return BenchRun(path=Path(path), tool=tool, model=model, load=load or Load("rate"),
                    input_len=np.asarray(input_len, dtype=np.int64),
                    output_len=np.where(ok, np.asarray(output_len, dtype=np.int64), -1),
                    success=ok, ttft_s=np.where(ok, ttft, np.nan),
                    e2e_s=np.where(ok, np.asarray(e2e_s, dtype=np.float64), np.nan),
                    itl_s=itl_s, itl_offsets=itl_offsets,
                    send_s=None if send_s is None else _relative(send_s),
                    summary=dict(summary or {}))


__all__ = ["ARRIVALS", "KINDS", "RAMP_UP", "TOOLS", "BenchRun", "Load", "describe_load",
           "run_from_arrays", "vllm_tpot"]
