"""``serveplan sweep``: a grid of configs -> one NetCDF, serially or on Dask, resumable."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from serveplan.commands.app import app
from serveplan.errors import UserError, report_errors


def _client(scheduler: str | None, workers: int | None, threads: bool):
    """A Dask client: an existing scheduler, a LocalCluster of ``workers``, or None."""
    if scheduler and workers:
        raise UserError("give --scheduler or --workers, not both")
    if not scheduler and not workers:
        return None
    from dask.distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=not threads,
                           dashboard_address=None)
    return Client(cluster)


@app.command()
@report_errors
def sweep(
    grid: Path = typer.Argument(..., help="Grid YAML: base, grid, measure, fidelity."),
    out: Path = typer.Option(..., "--out", "-o", help="NetCDF to write (.nc)."),
    scheduler: str | None = typer.Option(None, "--scheduler",
                                         help="Dask scheduler address, e.g. tcp://host:8786."),
    workers: int | None = typer.Option(None, "--workers", min=1,
                                       help="Start a local Dask cluster of this many workers."),
    threads: bool = typer.Option(False, "--threads",
                                 help="Local cluster workers as threads, not processes."),
    chunk_size: int | None = typer.Option(None, "--chunk-size", min=1, help="Cells per task."),
    fidelity: str | None = typer.Option(None, "--fidelity",
                                        help="Override: auto | analytic | request | iteration."),
) -> None:
    """Run a parameter sweep; re-run the same command to resume after an interruption."""
    from serveplan.config import read_yaml
    from serveplan.results_io import write_netcdf
    from serveplan.sweep import SweepSpec, cells_dir, run_sweep

    data = read_yaml(grid)
    if fidelity is not None:
        data["fidelity"] = fidelity
    spec = SweepSpec.model_validate(data)
    console = Console(stderr=True)
    client = _client(scheduler, workers, threads)
    try:
        columns = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                   TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("cells", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            ds = run_sweep(spec, out, client=client, chunk_size=chunk_size,
                           progress=progress)
    finally:
        if client is not None:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()
    write_netcdf(ds, out)
    status = ds["status"].values.ravel()
    counts = {s: int((status == s).sum()) for s in sorted(set(status))}
    console.print(f"wrote {out} ({dict(ds.sizes)}) · " + ", ".join(f"{v} {k}"
                                                             for k, v in counts.items())
                  + f" · checkpoints in {cells_dir(out)}")
