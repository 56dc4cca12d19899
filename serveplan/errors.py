"""User-facing errors: one line per problem, exit code 1, never a traceback.

:func:`report_errors` wraps every CLI command. A pydantic ``ValidationError`` becomes
``field: message`` lines (union alternatives collapsed to the one that explains the
problem, and the YAML file and line appended when the value came from the command's YAML
file); known user errors become their message; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import functools
import inspect
import sys
from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

from serveplan.estimator.specs import SpecError
from serveplan.user_input import UserError, check_text_file, decode_problem, not_text_message

__all__ = ["UserError", "check_text_file", "decode_problem", "dotted", "format_validation_error",
           "not_text_message", "report_errors", "yaml_line"]


# ----------------------------------------------------------------------------- pydantic
_GOT = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error",
        "enum", "multiple_of", "finite_number"}
_MISMATCH = ("_type", "_parsing")  # "not this alternative of a union"


@functools.cache
def _tags_by_discriminator() -> dict[str, tuple[str, ...]]:
    """The tags of the config's discriminated unions by the field that carries them
    (``kind``: ``poisson``, ``gamma``, ...; ``dist``: ``lognormal``, ...)."""
    try:
        from serveplan.config import SimulationConfig

        schema = SimulationConfig.model_json_schema()
    except Exception:  # noqa: BLE001 - a schema problem must not hide the user's error
        return {}
    tags: dict[str, list[str]] = {}
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            disc = node.get("discriminator")
            if isinstance(disc, dict):
                known = tags.setdefault(disc.get("propertyName", ""), [])
                known.extend(t for t in disc.get("mapping", {}) if t not in known)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return {name: tuple(found) for name, found in tags.items()}


@functools.cache
def _union_tags() -> frozenset[str]:
    """Tags of the config's discriminated unions: pydantic puts them in error locations,
    where they are not fields."""
    return frozenset(t for found in _tags_by_discriminator().values() for t in found)


def _missing_tag(loc: list, err: dict) -> str:
    """``kind`` missing from a mapping of a discriminated union: name the field and its
    choices instead of pydantic's "Unable to extract tag using discriminator 'kind'"."""
    name = str(err.get("ctx", {}).get("discriminator", "")).strip("'")
    loc.append(name)
    choices = _tags_by_discriminator().get(name)
    return "Field required" + (f" (one of {', '.join(choices)})" if choices else "")


def _is_label(part) -> bool:
    """A location part naming a union alternative rather than a field."""
    if not isinstance(part, str):
        return False
    return ("[" in part or "(" in part or part[:1].isupper()
            or part.startswith(("constrained-", "function-")) or part in _union_tags())


def _clean(err: dict) -> tuple[tuple, tuple | None, str]:
    """``(field loc, loc of the union the error is inside or None, message)``."""
    loc, union = [], None
    for part in err.get("loc", ()):
        if _is_label(part):
            union = union if union is not None else tuple(loc)
        else:
            loc.append(part)
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "union_tag_not_found" and isinstance(err.get("input"), dict):
        msg = _missing_tag(loc, err)
    value = err.get("input")
    if err.get("type") in _GOT or str(err.get("type", "")).endswith(_MISMATCH):
        if isinstance(value, (int, float, str, bool)) or value is None:
            msg += f" (got {value!r})"
    return tuple(loc), union, msg


def dotted(loc: tuple) -> str:
    """``deployment.pools[1].model`` from a location tuple."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "config"


def format_validation_error(exc: ValidationError, source: Path | None = None) -> list[str]:
    """``field: message`` lines for a pydantic error (list items by index:
    ``deployment.pools[1].model``). Where a union's alternatives all fail, only the errors of
    the alternative that matches the value's type are kept. With ``source`` (the YAML file
    the data came from), `` (FILE line N)`` is appended where the value is that file's."""
    errors = exc.errors()
    cleaned = [_clean(e) for e in errors]
    explained = {u for (_, u, _), e in zip(cleaned, errors, strict=True)
                 if u is not None and not str(e.get("type", "")).endswith(_MISMATCH)}
    lines = []
    for (loc, union, msg), err in zip(cleaned, errors, strict=True):
        if union in explained and str(err.get("type", "")).endswith(_MISMATCH):
            continue
        line = f"{dotted(loc)}: {msg}"
        if source is not None:
            n = yaml_line(source, loc, err.get("input"),
                          missing=err.get("type") in ("missing", "union_tag_not_found"))
            line += f" ({source} line {n})" if n else ""
        if line not in lines:
            lines.append(line)
    return lines


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


def yaml_line(path, loc: tuple, value, *, missing: bool = False) -> int | None:
    """The 1-based line of field ``loc`` in the YAML file ``path`` if the file holds
    ``value`` there (for a ``missing`` field: the line of the mapping that lacks it)."""
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    line = None
    parts = loc[:-1] if missing else loc
    for part in parts:
        found = _child(node, part)
        if found is None:
            return None
        line, node = found
    if missing:
        return line
    try:
        held = yaml.SafeLoader("").construct_object(node, deep=True)
    except yaml.YAMLError:
        return None
    return line if held == value else None


# ----------------------------------------------------------------------------- the wrapper
def _yaml_source(fn, args, kwargs) -> Path | None:
    """The YAML file among the command's arguments, if any."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments.values()
    except TypeError:
        return None
    for value in bound:
        if isinstance(value, Path) and value.suffix in (".yaml", ".yml") and value.is_file():
            return value
    return None


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:  # str(KeyError) is the repr of its key
        return str(exc.args[0])
    if isinstance(exc, UnicodeDecodeError):
        return not_text_message("an input file", decode_problem(exc),
                                "text files (YAML, CSV, JSON Lines)")
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def report_errors(fn):
    """Run a CLI command; turn known errors into ``error:`` lines and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValidationError as exc:
            for line in format_validation_error(exc, _yaml_source(fn, args, kwargs)):
                typer.echo(f"error: {line}", err=True)
        except (UserError, SpecError, ValueError, KeyError, OSError) as exc:
            msg = _message(exc).strip() or type(exc).__name__
            for line in msg.splitlines():
                typer.echo(f"error: {line}", err=True)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            sys.exit(130)
        raise typer.Exit(1)

    return wrapper
