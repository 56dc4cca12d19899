"""``serveplan warmup``: compile the simulator now, in the foreground."""

from __future__ import annotations

import typer

from serveplan.commands.app import app
from serveplan.errors import report_errors
from serveplan.kernels import jit_mode


@app.command()
@report_errors
def warmup() -> None:
    """Compile the simulator and cost kernels into the cache now (about a minute, once per
    machine and version) -- for container images and CI set-up. Without it, a first run
    executes the simulator as Python while a background process compiles it."""
    from serveplan.warmup import warm_up

    seconds = warm_up()
    where = jit_mode.cache_dir()
    if seconds is None:
        typer.echo(f"compiled by another process into {where}")
    else:
        typer.echo(f"compiled code ready in {where} ({seconds:.1f} s)")
