"""Figures (matplotlib, Agg backend), each from a stored result Dataset.

* :func:`latency_vs_rate` -- the SLO percentile of TTFT and TPOT against arrival rate with the
  goals as horizontal lines (BestServe Fig. 7/9): from a ``goodput`` result (estimates with
  confidence bands, the goodput interval shaded) or from a sweep with a ``rate`` dim (one
  line per combination of the other dims, averaged over ``seed``).
* :func:`histograms` -- TTFT and TPOT histograms of one simulation with P90, P99 and SLO
  markers (BestServe Fig. 6/8).
* :func:`goodput_bars` -- goodput per GPU of the strategies of a search, with intervals.

Every figure is titled with the model, the GPU and the SLO (:func:`context`); each series
gets its own colour and marker (:func:`series_styles`); legends sit outside the axes and
list only series with data.
"""

from __future__ import annotations

import json

import numpy as np

from serveplan.results_io import result_kind

__all__ = ["PLOT_KINDS", "PLOT_READS", "SLO_NUMBERS", "choose_kind", "context",
           "deployment_names", "goodput_bars", "histograms", "instances", "json_attr",
           "latency_vs_rate", "log_axis", "outside_legend", "plot",
           "series_styles", "slo_text"]

PLOT_KINDS = {"latency-vs-rate": ("goodput", "sweep"), "histograms": ("simulate",),
              "bars": ("search",)}
"""Plot kind -> the result kinds it draws."""

PLOT_READS = {
    ("latency-vs-rate", "goodput"): dict(numbers=("rate", "ttft_p_s", "tpot_p_s"),
                                         number_attrs=("goodput", "goodput_low",
                                                       "goodput_high")),
    ("latency-vs-rate", "sweep"): dict(numbers=("ttft_slo_p_s", "tpot_slo_p_s")),
    ("histograms", "simulate"): dict(numbers=("ttft_s", "tpot_s")),
    ("bars", "search"): dict(numbers=("gpus", "goodput", "goodput_low", "goodput_high"),
                             texts=("status", "architecture", "name")),
}
"""What each plot kind reads of each result kind it draws
(:func:`serveplan.results_io.check_variables`; a sweep's ``rate`` dim is checked by
:func:`latency_vs_rate`, which says what it needs)."""
SLO_NUMBERS = ("ttft_ms", "tpot_ms", "percentile", "attainment")
"""The SLO entries a figure formats as numbers (each may be absent or null)."""

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def series_styles(n: int) -> list[tuple]:
    """``n`` distinct ``(colour, marker)`` pairs: up to 10 from tab10, up to 20 from tab20,
    colours and markers both distinct while they last."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    k = 10 if n <= 10 else 20
    return [(cmap(i % k), _MARKERS[i % len(_MARKERS)]) for i in range(n)]


def choose_kind(kind: str | None, result: str | None) -> str:
    """The plot kind to draw for a result of kind ``result``: ``kind`` if it fits, the one
    that fits when ``kind`` is None; otherwise an error saying which plot kinds draw which
    result kinds."""
    fits = [k for k, results in PLOT_KINDS.items() if result in results]
    if kind is not None and kind not in PLOT_KINDS:
        raise ValueError(f"--kind given an invalid value: {kind!r} "
                         f"(valid: {', '.join(PLOT_KINDS)})")
    if kind is not None and (result is None or result in PLOT_KINDS[kind]):
        return kind  # an unmarked Dataset (Python API): the drawing checks its variables
    if kind is None and fits:
        return fits[0]
    table = "; ".join(f"{k}: {' or '.join(r)} results" for k, r in PLOT_KINDS.items())
    got = f"a {result} result" if result else "not a serveplan result"
    hint = f"use --kind {fits[0]}" if fits else "no plot kind draws it"
    asked = f"--kind {kind} cannot draw it" if kind else "no --kind given"
    raise ValueError(f"the file is {got}: {asked}; {hint} ({table})")


# ----------------------------------------------------------------------------- context
def instances(dep) -> list[dict]:
    """The instance mappings of a deployment mapping in any form (flat, pd, pools)."""
    if not isinstance(dep, dict):
        return []
    insts = (dep.get("pools") if "pools" in dep else
             [dep.get("prefill") or {}, dep.get("decode") or {}] if "prefill" in dep else [dep])
    return [i for i in insts or [] if isinstance(i, dict)]


def deployment_names(dep) -> tuple[list[str], list[str]]:
    """The distinct models and GPUs of a deployment mapping."""
    insts = instances(dep)
    return tuple(list(dict.fromkeys(str(i[key]) for i in insts if i.get(key)))
                 for key in ("model", "gpu"))


def json_attr(ds, name: str):
    """The JSON text of the result's attribute ``name`` as a mapping ({} when absent); a
    ValueError naming the attribute when it is not a JSON mapping (an edited file)."""
    text = ds.attrs.get(name, "{}") or "{}"
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not text"
        raise ValueError(f"attribute {name!r} is not JSON ({why}); was the file edited?") from None
    if not isinstance(value, dict):
        raise ValueError(f"attribute {name!r} holds JSON {type(value).__name__}, not a mapping; "
                         "was the file edited?")
    return value


def _checked_slo(slo, where: str) -> dict:
    """``slo`` if it is a mapping whose :data:`SLO_NUMBERS` are numbers or null."""
    if not isinstance(slo, dict):
        raise ValueError(f"{where} is not a mapping of SLO goals; was the file edited?")
    for key in SLO_NUMBERS:
        value = slo.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{where}: {key} is {json.dumps(value)}, not a number; was the "
                             "file edited?")
    return slo


def _sources(ds) -> tuple[dict, dict, dict]:
    """``(deployment or search spec, slo, grid)`` mappings from a result's attributes."""
    cfg, spec = json_attr(ds, "config"), json_attr(ds, "spec")
    base = cfg["base"] if isinstance(cfg.get("base"), dict) else cfg
    slo = (_checked_slo(json_attr(ds, "slo"), "attribute 'slo'") if "slo" in ds.attrs else
           _checked_slo(base.get("slo") or spec.get("slo") or {}, "the SLO of its config"))
    dep = spec or base.get("deployment") or {}
    grid = cfg.get("grid")
    return dep, slo or {}, grid if isinstance(grid, dict) else {}


def context(ds, ttft_s: float | None = None, tpot_s: float | None = None) -> dict:
    """``model``, ``gpu`` (text), ``slo`` (mapping; goals given in seconds replace the
    file's) and ``title`` of a stored result."""
    dep, slo, grid = _sources(ds)
    for key, goal in (("ttft_ms", ttft_s), ("tpot_ms", tpot_s)):
        if goal is not None:
            slo = {**slo, key: goal * 1e3}
    models, gpus = deployment_names(dep)
    for key, values in grid.items():  # a sweep over models or GPUs names them all
        if key.endswith(".model"):
            models = [str(v) for v in values]
        elif key.endswith(".gpu"):
            gpus = [str(v) for v in values]
    model, gpu = ", ".join(models) or "?", ", ".join(gpus) or "?"
    if "gpus" in dep and isinstance(dep.get("gpus"), int):
        gpu = f"{dep['gpus']}x {gpu}"
    return {"model": model, "gpu": gpu, "slo": slo,
            "title": f"{model} on {gpu} · {slo_text(slo)}"}


def slo_text(slo: dict) -> str:
    """``SLO P90 TTFT <= 500 ms, TPOT <= 50 ms`` (or the attainment form)."""
    goals = [f"{name} ≤ {slo[key]:g} ms" for key, name in (("ttft_ms", "TTFT"),
                                                            ("tpot_ms", "TPOT")) if slo.get(key)]
    if not goals:
        return "no SLO"
    if slo.get("attainment"):
        return f"SLO {slo['attainment']:.0%} of requests with " + " and ".join(goals)
    return f"SLO P{float(slo.get('percentile', 90) or 90):g} " + ", ".join(goals)


def _goals(ds, ttft_s=None, tpot_s=None) -> tuple[float, float, float]:
    """TTFT and TPOT goals (s, NaN when none) and the percentile; flags beat the file."""
    slo = context(ds, ttft_s, tpot_s)["slo"]
    return ((slo.get("ttft_ms") or np.nan) / 1e3, (slo.get("tpot_ms") or np.nan) / 1e3,
            float(slo.get("percentile", 90) or 90))


def outside_legend(ax, *, also=(), below: bool = False, **kw) -> None:
    """A legend right of ``ax`` (or ``below`` it) for the labelled artists of ``ax`` and
    those of the axes in ``also`` whose label ``ax`` lacks (no legend if nothing is
    labelled)."""
    handles, labels = (list(x) for x in ax.get_legend_handles_labels())
    for one in also:
        for handle, label in zip(*one.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.insert(0, handle)
                labels.insert(0, label)
    if handles and below:
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  ncol=min(len(handles), 4), fontsize=7, **kw)
    elif handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0.0, fontsize=7, **kw)


def log_axis(ax, axis: str = "y") -> None:
    """Log scale with plain-number ticks at 1, 2, 5 x 10^k (``20``, ``50``, ``100``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    getattr(ax, f"set_{axis}scale")("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
    target.set_minor_formatter(NullFormatter())


def rate_axis(ax, rates) -> None:
    """Arrival rates on a log axis ticked at the evaluated rates when they span a factor
    of 4 or more (a doubling grid reads evenly), else linear."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    rates = np.unique(np.asarray(rates, dtype=float))
    rates = rates[np.isfinite(rates) & (rates > 0)]
    if rates.size < 2 or rates[-1] / rates[0] < 4:
        return
    ax.set_xscale("log")
    shown = rates if rates.size <= 12 else rates[:: int(np.ceil(rates.size / 12))]
    ax.xaxis.set_major_locator(FixedLocator(shown))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _save(fig, path) -> None:
    fig.savefig(path, bbox_inches="tight")
    _plt().close(fig)


# ----------------------------------------------------------------------------- latency
def _goodput_lines(ds, axes, pct: float) -> str:
    rate = ds["rate"].values
    for ax, var in zip(axes, ("ttft_p_s", "tpot_p_s"), strict=True):
        v = ds[var].values * 1e3
        ax.plot(rate, v[:, 0], "o-", color="tab:blue", label=f"P{pct:g} estimate")
        ax.fill_between(rate, v[:, 1], v[:, 2], color="tab:blue", alpha=0.25,
                        label="confidence interval")
        ax.axvspan(ds.attrs["goodput_low"], ds.attrs["goodput_high"], color="green",
                   alpha=0.12, label="goodput interval")
        ax.axvline(ds.attrs["goodput"], color="green", lw=1)
    return (f"goodput {ds.attrs['goodput']:.3g} req/s [{ds.attrs['goodput_low']:.3g}, "
            f"{ds.attrs['goodput_high']:.3g}] ({ds.attrs.get('fidelity', '')} level)")


def _sweep_lines(ds, axes) -> str:
    others = [d for d in ds.dims if d not in ("rate", "seed")]
    sub = ds.mean("seed") if "seed" in ds.dims else ds
    stacked = sub.stack(line=others) if others else sub.expand_dims(line=[0])
    rate = ds["rate"].values
    lines = []
    for i in range(stacked.sizes["line"]):
        one = stacked.isel(line=i)
        if np.isfinite(one["ttft_slo_p_s"].values).any() or np.isfinite(
                one["tpot_slo_p_s"].values).any():
            lines.append(one)
    for one, (color, marker) in zip(lines, series_styles(len(lines)), strict=True):
        label = ", ".join(f"{d}={one[d].values}" for d in others) if others else "sweep"
        for ax, var in zip(axes, ("ttft_slo_p_s", "tpot_slo_p_s"), strict=True):
            ax.plot(rate, one[var].values * 1e3, "-", marker=marker, color=color, ms=4,
                    label=label)
    seeds = ds.sizes.get("seed", 1)
    return (f"{len(lines)} configurations with data"
            + (f" · mean over {seeds} seeds" if seeds > 1 else ""))


def latency_vs_rate(ds, path, *, ttft_s=None, tpot_s=None) -> None:
    """P-th TTFT and TPOT against rate, SLO lines; from a goodput result or a sweep."""
    plt = _plt()
    goal_t, goal_p, pct = _goals(ds, ttft_s, tpot_s)
    if "goodput" not in ds.attrs and "rate" not in ds.dims:
        raise ValueError("latency-vs-rate needs a goodput result or a sweep whose grid "
                         "varies workload.rate")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120)
    sub = _goodput_lines(ds, axes, pct) if "goodput" in ds.attrs else _sweep_lines(ds, axes)
    for ax, name, goal in ((axes[0], "TTFT", goal_t), (axes[1], "TPOT", goal_p)):
        if goal == goal:
            ax.axhline(goal * 1e3, color="red", ls="--", label=f"{name} SLO {goal * 1e3:g} ms")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(f"P{pct:g} {name} (ms)")
        log_axis(ax)
        rate_axis(ax, ds["rate"].values)
        ax.grid(alpha=0.3, which="both")
    outside_legend(axes[1], also=(axes[0],))
    fig.suptitle(f"{context(ds, ttft_s, tpot_s)['title']}\n{sub}", fontsize=10)
    _save(fig, path)


def histograms(ds, path, *, ttft_s=None, tpot_s=None) -> None:
    """TTFT and TPOT histograms of a per-request Dataset with P90/P99/SLO markers."""
    plt = _plt()
    if "ttft_s" not in ds:
        raise ValueError("histograms need per-request ttft_s and tpot_s (a simulate result)")
    goal_t, goal_p, _ = _goals(ds, ttft_s, tpot_s)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120)
    for ax, var, name, goal in ((axes[0], "ttft_s", "TTFT", goal_t),
                                (axes[1], "tpot_s", "TPOT", goal_p)):
        x = ds[var].values * 1e3
        x = x[np.isfinite(x)]
        ax.hist(x, bins=60, color="tab:blue", alpha=0.8, label=f"{x.size:,} requests")
        for q, color, ls in ((90, "tab:green", "--"), (99, "tab:purple", ":")):
            if x.size:
                v = np.percentile(x, q)
                ax.axvline(v, color=color, ls=ls, label=f"P{q} {v:,.1f} ms")
        if goal == goal:
            ax.axvline(goal * 1e3, color="red", ls="-.", label=f"SLO {goal * 1e3:g} ms")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests")
        outside_legend(ax, below=True)
    fig.suptitle(context(ds, ttft_s, tpot_s)["title"], fontsize=10)
    _save(fig, path)


def goodput_bars(ds, path, *, limit: int = 20) -> None:
    """Goodput per GPU by strategy (decided ones with their interval), coloured by
    architecture."""
    plt = _plt()
    idx = np.flatnonzero(ds["status"].values == "decided")[:limit]
    if idx.size == 0:
        raise ValueError("no decided strategy to plot")
    n = ds["gpus"].values[idx]
    per = ds["goodput"].values[idx] / n
    err = np.vstack([per - ds["goodput_low"].values[idx] / n,
                     ds["goodput_high"].values[idx] / n - per])
    arch = ds["architecture"].values[idx].astype(str)
    kinds = ["colocated", "pd", *sorted(set(arch) - {"colocated", "pd"})]  # fixed colours
    style = dict(zip(kinds, series_styles(len(kinds)), strict=True))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * idx.size + 2), 4.2), dpi=120)
    x = np.arange(idx.size)
    for a in kinds:
        on = arch == a
        if not on.any():
            continue
        ax.bar(x[on], per[on], yerr=np.maximum(err[:, on], 0), color=style[a][0], capsize=3,
               label=a)
    ax.set_xticks(x, ds["name"].values[idx].astype(str), rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("goodput per GPU (req/s)")
    ax.set_title(context(ds)["title"], fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    outside_legend(ax, title="architecture")
    _save(fig, path)


def plot(ds, kind: str | None, path, **kw) -> str:
    """Draw ``ds`` as ``kind`` (``latency-vs-rate``, ``histograms`` or ``bars``; None: the
    kind that fits the result); returns the kind drawn."""
    kind = choose_kind(kind, result_kind(ds))
    draw = {"latency-vs-rate": latency_vs_rate, "histograms": histograms,
            "bars": goodput_bars}[kind]
    draw(ds, path, **({} if kind == "bars" else kw))
    return kind
