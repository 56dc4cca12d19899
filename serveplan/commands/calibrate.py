"""``serveplan calibrate``: fit a profile for your GPU from your own op measurements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.table import Table

from serveplan.commands import run_flags as F
from serveplan.commands.app import app
from serveplan.commands.common import wide_console
from serveplan.errors import UserError, check_text_file, report_errors


def _read_sources(measurements: list[Path], aiconfigurator: Path | None, vidur: Path | None,
                  gpu: str | None, engine: str | None, versions: str) -> pd.DataFrame:
    from serveplan.estimator.measurements import (
        load_aiconfigurator,
        load_vidur,
        read_measurements,
    )

    parts = []
    for path in measurements:
        if not path.exists():
            raise UserError(f"{path}: no such measurements file")
        if path.suffix.lower() == ".csv":
            check_text_file(path, "a CSV file in the schema of docs/measurements.md")
        parts.append(read_measurements(path))
    if aiconfigurator is not None and gpu is None:
        raise UserError("--aiconfigurator needs --gpu (the system to read from the folder)")
    if aiconfigurator is not None:
        if not aiconfigurator.exists():
            raise UserError(f"{aiconfigurator}: no such AIConfigurator folder")
        engines = [engine, "nccl"] if engine else None
        parts.append(load_aiconfigurator(aiconfigurator, systems=[gpu], engines=engines,
                                         versions=versions, min_rows=0))
    if vidur is not None:
        if not vidur.exists():
            raise UserError(f"{vidur}: no such Vidur profiling folder")
        parts.append(load_vidur(vidur))
    if not parts:
        raise UserError("give measurements: FILE (CSV/Parquet in the schema of "
                        "docs/measurements.md), --aiconfigurator DIR or --vidur DIR")
    return pd.concat(parts, ignore_index=True)


def _for_gpu(df: pd.DataFrame, gpu: str | None) -> tuple[pd.DataFrame, str]:
    """The rows of ``gpu`` and ``gpu``; without ``gpu``, those of the one GPU in the data."""
    from serveplan.estimator.catalog import resolve_gpu

    present = sorted({str(g) for g in df["gpu"].unique()})
    if gpu is None:
        if len(present) != 1:
            raise UserError(f"the measurements cover GPUs {present}: choose one with --gpu")
        gpu = present[0]
    name = resolve_gpu(gpu).name
    mine = df[df["gpu"].astype(str) == name]
    if not len(mine):
        raise UserError(f"no measurements for GPU {name!r}; the data has {present}")
    return mine.reset_index(drop=True), gpu


def _summary(profile, out: Path) -> None:
    console = wide_console()
    table = Table(title=f"profile {profile.name!r} -> {out}")
    for col in ("family", "rows", "prefill e_c / e_m", "decode e_c / e_m", "fixed µs",
                "median |log err|"):
        table.add_column(col, justify="right" if col != "family" else "left")
    fits = profile.provenance.get("constants_fit", {})
    for fam, info in fits.items():
        e = profile.efficiency[fam]
        fixed = (profile.comm_latency_s if fam == "comm" else profile.kernel_fixed(fam)) or 0.0
        table.add_row(fam, f"{info['rows']:,}", f"{e.prefill.ec:.3f} / {e.prefill.em:.3f}",
                      f"{e.decode.ec:.3f} / {e.decode.em:.3f}", f"{fixed * 1e6:.2f}",
                      f"{info['median_abs_log_err']:.3f}")
    console.print(table)
    defaults = profile.provenance.get("families_default", [])
    if defaults:
        console.print(f"families left at defaults (no usable rows): {', '.join(defaults)}")
    console.print(f"{len(profile.correctors)} corrector table(s): "
                  f"{', '.join(profile.correctors) or 'none'}")
    console.print(f"use it with: serveplan estimate --profile {out} ...")


def _manifest_cases(path: Path, sets: dict) -> list:
    """Runs and deployments listed in a YAML manifest (``runs: [{result, deployment}]``)."""
    from serveplan.config import read_yaml
    from serveplan.run_calibrate import RunCase
    from serveplan.runs import read_run

    entries = read_yaml(path).get("runs")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{path}: runs: expected a list of {{result: FILE, deployment: ...}}")
    cases = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "result" not in entry or "deployment" not in entry:
            raise UserError(f"{path}: runs.{i}: needs result (a benchmark file) and "
                            "deployment (a mapping, or a YAML file)")
        result = (path.parent / str(entry["result"])).resolve()
        dep = entry["deployment"]
        if isinstance(dep, str):
            dep = F.deployment_from_file((path.parent / dep).resolve())
        cases.append(RunCase(read_run(result), F.resolve_with_sets(dep, sets)))
    return cases


def _run_cases(runs: list[Path], flags: dict, sets: list[str] | None, fmt) -> list:
    from serveplan.commands.common import parse_set
    from serveplan.run_calibrate import RunCase
    from serveplan.runs import read_run

    cases = []
    for path in runs:
        if path.suffix.lower() in (".yaml", ".yml"):
            cases.extend(_manifest_cases(path, parse_set(sets or [])))
            continue
        run = read_run(path, fmt.value if fmt else None)
        cases.append(RunCase(run, F.run_deployment(run.model, path, flags, sets)))
    return cases


BatchRuns = Annotated[Path | None, typer.Option(
    "--batch-runs", help="Fit a node's step overhead and tensor-parallel synchronisation to "
    "fixed-batch latency runs instead: a YAML manifest (gpu, engine, runs: [{latency: FILE "
    "from vllm bench latency --output-json, or latency_s; model, tp, batch_size, input_len, "
    "output_len}]; runs at TP 1 and TP > 1 tell the two apart; docs/runtime.md).")]
BenchRuns = Annotated[list[Path] | None, typer.Option(
    "--runs", help="Fit the engine's runtime terms instead, to benchmark results (as "
    "`serveplan compare` reads them; repeatable) on the deployment of the flags below, or a "
    "YAML manifest `runs: [{result: FILE, deployment: {...}}]` for runs on different "
    "deployments (a TP-sync term needs runs at TP 1 and TP > 1).")]
MaxEvals = Annotated[int, typer.Option(
    "--max-evals", min=1, max=10_000, help="With --runs: simulations the fit may spend per fit.")]
FitTerms = Annotated[str | None, typer.Option(
    "--terms", help="With --runs: the runtime terms to fit, comma-separated (default: "
    "frontend_output_s, frontend_prompt_token_s, frontend_output_per_token_s, "
    "tp_sync_per_layer_s, disagg_handoff_s; the others: frontend_request_s, step_cpu_s, "
    "step_cpu_per_request_s, step_cpu_per_token_s, prefill_token_layer_s, "
    "prefill_step_expert_layer_s (colocated runs of MoE models), step_overhead_s, "
    "eager_dispatch_layer_s (runs whose steps leave the CUDA graphs)). "
    "Runs at a few light loads cannot tell a cost per request of the first token's step "
    "from a constant: leave frontend_output_per_token_s out there.")]


def _term_names(text: str | None) -> tuple[str, ...]:
    """``--terms``: the names given (checked), or the default set."""
    from serveplan.estimator.runtime_fit import FIT_TERMS, TERM_SCALES

    if text is None:
        return FIT_TERMS
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in TERM_SCALES]
    if unknown:
        raise UserError(f"--terms: {', '.join(unknown)}: not a runtime term; known: "
                        f"{', '.join(TERM_SCALES)}")
    if not names:
        raise UserError(f"--terms: give at least one term; known: {', '.join(TERM_SCALES)}")
    return names


def _calibrate_runs(runs: list[Path], out: Path, flags: dict, sets, fmt, max_evals: int,
                    seed: int, as_json: bool, names: tuple[str, ...]) -> None:
    from serveplan.run_calibrate import calibrate_runs

    cases = _run_cases(runs, flags, sets, fmt)
    fit, validation = calibrate_runs(cases, out, names=names, max_evals=max_evals, seed=seed)
    report = {"out": str(out), **fit.summary(), "leave_one_run_out": validation.rows()}
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=float))
        return
    console = wide_console()
    table = Table(title=f"runtime terms from {len(cases)} run(s) -> {out}")
    for col in ("run", "TTFT err before", "TTFT err after", "TPOT err before",
                "TPOT err after"):
        table.add_column(col, justify="left" if col == "run" else "right")
    pct = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
    for row in validation.rows():
        table.add_row(row["run"], pct(row["ttft_err_before"]), pct(row["ttft_err_after"]),
                      pct(row["tpot_err_before"]), pct(row["tpot_err_after"]))
    console.print(table)
    console.print("errors: |predicted / measured - 1| of the median; 'after' predicts each run "
                  "with terms fitted on the other runs (leave one run out)", highlight=False)
    for name in fit.fitted:
        console.print(f"fitted {name} = {getattr(fit.terms, name):.4g} s", highlight=False)
    for name, why in fit.skipped.items():
        console.print(f"not fitted {name}: {why}", highlight=False)
    console.print(f"use it with: serveplan compare RESULT ... --runtime-profile {out}, or "
                  f"runtime_profile: {out} in a pool", highlight=False)


def _calibrate_batches(manifest: Path, out: Path, as_json: bool) -> None:
    from serveplan.batch_calibrate import calibrate_batches

    if not manifest.is_file():
        raise UserError(f"--batch-runs: {manifest} is not a file")
    report = calibrate_batches(manifest, out)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=float))
        return
    table = Table(title=f"step terms from {len(report['runs'])} fixed-batch run(s) -> {out}")
    for col in ("run", "model", "tp", "measured s", "err before", "err fitted",
                f"err held out (by {report['held_out_by']})"):
        table.add_column(col, justify="left" if col in ("run", "model") else "right")
    pct = lambda x: "-" if x is None else f"{x:+.1%}"  # noqa: E731
    for r in report["runs"]:
        table.add_row(r["run"], r["model"], str(r["tp"]), f"{r['measured_s']:.4g}",
                      pct(r["err_before"]), pct(r["err_fitted"]), pct(r["err_held_out"]))
    console = wide_console()
    console.print(table)
    t = report["terms"]
    console.print(f"step_overhead_s = {t['step_overhead_s'] * 1e3:.3g} ms a step (the GPU "
                  f"profile's {report['profile_step_overhead_s'] * 1e3:.3g} ms), "
                  f"tp_sync_per_layer_s = {t['tp_sync_per_layer_s'] * 1e6:.3g} us a layer at "
                  "tp > 1", highlight=False)
    for note in report["notes"]:
        console.print(f"note: {note}", highlight=False)
    console.print(f"use it with: runtime_profile: {out} in a deployment, or serveplan "
                  f"compare RESULT ... --runtime-profile {out}", highlight=False)


def _calibrate_ops(a: dict) -> None:
    """Fit a GPU profile to op measurements (the command's arguments ``a``)."""
    from serveplan.estimator import calibrate as cal
    from serveplan.estimator.measurements import validate_measurements

    sources = _read_sources([*(a["files"] or []), *a["measurements"]], a["aiconfigurator"],
                            a["vidur"], a["gpu"], a["engine"], a["versions"])
    df, gpu = _for_gpu(sources, a["gpu"])
    validate_measurements(df, source="measurements")
    min_rows, out = a["min_rows"], a["out"]
    if len(df) < min_rows:
        raise UserError(f"{len(df)} measurement rows for {gpu}, fewer than --min-rows "
                        f"{min_rows}")
    profile = cal.calibrate(df, gpu, name=a["name"], correctors=a["correctors"],
                            min_rows=min_rows,
                            provenance={"command": "serveplan calibrate", "rows": len(df)})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(cal.profile_json(profile))
    if a["as_json"]:
        typer.echo(json.dumps({"out": str(out), "name": profile.name,
                               "constants_fit": profile.provenance.get("constants_fit", {}),
                               "correctors": sorted(profile.correctors)}, indent=2))
        return
    _summary(profile, out)


@app.command()
@report_errors
def calibrate(
    files: list[Path] = typer.Argument(
        None, help="Measurement files: CSV/Parquet in the schema of docs/measurements.md.",
        show_default=False),
    out: Path = typer.Option(..., "--out", "-o", help="Profile JSON to write."),
    batch_runs: BatchRuns = None,
    runs: BenchRuns = None,
    deployment: F.DeploymentFile = None,
    model: F.Model = None,
    tp: F.TP = 1,
    pp: F.PP = 1,
    count: F.Instances = 1,
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
    max_evals: MaxEvals = 40,
    terms: FitTerms = None,
    gpu: str | None = typer.Option(
        None, "--gpu", "-g", help="GPU the measurements were taken on (catalog name or YAML); "
        "default: the one GPU named in the files' gpu column."),
    measurements: list[Path] = typer.Option(
        [], "--measurements", "-m",
        help="More measurement files, as the FILES arguments; repeatable."),
    aiconfigurator: Path | None = typer.Option(
        None, "--aiconfigurator", help="An AIConfigurator data folder (systems/data/...)."),
    vidur: Path | None = typer.Option(None, "--vidur", help="A Vidur profiling folder."),
    engine: str | None = typer.Option(
        None, "--engine", help="With --aiconfigurator: framework (vllm, trtllm, sglang); with "
        "--runs: the engine that ran."),
    versions: str = typer.Option(
        "current", "--versions", help="With --aiconfigurator: version dir, or 'current'."),
    name: str | None = typer.Option(None, "--name", help="Profile name (default <gpu>-fitted)."),
    correctors: bool = typer.Option(True, "--correctors/--no-correctors",
                                    help="Also fit learned residual correctors."),
    min_rows: int = typer.Option(20, "--min-rows", min=1,
                                 help="Fewest rows a family needs to be fitted."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit summary as JSON."),
) -> None:
    """Fit roofline constants and residual correctors to op measurements of one GPU; with
    --runs, an engine's runtime terms to your benchmark results; with --batch-runs, a
    node's step terms to fixed-batch latency runs."""
    _one_source(files or measurements or aiconfigurator or vidur, runs, batch_runs, terms)
    if batch_runs is not None:
        return _calibrate_batches(batch_runs, out, as_json)
    if runs:
        return _calibrate_runs(runs, out, locals(), set_, fmt, max_evals, seed, as_json,
                               _term_names(terms))
    _calibrate_ops(locals())


def _one_source(ops, runs, batch_runs, terms) -> None:
    """Refuse op measurements, benchmark results and fixed-batch runs given together."""
    if terms is not None and not runs:
        raise UserError("--terms goes with --runs (the runtime terms fitted to your runs)")
    if batch_runs is not None and (runs or ops):
        raise UserError("--batch-runs: give fixed-batch runs alone (not with --runs or op "
                        "measurements)")
    if runs and ops:
        raise UserError("--runs: give benchmark results or op measurements, not both")
