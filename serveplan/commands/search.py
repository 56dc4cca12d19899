"""``serveplan search``: rank every colocated and disaggregated strategy by goodput per GPU
(attention/FFN disaggregation with ``--arch ...,afd``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from serveplan.commands.app import app
from serveplan.errors import UserError, report_errors


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"--{name} expects comma-separated integers, got {text!r}") from None
    if not values:
        raise UserError(f"--{name} is empty")
    return values


GpusOpt = typer.Option(8, "--gpus", min=1, help="GPU budget (at most 1,024, and at most "
                       "20,000 strategies: the pd space grows as gpus squared).")
GpuOpt = typer.Option("h100", "--gpu", help="GPU type (catalog name or YAML), or several "
                      "comma-separated (h100,h20): each role pool may use any; the first is "
                      "the baseline of spend ratio and cost efficiency.")
RankOpt = typer.Option("gpu", "--rank-by", help="gpu: goodput per GPU; dollar: requests per "
                       "dollar (needs a price for every GPU type).")
PriceOpt = typer.Option([], "--price", help="Dollars per GPU-hour, GPU=USD (repeatable; over "
                        "the shipped defaults for h100, h200, b200, a100-80gb, h800, h20).")
FLAGS = {"gpus": "--gpus", "isl": "--isl", "osl": "--osl", "tp": "--tp",
         "architectures": "--arch", "fidelity": "--fidelity", "num_requests": "--requests",
         "seeds": "--seeds", "rtol": "--rtol", "top": "--top", "max_decide": "--max-decide",
         "max_num_seqs": "--max-num-seqs", "max_model_len": "--max-model-len",
         "gpu": "--gpu", "rank_by": "--rank-by", "prices": "--price",
         "micro_batches": "--micro-batches", "same_tp": "--same-tp", "dp": "--dp"}
"""The option of each :class:`SearchSpec` field the command sets."""


def _spec(**fields):
    """The :class:`SearchSpec`; a refused value is named by its option (``--gpus: ...``)."""
    from pydantic import ValidationError

    from serveplan.errors import format_validation_error
    from serveplan.search import SearchSpec

    try:
        return SearchSpec(**fields)
    except ValidationError as exc:
        lines = []
        for line in format_validation_error(exc):
            field, sep, rest = line.partition(":")
            flag = FLAGS.get(field.split(".")[0].split("[")[0])
            lines.append(f"{flag}{sep}{rest}" if flag and sep else line)
        raise UserError("\n".join(lines)) from None


def _summary(ds) -> list[dict]:
    rows = []
    for i in range(ds.sizes["strategy"]):
        r = ds.isel(strategy=i)
        if str(r["status"].values) != "decided":
            continue
        rows.append({"rank": int(r["rank"]), "strategy": str(r["name"].values),
                     "architecture": str(r["architecture"].values), "gpus": int(r["gpus"]),
                     "goodput": float(r["goodput"]), "goodput_low": float(r["goodput_low"]),
                     "goodput_high": float(r["goodput_high"]),
                     "goodput_per_gpu": float(r["goodput_per_gpu"]),
                     "binding": str(r["binding"].values),
                     "censored": bool(int(r["censored"])),
                     "analytic_goodput": float(r["analytic_goodput"]),
                     "fidelity": str(r["fidelity"].values),
                     **{k: _number(r, k) for k in MONEY if k in r}})
    return rows


MONEY = ("cost_per_hour", "goodput_per_dollar", "spend_ratio", "cost_efficiency")


def _number(r, name: str) -> float | None:
    value = float(r[name])
    return value if value == value else None  # NaN (no price, no baseline) -> null


ArchOpt = typer.Option("colocated,pd", "--arch", help="Any of colocated, pd and afd "
                       "(attention/FFN disaggregation: XpYaZf, opt-in).")
SameTpOpt = typer.Option(False, "--same-tp", help="PD, AFD: one TP for every role.")
MaxModelLenOpt = typer.Option(None, "--max-model-len", min=2, help="Longest request in "
                              "tokens (default: next power of 2 above the longest request, at "
                              "least 4096).")
DpOpt = typer.Option("1", "--dp", help="Attention data-parallel ranks per instance to try "
                     "(MoE models: experts run expert-parallel over tp x dp GPUs).")
MicroBatchesOpt = typer.Option("1,2", "--micro-batches", help="AFD: micro-batches (ping-pong "
                               "lanes) of the attention instances to try.")


@app.command()
@report_errors
def search(
    model: str = typer.Option("llama-3.1-8b", "--model", help="Catalog name or config.json."),
    gpu: str = GpuOpt,
    gpus: int = GpusOpt,
    isl: int = typer.Option(2048, "--isl", min=1, help="Input (prompt) length."),
    osl: int = typer.Option(64, "--osl", min=1, help="Output length."),
    ttft: float = typer.Option(1.5, "--ttft", help="TTFT goal (s)."),
    tpot: float = typer.Option(0.07, "--tpot", help="TPOT goal (s)."),
    percentile: float = typer.Option(90.0, "--percentile", help="SLO percentile."),
    attainment: float | None = typer.Option(
        None, "--attainment", help="Instead: fraction of requests meeting both goals."),
    tp: str = typer.Option("1,2,4,8", "--tp", help="Tensor-parallel sizes to try."),
    dp: str = DpOpt,
    arch: str = ArchOpt,
    same_tp: bool = SameTpOpt,
    micro_batches: str = MicroBatchesOpt,
    fidelity: str = typer.Option("auto", "--fidelity",
                                 help="auto | analytic | request | iteration."),
    requests: int = typer.Option(2000, "--requests", "-n", help="Requests per run."),
    seeds: int = typer.Option(2, "--seeds", min=1, help="Replications per rate."),
    rtol: float = typer.Option(0.05, "--rtol", help="Relative goodput resolution."),
    top: int = typer.Option(3, "--top", min=1, help="Decided before bound pruning."),
    max_decide: int = typer.Option(12, "--max-decide", min=1,
                                   help="Most strategies decided at fidelity."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", min=1,
                                     help="max_num_seqs of every instance (requests per batch)."),
    max_model_len: int | None = MaxModelLenOpt,
    rank_by: str = RankOpt,
    price: list[str] = PriceOpt,
    limit: int = typer.Option(20, "--limit", help="Rows shown."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the results (.nc)."),
    as_json: bool = typer.Option(False, "--json", help="Print decided strategies as JSON."),
) -> None:
    """Every colocated (xm), disaggregated (ypzd) and, opt-in, AFD (XpYaZf) strategy x TP."""
    from serveplan.config import SLO
    from serveplan.pricing import parse_prices
    from serveplan.results_io import write_netcdf
    from serveplan.search_report import feasible

    slo = SLO(ttft_ms=ttft * 1e3, tpot_ms=tpot * 1e3, percentile=percentile, attainment=attainment)
    spec = _spec(model=model, gpu=gpu, gpus=gpus, isl=isl, osl=osl, slo=slo,
                 tp=_ints(tp, "tp"), dp=_ints(dp, "dp"), same_tp=same_tp,
                 architectures=tuple(a.strip() for a in arch.split(",") if a.strip()),
                 micro_batches=_ints(micro_batches, "micro-batches"),
                 fidelity=fidelity, num_requests=requests, seeds=seeds, rtol=rtol,
                 top=top, max_decide=max_decide, max_num_seqs=max_num_seqs,
                 max_model_len=max_model_len, rank_by=rank_by.strip().lower(),
                 prices=parse_prices(price))
    console = _console(as_json, wide=spec.rank_by == "dollar" or len(spec.gpu_types) > 1)
    ds = _run(spec, console)
    if out is not None:
        write_netcdf(ds, out, kind="search")
    if not feasible(ds):
        raise UserError("\n".join(_refusal(ds, spec)))
    if as_json:
        typer.echo(json.dumps(_summary(ds), indent=2))
        return
    _report(ds, console, limit)
    if out is not None:
        console.print(f"wrote {out}")


def _run(spec, console: Console):
    """The search, with a status line naming the last decided strategy."""
    from serveplan.search import run_search

    with console.status("searching strategies ...") as status:
        return run_search(spec, progress=lambda d, n, name: status.update(
            f"decided {d} strategies (last: {name}) ..."))


def _console(as_json: bool, wide: bool) -> Console:
    """stdout (stderr beside JSON), 140 columns when not a terminal, 180 with the money
    columns."""
    stream = sys.stderr if as_json else sys.stdout
    return Console(stderr=as_json, width=None if stream.isatty() else 180 if wide else 140)


def _report(ds, console: Console, limit: int) -> None:
    """The table, its legend, the status counts and the recommendation."""
    from serveplan.search_report import legend, recommendation, search_table

    console.print(search_table(ds, limit))
    console.print(legend(ds), style="dim", highlight=False)
    counts = {s: int((ds["status"].values == s).sum()) for s in
              ("decided", "dominated", "pruned", "budget", "oom", "invalid")}
    console.print(", ".join(f"{v:,} {k}" for k, v in counts.items() if v)
                  + f" · {ds.attrs['search_seconds']:,.1f} s")
    console.print(recommendation(ds), highlight=False)


def _refusal(ds, spec) -> list[str]:
    """The error lines of a search where no strategy has a positive goodput."""
    from serveplan.search_report import infeasible_reasons

    head = (f"no strategy of {spec.model} on {spec.gpus}x {spec.gpu} (TP "
            f"{','.join(map(str, spec.tp))}) has a positive goodput; per strategy class:")
    return [head, *(f"  {line}" for line in infeasible_reasons(ds))]
