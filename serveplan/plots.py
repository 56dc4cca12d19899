"""Figures (matplotlib, Agg backend), each from a stored result Dataset.

* :func:`latency_vs_rate` -- the SLO percentile of TTFT and TPOT against arrival rate with the
  goals as horizontal lines (BestServe Fig. 7/9): from a ``goodput`` result (estimates with
  confidence bands, the goodput interval shaded) or from a sweep with a ``rate`` dim (one
  line per combination of the other dims, averaged over ``seed``).
* :func:`histograms` -- TTFT and TPOT histograms of one simulation with P90, P99 and SLO
  markers (BestServe Fig. 6/8).
* :func:`goodput_bars` -- goodput per GPU of the strategies of a search, with intervals.
"""

from __future__ import annotations

import json

import numpy as np

__all__ = ["goodput_bars", "histograms", "latency_vs_rate", "plot"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slo(ds, ttft_s=None, tpot_s=None) -> tuple:
    slo = {}
    if "slo" in ds.attrs:
        slo = json.loads(ds.attrs["slo"]) or {}
    elif "config" in ds.attrs:
        cfg = json.loads(ds.attrs["config"])
        slo = cfg.get("slo") or (cfg.get("base", {}) or {}).get("slo") or {}
    t = ttft_s if ttft_s is not None else (slo.get("ttft_ms") or np.nan) / 1e3
    p = tpot_s if tpot_s is not None else (slo.get("tpot_ms") or np.nan) / 1e3
    return t, p, float(slo.get("percentile", 90) or 90)


def latency_vs_rate(ds, path, *, ttft_s=None, tpot_s=None) -> None:
    """P-th TTFT and TPOT against rate, SLO lines; from a goodput result or a sweep."""
    plt = _plt()
    goal_t, goal_p, pct = _slo(ds, ttft_s, tpot_s)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    if "goodput" in ds.attrs:
        rate = ds["rate"].values
        for ax, var in zip(axes, ("ttft_p_s", "tpot_p_s"), strict=True):
            v = ds[var].values * 1e3
            ax.plot(rate, v[:, 0], "o-", label=f"P{pct:g} estimate")
            ax.fill_between(rate, v[:, 1], v[:, 2], alpha=0.25, label="confidence interval")
            ax.axvspan(ds.attrs["goodput_low"], ds.attrs["goodput_high"], color="green",
                       alpha=0.12, label="goodput interval")
            ax.axvline(ds.attrs["goodput"], color="green", lw=1)
        title = (f"goodput {ds.attrs['goodput']:.3g} req/s "
                 f"[{ds.attrs['goodput_low']:.3g}, {ds.attrs['goodput_high']:.3g}] "
                 f"({ds.attrs.get('fidelity', '')} level)")
    elif "rate" in ds.dims:
        others = [d for d in ds.dims if d not in ("rate", "seed")]
        sub = ds.mean("seed") if "seed" in ds.dims else ds
        stacked = sub.stack(line=others) if others else sub.expand_dims(line=[0])
        rate = ds["rate"].values
        for i in range(min(stacked.sizes["line"], 12)):
            one = stacked.isel(line=i)
            label = ", ".join(f"{d}={one[d].values}" for d in others) if others else "sweep"
            for ax, var in zip(axes, ("ttft_slo_p_s", "tpot_slo_p_s"), strict=True):
                ax.plot(rate, one[var].values * 1e3, "o-", ms=3, label=label)
        title = "sweep"
    else:
        raise ValueError("latency-vs-rate needs a goodput result or a sweep with a rate dim")
    for ax, name, goal in ((axes[0], "TTFT", goal_t), (axes[1], "TPOT", goal_p)):
        if goal == goal:
            ax.axhline(goal * 1e3, color="red", ls="--", label="SLO")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(f"P{pct:g} {name} (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def histograms(ds, path, *, ttft_s=None, tpot_s=None) -> None:
    """TTFT and TPOT histograms of a per-request Dataset with P90/P99/SLO markers."""
    plt = _plt()
    if "ttft_s" not in ds:
        raise ValueError("histograms need per-request ttft_s and tpot_s (a simulate result)")
    goal_t, goal_p, _ = _slo(ds, ttft_s, tpot_s)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    for ax, var, name, goal in ((axes[0], "ttft_s", "TTFT", goal_t),
                                (axes[1], "tpot_s", "TPOT", goal_p)):
        x = ds[var].values * 1e3
        x = x[np.isfinite(x)]
        ax.hist(x, bins=60, color="tab:blue", alpha=0.8)
        for q, color in ((90, "green"), (99, "blue")):
            if x.size:
                v = np.percentile(x, q)
                ax.axvline(v, color=color, ls="--", label=f"P{q} {v:,.1f} ms")
        if goal == goal:
            ax.axvline(goal * 1e3, color="red", ls="--", label=f"SLO {goal * 1e3:g} ms")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def goodput_bars(ds, path, *, limit: int = 20) -> None:
    """Goodput per GPU by strategy (decided ones with their interval), colored by
    architecture."""
    plt = _plt()
    ok = ds["status"].values == "decided"
    idx = np.flatnonzero(ok)[:limit]
    if idx.size == 0:
        raise ValueError("no decided strategy to plot")
    names = ds["name"].values[idx].astype(str)
    g = ds["goodput"].values[idx]
    n = ds["gpus"].values[idx]
    per = g / n
    err = np.vstack([per - ds["goodput_low"].values[idx] / n,
                     ds["goodput_high"].values[idx] / n - per])
    colors = ["tab:orange" if a == "pd" else "tab:blue"
              for a in ds["architecture"].values[idx]]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * idx.size + 2), 4), dpi=120)
    ax.bar(np.arange(idx.size), per, yerr=np.maximum(err, 0), color=colors, capsize=3)
    ax.set_xticks(np.arange(idx.size), names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("goodput per GPU (req/s)")
    spec = json.loads(ds.attrs.get("spec", "{}"))
    ax.set_title(f"{spec.get('model', '')} on {spec.get('gpus', '')}x {spec.get('gpu', '')}"
                 " (blue: colocated, orange: PD)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot(ds, kind: str, path, **kw) -> None:
    """Dispatch on ``kind``: ``latency-vs-rate``, ``histograms`` or ``bars``."""
    kinds = {"latency-vs-rate": latency_vs_rate, "histograms": histograms,
             "bars": goodput_bars}
    if kind not in kinds:
        raise ValueError(f"kind given an invalid value: {kind!r} (valid: {', '.join(kinds)})")
    kinds[kind](ds, path, **kw)
