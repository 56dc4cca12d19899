"""Parameter sweeps: a grid over config fields -> one ``xarray.Dataset``, serial or on Dask.

A grid file names a base config, the fields to vary (one dimension each), what to measure
and at which fidelity; its format with an example is ``serveplan sweep --help``
(:data:`serveplan.commands.sweep.SWEEP_HELP`).

Every cell is computed by one pure function, :func:`run_one` ``(point, seed) -> Dataset``
of scalar variables, used by the serial and the distributed path alike, so the same seeds
give the same numbers in both. Cells run in chunks (sharing a
:class:`~serveplan.fidelity.Workspace`); each finished chunk is checkpointed atomically as
one JSON file in ``<out>.cells/`` whose entries are keyed by a hash of the cell's resolved
config, seed, measure, fidelity and package version. Re-running the same command after a
crash or Ctrl-C computes only the missing cells, and the merged Dataset is always built
from the checkpoint files, so an interrupted-and-resumed sweep writes the same file as an
uninterrupted one. Invalid cells (a config pydantic rejects, an instance the memory planner
cannot fit, a rate above capacity at the analytic level, a goodput of zero) record
``status`` and ``reason`` instead of stopping the sweep; a sweep in which no cell is
feasible is refused by the command line with the reasons (:func:`infeasible_reasons`).
Mistakes in the grid itself fail before any cell runs (:func:`check_spec`): a grid field
that names no config field, and ``measure: goodput`` without an SLO.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serveplan.config import SLO, Deployment, TraceWorkload, Workload
from serveplan.config_paths import set_path
from serveplan.deployments import PDDeployment, gpus, parse_deployment, strategy_name
from serveplan.errors import UserError, format_validation_error
from serveplan.estimator.notes import announce_once, held_notes
from serveplan.estimator.specs import SpecError
from serveplan.fidelity import PreparedDeployment, Workspace, resolve_fidelity
from serveplan.goodput import GoodputOptions, constraints, find_goodput, meets
from serveplan.sim.summary import latency_percentile

__all__ = ["CellConfig", "SweepSpec", "check_spec", "infeasible_reasons", "load_cells",
           "merge_cells", "run_one", "run_sweep", "sweep_points"]

Scalar = str | int | float | bool


class SweepSpec(BaseModel):
    """A sweep: base config, grid of dotted fields, what to measure and at which level."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: dict[str, Any]
    grid: dict[str, list[Scalar]]
    measure: Literal["latency", "goodput"] = "latency"
    fidelity: Literal["auto", "analytic", "request", "iteration"] = "auto"
    warmup: float = Field(0.1, ge=0, lt=1, description="Latency: fraction of first "
                          "requests left out of the percentiles.")
    goodput: GoodputOptions = GoodputOptions(seeds=1, rtol=0.05)

    @field_validator("grid")
    @classmethod
    def _grid(cls, v):
        if not v:
            raise ValueError("grid needs at least one field")
        for key, values in v.items():
            if not values:
                raise ValueError(f"grid.{key} has no values")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"grid.{key} repeats a value")
        return v

    def dims(self) -> dict[str, str]:
        """Dim name of each grid field: its last component, or the whole path if ambiguous."""
        last = [k.split(".")[-1] for k in self.grid]
        return {k: (k.split(".")[-1] if last.count(k.split(".")[-1]) == 1 else
                    k.replace(".", "_")) for k in self.grid}

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.grid.values())


class CellConfig(BaseModel):
    """One cell's resolved config (the base with the cell's grid values set)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Deployment | PDDeployment
    workload: Workload
    slo: SLO | None = None
    seed: int = Field(0, ge=0)

    @field_validator("deployment", mode="before")
    @classmethod
    def _arch(cls, v):
        return parse_deployment(v) if isinstance(v, dict) else v


@dataclass(frozen=True)
class SweepPoint:
    """What :func:`run_one` needs for one cell (picklable, no open resources)."""

    index: tuple[int, ...]
    config: dict
    measure: str
    fidelity: str
    warmup: float
    goodput: dict

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    def key(self) -> str:
        """Hash of everything that determines the cell's values."""
        from serveplan import __version__

        blob = json.dumps([self.config, self.measure, self.fidelity, self.warmup,
                           self.goodput, __version__], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def check_spec(spec: SweepSpec) -> None:
    """Refuse, before any cell runs, grid fields that name no config field and a goodput
    sweep without an SLO (:class:`~serveplan.errors.UserError`, one line per problem)."""
    errors = [f"grid.{key}: {why}" for key, values in spec.grid.items()
              if (why := _unknown_field(spec.base, key, values[0]))]
    has_slo = bool(spec.base.get("slo")) or any(k.split(".")[0] == "slo" for k in spec.grid)
    if spec.measure == "goodput" and not has_slo:
        errors.append("measure: goodput needs an SLO: add base.slo with ttft_ms and/or "
                      "tpot_ms")
    if errors:
        raise UserError("\n".join(errors))


def _unknown_field(base: dict, key: str, value) -> str:
    """Why ``key`` names no field of a cell config ("" if it does)."""
    import difflib

    try:
        cfg = set_path(base, key, value)
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc).strip("'\"")
    try:
        CellConfig.model_validate(cfg)
    except ValidationError as exc:
        leaf = key.split(".")[-1]
        if any(e["type"] == "extra_forbidden" and e["loc"] and str(e["loc"][-1]) == leaf
               for e in exc.errors()):
            close = difflib.get_close_matches(leaf, _field_names(), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            return f"no config field {leaf!r} there{hint}"
    return ""


def _field_names() -> list[str]:
    """Every field name a cell config's schema knows (for close-match hints)."""
    names: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            names.update(node.get("properties", {}))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(CellConfig.model_json_schema())
    return sorted(names)


def sweep_points(spec: SweepSpec) -> list[SweepPoint]:
    """Every cell of the grid, in C order (the last grid field varies fastest)."""
    fields = list(spec.grid)
    out = []
    for idx in itertools.product(*(range(n) for n in spec.shape)):
        cfg = dict(spec.base)
        for f, i in zip(fields, idx, strict=True):
            cfg = set_path(cfg, f, spec.grid[f][i])
        out.append(SweepPoint(tuple(idx), cfg, spec.measure, spec.fidelity, spec.warmup,
                              spec.goodput.model_dump()))
    return out


# ----------------------------------------------------------------------------- one cell
LATENCY_VARS = ("arrival_rate", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
                "tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "e2e_p90_s",
                "ttft_slo_p_s", "tpot_slo_p_s", "throughput_rps", "output_tok_s",
                "output_tok_s_per_gpu", "tok_s_per_user", "slo_attainment", "utilisation")
GOODPUT_VARS = ("goodput", "goodput_low", "goodput_high", "goodput_per_gpu")
STRING_VARS = ("status", "reason", "architecture", "strategy", "fidelity")
GOODPUT_STRING_VARS = ("binding",)


def _empty(measure: str) -> dict:
    out = {k: float("nan") for k in LATENCY_VARS}
    out.update({k: "" for k in STRING_VARS})
    if measure == "goodput":
        out.update({k: float("nan") for k in GOODPUT_VARS})
        out.update({k: "" for k in GOODPUT_STRING_VARS})
    out["gpus"] = 0
    return out


def _pct(x: np.ndarray, q: float) -> float:
    return latency_percentile(x, 100.0 * q)  # rejected requests (inf) count as slowest


def _latency_from_samples(m, warmup: float, slo: SLO | None, out: dict) -> None:
    start = int(np.floor(warmup * len(m)))
    ttft, tpot = m.ttft_s[start:], m.tpot_s[start:]
    q = (slo.percentile if slo is not None else 90.0) / 100.0
    out.update(ttft_mean_s=float(np.mean(ttft)), tpot_mean_s=float(np.nanmean(tpot)),
               ttft_p50_s=_pct(ttft, 0.5), ttft_p90_s=_pct(ttft, 0.9),
               ttft_p99_s=_pct(ttft, 0.99), tpot_p50_s=_pct(tpot, 0.5),
               tpot_p90_s=_pct(tpot, 0.9), tpot_p99_s=_pct(tpot, 0.99),
               e2e_p90_s=_pct(m.e2e_s[start:], 0.9), ttft_slo_p_s=_pct(ttft, q),
               tpot_slo_p_s=_pct(tpot, q))
    finish = m.arrival_s + m.e2e_s
    span = float(np.max(finish) - np.min(m.arrival_s)) if len(m) else 0.0
    if span > 0:
        out["throughput_rps"] = len(m) / span
        out["output_tok_s"] = float(m.output_len.sum()) / span
    if slo is not None:  # a rejected request (TTFT inf) counts as a miss
        ok = np.ones(ttft.shape, dtype=bool)
        for c in constraints(slo):
            ok &= meets(c, ttft, tpot)
        out["slo_attainment"] = float(ok.mean()) if ok.size else float("nan")


def _latency_analytic(est, rate: float, mean_output: float, slo: SLO | None,
                      out: dict) -> None:
    q = (slo.percentile if slo is not None else 90.0) / 100.0
    levels = np.array([0.5, 0.9, 0.99, q])
    for name, fn in (("ttft", est.ttft_quantile), ("tpot", est.tpot_quantile)):
        v = fn(levels)[:, 0]
        out.update({f"{name}_p50_s": float(v[0]), f"{name}_p90_s": float(v[1]),
                    f"{name}_p99_s": float(v[2]), f"{name}_slo_p_s": float(v[3])})
    out["ttft_mean_s"] = float(est.ttft_mean[0])
    out["tpot_mean_s"] = float(est.tpot_mean[0])
    if bool(est.feasible[0]):
        out["throughput_rps"] = rate
        out["output_tok_s"] = rate * mean_output
    else:
        out["status"] = "infeasible"
        out["reason"] = (f"utilisation {float(est.utilisation[0]):.3g} >= 1 at "
                         f"{rate:g} req/s")
    if slo is not None:
        p = np.ones(1)
        for c in constraints(slo):
            p = p * (est.ttft_cdf(c.ttft_s) if c.ttft_s is not None else 1.0)
            p = p * (est.tpot_cdf(c.tpot_s) if c.tpot_s is not None else 1.0)
        out["slo_attainment"] = float(np.asarray(p)[0])


def _cell_values(point: SweepPoint, seed: int, ws: Workspace) -> dict:
    out = _empty(point.measure)
    try:
        cfg = CellConfig.model_validate({**point.config, "seed": seed})
    except ValidationError as exc:
        out.update(status="invalid", reason="; ".join(format_validation_error(exc)))
        return out
    if point.fidelity == "analytic" and point.measure == "latency" and not isinstance(
            cfg.workload, TraceWorkload):
        # the analytic level does not depend on the seed: cells differing only by seed share it
        key = (cfg.model_dump_json(exclude={"seed"}), point.warmup)
        return dict(ws.cached("tables", ("analytic-cell", key),
                              lambda: _compute(point, seed, cfg, out, ws)))
    return _compute(point, seed, cfg, out, ws)


def _compute(point: SweepPoint, seed: int, cfg: CellConfig, out: dict, ws: Workspace) -> dict:
    d = cfg.deployment
    out.update(architecture="pd" if isinstance(d, PDDeployment) else "colocated",
               strategy=strategy_name(d), gpus=gpus(d))
    try:
        level = resolve_fidelity(point.fidelity, d)
        opts = GoodputOptions.model_validate(point.goodput)
        seeds = tuple(range(seed, seed + (opts.seeds if point.measure == "goodput" else 1)))
        prep = PreparedDeployment(d, cfg.workload, seeds=seeds, num_requests=opts.num_requests
                                  if point.measure == "goodput" else None, tau=opts.tau,
                                  workspace=ws)
    except SpecError as exc:
        out.update(status="oom" if "GiB" in str(exc) or "KV" in str(exc) else "invalid",
                   reason=str(exc).splitlines()[0])
        return out
    except (UserError, ValueError, TypeError) as exc:
        out.update(status="invalid", reason=str(exc).splitlines()[0])
        return out
    out.update(status="ok", fidelity=level)
    rate = getattr(cfg.workload, "rate", None)
    est = None
    if rate is not None:
        key = ("analytic-estimate", cfg.model_dump_json(exclude={"seed", "slo"}))
        est = ws.cached("tables", key, lambda: prep.analytic([rate]))
        out["arrival_rate"] = float(rate)
        out["utilisation"] = float(est.utilisation[0])
    if point.measure == "goodput":
        if cfg.slo is None:
            out.update(status="invalid", reason="measure goodput needs an slo")
            return out
        g = find_goodput(prep, cfg.slo, fidelity=level, seeds=seeds,
                         confidence=opts.confidence, rtol=opts.rtol, warmup=opts.warmup)
        out.update(goodput=g.rate, goodput_low=g.low, goodput_high=g.upper,
                   goodput_per_gpu=g.per_gpu, arrival_rate=g.rate, binding=g.binding)
        if g.rate <= 0.0:
            out.update(status="infeasible", reason=g.sentence())
        at = g.check_at(g.rate)
        if at is not None:
            out.update(ttft_slo_p_s=at.ttft.estimate, tpot_slo_p_s=at.tpot.estimate)
        out["output_tok_s"] = g.rate * prep.lengths[1].mean
    elif rate is None:
        out.update(status="invalid", reason="measure latency needs workload.rate")
        return out
    elif level == "analytic":
        _latency_analytic(est, float(rate), prep.lengths[1].mean, cfg.slo, out)
    else:
        _latency_from_samples(prep.evaluate(float(rate), seed, level), point.warmup,
                              cfg.slo, out)
    if out["gpus"]:
        out["output_tok_s_per_gpu"] = out["output_tok_s"] / out["gpus"]
    tp = out["tpot_slo_p_s"]
    out["tok_s_per_user"] = 1.0 / tp if tp == tp and tp > 0 else float("nan")
    return out


def run_one(point: SweepPoint, seed: int | None = None, *,
            workspace: Workspace | None = None):
    """One cell as an ``xarray.Dataset`` of scalar variables (pure: same inputs, same output).

    ``seed`` defaults to the cell's config seed; ``workspace`` only shares caches.
    """
    import xarray as xr

    seed = point.seed if seed is None else int(seed)
    values = _cell_values(point, seed, workspace if workspace is not None else Workspace())
    return xr.Dataset({k: ((), v) for k, v in values.items()})


def run_chunk(points: list[SweepPoint]) -> tuple[list[tuple[str, tuple, dict]], list[str]]:
    """Cells of one task, sharing a workspace: ``(key, index, values)`` each; and the notes
    its cells would have said (said once by the caller however many workers met them)."""
    ws = Workspace()
    with held_notes() as notes:
        cells = [(p.key(), p.index, _cell_values(p, p.seed, ws)) for p in points]
    return cells, notes


# ----------------------------------------------------------------------------- checkpoints
def cells_dir(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".cells")


def _write_chunk(folder: Path, results: list[tuple[str, tuple, dict]]) -> None:
    """One JSON file per finished chunk, written atomically (temp file + rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256("".join(k for k, _, _ in results).encode()).hexdigest()[:16]
    path = folder / f"chunk-{name}.json"
    tmp = folder / f".chunk-{name}.{os.getpid()}.tmp"
    payload = [{"key": k, "index": list(i), "values": v} for k, i, v in results]
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def load_cells(folder: Path) -> dict[str, dict]:
    """Checkpointed cell values by key (unfinished temp files are ignored)."""
    done: dict[str, dict] = {}
    if not folder.is_dir():
        return done
    for path in sorted(folder.glob("chunk-*.json")):
        try:
            entries = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a damaged file only costs its cells a recompute
        for e in entries:
            done[e["key"]] = e["values"]
    return done


def merge_cells(spec: SweepSpec, points: list[SweepPoint], done: dict[str, dict]):
    """The sweep Dataset: one dim per grid field, variables from the cells."""
    import xarray as xr

    from serveplan import __version__

    dims = spec.dims()
    names = [dims[f] for f in spec.grid]
    shape = spec.shape
    keys = [p.key() for p in points]
    blank = _empty(spec.measure)  # a checkpoint written before a variable existed lacks it
    data = {}
    for var in done[keys[0]]:
        values = [done[k].get(var, blank.get(var)) for k in keys]
        if var in STRING_VARS or var in GOODPUT_STRING_VARS:
            arr = np.array(values, dtype=object).reshape(shape)
        elif var == "gpus":
            arr = np.array(values, dtype=np.int64).reshape(shape)
        else:
            arr = np.array(values, dtype=np.float64).reshape(shape)
        data[var] = (names, arr)
    coords = {dims[f]: _coord(spec.grid[f]) for f in spec.grid}
    data = {(f"{k}_cell" if k in coords else k): v for k, v in data.items()}
    attrs = {"config": spec.model_dump_json(), "serveplan_version": __version__,
             "kind": "sweep", "measure": spec.measure, "fidelity": spec.fidelity,
             "grid_fields": json.dumps(dims)}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def infeasible_reasons(ds) -> list[str]:
    """If no cell of a merged sweep is feasible (status ``ok``, and a positive goodput for
    ``measure: goodput``), one line per distinct reason with its cell count and a first cell;
    else ``[]``."""
    status = ds["status"].values
    ok = status == "ok"
    if "goodput" in ds:
        ok &= ds["goodput"].values > 0
    if ok.any():
        return []
    dims = list(ds["status"].dims)
    seen: dict[tuple[str, str], list] = {}
    for idx in np.ndindex(status.shape):
        key = (str(status[idx]), str(ds["reason"].values[idx]))
        seen.setdefault(key, []).append(idx)
    lines = []
    for (st, why), cells in seen.items():
        first = ", ".join(f"{d}={ds[d].values[i]}" for d, i in zip(dims, cells[0], strict=True))
        lines.append(f"{st}: {why or 'no reason recorded'} ({len(cells):,} cell"
                     f"{'s' if len(cells) != 1 else ''}, e.g. {first})")
    return lines


def _coord(values: list) -> np.ndarray:
    if all(isinstance(v, bool) for v in values):
        return np.array(values, dtype=bool)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.float64)
    return np.array([str(v) for v in values], dtype=object)


# ----------------------------------------------------------------------------- running
def _chunks(points: list[SweepPoint], size: int) -> list[list[SweepPoint]]:
    return [points[i:i + size] for i in range(0, len(points), size)]


def run_sweep(spec: SweepSpec, out: str | Path, *, client=None, chunk_size: int | None = None,
              progress=None, stop_after: int | None = None):
    """Run (or resume) a sweep; returns the merged Dataset (also checkpointed cell by cell).

    Parameters
    ----------
    spec : SweepSpec
        Grid and options.
    out : path
        Target NetCDF path; checkpoints go to ``<out>.cells/`` (the caller writes ``out``).
    client : dask.distributed.Client, optional
        Run chunks on this cluster; serially in this process when None.
    chunk_size : int, optional
        Cells per task (default: up to 64, at least 4 tasks per worker).
    progress : callable, optional
        ``progress(done_cells, total_cells)`` after each finished chunk.
    stop_after : int, optional
        Stop (raise ``KeyboardInterrupt``) after this many chunks -- for tests of resuming.
    """
    check_spec(spec)
    points = sweep_points(spec)
    folder = cells_dir(out)
    done = load_cells(folder)
    todo = [p for p in points if p.key() not in done]
    total = len(points)
    workers = 1
    if client is not None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
    size = chunk_size or max(1, min(64, math.ceil(len(todo) / (4 * workers)) or 1))
    chunks = _chunks(todo, size)
    finished = total - len(todo)
    if progress is not None:
        progress(finished, total)
    n_chunks = 0

    def record(chunk_outcome):
        nonlocal finished, n_chunks
        results, notes = chunk_outcome
        for note in notes:
            announce_once(note)
        _write_chunk(folder, results)
        finished += len(results)
        n_chunks += 1
        if progress is not None:
            progress(finished, total)
        if stop_after is not None and n_chunks >= stop_after:
            raise KeyboardInterrupt

    with closing(_chunk_outcomes(chunks, client)) as outcomes:  # stopping cancels the rest
        for outcome in outcomes:
            record(outcome)
    return merge_cells(spec, points, load_cells(folder))


def _chunk_outcomes(chunks: list[list[SweepPoint]], client):
    """Each chunk's :func:`run_chunk` outcome as it finishes: in this process in order, or on
    ``client``'s workers (the unfinished ones cancelled if the caller stops early)."""
    if client is None:
        for chunk in chunks:
            yield run_chunk(chunk)
        return
    from dask.distributed import as_completed

    futures = [client.submit(run_chunk, chunk, pure=False) for chunk in chunks]
    try:
        for fut in as_completed(futures):
            yield fut.result()
    finally:
        for fut in futures:
            fut.cancel()
