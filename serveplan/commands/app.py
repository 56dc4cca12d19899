"""The ``serveplan`` typer app. Command modules register on it; ``serveplan.cli`` imports
them and re-exports ``app``, so no command module needs to import ``serveplan.cli``.

Help is laid out for the terminal's width, or 120 columns when there is no terminal (a
pipe, a file, CI); ``TERMINAL_WIDTH`` overrides both.
"""

from __future__ import annotations

import shutil

import typer
from typer import rich_utils

if rich_utils.MAX_WIDTH is None:  # not set by TERMINAL_WIDTH
    rich_utils.MAX_WIDTH = shutil.get_terminal_size((120, 24)).columns

app = typer.Typer(
    name="serveplan",
    help="Plan LLM serving deployments on one CPU: step costs, memory plans, simulations, "
    "goodput, strategy search, sweeps, Pareto frontiers and launch commands. Durations on "
    "the command line are in seconds (--ttft 0.5); in YAML files in the unit the field's "
    "name says (slo.ttft_ms: 500).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from serveplan import __version__

        typer.echo(f"serveplan {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Plan LLM serving deployments on one CPU."""
    from serveplan.kernels import jit_mode

    try:
        jit_mode.mode_from_env()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
