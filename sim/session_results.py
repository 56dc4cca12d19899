"""Session metrics: per-round links in the Dataset, per-session variables, summary figures.

Per request (a round): ``session_id``, ``round``, ``round_kind`` (0 thinking, 1 answer),
``new_prompt_tokens``; its TTFT, E2E and prefix hits are the ordinary per-request ones
(``ttft_s`` of a later round is measured from its send, after the tool delay).

Per session (dim ``session``, seconds):

* ``answer_ttft_s`` -- answer-visible TTFT: session arrival to the first token of its final
  answer round (Frontier's aTTFT ends at the completion of that round's prefill, the step
  that emits the first token: the same instant);
* ``session_makespan_s`` -- session arrival to its last round's last token;
* ``session_rounds``, ``session_arrival_s``, ``history_hit_tokens`` (prefix-cache hits of
  its later rounds).

A session with a rejected round (prompt too long) has NaN for both.

Summary (:func:`session_summary`): ``sessions``, percentiles (mean, 50, 90, 95, 99) of
``answer_ttft`` and ``session_makespan`` (ms) and of ``followup_ttft`` (TTFT of rounds
after the first), ``hidden_planning_throughput`` = (new prompt + output tokens of thinking
rounds) / (last thinking round's finish - first session arrival), tokens/s -- the rate at
which hidden planning work is served over the trace --, and the history's prefix-cache
figures of later rounds: ``followup_history_tokens`` (prompt minus new tokens),
``followup_prefix_hit_tokens`` and their ratio ``followup_history_hit_rate``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .session_state import KIND_ANSWER, KIND_THINKING
from .state import FINISHED_IGNORED, PREEMPTED

S = {"units": "s"}
ONE = {"units": "1"}
TOKENS = {"units": "tokens"}
KIND_ATTRS = {"flag_values": np.array([KIND_THINKING, KIND_ANSWER], dtype=np.int8),
              "flag_meanings": "thinking answer"}
SESSION_PERCENTILES = (50, 90, 95, 99)


def add_session_vars(ds: xr.Dataset, plan) -> xr.Dataset:
    """``ds`` with the per-round links and the per-session variables of ``plan``."""
    dim = ("request",)
    ds = ds.assign({
        "session_id": (dim, plan.session, {**ONE, "description": "session index (by first "
                                                              "arrival)"}),
        "round": (dim, plan.round, {**ONE, "description": "round within the session, from 0"}),
        "round_kind": (dim, plan.kind, KIND_ATTRS),
        "new_prompt_tokens": (dim, plan.new_tokens, {**TOKENS, "description": "prompt tokens "
                                                     "beyond the session's history"}),
    })
    per = _per_session(ds, plan.session, plan.round, plan.kind)
    sdim = ("session",)
    ds = ds.assign({
        "session_arrival_s": (sdim, per["arrival"], S),
        "answer_ttft_s": (sdim, per["attft"], {**S, "long_name": "answer-visible TTFT"}),
        "session_makespan_s": (sdim, per["makespan"], S),
        "session_rounds": (sdim, per["rounds"], ONE),
        "history_hit_tokens": (sdim, per["hits"], {**TOKENS, "description": "prefix-cache hit "
                                                   "tokens of its later rounds"}),
    })
    if plan.names is not None:
        ds = ds.assign_coords(session_name=("session", np.array(plan.names, dtype=object)))
    ds["session"] = ("session", np.arange(ds.sizes["session"]), ONE)
    return ds


def _per_session(ds: xr.Dataset, sess, rnd, kind) -> dict:
    n_s = int(sess.max()) + 1 if sess.size else 0
    arrival = ds["arrival_s"].values
    status = ds["status"].values
    first_rows = np.flatnonzero(rnd == 0)
    s_arr = np.full(n_s, np.nan)
    s_arr[sess[first_rows]] = arrival[first_rows]
    rounds = np.bincount(sess, minlength=n_s)
    bad = np.zeros(n_s, dtype=bool)
    bad[sess[(status == FINISHED_IGNORED) | (status <= PREEMPTED)]] = True
    last = _last_row(sess, rnd, np.ones_like(rnd, dtype=bool), n_s)
    answer = _last_row(sess, rnd, kind == KIND_ANSWER, n_s)
    attft = np.full(n_s, np.nan)
    ok = (answer >= 0) & ~bad
    attft[ok] = ds["first_token_s"].values[answer[ok]] - s_arr[ok]
    makespan = np.where(bad, np.nan, ds["finish_s"].values[last] - s_arr)
    later = rnd > 0
    hits = np.bincount(sess[later], weights=ds["prefix_hit_tokens"].values[later],
                       minlength=n_s).astype(np.int64)
    return {"arrival": s_arr, "attft": attft, "makespan": makespan, "rounds": rounds,
            "hits": hits}


def _last_row(sess, rnd, mask, n_s: int) -> np.ndarray:
    """Per session, the row of its highest round among ``mask`` (-1: none)."""
    out = np.full(n_s, -1, dtype=np.int64)
    rows = np.flatnonzero(mask)
    order = rows[np.lexsort((rnd[rows], sess[rows]))]  # by session, then round
    out[sess[order]] = order  # the last write per session is its highest round
    return out


def _pct(x: np.ndarray, prefix: str, out: dict) -> None:
    x = x[np.isfinite(x)]
    out[f"mean_{prefix}_ms"] = float(x.mean() * 1e3) if x.size else float("nan")
    for p in SESSION_PERCENTILES:
        name = "median" if p == 50 else f"p{p}"
        out[f"{name}_{prefix}_ms"] = float(np.percentile(x, p) * 1e3) if x.size else float("nan")


def hidden_planning_throughput(ds: xr.Dataset) -> float:
    """Thinking rounds' new prompt plus output tokens per second of the trace's span
    (module docstring); NaN without thinking rounds."""
    thinking = ds["round_kind"].values == KIND_THINKING
    if not thinking.any():
        return float("nan")
    tokens = float(ds["new_prompt_tokens"].values[thinking].sum()
                   + ds["output_len"].values[thinking].sum())
    span = float(np.nanmax(ds["finish_s"].values[thinking])
                 - np.nanmin(ds["session_arrival_s"].values))
    return tokens / span if span > 0 else float("nan")


def session_summary(ds: xr.Dataset) -> dict:
    """The session figures of the summary (module docstring); empty without sessions."""
    if "session_id" not in ds:
        return {}
    attft = ds["answer_ttft_s"].values
    out: dict = {"sessions": int(ds.sizes["session"]),
                 "sessions_completed": int(np.isfinite(ds["session_makespan_s"].values).sum())}
    _pct(attft, "answer_ttft", out)
    _pct(ds["session_makespan_s"].values, "session_makespan", out)
    later = ds["round"].values > 0
    _pct(ds["ttft_s"].values[later], "followup_ttft", out)
    out["hidden_planning_throughput"] = hidden_planning_throughput(ds)
    history = int((ds["prompt_len"].values[later] - ds["new_prompt_tokens"].values[later]).sum())
    hits = int(ds["prefix_hit_tokens"].values[later].sum())
    out["followup_history_tokens"] = history
    out["followup_prefix_hit_tokens"] = hits
    out["followup_history_hit_rate"] = hits / history if history else float("nan")
    return out




__all__ = ["KIND_ATTRS", "add_session_vars", "hidden_planning_throughput", "session_summary"]
