"""``serveplan compare-routers``: the same arrivals through each router, side by side."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from serveplan.commands.app import app
from serveplan.commands.common import parse_set, resolve_overrides, wide_console
from serveplan.errors import UserError, report_errors

COLOCATED_ROUTERS = ("round-robin", "least-outstanding-tokens", "least-requests")
COLOCATED_ALIASES = {"rr": "round-robin", "least-loaded": "least-outstanding-tokens",
                     "ils": "least-outstanding-tokens"}
DEFAULT_ROUTERS = {"colocated": COLOCATED_ROUTERS,
                   "pd": ("round-robin", "least-loaded", "sibyl")}
COLUMNS = (("mean_tpot_ms", "mean", "{:.1f}"), ("median_tpot_ms", "P50", "{:.1f}"),
           ("p99_tpot_ms", "P99", "{:.1f}"), ("p99_9_tpot_ms", "P99.9", "{:.1f}"),
           ("output_throughput", "tok/s", "{:,.0f}"),
           ("optimal_assignment_ratio", "opt tok", "{:.0%}"),
           ("optimal_assignment_ratio_requests", "opt req", "{:.0%}"))


def _canonical(names: list[str], pd: bool) -> list[str]:
    from serveplan.sim.pd_router import DECODE_ROUTERS, ROUTER_ALIASES

    out = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if pd:
            name = ROUTER_ALIASES.get(name, name)
            valid = list(DECODE_ROUTERS) + list(ROUTER_ALIASES)
        else:
            name = COLOCATED_ALIASES.get(name, name)
            valid = list(COLOCATED_ROUTERS) + list(COLOCATED_ALIASES)
        if name not in (DECODE_ROUTERS if pd else COLOCATED_ROUTERS):
            kind = "disaggregated" if pd else "colocated"
            raise UserError(f"--routers given an invalid value for a {kind} deployment: "
                            f"{raw.strip()!r} (valid: {', '.join(valid)})")
        out.append(name)
    if not out:
        raise UserError("--routers needs at least one router name")
    return out


def _p999(ds) -> float:
    from serveplan.sim.state import FINISHED_IGNORED, PREEMPTED

    st = ds["status"].values
    x = ds["tpot_s"].values[(st > PREEMPTED) & (st != FINISHED_IGNORED)]
    x = x[np.isfinite(x)]
    return float(np.percentile(x, 99.9) * 1e3) if x.size else float("nan")


def compare(cfg, routers: list[str]) -> tuple[list[dict], list]:
    """Run ``cfg``'s requests through each router, as a simulation runs the deployment
    (the engine's runtime included); ``(summaries, datasets)``."""
    from serveplan.resolution import resolve
    from serveplan.simulation import build_requests, run_resolved, sibyl_prior

    pd = cfg.deployment.architecture == "pd"
    names = _canonical(routers, pd)
    resolved = resolve(cfg.deployment)
    requests = build_requests(cfg.workload, cfg.seed, block_size=resolved.block_size)
    prior = sibyl_prior(cfg.workload, resolved, cfg.seed)
    rows, sets = [], []
    for name in names:
        res = run_resolved(resolved, requests, router=name, record_steps=2, prior=prior)
        summary, ds = (_pd_summary if pd else _colocated_summary)(cfg, resolved, res, name)
        rows.append({"router": name, **summary})
        sets.append(ds)
    return rows, sets


def _pd_summary(cfg, resolved, res, name: str):
    """A disaggregated run's summary and Dataset (the config naming its decode router)."""
    from serveplan.simulation import make_dataset

    key = "decode_router" if hasattr(cfg.deployment, "decode_router") else "router"
    run_cfg = cfg.model_copy(update={"deployment": cfg.deployment.model_copy(
        update={key: name})})
    ds = make_dataset(run_cfg, resolved, res)
    return json.loads(ds.attrs["summary"]), ds


def _colocated_summary(cfg, resolved, res, name: str):
    """A colocated run's summary (with the P99.9 TPOT) and Dataset."""
    from serveplan.sim.results import summarize, to_dataset

    ds = to_dataset(res, attrs={"router": name})
    slo = cfg.slo.model_dump() if cfg.slo is not None else None
    return {**summarize(ds, slo), "p99_9_tpot_ms": _p999(ds)}, ds


def print_rows(rows: list[dict], console: Console, title: str) -> None:
    table = Table(title=title, caption="TPOT in ms; opt: requests whose pre-assigned decode "
                  "instance was the least loaded at the handoff (by tokens, by requests)")
    table.add_column("router", no_wrap=True)
    for _, label, _ in COLUMNS:
        table.add_column(label, justify="right", no_wrap=True)
    for row in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            v = row.get(key)
            cells.append("—" if v is None or v != v else fmt.format(v))
        table.add_row(row["router"], *cells)
    console.print(table)


@app.command("compare-routers")
@report_errors
def compare_routers(
    config: Path = typer.Argument(..., help="Simulation YAML (colocated or architecture: pd)."),
    routers: str | None = typer.Option(
        None, "--routers",
        help="Comma-separated routers. PD: round-robin (rr), least-loaded (ils), "
        "least-requests, sibyl, sibyl-p1, sibyl-no-type1/2/3, sibyl-reqlevel, sibyl-alg1 (default "
        f"{','.join(DEFAULT_ROUTERS['pd'])}). Colocated: round-robin (rr), "
        "least-outstanding-tokens (least-loaded), least-requests (default: all three)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="Write per-request results (router dim) as NetCDF."),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Workload seed."),
    rate: float | None = typer.Option(None, "--rate", help="Arrival rate, requests/s."),
    requests: int | None = typer.Option(None, "--requests", "-n", help="Number of requests."),
    set_: list[str] = typer.Option([], "--set",
                                   help="Any config field: --set deployment.assignment=late."),
) -> None:
    """Run the same arrivals through each router; print TPOT percentiles, throughput and
    the optimal-assignment ratio side by side."""
    import xarray as xr

    from serveplan.config import SimulationConfig, read_yaml
    from serveplan.results_io import write_netcdf

    data = resolve_overrides(read_yaml(config), rate=rate, requests=requests, seed=seed,
                             sets=parse_set(set_))
    cfg = SimulationConfig.model_validate(data)
    names = (routers.split(",") if routers is not None
             else list(DEFAULT_ROUTERS[cfg.deployment.architecture]))
    rows, sets = compare(cfg, names)
    if out is not None:
        keep = [v for v in sets[0].data_vars if sets[0][v].dims == ("request",)]
        merged = xr.concat([ds[keep] for ds in sets], dim="router", coords="minimal",
                           compat="override", combine_attrs="drop_conflicts")
        merged = merged.assign_coords(router=[r["router"] for r in rows])
        merged.attrs["rows"] = json.dumps(rows, default=float)
        merged.attrs["config"] = cfg.model_dump_json()
        write_netcdf(merged, out, kind="compare-routers")
    if as_json:
        clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                 for r in rows]
        typer.echo(json.dumps(clean, indent=2, default=float))
        return
    console = wide_console()
    kind = "disaggregated" if cfg.deployment.architecture == "pd" else "colocated"
    n = rows[0].get("completed", 0)
    print_rows(rows, console, f"TPOT of {kind} routers · {n} requests · seed {cfg.seed}")
    if out is not None:
        console.print(f"wrote {out}")
