"""aiperf profile exports: ``profile_export.jsonl`` (per request) and
``profile_export_aiperf.json`` (aggregate statistics and the run's configuration).

Schema taken from ai-dynamo/aiperf: ``docs/tutorials/working-with-profile-exports.md`` and
``src/aiperf/common/models/record_models.py`` (``MetricRecordInfo`` = ``metadata``,
``metrics``, ``error``; ``MetricRecordMetadata``; ``MetricValue`` = ``{"value", "unit"}``),
``docs/reference/json-export-schema.md`` (aggregate blocks ``unit, avg, min, max, p1..p99,
std, count, sum``; ``run_info.random_seed`` since schema 1.2), ``docs/metrics-reference.md``
(metric tags and formulas), ``src/aiperf/common/config/loadgen_config.py`` (``loadgen``:
``request_rate``, ``concurrency``, ``arrival_pattern`` alias ``request_rate_mode``,
``arrival_smoothness``) and the example ``examples/artifacts/run1`` (the 2025 layout).

Units are the ones each value states (``unit`` is authoritative: the JSON Lines file holds
display units, ``ms`` for latencies; raw timestamps are ``ns``). Two layouts exist:

* 2025 (v0.1-0.3): ``metadata.timestamp_ns`` and ``credit_phase``; tags ``ttft``, ``ttst``;
  a failed record has only ``error_request_count``; the aggregate has a ``records`` object;
* 2026: ``metadata.request_start_ns``, ``request_end_ns``, ``benchmark_phase``,
  ``session_num``; tags ``time_to_first_token``, ...; a failed record has ``error_isl``;
  the aggregate has one top-level block per metric and ``schema_version``.

Per request: ``input_sequence_length``; ``output_sequence_length`` (generated tokens,
reasoning included: what the server decoded); ``time_to_first_token``; ``request_latency``
(E2E); ``inter_chunk_latency`` (the list of gaps between chunks, vLLM's ``itls``).
aiperf's own ``inter_token_latency`` is ``(E2E - TTFT) / (OSL - 1)``, vLLM's TPOT, and is
summarised as ``tpot``. Records are written as they are processed, not in send order: they
are sorted by their start timestamp. Warm-up records are left out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from serveplan.user_input import UserError

from ._io import (
    Where,
    dig,
    finite,
    integer,
    iter_jsonl,
    load_json,
    mapping,
    mean_tokens,
    num_list,
    number,
    ragged,
    require,
    seconds_per,
    stat_name,
    tokens,
)
from .model import BenchRun, Load
from .workload import with_replay_warnings

JSONL_NAME = "profile_export.jsonl"
JSON_NAME = "profile_export_aiperf.json"
EXPECTED_JSONL = f"an aiperf {JSONL_NAME} file"
EXPECTED_JSON = f"an aiperf {JSON_NAME} file"
_LATENCIES = {"time_to_first_token": "ttft", "ttft": "ttft", "inter_token_latency": "tpot",
              "inter_chunk_latency": "itl", "request_latency": "e2e",
              "time_to_second_token": "ttst", "ttst": "ttst"}
_TIME_SCALARS = {"benchmark_duration": "duration_s"}
_SCALARS = {"request_throughput": "request_throughput", "goodput": "request_goodput",
            "output_token_throughput": "output_throughput",
            "total_token_throughput": "total_token_throughput", "request_count": "completed",
            "error_request_count": "failed", "total_isl": "total_input_tokens",
            "total_output_tokens": "total_output_tokens"}
_MEANS = {"input_sequence_length": "mean_input_len", "output_sequence_length": "mean_output_len"}
_NOT_STATS = ("unit", "tag", "header", "count", "sum", "current")


class _Record(NamedTuple):
    start_ns: int
    ok: bool
    isl: int
    osl: int
    ttft: float
    e2e: float
    gaps: np.ndarray
    cached: int
    turn: int


# ----------------------------------------------------------------------------- per request
def _value(metrics: dict, names: tuple[str, ...], where: Where) -> tuple[str, object, object]:
    """``(field, value, unit)`` of the first metric of ``names`` present, else ``None``s."""
    for name in names:
        if name in metrics:
            field = f"metrics.{name}"
            m = mapping(metrics[name], where, field)
            return field, require(m, "value", where, field + "."), m.get("unit")
    return f"metrics.{names[0]}", None, None


def _count(metrics: dict, names: tuple[str, ...], where: Where, *, required: bool) -> int:
    field, value, _ = _value(metrics, names, where)
    if value is None:
        if required:
            where.fail(field, "missing")
        return -1
    return tokens(value, where, field + ".value")


def _seconds(metrics: dict, names: tuple[str, ...], where: Where, *, required: bool) -> float:
    field, value, unit = _value(metrics, names, where)
    if value is None:
        if required:
            where.fail(field, "missing")
        return math.nan
    return finite(value, where, field + ".value", low=0) * seconds_per(unit, where,
                                                                      field + ".unit")


def _output_len(metrics: dict, where: Where) -> int:
    if "output_sequence_length" in metrics:
        return _count(metrics, ("output_sequence_length",), where, required=True)
    tokens = _count(metrics, ("output_token_count",), where, required=False)
    if tokens < 0:
        where.fail("metrics.output_sequence_length", "missing")
    return tokens + max(_count(metrics, ("reasoning_token_count",), where, required=False), 0)


def _record(rec: dict, where: Where) -> _Record | None:
    """One JSON Lines record; ``None`` for a warm-up record."""
    meta = mapping(require(rec, "metadata", where), where, "metadata")
    phase = meta.get("benchmark_phase", meta.get("credit_phase", "profiling"))
    if phase == "warmup":
        return None
    key = "request_start_ns" if "request_start_ns" in meta or "timestamp_ns" not in meta \
        else "timestamp_ns"
    start = integer(require(meta, key, where, "metadata."), where, f"metadata.{key}", low=0)
    turn = integer(meta.get("turn_index") or 0, where, "metadata.turn_index", low=0)
    metrics = rec.get("metrics") or {}
    mapping(metrics, where, "metrics")
    cached = _count(metrics, ("usage_prompt_cache_read_tokens",), where, required=False)
    if rec.get("error") is not None:
        isl = _count(metrics, ("error_isl", "input_sequence_length"), where, required=False)
        return _Record(start, False, isl, -1, math.nan, math.nan, np.zeros(0), cached, turn)
    isl = _count(metrics, ("input_sequence_length",), where, required=True)
    osl = _output_len(metrics, where)
    ttft = _seconds(metrics, ("time_to_first_token", "ttft"), where, required=False)
    e2e = _seconds(metrics, ("request_latency",), where, required=True)
    field, value, unit = _value(metrics, ("inter_chunk_latency",), where)
    gaps = np.zeros(0)
    if value is not None:
        gaps = num_list(value, where, field + ".value") * seconds_per(unit, where, field + ".unit")
    return _Record(start, True, isl, osl, ttft, e2e, gaps, cached, turn)


def _read_records(path: Path) -> tuple[dict, dict, list[str]]:
    """Per-request arrays (send order), extras and notes from a JSON Lines export."""
    records, warmup = [], 0
    for lineno, rec in iter_jsonl(path, EXPECTED_JSONL):
        r = _record(rec, Where(path, lineno))
        if r is None:
            warmup += 1
        else:
            records.append(r)
    if not records:
        raise UserError(f"{path}: metadata.benchmark_phase: no profiling records")
    records.sort(key=lambda r: r.start_ns)
    start = np.array([r.start_ns for r in records], dtype=np.int64)
    ok = np.array([r.ok for r in records])
    flat, offsets = ragged([r.gaps for r in records])
    arrays = dict(input_len=[r.isl for r in records], output_len=[r.osl for r in records],
                  success=ok, ttft_s=[r.ttft for r in records], e2e_s=[r.e2e for r in records],
                  itl_s=flat, itl_offsets=offsets, send_s=(start - start[0]) * 1e-9)
    extras, notes = {}, []
    if warmup:
        extras["warmup_requests"] = warmup
        notes.append(f"{warmup} warm-up records left out (aiperf excludes them from its "
                     "statistics)")
    cached = np.array([r.cached for r in records], dtype=np.int64)
    if (cached >= 0).any():
        extras["cached_prompt_tokens"] = cached
    if any(r.turn > 0 for r in records):
        notes.append("multi-turn conversations: later turns are replayed as independent "
                     "requests at their recorded send times")
    if np.isnan(np.asarray(arrays["ttft_s"])[ok]).any():
        notes.append("some successful records have no time_to_first_token (non-streaming)")
    return arrays, extras, notes


# ----------------------------------------------------------------------------- aggregate
def metric_blocks(data: dict, where: Where) -> dict[str, dict]:
    """The statistics blocks (``{"unit": ..., "avg": ...}``) of an aggregate export, by
    metric (genai-perf's summary has the same blocks)."""
    records = data.get("records")
    if isinstance(records, dict):
        return records
    if isinstance(records, list):
        return {r["tag"]: r for r in records if isinstance(r, dict) and "tag" in r}
    blocks = {k: v for k, v in data.items() if isinstance(v, dict) and "unit" in v}
    if not blocks:
        where.fail("records", "missing: no metric blocks ({\"unit\": ..., \"avg\": ...})")
    return blocks


def _latency_into(out: dict, tag: str, block: dict, where: Where) -> None:
    """``{stat}_{metric}_s`` of one latency block, in seconds from its ``unit``."""
    scale = seconds_per(block.get("unit"), where, f"{tag}.unit")
    for stat, value in block.items():
        name = None if stat in _NOT_STATS else stat_name(stat)
        value = number(value, where, f"{tag}.{stat}", null_ok=True) if name else None
        if value is not None:
            out[f"{name}_{_LATENCIES[tag]}_s"] = value * scale


def block_summary(blocks: dict[str, dict], where: Where) -> dict[str, float]:
    """:attr:`BenchRun.summary` of metric blocks: latencies in seconds from their ``unit``."""
    out: dict[str, float] = {}
    for tag, block in blocks.items():
        mapping(block, where, tag)
        if tag in _LATENCIES:
            _latency_into(out, tag, block, where)
            continue
        avg = number(block.get("avg"), where, f"{tag}.avg", null_ok=True)
        if avg is None:
            continue
        if tag in _TIME_SCALARS:
            out[_TIME_SCALARS[tag]] = avg * seconds_per(block.get("unit"), where, f"{tag}.unit")
        elif tag in _SCALARS:
            out[_SCALARS[tag]] = avg
        elif tag in _MEANS:
            out[_MEANS[tag]] = mean_tokens(avg, where, f"{tag}.avg")
    total_osl = number(dig(blocks, "total_osl.avg"), where, "total_osl.avg", null_ok=True)
    if total_osl is not None:  # reasoning included, as vLLM's total_output_tokens
        out["total_output_tokens"] = total_osl
    return out


def _load(config: dict, run_info: dict, where: Where) -> tuple[Load, list[str]]:
    gen = next((g for g in (dig(config, "loadgen"), dig(config, "phases.profiling"))
                if isinstance(g, dict)), {})
    seed = dig(run_info, "random_seed")
    seed = integer(seed if seed is not None else dig(config, "input.random_seed"), where,
                   "run_info.random_seed", null_ok=True)
    rate = number(gen.get("request_rate"), where, "input_config.loadgen.request_rate",
                  null_ok=True)
    conc = gen.get("concurrency")
    conc = None if isinstance(conc, list) else integer(
        conc, where, "input_config.loadgen.concurrency", low=1, null_ok=True)
    pattern = gen.get("arrival_pattern", gen.get("request_rate_mode"))
    smooth = number(gen.get("arrival_smoothness"), where,
                    "input_config.loadgen.arrival_smoothness", null_ok=True)
    if gen.get("fixed_schedule") or dig(config, "input.fixed_schedule"):
        return Load("rate", math.nan, arrival="trace", seed=seed, concurrency=conc), []
    if rate is not None and pattern != "concurrency_burst":
        arrival = pattern if pattern in ("poisson", "gamma", "constant") else "poisson"
        b = smooth if arrival == "gamma" and smooth else 1.0
        return Load("rate", rate, b, conc, arrival=arrival, seed=seed), []
    if conc is not None:
        return Load("concurrency", concurrency=conc, seed=seed), []
    note = "load settings not recorded: the replay uses the recorded send times"
    return Load("rate", math.nan, arrival="trace", seed=seed), [note]


def _read_aggregate(path: Path) -> tuple[dict, Load, str | None, dict, list[str]]:
    """Summary, load, model, extras and notes of ``profile_export_aiperf.json``."""
    where = Where(path)
    data = mapping(load_json(path, EXPECTED_JSON), where, "top level")
    summary = block_summary(metric_blocks(data, where), where)
    config = data.get("input_config") or {}
    mapping(config, where, "input_config")
    load, notes = _load(config, data.get("run_info") or {}, where)
    names = dig(config, "endpoint.model_names")
    model = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    extras = {}
    osl = dig(config, "input.prompt.output_tokens.mean")
    if osl is not None:
        extras["requested_output_len"] = integer(
            osl, where, "input_config.input.prompt.output_tokens.mean", low=1)
    return summary, load, model, extras, notes


# ----------------------------------------------------------------------------- public
def _locate(path: Path) -> tuple[Path | None, Path | None]:
    """The JSON Lines and aggregate exports for ``path`` (a folder or either file; the
    other export beside a file is read too)."""
    folder = path if path.is_dir() else path.parent
    jsonl = path if path.is_file() and path.suffix == ".jsonl" else folder / JSONL_NAME
    agg = path if path.is_file() and path.suffix != ".jsonl" else folder / JSON_NAME
    if path.is_dir():
        jsonl = jsonl if jsonl.is_file() else next(iter(sorted(folder.glob("*.jsonl"))), jsonl)
        agg = agg if agg.is_file() else next(iter(sorted(folder.glob("*_aiperf.json"))), agg)
    found = (jsonl if jsonl.is_file() else None, agg if agg.is_file() else None)
    if found == (None, None):
        raise UserError(f"{path}: no aiperf export here; expected {JSONL_NAME} or {JSON_NAME}")
    return found


def read_aiperf(path: str | Path) -> BenchRun:
    """An aiperf run: a folder with its exports, or either export file (module docstring)."""
    path = Path(path)
    jsonl, agg = _locate(path)
    summary, model, extras, notes = {}, None, {}, []
    load = Load("rate", math.nan, arrival="trace")
    if agg is not None:
        summary, load, model, extras, notes = _read_aggregate(agg)
    else:
        notes.append(f"no {JSON_NAME} beside the records: load settings and summary unknown")
    arrays: dict = {}
    if jsonl is not None:
        arrays, more_extras, more = _read_records(jsonl)
        extras.update(more_extras)
        notes += more
    run = BenchRun(path=path, tool="aiperf", model=model, load=load, **arrays, summary=summary,
                   extras=extras, warnings=tuple(notes))
    return with_replay_warnings(run)


__all__ = ["JSONL_NAME", "JSON_NAME", "block_summary", "metric_blocks", "read_aiperf"]
