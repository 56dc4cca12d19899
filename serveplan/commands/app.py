"""The ``serveplan`` typer app. Command modules register on it; ``serveplan.cli`` imports
them and re-exports ``app``, so no command module needs to import ``serveplan.cli``."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="serveplan",
    help="Plan LLM serving deployments on one CPU: step costs, memory plans, simulations.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
