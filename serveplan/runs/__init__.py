"""Real benchmark results in one in-memory form, and the workload that produced them.

:func:`read_run` reads the result of ``vllm bench serve`` (:mod:`.vllm`),
``sglang.bench_serving`` (:mod:`.sglang`), aiperf (:mod:`.aiperf`), genai-perf
(:mod:`.genai_perf`), GuideLLM (:mod:`.guidellm`) or inference-perf
(:mod:`.inference_perf`) into a
:class:`~serveplan.runs.model.BenchRun` (seconds, send order);
:func:`~serveplan.runs.workload.requests_for` rebuilds its requests for the simulator, and
:func:`~serveplan.runs.vllm.write_vllm` writes any run (a simulation too) as vLLM does.

A file that is not a result, or a malformed one, raises
:class:`~serveplan.user_input.UserError` with one message naming the file, the field and,
in JSON Lines, the line.
"""

from __future__ import annotations

import re
from pathlib import Path

from serveplan.user_input import UserError, check_text_file

from ._io import split_line
from .aiperf import JSON_NAME, JSONL_NAME, read_aiperf
from .genai_perf import DEFAULT_EXPORT, EXPORT_MARKERS, SUFFIX, read_genai_perf
from .genai_perf import MARKERS as GENAI_PERF_MARKERS
from .guidellm import DEFAULT_NAME as GUIDELLM_NAME
from .guidellm import locate as locate_guidellm
from .guidellm import read_guidellm, report
from .inference_perf import PER_REQUEST, SUMMARY, read_inference_perf
from .model import BenchRun, Load, describe_load, run_from_arrays
from .sglang import MARKERS, read_sglang, run_lines
from .vllm import read_vllm, write_vllm
from .workload import requests_for

READERS = {"vllm": read_vllm, "sglang": read_sglang, "aiperf": read_aiperf,
           "genai-perf": read_genai_perf, "guidellm": read_guidellm,
           "inference-perf": read_inference_perf}
NUMBERED = {"sglang": "a line of an sglang.bench_serving file",
            "guidellm": "a benchmark of a GuideLLM report"}
"""The tools whose files hold several runs, read one at a time as ``FILE:N``."""
_IP_NAME = re.compile(r"(^|_)lifecycle_metrics\.json$|^config\.yaml$")
_KEY = r'"{}"\s*:'
_AIPERF_KEYS = ("aiperf_version", "schema_version", "records")
_SNIFF = (("inference-perf", ("load_summary", "successes", "benchmark_time_seconds")),
          ("genai-perf", EXPORT_MARKERS),
          ("aiperf", _AIPERF_KEYS),
          ("sglang", MARKERS),
          ("vllm", ("num_prompts", "completed", "request_throughput", "ttfts", "input_lens",
                    "mean_ttft_ms", "endpoint_type", "backend")))
UNKNOWN = ("expected a `vllm bench serve --save-result` JSON (keys completed, ttfts, ...), "
           "an `sglang.bench_serving --output-file` JSON Lines file, "
           f"an aiperf export ({JSONL_NAME}, {JSON_NAME}), a genai-perf one (*{SUFFIX}, "
           f"{DEFAULT_EXPORT}), a GuideLLM report ({GUIDELLM_NAME}) or an inference-perf "
           f"report ({SUMMARY}, {PER_REQUEST})")
_YAML_BENCHMARKS = re.compile(r"^benchmarks:", re.MULTILINE)


def _head(path: Path) -> str:
    """The first 64 KiB of a text file: enough to tell its tool by its keys."""
    check_text_file(path, "a benchmark result (JSON)")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(1 << 16)


def _has_key(head: str, keys) -> bool:
    return any(re.search(_KEY.format(k), head) for k in keys)


def _sniff(path: Path) -> str:
    """The tool of a JSON file, from the keys in its first 64 KiB."""
    head = _head(path)
    if not head.strip():
        raise UserError(f"{path}: empty file; {UNKNOWN}")
    if head.lstrip().startswith("[") and _has_key(head, ("start_time",)):
        return "inference-perf"
    json_report = _has_key(head, ("benchmarks",))  # no other tool writes that key
    if json_report or (path.suffix in (".yaml", ".yml") and _YAML_BENCHMARKS.search(head)):
        return "guidellm"
    if _has_key(head, ("unit",)) and _has_key(head, ("avg",)):
        genai = _has_key(head, GENAI_PERF_MARKERS) and not _has_key(head, _AIPERF_KEYS)
        return "genai-perf" if genai else "aiperf"
    for tool, keys in _SNIFF:
        if _has_key(head, keys):
            return tool
    raise UserError(f"{path}: unknown benchmark result (none of the keys completed, "
                    f"successes, records, ...); {UNKNOWN}")


def detect_tool(path: str | Path) -> str:
    """``vllm``, ``sglang``, ``aiperf``, ``genai-perf``, ``guidellm`` or ``inference-perf``
    for a result file or folder."""
    path = Path(path)
    if path.is_dir():
        names = {p.name for p in path.iterdir()}
        if any(n.endswith(SUFFIX) for n in names):
            return "genai-perf"
        if JSONL_NAME in names or JSON_NAME in names or any(
                n.endswith(("_aiperf.json", ".jsonl")) for n in names):
            return "aiperf"
        if any(_IP_NAME.search(n) for n in names):
            return "inference-perf"
        if DEFAULT_EXPORT in names:
            return "genai-perf"
        if GUIDELLM_NAME in names:
            return "guidellm"
        raise UserError(f"{path}: no benchmark result in this folder; {UNKNOWN}")
    if not path.is_file():
        raise UserError(f"{path}: no such file or folder")
    if path.suffix == ".jsonl":  # an aiperf record has metadata and metrics instead
        return "sglang" if _has_key(_head(path), MARKERS) else "aiperf"
    if path.name.endswith("_aiperf.json"):
        return "aiperf"
    if path.name.endswith(SUFFIX):
        return "genai-perf"
    if _IP_NAME.search(path.name):
        return "inference-perf"
    return _sniff(path)


def run_numbers(path: str | Path, tool: str | None = None) -> list[int]:
    """The ``N`` of every ``FILE:N`` a file of several runs holds (SGLang lines, GuideLLM
    benchmarks); empty for a file of one run, or of a tool that writes one per file."""
    path, line = split_line(path)
    if line is not None or not path.exists():
        return []
    tool = tool or detect_tool(path)
    if tool == "sglang":
        numbers = [n for n, _ in run_lines(path)]
    elif tool == "guidellm":
        numbers = list(range(1, len(report(locate_guidellm(path))[1]) + 1))
    else:
        numbers = []
    return numbers if len(numbers) > 1 else []


def read_run(path: str | Path, tool: str | None = None) -> BenchRun:
    """A benchmark result (file or folder) as a :class:`BenchRun`.

    Parameters
    ----------
    path : path
        A ``vllm bench serve`` JSON, an ``sglang.bench_serving`` output file (``FILE:LINE``
        for one run of several), an aiperf export (``profile_export.jsonl``,
        ``profile_export_aiperf.json`` or their folder), a genai-perf export
        (``*_genai_perf.json``, perf_analyzer's ``profile_export.json`` or their folder), a
        GuideLLM report (``benchmarks.json`` or ``.yaml``; ``FILE:N`` for benchmark ``N``
        of several), or an inference-perf report (its folder or one of its lifecycle JSON
        files).
    tool : {"vllm", "sglang", "aiperf", "genai-perf", "guidellm", "inference-perf"}, optional
        The tool that wrote it; default: detected from file names and keys.

    Raises
    ------
    UserError
        One message naming the file and the missing or bad field.
    """
    path, line = split_line(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if tool is None:
        tool = detect_tool(path)
    if tool not in READERS:
        raise UserError(f"{path}: format {tool!r}: expected one of {', '.join(READERS)}")
    if line is None:
        return READERS[tool](path)
    if tool not in NUMBERED:
        raise UserError(f"{path}:{line}: FILE:N picks {' or '.join(NUMBERED.values())}; "
                        f"{path.name} is a {tool} result (name the file alone)")
    return READERS[tool](path, line)


__all__ = ["NUMBERED", "READERS", "BenchRun", "Load", "describe_load", "detect_tool",
           "read_aiperf", "read_genai_perf", "read_guidellm", "read_inference_perf",
           "read_run", "read_sglang", "read_vllm", "requests_for", "run_from_arrays",
           "run_numbers", "write_vllm"]
