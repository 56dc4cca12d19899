"""Rebuild the workload of a benchmark run so the simulator can replay it.

:func:`requests_for` turns a :class:`~serveplan.runs.model.BenchRun` into
:class:`~serveplan.sim.requests.Requests`: one simulated request per request the client
sent, in send order, so request ``i`` of the replay is request ``i`` of the run.

Lengths
    The recorded prompt and output tokens. A *failed* request is replayed too: the server
    received it and spent at least its prefill on it (vLLM and aiperf count a request as
    failed when its stream breaks or times out, usually under load, which is exactly the
    load a faithful replay must carry). Its output length is unknown: it is replayed with
    the length the run *requested* where the file records one (aiperf ``--osl``,
    inference-perf ``data.output_distribution.mean``: ``extras["requested_output_len"]``),
    else with the median output of the successful requests. An unknown prompt length
    (aiperf before its ``error_isl`` metric) is the median prompt. Lengths are at least 1.
    A run without per-request records (vLLM without ``--save-detailed``) is replayed with
    ``n`` requests of the file's mean lengths (``summary["mean_input_len"]``, ...).

Arrivals (``arrivals="auto"``)
    * a closed loop (kind ``concurrency``: aiperf ``--concurrency``, vLLM
      ``--max-concurrency`` with an infinite rate, inference-perf ``concurrent``) stays a
      closed loop of that many clients (:class:`~serveplan.sim.arrivals.ClosedLoop`): its
      sends depend on the server's speed, so replaying the recorded send times open-loop
      would drop that feedback; each send comes after the clients' small random delay
      (:data:`~serveplan.sim.clients.CLIENT_SEND_JITTER_S`), as real clients' do;
    * otherwise the recorded send times ``send_s`` where the file has them: exactly the
      sends the server saw (aiperf and inference-perf always record them; vLLM since
      ``start_times``, Jan 2026);
    * otherwise the client's own schedule, drawn with ``seed``: vLLM
      :class:`~serveplan.sim.arrivals.VllmBenchArrivals` (rate ``inf``: all at 0; with
      ``--ramp-up-strategy`` the ramp of ``get_request``); aiperf's renewal processes
      (:class:`PoissonArrivals`, :class:`GammaArrivals` with ``cv = 1 / sqrt(smoothness)``,
      :class:`ConstantArrivals`); inference-perf
      :class:`~serveplan.sim.arrivals.InferencePerfArrivals` over its stages, each stage
      sent once the previous one has drained (its ``staged`` plan); a rate with a
      concurrency cap (vLLM ``--max-concurrency``) holds due requests back while that
      many are in flight (``Requests.max_concurrency``).

    ``arrivals="recorded"`` forces the send times (open loop, even for a closed loop);
    ``arrivals="schedule"`` forces the client's schedule (a closed loop's is the loop).

What these choices assume is appended to the run's warnings when it is read
(:func:`with_replay_warnings`), so a reader of the comparison sees them.
"""

from __future__ import annotations

import math

import numpy as np

from serveplan.config_bounds import MAX_REQUESTS
from serveplan.sim.arrivals import (
    ClosedLoop,
    ConstantArrivals,
    GammaArrivals,
    InferencePerfArrivals,
    PoissonArrivals,
    VllmBenchArrivals,
)
from serveplan.sim.clients import CLIENT_SEND_JITTER_S
from serveplan.sim.requests import Requests
from serveplan.user_input import UserError

from ._io import Where, mean_tokens
from .model import BenchRun

MODES = ("auto", "recorded", "schedule")


# ----------------------------------------------------------------------------- lengths
def _median(values: np.ndarray) -> int | None:
    values = values[values >= 1]
    return max(int(round(float(np.median(values)))), 1) if values.size else None


def _fill(values: np.ndarray, unknown: np.ndarray, fill: int | None, what: str,
          run: BenchRun) -> np.ndarray:
    if not unknown.any():
        return values
    if fill is None:
        raise UserError(f"{run.path}: {what}: unknown for all {len(values)} requests; nothing "
                        "to replay them with")
    return np.where(unknown, fill, values)


def replay_lengths(run: BenchRun) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Prompt and output lengths of the replay (int64[n], >= 1) and what was assumed."""
    if not run.has_requests:
        return _summary_lengths(run)
    notes: list[str] = []
    prompt = run.input_len.copy()
    unknown_in = prompt < 1
    fill_in = _median(prompt)
    if unknown_in.any():
        notes.append(f"{int(unknown_in.sum())} requests with an unknown prompt length are "
                     f"replayed with the median prompt ({fill_in} tokens)")
    prompt = _fill(prompt, unknown_in, fill_in, "input_len", run)
    output = run.output_len.copy()
    failed_out = ~run.success
    short = run.success & (output < 1)
    requested = run.extras.get("requested_output_len")
    fill_out = int(requested) if requested else _median(output[run.success])
    if failed_out.any():
        source = ("the run's requested output length" if requested
                  else "the median output of the successful requests")
        notes.append(f"{int(failed_out.sum())} failed requests are replayed (the server "
                     f"received them) with {source}, {fill_out} tokens")
    if short.any():
        notes.append(f"{int(short.sum())} successful requests with 0 output tokens are "
                     "replayed with 1")
    output = _fill(output, failed_out, fill_out, "output_len", run)
    return prompt, np.maximum(output, 1), notes


def _summary_lengths(run: BenchRun) -> tuple[np.ndarray, np.ndarray, list[str]]:
    n, s = run.n, run.summary
    for key in ("completed", "failed"):  # the replay's request count
        count = s.get(key, 0.0)
        if not (math.isfinite(count) and count >= 0 and float(count).is_integer()):
            raise UserError(f"{run.path}: {key}: expected a whole number of requests >= 0, "
                            f"got {count:.6g}")
    if n < 1:
        raise UserError(f"{run.path}: completed: the file reports no requests to replay")
    if n > MAX_REQUESTS:
        raise UserError(f"{run.path}: completed: {n:,} requests (with the failed ones), more "
                        f"than the {MAX_REQUESTS:,} a replay runs")
    lens = []
    for key in ("mean_input_len", "mean_output_len"):
        value = s.get(key)
        if value is None or not math.isfinite(value):
            raise UserError(f"{run.path}: {key.removeprefix('mean_')}: the file has no "
                            "per-request records and no mean length to replay")
        mean_tokens(value, Where(run.path), key.removeprefix("mean_"))
        lens.append(max(int(round(value)), 1))
    note = (f"no per-request records: {n} requests replayed with the file's mean lengths "
            f"({lens[0]} prompt, {lens[1]} output tokens)")
    return np.full(n, lens[0], dtype=np.int64), np.full(n, lens[1], dtype=np.int64), [note]


# ----------------------------------------------------------------------------- arrivals
def _resolve_mode(run: BenchRun, mode: str) -> str:
    """``closed``, ``recorded`` or ``schedule`` for ``mode`` in :data:`MODES`."""
    if mode not in MODES:
        raise ValueError(f"arrivals must be one of {MODES}, got {mode!r}")
    if mode == "recorded":
        if run.send_s is None:
            raise UserError(f"{run.path}: send times: the file records none (arrivals="
                            "'recorded')")
        return "recorded"
    if mode == "auto" and run.load.kind == "concurrency":
        return "closed"
    if mode == "auto" and run.send_s is not None:
        return "recorded"
    return "closed" if run.load.kind == "concurrency" else "schedule"


def arrival_notes(run: BenchRun, mode: str = "auto") -> list[str]:
    """What the replay's arrivals assume (for the run's warnings)."""
    how = _resolve_mode(run, mode)
    load = run.load
    if how == "closed":
        clients = "one client" if load.concurrency == 1 else f"{load.concurrency} clients"
        return [f"closed loop of {clients}, each sending its next request when its previous "
                "one finishes (zero think time)"]
    if how == "recorded":
        return []
    notes = ["no recorded send times: arrivals are the client's schedule drawn from a seed, "
             "the same law as the run's sends but not the same times"]
    if load.kind == "rate" and load.concurrency is not None:
        notes.append(f"a due request waits while {load.concurrency} are in flight (the "
                     "client's concurrency cap), as the client held it back")
    return notes


def _ramp_up(run: BenchRun, n: int, seed: int) -> np.ndarray:
    """vLLM ``get_request`` with ``--ramp-up-strategy``: the rate moves from start to end
    over the requests, gaps ``Gamma(B, 1 / (r_i B))``, no rescaling."""
    strategy, lo, hi = run.load.ramp_up
    progress = np.arange(n) / max(n - 1, 1)
    rates = lo + (hi - lo) * progress if strategy == "linear" else lo * (hi / lo) ** progress
    b = run.load.burstiness
    if math.isinf(b):
        gaps = 1.0 / rates
    else:
        gaps = np.random.default_rng(seed).standard_gamma(b, n) / (rates * b)
    return np.cumsum(gaps)


def _rate_process(run: BenchRun):
    load = run.load
    if run.tool == "vllm":
        return VllmBenchArrivals(load.request_rate, load.burstiness)
    if load.arrival == "constant" or math.isinf(load.burstiness):
        return ConstantArrivals(load.request_rate)
    if load.arrival == "gamma" and load.burstiness != 1.0:
        return GammaArrivals(load.request_rate, 1.0 / math.sqrt(load.burstiness))
    return PoissonArrivals(load.request_rate)


def _schedule(run: BenchRun, n: int, seed: int) -> tuple[np.ndarray, dict]:
    """The client's schedule: send times (NaN where the simulator sends: later stages) and
    the :class:`Requests` fields that hold sends back (stages that drain, a concurrency
    cap)."""
    load = run.load
    if load.kind == "stages":
        arrivals = InferencePerfArrivals(load.arrival, load.stages, load.stage_interval_s)
        if arrivals.num_requests != n:
            raise UserError(f"{run.path}: stages: they send {arrivals.num_requests} requests "
                            f"but the run has {n}; the schedule cannot be rebuilt")
        arrival, plan = arrivals.staged(n, seed)
        return arrival, {"stages": plan}
    cap = {"max_concurrency": load.concurrency} if load.kind == "rate" and \
        load.concurrency is not None else {}
    return _send_times(run, n, seed), cap


def _send_times(run: BenchRun, n: int, seed: int) -> np.ndarray:
    load = run.load
    if load.ramp_up is not None:
        return _ramp_up(run, n, seed)
    if load.arrival == "trace" or not load.request_rate > 0:
        raise UserError(f"{run.path}: request_rate: the file records neither the rate nor "
                        "the send times; nothing to rebuild the schedule from")
    if math.isinf(load.request_rate):
        return np.zeros(n)
    if run.tool != "vllm" and load.arrival not in ("poisson", "gamma", "constant"):
        raise UserError(f"{run.path}: arrival: unknown law {load.arrival!r}")
    return _rate_process(run).sample(n, seed)


# ----------------------------------------------------------------------------- public
def requests_for(run: BenchRun, seed: int = 0, *, arrivals: str = "auto") -> Requests:
    """The simulator's requests for ``run`` (module docstring).

    Parameters
    ----------
    run : BenchRun
        A run read by :func:`serveplan.runs.read_run`.
    seed : int
        Seed of a schedule the file does not record (vLLM's gamma gaps, ...).
    arrivals : {"auto", "recorded", "schedule"}
        Where arrival times come from (module docstring).

    Raises
    ------
    UserError
        Naming the file and what is missing when the workload cannot be rebuilt.
    """
    prompt, output, _ = replay_lengths(run)
    n = len(prompt)
    how = _resolve_mode(run, arrivals)
    if how == "closed":
        clients = ClosedLoop(run.load.concurrency, 0.0, CLIENT_SEND_JITTER_S)
        return Requests(arrival_s=clients.sample(n), prompt_len=prompt, output_len=output,
                        concurrency=run.load.concurrency,
                        client_delay_s=clients.client_delays(n, seed))
    if how == "recorded":  # (sends as they happened: after any cap or stage drain)
        return Requests(arrival_s=run.send_s - run.send_s.min() if n else run.send_s,
                        prompt_len=prompt, output_len=output)
    arrival, held_back = _schedule(run, n, seed)
    return Requests(arrival_s=arrival, prompt_len=prompt, output_len=output, **held_back)


def replay_warnings(run: BenchRun) -> tuple[str, ...]:
    """What :func:`requests_for` (default arguments) assumes about ``run``; empty when it
    cannot be replayed at all (:func:`requests_for` then names the problem)."""
    try:
        return tuple(replay_lengths(run)[2] + arrival_notes(run))
    except UserError:
        return ()


def with_replay_warnings(run: BenchRun) -> BenchRun:
    """``run`` with :func:`replay_warnings` appended to its warnings."""
    return run.with_warnings(*replay_warnings(run))


__all__ = ["MODES", "arrival_notes", "replay_lengths", "replay_warnings", "requests_for",
           "with_replay_warnings"]
