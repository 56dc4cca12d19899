"""A disaggregated run as an ``xarray.Dataset`` and a summary (extends :mod:`.results`).

The Dataset has the colocated variables (same names, same meaning; see
:mod:`serveplan.sim.results`) plus the disaggregation's own:

* per request: ``prefill_instance``, ``routed_to`` (decode instance), ``assigned_s``,
  ``handoff_estimate_s`` (the router's ``tau``), ``kv_ready_s`` (prefill end, or its start
  with layer-wise transfer), ``transfer_start_s`` (the decode instance admitted the pull),
  ``kv_arrival_s``, ``decode_start_s`` (its first decode step), ``kv_wait_s`` (transfer start -
  KV ready: waiting for KV room or a slot on the decode instance, or for its next schedule), ``transfer_s`` (KV arrival - transfer start), ``decode_queue_s``
  (first decode step - first token: waiting for room, transfer and the next step),
  ``kv_bytes`` (KV moved, all ranks) and ``optimal_assignment`` /
  ``optimal_assignment_requests`` (1 if the pre-assigned decode instance had the least
  token occupancy / fewest decoding requests at the handoff; -1 if not checked);
* per instance (``instance`` = prefill instances, then decode instances; ``role``
  coordinate): the colocated totals, ``requests_served`` and ``num_gpu_blocks``;
* per step: both pools' records in time order (``step_instance`` indexes ``instance``).

TTFT ends at the prefill's first token; TPOT = (finish - first token) / (output - 1).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .engine import recorded_steps
from .pd import PDResult
from .results import PERCENTILES, summarize
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

TAIL_PERCENTILES = (50, 99, 99.9)


def _request_vars(res: PDResult) -> dict:
    p, d, pd = res.p_reqs, res.d_reqs, res.pd
    n = len(p.prompt)
    arrival = p.arrival
    decoded = np.isfinite(pd.t_join[:n])
    n_out = np.where(res.ignored, 0, np.where(decoded, d.n_out, np.minimum(p.n_out, 1)))
    status = d.status.copy()
    first = p.t_first
    finish = pd.t_finish[:n]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out > 1, (finish - first) / (n_out - 1), np.nan)
    kv_bytes = np.where(decoded, p.prompt * res.link.bytes_per_token, 0.0)
    dim = ("request",)
    s = {"units": "s"}
    status_attrs = {
        "flag_values": np.array([int(v) for v in RequestStatus], dtype=np.int8),
        "flag_meanings": " ".join(v.name.lower() for v in RequestStatus),
        "description": f"ordered status code; > {int(PREEMPTED)} means finished",
    }
    opt_attrs = {"description": "1: the pre-assigned decode instance was the least loaded at "
                                "the handoff; 0: it was not; -1: not checked"}
    return {
        "arrival_s": (dim, arrival, s),
        "prompt_len": (dim, p.prompt),
        "output_len": (dim, n_out, {"description": "output tokens produced"}),
        "output_len_requested": (dim, res.output_requested),
        "prefill_instance": (dim, pd.p_of[:n].astype(np.int32),
                             {"description": "prefill instance (-1: none)"}),
        "routed_to": (dim, pd.d_of[:n].astype(np.int32),
                      {"description": "decode instance (-1: none)"}),
        "status": (dim, status, status_attrs),
        "first_scheduled_s": (dim, p.t_sched, {**s, "long_name": "prefill start"}),
        "first_token_s": (dim, first, s),
        "finish_s": (dim, finish, s),
        "ttft_s": (dim, first - arrival, {**s, "long_name": "time to first token"}),
        "tpot_s": (dim, tpot, {**s, "long_name": "time per output token"}),
        "e2e_s": (dim, finish - arrival, {**s, "long_name": "end-to-end latency"}),
        "queue_s": (dim, p.t_sched - arrival, {**s, "long_name": "prefill queueing delay"}),
        "itl_max_s": (dim, d.itl_max, {**s, "long_name": "largest inter-token gap"}),
        "num_preemptions": (dim, p.n_preempt + d.n_preempt),
        "prefix_hit_tokens": (dim, np.maximum(p.hit, 0),
                              {"description": "prompt tokens served from the prefill "
                                              "instance's prefix cache at first admission"}),
        "assigned_s": (dim, pd.t_assign[:n], s),
        "handoff_estimate_s": (dim, pd.tau[:n], {**s, "long_name": "router's tau"}),
        "kv_ready_s": (dim, pd.t_kvready[:n], s),
        "transfer_start_s": (dim, pd.t_xstart[:n], s),
        "kv_arrival_s": (dim, pd.t_join[:n], s),
        "decode_start_s": (dim, pd.t_dec1[:n], s),
        "kv_wait_s": (dim, pd.t_xstart[:n] - pd.t_kvready[:n],
                      {**s, "long_name": "wait for decode KV room (backpressure)"}),
        "transfer_s": (dim, pd.t_join[:n] - pd.t_xstart[:n], {**s, "long_name": "KV transfer"}),
        "decode_queue_s": (dim, pd.t_dec1[:n] - first,
                           {**s, "long_name": "first token to first decode step"}),
        "kv_bytes": (dim, kv_bytes, {"units": "B"}),
        "optimal_assignment": (dim, pd.opt_tok[:n], opt_attrs),
        "optimal_assignment_requests": (dim, pd.opt_req[:n], opt_attrs),
    }


def _instance_vars(res: PDResult) -> tuple[dict, np.ndarray]:
    delay = res.prefill_stage == "delay"
    insts = [] if delay else [(res.p_inst, res.prefill.params.num_gpu_blocks, "prefill")]
    insts.append((res.d_inst, res.decode.params.num_gpu_blocks, "decode"))
    n = len(res.p_reqs.prompt)
    cols: dict[str, list] = {k: [] for k in ("busy", "steps", "kv", "batch", "tok", "ptok",
                                             "served", "blocks")}
    roles = []
    for inst, blocks, role in insts:
        acc = inst.acc
        busy = acc[:, A_BUSY_TIME]
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["kv"].append(acc[:, A_KV_TIME] / busy / blocks)
            cols["batch"].append(acc[:, A_BATCH_TIME] / busy)
        cols["busy"].append(busy)
        cols["steps"].append(inst.ist[:, I_STEPS])
        cols["tok"].append(acc[:, A_TOKENS])
        cols["ptok"].append(acc[:, A_PREFILL_TOKENS])
        k = inst.ist.shape[0]
        owner = (res.pd.p_of if role == "prefill" else res.pd.d_of)[:n]
        cols["served"].append(np.bincount(owner[owner >= 0], minlength=k)[:k])
        cols["blocks"].append(np.full(k, blocks, dtype=np.int64))
        roles += [role] * k
    c = {k: np.concatenate(v) for k, v in cols.items()}
    dim = ("instance",)
    tw = {"description": "time-weighted over busy time"}
    return {
        "busy_s": (dim, c["busy"], {"units": "s"}),
        "num_steps": (dim, c["steps"]),
        "mean_kv_usage": (dim, c["kv"], tw),
        "mean_batch_size": (dim, c["batch"], tw),
        "tokens_computed": (dim, c["tok"]),
        "prefill_tokens_computed": (dim, c["ptok"]),
        "requests_served": (dim, c["served"]),
        "num_gpu_blocks": (dim, c["blocks"]),
    }, np.array(roles)


def _step_vars(res: PDResult) -> dict:
    parts = []
    offset = 0
    if res.prefill_stage != "delay":
        parts.append((recorded_steps(res.p_rec), res.prefill.params.num_gpu_blocks, 0))
        offset = res.p_inst.ist.shape[0]
    parts.append((recorded_steps(res.d_rec), res.decode.params.num_gpu_blocks, offset))
    cat = {k: np.concatenate([p[k] for p, _, _ in parts]) for k in parts[0][0]}
    inst = np.concatenate([p["inst"] + off for p, _, off in parts]).astype(np.int32)
    blocks = np.concatenate([np.full(len(p["t"]), b) for p, b, _ in parts])
    order = np.argsort(cat["t"], kind="stable")
    dim = ("step",)
    return {
        "step_start_s": (dim, cat["t"][order], {"units": "s"}),
        "step_time_s": (dim, cat["dt"][order], {"units": "s"}),
        "step_instance": (dim, inst[order]),
        "batch_size": (dim, cat["batch"][order]),
        "num_tokens": (dim, cat["tokens"][order]),
        "num_prefill_tokens": (dim, cat["prefill_tokens"][order]),
        "kv_blocks_used": (dim, cat["kv_used"][order]),
        "kv_usage": (dim, (cat["kv_used"] / blocks)[order],
                     {"description": "used / num_gpu_blocks of the step's instance"}),
        "num_waiting": (dim, cat["waiting"][order]),
        "num_running": (dim, cat["running"][order]),
    }


def to_pd_dataset(res: PDResult, *, attrs: dict | None = None) -> xr.Dataset:
    """The run as a Dataset: ``request``, ``step`` and ``instance`` dims; ``attrs`` added."""
    inst_vars, roles = _instance_vars(res)
    ds = xr.Dataset(
        {**_request_vars(res), **_step_vars(res), **inst_vars},
        coords={"request": np.arange(len(res.p_reqs.prompt)),
                "instance": np.arange(len(roles)), "role": ("instance", roles)},
    )
    strides = (int(res.p_rec.meta[1]), int(res.d_rec.meta[1]))
    ds.attrs.update({
        "architecture": "pd",
        "total_steps": res.num_steps,
        "step_stride": max(strides),
        "step_note": "each pool records every engine step" if max(strides) == 1 else
        f"every {strides[0]}-th prefill and {strides[1]}-th decode step is recorded",
        "num_gpu_blocks": res.decode.params.num_gpu_blocks,
        "router": res.router,
        "assignment": res.assignment,
        "layerwise_transfer": int(res.layerwise),
        "prefill_stage": res.prefill_stage,
    })
    if attrs:
        ds.attrs.update(attrs)
    return ds


def _tail(x: np.ndarray, prefix: str, out: dict) -> None:
    x = x[np.isfinite(x)]
    for p in TAIL_PERCENTILES:
        name = "median" if p == 50 else f"p{p:g}".replace(".", "_")
        out[f"{name}_{prefix}_ms"] = float(np.percentile(x, p) * 1e3) if x.size else float("nan")
    out[f"mean_{prefix}_ms"] = float(x.mean() * 1e3) if x.size else float("nan")


def summarize_pd(ds: xr.Dataset, slo: dict | None = None) -> dict:
    """The colocated summary (:func:`serveplan.sim.results.summarize`) plus P99.9 latencies,
    per-pool load, transfer and decode-queueing statistics and the optimal-assignment
    ratios (over requests whose assignment was checked)."""
    s = summarize(ds, slo)
    status = ds["status"].values
    done = (status > PREEMPTED) & (status != FINISHED_IGNORED)
    for name, var in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s"),
                      ("queue", "queue_s"), ("transfer", "transfer_s"), ("kv_wait", "kv_wait_s"),
                      ("decode_queue", "decode_queue_s")):
        _tail(ds[var].values[done], name, s)
    for p in PERCENTILES:
        name = "median" if p == 50 else f"p{p}"
        for metric, var in (("transfer", "transfer_s"), ("kv_wait", "kv_wait_s"),
                            ("decode_queue", "decode_queue_s")):
            x = ds[var].values[done]
            x = x[np.isfinite(x)]
            s[f"{name}_{metric}_ms"] = float(np.percentile(x, p) * 1e3) if x.size else float("nan")
    s["kv_bytes_transferred"] = float(ds["kv_bytes"].values.sum())
    for key, var in (("optimal_assignment_ratio", "optimal_assignment"),
                     ("optimal_assignment_ratio_requests", "optimal_assignment_requests")):
        v = ds[var].values
        v = v[v >= 0]
        s[key] = float(v.mean()) if v.size else float("nan")
    role = ds["role"].values
    busy = ds["busy_s"].values
    for r in ("prefill", "decode"):
        m = role == r
        b = busy[m]
        s[f"{r}_instances"] = int(m.sum())
        if b.sum() > 0:
            s[f"{r}_mean_kv_usage"] = float(np.nansum(ds["mean_kv_usage"].values[m] * b) / b.sum())
            s[f"{r}_mean_batch_size"] = float(np.nansum(ds["mean_batch_size"].values[m] * b)
                                              / b.sum())
        else:
            s[f"{r}_mean_kv_usage"] = s[f"{r}_mean_batch_size"] = 0.0
        served = ds["requests_served"].values[m]
        s[f"{r}_requests_per_instance_max"] = int(served.max()) if served.size else 0
        s[f"{r}_requests_per_instance_min"] = int(served.min()) if served.size else 0
    return s


__all__ = ["summarize_pd", "to_pd_dataset"]
