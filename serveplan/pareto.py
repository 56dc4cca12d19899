"""SLA Pareto frontiers: throughput per GPU against generation speed, per architecture.

Frontier (``papers/frontier.txt`` §6.1, Fig. 13) reads architecture choice off two axes:
generation speed per user (tokens/s/user, the inverse of the TPOT percentile) and throughput
(tokens/s, here per GPU), keeping only configurations that meet a TTFT constraint. A point is
on an architecture's frontier when no other point of that architecture is at least as fast
per user *and* has more throughput per GPU.

Points come from a sweep (every ``ok`` cell: ``tok_s_per_user`` and ``output_tok_s_per_gpu``
at the cell's rate) or from a search (every decided strategy at its goodput: throughput
``goodput * E[L_out] / GPUs``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

__all__ = ["frontier", "pareto_points", "plot_pareto"]


def _sweep_points(ds) -> pd.DataFrame:
    flat = ds.stack(cell=list(ds.sizes)) if ds.sizes else ds
    dims = json.loads(ds.attrs.get("grid_fields", "{}"))
    df = pd.DataFrame({
        "architecture": flat["architecture"].values.astype(str),
        "strategy": flat["strategy"].values.astype(str),
        "status": flat["status"].values.astype(str),
        "gpus": flat["gpus"].values,
        "tok_s_per_user": flat["tok_s_per_user"].values,
        "throughput_per_gpu": flat["output_tok_s_per_gpu"].values,
        "ttft_s": flat["ttft_slo_p_s"].values,
        "tpot_s": flat["tpot_slo_p_s"].values,
    })
    for name in dims.values():
        if name in flat.coords:
            df[name] = flat[name].values
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
    return pd.DataFrame({
        "architecture": ds["architecture"].values[ok].astype(str),
        "strategy": ds["name"].values[ok].astype(str),
        "gpus": ds["gpus"].values[ok],
        "tok_s_per_user": speed,
        "throughput_per_gpu": ds["goodput"].values[ok] * mean_out / ds["gpus"].values[ok],
        "ttft_s": ds["ttft_p_s"].values[ok],
        "tpot_s": tpot,
    })


def pareto_points(ds, ttft_max_s: float | None = None) -> pd.DataFrame:
    """Candidate points of a sweep or search Dataset, with ``meets_ttft`` and ``frontier``
    columns (frontier per architecture among the points meeting the TTFT constraint)."""
    kind = ds.attrs.get("kind")
    if kind == "search":
        df = _search_points(ds)
    elif kind == "sweep":
        df = _sweep_points(ds)
    else:
        raise ValueError(f"expected a sweep or a search Dataset (attrs kind), got {kind!r}")
    df = df[np.isfinite(df["tok_s_per_user"]) & np.isfinite(df["throughput_per_gpu"])]
    df = df.reset_index(drop=True)
    df["meets_ttft"] = True if ttft_max_s is None else df["ttft_s"] <= ttft_max_s
    df["frontier"] = False
    for _, group in df[df["meets_ttft"]].groupby("architecture"):
        df.loc[frontier(group).index, "frontier"] = True
    return df


def frontier(points: pd.DataFrame) -> pd.DataFrame:
    """The upper-right frontier of ``points`` (speed per user vs throughput per GPU),
    ordered by speed: scanning from the fastest, a point stays if its throughput beats
    every faster point's."""
    ordered = points.sort_values(["tok_s_per_user", "throughput_per_gpu"],
                                 ascending=[False, False])
    best = -np.inf
    keep = []
    for idx, y in zip(ordered.index, ordered["throughput_per_gpu"], strict=True):
        if y > best:
            keep.append(idx)
            best = y
    return points.loc[keep].sort_values("tok_s_per_user")


def plot_pareto(df: pd.DataFrame, path, *, ttft_max_s: float | None = None,
                min_tok_s_user: float | None = None, title: str = "") -> None:
    """Frontier lines per architecture, all candidates faint, the best point under the
    speed SLA starred (Frontier Fig. 13 style). Writes a PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    colors = {"colocated": "tab:blue", "pd": "tab:orange"}
    for arch, group in df.groupby("architecture"):
        c = colors.get(arch, None)
        ok = group[group["meets_ttft"]]
        ax.scatter(group["tok_s_per_user"], group["throughput_per_gpu"], s=10, alpha=0.25,
                   color=c)
        front = ok[ok["frontier"]].sort_values("tok_s_per_user")
        ax.plot(front["tok_s_per_user"], front["throughput_per_gpu"], "-o", ms=4, color=c,
                label=f"{arch} frontier")
        if min_tok_s_user is not None:
            sla = front[front["tok_s_per_user"] >= min_tok_s_user]
            if len(sla):
                star = sla.loc[sla["throughput_per_gpu"].idxmax()]
                ax.plot(star["tok_s_per_user"], star["throughput_per_gpu"], "*", ms=16,
                        color=c, markeredgecolor="k")
    if min_tok_s_user is not None:
        ax.axvline(min_tok_s_user, ls="--", color="grey")
        ax.axvspan(min_tok_s_user, ax.get_xlim()[1], color="green", alpha=0.06)
    ax.set_xlabel("generation speed (tokens/s/user = 1 / TPOT percentile)")
    ax.set_ylabel("throughput (output tokens/s per GPU)")
    cons = f"TTFT <= {ttft_max_s * 1e3:g} ms" if ttft_max_s is not None else "no TTFT limit"
    ax.set_title(title or f"Pareto frontiers ({cons})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
