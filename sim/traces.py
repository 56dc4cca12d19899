"""Readers for real request traces.

* Azure LLM inference trace 2023 (Splitwise): CSV ``TIMESTAMP, ContextTokens, GeneratedTokens``
  -- :func:`read_azure`.
* Mooncake FAST'25 (Kimi): JSON Lines ``timestamp`` (ms), ``input_length``, ``output_length``,
  ``hash_ids`` (one id per 512-token prefix block) -- :func:`read_mooncake`.
* Vidur processed length traces: CSV ``num_prefill_tokens, num_decode_tokens`` and, in the
  ``splitwise_*`` files, ``arrived_at`` (s) -- :func:`read_vidur`.

:func:`read_trace` picks the reader from the file. Every reader returns a :class:`Trace`: the parsed
columns plus the number of skipped bad lines; ``Trace.to_requests()`` gives the simulator's
:class:`~serveplan.sim.workload.Requests` and ``Trace.prompt_dist()`` / ``output_dist()`` give
empirical length distributions.

Bad lines (wrong field count, a value that is not a positive integer -- a negative token count
is named as such --, an unparsable timestamp, invalid JSON, hash ids inconsistent with the prompt
length) raise :class:`TraceError` with the file, the 1-based line number and what is wrong; with
``skip_bad_lines=True`` they are skipped and counted instead. Timestamps must not go back in file
order: the first one earlier than the line before it raises :class:`TraceError` naming both lines,
with or without ``skip_bad_lines`` (a trace out of order is not a bad line to drop). Blank lines are ignored. ``limit`` stops after that many good requests. CSV files are split
line by line in Python and converted column-wise with numpy/pandas in chunks (about 1 s per million
lines); fields must not contain quoted commas.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd

from .lengths import Empirical
from .requests import MOONCAKE_BLOCK_SIZE, Requests, ragged_take

_CHUNK_LINES = 1 << 16
LINE = "_line"  # the line-number column of a line-by-line CSV read
_MAX_EXAMPLES = 10

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
VIDUR_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")


class TraceError(ValueError):
    """A trace file is malformed: the message names the file, the line and the problem."""


@dataclass(frozen=True, eq=False)
class Trace:
    """Columns read from a trace file.

    Attributes
    ----------
    path : Path
        The file read.
    prompt_len, output_len : int64[n]
        Prompt and output tokens (>= 1), in file order.
    arrival_s : float64[n] or None
        Arrival times in seconds relative to the earliest request read; ``None`` if the file has
        no timestamps (ShareGPT / arXiv length files).
    hash_ids, hash_offsets, hash_block_size
        Prefix-block hash ids as in :class:`~serveplan.sim.workload.Requests` (Mooncake only).
    skipped_lines : int
        Bad lines skipped (only with ``skip_bad_lines=True``; lines after ``limit`` are not read).
    skipped_examples : tuple of str
        Messages of the first few skipped lines.
    """

    path: Path
    prompt_len: np.ndarray
    output_len: np.ndarray
    arrival_s: np.ndarray | None = None
    hash_ids: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    hash_block_size: int | None = None
    skipped_lines: int = 0
    skipped_examples: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.prompt_len)

    def prompt_dist(self) -> Empirical:
        """Empirical distribution of the prompt lengths."""
        return Empirical(self.prompt_len)

    def output_dist(self) -> Empirical:
        """Empirical distribution of the output lengths."""
        return Empirical(self.output_len)

    def to_requests(self, arrival_s: np.ndarray | None = None, *, time_scale: float = 1.0,
                    rate: float | None = None) -> Requests:
        """Requests in arrival order.

        Parameters
        ----------
        arrival_s : float64[n], optional
            Arrival times to use instead of the trace's own (required if it has none), e.g.
            ``PoissonArrivals(rate).sample(len(trace), seed)``.
        time_scale : float
            Replay speed-up (2 = twice as fast); see :class:`~serveplan.sim.workload.TraceArrivals`.
        rate : float, optional
            Rescale the arrivals to this mean rate (requests/s) instead.

        Notes
        -----
        Requests are stably sorted by arrival time if ``arrival_s`` is not (the readers
        reject files whose timestamps are out of order).
        """
        if arrival_s is None:
            if self.arrival_s is None:
                raise ValueError(f"{self.path} has no timestamps; pass arrival_s, e.g. "
                                 "PoissonArrivals(rate).sample(len(trace), seed)")
            arrival_s = self.arrival_s
        arrival_s = np.asarray(arrival_s, dtype=np.float64)
        if len(arrival_s) != len(self):
            raise ValueError(f"arrival_s has {len(arrival_s)} entries, the trace {len(self)}")
        hashes = {}
        if self.hash_ids is not None:
            hashes = dict(hash_ids=self.hash_ids, hash_offsets=self.hash_offsets,
                          hash_block_size=self.hash_block_size)
        fields = dict(arrival_s=arrival_s, prompt_len=self.prompt_len, output_len=self.output_len)
        if len(arrival_s) > 1 and np.any(arrival_s[1:] < arrival_s[:-1]):
            order = np.argsort(arrival_s, kind="stable")
            fields = {k: v[order] for k, v in fields.items()}
            if hashes:
                hashes["hash_ids"], hashes["hash_offsets"] = ragged_take(
                    self.hash_ids, self.hash_offsets, order)
        requests = Requests(**fields, **hashes)
        if time_scale != 1.0 or rate is not None:
            requests = requests.retimed(time_scale=time_scale, rate=rate)
        return requests


# --------------------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------------------


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"trace file {path} {what}")
    return path


def _check_limit(limit: int | None) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")
    return limit


class _BadLines:
    """Raise on the first bad line, or count them when skipping."""

    def __init__(self, path: Path, skip: bool) -> None:
        self.path, self.skip, self.count, self.examples = path, skip, 0, []

    def __call__(self, lineno: int, message: str) -> None:
        text = f"{self.path} line {lineno}: {message}"
        if not self.skip:
            raise TraceError(text)
        self.count += 1
        if len(self.examples) < _MAX_EXAMPLES:
            self.examples.append(text)


def _count_values(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.char.strip(s)
    ok = np.char.isdecimal(s) & (np.char.str_len(s) <= 18)
    values = np.zeros(len(s), dtype=np.int64)
    values[ok] = s[ok].astype(np.int64)
    return values, ok & (values >= 1)


def _count_problem(raw: str) -> str:
    s = raw.strip()
    digits = s[1:] if s[:1] in "+-" else s
    if digits.isdecimal() and len(digits) <= 18:
        return f"{raw!r} must be >= 1 (a token count)"
    return f"{raw!r} is not an integer"


def _seconds_values(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = pd.to_numeric(pd.Series(s, dtype=object), errors="coerce").to_numpy(np.float64)
    return values, np.isfinite(values) & (values >= 0)


def _time_values(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = pd.to_datetime(pd.Series(s, dtype=object), format="ISO8601", errors="coerce")
    values = t.to_numpy("datetime64[ns]")
    return values.view(np.int64), ~np.isnat(values)


_KINDS = {  # kind -> (vectorised converter, message for one bad raw value)
    "count": (_count_values, _count_problem),
    "seconds": (_seconds_values, lambda raw: f"{raw!r} is not a finite number >= 0"),
    "time": (_time_values, lambda raw: f"{raw!r} is not a timestamp 'YYYY-MM-DD HH:MM:SS[.f]'"),
}


def _csv_columns(path: Path, kinds: dict[str, str], optional: tuple[str, ...]):
    """Names, positions and width of the wanted columns; a missing required column raises."""
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n")
    names = [h.strip() for h in header.split(",")] if header.strip() else []
    for col in kinds:
        if col not in names and col not in optional:
            raise TraceError(f"{path}: missing column {col!r} (header has {names})")
    cols = [c for c in kinds if c in names]
    return cols, [names.index(c) for c in cols], len(names)


def _read_csv(path: Path, kinds: dict[str, str], optional: tuple[str, ...], limit: int | None,
              bad: _BadLines) -> dict[str, np.ndarray]:
    """Read the named columns of a simple CSV file, converting them by kind.

    Fast path: pandas' C parser, then the vectorised converters. If that fails or finds an invalid
    value, the file is read again line by line (in chunks) to report or skip the bad lines with
    their line numbers.
    """
    cols, pos, width = _csv_columns(path, kinds, optional)
    try:
        df = pd.read_csv(path, usecols=pos, dtype=str, keep_default_na=False, nrows=limit)
        converted = [_KINDS[kinds[c]][0](df.iloc[:, sorted(pos).index(p)].to_numpy(dtype=str))
                     for c, p in zip(cols, pos, strict=True)] if len(df) else None
        if converted is not None and all(ok.all() for _, ok in converted):
            return {c: v for c, (v, _) in zip(cols, converted, strict=True)}
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError):
        pass
    return _read_csv_lines(path, kinds, cols, pos, width, limit, bad)


def _read_csv_lines(path: Path, kinds: dict[str, str], cols: list[str], pos: list[int],
                    width: int, limit: int | None, bad: _BadLines) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {c: [] for c in [*cols, LINE]}
    have = 0
    rows: list[list[str]] = []
    linenos: list[int] = []

    def flush() -> None:
        nonlocal have, rows, linenos
        if not rows:
            return
        table = np.array(rows, dtype=str).reshape(len(rows), width)
        converted = {c: _KINDS[kinds[c]][0](table[:, p]) for c, p in zip(cols, pos, strict=True)}
        ok = np.logical_and.reduce([good for _, good in converted.values()])
        for r in np.flatnonzero(~ok):
            c, p = next((c, p) for c, p in zip(cols, pos, strict=True) if not converted[c][1][r])
            bad(linenos[r], f"{c} {_KINDS[kinds[c]][1](str(table[r, p]))}")
        keep = np.flatnonzero(ok)
        if limit is not None:
            keep = keep[: limit - have]
        for c in cols:
            out[c].append(converted[c][0][keep])
        out[LINE].append(np.asarray(linenos, dtype=np.int64)[keep])
        have += len(keep)
        rows, linenos = [], []

    with open(path, encoding="utf-8") as f:
        f.readline()
        for lineno, line in enumerate(f, start=2):
            if limit is not None and have + len(rows) >= limit:
                flush()
                if have >= limit:
                    break
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split(",")
            if len(parts) != width:
                flush()  # earlier lines first, so that the first bad line is the one reported
                cut = " (truncated line?)" if len(parts) < width else ""
                bad(lineno, f"expected {width} comma-separated fields, found {len(parts)}{cut}")
                continue
            rows.append(parts)
            linenos.append(lineno)
            if len(rows) >= _CHUNK_LINES:
                flush()
        flush()
    return {c: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for c, v in out.items()}


def _nonblank_lines(path: Path, first: int, n: int) -> np.ndarray:
    """Line numbers of the first ``n`` non-blank lines from line ``first`` (1-based): the rows
    a clean file's fast parse returned."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if lineno >= first and line.strip():
                out.append(lineno)
                if len(out) == n:
                    break
    return np.asarray(out, dtype=np.int64)


def _number(v) -> str:
    return repr(float(v))


def _check_sorted(path: Path, t: np.ndarray, lines, what: str, show) -> None:
    """Raise :class:`TraceError` at the first row earlier than the row before it.

    ``lines`` is the rows' line numbers, or a callable giving them (only called on error).
    """
    if len(t) < 2:
        return
    back = t[1:] < t[:-1]
    if back.any():
        i = int(np.argmax(back)) + 1
        lines = lines() if callable(lines) else lines
        raise TraceError(f"{path} line {lines[i]}: {what} {show(t[i])} is earlier than "
                         f"{show(t[i - 1])} on line {lines[i - 1]}; the trace must be sorted "
                         "by time")


def _csv_lines(path: Path, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Line numbers of the rows of :func:`_read_csv` (the header is line 1)."""
    if LINE in cols:
        return cols[LINE]
    return _nonblank_lines(path, 2, len(next(iter(cols.values()))))


def _relative_seconds(t: np.ndarray, per_second: float) -> np.ndarray:
    return (t - t.min()).astype(np.float64) / per_second if len(t) else np.zeros(0)


# --------------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------------


def read_azure(path: str | Path, *, limit: int | None = None,
               skip_bad_lines: bool = False) -> Trace:
    """Read an Azure LLM inference 2023 CSV (``AzureLLMInferenceTrace_{code,conv}.csv``).

    Parameters
    ----------
    path : str or Path
        CSV with columns ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``, no time zone),
        ``ContextTokens`` and ``GeneratedTokens``.
    limit : int, optional
        Stop after this many good requests.
    skip_bad_lines : bool
        Skip and count bad lines instead of raising :class:`TraceError`.

    Returns
    -------
    Trace
        ``prompt_len = ContextTokens``, ``output_len = GeneratedTokens``, ``arrival_s`` = seconds
        after the earliest timestamp read (nanosecond resolution).
    """
    path, bad = _existing(path), _BadLines(Path(path), skip_bad_lines)
    kinds = dict(zip(AZURE_COLUMNS, ("time", "count", "count"), strict=True))
    cols = _read_csv(path, kinds, (), _check_limit(limit), bad)
    _check_sorted(path, cols["TIMESTAMP"], lambda: _csv_lines(path, cols), "TIMESTAMP",
                  lambda v: repr(str(np.datetime64(int(v), "ns"))))
    return Trace(path, cols["ContextTokens"], cols["GeneratedTokens"],
                 _relative_seconds(cols["TIMESTAMP"], 1e9),
                 skipped_lines=bad.count, skipped_examples=tuple(bad.examples))


def read_vidur(path: str | Path, *, limit: int | None = None,
               skip_bad_lines: bool = False) -> Trace:
    """Read a Vidur processed trace (``vidur/processed_traces/*.csv``).

    ``num_prefill_tokens`` -> ``prompt_len``, ``num_decode_tokens`` -> ``output_len``; other columns
    (``num_total_tokens``, ``pd_ratio``) are ignored. ``arrived_at`` (seconds, in the
    ``splitwise_*`` files) becomes ``arrival_s`` relative to the earliest; files without it give
    ``arrival_s = None`` (lengths only). ``limit`` and ``skip_bad_lines`` as in :func:`read_azure`.
    """
    path, bad = _existing(path), _BadLines(Path(path), skip_bad_lines)
    kinds = {"arrived_at": "seconds", "num_prefill_tokens": "count", "num_decode_tokens": "count"}
    cols = _read_csv(path, kinds, ("arrived_at",), _check_limit(limit), bad)
    arrival = cols.get("arrived_at")
    if arrival is not None:
        _check_sorted(path, arrival, lambda: _csv_lines(path, cols), "arrived_at", _number)
    return Trace(path, cols["num_prefill_tokens"], cols["num_decode_tokens"],
                 None if arrival is None else _relative_seconds(arrival, 1.0),
                 skipped_lines=bad.count, skipped_examples=tuple(bad.examples))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _mooncake_problem(rec: dict, block_size: int) -> str | None:
    for key in MOONCAKE_FIELDS:
        if key not in rec:
            return f"missing field {key!r}"
    for key in ("input_length", "output_length"):
        v = rec[key]
        if not _is_int(v):
            return f"{key} {v!r} is not an integer"
        if v < 1:
            return f"{key} {v!r} must be >= 1"
    t = rec["timestamp"]
    if not (_is_int(t) or isinstance(t, float)) or not math.isfinite(t) or t < 0:
        return f"timestamp {t!r} is not a finite number >= 0"
    h = rec["hash_ids"]
    if not isinstance(h, list) or not all(_is_int(x) and x >= 0 for x in h):
        return f"hash_ids {str(h)[:40]!r} is not a list of integers >= 0"
    need = -(-rec["input_length"] // block_size)
    if len(h) != need:
        return (f"hash_ids has {len(h)} ids but input_length {rec['input_length']} needs "
                f"ceil({rec['input_length']} / {block_size}) = {need}")
    return None


def _read_mooncake_fast(path: Path, limit: int | None, block_size: int):
    """Columns of a clean Mooncake file via pyarrow, or ``None`` if anything is off."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("timestamp", pa.float64()), ("input_length", pa.int64()),
                        ("output_length", pa.int64()), ("hash_ids", pa.list_(pa.int64()))])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(path, parse_options=options)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    table = table.slice(0, limit) if limit is not None else table
    if any(table.column(c).null_count for c in MOONCAKE_FIELDS):
        return None
    lists = table.column("hash_ids").combine_chunks()
    flat = lists.flatten()
    if flat.null_count:
        return None
    ts, inp, out = (table.column(c).to_numpy() for c in MOONCAKE_FIELDS[:3])
    offsets = np.asarray(lists.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    ids = np.asarray(flat, dtype=np.int64)
    need = -(-inp // block_size)
    ok = (np.all(np.isfinite(ts) & (ts >= 0)) and np.all(inp >= 1) and np.all(out >= 1)
          and np.all(ids >= 0) and np.array_equal(np.diff(offsets), need))
    return (ts, inp, out, ids, offsets) if ok else None


def read_mooncake(path: str | Path, *, limit: int | None = None, skip_bad_lines: bool = False,
                  block_size: int = MOONCAKE_BLOCK_SIZE) -> Trace:
    """Read a Mooncake FAST'25 JSON Lines trace (``conversation_trace.jsonl`` etc.).

    Parameters
    ----------
    path : str or Path
        One JSON object per line: ``timestamp`` (ms), ``input_length``, ``output_length``,
        ``hash_ids`` (list, one id per ``block_size`` tokens of the input, last partial block
        included).
    limit, skip_bad_lines
        As in :func:`read_azure`.
    block_size : int
        Tokens per hash block; 512 in the FAST'25 release (its README).

    Returns
    -------
    Trace
        With ``arrival_s`` in seconds after the earliest timestamp read, and the hash ids.

    Raises
    ------
    TraceError
        A field missing from the first record names the field and the file (always raised);
        later bad lines as described in the module docstring.

    Notes
    -----
    A clean file is parsed by ``pyarrow.json``; if that fails or any value is invalid, the file is
    read again line by line with :func:`json.loads` to report or skip the bad lines.
    """
    path, bad, limit = _existing(path), _BadLines(Path(path), skip_bad_lines), _check_limit(limit)
    fast = _read_mooncake_fast(path, limit, block_size)
    if fast is not None:
        ts, inp, out, ids, offsets = fast
        _check_sorted(path, ts, lambda: _nonblank_lines(path, 1, len(ts)), "timestamp",
                      _number)
        return Trace(path, inp, out, _relative_seconds(ts, 1e3), hash_ids=ids,
                     hash_offsets=offsets, hash_block_size=block_size)
    ts, lens, hashes, lines = _read_mooncake_lines(path, limit, block_size, bad)
    _check_sorted(path, np.asarray(ts, dtype=np.float64), lines, "timestamp", _number)
    return _mooncake_trace(path, ts, lens, hashes, block_size, bad)


def _json_object(line: str, lineno: int, bad: _BadLines) -> dict | None:
    """The JSON object on a line, or ``None`` (reported to ``bad``) if it holds none."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        bad(lineno, f"not valid JSON ({e.msg} at column {e.colno})")
        return None
    if not isinstance(rec, dict):
        bad(lineno, f"expected a JSON object, got {type(rec).__name__}")
        return None
    return rec


def _check_first_record(path: Path, rec: dict, lineno: int) -> None:
    """A field missing from the first record is a wrong file, not a bad line: always raise."""
    for key in MOONCAKE_FIELDS:
        if key not in rec:
            raise TraceError(f"{path}: missing field {key!r} (line {lineno} has {sorted(rec)})")


def _read_mooncake_lines(path: Path, limit: int | None, block_size: int, bad: _BadLines):
    """The good records of a Mooncake file read line by line: ``(timestamps, (input, output)
    lengths, hash id lists, line numbers)``; bad lines go to ``bad``."""
    lines: list[int] = []
    ts: list[float] = []
    lens: list[tuple[int, int]] = []
    hashes: list[list[int]] = []
    first = True
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if limit is not None and len(ts) >= limit:
                break
            if not line.strip():
                continue
            rec = _json_object(line, lineno, bad)
            if rec is None:
                continue
            if first:
                first = False
                _check_first_record(path, rec, lineno)
            problem = _mooncake_problem(rec, block_size)
            if problem is not None:
                bad(lineno, problem)
                continue
            lines.append(lineno)
            ts.append(rec["timestamp"])
            lens.append((rec["input_length"], rec["output_length"]))
            hashes.append(rec["hash_ids"])
    return ts, lens, hashes, lines


def _mooncake_trace(path: Path, ts: list[float], lens: list[tuple[int, int]],
                    hashes: list[list[int]], block_size: int, bad: _BadLines) -> Trace:
    """The :class:`Trace` of the records read line by line."""
    lengths = np.array(lens, dtype=np.int64).reshape(-1, 2)
    counts = np.fromiter(map(len, hashes), dtype=np.int64, count=len(hashes))
    offsets = np.zeros(len(hashes) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.fromiter(chain.from_iterable(hashes), dtype=np.int64, count=int(offsets[-1]))
    return Trace(path, lengths[:, 0].copy(), lengths[:, 1].copy(),
                 _relative_seconds(np.array(ts, dtype=np.float64), 1e3),
                 hash_ids=ids, hash_offsets=offsets, hash_block_size=block_size,
                 skipped_lines=bad.count, skipped_examples=tuple(bad.examples))


def read_trace(path: str | Path, *, limit: int | None = None,
               skip_bad_lines: bool = False) -> Trace:
    """Read any supported trace, choosing the reader from the file.

    ``.jsonl`` -> :func:`read_mooncake`; a CSV whose header has ``TIMESTAMP`` -> :func:`read_azure`;
    one with ``num_prefill_tokens`` -> :func:`read_vidur`.
    """
    path = _existing(path)
    if path.suffix == ".jsonl":
        return read_mooncake(path, limit=limit, skip_bad_lines=skip_bad_lines)
    with open(path, encoding="utf-8") as f:
        header = [h.strip() for h in f.readline().split(",")]
    if "TIMESTAMP" in header:
        return read_azure(path, limit=limit, skip_bad_lines=skip_bad_lines)
    if "num_prefill_tokens" in header:
        return read_vidur(path, limit=limit, skip_bad_lines=skip_bad_lines)
    raise TraceError(f"{path}: unknown trace format (header {header}); expected a .jsonl Mooncake "
                     f"trace, an Azure CSV with columns {list(AZURE_COLUMNS)} or a Vidur CSV with "
                     f"columns {list(VIDUR_COLUMNS)}")
