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
from pydantic import ValidationError

from serveplan.estimator.specs import SpecError
from serveplan.estimator.validation import dotted, validation_problems, yaml_line
from serveplan.user_input import UserError, check_text_file, decode_problem, not_text_message

__all__ = ["UserError", "check_text_file", "decode_problem", "dotted", "format_validation_error",
           "not_text_message", "report_errors", "yaml_line"]


# ----------------------------------------------------------------------------- pydantic
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


def format_validation_error(exc: ValidationError, source: Path | None = None) -> list[str]:
    """``field: message`` lines for a pydantic error of the config
    (:func:`serveplan.estimator.validation.validation_problems` with the config's union
    tags); with ``source`` (the YAML file the data came from), `` (FILE line N)`` where the
    value is that file's."""
    return validation_problems(exc, source, tags=_tags_by_discriminator())


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
