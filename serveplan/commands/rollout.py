"""``serveplan rollout``: an RL rollout burst with and without a mid-run layout switch."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from serveplan.commands.app import app
from serveplan.commands.common import parse_set
from serveplan.errors import report_errors


class KVOpt(str, Enum):
    recompute = "recompute"
    transfer = "transfer"


def _overrides(data: dict, flags: dict, sets: dict) -> dict:
    """File < flags < ``--set``."""
    from serveplan.config_paths import set_path

    for path, value in {**{k: v for k, v in flags.items() if v is not None}, **sets}.items():
        data = set_path(data, path, value)
    return data


def _fmt(v) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def _print(s: dict, console: Console) -> None:
    t = Table(title=f"rollout of {s['num_trajectories']:,} trajectories on {s['gpus']} GPUs")
    t.add_column("")
    t.add_column(f"A throughout ({s['layout_a']})", justify="right")
    t.add_column(f"switch to B ({s['layout_b']})", justify="right")
    base, sw = s["without_switch"], s["with_switch"]
    for key, label in (("makespan_s", "makespan (s)"), ("output_tokens", "output tokens"),
                       ("decode_throughput_tok_s", "effective decode throughput (tok/s)")):
        t.add_row(label, _fmt(base[key]), _fmt(sw[key]))
    console.print(t)
    sw_fig = s["switch"]
    if sw_fig is None:
        console.print(f"no switch: fewer than {s['threshold']:,} were never active before "
                      "the last trajectory finished")
        return
    p = sw_fig["pause"]
    console.print(
        f"switch at {sw_fig['t_switch_s']:,.2f} s with {sw_fig['active_at_switch']:,} active "
        f"(threshold {s['threshold']:,}); pause {p['total_s']:,.2f} s = setup "
        f"{p['setup_s']:,.2f} + weights {p['weights_s']:,.2f} + KV transfer "
        f"{p['kv_transfer_s']:,.2f}" + (" (reconfig_cost_s given)" if p["override_s"]
                                        is not None else "")
        + f" over {p['link']} at {p['link_bw'] / 1e9:,.0f} GB/s per GPU", highlight=False)
    if s["kv"] == "recompute":
        console.print(f"KV recomputed on B: {sw_fig['contexts_recomputed']:,} contexts, "
                      f"~{sw_fig['recompute_estimate_s']:,.2f} s of prefill on the busiest "
                      "instance (simulated inside B's steps)", highlight=False)
    console.print(f"speedup {s['speedup']:.2f}x (makespan without / with the switch)",
                  highlight=False)


@app.command()
@report_errors
def rollout(
    config: Path = typer.Argument(..., help="Rollout YAML (model, gpu, engine, layout_a, "
                                  "layout_b, workload, reconfig, seed)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON, with the "
                                 "active-trajectory series of both runs."),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Workload seed."),
    trajectories: int | None = typer.Option(None, "--trajectories", "-n",
                                            help="Trajectories in the burst."),
    threshold: int | None = typer.Option(
        None, "--threshold", help="Switch when fewer than this many trajectories are active "
        "(replaces the file's threshold or threshold_fraction)."),
    kv: KVOpt | None = typer.Option(None, "--kv", help="KV rematerialization on layout B."),
    reconfig_cost: float | None = typer.Option(
        None, "--reconfig-cost", help="Measured pause in seconds (replaces the model)."),
    set_: list[str] = typer.Option([], "--set", help="Any field: --set layout_b.tp=8."),
) -> None:
    """Simulate an RL rollout burst on layout A throughout and switching to layout B when
    few trajectories remain (papers/frontier.txt §6.4); docs/rollout.md."""
    from serveplan.config import read_yaml
    from serveplan.rollout import run_rollout
    from serveplan.rollout_config import RolloutConfig

    data = read_yaml(config)
    if threshold is not None and isinstance(data.get("reconfig"), dict):
        data["reconfig"] = {k: v for k, v in data["reconfig"].items()
                            if k != "threshold_fraction"}
    flags = {"seed": seed, "workload.num_trajectories": trajectories,
             "reconfig.threshold": threshold, "reconfig.kv": kv.value if kv else None,
             "reconfig.reconfig_cost_s": reconfig_cost}
    cfg = RolloutConfig.model_validate(_overrides(data, flags, parse_set(set_)))
    summary = run_rollout(cfg).summary()
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    _print(summary, Console())
