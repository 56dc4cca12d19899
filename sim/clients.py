"""What benchmark clients do, and the requests a workload config asks for.

A real benchmark is a client program with habits; the simulator reproduces these:

=====================================  ==================================================
client behaviour                       here
=====================================  ==================================================
aiperf / genai-perf ``--concurrency``   ``kind: closed-loop`` (:class:`.ClosedLoop`): each
                                       client sends its next request when its previous
                                       one finishes
aiperf ``--warmup-request-count``       ``warmup_request_count``: the first requests run
                                       and are left out of every statistic
think time between a client's           ``think_time_s`` + exponential
requests                               ``think_time_jitter_s`` (``Requests.client_delay_s``)
``vllm bench serve --request-rate``     ``kind: vllm-bench-serve`` (:class:`.VllmBenchArrivals`)
``--burstiness``, ``--max-concurrency``
``--random-range-ratio``                ``random_range_ratio`` (:func:`vllm_range`)
inference-perf ``load.type``            ``kind: inference-perf`` (:class:`.InferencePerfArrivals`)
``constant`` / ``poisson``, ``stages``
``--random-prefix-len``;                ``prefix: {num_groups, prefix_len}`` (aliases
aiperf ``--num-prefix-prompts``,        ``num_prefix_prompts``, ``prefix_prompt_length``,
``--prefix-prompt-length``              ``random_prefix_len``)
aiperf ``--num-dataset-entries``,       ``num_dataset_entries``, ``dataset_sampling_strategy``
``--dataset-sampling-strategy``         (:class:`.PromptPool`)
a client timeout (aiperf                ``request_timeout_s``: a request slower end to end
``--request-timeout-seconds``,          counts as failed
inference-perf ``load.request_timeout``)
``--dataset-name sharegpt``             ``isl: {dist: sharegpt}``, ``osl: {dist: sharegpt}``
                                       (:class:`.ShareGPTPairs`)
``sglang.bench_serving --dataset-name   the same with ``sampler: sglang``;
sharegpt``, ``--sharegpt-context-len``  ``sharegpt_context_len``
=====================================  ==================================================

Statistics (:func:`client_outcome`, read by :mod:`.summary`): the Dataset's attributes
``warmup_requests`` and ``client_timeout_s`` (from :func:`client_attrs`) say which requests are
warm-up (the leading ones) and which timed out. A timed-out request counts as failed and its
latencies are left out, as a client that gave up never sees them; the simulated server still
serves it to its last token, as a server that does not notice the disconnect would (vLLM aborts
a request whose client disconnects, freeing its KV blocks earlier than simulated here).

Think time: ``Requests.client_delay_s`` holds each request's delay; the compiled loop sends
request ``k`` at ``finish(k - concurrency) + client_delay_s[k]`` (``lifecycle.release_next``
and a heap of pending sends). Even a small jitter matters: with fixed lengths and no jitter a
closed loop is deterministic and can settle into a pattern that real clients, whose sends
wander by a millisecond or so, do not keep (``docs/runtime.md``).

A timed-out closed-loop client sends its next request at the timeout, not at the finish
(a pending send of the loop). ``vllm bench serve --max-concurrency`` with a finite rate
holds a due request back while that many are in flight and sends it when one ends
(``Requests.max_concurrency``); its latencies count from that send, as vLLM's do.
inference-perf's stages drain: a stage's requests are sent at their offsets from the last
response of the previous stage (``Requests.stages``, :class:`.StagePlan`).

Warm-up is approximated: aiperf waits for every warm-up response before its profiling phase
starts; here the profiling requests follow the warm-up ones without that barrier.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import replace

import numpy as np
import xarray as xr

from . import traces
from . import workload as W
from .session_workloads import build_session_requests
from .state import FINISHED_IGNORED, PREEMPTED

WARMUP_ATTR = "warmup_requests"
TIMEOUT_ATTR = "client_timeout_s"

Outcome = namedtuple("Outcome", ["measured", "completed", "failed", "timed_out"])
"""Per-request masks: measured (not warm-up); completed (measured, finished, not rejected, not
timed out); failed (measured and rejected or timed out); timed out."""


CLIENT_SEND_JITTER_S = 1e-3
"""Mean of the exponential delay between a closed-loop client receiving a response's last
token and its next request leaving it (aiperf returns the credit to its timing manager,
which hands a new one to a worker). Its size hardly matters (0.3-3 ms give the same medians
within a few per cent, ``docs/runtime.md``); its existence does: with fixed lengths and no
jitter the closed loop is deterministic and keeps whatever pattern its first round set,
where real clients drift. Replays of measured closed-loop runs (:mod:`serveplan.runs`) and
the end-to-end rows (:mod:`serveplan.e2e`) send with it."""


# ----------------------------------------------------------------------------- statistics
def client_attrs(requests: W.Requests) -> dict:
    """Dataset attributes that tell the statistics about warm-up and the client timeout."""
    out = {WARMUP_ATTR: int(requests.warmup)}
    if requests.timeout_s is not None:
        out[TIMEOUT_ATTR] = float(requests.timeout_s)
    return out


def client_outcome(ds: xr.Dataset) -> Outcome:
    """Which requests count, completed or failed (module docstring)."""
    status = ds["status"].values
    n = status.shape[0]
    measured = np.arange(n) >= int(ds.attrs.get(WARMUP_ATTR, 0))
    finished = (status > PREEMPTED) & (status != FINISHED_IGNORED)
    timeout = ds.attrs.get(TIMEOUT_ATTR)
    timed_out = np.zeros(n, dtype=bool)
    if timeout is not None:
        timed_out = finished & (ds["e2e_s"].values > float(timeout))
    return Outcome(measured, measured & finished & ~timed_out,
                   measured & ((status == FINISHED_IGNORED) | timed_out), timed_out)


# ----------------------------------------------------------------------------- lengths
def length_dist(spec) -> W.LengthDist:
    """The sampler for a length spec of :mod:`serveplan.config` (an int is a fixed length)."""
    if isinstance(spec, int):
        return W.Fixed(spec)
    dist = spec.dist
    if dist == "fixed":
        return W.Fixed(spec.value)
    if dist == "uniform":
        return W.Uniform(spec.low, spec.high)
    if dist == "lognormal":
        if spec.mean is not None:
            return W.LogNormal.from_mean(spec.mean, spec.sigma, spec.max)
        return W.LogNormal(spec.median, spec.sigma, spec.max)
    if dist == "trace":
        tr = traces.read_trace(spec.path, skip_bad_lines=spec.skip_bad_lines)
        return tr.prompt_dist() if spec.column == "prompt" else tr.output_dist()
    if dist == "sharegpt":
        return W.ShareGPTLength(spec.column, sampler=spec.sampler,
                                context_len=spec.sharegpt_context_len)
    raise TypeError(f"unknown length spec {spec!r}")


def vllm_range(length: int, ratio: float) -> W.Uniform:
    """``vllm bench serve --random-range-ratio r`` around ``length`` L: integers uniform on
    ``[floor(L (1 - r)), ceil(L (1 + r))]``, at least 1 (``RandomDataset.get_sampling_params``;
    the tokenizer's special tokens, which vLLM takes off the prompt first, are not)."""
    return W.Uniform(max(math.floor(length * (1 - ratio)), 1), math.ceil(length * (1 + ratio)))


def _draws(w, m: int, seed: int) -> tuple:
    """Prompt and output lengths (distributions, or arrays of ``m``: ShareGPT pairs)."""
    if getattr(w, "random_range_ratio", 0.0) > 0:
        return vllm_range(w.isl, w.random_range_ratio), vllm_range(w.osl, w.random_range_ratio)
    prompt, output = length_dist(w.isl), length_dist(w.osl)
    if (isinstance(prompt, W.ShareGPTLength) and isinstance(output, W.ShareGPTLength)
            and (prompt.column, output.column) == ("prompt", "output")):
        if (prompt.sampler, prompt.context_len) != (output.sampler, output.context_len):
            raise ValueError("workload.isl and workload.osl sample ShareGPT pairs: give both "
                             "the same sampler and sharegpt_context_len")
        return W.sharegpt_pairs().sample(m, seed, prompt.sampler, prompt.context_len)
    return prompt, output


def prior_outputs(spec, n: int, seed: int) -> np.ndarray:
    """``n`` output lengths from the workload's output-length law with ``seed`` (a trace:
    ``n`` of its output lengths, resampled): a router's prior knowledge of the length law,
    not of the run's requests."""
    if spec.kind == "trace":
        out = np.asarray(_trace_requests(spec, seed).output_len)
        return out[np.random.default_rng(seed).integers(0, out.size, n)]
    output = _draws(spec, n, seed)[1]
    return np.asarray(output if isinstance(output, np.ndarray) else output.sample(n, seed))


# ----------------------------------------------------------------------------- arrivals
def _vllm_bench(w):
    """``vllm bench serve``: its schedule, held back by ``--max-concurrency`` (a closed loop
    when every request is due at once)."""
    if w.max_concurrency is not None and not np.isfinite(w.rate):
        return W.ClosedLoop(w.max_concurrency)
    return W.VllmBenchArrivals(w.rate, w.burstiness, w.max_concurrency)


def _closed_loop(w):
    return W.ClosedLoop(w.concurrency, w.think_time_s, w.think_time_jitter_s)


_ARRIVALS = {
    "poisson": lambda w: W.PoissonArrivals(w.rate),
    "gamma": lambda w: W.GammaArrivals(w.rate, w.cv),
    "constant": lambda w: W.ConstantArrivals(w.rate),
    "closed-loop": _closed_loop,
    "vllm-bench-serve": _vllm_bench,
    "inference-perf": lambda w: W.InferencePerfArrivals(
        w.type, tuple((s.rate, s.duration) for s in w.stages), w.interval),
}


# ----------------------------------------------------------------------------- requests
def build_requests(spec, seed: int = 0, *, block_size: int = 16) -> W.Requests:
    """Draw (or read) the requests of a workload config (:mod:`serveplan.config`).

    Synthetic shared prefixes and prompt pools are hashed at ``block_size`` (the engine's).
    """
    if spec.kind == "trace":
        return _trace_requests(spec, seed)
    if spec.kind == "sessions":
        return build_session_requests(spec, seed, block_size=block_size)
    if spec.kind not in _ARRIVALS:
        raise TypeError(f"unknown workload kind {spec.kind!r}")
    arrivals = _ARRIVALS[spec.kind](spec)
    n = arrivals.num_requests if spec.kind == "inference-perf" else spec.num_requests
    _check_warmup(spec, n)
    prefix = pool = None
    if spec.prefix is not None:
        prefix = W.PrefixSharing(spec.prefix.num_groups, spec.prefix.prefix_len, block_size)
    if spec.num_dataset_entries is not None:
        pool = W.PromptPool(spec.num_dataset_entries, spec.dataset_sampling_strategy, block_size)
    prompt, output = _draws(spec, n if pool is None else pool.num_dataset_entries, seed)
    return W.generate_requests(n, arrivals, prompt, output, seed, prefix=prefix, pool=pool,
                               warmup=spec.warmup_request_count,
                               timeout_s=spec.request_timeout_s)


def _check_warmup(spec, n: int) -> None:
    if spec.warmup_request_count >= n:
        raise ValueError(f"workload.warmup_request_count = {spec.warmup_request_count} leaves "
                         f"none of the {n} requests to measure")


def _trace_requests(w, seed: int) -> W.Requests:
    tr = traces.read_trace(w.path, limit=w.num_requests, skip_bad_lines=w.skip_bad_lines)
    if len(tr) == 0:
        raise ValueError(f"{w.path}: no requests read")
    n = w.num_requests or len(tr)
    if n > len(tr) and not w.repeat:
        raise ValueError(f"workload.num_requests = {n} but {w.path} has only {len(tr)} "
                         "requests; set workload.repeat: true to replay it again after its end")
    _check_warmup(w, n)
    if w.arrival == "trace":
        if tr.arrival_s is None:
            raise ValueError(f"{w.path} has no timestamps; set workload.arrival to poisson, "
                             "gamma or constant and give a rate")
        req = tr.to_requests(time_scale=w.time_scale, rate=w.rate)
        req = W.tile_requests(req, n) if n > len(req) else req
    else:
        req = tr.to_requests(arrival_s=np.zeros(len(tr)))
        req = W.tile_requests(req, n, gap_s=0.0) if n > len(req) else req.take(slice(0, n))
        req = req.with_arrivals(_ARRIVALS[w.arrival](w).sample(n, seed))
    return replace(req, warmup=w.warmup_request_count, timeout_s=w.request_timeout_s)


__all__ = ["CLIENT_SEND_JITTER_S", "TIMEOUT_ATTR", "WARMUP_ATTR", "Outcome", "build_requests", "client_attrs",
           "client_outcome", "length_dist"]
