"""serveplan against a real benchmark run: replay the run's workload, compare the metrics.

A run read by :mod:`serveplan.runs` (``vllm bench serve --save-result --save-detailed``,
aiperf, inference-perf) is replayed on a resolved deployment -- the same requests, lengths
and send schedule (:func:`serveplan.runs.workload.requests_for`) -- and both sides are
reduced with the same definitions, those of ``vllm bench serve``:

* TTFT, E2E per successful request; TPOT = (E2E - TTFT) / (output tokens - 1) over the
  successful requests with more than one output token; ITL = every gap between two
  consecutive tokens of a request, all requests pooled;
* mean, P50, P90, P99 of each; request and output-token throughput over the run's
  duration (from the benchmark's start, time 0 of the send schedule, to its last response).

The simulator does not record each token's time. A predicted request's ITLs are read
from its instance's step series (a decode pool's instance for a disaggregated run): its
tokens after the first are emitted at the ends of the last ``output tokens - 1`` steps of
that instance up to its finish (a request decodes in every step from its admission or
join to its finish; a preemption's stall shows as one long gap), each delayed as its last
token is (the front end's output time: the last token reaches the client at finish).
Where there are fewer such steps (multi-step bursts, a decimated step series), the
request's gaps are taken as equal (its TPOT) and the count of such requests is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from serveplan.runs.model import BenchRun, Load, run_from_arrays, vllm_tpot
from serveplan.runs.workload import requests_for

LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
RATES = ("request_throughput", "output_throughput")
COUNTS = ("completed", "failed")
RECORD_STEPS = 1 << 18
"""Step series capacity of a replay (a longer run is decimated: ITLs become equal gaps)."""


@dataclass(frozen=True)
class Latencies:
    """One side of a comparison, per request, in seconds (send order)."""

    success: np.ndarray  # bool[n]
    output_len: np.ndarray  # int64[n]
    ttft: np.ndarray  # float64[n], NaN where failed
    e2e: np.ndarray
    itl: np.ndarray  # float64[total], every gap of every successful request
    itl_offsets: np.ndarray  # int64[n + 1]
    duration_s: float

    @property
    def tpot(self) -> np.ndarray:
        """vLLM's per-request TPOT (NaN where failed or a single output token)."""
        return vllm_tpot(self.success, self.output_len, self.ttft, self.e2e)


def _stats_of(x: np.ndarray, name: str, out: dict) -> None:
    x = x[np.isfinite(x)]
    out[f"mean_{name}_s"] = float(x.mean()) if x.size else float("nan")
    for p in (50, 90, 99):
        out[f"p{p}_{name}_s"] = float(np.percentile(x, p)) if x.size else float("nan")


def latency_stats(lat: Latencies) -> dict[str, float]:
    """``mean_ttft_s``, ``p99_itl_s``, ..., throughputs and counts of one side."""
    out: dict[str, float] = {}
    ok = lat.success
    for name, values in (("ttft", np.where(ok, lat.ttft, np.nan)), ("tpot", lat.tpot),
                         ("itl", lat.itl), ("e2e", np.where(ok, lat.e2e, np.nan))):
        _stats_of(values, name, out)
    dur = lat.duration_s
    out["request_throughput"] = float(ok.sum() / dur) if dur > 0 else float("nan")
    out["output_throughput"] = float(lat.output_len[ok].sum() / dur) if dur > 0 else float("nan")
    out["completed"], out["failed"] = float(ok.sum()), float((~ok).sum())
    return out


def measured_latencies(run: BenchRun) -> Latencies:
    """The run's own per-request figures (it must have them: ``run.has_requests``)."""
    ok = np.asarray(run.success, dtype=bool)
    e2e = np.asarray(run.e2e_s, dtype=float)
    if run.send_s is not None:  # first send -> last response, as the replay measures it
        last = np.where(ok, run.send_s + e2e, np.nan)
        duration = float(np.nanmax(last) - run.send_s.min()) if ok.any() else 0.0
    else:  # the benchmark's own clock: its start is time 0 of the send schedule
        duration = float(run.summary.get("duration_s", np.nan))
    if run.itl_s is None:  # the tool did not record the gaps
        itl, offsets = np.empty(0), np.zeros(run.n + 1, dtype=np.int64)
    else:
        offsets = run.itl_offsets
        itl = run.itl_s[np.repeat(ok, np.diff(offsets))]
    return Latencies(ok, np.asarray(run.output_len, dtype=np.int64),
                     np.asarray(run.ttft_s, dtype=float), e2e, itl, offsets, duration)


# ----------------------------------------------------------------------------- prediction
def _step_ends(ds: xr.Dataset) -> dict[int, np.ndarray]:
    """Sorted step end times of each instance (empty when the series is decimated)."""
    if int(ds.attrs.get("step_stride", 1)) != 1:
        return {}
    ends = ds["step_start_s"].values + ds["step_time_s"].values
    inst = ds["step_instance"].values
    return {int(k): np.sort(ends[inst == k]) for k in np.unique(inst)}


def _decode_instance(ds: xr.Dataset) -> np.ndarray:
    """The instance (index on ``instance``) each request decoded on; -1: none."""
    routed = ds["routed_to"].values.astype(np.int64)
    if ds.attrs.get("architecture") != "pd":
        return routed
    decode = np.flatnonzero(ds["role"].values == "decode")  # routed_to counts these
    return np.where(routed >= 0, decode[np.clip(routed, 0, None)], -1)


def request_itls(ds: xr.Dataset) -> tuple[np.ndarray, np.ndarray, int]:
    """Each request's predicted gaps (module docstring): values, offsets, and how many
    requests got equal gaps because the step series could not place their tokens."""
    from serveplan.sim.clients import client_outcome

    ok = client_outcome(ds).completed
    n_out = ds["output_len"].values.astype(np.int64)
    first, finish = ds["first_token_s"].values, ds["finish_s"].values
    inst, tpot = _decode_instance(ds), ds["tpot_s"].values
    ends = _step_ends(ds)
    gaps, counts, equal = [], np.zeros(len(n_out), dtype=np.int64), 0
    for i in np.flatnonzero(ok & (n_out > 1)):
        e = ends.get(int(inst[i]), np.empty(0))
        lo, hi = np.searchsorted(e, first[i], "right"), np.searchsorted(e, finish[i], "right")
        if hi - lo >= n_out[i] - 1:  # its last n - 1 steps (a decode pool's join, a stall)
            emitted = e[hi - n_out[i] + 1:hi]
            # the front end's output delay: the last token reaches the client at finish
            gaps.append(np.diff(emitted + (finish[i] - emitted[-1]), prepend=first[i]))
        else:
            gaps.append(np.full(n_out[i] - 1, tpot[i]))
            equal += 1
        counts[i] = n_out[i] - 1
    values = np.concatenate(gaps) if gaps else np.empty(0)
    return values, np.concatenate([[0], np.cumsum(counts)]), equal


def simulated_latencies(ds: xr.Dataset, *, from_first_send: bool = False
                        ) -> tuple[Latencies, int]:
    """The replay's side of the comparison, and the count of equal-gap requests. The
    duration runs from time 0 of the send schedule (``from_first_send``: from the first
    send) to the last response."""
    from serveplan.sim.clients import client_outcome

    ok = client_outcome(ds).completed
    itl, offsets, equal = request_itls(ds)
    finish = ds["finish_s"].values
    start = float(np.nanmin(ds["arrival_s"].values)) if from_first_send else 0.0
    duration = float(np.nanmax(finish)) - start if np.isfinite(finish).any() else 0.0
    return Latencies(ok, ds["output_len"].values.astype(np.int64),
                     np.where(ok, ds["ttft_s"].values, np.nan),
                     np.where(ok, ds["e2e_s"].values, np.nan), itl, offsets, duration), equal


def replay(run: BenchRun, resolved, seed: int = 0) -> xr.Dataset:
    """The run's workload simulated on ``resolved`` (a Dataset, steps recorded for ITLs)."""
    from serveplan.sim.clients import client_attrs
    from serveplan.sim.results import to_dataset
    from serveplan.simulation import run_resolved

    requests = requests_for(run, seed)
    result = run_resolved(resolved, requests, record_steps=RECORD_STEPS)
    return to_dataset(result, attrs=client_attrs(requests))


# ----------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Comparison:
    """Measured and predicted metrics of one run (``latency_stats`` keys), per-request
    pairs where the run has per-request data, and what the reader should know."""

    measured: dict
    predicted: dict
    pairs: xr.Dataset | None
    notes: tuple[str, ...]

    def error(self, key: str) -> float:
        """Predicted / measured - 1 of one metric (NaN where undefined)."""
        m, p = self.measured.get(key, np.nan), self.predicted.get(key, np.nan)
        return float(p / m - 1.0) if m and np.isfinite(m) and np.isfinite(p) else float("nan")

    def as_dict(self) -> dict:
        keys = [k for k in self.measured if k in self.predicted]
        return {"metrics": {k: {"measured": _num(self.measured[k]),
                                "predicted": _num(self.predicted[k]),
                                "error": _num(self.error(k))} for k in keys},
                "notes": list(self.notes)}


def as_bench_run(ds: xr.Dataset, load: Load, *, model: str | None = None,
                 path: str = "serveplan") -> BenchRun:
    """A simulation as a benchmark run (send times recorded), e.g. to write it in vLLM's
    format (:func:`serveplan.runs.vllm.write_vllm`)."""
    lat, _ = simulated_latencies(ds)
    off = lat.itl_offsets
    itls = [lat.itl[off[i]:off[i + 1]] for i in range(len(lat.success))]
    return run_from_arrays(input_len=ds["prompt_len"].values, output_len=lat.output_len,
                           ttft_s=lat.ttft, e2e_s=lat.e2e, success=lat.success, itls=itls,
                           send_s=ds["arrival_s"].values, load=load, model=model, path=path,
                           summary={"duration_s": lat.duration_s})


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def summary_stats(run: BenchRun) -> dict[str, float]:
    """The measured side from the file's summary alone (runs without per-request data)."""
    keys = [f"{s}_{m}_s" for m in LATENCIES for s in STATS] + list(RATES) + list(COUNTS)
    return {k: float(run.summary[k]) for k in keys if k in run.summary}


def compare_run(run: BenchRun, resolved, seed: int = 0) -> Comparison:
    """Replay ``run`` on ``resolved`` and compare (module docstring)."""
    ds = replay(run, resolved, seed)
    pred, equal = simulated_latencies(ds, from_first_send=run.send_s is not None)
    notes = list(run.warnings) + length_notes(ds, min(p.params.max_model_len
                                                      for p in resolved.pools))
    if equal:
        notes.append(f"{equal} of {int(pred.success.sum())} predicted requests have equal "
                     "inter-token gaps (the step series could not place their tokens)")
    if run.has_requests:
        meas = measured_latencies(run)
        measured, pairs = latency_stats(meas), pairs_dataset(run, meas, pred)
    else:
        measured, pairs = summary_stats(run), None
        notes.append(f"no per-request records: the measured figures are the file's summary "
                     f"({run.detail_hint} for per-request ones)")
    predicted = latency_stats(pred)
    server_m, server_p = server_counters(run, ds)
    return Comparison({**measured, **server_m}, {**predicted, **server_p}, pairs, tuple(notes))


def length_notes(ds: xr.Dataset, max_model_len: int) -> list[str]:
    """What the replay ran otherwise than the run did because of the deployment's
    ``max_model_len``: prompts the engine refuses (counted as failed) and outputs it stops
    at that many tokens in all. A run that served them had a larger limit."""
    from serveplan.sim.state import FINISHED_IGNORED, FINISHED_LENGTH_CAPPED

    status = ds["status"].values
    n = len(status)
    refused = int(np.sum(status == FINISHED_IGNORED))
    capped = int(np.sum(status == FINISHED_LENGTH_CAPPED))
    limit = f"the deployment's max_model_len ({max_model_len:,} tokens)"
    hint = "--max-model-len sets the limit the run had"
    notes = []
    if refused:
        notes.append(f"{refused} of {n} prompts reach {limit}: the replay refuses them, as the "
                     f"engine would, and counts them as failed ({hint})")
    if capped:
        notes.append(f"{capped} of {n} requests ask for more tokens than {limit} holds: the replay "
                     f"stops their outputs there, as the engine would ({hint})")
    return notes


def server_counters(run: BenchRun, ds: xr.Dataset) -> tuple[dict, dict]:
    """Prefix-cache hits and preemptions, measured (where the file has them) and predicted:
    ``prefix_hit_tokens`` (prompt tokens served from the cache, completed requests),
    ``prefix_cache_hit_percent`` (of the prompt tokens), ``num_preemptions``."""
    from serveplan.sim.clients import client_outcome

    ok = client_outcome(ds).completed
    hits = float(ds["prefix_hit_tokens"].values[ok].sum())
    prompt = float(ds["prompt_len"].values[ok].sum())
    predicted = {"prefix_hit_tokens": hits,
                 "prefix_cache_hit_percent": 100.0 * hits / prompt if prompt else np.nan,
                 "num_preemptions": float(ds["num_preemptions"].values.sum())}
    measured = {}
    cached = run.extras.get("cached_prompt_tokens")
    if cached is not None and run.success is not None:
        known = np.asarray(cached)[run.success]
        measured["prefix_hit_tokens"] = float(known[known >= 0].sum())
    if "prefix_cache_hit_percent" in run.extras:
        measured["prefix_cache_hit_percent"] = float(run.extras["prefix_cache_hit_percent"])
    if "num_preemptions_total" in run.extras:
        measured["num_preemptions"] = float(run.extras["num_preemptions_total"])
    return measured, {k: v for k, v in predicted.items() if k in measured}


def pairs_dataset(run: BenchRun, meas: Latencies, pred: Latencies) -> xr.Dataset:
    """Per-request measured and predicted figures side by side (NetCDF-ready)."""
    s = {"units": "s"}
    dim = ("request",)
    data = {"input_len": (dim, np.asarray(run.input_len), {"units": "tokens"}),
            "output_len": (dim, meas.output_len, {"units": "tokens"}),
            "predicted_output_len": (dim, pred.output_len, {"units": "tokens"})}
    for side, lat in (("measured", meas), ("predicted", pred)):
        data[f"{side}_success"] = (dim, lat.success.astype(np.int8))
        data[f"{side}_ttft_s"] = (dim, np.where(lat.success, lat.ttft, np.nan), s)
        data[f"{side}_tpot_s"] = (dim, lat.tpot, s)
        data[f"{side}_e2e_s"] = (dim, np.where(lat.success, lat.e2e, np.nan), s)
    data["measured_itl_s"] = (("measured_gap",), meas.itl, s)
    data["predicted_itl_s"] = (("predicted_gap",), pred.itl, s)
    ds = xr.Dataset(data, coords={"request": np.arange(run.n)})
    ds.attrs.update({"source": str(run.path), "tool": run.tool})
    return ds


__all__ = ["COUNTS", "LATENCIES", "RATES", "STATS", "Comparison", "Latencies", "as_bench_run", "compare_run",
           "latency_stats", "measured_latencies", "server_counters", "pairs_dataset", "replay", "request_itls",
           "simulated_latencies", "summary_stats"]
