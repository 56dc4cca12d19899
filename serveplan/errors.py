"""User-facing errors: one line per problem, exit code 1, never a traceback."""

from __future__ import annotations

import functools
import sys

import typer
from pydantic import ValidationError

from serveplan.estimator.specs import SpecError


class UserError(Exception):
    """A problem with the user's input, reported as its message alone."""


def format_validation_error(exc: ValidationError) -> list[str]:
    """``loc: msg`` lines for a pydantic error (the loc names the field, list items by
    index: ``deployment.pools[1].model``)."""
    lines = []
    for err in exc.errors():
        loc = ""
        for part in err.get("loc", ()):
            loc += f"[{part}]" if isinstance(part, int) else f".{part}" if loc else str(part)
        lines.append(f"{loc or 'config'}: {err.get('msg', 'invalid')}")
    return lines


def report_errors(fn):
    """Run a CLI command; turn known errors into ``error:`` lines and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValidationError as exc:
            for line in format_validation_error(exc):
                typer.echo(f"error: {line}", err=True)
        except (UserError, SpecError, ValueError, FileNotFoundError, KeyError) as exc:
            msg = str(exc).strip("'\"") or type(exc).__name__
            for line in msg.splitlines():
                typer.echo(f"error: {line}", err=True)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            sys.exit(130)
        raise typer.Exit(1)

    return wrapper
