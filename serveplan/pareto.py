"""SLA Pareto frontiers: throughput per GPU against generation speed, per model and
architecture.

Frontier (``papers/frontier.txt`` §6.1, Fig. 13) reads architecture choice off two axes:
generation speed per user (tokens/s/user, the inverse of the TPOT percentile) and throughput
(tokens/s, here per GPU), keeping only configurations that meet a TTFT constraint. A point is
on its (model, architecture) frontier when no other point of that group is at least as fast
per user *and* has at least as much throughput per GPU (:func:`frontier`; values within a
relative :data:`RTOL` count as equal, so of tied points only the best stays).

Points come from a sweep (every ``ok`` design: ``tok_s_per_user`` and
``output_tok_s_per_gpu`` at the design's rate) or from a search (every decided strategy at its
goodput: throughput ``goodput * E[L_out] / GPUs``). A sweep's ``seed`` dim holds
replications of one design, not designs: each metric is averaged over it first (a design
counts as ``ok`` only if every seed is), and the ``seeds`` column says over how many.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from serveplan.plots import deployment_names, instances, log_axis, outside_legend, series_styles
from serveplan.results_io import result_kind

__all__ = ["READS", "RTOL", "best_under_speed", "frontier", "pareto_points", "plot_pareto",
           "points_dataset"]

READS = {
    "sweep": dict(numbers=("gpus", "tok_s_per_user", "output_tok_s_per_gpu", "ttft_slo_p_s",
                           "tpot_slo_p_s", "arrival_rate"),
                  texts=("architecture", "strategy", "status")),
    "search": dict(numbers=("gpus", "goodput", "ttft_p_s", "tpot_p_s"),
                   texts=("architecture", "name", "status"), attrs=("spec",)),
}
"""What :func:`pareto_points` reads of each result kind
(:func:`serveplan.results_io.check_variables`)."""

RTOL = 1e-6
"""Relative difference below which two speeds (or throughputs) are the same value."""


# ----------------------------------------------------------------------------- points
def mean_over_seeds(ds):
    """``(ds averaged over its seed dim, number of seeds)``; status ``ok`` only where every
    seed is ``ok`` (``mixed`` where some are)."""
    import xarray as xr

    if "seed" not in ds.dims:
        return ds, 1
    every = (ds["status"] == "ok").all("seed")
    some = (ds["status"] == "ok").any("seed")
    out = ds.isel(seed=0, drop=True)
    for name in ds.data_vars:
        if "seed" in ds[name].dims and ds[name].dtype.kind == "f":
            out[name] = ds[name].mean("seed")
    first = out["status"].astype(object)
    out["status"] = xr.where(every, "ok", xr.where(some, "mixed", first)).astype(object)
    return out, int(ds.sizes["seed"])


def _base(ds) -> dict:
    return (json.loads(ds.attrs.get("config", "{}") or "{}").get("base") or {})


def _tp_text(dep) -> str:
    """The tensor-parallel size of a deployment mapping (``1``, or ``1/4`` for PD)."""
    tps = list(dict.fromkeys(str(i.get("tp", 1)) for i in instances(dep)))
    return "/".join(tps) or "1"


def _sweep_points(ds) -> pd.DataFrame:
    ds, seeds = mean_over_seeds(ds)
    flat = ds.stack(cell=list(ds.dims)) if ds.dims else ds
    dims = json.loads(ds.attrs.get("grid_fields", "{}"))  # grid field -> dim name
    df = pd.DataFrame({
        "architecture": flat["architecture"].values.astype(str),
        "strategy": flat["strategy"].values.astype(str),
        "status": flat["status"].values.astype(str),
        "gpus": flat["gpus"].values,
        "tok_s_per_user": flat["tok_s_per_user"].values,
        "throughput_per_gpu": flat["output_tok_s_per_gpu"].values,
        "ttft_s": flat["ttft_slo_p_s"].values,
        "tpot_s": flat["tpot_slo_p_s"].values,
        "rate": flat["arrival_rate"].values,
    })
    for name in dims.values():
        if name in flat.coords and name not in df:
            df[name] = flat[name].values
    dep = _base(ds).get("deployment")
    model_dims = [n for f, n in dims.items() if f.endswith(".model") and n in df]
    df["model"] = (df[model_dims[0]].astype(str) if model_dims
                   else (deployment_names(dep)[0] or ["?"])[0])
    shown = [n for f, n in dims.items() if n in df and f != "seed" and f != "workload.rate"
             and not f.endswith((".model", ".num_instances", ".count"))]
    df["label"] = df["strategy"]
    if not any(f.endswith(".tp") for f in dims):
        df["label"] += f" tp={_tp_text(dep)}"
    for name in shown:
        df["label"] += f" {name}=" + df[name].astype(str)
    df["label"] += df["rate"].map(lambda r: f" @ {r:g} req/s")
    df["seeds"] = seeds
    return df[df["status"] == "ok"].reset_index(drop=True)


def _search_points(ds) -> pd.DataFrame:
    spec = json.loads(ds.attrs["spec"])
    osl = spec["osl"]
    mean_out = float(osl if isinstance(osl, (int, float)) else osl.get("value")
                     or osl.get("mean") or (osl.get("low", 0) + osl.get("high", 0)) / 2)
    ok = ds["status"].values == "decided"
    tpot = ds["tpot_p_s"].values[ok]
    with np.errstate(divide="ignore"):
        speed = np.where(tpot > 0, 1.0 / tpot, np.nan)
    goodput = ds["goodput"].values[ok]
    names = ds["name"].values[ok].astype(str)
    return pd.DataFrame({
        "architecture": ds["architecture"].values[ok].astype(str),
        "strategy": names,
        "gpus": ds["gpus"].values[ok],
        "tok_s_per_user": speed,
        "throughput_per_gpu": goodput * mean_out / ds["gpus"].values[ok],
        "ttft_s": ds["ttft_p_s"].values[ok],
        "tpot_s": tpot,
        "rate": goodput,
        "model": str(spec.get("model", "?")),
        "label": [f"{n} @ {g:.3g} req/s" for n, g in zip(names, goodput, strict=True)],
        "seeds": int(spec.get("seeds", 1)),
    })


def pareto_points(ds, ttft_max_s: float | None = None,
                  min_speed: float | None = None) -> pd.DataFrame:
    """Candidate points of a sweep or search Dataset with ``meets_ttft``, ``meets_speed``
    (``tok_s_per_user >= min_speed``) and ``frontier`` columns; the frontier is taken per
    model and architecture among the points meeting the TTFT limit."""
    kind = result_kind(ds)
    if kind == "search":
        df = _search_points(ds)
    elif kind == "sweep":
        df = _sweep_points(ds)
    else:
        raise ValueError(f"pareto needs a sweep or a search result; got a {kind} result"
                         if kind else "pareto needs a sweep or a search result; got a "
                         "Dataset with no 'kind' attribute")
    df = df[np.isfinite(df["tok_s_per_user"]) & np.isfinite(df["throughput_per_gpu"])]
    df = df.reset_index(drop=True)
    df["meets_ttft"] = True if ttft_max_s is None else df["ttft_s"] <= ttft_max_s
    df["meets_speed"] = True if min_speed is None else df["tok_s_per_user"] >= min_speed
    df["frontier"] = False
    for _, group in df[df["meets_ttft"]].groupby(["model", "architecture"]):
        df.loc[frontier(group).index, "frontier"] = True
    return df


def frontier(points: pd.DataFrame, rtol: float = RTOL) -> pd.DataFrame:
    """The upper-right frontier of ``points`` (speed per user vs throughput per GPU),
    ordered by speed.

    Scanning from the fastest, a point stays if its throughput beats every faster point's
    by more than ``rtol``; speeds within ``rtol`` of the fastest of their run count as one
    speed, so of tied points only the one with the most throughput stays.
    """
    x = points["tok_s_per_user"].to_numpy(dtype=float)
    y = points["throughput_per_gpu"].to_numpy(dtype=float)
    order = np.argsort(-x, kind="stable")
    tie = np.empty(len(order), dtype=np.int64)  # tie group of each point, in scan order
    group, head = -1, np.inf
    for rank, i in enumerate(order):
        if not x[i] >= head * (1 - rtol):
            group, head = group + 1, x[i]
        tie[rank] = group
    scan = order[np.lexsort((-y[order], tie))]
    best, keep = 0.0, []
    for i in scan:
        if not keep or y[i] > best + rtol * abs(best):
            keep.append(i)
            best = y[i]
    return points.iloc[keep].sort_values("tok_s_per_user")


def best_under_speed(df: pd.DataFrame) -> pd.DataFrame:
    """Per model and architecture, the frontier point with the most throughput per GPU
    among those meeting the speed SLA (``meets_speed``)."""
    ok = df[df["frontier"] & df["meets_speed"]]
    if not len(ok):
        return ok
    return ok.loc[ok.groupby(["model", "architecture"])["throughput_per_gpu"].idxmax()]


def points_dataset(df: pd.DataFrame, source, *, ttft_max_s=None, min_speed=None):
    """The points as an ``xarray.Dataset`` (dim ``point``), keeping the source's config
    attributes so the context (model, GPU, SLO) stays readable."""
    import xarray as xr

    ds = xr.Dataset.from_dataframe(df.reset_index(drop=True).rename_axis("point"))
    for key in ("config", "spec", "slo", "serveplan_version"):
        if key in source.attrs:
            ds.attrs[key] = source.attrs[key]
    ds.attrs["source_kind"] = result_kind(source) or ""
    ds.attrs["ttft_max_s"] = np.nan if ttft_max_s is None else float(ttft_max_s)
    ds.attrs["min_speed"] = np.nan if min_speed is None else float(min_speed)
    return ds


# ----------------------------------------------------------------------------- figure
def plot_pareto(df: pd.DataFrame, path, *, ttft_max_s: float | None = None,
                min_tok_s_user: float | None = None, title: str = "") -> None:
    """One frontier per model and architecture (own colour and marker), all candidates
    faint, the best point under the speed SLA starred (Frontier Fig. 13 style). Frontier
    points are numbered; the legend gives each number's strategy, TP and rate. Writes a
    PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    groups = list(df.groupby(["model", "architecture"]))
    one_model = df["model"].nunique() <= 1
    best = best_under_speed(df)
    number = 0
    for ((model, arch), group), (color, marker) in zip(
            groups, series_styles(len(groups)), strict=True):
        ax.scatter(group["tok_s_per_user"], group["throughput_per_gpu"], s=12, alpha=0.25,
                   color=color, marker=marker, linewidths=0)
        front = group[group["frontier"]].sort_values("tok_s_per_user")
        if not len(front):
            continue
        ax.plot(front["tok_s_per_user"], front["throughput_per_gpu"], "-", marker=marker,
                ms=5, color=color, label=arch if one_model else f"{model} · {arch}")
        for _, r in front.iterrows():
            number += 1
            ax.annotate(str(number), (r["tok_s_per_user"], r["throughput_per_gpu"]),
                        xytext=(3, 4), textcoords="offset points", fontsize=7, color=color)
            ax.add_line(Line2D([], [], ls="", marker=f"${number}$", ms=7, color=color,
                               label=f"{r['label']}"))
        star = best[(best["model"] == model) & (best["architecture"] == arch)]
        if len(star):
            ax.plot(star["tok_s_per_user"], star["throughput_per_gpu"], "*", ms=16,
                    color=color, markeredgecolor="k", zorder=5)
    if min_tok_s_user is not None:
        ax.axvline(min_tok_s_user, ls="--", color="grey",
                   label=f"speed SLA ≥ {min_tok_s_user:g} tok/s/user (★ best)")
    ax.set_xlabel("generation speed (tokens/s/user = 1 / TPOT percentile)")
    ax.set_ylabel("throughput (output tokens/s per GPU)")
    if len(df) and (df["throughput_per_gpu"] > 0).all():
        log_axis(ax)
    cons = f"TTFT ≤ {ttft_max_s * 1e3:g} ms" if ttft_max_s is not None else "no TTFT limit"
    seeds = int(df["seeds"].max()) if "seeds" in df and len(df) else 1
    note = f" · mean over {seeds} seeds" if seeds > 1 else ""
    head = f"Pareto frontiers ({cons}{note})"
    ax.set_title(f"{title}\n{head}" if title else head, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    outside_legend(ax, ncol=1 if number <= 24 else 2)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
