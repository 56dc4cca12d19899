"""``serveplan goodput``: the highest request rate a deployment serves within its SLO."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from serveplan.commands.app import app
from serveplan.commands.common import check_sections, parse_set
from serveplan.errors import report_errors


def _ms(x: float) -> str:
    return "—" if x != x else ("inf" if x == float("inf") else f"{x * 1e3:,.1f}")


def goodput_summary(g) -> dict:
    """The headline numbers of a :class:`~serveplan.goodput.GoodputResult` (JSON-ready)."""
    at = g.check_at(g.rate)
    out = {
        "strategy": g.attrs.get("strategy", ""), "fidelity": g.fidelity, "gpus": g.gpus,
        "goodput": g.rate, "goodput_low": g.low, "goodput_high": g.upper,
        "goodput_per_gpu": g.per_gpu, "binding": g.binding,
        "censored": bool(g.censored or g.point_censored), "summary": g.sentence(),
        "analytic_goodput": g.analytic, "capacity_bound": g.capacity,
        "verifiable_up_to": g.ceiling, "requests_per_run": g.requests_per_run,
        "t_min_s": g.t_min, "bestserve_bracket": [0.1, 1.2 / g.t_min if g.t_min > 0 else None],
        "evaluations": len(g.checks), "confidence": g.confidence,
    }
    if at is not None:
        p = g.slo.percentile
        for name, iv in (("ttft", at.ttft), ("tpot", at.tpot)):
            out[f"p{p:g}_{name}_ms"] = [iv.estimate * 1e3, iv.low * 1e3, iv.high * 1e3]
    return json_ready(out)


NULL_REASONS = {
    "upper": "the interval's upper end is unbounded: too few requests lie above the "
             "percentile for this confidence (more requests per run or more seeds bound it)",
    "nan_ms": "undefined: no request has this latency (one-token outputs have no TPOT)",
    "inf_ms": "infinite (requests never served count as infinitely late)",
    "nan": "undefined (NaN)",
    "inf": "infinite",
}
"""Why a number of the ``--json`` summary is null (JSON has no inf or NaN)."""


def json_ready(out: dict) -> dict:
    """``out`` with inf and NaN numbers (top level, or in a list) written as None, and a
    ``null_reasons`` mapping saying why for each key that has one (as ``simulate --json``
    writes null for undefined numbers)."""
    reasons, clean = {}, {}
    for key, value in out.items():
        items = value if isinstance(value, list) else [value]
        bad = [i for i, v in enumerate(items) if isinstance(v, float) and not math.isfinite(v)]
        if not bad:
            clean[key] = value
            continue
        upper_only = isinstance(value, list) and len(value) == 3 and bad == [2]
        nan = any(items[i] != items[i] for i in bad)
        kind = "upper" if upper_only else ("nan" if nan else "inf") + (
            "_ms" if key.endswith("_ms") else "")
        reasons[key] = NULL_REASONS[kind]
        fixed = [None if i in bad else v for i, v in enumerate(items)]
        clean[key] = fixed if isinstance(value, list) else fixed[0]
    if reasons:
        clean["null_reasons"] = reasons
    return clean


def _print(g, console: Console) -> None:
    gpus = f"{g.gpus} GPU" + ("s" if g.gpus != 1 else "")
    t = Table(title=f"goodput of {g.attrs.get('strategy', '')} ({gpus}) at {g.fidelity} level",
              show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("goodput (req/s)", ("≥ " if g.point_censored else "") + f"{g.rate:,.3f}")
    t.add_row(f"{g.confidence:.0%} interval", f"[{g.low:,.3f}, {g.upper:,.3f})"
              + (" (upper end: capacity bound)" if g.upper == g.capacity else ""))
    t.add_row("per GPU (req/s)", f"{g.per_gpu:,.3f}")
    t.add_row("binds", g.binding)
    t.add_row("analytic goodput", f"{g.analytic:,.3f}")
    t.add_row("capacity bound", f"{g.capacity:,.3f}")
    if g.fidelity != "analytic":
        t.add_row(f"verifiable up to ({g.requests_per_run:,} requests/run)", f"{g.ceiling:,.3f}")
    t.add_row("BestServe bracket 1.2/T_min", f"{1.2 / g.t_min:,.3f}" if g.t_min else "—")
    at = g.check_at(g.rate)
    if at is not None:
        p = g.slo.percentile
        for name, iv in (("TTFT", at.ttft), ("TPOT", at.tpot)):
            t.add_row(f"P{p:g} {name} at goodput (ms)",
                      f"{_ms(iv.estimate)} [{_ms(iv.low)}, {_ms(iv.high)}]")
    t.add_row("rates evaluated", str(len(g.checks)))
    console.print(t)
    console.print(g.sentence())
    console.print(f"interval [a, b): the SLO is met with {g.confidence:.0%} confidence at a "
                  "and confidently violated at b (or b is the capacity bound); its width "
                  f"includes the search's resolution rtol = {g.rtol:g}.", style="dim")


@app.command()
@report_errors
def goodput(
    config: Path = typer.Argument(..., help="YAML: deployment, workload, slo, seed, goodput."),
    fidelity: str | None = typer.Option(None, "--fidelity",
                                        help="auto | analytic | request | iteration."),
    seeds: int | None = typer.Option(None, "--seeds", min=1, help="Replications."),
    requests: int | None = typer.Option(None, "--requests", "-n", help="Requests per run."),
    confidence: float | None = typer.Option(None, "--confidence", help="e.g. 0.95."),
    rtol: float | None = typer.Option(None, "--rtol", help="Relative bracket width."),
    ttft: float | None = typer.Option(None, "--ttft", help="TTFT goal (s)."),
    tpot: float | None = typer.Option(None, "--tpot", help="TPOT goal (s)."),
    percentile: float | None = typer.Option(None, "--percentile", help="SLO percentile."),
    attainment: float | None = typer.Option(
        None, "--attainment", help="Fraction of requests meeting both goals (DistServe)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the evaluations (.nc)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    set_: list[str] = typer.Option([], "--set", help="Any config field: --set seed=3."),
) -> None:
    """Find the goodput (max req/s meeting the SLO) with a confidence interval."""
    from serveplan.config import read_yaml, set_path
    from serveplan.goodput import GoodputConfig, run_goodput
    from serveplan.results_io import write_netcdf

    data = read_yaml(config)
    check_sections(data, config, ("deployment", "workload", "slo", "goodput"))
    flags = {"goodput.fidelity": fidelity, "goodput.seeds": seeds,
             "goodput.num_requests": requests, "goodput.confidence": confidence,
             "goodput.rtol": rtol, "slo.percentile": percentile,
             "slo.attainment": attainment,
             "slo.ttft_ms": None if ttft is None else ttft * 1e3,
             "slo.tpot_ms": None if tpot is None else tpot * 1e3}
    for key, value in {**{k: v for k, v in flags.items() if v is not None},
                       **parse_set(set_)}.items():
        data = set_path(data, key, value)
    cfg = GoodputConfig.model_validate(data)
    g = run_goodput(cfg)
    if out is not None:
        write_netcdf(g.to_dataset(), out)
    if as_json:
        typer.echo(json.dumps(goodput_summary(g), indent=2, default=float))
        return
    console = Console()
    _print(g, console)
    if out is not None:
        console.print(f"wrote {out}")
