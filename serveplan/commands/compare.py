"""``serveplan compare``: serveplan against a benchmark run the user already has."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from serveplan.commands import run_flags as F
from serveplan.commands.app import app
from serveplan.errors import UserError, report_errors

RESULT_HELP = (
    "A benchmark result: `vllm bench serve --save-result` JSON (add --save-detailed for "
    "per-request figures), an `sglang.bench_serving --output-file` JSON Lines file "
    "(--output-details; FILE:LINE for one run of several), an aiperf profile export "
    "(profile_export.jsonl, profile_export_aiperf.json or their folder), a genai-perf "
    "one (*_genai_perf.json, profile_export.json or their folder), a GuideLLM report "
    "(benchmarks.json or .yaml; FILE:N for benchmark N of several), or an inference-perf "
    "report folder.")


def _fmt(key: str, x) -> str:
    if x is None:
        return "-"
    if key.endswith("_s"):
        return f"{x * 1e3:,.1f} ms"
    if key.endswith(("throughput", "percent")):
        return f"{x:,.2f}"
    return f"{x:,.0f}"


def print_comparison(result: dict, title: str, console: Console) -> None:
    """Measured, predicted and the relative error of every metric, then the notes."""
    table = Table(title=title, title_justify="left")
    for col in ("metric", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for key, row in result["metrics"].items():
        err = row["error"]
        table.add_row(key.removesuffix("_s"), _fmt(key, row["measured"]),
                      _fmt(key, row["predicted"]), "-" if err is None else f"{err:+.1%}")
    console.print(table)
    console.print("error = predicted / measured - 1; throughputs in requests/s and output "
                  "tokens/s", highlight=False)
    for note in result["notes"]:
        console.print(f"note: {note}", highlight=False)


_SWEEP_COLUMNS = (("mean_ttft_s", "TTFT mean, ms", 1e3), ("mean_tpot_s", "TPOT mean, ms", 1e3),
                  ("request_throughput", "req/s", 1.0))


def _pair(row: dict, scale: float) -> str:
    """``measured / predicted (error)`` of one metric, in ``scale`` units."""
    meas, pred, err = (row.get(k) for k in ("measured", "predicted", "error"))
    text = " / ".join("-" if v is None else f"{v * scale:,.{1 if scale > 1 else 2}f}"
                      for v in (meas, pred))
    return text + ("" if err is None else f" ({err:+.0%})")


def print_sweep(rows: list[tuple[str, str, int, dict]], title: str, console: Console) -> None:
    """One row per run: its load and the mean TTFT, TPOT and throughput, measured /
    predicted (error); then each note once, with the runs it concerns."""
    table = Table(title=title, title_justify="left")
    for col in ("run", "load", "requests") + tuple(name for _, name, _ in _SWEEP_COLUMNS):
        table.add_column(col, justify="left" if col in ("run", "load") else "right")
    notes: dict[str, list[str]] = {}
    for run, load, n, result in rows:
        table.add_row(run.rsplit(":", 1)[-1], load, f"{n:,}",
                      *(_pair(result["metrics"].get(key, {}), scale)
                        for key, _, scale in _SWEEP_COLUMNS))
        for note in result["notes"]:
            notes.setdefault(note, []).append(run.rsplit(":", 1)[-1])
    console.print(table)
    console.print("measured / predicted (error = predicted / measured - 1)", highlight=False)
    for note, runs in notes.items():
        where = "" if len(runs) == len(rows) else f" (run{'s' if len(runs) > 1 else ''} " \
                                                    f"{', '.join(runs)})"
        console.print(f"note{where}: {note}", highlight=False)


def _compare_all(result: Path, numbers: list[int], flags: dict) -> None:
    """``compare --all-runs``: every run of a file of several, one table."""
    from serveplan.run_compare import compare_run
    from serveplan.runs import describe_load, read_run

    if flags["out"] is not None or flags["plot"] is not None:
        raise UserError("--out / --plot: one run at a time (name it as FILE:N), not with "
                        "--all-runs")
    fmt = flags["fmt"]
    rows, deployments = [], {}
    for n in numbers:
        run = read_run(f"{result}:{n}", fmt.value if fmt else None)
        if run.model not in deployments:  # (the runs of one file name one model, mostly)
            deployments[run.model] = F.run_deployment(run.model, result, flags, flags["set_"])
        rows.append((run.name, describe_load(run.load), run.n,
                     compare_run(run, deployments[run.model], flags["seed"]).as_dict()))
    if flags["as_json"]:
        typer.echo(json.dumps([{"run": r, "load": load, "requests": n, **d}
                               for r, load, n, d in rows], indent=2))
        return
    print_sweep(rows, f"{result.name} ({len(rows)} runs): measured vs serveplan", Console())


@app.command()
@report_errors
def compare(
    result: Path = typer.Argument(..., help=RESULT_HELP),
    deployment: F.DeploymentFile = None,
    model: F.Model = None,
    gpu: F.Gpu = None,
    tp: F.TP = 1,
    pp: F.PP = 1,
    count: F.Instances = 1,
    engine: F.Engine = None,
    engine_version: F.EngineVersion = None,
    runtime_profile: F.RuntimeProfile = None,
    max_num_seqs: F.MaxNumSeqs = None,
    max_num_batched_tokens: F.MaxBatchedTokens = None,
    max_model_len: F.MaxModelLen = None,
    num_gpu_blocks: F.NumGpuBlocks = None,
    prefix_caching: F.PrefixCaching = None,
    fmt: F.Format = None,
    seed: F.Seed = 0,
    set_: F.Sets = None,
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the per-request "
                                    "measured / predicted pairs as NetCDF (.nc)."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw measured vs predicted "
                                     "CDFs of TTFT, TPOT, ITL and E2E (.png)."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    all_runs: bool = typer.Option(False, "--all-runs", help="Compare every run of a file "
                                  "of several (a GuideLLM sweep, an SGLang file of several "
                                  "lines), one row each."),
) -> None:
    """Replay a real benchmark run on the deployment that produced it; measured vs predicted."""
    from serveplan.results_io import write_netcdf
    from serveplan.run_compare import compare_run
    from serveplan.runs import read_run, run_numbers

    numbers = run_numbers(result, fmt.value if fmt else None) if all_runs else []
    if numbers:
        return _compare_all(result, numbers, locals())
    run = read_run(result, fmt.value if fmt else None)
    for flag, path in (("--out", out), ("--plot", plot)):
        if path is not None and not run.has_requests:
            raise UserError(f"{flag}: {result.name} has no per-request records "
                            f"({run.detail_hint})")
    resolved = F.run_deployment(run.model, result, locals(), set_)
    comparison = compare_run(run, resolved, seed)
    if out is not None:
        write_netcdf(comparison.pairs, out, kind="compare")
    if plot is not None:
        from serveplan.compare_plots import plot_cdfs

        plot_cdfs(comparison, run, plot)
    if as_json:
        typer.echo(json.dumps(comparison.as_dict(), indent=2))
        return
    console = Console()
    title = f"{run.name} ({run.tool}, {run.n:,} requests): measured vs serveplan"
    print_comparison(comparison.as_dict(), title, console)
    for path in (out, plot):
        if path is not None:
            console.print(f"wrote {path}")
