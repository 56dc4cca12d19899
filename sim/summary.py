"""Summary metrics of a simulation Dataset (``vllm bench serve`` names, milliseconds).

One summary for every architecture: the headline metrics over completed requests; where
the deployment has more than one role, the same load figures per role; for a
disaggregated run also P99.9 latencies, transfer and decode-queueing statistics and the
decode router's optimal-assignment ratios; for a session workload the session figures
(answer-visible TTFT, makespan, hidden planning throughput, history hits:
:func:`serveplan.sim.session_results.session_summary`).

Requests that failed (rejected at arrival because the prompt is ``max_model_len`` tokens or
longer, or timed out by the client) are counted in ``failed`` with the reasons in
``failed_reason``; they are left out of the latency percentiles (vLLM's benchmark does the
same) but count against the SLO as misses (:func:`slo_verdict`).
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from .clients import TIMEOUT_ATTR, client_outcome
from .cpu_tier import cpu_tier_summary
from .session_results import session_summary
from .speculative import spec_summary
from .state import FINISHED_IGNORED

PERCENTILES = (50, 90, 99)
TAIL_PERCENTILES = (50, 99, 99.9)


def _done(ds: xr.Dataset) -> np.ndarray:
    return client_outcome(ds).completed


def _pct(x: np.ndarray, prefix: str, out: dict, levels=PERCENTILES) -> None:
    x = x[np.isfinite(x)]
    out[f"mean_{prefix}_ms"] = float(x.mean() * 1e3) if x.size else float("nan")
    for p in levels:
        name = "median" if p == 50 else f"p{p:g}".replace(".", "_")
        out[f"{name}_{prefix}_ms"] = float(np.percentile(x, p) * 1e3) if x.size else float("nan")


def _busy_weighted(ds: xr.Dataset, var: str, mask) -> float:
    busy = ds["busy_s"].values[mask]
    if busy.sum() <= 0:
        return 0.0
    return float(np.nansum(ds[var].values[mask] * busy) / busy.sum())


def _headline(ds: xr.Dataset, done: np.ndarray) -> dict:
    outcome = client_outcome(ds)
    arrival, finish = ds["arrival_s"].values[outcome.measured], ds["finish_s"].values
    out_len, prompt = ds["output_len"].values[done], ds["prompt_len"].values[done]
    start = float(np.nanmin(arrival)) if arrival.size else 0.0
    duration = float(np.nanmax(finish[done]) - start) if done.any() else 0.0
    s: dict = {
        "completed": int(done.sum()),
        "failed": int(outcome.failed.sum()),
        "failed_reason": failure_reasons(ds, outcome),
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
    first = ds["first_token_s"].values[done]
    s["mean_itl_ms"] = float((finish[done] - first).sum() / gaps * 1e3) if gaps else float("nan")
    s["num_preemptions"] = int(ds["num_preemptions"].values.sum())
    s["prefix_hit_rate"] = (float(ds["prefix_hit_tokens"].values[done].sum() / prompt.sum())
                            if prompt.sum() else 0.0)
    every = np.ones(ds.sizes["instance"], dtype=bool)
    s["mean_kv_usage"] = _busy_weighted(ds, "mean_kv_usage", every)
    s["max_kv_usage"] = float(ds["kv_usage"].values.max()) if ds.sizes.get("step") else 0.0
    s["mean_batch_size"] = _busy_weighted(ds, "mean_batch_size", every)
    s["total_steps"] = int(ds.attrs.get("total_steps", 0))
    s.update(spec_summary(ds))
    return s


def _per_role(ds: xr.Dataset, s: dict, roles) -> None:
    role = ds["role"].values
    for r in roles:
        m = role == r
        s[f"{r}_instances"] = int(m.sum())
        s[f"{r}_mean_kv_usage"] = _busy_weighted(ds, "mean_kv_usage", m)
        s[f"{r}_mean_batch_size"] = _busy_weighted(ds, "mean_batch_size", m)
        served = ds["requests_served"].values[m]
        s[f"{r}_requests_per_instance_max"] = int(served.max()) if served.size else 0
        s[f"{r}_requests_per_instance_min"] = int(served.min()) if served.size else 0


def _handoff(ds: xr.Dataset, done: np.ndarray, s: dict) -> None:
    for name, var in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s"),
                      ("queue", "queue_s"), ("transfer", "transfer_s"), ("kv_wait", "kv_wait_s"),
                      ("decode_queue", "decode_queue_s")):
        _pct(ds[var].values[done], name, s, TAIL_PERCENTILES)
    for metric, var in (("transfer", "transfer_s"), ("kv_wait", "kv_wait_s"),
                        ("decode_queue", "decode_queue_s")):
        x = ds[var].values[done]
        x = x[np.isfinite(x)]
        for p in PERCENTILES:
            name = "median" if p == 50 else f"p{p}"
            s[f"{name}_{metric}_ms"] = float(np.percentile(x, p) * 1e3) if x.size else float("nan")
    s["kv_bytes_transferred"] = float(ds["kv_bytes"].values.sum())
    for key, var in (("optimal_assignment_ratio", "optimal_assignment"),
                     ("optimal_assignment_ratio_requests", "optimal_assignment_requests")):
        v = ds[var].values
        v = v[v >= 0]
        s[key] = float(v.mean()) if v.size else float("nan")


def summarize(ds: xr.Dataset, slo: dict | None = None) -> dict:
    """Summary metrics of a simulation Dataset (module docstring).

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`serveplan.sim.results.to_dataset` (or read back from NetCDF).
    slo : dict, optional
        ``ttft_ms``, ``tpot_ms`` (either may be None), ``percentile`` (e.g. 90) and
        ``attainment`` (a fraction or None). Adds the SLO verdict: with ``attainment`` the
        fraction of requests meeting both goals must reach it (DistServe); otherwise the
        given percentile of each metric must be within its goal.
    """
    done = _done(ds)
    s = _headline(ds, done)
    s.update(cpu_tier_summary(ds, done))
    if slo:
        s.update(slo_verdict(ds, done, slo))
    if "transfer_s" in ds:  # disaggregated: both roles, even without prefill instances
        _handoff(ds, done, s)
        down = "attention" if "attention" in ds["role"].values else "decode"
        _per_role(ds, s, ("prefill", down))
    elif "role" in ds.coords and len(set(ds["role"].values)) > 1:
        _per_role(ds, s, dict.fromkeys(ds["role"].values))
    s.update(session_summary(ds))
    return s


def meets_goals(ttft, tpot, ttft_goal=None, tpot_goal=None) -> np.ndarray:
    """Which requests meet the goals (``ttft``/``tpot`` in the goals' unit). A request never
    served (TTFT ``inf``: rejected or failed) misses every goal; a one-token output (TPOT
    NaN) meets any TPOT goal."""
    ttft, tpot = np.asarray(ttft, dtype=np.float64), np.asarray(tpot, dtype=np.float64)
    ok = np.isfinite(ttft)
    if ttft_goal is not None:
        ok &= ttft <= ttft_goal
    if tpot_goal is not None:
        ok &= ~(tpot > tpot_goal)
    return ok


def latency_percentile(x: np.ndarray, p: float) -> float:
    """Linear-interpolated percentile of the non-NaN ``x``; ``inf`` entries (failed
    requests) count as larger than any latency."""
    x = x[~np.isnan(x)]
    if not x.size:
        return float("nan")
    with np.errstate(invalid="ignore"):
        value = float(np.percentile(x, p))
    return float("inf") if np.isnan(value) else value  # between two inf entries


def slo_verdict(ds: xr.Dataset, done: np.ndarray, slo: dict,
                failed: np.ndarray | None = None) -> dict:
    """Whether the run meets ``slo`` (see :func:`summarize`). Failed requests (``failed``;
    by default rejected or timed out, :func:`~serveplan.sim.clients.client_outcome`) count
    as misses: their TTFT and TPOT are taken as infinite, so they lower ``slo_attainment``
    and raise the SLO percentiles."""
    if failed is None:
        failed = client_outcome(ds).failed
    missing = np.full(int(np.count_nonzero(failed)), np.inf)
    ttft = np.concatenate([ds["ttft_s"].values[done] * 1e3, missing])
    tpot = np.concatenate([ds["tpot_s"].values[done] * 1e3, missing])
    goal_ttft, goal_tpot = slo.get("ttft_ms"), slo.get("tpot_ms")
    ok = meets_goals(ttft, tpot, goal_ttft, goal_tpot)
    out = {"slo_attainment": float(ok.mean()) if ok.size else float("nan")}
    if slo.get("attainment") is not None:
        out["slo_met"] = bool(ok.size and ok.mean() >= slo["attainment"])
        return out
    p = float(slo.get("percentile", 90))
    met = bool(ok.size)
    for name, x, goal in (("ttft", ttft, goal_ttft), ("tpot", tpot, goal_tpot)):
        value = latency_percentile(x, p)
        out[f"slo_p{p:g}_{name}_ms"] = value
        if goal is not None and not value <= goal:
            met = False
    out["slo_met"] = met
    return out


def _max_model_len(ds: xr.Dataset) -> int | None:
    """The smallest ``max_model_len`` of the run's instances, from ``attrs["resolved"]``."""
    try:
        resolved = json.loads(ds.attrs.get("resolved", "{}"))
    except (TypeError, ValueError):
        return None
    found = [resolved.get("max_model_len")]
    found += [v.get("max_model_len") for v in resolved.values() if isinstance(v, dict)]
    for pool in resolved.get("pools", []) if isinstance(resolved.get("pools"), list) else []:
        found.append(pool.get("max_model_len") if isinstance(pool, dict) else None)
    found = [int(v) for v in found if isinstance(v, (int, float))]
    return min(found) if found else None


def failure_reasons(ds: xr.Dataset, outcome) -> str:
    """Why the measured requests failed, with counts (empty if none did): prompts of
    ``max_model_len`` tokens or more, rejected at arrival as by vLLM, and client timeouts."""
    status = ds["status"].values
    rejected = int(np.count_nonzero(outcome.measured & (status == FINISHED_IGNORED)))
    timed_out = int(np.count_nonzero(outcome.measured & outcome.timed_out))
    parts = []
    if rejected:
        limit = _max_model_len(ds)
        shown = f"max_model_len={limit:,}" if limit is not None else "max_model_len"
        parts.append(f"{rejected:,} rejected at arrival, prompt too long "
                     f"(prompt_len >= {shown})")
    if timed_out:
        timeout = ds.attrs.get(TIMEOUT_ATTR)
        parts.append(f"{timed_out:,} timed out (end-to-end latency > client timeout "
                     f"{float(timeout):,.4g} s)" if timeout is not None else
                     f"{timed_out:,} timed out")
    return "; ".join(parts)


def summary_json(summary: dict) -> str:
    """JSON text of a summary (NaN written as null)."""
    clean = {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
             for k, v in summary.items()}
    return json.dumps(clean, indent=2)


__all__ = ["PERCENTILES", "failure_reasons", "latency_percentile", "meets_goals", "slo_verdict",
           "summarize", "summary_json"]
