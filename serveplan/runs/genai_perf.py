"""genai-perf results: ``<prefix>_genai_perf.json`` (statistics and the run's settings) and
perf_analyzer's ``<prefix>.json`` (``--profile-export-file``, default
``profile_export.json``: per-request timestamps and responses).

Schema taken from triton-inference-server/perf_analyzer: ``genai-perf/genai_perf/
export_data/json_exporter.py`` (the statistics plus ``input_config``),
``metrics/statistics.py`` (blocks ``unit, avg, p1..p99 (p25..p99 in 2024), min, max,
std``; system metrics ``request_throughput``, ``output_token_throughput``,
``request_count`` carry ``avg`` only), ``export_data/output_reporter.py`` (time statistics
scaled from ns to ms before any export), ``src/profile_data_exporter.cc`` (the per-request
file) and ``profile_data_parser/llm_profile_data_parser.py`` (how genai-perf measures a
request).

``input_config`` has two layouts:

* flat (``vars(args)``, to about 0.0.12): ``model`` (a list), ``concurrency``,
  ``request_rate``, ``request_count`` (0: unset), ``random_seed``, ``output_tokens_mean``
  (-1: unset);
* nested (the config file, about 0.0.14 on): ``model_names``,
  ``perf_analyzer.stimulus`` (one of ``concurrency``, ``request_rate``, session or
  fixed-schedule keys), ``perf_analyzer.measurement`` (``mode`` ``request_count`` or
  ``interval``, ``num``; ``""`` when unset), ``input.random_seed``,
  ``input.output_tokens.mean``; unset values are ``""``.

Load: a concurrency is a closed loop; a request rate is perf_analyzer's default *constant*
distribution (a ``-- --request-distribution poisson`` pass-through leaves no trace in
either file). With the export the law is read from the recorded send gaps (their
coefficient of variation, :func:`rate_law`) and the replay sends at the recorded times; a
summary alone is replayed at constant gaps and the reader says it assumed them.

Per request (``experiments[].requests[]``): ``timestamp`` and ``response_timestamps`` in
ns since the epoch, written window by window in completion order, so they are sorted by
send time here. As genai-perf does (``_preprocess_response``; its first 2024 versions
still timed TTFT from the role-only chunk), responses without text (the role-only first
chunk, ``data: [DONE]``, usage-only chunks) are dropped: TTFT is the first text response,
E2E the last, the gaps those between text responses. genai-perf counts tokens by
re-tokenizing the texts and keeps only their statistics; without its tokenizer the
output length is the text-carrying stream events of the request (one token per event,
as the OpenAI servers of vLLM, SGLang and TensorRT-LLM stream by default), scaled so
their mean is the summary's ``output_sequence_length``; every prompt is the summary's
mean ``input_sequence_length`` (``triton_c_api`` records token ids: counted exactly). Only
OpenAI streams are filtered: a Triton or C-API request ends at its last response, empty
or not, as genai-perf times it.
perf_analyzer aborts the run on a failed request and leaves warm-up requests out, so
every record is a measured request; one that returned no text is counted as failed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from serveplan.user_input import UserError

from ._io import Where, dig, integer, load_json, mapping, number, ragged, require
from .aiperf import block_summary, metric_blocks
from .model import BenchRun, Load
from .workload import with_replay_warnings

SUFFIX = "_genai_perf.json"
DEFAULT_EXPORT = "profile_export.json"
EXPECTED = f"a genai-perf summary (*{SUFFIX})"
EXPECTED_EXPORT = f"a perf_analyzer profile export ({DEFAULT_EXPORT})"
MARKERS = ("measurement_interval", "perf_analyzer", "formatted_model_name",
           "synthetic_input_tokens_mean", "synthetic_tokens")
"""Keys of genai-perf's ``input_config`` (either layout) that an aiperf export lacks."""
EXPORT_MARKERS = ("experiments", "window_boundaries")
DISTRIBUTION_NOTE = ("request rate: perf_analyzer's default constant distribution assumed "
                     "(a pass-through --request-distribution is not recorded)")
MIN_GAPS_FOR_LAW = 20
"""Send gaps needed (one fewer than sends) before they name the rate's law (:func:`rate_law`)."""
POISSON_MIN_CV = 0.5
"""Gap coefficient of variation above which a rate's sends are read as Poisson."""


class _Settings(NamedTuple):
    """What ``input_config`` says, in either layout (``None``: unset)."""

    model: str | None
    concurrency: int | None
    request_rate: float | None
    other_stimulus: str | None
    seed: int | None
    request_count: int | None
    output_mean: float | None


# ----------------------------------------------------------------------------- settings
def _unset(value: object) -> bool:
    return value is None or value == ""


def _first_name(value: object) -> str | None:
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return value if isinstance(value, str) and value else None


def _positive(value: object, where: Where, field: str) -> float | None:
    """A setting that counts only when positive (genai-perf writes -1 or 0 for unset)."""
    if _unset(value):
        return None
    value = number(value, where, field)
    return value if value > 0 else None


def _nested(config: dict, where: Where) -> _Settings:
    stimulus = dig(config, "perf_analyzer.stimulus") or {}
    mapping(stimulus, where, "input_config.perf_analyzer.stimulus")
    conc, rate = stimulus.get("concurrency"), stimulus.get("request_rate")
    other = next((k for k in stimulus if k not in ("concurrency", "request_rate")), None)
    count = None
    if dig(config, "perf_analyzer.measurement.mode") == "request_count":
        num = dig(config, "perf_analyzer.measurement.num")
        count = (None if _unset(num) else integer(
            num, where, "input_config.perf_analyzer.measurement.num", low=1))
    seed = dig(config, "input.random_seed")
    return _Settings(
        _first_name(config.get("model_names")),
        None if _unset(conc) else integer(conc, where,
                                          "input_config.perf_analyzer.stimulus.concurrency",
                                          low=1),
        _positive(rate, where, "input_config.perf_analyzer.stimulus.request_rate"), other,
        None if _unset(seed) else integer(seed, where, "input_config.input.random_seed"),
        count,
        _positive(dig(config, "input.output_tokens.mean"), where,
                  "input_config.input.output_tokens.mean"))


def _flat(config: dict, where: Where) -> _Settings:
    conc, seed, count = (config.get(k) for k in ("concurrency", "random_seed",
                                                 "request_count"))
    return _Settings(
        _first_name(config.get("model")),
        None if _unset(conc) else integer(conc, where, "input_config.concurrency", low=1),
        _positive(config.get("request_rate"), where, "input_config.request_rate"), None,
        None if _unset(seed) else integer(seed, where, "input_config.random_seed"),
        None if _unset(count) or count == 0 else integer(
            count, where, "input_config.request_count", low=1),
        _positive(config.get("output_tokens_mean"), where, "input_config.output_tokens_mean"))


def settings(config: dict, where: Where) -> _Settings:
    """The run's settings from ``input_config`` of either layout (module docstring)."""
    mapping(config, where, "input_config")
    return _nested(config, where) if "perf_analyzer" in config or "model_names" in config \
        else _flat(config, where)


def rate_law(send_s: np.ndarray | None) -> str | None:
    """``poisson`` or ``constant`` as the recorded send gaps show it (their coefficient of
    variation: about 1 for exponential gaps, near 0 for perf_analyzer's evenly spaced
    schedule, :data:`POISSON_MIN_CV` between); ``None`` with too few sends to tell.
    ``send_s`` is in send order, as a :class:`BenchRun`'s is."""
    if send_s is None or len(send_s) <= MIN_GAPS_FOR_LAW:
        return None
    gaps = np.diff(send_s)
    mean = float(gaps.mean())
    if mean <= 0:
        return None
    return "poisson" if float(gaps.std()) / mean > POISSON_MIN_CV else "constant"


def _load(s: _Settings, send_s: np.ndarray | None = None) -> tuple[Load, list[str]]:
    """The run's load and its notes. A request rate's law is read from the export's
    recorded sends (``send_s``, which the replay then uses); a summary alone is assumed to
    have perf_analyzer's default, the constant law, and says so."""
    if s.concurrency is not None:
        return Load("concurrency", concurrency=s.concurrency, seed=s.seed), []
    if s.request_rate is not None:
        law = rate_law(send_s)
        return Load("rate", s.request_rate, arrival=law or "constant", seed=s.seed), \
            [] if law else [DISTRIBUTION_NOTE]
    what = s.other_stimulus or "neither a concurrency nor a request rate"
    return Load("rate", math.nan, arrival="trace", seed=s.seed), [
        f"load: {what} recorded: the replay uses the recorded send times"]


# ----------------------------------------------------------------------------- per request
def _texts(kind: str, output: object, where: Where, field: str) -> int:
    """Stream events of one response that carry text (token ids for ``triton_c_api``)."""
    if isinstance(output, str):  # (a bare string, as some early exports hold)
        output = {"response" if kind == "openai" else "text_output": output}
    mapping(output, where, field)
    if kind == "triton_c_api":  # an id, a list of them, or "" (counted as one)
        ids = output.get("output_ids", "")
        return len(ids) if isinstance(ids, list) else 1
    if kind != "openai":
        return int(bool(output.get("text_output")))
    raw = output.get("response", "")
    count = 0
    for event in str(raw).split("\n\n"):
        body = event.strip().removeprefix("data:").strip()
        if not body or body == "[DONE]":
            continue
        try:
            choice = (json.loads(body).get("choices") or [{}])[0]
        except (json.JSONDecodeError, AttributeError, IndexError, TypeError):
            continue
        delta = choice.get("delta") if isinstance(choice, dict) else None
        delta = delta if isinstance(delta, dict) else {}
        text = (choice.get("text") if isinstance(choice, dict) else None) or delta.get(
            "content") or delta.get("reasoning_content") or delta.get("reasoning")
        count += bool(text)
    return count


class _Request(NamedTuple):
    send_ns: int
    times_ns: np.ndarray  # the text-carrying responses'
    tokens: int
    prompt: int  # token ids sent (triton_c_api), else -1


def _request(kind: str, rec: object, where: Where, field: str) -> _Request:
    rec = mapping(rec, where, field)
    send = integer(require(rec, "timestamp", where, field + "."), where,
                   field + ".timestamp", low=0)
    stamps = require(rec, "response_timestamps", where, field + ".")
    outputs = require(rec, "response_outputs", where, field + ".")
    if not isinstance(stamps, list) or not isinstance(outputs, list) or \
            len(stamps) != len(outputs):
        where.fail(field, "response_timestamps and response_outputs must be lists of one "
                          "length")
    counts = [_texts(kind, o, where, f"{field}.response_outputs[{i}]")
              for i, o in enumerate(outputs)]
    keep = counts if kind == "openai" else [1] * len(counts)  # as genai-perf drops them
    times = [integer(t, where, f"{field}.response_timestamps[{i}]", low=send)
             for i, (t, k) in enumerate(zip(stamps, keep, strict=True)) if k]
    ids = dig(rec, "request_inputs.input_ids")
    return _Request(send, np.array(times, dtype=np.int64), sum(counts),
                    len(ids) if kind == "triton_c_api" and isinstance(ids, list) else -1)


def _experiment(data: dict, load: Load | None, where: Where) -> tuple[int, dict]:
    runs = require(data, "experiments", where)
    if not isinstance(runs, list) or not runs:
        where.fail("experiments", "expected a non-empty list")
    if len(runs) == 1:
        return 0, mapping(runs[0], where, "experiments[0]")
    want = None if load is None else (
        ("concurrency", float(load.concurrency)) if load.kind == "concurrency"
        else ("request_rate", load.request_rate))
    heads = [(dig(r, "experiment.mode"), dig(r, "experiment.value")) for r in runs]
    for i, (mode, value) in enumerate(heads):
        if want is not None and mode == want[0] and isinstance(value, (int, float)) and \
                abs(value) <= sys.float_info.max and math.isclose(value, want[1]):
            return i, mapping(runs[i], where, f"experiments[{i}]")
    listed = ", ".join(f"{m} {v}" for m, v in heads)
    where.fail("experiments", f"{len(runs)} experiments ({listed}) and no summary's load "
                              f"to pick one by; keep the run's *{SUFFIX} beside it")


def _from_experiment(run: dict, where: Where, field: str) -> _Settings:
    """The load an experiment names (``mode`` concurrency or request_rate, ``value``)."""
    mode, value = dig(run, "experiment.mode"), dig(run, "experiment.value")
    conc = integer(value, where, field + ".experiment.value", low=1) \
        if mode == "concurrency" else None
    rate = _positive(value, where, field + ".experiment.value") \
        if mode == "request_rate" else None
    return _Settings(None, conc, rate, None, None, None, None)


def _read_requests(path: Path, s: _Settings | None) -> tuple[dict, str, _Settings, list[str]]:
    """Per-request arrays (send order), the service kind, the settings (``s``, else the
    experiment's load) and notes of an export."""
    where = Where(path)
    data = mapping(load_json(path, EXPECTED_EXPORT), where, "top level")
    kind = data.get("service_kind") or "openai"
    i, run = _experiment(data, None if s is None else _load(s)[0], where)
    s = s if s is not None else _from_experiment(run, where, f"experiments[{i}]")
    recs = require(run, "requests", where, f"experiments[{i}].")
    if not isinstance(recs, list) or not recs:
        where.fail(f"experiments[{i}].requests", "expected a non-empty list")
    reqs = sorted((_request(kind, r, where, f"experiments[{i}].requests[{j}]")
                   for j, r in enumerate(recs)), key=lambda r: r.send_ns)
    ok = np.array([r.times_ns.size > 0 for r in reqs])
    send = np.array([r.send_ns for r in reqs], dtype=np.int64)
    first = np.array([r.times_ns[0] if r.times_ns.size else -1 for r in reqs])
    last = np.array([r.times_ns[-1] if r.times_ns.size else -1 for r in reqs])
    gaps, offsets = ragged([np.diff(r.times_ns) * 1e-9 for r in reqs])
    arrays = dict(success=ok, ttft_s=np.where(ok, (first - send) * 1e-9, np.nan),
                  e2e_s=np.where(ok, (last - send) * 1e-9, np.nan), itl_s=gaps,
                  itl_offsets=offsets, send_s=(send - send[0]) * 1e-9,
                  output_len=np.array([r.tokens for r in reqs], dtype=np.int64),
                  input_len=np.array([r.prompt for r in reqs], dtype=np.int64))
    notes = [] if ok.all() else [f"{int((~ok).sum())} requests returned no text: counted "
                                 "as failed (genai-perf leaves them out of its statistics)"]
    return arrays, kind, s, notes


# ----------------------------------------------------------------------------- lengths
def _lengths(arrays: dict, kind: str, summary: dict, export: Path) -> list[str]:
    """Fill ``input_len`` and scale ``output_len`` (module docstring); the notes."""
    ok, events = arrays["success"], arrays["output_len"]
    notes = []
    isl = summary.get("mean_input_len")
    if kind != "triton_c_api":
        if isl is None:
            raise UserError(f"{export}: prompt lengths: perf_analyzer's export has no token "
                            f"counts; keep the run's *{SUFFIX} (its input_sequence_length) "
                            "beside it")
        arrays["input_len"] = np.full(len(ok), max(round(isl), 1))
        notes.append(f"prompt lengths: not per request in genai-perf's files; all "
                     f"{round(isl)} tokens (the run's mean)")
    osl = summary.get("mean_output_len")
    mean_events = float(events[ok].mean()) if ok.any() else 0.0
    if kind != "triton_c_api" and osl and mean_events > 0:
        scale = osl / mean_events
        arrays["output_len"] = np.maximum(np.round(events * scale), 1).astype(np.int64)
        notes.append(f"output lengths: text events per request x {scale:.3f}, so their mean "
                     f"is the summary's {osl:.1f} tokens (genai-perf re-tokenizes)")
    elif kind != "triton_c_api":
        notes.append("output lengths: one token per text event (the summary has no "
                     "output_sequence_length to scale them by)")
    arrays["output_len"] = np.where(ok, arrays["output_len"], -1)
    return notes


# ----------------------------------------------------------------------------- files
def _read_summary(path: Path) -> tuple[dict, _Settings]:
    where = Where(path)
    data = mapping(load_json(path, EXPECTED), where, "top level")
    if not any(isinstance(v, dict) and "unit" in v for v in data.values()):
        where.fail("top level", f"no metric blocks ({{\"unit\": ..., \"avg\": ...}}); "
                                f"expected {EXPECTED} or {EXPECTED_EXPORT}")
    return (block_summary(metric_blocks(data, where), where),
            settings(data.get("input_config") or {}, where))


def _count(summary: dict, s: _Settings, path: Path) -> list[str]:
    """Put the request count into ``summary`` when only the settings give it."""
    if "completed" in summary:
        return []
    if s.request_count is not None:
        summary["completed"] = float(s.request_count)
        return [f"request count: {s.request_count}, as input_config asked (the summary has "
                "no request_count)"]
    raise UserError(f"{path}: request_count: not in the summary and not set (a measurement "
                    f"interval run); keep perf_analyzer's {DEFAULT_EXPORT} beside it to "
                    f"replay its requests")


def _is_export(path: Path) -> bool:
    """Whether a file is perf_analyzer's export (its first key is ``experiments``)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return '"experiments"' in f.read(1 << 16)
    except OSError:
        return False


def locate(path: Path) -> tuple[Path | None, Path | None]:
    """The summary and the per-request export of ``path`` (a folder or either file)."""
    if path.is_dir():
        found = sorted(path.glob(f"*{SUFFIX}"))
        if len(found) > 1:
            raise UserError(f"{path}: {len(found)} genai-perf summaries "
                            f"({', '.join(p.name for p in found)}); name one")
        summary = found[0] if found else None
        export = path / (summary.name.removesuffix(SUFFIX) + ".json" if summary
                         else DEFAULT_EXPORT)
    elif path.name.endswith(SUFFIX):
        summary, export = path, path.with_name(path.name.removesuffix(SUFFIX) + ".json")
    elif _is_export(path):
        summary, export = path.with_name(path.stem + SUFFIX), path
    else:  # a summary under another name
        summary, export = path, None
    found = tuple(p if p is not None and p.is_file() else None for p in (summary, export))
    if found == (None, None):
        raise UserError(f"{path}: no genai-perf result here; expected *{SUFFIX} or "
                        f"{DEFAULT_EXPORT}")
    return found


def read_genai_perf(path: str | Path) -> BenchRun:
    """A genai-perf run: its artifact folder, its summary or perf_analyzer's export (the
    other file beside it is read too; module docstring)."""
    path = Path(path)
    summary_path, export = locate(path)
    summary, s, arrays, notes = {}, None, {}, []
    if summary_path is not None:
        summary, s = _read_summary(summary_path)
    if export is not None:
        arrays, kind, s, notes = _read_requests(export, s)
        notes += _lengths(arrays, kind, summary, export)
    else:
        notes += _count(summary, s, summary_path)
    load, more = _load(s, arrays.get("send_s"))
    notes = more + notes
    extras = {} if s.output_mean is None else {"requested_output_len": round(s.output_mean)}
    run = BenchRun(path=path, tool="genai-perf", model=s.model, load=load, **arrays,
                   summary=summary, extras=extras, warnings=tuple(notes))
    return with_replay_warnings(run)


__all__ = ["DEFAULT_EXPORT", "EXPORT_MARKERS", "MARKERS", "SUFFIX", "locate",
           "rate_law", "read_genai_perf", "settings"]
