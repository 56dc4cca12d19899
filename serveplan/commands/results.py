"""``serveplan pareto | plot | export``: read stored results, draw them, launch them."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from serveplan.commands.app import app
from serveplan.errors import UserError, report_errors


@app.command()
@report_errors
def pareto(
    results: Path = typer.Argument(..., help="A sweep.nc or search.nc."),
    ttft: float | None = typer.Option(None, "--ttft", help="TTFT limit (s) for the frontier."),
    min_speed: float | None = typer.Option(None, "--min-speed",
                                           help="Generation-speed SLA (tokens/s/user)."),
    plot_path: Path | None = typer.Option(None, "--plot", help="Write a PNG."),
    csv: Path | None = typer.Option(None, "--csv", help="Write the points as CSV."),
) -> None:
    """Throughput per GPU against tokens/s/user under a TTFT limit, per architecture."""
    from serveplan.pareto import pareto_points, plot_pareto
    from serveplan.results_io import read_netcdf

    df = pareto_points(read_netcdf(results), ttft)
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv, index=False)
    if plot_path is not None:
        plot_pareto(df, plot_path, ttft_max_s=ttft, min_tok_s_user=min_speed)
    front = df[df["frontier"]].sort_values(["architecture", "tok_s_per_user"])
    console = Console()
    from rich.table import Table

    t = Table(title=f"Pareto frontier ({len(df)} points, {int(df['meets_ttft'].sum())} "
              "meet the TTFT limit)")
    for col in ("architecture", "strategy", "GPUs", "tok/s/user", "tok/s/GPU", "TTFT ms"):
        t.add_column(col, justify="left" if col in ("architecture", "strategy") else "right")
    for _, r in front.iterrows():
        t.add_row(r["architecture"], r["strategy"], str(int(r["gpus"])),
                  f"{r['tok_s_per_user']:,.1f}", f"{r['throughput_per_gpu']:,.1f}",
                  f"{r['ttft_s'] * 1e3:,.0f}")
    console.print(t)
    for p in (csv, plot_path):
        if p is not None:
            console.print(f"wrote {p}")


@app.command()
@report_errors
def plot(
    results: Path = typer.Argument(..., help="run.nc (simulate), goodput.nc, sweep.nc or "
                                   "search.nc."),
    kind: str = typer.Option(..., "--kind", help="latency-vs-rate | histograms | bars."),
    out: Path = typer.Option(..., "--out", "-o", help="PNG to write."),
    ttft: float | None = typer.Option(None, "--ttft", help="TTFT goal line (s)."),
    tpot: float | None = typer.Option(None, "--tpot", help="TPOT goal line (s)."),
) -> None:
    """Draw a stored result."""
    from serveplan.plots import plot as draw
    from serveplan.results_io import read_netcdf

    ds = read_netcdf(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    kw = {} if kind == "bars" else {"ttft_s": ttft, "tpot_s": tpot}
    draw(ds, kind, out, **kw)
    Console().print(f"wrote {out}")


@app.command()
@report_errors
def export(
    engine: str = typer.Argument(..., help="vllm or sglang."),
    results: Path = typer.Argument(..., help="search.nc (or a deployment YAML)."),
    rank: int = typer.Option(1, "--rank", min=1, help="Which ranked strategy."),
    port: int | None = typer.Option(None, "--port", help="First port."),
) -> None:
    """Print the launch commands of a ranked strategy (or a deployment file)."""
    from serveplan.launch import sglang_commands, vllm_commands

    if engine not in ("vllm", "sglang"):
        raise UserError(f"engine given an invalid value: {engine!r} (valid: vllm, sglang)")
    if results.suffix in (".yaml", ".yml"):
        from serveplan.config import read_yaml

        data = read_yaml(results)
        deployment = data.get("deployment", data)
    else:
        from serveplan.results_io import read_netcdf

        ds = read_netcdf(results)
        if ds.attrs.get("kind") != "search":
            raise UserError(f"{results} is not a search result (serveplan search --out)")
        hit = (ds["rank"].values == rank).nonzero()[0]
        if hit.size == 0:
            raise UserError(f"no strategy of rank {rank}; decided ranks are 1.."
                            f"{int(ds['rank'].values.max())}")
        deployment = json.loads(str(ds["deployment"].values[hit[0]]))
        typer.echo(f"# rank {rank}: {ds['name'].values[hit[0]]}, goodput "
                   f"{float(ds['goodput'].values[hit[0]]):.3g} req/s "
                   f"({ds['fidelity'].values[hit[0]]} level)")
    fn = vllm_commands if engine == "vllm" else sglang_commands
    kw = {} if port is None else {"base_port": port}
    for line in fn(deployment, **kw):
        typer.echo(line)
