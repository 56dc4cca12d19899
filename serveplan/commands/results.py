"""``serveplan pareto | plot | export``: read stored results, draw them, launch them."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.table import Table

from serveplan.commands.app import app
from serveplan.commands.common import wide_console
from serveplan.errors import UserError, report_errors


def _pareto_table(df, ttft: float | None, min_speed: float | None) -> Table:
    shown = df[df["frontier"] & df["meets_speed"]].sort_values(
        ["model", "architecture", "tok_s_per_user"])
    seeds = int(df["seeds"].max()) if len(df) else 1
    limits = [f"TTFT ≤ {ttft * 1e3:g} ms" if ttft is not None else "no TTFT limit"]
    if min_speed is not None:
        limits.append(f"≥ {min_speed:g} tok/s/user")
    t = Table(title=f"Pareto frontier · {', '.join(limits)} · {len(shown)} of {len(df)} "
              f"designs shown, {int(df['meets_ttft'].sum())} meet the TTFT limit",
              caption=(f"each design's metrics are the mean over its {seeds} seeds"
                       if seeds > 1 else None))
    many = df["model"].nunique() > 1
    cols = (("model",) if many else ()) + ("architecture", "design", "GPUs", "tok/s/user",
                                           "tok/s/GPU", "TTFT ms")
    for col in cols:
        t.add_column(col, justify="left" if col in ("model", "architecture", "design")
                     else "right")
    for _, r in shown.iterrows():
        t.add_row(*((r["model"],) if many else ()), r["architecture"], r["label"],
                  str(int(r["gpus"])), f"{r['tok_s_per_user']:,.1f}",
                  f"{r['throughput_per_gpu']:,.1f}", f"{r['ttft_s'] * 1e3:,.0f}")
    return t


@app.command()
@report_errors
def pareto(
    results: Path = typer.Argument(..., help="A sweep.nc (serveplan sweep --out) or search.nc "
                                   "(serveplan search --out)."),
    ttft: float | None = typer.Option(None, "--ttft", help="TTFT limit in seconds (e.g. 0.5); "
                                      "points above it stay off the frontier."),
    min_speed: float | None = typer.Option(
        None, "--min-speed", help="Generation-speed SLA in tokens/s/user: the table keeps the "
        "frontier points at least this fast and the best of them is starred in the plot."),
    plot_path: Path | None = typer.Option(None, "--plot", help="Write the frontiers as a PNG."),
    csv: Path | None = typer.Option(None, "--csv", help="Write every point as CSV."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="Write every point as NetCDF (kind 'pareto')."),
) -> None:
    """Throughput per GPU against tokens/s/user under a TTFT limit, per model and
    architecture.

    A sweep's seeds are replications of one design: its metrics are averaged over them."""
    from serveplan.pareto import READS, best_under_speed, pareto_points, plot_pareto, points_dataset
    from serveplan.plots import context
    from serveplan.results_io import check_variables, read_result, result_kind, write_netcdf

    ds = read_result(results, ("sweep", "search"), "pareto")
    check_variables(ds, results, "pareto", **READS[result_kind(ds)])
    df = pareto_points(ds, ttft, min_speed)
    console = wide_console()
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv, index=False)
    if out is not None:
        write_netcdf(points_dataset(df, ds, ttft_max_s=ttft, min_speed=min_speed), out,
                     kind="pareto")
    if plot_path is not None:
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        with _naming(results):
            title = context(ds)["title"]
        plot_pareto(df, plot_path, ttft_max_s=ttft, min_tok_s_user=min_speed, title=title)
    console.print(_pareto_table(df, ttft, min_speed))
    if min_speed is not None:
        best = best_under_speed(df)
        for _, r in best.iterrows():
            console.print(f"best at ≥ {min_speed:g} tok/s/user ({r['model']}, "
                          f"{r['architecture']}): {r['label']}, "
                          f"{r['throughput_per_gpu']:,.1f} tok/s/GPU")
        if not len(best):
            console.print(f"no frontier point reaches {min_speed:g} tok/s/user")
    for p in (csv, out, plot_path):
        if p is not None:
            console.print(f"wrote {p}")


@app.command()
@report_errors
def plot(
    results: Path = typer.Argument(..., help="run.nc (simulate), goodput.nc, sweep.nc or "
                                   "search.nc."),
    kind: str | None = typer.Option(
        None, "--kind", help="latency-vs-rate (goodput.nc, or sweep.nc over workload.rate) | "
        "histograms (run.nc from simulate) | bars (search.nc); default: the one that fits."),
    out: Path = typer.Option(..., "--out", "-o", help="PNG to write."),
    ttft: float | None = typer.Option(None, "--ttft", help="TTFT goal line in seconds "
                                      "(default: the file's slo.ttft_ms)."),
    tpot: float | None = typer.Option(None, "--tpot", help="TPOT goal line in seconds "
                                      "(default: the file's slo.tpot_ms)."),
) -> None:
    """Draw a stored result."""
    from serveplan.plots import PLOT_READS, choose_kind
    from serveplan.plots import plot as draw
    from serveplan.results_io import KINDS, check_variables, read_result, result_kind

    ds = read_result(results, tuple(KINDS), "plot")
    with _naming(results):
        chosen = choose_kind(kind, result_kind(ds))
    check_variables(ds, results, f"plot --kind {chosen}",
                    **PLOT_READS.get((chosen, result_kind(ds)), {}))
    out.parent.mkdir(parents=True, exist_ok=True)
    with _naming(results):
        drawn = draw(ds, chosen, out, ttft_s=ttft, tpot_s=tpot)
    wide_console().print(f"wrote {out} ({drawn})")


@contextmanager
def _naming(results: Path):
    """A ValueError of reading ``results`` (a value the file should not hold, a plot kind
    that does not draw it) as one error naming the file."""
    try:
        yield
    except ValueError as exc:
        raise UserError(f"{results}: {exc}") from None


def _ranked_deployment(results: Path, rank: int) -> dict:
    """The deployment of the strategy ranked ``rank`` in a search result (and a comment)."""
    from serveplan.results_io import check_variables, read_result

    ds = read_result(results, ("search",), "export")
    check_variables(ds, results, "export", numbers=("rank", "goodput"),
                    texts=("name", "fidelity", "deployment"))
    hit = (ds["rank"].values == rank).nonzero()[0]
    if hit.size == 0:
        raise UserError(f"no strategy of rank {rank}; decided ranks are 1.."
                        f"{int(ds['rank'].values.max())}")
    typer.echo(f"# rank {rank}: {ds['name'].values[hit[0]]}, goodput "
               f"{float(ds['goodput'].values[hit[0]]):.3g} req/s "
               f"({ds['fidelity'].values[hit[0]]} level)")
    try:
        return json.loads(str(ds["deployment"].values[hit[0]]))
    except json.JSONDecodeError as exc:
        raise UserError(f"{results}: the deployment of rank {rank} is not JSON ({exc.msg}); "
                        "was the file edited?") from None


@app.command()
@report_errors
def export(
    engine: str = typer.Argument(..., help="vllm or sglang."),
    results: Path = typer.Argument(..., help="search.nc (serveplan search --out), or a YAML "
                                   "file with a deployment."),
    rank: int = typer.Option(1, "--rank", min=1, help="Which ranked strategy of a search."),
    port: int | None = typer.Option(None, "--port", help="First instance port, 1..65535 "
                                    "(default 8100 for vllm, 30000 for sglang)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1,
                                      help="GPUs per node; instances never straddle nodes."),
    hosts: str | None = typer.Option(None, "--hosts", help="Comma-separated host names, one "
                                     "per node (default node0,node1,...; localhost on one)."),
) -> None:
    """Print the launch commands of a ranked strategy (or a deployment file), one block
    per node, after checking with the memory planner that every instance fits."""
    from serveplan.launch import sglang_commands, vllm_commands

    if engine not in ("vllm", "sglang"):
        raise UserError(f"engine given an invalid value: {engine!r} (valid: vllm, sglang)")
    if results.suffix in (".yaml", ".yml"):
        from serveplan.config import read_yaml

        data = read_yaml(results)
        deployment = data.get("deployment", data)
    else:
        deployment = _ranked_deployment(results, rank)
    fn = vllm_commands if engine == "vllm" else sglang_commands
    kw = {} if port is None else {"base_port": port}
    names = [h.strip() for h in (hosts or "").split(",") if h.strip()] or None
    for line in fn(deployment, gpus_per_node=gpus_per_node, hosts=names, **kw):
        typer.echo(line)
