"""Turn an engine run into an ``xarray.Dataset`` and a ``vllm bench serve``-style summary.

Per-request metrics (DESIGN.md conventions, seconds):

* TTFT = first token time - arrival; E2E = finish - arrival;
* TPOT = (E2E - TTFT) / (output tokens - 1), NaN for one-token outputs;
* queueing delay = first scheduled - arrival;
* ITL: the largest gap between consecutive tokens of a request (``itl_max_s``); the mean ITL
  over all gaps of all requests is ``sum(finish - first token) / sum(output - 1)``, exact.
  Per-token times are not stored, so ITL percentiles over tokens are not available.

Percentiles are over completed requests (rejected ones -- prompt too long -- are excluded
and counted as failed).
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from .engine import (
    EngineResult,
    recorded_steps,
)
from .state import (
    A_BATCH_TIME,
    A_BUSY_TIME,
    A_KV_TIME,
    A_PREFILL_TOKENS,
    A_TOKENS,
    FINISHED_IGNORED,
    I_STEPS,
    PREEMPTED,
    RequestStatus,
)

PERCENTILES = (50, 90, 99)


def _request_vars(res: EngineResult) -> dict:
    r = res.reqs
    arrival = r.arrival
    n_out = r.n_out.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out > 1, (r.t_finish - r.t_first) / (n_out - 1), np.nan)
    ttft = r.t_first - arrival
    dim = ("request",)
    status_attrs = {
        "flag_values": np.array([int(s) for s in RequestStatus], dtype=np.int8),
        "flag_meanings": " ".join(s.name.lower() for s in RequestStatus),
        "description": f"ordered status code; > {int(PREEMPTED)} means finished",
    }
    return {
        "arrival_s": (dim, arrival, {"units": "s"}),
        "prompt_len": (dim, r.prompt),
        "output_len": (dim, r.n_out, {"description": "output tokens produced"}),
        "output_len_requested": (dim, res.output_requested),
        "routed_to": (dim, r.inst, {"description": "instance index (-1: rejected)"}),
        "status": (dim, r.status, status_attrs),
        "first_scheduled_s": (dim, r.t_sched, {"units": "s"}),
        "first_token_s": (dim, r.t_first, {"units": "s"}),
        "finish_s": (dim, r.t_finish, {"units": "s"}),
        "ttft_s": (dim, ttft, {"units": "s", "long_name": "time to first token"}),
        "tpot_s": (dim, tpot, {"units": "s", "long_name": "time per output token"}),
        "e2e_s": (dim, r.t_finish - arrival, {"units": "s", "long_name": "end-to-end latency"}),
        "queue_s": (dim, r.t_sched - arrival, {"units": "s", "long_name": "queueing delay"}),
        "itl_max_s": (dim, r.itl_max, {"units": "s", "long_name": "largest inter-token gap"}),
        "num_preemptions": (dim, r.n_preempt),
        "prefix_hit_tokens": (dim, np.maximum(r.hit, 0),
                              {"description": "prompt tokens served from the prefix cache "
                                              "at first admission"}),
    }


def _step_vars(res: EngineResult) -> dict:
    s = recorded_steps(res.rec)
    blocks = res.params.num_gpu_blocks
    dim = ("step",)
    return {
        "step_start_s": (dim, s["t"], {"units": "s"}),
        "step_time_s": (dim, s["dt"], {"units": "s"}),
        "step_instance": (dim, s["inst"]),
        "batch_size": (dim, s["batch"], {"description": "requests scheduled in the step"}),
        "num_tokens": (dim, s["tokens"]),
        "num_prefill_tokens": (dim, s["prefill_tokens"],
                               {"description": "tokens of requests not decoding"}),
        "kv_blocks_used": (dim, s["kv_used"]),
        "kv_usage": (dim, s["kv_used"] / blocks, {"description": "used / num_gpu_blocks"}),
        "num_waiting": (dim, s["waiting"]),
        "num_running": (dim, s["running"]),
    }


def _instance_vars(res: EngineResult) -> dict:
    acc = res.inst.acc
    busy = acc[:, A_BUSY_TIME]
    dim = ("instance",)
    with np.errstate(invalid="ignore", divide="ignore"):
        kv = acc[:, A_KV_TIME] / busy / res.params.num_gpu_blocks
        batch = acc[:, A_BATCH_TIME] / busy
    return {
        "busy_s": (dim, busy, {"units": "s"}),
        "num_steps": (dim, res.inst.ist[:, I_STEPS]),
        "mean_kv_usage": (dim, kv, {"description": "time-weighted over busy time"}),
        "mean_batch_size": (dim, batch, {"description": "time-weighted over busy time"}),
        "tokens_computed": (dim, acc[:, A_TOKENS]),
        "prefill_tokens_computed": (dim, acc[:, A_PREFILL_TOKENS]),
    }


def to_dataset(res: EngineResult, *, attrs: dict | None = None) -> xr.Dataset:
    """The run as a Dataset: ``request``, ``step`` and ``instance`` dims; ``attrs`` added."""
    stride = int(res.rec.meta[1])
    ds = xr.Dataset(
        {**_request_vars(res), **_step_vars(res), **_instance_vars(res)},
        coords={"request": np.arange(len(res.reqs.prompt)),
                "instance": np.arange(res.num_instances)},
    )
    ds.attrs.update({
        "total_steps": res.num_steps,
        "step_stride": stride,
        "step_note": f"every {stride}-th engine step is recorded" if stride > 1
        else "every engine step is recorded",
        "num_gpu_blocks": res.params.num_gpu_blocks,
    })
    if attrs:
        ds.attrs.update(attrs)
    return ds


def _pct(x: np.ndarray, prefix: str, out: dict, scale: float = 1e3, unit: str = "ms") -> None:
    x = x[np.isfinite(x)]
    out[f"mean_{prefix}_{unit}"] = float(x.mean() * scale) if x.size else float("nan")
    for p in PERCENTILES:
        name = "median" if p == 50 else f"p{p}"
        out[f"{name}_{prefix}_{unit}"] = (float(np.percentile(x, p) * scale) if x.size
                                          else float("nan"))


def summarize(ds: xr.Dataset, slo: dict | None = None) -> dict:
    """Summary metrics (``vllm bench serve`` names, milliseconds) of a simulation Dataset.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`to_dataset` (or read back from NetCDF).
    slo : dict, optional
        ``ttft_ms``, ``tpot_ms`` (either may be None), ``percentile`` (e.g. 90) and
        ``attainment`` (a fraction or None). Adds the SLO verdict: with ``attainment`` the
        fraction of requests meeting both goals must reach it (DistServe); otherwise the
        given percentile of each metric must be within its goal.
    """
    status = ds["status"].values
    done = (status > PREEMPTED) & (status != FINISHED_IGNORED)
    arrival = ds["arrival_s"].values
    finish = ds["finish_s"].values
    out_len = ds["output_len"].values[done]
    prompt = ds["prompt_len"].values[done]
    start = float(np.nanmin(arrival)) if arrival.size else 0.0
    duration = float(np.nanmax(finish[done]) - start) if done.any() else 0.0
    first = ds["first_token_s"].values[done]
    s: dict = {
        "completed": int(done.sum()),
        "failed": int((status == FINISHED_IGNORED).sum()),
        "duration_s": duration,
        "total_input_tokens": int(prompt.sum()),
        "total_output_tokens": int(out_len.sum()),
    }
    per_s = 1.0 / duration if duration > 0 else float("nan")
    s["request_throughput"] = s["completed"] * per_s
    s["output_throughput"] = s["total_output_tokens"] * per_s
    s["total_token_throughput"] = (s["total_input_tokens"] + s["total_output_tokens"]) * per_s
    for name, var in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s"),
                      ("queue", "queue_s"), ("max_itl", "itl_max_s")):
        _pct(ds[var].values[done], name, s)
    gaps = np.maximum(out_len - 1, 0).sum()
    s["mean_itl_ms"] = float((finish[done] - first).sum() / gaps * 1e3) if gaps else float("nan")
    s["num_preemptions"] = int(ds["num_preemptions"].values.sum())
    s["prefix_hit_rate"] = (float(ds["prefix_hit_tokens"].values[done].sum() / prompt.sum())
                            if prompt.sum() else 0.0)
    busy = ds["busy_s"].values
    s["mean_kv_usage"] = float(np.nansum(ds["mean_kv_usage"].values * busy) / busy.sum()) \
        if busy.sum() > 0 else 0.0
    s["max_kv_usage"] = float(ds["kv_usage"].values.max()) if ds.sizes.get("step") else 0.0
    s["mean_batch_size"] = float(np.nansum(ds["mean_batch_size"].values * busy) / busy.sum()) \
        if busy.sum() > 0 else 0.0
    s["total_steps"] = int(ds.attrs.get("total_steps", 0))
    if slo:
        s.update(slo_verdict(ds, done, slo))
    return s


def slo_verdict(ds: xr.Dataset, done: np.ndarray, slo: dict) -> dict:
    """Whether the run meets ``slo`` (see :func:`summarize`)."""
    ttft = ds["ttft_s"].values[done] * 1e3
    tpot = ds["tpot_s"].values[done] * 1e3
    goal_ttft, goal_tpot = slo.get("ttft_ms"), slo.get("tpot_ms")
    ok = np.ones(ttft.shape, dtype=bool)
    if goal_ttft is not None:
        ok &= ttft <= goal_ttft
    if goal_tpot is not None:
        ok &= ~(tpot > goal_tpot)  # NaN TPOT (1-token outputs) meets any TPOT goal
    out = {"slo_attainment": float(ok.mean()) if ok.size else float("nan")}
    if slo.get("attainment") is not None:
        out["slo_met"] = bool(ok.size and ok.mean() >= slo["attainment"])
        return out
    p = float(slo.get("percentile", 90))
    met = bool(ok.size)
    for name, x, goal in (("ttft", ttft, goal_ttft), ("tpot", tpot, goal_tpot)):
        x = x[np.isfinite(x)]
        value = float(np.percentile(x, p)) if x.size else float("nan")
        out[f"slo_p{p:g}_{name}_ms"] = value
        if goal is not None and not value <= goal:
            met = False
    out["slo_met"] = met
    return out


def summary_json(summary: dict) -> str:
    """JSON text of a summary (NaN written as null)."""
    clean = {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
             for k, v in summary.items()}
    return json.dumps(clean, indent=2)
