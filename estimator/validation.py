"""Pydantic validation errors as ``field: message`` lines, with the file and line they came from.

One formatter for every user file the project reads: the CLI's YAML configs
(:func:`serveplan.errors.format_validation_error`, which adds the config's union tags), a
GPU YAML, a calibration profile and a runtime profile (JSON, whose lines are found the same
way: JSON is YAML). A line reads ``deployment.pools[1].model: Input should be ... (got 'x')
(FILE line N)``: list items by index, union alternatives collapsed to the one that explains
the problem, the value the file held where it is a scalar.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

__all__ = ["dotted", "file_problems", "validation_problems", "yaml_line"]

_GOT = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error",
        "enum", "multiple_of", "finite_number"}
_MISMATCH = ("_type", "_parsing")  # "not this alternative of a union"
_NO_TAGS: Mapping[str, tuple[str, ...]] = {}


def _is_label(part, tags: frozenset[str]) -> bool:
    """A location part naming a union alternative rather than a field."""
    if not isinstance(part, str):
        return False
    return ("[" in part or "(" in part or part[:1].isupper()
            or part.startswith(("constrained-", "function-")) or part in tags)


def _missing_tag(loc: list, err: dict, tags: Mapping[str, tuple[str, ...]]) -> str:
    """A discriminator (``kind``) missing from a mapping: name the field and its choices
    instead of pydantic's "Unable to extract tag using discriminator 'kind'"."""
    name = str(err.get("ctx", {}).get("discriminator", "")).strip("'")
    loc.append(name)
    choices = tags.get(name)
    return "Field required" + (f" (one of {', '.join(choices)})" if choices else "")


def _clean(err: dict, tags: Mapping[str, tuple[str, ...]]) -> tuple[tuple, tuple | None, str]:
    """``(field loc, loc of the union the error is inside or None, message)``."""
    labels = frozenset(t for found in tags.values() for t in found)
    loc, union = [], None
    parts = list(err.get("loc", ()))
    for k, part in enumerate(parts):
        user_key = k == len(parts) - 1 and err.get("type") == "extra_forbidden"
        if not user_key and _is_label(part, labels):
            union = union if union is not None else tuple(loc)
        else:
            loc.append(part)
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "model_type":  # pydantic names its class: say what the file needs
        msg = "expected a mapping of fields (name: value)"
    if loc:  # a validator's message that repeats its field
        msg = msg.removeprefix(f"{loc[-1]}: ")
    if err.get("type") == "union_tag_not_found" and isinstance(err.get("input"), dict):
        msg = _missing_tag(loc, err, tags)
    value = err.get("input")
    if err.get("type") in _GOT or str(err.get("type", "")).endswith(_MISMATCH):
        if isinstance(value, (int, float, str, bool)) or value is None:
            msg += f" (got {value!r})"
    return tuple(loc), union, msg


def dotted(loc: tuple, root: str = "config") -> str:
    """``deployment.pools[1].model`` from a location tuple (``root`` for the whole)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or root


def validation_problems(exc: ValidationError, source: Path | str | None = None, *,
                        text: str | None = None, root: str = "config",
                        tags: Mapping[str, tuple[str, ...]] = _NO_TAGS,
                        name_file: bool = False) -> list[str]:
    """``field: message`` lines for a pydantic error. Where a union's alternatives all fail,
    only the errors of the alternative that matches the value's type are kept. With
    ``source`` (the YAML or JSON file the data came from; ``text``: its text, read if not
    given), `` (FILE line N)`` is appended where the value is that file's; ``name_file``:
    `` (FILE)`` where no line is found. ``tags``: the field names of discriminated unions
    with their tags (pydantic puts tags in error locations, where they are not fields)."""
    errors = exc.errors()
    cleaned = [_clean(e, tags) for e in errors]
    explained = {u for (_, u, _), e in zip(cleaned, errors, strict=True)
                 if u is not None and not str(e.get("type", "")).endswith(_MISMATCH)}
    node = _compose(source, text) if source is not None else None
    lines = []
    for (loc, union, msg), err in zip(cleaned, errors, strict=True):
        if union in explained and str(err.get("type", "")).endswith(_MISMATCH):
            continue
        line = f"{dotted(loc, root)}: {msg}"
        n = _node_line(node, loc, err.get("input"),
                       missing=err.get("type") in ("missing", "union_tag_not_found"))
        if n is not None:
            line += f" ({source} line {n})"
        elif source is not None and name_file:
            line += f" ({source})"
        if line not in lines:
            lines.append(line)
    return lines


def file_problems(exc: ValidationError, path: Path | str, text: str | None = None, *,
                  root: str) -> str:
    """The message for a user file (``path``, its ``text``) whose fields fail validation:
    one ``field: message (FILE line N)`` line per problem (``root``: what the whole file
    is called, for a problem with no field)."""
    return "\n".join(validation_problems(exc, path, text=text, root=root, name_file=True))


def _compose(path, text: str | None):
    """The YAML (or JSON) node tree of ``path``'s ``text`` (read if None); None if
    unreadable."""
    try:
        return yaml.compose(Path(path).read_text(encoding="utf-8") if text is None else text)
    except (OSError, ValueError, yaml.YAMLError):
        return None


def _child(node, part):
    """``(line, node)`` of ``part`` (a key or an index) under a composed YAML node."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key.start_mark.line + 1, value
    elif (isinstance(node, yaml.SequenceNode) and isinstance(part, int)
          and -len(node.value) <= part < len(node.value)):
        item = node.value[part]
        return item.start_mark.line + 1, item
    return None


def _node_line(node, loc: tuple, value, *, missing: bool = False) -> int | None:
    """The 1-based line of field ``loc`` under ``node`` if it holds ``value`` there (for a
    ``missing`` field: the line of the mapping that lacks it, None at the top level)."""
    if node is None:
        return None
    line = None  # a field missing from the top level is on no line
    for part in loc[:-1] if missing else loc:
        found = _child(node, part)
        if found is None:
            return None
        line, node = found
    if missing:
        return line
    return line if _holds(node, value) else None


def _holds(node, value) -> bool:
    """Whether ``node`` holds ``value``, read as YAML or, where YAML reads it otherwise
    (``1e-7`` is a string to YAML 1.1), as JSON."""
    try:
        if yaml.SafeLoader("").construct_object(node, deep=True) == value:
            return True
    except yaml.YAMLError:
        pass
    mark, end = node.start_mark, node.end_mark
    try:
        return json.loads(mark.buffer[mark.index:end.index]) == value
    except (TypeError, ValueError):
        return False


def yaml_line(path, loc: tuple, value, *, missing: bool = False) -> int | None:
    """The 1-based line of field ``loc`` in the YAML file ``path`` if the file holds
    ``value`` there (for a ``missing`` field: the line of the mapping that lacks it)."""
    return _node_line(_compose(path, None), loc, value, missing=missing)
