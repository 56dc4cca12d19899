"""GuideLLM reports: ``guidellm benchmark ... --output-path benchmarks.json`` (or
``.yaml``), one benchmark per strategy, read one at a time.

Schema taken from vllm-project/guidellm (earlier neuralmagic/guidellm), releases 0.2 to
0.5: ``src/guidellm/benchmark/benchmark.py`` (0.2-0.3) and ``benchmark/schemas/
generative/`` (0.4-0.5), ``scheduler/strategy.py`` / ``strategies.py``,
``objects/statistics.py`` and ``schemas/request_stats.py``. The layouts:

* 0.2-0.3: ``{"benchmarks": [...]}``; a benchmark has ``args.strategy``,
  ``request_totals``, ``request_samples`` (``null`` unless ``--output-sampling`` kept a
  sample) and records with ``start_time``, ``first_token_time``, ``end_time`` (epoch s),
  ``prompt_tokens``, ``output_tokens``; warm-up and cool-down requests are not written;
* 0.4-0.5: ``args`` (and, from 0.5, ``metadata``) beside the benchmarks; a benchmark has
  ``config.strategy``, ``metrics.request_totals`` and records with ``info.timings``
  (``request_start``, ``first_token_iteration``, ``request_end``); warm-up and
  cool-down requests *are* written, so records outside the benchmark's
  ``[start_time, end_time]`` are left out here as GuideLLM leaves them out of its metrics.

Records sit under ``requests.successful``, ``errored`` and ``incomplete`` (requests cut
off when the benchmark ended): the last two are replayed as failures. When the records
are a sample (fewer than ``request_totals``; 0.4.0-0.5.3 wrote every request whatever
``--sample-requests`` said) the run is replayed from its statistics. GuideLLM records
only a request's first and last token, so no inter-token gaps are read; its
``inter_token_latency_ms`` ((last - first) / (output - 1)) is vLLM's TPOT.

Statistics (``metrics.<name>.successful``: ``mean``, ``median``, ``std_dev``, ``min``,
``max``, ``percentiles.p001 .. p999`` with ``p001`` the 0.1th and ``p999`` the 99.9th):
``time_to_first_token_ms`` and ``inter_token_latency_ms`` in ms, ``request_latency`` in
s. Throughputs are the completed requests and their output tokens over the benchmark's
``duration``.

Strategies: ``synchronous`` is a closed loop of one client, ``concurrent`` of
``streams``; ``throughput`` sends everything at once up to ``max_concurrency``;
``constant`` and ``poisson`` are open loops at ``rate`` (``random_seed`` for poisson).
Recorded send times are replayed as they are. A sweep file is read as ``FILE:N``
(benchmark ``N``, from 1, in the order GuideLLM ran and prints them).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from serveplan.user_input import UserError

from ._io import Where, dig, finite, integer, load_json, load_yaml, mapping, number, tokens
from .model import BenchRun, Load
from .workload import with_replay_warnings

EXPECTED = "a GuideLLM report (guidellm benchmark --output-path benchmarks.json)"
DEFAULT_NAME = "benchmarks.json"
STATUSES = ("successful", "errored", "incomplete")
_PERCENTILES = {"p001": "p0.1", "p01": "p1", "p05": "p5", "p10": "p10", "p25": "p25",
                "p50": "p50", "p75": "p75", "p90": "p90", "p95": "p95", "p99": "p99",
                "p999": "p99.9"}
_LATENCIES = {"time_to_first_token_ms": ("ttft", 1e-3), "inter_token_latency_ms": ("tpot", 1e-3),
              "request_latency": ("e2e", 1.0)}
_MODEL_ARG = re.compile(r"""['"]model['"]\s*:\s*['"]([^'"]+)['"]""")


# ----------------------------------------------------------------------------- file
def _yaml_loader():
    """A safe YAML loader that also reads the ``!!python/tuple`` GuideLLM 0.4+ writes."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("tag:yaml.org,2002:python/tuple",
                           lambda loader, node: loader.construct_sequence(node))
    return Loader


def report(path: Path) -> tuple[dict, list]:
    """The report and its benchmarks."""
    where = Where(path)
    if path.suffix in (".yaml", ".yml"):
        data = load_yaml(path, EXPECTED, loader=_yaml_loader())
    else:
        data = mapping(load_json(path, EXPECTED), where, "top level")
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        where.fail("benchmarks", "missing or empty: expected the list of benchmarks GuideLLM "
                                 "writes")
    return data, benchmarks


def _strategy_at(bench: dict) -> tuple[str, dict]:
    """Where a benchmark's scheduling strategy is, in any layout, and the strategy."""
    for key in ("config.strategy", "args.strategy", "scheduler.strategy"):
        found = dig(bench, key)
        if isinstance(found, dict):
            return key, found
    return "config.strategy", {}


def strategy(bench: dict) -> dict:
    """A benchmark's scheduling strategy, in any layout (``{}`` if none)."""
    return _strategy_at(bench)[1]


def label(bench: dict) -> str:
    """``constant@20`` / ``concurrent@4`` / ``synchronous``: how GuideLLM names a run."""
    s = strategy(bench)
    kind, value = s.get("type_", "?"), s.get("rate", s.get("streams"))
    return f"{kind}@{value:g}" if isinstance(value, (int, float)) else str(kind)


def _choose(path: Path, benchmarks: list, number_: int | None) -> tuple[int, dict]:
    """Benchmark ``number_`` (from 1), or the file's only one."""
    where = Where(path)
    if number_ is None and len(benchmarks) > 1:
        runs = ", ".join(f"{i} {label(b)}" for i, b in enumerate(benchmarks, start=1)
                         if isinstance(b, dict))
        raise UserError(f"{path}: holds {len(benchmarks)} benchmarks ({runs}); name one as "
                        f"{path}:N, e.g. {path}:{len(benchmarks)} for the last")
    if number_ is not None and not 1 <= number_ <= len(benchmarks):
        raise UserError(f"{path}:{number_}: no benchmark {number_}; the file has "
                        f"{len(benchmarks)} (1-{len(benchmarks)})")
    i = 0 if number_ is None else number_ - 1
    return i, mapping(benchmarks[i], where, f"benchmarks[{i}]")


# ----------------------------------------------------------------------------- load, model
def _load(bench: dict, where: Where, field: str) -> Load:
    key, s = _strategy_at(bench)
    field = f"{field}.{key.removesuffix('.strategy')}"
    kind = s.get("type_")
    cap = integer(s.get("max_concurrency"), where, f"{field}.strategy.max_concurrency",
                  low=1, null_ok=True)
    if kind == "synchronous":
        return Load("concurrency", concurrency=1)
    if kind == "concurrent":
        streams = integer(s.get("streams"), where, f"{field}.strategy.streams", low=1)
        return Load("concurrency", concurrency=streams)
    if kind == "throughput":
        return Load("rate", math.inf, concurrency=cap)
    if kind in ("constant", "poisson"):
        rate = number(s.get("rate"), where, f"{field}.strategy.rate")
        if not rate > 0:
            where.fail(f"{field}.strategy.rate", f"expected a number > 0, got {rate}")
        seed = integer(s.get("random_seed"), where, f"{field}.strategy.random_seed",
                       null_ok=True)
        return Load("rate", rate, concurrency=cap, arrival=kind, seed=seed)
    where.fail(f"{field}.strategy.type_", f"unknown strategy {kind!r}; expected synchronous, "
                                          "concurrent, throughput, constant or poisson")


def _model(data: dict, bench: dict) -> str | None:
    for key in ("worker.backend_model", "config.backend.model", "benchmarker.backend.model"):
        if isinstance(dig(bench, key), str):
            return dig(bench, key)
    if isinstance(dig(data, "args.model"), str):
        return dig(data, "args.model")
    for status in STATUSES:  # 0.4+ without --model: the one the requests named
        for rec in dig(bench, f"requests.{status}") or []:
            m = _MODEL_ARG.search(str(rec.get("request_args", ""))) if isinstance(
                rec, dict) else None
            if m:
                return m[1]
    return None


# ----------------------------------------------------------------------------- records
class _Record(NamedTuple):
    start: float
    end: float
    first: float
    ok: bool
    prompt: int
    output: int


def _time(value: object, where: Where, field: str) -> float:
    """An epoch time; NaN for null or GuideLLM's -1 (not reached)."""
    t = finite(value, where, field, null_ok=True)
    return math.nan if t is None or t < 0 else t


def _record(rec: object, ok: bool, where: Where, field: str) -> _Record | None:
    """One record; ``None`` for a request that never started (cancelled in the queue)."""
    rec = mapping(rec, where, field)
    timings = dig(rec, "info.timings")
    if isinstance(timings, dict):  # 0.4+
        keys, sub = ("request_start", "request_end", "first_token_iteration"), timings
        prefix = f"{field}.info.timings."
    else:
        keys, sub, prefix = ("start_time", "end_time", "first_token_time"), rec, f"{field}."
    start, end, first = (_time(sub.get(k), where, prefix + k) for k in keys)
    if math.isnan(start):
        return None
    counts = [tokens(rec.get(k), where, f"{field}.{k}", null_ok=True)
              for k in ("prompt_tokens", "output_tokens")]
    ok = ok and not (math.isnan(first) or math.isnan(end))
    return _Record(start, end, first, ok, -1 if counts[0] is None else counts[0],
                   counts[1] if ok and counts[1] is not None else -1)


def request_totals(bench: dict) -> dict | None:
    """The measured requests per status, as the benchmark counts them."""
    totals = bench.get("request_totals", dig(bench, "metrics.request_totals"))
    return totals if isinstance(totals, dict) else None


def _records(bench: dict, where: Where, field: str) -> tuple[list[_Record], dict[str, int]]:
    """Records inside the benchmark's window (send order) and how many of each status."""
    lo = number(bench.get("start_time"), where, f"{field}.start_time", null_ok=True)
    hi = number(bench.get("end_time"), where, f"{field}.end_time", null_ok=True)
    kept, counts = [], {}
    for status in STATUSES:
        recs = dig(bench, f"requests.{status}") or []
        if not isinstance(recs, list):
            where.fail(f"{field}.requests.{status}", "expected a list of request records")
        rows = [_record(r, status == "successful", where, f"{field}.requests.{status}[{j}]")
                for j, r in enumerate(recs)]
        rows = [r for r in rows if r is not None and (hi is None or r.start <= hi)
                and (lo is None or math.isnan(r.end) or r.end >= lo)]
        counts[status] = len(rows)
        kept += rows
    return sorted(kept, key=lambda r: r.start), counts


def _arrays(records: list[_Record]) -> dict:
    start = np.array([r.start for r in records])
    ok = np.array([r.ok for r in records])
    ttft = np.array([r.first - r.start for r in records])
    e2e = np.array([r.end - r.start for r in records])
    return dict(success=ok, ttft_s=np.where(ok, ttft, np.nan), e2e_s=np.where(ok, e2e, np.nan),
                input_len=[r.prompt for r in records], output_len=[r.output for r in records],
                send_s=start - start.min())


def _sampled(counts: dict[str, int], totals: dict | None) -> str | None:
    """Why the records are not every measured request, if they are not."""
    if totals is None:
        return None
    # (not the incomplete ones: a request cancelled in the queue has no record)
    short = {s: (counts[s], totals[s]) for s in ("successful", "errored")
             if isinstance(totals.get(s), int) and counts[s] < totals[s]}
    if not short:
        return None
    listed = ", ".join(f"{s} {n} of {t}" for s, (n, t) in short.items())
    return (f"the records are a sample ({listed}; --output-sampling / --sample-requests): "
            "replayed from the statistics instead")


# ----------------------------------------------------------------------------- statistics
def _distribution_into(out: dict, tag: str, scale: float, dist: dict) -> None:
    for stat, name in (("mean", "mean"), ("median", "p50"), ("std_dev", "std"),
                       ("min", "min"), ("max", "max")):
        if isinstance(dist.get(stat), (int, float)):
            out[f"{name}_{tag}_s"] = dist[stat] * scale
    for key, name in _PERCENTILES.items():
        value = dig(dist, f"percentiles.{key}")
        if isinstance(value, (int, float)):
            out[f"{name}_{tag}_s"] = value * scale


def _statistics(bench: dict, totals: dict | None) -> dict[str, float]:
    """:attr:`BenchRun.summary` of a benchmark's ``metrics`` (module docstring)."""
    out: dict[str, float] = {}
    metrics = bench.get("metrics") or {}
    for name, (tag, scale) in _LATENCIES.items():
        dist = dig(metrics, f"{name}.successful")
        if isinstance(dist, dict) and dist.get("count"):
            _distribution_into(out, tag, scale, dist)
    if totals is not None:
        out["completed"] = float(totals.get("successful") or 0)
        out["failed"] = float((totals.get("errored") or 0) + (totals.get("incomplete") or 0))
    for name, total, mean in (("prompt_token_count", "total_input_tokens", "mean_input_len"),
                              ("output_token_count", "total_output_tokens",
                               "mean_output_len")):
        dist = dig(metrics, f"{name}.successful") or {}
        if isinstance(dist.get("total_sum"), (int, float)):
            out[total] = float(dist["total_sum"])
        if isinstance(dist.get("mean"), (int, float)) and dist.get("count"):
            out[mean] = float(dist["mean"])
    duration = bench.get("duration")
    if isinstance(duration, (int, float)) and duration > 0:
        out["duration_s"] = float(duration)
        out["request_throughput"] = out.get("completed", 0.0) / duration
        out["output_throughput"] = out.get("total_output_tokens", 0.0) / duration
    return out


# ----------------------------------------------------------------------------- public
def locate(path: Path) -> Path:
    """The report of ``path``: the file, or ``benchmarks.json`` in a folder."""
    if path.is_dir():
        if not (path / DEFAULT_NAME).is_file():
            raise UserError(f"{path}: no {DEFAULT_NAME} here; expected {EXPECTED}")
        return path / DEFAULT_NAME
    return path


def read_guidellm(path: str | Path, number_: int | None = None) -> BenchRun:
    """One benchmark of a GuideLLM report (module docstring): the file's only one, or
    benchmark ``number_`` (from 1)."""
    given = Path(path)
    path = locate(given)
    data, benchmarks = report(path)
    i, bench = _choose(path, benchmarks, number_)
    where, field = Where(path), f"benchmarks[{i}]"
    load = _load(bench, where, field)
    records, counts = _records(bench, where, field)
    totals = request_totals(bench)
    sampled = _sampled(counts, totals)
    arrays = {} if sampled or not records else _arrays(records)
    notes = [sampled] if sampled else []
    if counts["incomplete"] and not sampled:
        notes.append(f"{counts['incomplete']} requests were cut off when the benchmark ended: "
                     "replayed as failures")
    extras = {"guidellm_strategy": label(bench)}
    run = BenchRun(path=given, tool="guidellm", model=_model(data, bench), load=load, **arrays,
                   summary=_statistics(bench, totals), extras=extras, warnings=tuple(notes),
                   part=number_)
    return with_replay_warnings(run)


__all__ = ["DEFAULT_NAME", "EXPECTED", "STATUSES", "label", "locate", "read_guidellm",
           "report", "request_totals", "strategy"]
