"""``python -m sglang.bench_serving --output-file FILE [--output-details]``: read one run.

Schema taken from sgl-project/sglang ``python/sglang/bench_serving.py`` (``benchmark()``
builds ``result`` and, with ``--output-details``, ``result_details``; every run is
appended to the file as one JSON line, so a file often holds a sweep):

* setup: ``backend``, ``dataset_name``, ``request_rate`` (requests/s; ``Infinity``: all at
  once), ``max_concurrency``, ``sharegpt_output_len``, ``random_input_len``,
  ``random_output_len``, ``random_range_ratio``;
* statistics in **milliseconds**: ``mean_/median_/std_/p99_`` + ``ttft``, ``tpot``,
  ``itl`` (and ``p95_itl_ms``), ``e2e_latency``; ``duration`` (s), ``completed``,
  ``total_input_tokens``, ``total_output_tokens`` (and ``_retokenized``),
  ``request_throughput``, ``input_throughput``, ``output_throughput``, ``concurrency``
  (the mean of requests in flight), ``accept_length`` (speculative decoding);
* per request (``--output-details``), in the order the requests were scheduled:
  ``input_lens``, ``output_lens``, ``ttfts`` and ``itls`` in **seconds**,
  ``generated_texts``, ``errors`` ("" when successful).

The file records no model (pass ``--model``; a ``model_id`` key, where a version writes
one, is read as vLLM's), no send times, no per-request latency (E2E is
TTFT plus the ITLs, as its request functions measure it) and no seed. Its gaps are Poisson
(``np.random.exponential``); a ``burstiness`` key, where a version writes one, is read as
vLLM's. A request counts as failed when its error string is not empty, or when it has
neither a first token nor output. A file of several runs is read as ``FILE:LINE`` (the
line of the run; :func:`~serveplan.runs._io.split_line`).
"""

from __future__ import annotations

import json
from pathlib import Path

from serveplan.user_input import UserError

from ._io import Where, iter_jsonl, number, text
from .model import BenchRun
from .vllm import bench_serve_load, bench_serve_requests, bench_serve_summary
from .workload import with_replay_warnings

EXPECTED = "a `python -m sglang.bench_serving --output-file` JSON Lines file"
MARKERS = ("mean_e2e_latency_ms", "total_output_tokens_retokenized")
"""Statistics every SGLang result has and a vLLM one does not (vLLM spells E2E ``e2el``
and does not retokenize): how a file is told apart."""
_EXTRAS = ("backend", "dataset_name", "sharegpt_output_len", "random_input_len",
           "random_output_len", "random_range_ratio", "concurrency", "accept_length",
           "input_throughput", "total_output_tokens_retokenized")


def is_sglang_result(record: dict) -> bool:
    return any(k in record for k in MARKERS)


def run_lines(path: Path) -> list[tuple[int, dict]]:
    """``(line, result)`` of every run; a file re-saved as one indented JSON document is
    one run (on line 1)."""
    try:
        return list(iter_jsonl(path, EXPECTED))
    except UserError:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, OSError):
            data = None
        if not isinstance(data, dict):
            raise
        return [(1, data)]


def _choose(path: Path, line: int | None) -> tuple[int, dict]:
    """The run on ``line`` (1-based, as editors count), or the file's only run."""
    runs = run_lines(path)
    if line is not None:
        for lineno, rec in runs:
            if lineno == line:
                return lineno, rec
        raise UserError(f"{path}:{line}: no run on line {line}; the file's runs are on "
                        f"line{'s' if len(runs) > 1 else ''} "
                        f"{', '.join(str(n) for n, _ in runs)}")
    if len(runs) > 1:
        first, last = runs[0][0], runs[-1][0]
        raise UserError(f"{path}: holds {len(runs)} runs (sglang.bench_serving appends one "
                        f"line per run); name one as {path}:LINE, e.g. {path}:{last} for the "
                        f"last (lines {first}-{last})")
    return runs[0]


def _extras(data: dict, where: Where) -> dict:
    out = {}
    for key in _EXTRAS:
        value = data.get(key)
        if value is not None:
            out[key] = (text(value, where, key) if isinstance(value, str)
                        else number(value, where, key))
    return out


def read_sglang(path: str | Path, line: int | None = None) -> BenchRun:
    """One run of an ``sglang.bench_serving`` output file (module docstring): the file's
    only run, or the one on ``line``."""
    path = Path(path)
    lineno, data = _choose(path, line)
    where = Where(path, lineno)
    if not is_sglang_result(data):
        keys = ", ".join(list(data)[:6]) or "none"
        raise UserError(f"{where}: not an sglang.bench_serving result (none of the keys "
                        f"{', '.join(MARKERS)}; it has {keys}); expected {EXPECTED}")
    load, notes = bench_serve_load({"burstiness": 1.0, **data}, where)
    arrays, more = bench_serve_requests(data, where, no_latencies="")
    model = text(data["model_id"], where, "model_id") if data.get("model_id") else None
    run = BenchRun(path=path, tool="sglang", model=model, load=load, **arrays,
                   summary=bench_serve_summary(data, where), extras=_extras(data, where),
                   warnings=tuple(notes + more), part=line)
    return with_replay_warnings(run)


__all__ = ["EXPECTED", "is_sglang_result", "read_sglang", "run_lines"]
