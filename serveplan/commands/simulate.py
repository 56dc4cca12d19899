"""``serveplan simulate``: run the event simulator on a YAML config (CLI flags override it)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from serveplan.cli import app
from serveplan.errors import UserError, report_errors


class SchedulerOpt(str, Enum):
    vllm_v1 = "vllm-v1"
    sglang = "sglang"
    prefill_priority = "prefill-priority"


class RouterOpt(str, Enum):
    round_robin = "round-robin"
    least_outstanding_tokens = "least-outstanding-tokens"
    least_requests = "least-requests"


def _parse_set(items: list[str]) -> dict[str, Any]:
    """``key.path=value`` pairs; values are YAML scalars (``8``, ``true``, ``1e-3``, text)."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key.path=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
    return out


def resolve_overrides(data: dict, *, rate=None, requests=None, trace=None, time_scale=None,
                      concurrency=None, isl=None, osl=None, seed=None, scheduler=None,
                      router=None, num_instances=None, num_gpu_blocks=None, max_num_seqs=None,
                      max_num_batched_tokens=None, sets: dict | None = None) -> dict:
    """Apply CLI overrides to the file's mapping (file < flags < ``--set``).

    ``--trace`` turns the workload into a trace workload and ``--concurrency`` into a
    closed loop, keeping the fields the new kind accepts (e.g. ``num_requests``).
    """
    from serveplan.config import set_path, switch_workload_kind

    workload = dict(data.get("workload") or {})
    if trace is not None:
        was_trace = workload.get("kind") == "trace"
        workload = switch_workload_kind(workload, "trace")
        workload["path"] = str(trace)
        if not was_trace:  # a synthetic rate is not a replay rate: replay the timestamps
            workload.pop("rate", None)
    if concurrency is not None:
        workload = switch_workload_kind(workload, "closed-loop")
        workload["concurrency"] = concurrency
    for key, value in (("rate", rate), ("num_requests", requests), ("time_scale", time_scale),
                       ("isl", isl), ("osl", osl)):
        if value is not None:
            workload[key] = value
    data = {**data, "workload": workload} if workload or "workload" in data else dict(data)
    flags = {"seed": seed, "deployment.scheduler": scheduler, "deployment.router": router,
             "deployment.num_instances": num_instances,
             "deployment.num_gpu_blocks": num_gpu_blocks,
             "deployment.max_num_seqs": max_num_seqs,
             "deployment.max_num_batched_tokens": max_num_batched_tokens}
    for key, value in {**{k: v for k, v in flags.items() if v is not None},
                       **(sets or {})}.items():
        data = set_path(data, key, value.value if isinstance(value, Enum) else value)
    return data


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "—" if v != v else f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _print_summary(summary: dict, resolved: dict, console: Console) -> None:
    title = (f"{resolved['model']} on {resolved['gpu']} tp={resolved['tp']} · "
             f"{resolved['num_instances']}× {resolved['scheduler']} · "
             f"{resolved['usable_kv_blocks']:,} KV blocks of {resolved['block_size']}")
    head = Table(title=title, show_header=False)
    head.add_column("metric")
    head.add_column("value", justify="right")
    for key in ("completed", "failed", "duration_s", "request_throughput", "output_throughput",
                "total_token_throughput", "mean_itl_ms", "num_preemptions", "prefix_hit_rate",
                "mean_batch_size", "mean_kv_usage", "max_kv_usage", "total_steps"):
        head.add_row(key, _fmt(summary[key]))
    for key in sorted(k for k in summary if k.startswith("slo_")):
        head.add_row(key, _fmt(summary[key]))
    console.print(head)
    lat = Table(title="latency (ms)")
    lat.add_column("metric")
    for col in ("mean", "median", "p90", "p99"):
        lat.add_column(col, justify="right")
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"),
                        ("queue", "queueing delay"), ("max_itl", "max ITL per request")):
        lat.add_row(label, *(_fmt(summary[f"{p}_{name}_ms"])
                             for p in ("mean", "median", "p90", "p99")))
    console.print(lat)


@app.command()
@report_errors
def simulate(
    config: Path = typer.Argument(..., help="Simulation YAML (deployment, workload, slo, seed)."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="Write the per-request Dataset as NetCDF (.nc)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Workload seed."),
    rate: float | None = typer.Option(None, "--rate", help="Arrival rate, requests/s."),
    requests: int | None = typer.Option(None, "--requests", "-n", help="Number of requests."),
    trace: Path | None = typer.Option(None, "--trace",
                                      help="Replay a trace (Azure CSV, Mooncake JSONL, Vidur)."),
    time_scale: float | None = typer.Option(None, "--time-scale",
                                            help="Replay a trace this many times faster."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="Closed loop: clients each keeping one request in flight."),
    isl: int | None = typer.Option(None, "--isl", help="Fixed input (prompt) length."),
    osl: int | None = typer.Option(None, "--osl", help="Fixed output length."),
    scheduler: SchedulerOpt | None = typer.Option(None, "--scheduler", help="Scheduler policy."),
    router: RouterOpt | None = typer.Option(None, "--router", help="Router between instances."),
    num_instances: int | None = typer.Option(None, "--num-instances",
                                             help="Colocated instances."),
    num_gpu_blocks: int | None = typer.Option(None, "--num-gpu-blocks",
                                              help="Override the KV blocks per instance."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens"),
    set_: list[str] = typer.Option([], "--set",
                                   help="Any config field: --set deployment.block_size=32."),
) -> None:
    """Simulate a serving deployment step by step (vLLM v1 / SGLang / prefill-priority)."""
    from serveplan.config import SimulationConfig, read_yaml
    from serveplan.sim.results import summary_json
    from serveplan.simulation import run_config

    data = resolve_overrides(
        read_yaml(config), rate=rate, requests=requests, trace=trace, time_scale=time_scale,
        concurrency=concurrency, isl=isl, osl=osl, seed=seed, scheduler=scheduler,
        router=router, num_instances=num_instances, num_gpu_blocks=num_gpu_blocks,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        sets=_parse_set(set_))
    cfg = SimulationConfig.model_validate(data)
    ds = run_config(cfg)
    summary = json.loads(ds.attrs["summary"])
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        ds.to_netcdf(out, engine="h5netcdf")
    if as_json:
        typer.echo(summary_json(summary))
        return
    console = Console()
    printer = _print_summary
    if ds.attrs.get("architecture") == "pd":
        from serveplan.commands.compare_routers import print_pd_summary as printer
    printer({k: (float("nan") if v is None else v) for k, v in summary.items()},
            json.loads(ds.attrs["resolved"]), console)
    if out is not None:
        console.print(f"wrote {out}")
