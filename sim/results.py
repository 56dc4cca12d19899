"""Turn a run of any architecture into one ``xarray.Dataset`` and a summary.

Dimensions: ``request``, ``step`` (the recorded steps of every instance, in start order)
and ``instance`` (coordinates ``role`` -- colocated, prefill, decode -- and ``gpu``).

Per-request metrics (DESIGN.md conventions, seconds):

* TTFT = first token time - arrival (a disaggregated request's first token is emitted by
  its prefill, or as its decode instance starts decoding it with ``first_token: decode``);
  E2E = finish - arrival;
* TPOT = (E2E - TTFT) / (output tokens - 1), NaN for one-token outputs;
* queueing delay = first scheduled - arrival (on the entry instance);
* ITL: the largest gap between consecutive tokens of a request (``itl_max_s``); the mean ITL
  over all gaps of all requests is ``sum(finish - first token) / sum(output - 1)``, exact.
  Per-token times are not stored, so ITL percentiles over tokens are not available.

A disaggregated run adds the handoff's variables (:mod:`serveplan.sim.disagg`):
``prefill_instance``, ``assigned_s``, ``handoff_estimate_s`` (the router's ``tau``),
``kv_ready_s`` (prefill end, or its start with layer-wise transfer), ``transfer_start_s``
(the decode instance admitted the pull), ``kv_arrival_s``, ``decode_start_s`` (its first
decode step), ``kv_wait_s`` (transfer start - KV ready: backpressure), ``transfer_s``,
``decode_queue_s`` (first decode step - prefill's token), ``kv_bytes`` and
``optimal_assignment`` / ``optimal_assignment_requests`` (1 if the pre-assigned decode
instance had the least token occupancy / fewest decoding requests at the handoff; -1 if not
checked); its ``routed_to`` is the decode instance's index within the decode pool.

A run with a CPU KV tier adds its variables (:func:`serveplan.sim.cpu_tier.cpu_tier_vars`):
``gpu_hit_tokens`` / ``cpu_hit_tokens`` per request, the tier's capacity, bytes stored and
loaded, loads and load time per instance.
A session workload adds the rounds' links and the per-session variables (dim ``session``:
answer-visible TTFT, makespan, ...; :mod:`serveplan.sim.session_results`).

Percentiles are over completed requests (rejected ones -- prompt too long -- are excluded
and counted as failed).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .cpu_tier import cpu_tier_vars
from .handoff import Q_DBASE
from .loop_api import RunResult
from .pools import DOWNSTREAM_ROLES
from .recorder import recorded_steps
from .session_results import add_session_vars
from .speculative import spec_instance_vars
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
from .summary import slo_verdict, summarize, summary_json

S = {"units": "s"}
STATUS_ATTRS = {
    "flag_values": np.array([int(v) for v in RequestStatus], dtype=np.int8),
    "flag_meanings": " ".join(v.name.lower() for v in RequestStatus),
    "description": f"ordered status code; > {int(PREEMPTED)} means finished",
}


def _request_record(res: RunResult) -> dict:
    """The per-request outcome, read from the views of the roles that produced it."""
    n = len(res.reqs.prompt)
    finish = res.pd.t_finish[:n]
    if not res.disaggregated:
        r = res.reqs
        return dict(req=r, n_out=r.n_out, status=r.status, routed=r.inst, first=r.t_first,
                    finish=finish, itl_max=r.itl_max, n_preempt=r.n_preempt,
                    routed_doc="instance index (-1: rejected)", queue_doc="queueing delay",
                    sched_doc="first scheduled", hit_doc="at first admission")
    p, d, hs = res.p_reqs, res.d_reqs, res.pd
    decoded = np.isfinite(hs.t_join[:n])
    n_out = np.where(res.ignored, 0, np.where(decoded, d.n_out, np.minimum(p.n_out, 1)))
    return dict(req=p, n_out=n_out, status=d.status.copy(), routed=hs.d_of[:n].astype(np.int32),
                first=res.first_token_times, finish=finish, itl_max=d.itl_max,
                n_preempt=p.n_preempt + d.n_preempt, routed_doc="decode instance (-1: none)",
                queue_doc="prefill queueing delay", sched_doc="prefill start",
                hit_doc="on the prefill instance at first admission")


def _request_vars(res: RunResult) -> dict:
    rr = _request_record(res)
    r, n_out, first, finish = rr["req"], rr["n_out"], rr["first"], rr["finish"]
    arrival = r.arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out > 1, (finish - first) / (n_out - 1), np.nan)
    dim = ("request",)
    return {
        "arrival_s": (dim, arrival, S),
        "prompt_len": (dim, r.prompt),
        "output_len": (dim, n_out, {"description": "output tokens produced"}),
        "output_len_requested": (dim, res.output_requested),
        "routed_to": (dim, rr["routed"], {"description": rr["routed_doc"]}),
        "status": (dim, rr["status"], STATUS_ATTRS),
        "first_scheduled_s": (dim, r.t_sched, {**S, "long_name": rr["sched_doc"]}),
        "first_token_s": (dim, first, S),
        "finish_s": (dim, finish, S),
        "ttft_s": (dim, first - arrival, {**S, "long_name": "time to first token"}),
        "tpot_s": (dim, tpot, {**S, "long_name": "time per output token"}),
        "e2e_s": (dim, finish - arrival, {**S, "long_name": "end-to-end latency"}),
        "queue_s": (dim, r.t_sched - arrival, {**S, "long_name": rr["queue_doc"]}),
        "itl_max_s": (dim, rr["itl_max"], {**S, "long_name": "largest inter-token gap"}),
        "num_preemptions": (dim, rr["n_preempt"]),
        "prefix_hit_tokens": (dim, np.maximum(r.hit, 0),
                              {"description": "prompt tokens served from the prefix cache "
                                              + rr["hit_doc"]}),
    }


def _handoff_vars(res: RunResult) -> dict:
    """The disaggregated request path's own per-request variables (module docstring)."""
    hs, p = res.pd, res.p_reqs
    n = len(p.prompt)
    decoded = np.isfinite(hs.t_join[:n])
    link = res.handoff.link
    per_token = link.bytes_per_token if link is not None else 0.0
    dim = ("request",)
    opt = {"description": "1: the pre-assigned decode instance was the least loaded at the "
                          "handoff; 0: it was not; -1: not checked"}
    return {
        "prefill_instance": (dim, hs.p_of[:n].astype(np.int32),
                             {"description": "prefill instance (-1: none)"}),
        "assigned_s": (dim, hs.t_assign[:n], S),
        "handoff_estimate_s": (dim, hs.tau[:n], {**S, "long_name": "router's tau"}),
        "kv_ready_s": (dim, hs.t_kvready[:n], S),
        "transfer_start_s": (dim, hs.t_xstart[:n], S),
        "kv_arrival_s": (dim, hs.t_join[:n], S),
        "decode_start_s": (dim, hs.t_dec1[:n], S),
        "kv_wait_s": (dim, hs.t_xstart[:n] - hs.t_kvready[:n],
                      {**S, "long_name": "wait for decode KV room (backpressure)"}),
        "transfer_s": (dim, hs.t_join[:n] - hs.t_xstart[:n], {**S, "long_name": "KV transfer"}),
        "decode_queue_s": (dim, hs.t_dec1[:n] - p.t_first,
                           {**S, "long_name": "prefill's token to first decode step"}),
        "kv_bytes": (dim, np.where(decoded, p.prompt * per_token, 0.0), {"units": "B"}),
        "optimal_assignment": (dim, hs.opt_tok[:n], opt),
        "optimal_assignment_requests": (dim, hs.opt_req[:n], opt),
    }


def _instance_blocks(res: RunResult) -> np.ndarray:
    return np.array([res.pools[k].params.num_gpu_blocks for k in res.pool_of], dtype=np.int64)


def _requests_served(res: RunResult) -> np.ndarray:
    n = len(res.reqs.prompt)
    served = np.zeros(res.num_instances, dtype=np.int64)
    if res.disaggregated:
        owners = (res.pd.p_of[:n], res.pd.d_of[:n] + res.pd.gi[Q_DBASE])
    else:
        owners = (res.reqs.inst.astype(np.int64),)
    for owner in owners:
        owner = owner[owner >= 0]
        served += np.bincount(owner, minlength=res.num_instances)[: res.num_instances]
    return served


def _instance_vars(res: RunResult) -> dict:
    acc = res.inst.acc
    busy = acc[:, A_BUSY_TIME]
    dim = ("instance",)
    tw = {"description": "time-weighted over busy time"}
    with np.errstate(invalid="ignore", divide="ignore"):
        kv = acc[:, A_KV_TIME] / busy / _instance_blocks(res)
        batch = acc[:, A_BATCH_TIME] / busy
    return {
        "busy_s": (dim, busy, S),
        "num_steps": (dim, res.inst.ist[:, I_STEPS]),
        "mean_kv_usage": (dim, kv, tw),
        "mean_batch_size": (dim, batch, tw),
        "tokens_computed": (dim, acc[:, A_TOKENS]),
        "prefill_tokens_computed": (dim, acc[:, A_PREFILL_TOKENS]),
        "requests_served": (dim, _requests_served(res)),
        "num_gpu_blocks": (dim, _instance_blocks(res)),
        **spec_instance_vars(res.pools, res.pool_of, res.costs.spec.stats),
    }


def _step_vars(res: RunResult) -> dict:
    s = recorded_steps(res.rec)
    inst = s["inst"].astype(np.int64)
    stage = np.isin(res.roles[inst], DOWNSTREAM_ROLES).astype(np.int8) if inst.size else inst
    order = np.lexsort((stage, s["t"]))  # start time, then upstream roles first (stable)
    blocks = _instance_blocks(res)[inst] if inst.size else np.ones(0)
    dim = ("step",)
    return {
        "step_start_s": (dim, s["t"][order], S),
        "step_time_s": (dim, s["dt"][order], S),
        "step_instance": (dim, s["inst"][order]),
        "batch_size": (dim, s["batch"][order], {"description": "requests scheduled in the step"}),
        "num_tokens": (dim, s["tokens"][order]),
        "num_prefill_tokens": (dim, s["prefill_tokens"][order],
                               {"description": "tokens of requests not decoding"}),
        "kv_blocks_used": (dim, s["kv_used"][order]),
        "kv_usage": (dim, (s["kv_used"] / blocks)[order],
                     {"description": "used / num_gpu_blocks of the step's instance"}),
        "num_waiting": (dim, s["waiting"][order]),
        "num_running": (dim, s["running"][order]),
    }


def _run_attrs(res: RunResult) -> dict:
    stride = int(res.rec.meta[1])
    attrs = {
        "architecture": res.architecture,
        "total_steps": res.num_steps,
        "step_stride": stride,
        "step_note": f"every {stride}-th engine step is recorded" if stride > 1
        else "every engine step is recorded",
        "num_gpu_blocks": res.pools[-1].params.num_gpu_blocks,
    }
    h = res.handoff
    if h is not None:
        attrs.update({"router": h.router, "assignment": h.assignment,
                      "layerwise_transfer": int(bool(h.layerwise)),
                      "prefill_stage": h.prefill_stage})
    return attrs


def to_dataset(res: RunResult, *, attrs: dict | None = None) -> xr.Dataset:
    """The run as a Dataset: ``request``, ``step`` and ``instance`` dims; ``attrs`` added."""
    data = {**_request_vars(res), **_step_vars(res), **_instance_vars(res)}
    if res.disaggregated:
        data.update(_handoff_vars(res))
    data.update(cpu_tier_vars(res))
    ds = xr.Dataset(data, coords={
        "request": np.arange(len(res.reqs.prompt)),
        "instance": np.arange(res.num_instances),
        "role": ("instance", res.roles), "gpu": ("instance", res.gpus)})
    if res.sessions is not None:
        ds = add_session_vars(ds, res.sessions)
    ds.attrs.update(_run_attrs(res))
    if attrs:
        ds.attrs.update(attrs)
    return ds


def completed(ds: xr.Dataset) -> np.ndarray:
    """Mask of the requests that finished (not rejected)."""
    status = ds["status"].values
    return (status > PREEMPTED) & (status != FINISHED_IGNORED)


__all__ = ["completed", "slo_verdict", "summarize", "summary_json", "to_dataset"]
