"""inference-perf reports: a ``reports-YYYYMMDD-HHMMSS/`` folder or its JSON files.

Schema taken from kubernetes-sigs/inference-perf: ``docs/reports.md`` (the files),
``inference_perf/reportgen/base.py`` (``summarize_requests``: ``load_summary``,
``successes.latency.{request_latency, time_to_first_token, time_per_output_token,
inter_token_latency, normalized_time_per_output_token}``, ``successes.throughput``,
``successes.prompt_len`` / ``output_len`` -- ``prompt_tokens`` / ``output_tokens`` with
totals since 2026 --, ``failures``, ``benchmark_time_seconds``; statistics ``mean``, ``min``,
``max``, ``median``, ``pNN``; ``generate_reports``: ``stage_{id}_lifecycle_metrics`` and
``per_request_lifecycle_metrics`` = ``[{start_time, end_time, request, response, info,
error}]``), ``inference_perf/apis/base.py`` (``InferenceInfo``: ``input_tokens``,
``output_tokens``, ``output_token_times`` at its top level before 2026, then
``request_metrics.text.input_tokens`` and ``response_metrics.{output_tokens,
output_token_times, server_usage}``), ``docs/config.md`` and ``docs/loadgen.md``
(``config.yaml``: ``load.type`` constant / poisson / concurrent / trace_replay,
``load.stages`` of ``rate`` + ``duration`` or ``concurrency_level`` + ``num_requests``,
``load.interval``, ``load.base_seed``, ``server.model_name``,
``data.output_distribution.mean``).

All times are seconds (``time.perf_counter()``). Per request: TTFT = first output token
time - start; the gaps are the differences of ``output_token_times`` (one entry per token;
tokens of one chunk share its time, so some gaps are 0, as inference-perf counts them);
E2E = end - start; the output length is the server's ``usage.completion_tokens`` where
reported, else the client's count. The per-request file is in collection order and has no
stage: requests are sorted by start time and, stages running one after another, the first
``count_0`` are stage 0, the next ``count_1`` stage 1, ... (counts from the stage reports).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from serveplan.user_input import UserError

from ._io import (
    Where,
    dig,
    finite,
    integer,
    json_value,
    load_json,
    load_yaml,
    mapping,
    num_list,
    number,
    ragged,
    require,
    stat_name,
    tokens,
)
from .model import BenchRun, Load
from .workload import with_replay_warnings

SUMMARY = "summary_lifecycle_metrics.json"
PER_REQUEST = "per_request_lifecycle_metrics.json"
CONFIG = "config.yaml"
PROMETHEUS = "summary_prometheus_metrics.json"
STAGE = re.compile(r"^stage_(\d+)_lifecycle_metrics\.json$")
EXPECTED = "an inference-perf lifecycle report (JSON)"
_LATENCY = {"request_latency": "e2e", "time_to_first_token": "ttft",
            "time_per_output_token": "tpot", "inter_token_latency": "itl",
            "normalized_time_per_output_token": "ntpot"}
_THROUGHPUT = {"requests_per_sec": "request_throughput",
               "output_tokens_per_sec": "output_throughput",
               "input_tokens_per_sec": "input_throughput",
               "total_tokens_per_sec": "total_token_throughput"}


# ----------------------------------------------------------------------------- reports
def _stats_into(out: dict, block: object, where: Where, field: str, metric: str) -> None:
    for stat, value in mapping(block, where, field).items():
        name = stat_name(stat)
        value = number(value, where, f"{field}.{stat}", null_ok=True) if name else None
        if value is not None:
            out[f"{name}_{metric}_s"] = value


def _tokens_into(out: dict, block: object, where: Where, field: str, side: str) -> None:
    block = mapping(block, where, field)
    for stat, key in (("mean", f"mean_{side}_len"), ("total", f"total_{side}_tokens")):
        value = number(block.get(stat), where, f"{field}.{stat}", null_ok=True)
        if value is not None:
            out[key] = value


def _report(path: Path) -> tuple[dict[str, float], dict]:
    """The normalised summary of a lifecycle report and its ``load_summary``."""
    where = Where(path)
    data = mapping(load_json(path, EXPECTED), where, "top level")
    succ = mapping(require(data, "successes", where), where, "successes")
    fail = mapping(data.get("failures") or {}, where, "failures")
    out: dict[str, float] = {"completed": number(require(succ, "count", where, "successes."),
                                                 where, "successes.count")}
    out["failed"] = number(fail.get("count", 0), where, "failures.count")
    seconds = number(data.get("benchmark_time_seconds"), where, "benchmark_time_seconds",
                     null_ok=True)
    if seconds is not None:
        out["duration_s"] = seconds
    for key, metric in _LATENCY.items():
        block = dig(succ, f"latency.{key}")
        if block is not None:
            _stats_into(out, block, where, f"successes.latency.{key}", metric)
    for key, name in _THROUGHPUT.items():
        value = number(dig(succ, f"throughput.{key}"), where, f"successes.throughput.{key}",
                       null_ok=True)
        if value is not None:
            out[name] = value
    for side, keys in (("input", ("prompt_tokens", "prompt_len")),
                       ("output", ("output_tokens", "output_len"))):
        key = next((k for k in keys if succ.get(k) is not None), None)
        if key is not None:
            _tokens_into(out, succ[key], where, f"successes.{key}", side)
    goodput = dig(succ, "goodput_metrics.request_goodput")
    if goodput is not None:
        out["request_goodput"] = number(goodput, where,
                                        "successes.goodput_metrics.request_goodput")
    load = mapping(data.get("load_summary") or {}, where, "load_summary")
    return out, load


# ----------------------------------------------------------------------------- per request
def _entry(e: object, where: Where, i: int) -> tuple:
    """``(start, end, ok, input, output, ttft, gaps, cached)`` of one per-request entry."""
    f = f"[{i}]"
    e = mapping(e, where, f)
    start = finite(require(e, "start_time", where, f + "."), where, f + ".start_time")
    end = finite(require(e, "end_time", where, f + "."), where, f + ".end_time")
    info = mapping(e.get("info") or {}, where, f + ".info")
    isl = dig(info, "request_metrics.text.input_tokens")
    isl = info.get("input_tokens") if isl is None else isl
    isl = -1 if isl is None else tokens(isl, where, f + ".info.input_tokens")
    if e.get("error") is not None:
        return start, end, False, isl, -1, math.nan, np.zeros(0), -1
    rm = info.get("response_metrics")
    rm = mapping(info if rm is None else rm, where, f + ".info.response_metrics")
    usage = mapping(rm.get("server_usage") or {}, where, f + ".info.response_metrics.server_usage")
    osl = usage.get("completion_tokens", rm.get("output_tokens"))
    osl = -1 if osl is None else tokens(osl, where, f + ".info.output_tokens")
    times = num_list(rm.get("output_token_times") or [], where, f + ".info.output_token_times")
    ttft = times[0] - start if len(times) else math.nan
    cached = dig(usage, "prompt_tokens_details.cached_tokens")
    cached = -1 if cached is None else tokens(cached, where, f + ".info.cached_tokens")
    return start, end, True, isl, osl, ttft, np.diff(times), cached


def _per_request(path: Path) -> tuple[dict, dict, list[str]]:
    """Per-request arrays sorted by start time, extras and notes."""
    where = Where(path)
    entries = load_json(path, EXPECTED)
    if not isinstance(entries, list):
        where.fail("top level", f"expected a list of requests, got {json_value(entries)}")
    if not entries:
        raise UserError(f"{path}: top level: no requests")
    rows = sorted((_entry(e, where, i) for i, e in enumerate(entries)), key=lambda r: r[0])
    start, end, ok, isl, osl, ttft, gaps, cached = (list(c) for c in zip(*rows, strict=True))
    start, ok = np.array(start), np.array(ok, dtype=bool)
    flat, offsets = ragged(gaps)
    arrays = dict(input_len=isl, output_len=osl, success=ok, ttft_s=ttft,
                  e2e_s=np.where(ok, np.array(end) - start, np.nan), itl_s=flat,
                  itl_offsets=offsets, send_s=start - start[0])
    notes, extras = [], {}
    if np.isnan(np.asarray(ttft)[ok]).any():
        notes.append("some successful requests have no output token times (non-streaming): "
                     "no TTFT or ITL for them")
    cached = np.array(cached, dtype=np.int64)
    if (cached >= 0).any():
        extras["cached_prompt_tokens"] = cached
    return arrays, extras, notes


# ----------------------------------------------------------------------------- load
def _duration_for(rate: float, count: int) -> float:
    """A stage duration with ``int(rate * duration) == count`` (inference-perf's count)."""
    d = count / rate
    while int(rate * d) < count:
        d = np.nextafter(d, math.inf)
    return float(d)


def _stage_pair(stage: object, i: int, where: Where) -> tuple[float, float]:
    f = f"load.stages[{i}]"
    stage = mapping(stage, where, f)
    pair = tuple(finite(require(stage, k, where, f + "."), where, f"{f}.{k}", low=0)
                 for k in ("rate", "duration"))
    for k, value in zip(("rate", "duration"), pair, strict=True):
        if value == 0:
            where.fail(f"{f}.{k}", "expected a number > 0, got 0")
    return pair


def _config_load(cfg: dict, where: Where) -> tuple[Load | None, list[str]]:
    load = mapping(cfg.get("load") or {}, where, "load")
    kind = load.get("type", "constant")
    seed = integer(load.get("base_seed"), where, "load.base_seed", null_ok=True)
    interval = number(load.get("interval", 1.0), where, "load.interval")
    stages = load.get("stages") or []
    if not isinstance(stages, list):
        where.fail("load.stages", f"expected a list, got {json_value(stages)}")
    if kind in ("constant", "poisson"):
        if not stages:
            return None, []
        pairs = tuple(_stage_pair(s, i, where) for i, s in enumerate(stages))
        return Load("stages", stages=pairs, arrival=kind, seed=seed,
                    stage_interval_s=interval), []
    if kind == "concurrent" and len(stages) == 1:
        stage = mapping(stages[0], where, "load.stages[0]")
        level = integer(require(stage, "concurrency_level", where, "load.stages[0]."), where,
                        "load.stages[0].concurrency_level", low=1)
        return Load("concurrency", concurrency=level, seed=seed), []
    note = (f"load.type {kind} with {len(stages)} stages: the replay uses the recorded send "
            "times")
    return Load("rate", math.nan, arrival="trace", seed=seed), [note]


def _stage_load(stage_loads: dict[int, dict], where: Where) -> tuple[Load, list[str]]:
    """The load from the stage reports alone (no ``config.yaml``)."""
    rates = [(number(s.get("requested_rate"), where, f"stage {k}: load_summary.requested_rate",
                     null_ok=True), s) for k, s in sorted(stage_loads.items())]
    if rates and all(r is not None and r > 0 and math.isfinite(r) for r, _ in rates):
        pairs = tuple((r, _duration_for(r, integer(s.get("count"), where,
                                                   "load_summary.count", low=1)))
                      for r, s in rates)
        return Load("stages", stages=pairs, arrival="constant"), [
            f"no {CONFIG}: stages from the stage reports, load.type taken as constant"]
    return Load("rate", math.nan, arrival="trace"), [
        f"no {CONFIG}: load settings unknown, the replay uses the recorded send times"]


# ----------------------------------------------------------------------------- files
def _locate(path: Path) -> dict:
    folder = path if path.is_dir() else path.parent
    stages = {int(m.group(1)): p for p in folder.glob("stage_*_lifecycle_metrics.json")
              if (m := STAGE.match(p.name))}
    found = {"folder": folder, "stages": stages, "focus": None,
             "summary": folder / SUMMARY, "per_request": folder / PER_REQUEST,
             "config": folder / CONFIG, "prometheus": folder / PROMETHEUS}
    if path.is_file():
        m = STAGE.match(path.name)
        if m:
            found["focus"], found["summary"] = int(m.group(1)), path
        elif path.name == PER_REQUEST:
            found["per_request"] = path
        elif path.name != CONFIG:
            found["summary"] = path
    for key in ("summary", "per_request", "config", "prometheus"):
        found[key] = found[key] if found[key].is_file() else None
    if found["summary"] is None and found["per_request"] is None and not stages:
        raise UserError(f"{path}: no inference-perf report here; expected {SUMMARY}, "
                        f"stage_N_lifecycle_metrics.json or {PER_REQUEST}")
    return found


def _assign_stages(arrays: dict, extras: dict, counts: list[int],
                   focus: int | None) -> list[str]:
    """Set ``arrays["stage"]`` from the stage counts; keep stage ``focus`` alone if given."""
    n = len(arrays["success"])
    if not counts or sum(counts) != n:
        if focus is None:
            return []
        arrays.clear()
        extras.pop("cached_prompt_tokens", None)
        return [f"stage {focus}: its requests cannot be told apart in {PER_REQUEST} "
                f"(stage counts {counts} for {n} requests); per-request data left out"]
    arrays["stage"] = np.repeat(np.arange(len(counts)), counts)
    if focus is None:
        return []
    from serveplan.sim.requests import ragged_take

    idx = np.flatnonzero(arrays["stage"] == focus)
    arrays["itl_s"], arrays["itl_offsets"] = ragged_take(arrays["itl_s"],
                                                         arrays["itl_offsets"], idx)
    for key in ("input_len", "output_len", "success", "ttft_s", "e2e_s", "send_s", "stage"):
        arrays[key] = np.asarray(arrays[key])[idx]
    if len(idx):
        arrays["send_s"] = arrays["send_s"] - arrays["send_s"][0]
    if "cached_prompt_tokens" in extras:
        extras["cached_prompt_tokens"] = extras["cached_prompt_tokens"][idx]
    return []


def _server_extras(path: Path | None) -> dict:
    """Preemptions and prefix-cache hits from the Prometheus summary, where present."""
    if path is None:
        return {}
    where, data = Where(path), load_json(path, EXPECTED)
    out = {}
    for key in ("num_preemptions_total", "prefix_cache_hit_percent"):
        value = dig(data, f"successes.{key}.mean")
        if value is not None:
            out[key] = number(value, where, f"successes.{key}.mean")
    return out


def _config(found: dict) -> tuple[Load | None, str | None, dict, list[str]]:
    """Load, model, extras and notes from ``config.yaml`` (``None``s without it)."""
    if found["config"] is None:
        return None, None, {}, []
    where = Where(found["config"])
    cfg = load_yaml(found["config"], "the inference-perf config.yaml")
    load, notes = _config_load(cfg, where)
    model = dig(cfg, "server.model_name")
    extras = {}
    osl = dig(cfg, "data.output_distribution.mean")
    if osl is not None:
        extras["requested_output_len"] = max(int(round(number(
            osl, where, "data.output_distribution.mean"))), 1)
    return load, model if isinstance(model, str) and model else None, extras, notes


def read_inference_perf(path: str | Path) -> BenchRun:
    """An inference-perf report folder, or one of its lifecycle files (a stage file: that
    stage alone); the files beside it are read too (module docstring)."""
    path = Path(path)
    found = _locate(path)
    summary = _report(found["summary"])[0] if found["summary"] is not None else {}
    stage_loads = {k: _report(p)[1] for k, p in sorted(found["stages"].items())}
    load, model, extras, notes = _config(found)
    if load is None:
        load, more = _stage_load(stage_loads, Where(found["folder"]))
        notes += more
    counts = [integer(s.get("count", 0), Where(found["stages"][k]), "load_summary.count", low=0)
              for k, s in sorted(stage_loads.items())]
    if not counts and load.kind == "stages":
        counts = [int(r * d) for r, d in load.stages]
    arrays: dict = {}
    if found["per_request"] is not None:
        arrays, more_extras, more = _per_request(found["per_request"])
        extras.update(more_extras)
        notes += more + _assign_stages(arrays, extras, counts, found["focus"])
    focus = found["focus"]
    if focus is not None and load.kind == "stages" and focus < len(load.stages):
        load = replace(load, stages=(load.stages[focus],))
    extras.update(_server_extras(found["prometheus"]))
    run = BenchRun(path=path, tool="inference-perf", model=model, load=load, **arrays,
                   summary=summary, extras=extras, warnings=tuple(notes))
    return with_replay_warnings(run)


__all__ = ["CONFIG", "PER_REQUEST", "SUMMARY", "read_inference_perf"]
