"""``serveplan simulate``: run the event simulator on a YAML config (CLI flags override it)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from serveplan.commands.app import app
from serveplan.commands.common import (
    check_run_size,
    parse_set,
    print_summary,
    resolve_overrides,
)
from serveplan.errors import UserError, report_errors


class SchedulerOpt(str, Enum):
    vllm_v1 = "vllm-v1"
    sglang = "sglang"
    prefill_priority = "prefill-priority"
    skip_join_mlfq = "skip-join-mlfq"
    h2q_br = "h2q-br"


class SpecMethodOpt(str, Enum):
    ngram = "ngram"
    eagle = "eagle"
    eagle3 = "eagle3"
    mtp = "mtp"
    draft_model = "draft_model"


SpecMethod = Annotated[SpecMethodOpt | None, typer.Option(
    "--spec-method", help="Speculative decoding on every pool that decodes (vLLM "
    "speculative_config.method); sets speculative.method.")]
NumSpecTokens = Annotated[int | None, typer.Option(
    "--num-speculative-tokens", min=1, max=32,
    help="Draft tokens per decoding request and step (k).")]
SpecAcceptance = Annotated[str | None, typer.Option(
    "--spec-acceptance", help="Acceptance rate, or one per draft position (comma-separated): "
    "P(draft i accepted | drafts before it accepted).")]
DraftModel = Annotated[str | None, typer.Option(
    "--draft-model", help="Draft model of --spec-method draft_model (catalog name or "
    "config.json).")]


class RouterOpt(str, Enum):
    round_robin = "round-robin"
    least_outstanding_tokens = "least-outstanding-tokens"
    least_requests = "least-requests"


ConfigSets = Annotated[list[str] | None, typer.Option(
    "--set", help="Any config field: --set deployment.block_size=32; a list item by its "
    "index: --set deployment.pools[0].tp=2.")]
KVOffloadGB = Annotated[float | None, typer.Option(
    "--kv-offload-gb", help="CPU KV tier per instance, GiB of host memory (vLLM "
    "--kv-offloading-size); 0: none. Other options: --set "
    "deployment.kv_offload.store_on=compute (docs/cpu-offload.md).")]


@app.command()
@report_errors
def simulate(
    config: Path = typer.Argument(..., help="Simulation YAML (deployment, workload, slo, seed)."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="Write the per-request Dataset as NetCDF (.nc)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Workload seed."),
    rate: float | None = typer.Option(None, "--rate", help="Arrival rate, requests/s."),
    requests: int | None = typer.Option(None, "--requests", "-n", help="Number of requests (of sessions, for a session workload)."),
    trace: Path | None = typer.Option(None, "--trace",
                                      help="Replay a trace (Azure CSV, Mooncake JSONL, Vidur)."),
    time_scale: float | None = typer.Option(None, "--time-scale",
                                            help="Replay a trace this many times faster."),
    sessions: Path | None = typer.Option(
        None, "--sessions", help="Replay a JSON Lines session trace (rounds with tool delays; "
        "docs/sessions.md)."),
    num_sessions: int | None = typer.Option(
        None, "--num-sessions", min=1, help="Sessions of a session workload (generated, or "
        "the first of the trace)."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="Closed loop: clients each keeping one request in flight."),
    isl: int | None = typer.Option(None, "--isl", help="Fixed input (prompt) length."),
    osl: int | None = typer.Option(None, "--osl", help="Fixed output length."),
    scheduler: SchedulerOpt | None = typer.Option(
        None, "--scheduler", help="Scheduler policy (skip-join-mlfq, h2q-br: session-aware "
        "orders before vLLM v1's batch rules)."),
    router: RouterOpt | None = typer.Option(
        None, "--router", help="Router between instances. least-outstanding-tokens is "
        "clairvoyant: it charges each request its true output length, which a real router "
        "cannot know (an optimistic reference; docs/goodput.md, Routers)."),
    num_instances: int | None = typer.Option(None, "--num-instances",
                                             help="Colocated instances."),
    num_gpu_blocks: int | None = typer.Option(None, "--num-gpu-blocks",
                                              help="Override the KV blocks per instance."),
    max_num_seqs: int | None = typer.Option(
        None, "--max-num-seqs", help="Override max_num_seqs (requests per batch) of every instance."),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Override the per-step token budget of every instance."),
    kv_offload_gb: KVOffloadGB = None,
    spec_method: SpecMethod = None,
    num_speculative_tokens: NumSpecTokens = None,
    spec_acceptance: SpecAcceptance = None,
    draft_model: DraftModel = None,
    set_: ConfigSets = None,
) -> None:
    """Simulate a deployment step by step (vLLM v1, SGLang, TRT-LLM, session schedulers)."""
    from serveplan.config import SimulationConfig, read_yaml
    from serveplan.speculative import apply_spec_flags

    spec = {"method": spec_method.value if spec_method else None, "draft_model": draft_model,
            "num_speculative_tokens": num_speculative_tokens,
            "acceptance": parse_rates(spec_acceptance)}
    data = resolve_overrides(
        apply_spec_flags(read_yaml(config), spec), rate=rate, requests=requests, trace=trace,
        time_scale=time_scale, concurrency=concurrency, isl=isl, osl=osl, seed=seed, scheduler=scheduler,
        router=router, num_instances=num_instances, num_gpu_blocks=num_gpu_blocks,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        kv_offload_gb=kv_offload_gb, sets=parse_set(set_ or []), source=config, sessions=sessions,
        num_sessions=num_sessions)
    _report(_run(SimulationConfig.model_validate(data)), out, as_json)


def _report(ds, out: Path | None, as_json: bool) -> None:
    """Write the Dataset (``--out``) and print the summary (table or ``--json``)."""
    from serveplan.results_io import write_netcdf
    from serveplan.sim.results import summary_json

    summary = json.loads(ds.attrs["summary"])
    if out is not None:
        write_netcdf(ds, out, kind="simulate")
    if as_json:
        typer.echo(summary_json(summary))
        return
    console = Console()
    print_summary({k: (float("nan") if v is None else v) for k, v in summary.items()},
                  json.loads(ds.attrs["resolved"]), console,
                  pd=ds.attrs.get("architecture") in ("pd", "afd"))
    if failure_line(summary):
        console.print(failure_line(summary), highlight=False)
    if out is not None:
        console.print(f"wrote {out}")


def _run(cfg):
    """:func:`serveplan.simulation.run_config`, with the run's size checked before the
    simulator allocates (:func:`~serveplan.commands.common.check_run_size`)."""
    from serveplan.simulation import (
        build_requests,
        make_dataset,
        resolve,
        run_resolved,
        sibyl_prior,
    )

    resolved = resolve(cfg.deployment)
    requests = build_requests(cfg.workload, cfg.seed, block_size=resolved.block_size)
    check_run_size(resolved, requests, cfg.workload)
    result = run_resolved(resolved, requests, record_steps=cfg.record_steps,
                          prior=sibyl_prior(cfg.workload, resolved, cfg.seed))
    return make_dataset(cfg, resolved, result, requests)


def parse_rates(text: str | None) -> float | list[float] | None:
    """``--spec-acceptance``: one rate (``0.7``) or one per position (``0.8,0.6,0.4``)."""
    if text is None:
        return None
    try:
        rates = [float(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--spec-acceptance: expected a rate or comma-separated rates "
                        f"(e.g. 0.8,0.6), got {text!r}") from None
    return rates[0] if len(rates) == 1 else rates


def failure_line(summary: dict) -> str:
    """``failed: N of M requests: why.`` for a run with failed requests, else ``""``."""
    failed = int(summary.get("failed") or 0)
    if not failed:
        return ""
    total = failed + int(summary.get("completed") or 0)
    why = summary.get("failed_reason") or "see the Dataset's status variable"
    slo = " Failed requests count against the SLO as misses." if "slo_met" in summary else ""
    return f"failed: {failed:,} of {total:,} requests: {why}.{slo}"
