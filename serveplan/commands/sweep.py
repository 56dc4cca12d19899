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
from serveplan.commands.common import dask_client
from serveplan.errors import UserError, report_errors

SWEEP_HELP = """Run a parameter sweep; re-run the same command to resume after an interruption.

GRID is a YAML file:

\b
  base:                  # deployment, workload, slo, seed (as for goodput)
    deployment: {model: llama-3.1-8b, gpu: h100, tp: 1, num_instances: 1}
    workload: {kind: poisson, rate: 4, num_requests: 1000, isl: 2048, osl: 64}
    slo: {ttft_ms: 500, tpot_ms: 50}
  grid:                  # dotted field -> values; one dimension per field
    deployment.tp: [1, 2]
    workload.rate: [2, 4, 8, 16]
    seed: [0, 1]
  measure: latency       # latency at workload.rate | goodput per cell
  fidelity: request      # auto | analytic | request | iteration
"""


@app.command(help=SWEEP_HELP)
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
    """Run a parameter sweep, resumable (the command's help is SWEEP_HELP)."""
    from serveplan.config import read_yaml
    from serveplan.results_io import write_netcdf
    from serveplan.sweep import SweepSpec, cells_dir, check_spec, infeasible_reasons, run_sweep

    data = read_yaml(grid)
    if fidelity is not None:
        data["fidelity"] = fidelity
    spec = SweepSpec.model_validate(data)
    check_spec(spec)  # before a Dask cluster starts or any cell runs
    console = Console(stderr=True)
    client = dask_client(scheduler, workers, threads)
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
    refused = infeasible_reasons(ds)
    if refused:
        raise UserError("\n".join([f"no cell of the sweep is feasible (results written to "
                                    f"{out}); by reason:", *(f"  {r}" for r in refused)]))
    status = ds["status"].values.ravel()
    counts = {s: int((status == s).sum()) for s in sorted(set(status))}
    sizes = " x ".join(f"{k} {v:,}" for k, v in ds.sizes.items())
    console.print(f"wrote {out} ({sizes}) · " + ", ".join(f"{v:,} {k}"
                                                        for k, v in counts.items())
                  + f" · checkpoints in {cells_dir(out)}")
