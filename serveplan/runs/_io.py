"""Reading benchmark files: one :class:`~serveplan.user_input.UserError` per problem.

Every message names the file (and the line, for JSON Lines and JSON syntax errors) and the
field, as ``PATH line L: FIELD: problem``. :class:`Where` carries the file and line; the
typed accessors (:func:`number`, :func:`integer`, :func:`num_list`, ...) check a value and
name it when it is wrong. :func:`to_seconds` converts a duration in a tool's stated unit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import numpy as np

from serveplan.config_bounds import MAX_TOKENS
from serveplan.user_input import (
    UserError,
    check_text_file,
    decode_problem,
    not_text_message,
    yaml_mapping,
)

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
              "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0}
"""Seconds per unit, for the unit strings the tools write (aiperf: ``ns``, ``ms``, ``sec``)."""

_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")


class Where:
    """A file and, optionally, a line of it: the prefix of every message."""

    def __init__(self, path: Path, line: int | None = None) -> None:
        self.path, self.line = Path(path), line

    def at(self, line: int) -> Where:
        return Where(self.path, line)

    def __str__(self) -> str:
        return f"{self.path} line {self.line}" if self.line is not None else str(self.path)

    def fail(self, field: str, problem: str) -> NoReturn:
        raise UserError(f"{self}: {field}: {problem}")


def json_value(value: object) -> str:
    """``value`` as the file wrote it, in JSON's words: ``null``, ``true``, ``number NaN``,
    ``string "x"``, ``array [1, 2]``, ``object {...}`` (cut at 40 characters)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kind = ("number" if isinstance(value, (int, float)) else "string" if isinstance(value, str)
            else "array" if isinstance(value, list) else "object" if isinstance(value, dict)
            else type(value).__name__)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON (a YAML date, a tuple's contents...)
        text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{kind} {text}"


_NUMBER_TYPES = frozenset((int, float))
"""Exact types a JSON number decodes to (``bool`` is its own type, so it is not among them)."""


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- files
def read_text(path: Path, expected: str) -> str:
    """The file's text; binary, undecodable or empty files are refused by name."""
    check_text_file(path, expected)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(not_text_message(path, decode_problem(exc), expected)) from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not text.strip():
        raise UserError(f"{path}: empty file; expected {expected}")
    return text


def json_problem(path: Path, exc: json.JSONDecodeError) -> UserError:
    return UserError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg} at column "
                     f"{exc.colno})")


def load_json(path: Path, expected: str) -> object:
    """The JSON document in ``path`` (one document; trailing data is an error)."""
    text = read_text(path, expected)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise json_problem(path, exc) from None


def iter_jsonl(path: Path, expected: str) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSON Lines file."""
    text = read_text(path, expected)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} line {lineno}: not valid JSON ({exc.msg} at column "
                            f"{exc.colno})") from None
        if not isinstance(rec, dict):
            raise UserError(f"{path} line {lineno}: expected a JSON object, got "
                            f"{json_value(rec)}")
        yield lineno, rec


def load_yaml(path: Path, expected: str, loader=None) -> dict:
    """The mapping in a YAML file (an empty file is ``{}``; ``loader``: a
    ``yaml.SafeLoader`` subclass)."""
    check_text_file(path, expected)
    return yaml_mapping(path, expected, loader=loader)


_NUMBERED = re.compile(r"^(?P<path>.+):(?P<n>\d+)$")


def split_line(path: str | Path) -> tuple[Path, int | None]:
    """``FILE:N`` (one run of a file of several) as ``(FILE, N)``; a path that exists as
    written, or has no such suffix, as ``(path, None)``."""
    path = Path(path)
    m = _NUMBERED.match(str(path))
    if path.exists() or m is None:
        return path, None
    return Path(m["path"]), int(m["n"])


# ----------------------------------------------------------------------------- values
def mapping(value: object, where: Where, field: str) -> dict:
    if not isinstance(value, dict):
        where.fail(field, f"expected an object, got {json_value(value)}")
    return value


def require(obj: dict, key: str, where: Where, prefix: str = "") -> object:
    """``obj[key]``, or a message that the field is missing."""
    if key not in obj:
        where.fail(prefix + key, "missing")
    return obj[key]


def dig(obj: object, dotted: str) -> object:
    """The value at ``a.b.c`` of nested mappings, ``None`` where any step is missing."""
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def number(value: object, where: Where, field: str, *, null_ok: bool = False) -> float | None:
    """A JSON number as ``float`` (``"inf"`` / ``Infinity`` allowed); ``None`` if null_ok."""
    if value is None and null_ok:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    if not _is_number(value) or (isinstance(value, float) and math.isnan(value)):
        where.fail(field, f"expected a number, got {json_value(value)}")
    if isinstance(value, int) and abs(value) > _FLOAT_MAX:
        where.fail(field, f"expected a finite number, got {json_value(value)}")
    return float(value)


def finite(value: object, where: Where, field: str, *, low: float | None = None,
           null_ok: bool = False) -> float | None:
    """A finite JSON number (``>= low`` where given) as ``float``; ``None`` if null_ok."""
    x = number(value, where, field, null_ok=null_ok)
    if x is not None and not (math.isfinite(x) and (low is None or x >= low)):
        want = "a finite number" if low is None else f"a finite number >= {low:g}"
        where.fail(field, f"expected {want}, got {json_value(value)}")
    return x


def integer(value: object, where: Where, field: str, *, low: int | None = None,
            high: int | None = None, null_ok: bool = False) -> int | None:
    """A JSON integer (an integral float or a numeric string from ``--metadata`` too),
    within ``[low, high]`` where given."""
    if value is None and null_ok:
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        where.fail(field, f"expected an integer, got {json_value(value)}")
    if low is not None and value < low:
        where.fail(field, f"expected an integer >= {low}, got {json_value(value)}")
    high = _INT64.max if high is None else min(high, _INT64.max)
    if value > high:
        where.fail(field, _too_large(value, high))
    if value < _INT64.min:
        where.fail(field, f"expected an integer >= {_INT64.min:,}, got {json_value(value)}")
    return value


_INT64 = np.iinfo(np.int64)


def _too_large(value: int, high: int) -> str:
    why = " (the longest request serveplan simulates)" if high == MAX_TOKENS else ""
    return f"expected an integer <= {high:,}{why}, got {json_value(value)}"


def mean_tokens(value: float, where: Where, field: str) -> float:
    """A mean token count per request (a summary's): finite, from 0 to :data:`MAX_TOKENS`."""
    if not (math.isfinite(value) and 0 <= value <= MAX_TOKENS):
        where.fail(field, f"a mean of {value:.6g} tokens per request; expected 0 to "
                          f"{MAX_TOKENS:,} (the longest request serveplan simulates)")
    return value


def tokens(value: object, where: Where, field: str, *, null_ok: bool = False) -> int | None:
    """A request's token count: an integer from 0 to :data:`MAX_TOKENS`."""
    return integer(value, where, field, low=0, high=MAX_TOKENS, null_ok=null_ok)


def text(value: object, where: Where, field: str, *, null_ok: bool = True) -> str | None:
    if value is None and null_ok:
        return None
    if not isinstance(value, str):
        where.fail(field, f"expected a string, got {json_value(value)}")
    return value


def num_list(value: object, where: Where, field: str, *, null_ok: bool = False,
             low: float | None = None) -> np.ndarray:
    """A JSON list of finite numbers (``>= low`` where given) as ``float64`` (``null``
    entries as NaN if ``null_ok``)."""
    a = floats(value, where, field, null_ok=null_ok)
    check_range(a, value, where, field, low)
    return a


def floats(value: object, where: Where, field: str, *, null_ok: bool = False) -> np.ndarray:
    """A JSON list of numbers as ``float64``, not yet checked to be finite
    (:func:`check_range`; ``null`` entries as NaN if ``null_ok``)."""
    if not isinstance(value, list):
        where.fail(field, f"expected a list of numbers, got {json_value(value)}")
    kinds = set(map(type, value))  # one C-speed pass: runs hold ~10^5 inter-token gaps
    if not kinds <= _NUMBER_TYPES:
        for i, v in enumerate(value):
            if not (_is_number(v) or (v is None and null_ok)):
                where.fail(f"{field}[{i}]", f"expected a number, got {json_value(v)}")
        if type(None) in kinds:
            value = [np.nan if v is None else v for v in value]
    try:
        return np.array(value, dtype=np.float64)
    except OverflowError:  # an integer beyond float64
        i = next(i for i, v in enumerate(value) if isinstance(v, int) and abs(v) > _FLOAT_MAX)
        where.fail(f"{field}[{i}]", f"expected a finite number, got {json_value(value[i])}")


_FLOAT_MAX = float(np.finfo(np.float64).max)


def out_of_range(a: np.ndarray, low: float | None = None) -> np.ndarray:
    """Mask of the entries of ``a`` that are not finite (or are below ``low``)."""
    return ~np.isfinite(a) if low is None else ~(np.isfinite(a) & (a >= low))


def check_range(a: np.ndarray, value: list, where: Where, field: str,
                low: float | None = None) -> None:
    """Refuse a non-finite entry of ``a`` (or one below ``low``), read from the JSON list
    ``value``, naming its index; NaN entries that were ``null`` pass."""
    bad = out_of_range(a, low)
    if bad.any():
        bad &= np.fromiter((v is not None for v in value), bool, len(value))
    if bad.any():
        i = int(np.argmax(bad))
        want = "a finite number" if low is None else f"a finite number >= {low:g}"
        where.fail(f"{field}[{i}]", f"expected {want}, got {json_value(value[i])}")


def int_list(value: object, where: Where, field: str, *, low: int | None = None,
             high: int | None = None) -> np.ndarray:
    """A JSON list of integers within ``[low, high]`` (where given) as ``int64``."""
    if not isinstance(value, list):
        where.fail(field, f"expected a list of integers, got {json_value(value)}")
    low = _INT64.min if low is None else max(low, _INT64.min)  # int64 whatever the bounds
    high = _INT64.max if high is None else min(high, _INT64.max)
    for i, v in enumerate(value):
        ok = (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, float) and v.is_integer())
        if not ok:
            where.fail(f"{field}[{i}]", f"expected an integer, got {json_value(v)}")
        if v < low:
            where.fail(f"{field}[{i}]", f"expected an integer >= {low:,}, got {json_value(v)}")
        if v > high:
            where.fail(f"{field}[{i}]", _too_large(v, high))
    return np.array(value, dtype=np.int64) if value else np.zeros(0, dtype=np.int64)


def token_list(value: object, where: Where, field: str) -> np.ndarray:
    """A JSON list of per-request token counts (0 to :data:`MAX_TOKENS`) as ``int64``."""
    return int_list(value, where, field, low=0, high=MAX_TOKENS)


def seconds_per(unit: object, where: Where, field: str) -> float:
    """Seconds in one ``unit`` (a duration unit the tools write)."""
    if not isinstance(unit, str) or unit.strip().lower() not in TIME_UNITS:
        where.fail(field, f"unknown time unit {unit!r}; expected one of "
                          f"{', '.join(sorted(set(TIME_UNITS) - {'μs'}))}")
    return TIME_UNITS[unit.strip().lower()]


def stat_name(stat: str) -> str | None:
    """A statistic's key in :attr:`BenchRun.summary`: ``mean``, ``p50`` (for a median),
    ``std``, ``min``, ``max`` or ``pNN``; ``None`` for anything else."""
    stat = stat.lower()
    if stat in ("mean", "avg", "average"):
        return "mean"
    if stat in ("median", "p50"):
        return "p50"
    if stat in ("std", "stddev", "std_dev", "min", "max"):
        return "std" if stat.startswith("std") else stat
    m = _PERCENTILE.match(stat)
    if m:
        p = float(m.group(1))
        return f"p{int(p)}" if p.is_integer() else f"p{p:g}"
    return None


def ragged(values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Flatten per-request arrays into ``(values, offsets)`` (offsets ``int64[n + 1]``)."""
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    flat = np.concatenate(values).astype(np.float64) if values else np.zeros(0)
    return flat, offsets
