"""A strategy search in words: the table, its legend, the recommendation, or the refusal.

Everything here reads the search ``xarray.Dataset`` (:func:`serveplan.search.run_search`)
only, so a stored ``search.nc`` is reported the same way as a fresh search.

* :func:`search_table` -- the best strategies, one row each;
* :func:`legend` -- what the ``#``, interval, ``level``, ``binds`` and ``status`` columns
  mean;
* :func:`recommendation` -- the strategy to deploy, its goodput per GPU and in total, what
  binds, the runner-up and by how much (and whether their intervals overlap);
* :func:`infeasible_reasons` -- when no strategy has a positive goodput, one reason per
  strategy class (architecture x TP): the parallelism is invalid, the instance does not fit,
  or the SLO cannot be met (with the best latency the class can achieve).
"""

from __future__ import annotations

import json

import numpy as np

from serveplan.search_dataset import pd_shapes_label, shape_label

__all__ = ["feasible", "infeasible_reasons", "legend", "recommendation", "search_table"]

STATUS_MEANING = {
    "decided": "goodput found at the fidelity in `level`",
    "dominated": "an integer multiple of a larger strategy that also fits the budget; the "
                 "larger one has at least its goodput per GPU, so only it is decided",
    "pruned": "its upper bound (per GPU, or per dollar with --rank-by dollar) is below the "
              "goodput of the best decided strategies, or it cannot meet the SLO at any rate",
    "budget": "not decided: --max-decide strategies were decided first",
    "oom": "does not fit in GPU memory",
    "invalid": "the parallelism does not apply to the model (e.g. TP not dividing the heads)",
}
LEVEL_MEANING = {"analytic": "queueing formulas", "request": "request-level simulation",
                 "iteration": "every engine step simulated"}


def _slo_text(ds) -> tuple[str, str]:
    slo = json.loads(ds.attrs["slo"])
    p = f"P{slo['percentile']:g}"
    goals = ", ".join(f"{n} <= {slo[k]:,.4g} ms" for n, k in (("TTFT", "ttft_ms"),
                                                                ("TPOT", "tpot_ms")) if slo[k])
    if slo.get("attainment") is not None:
        return p, f"{slo['attainment']:.0%} of requests meeting {goals}"
    return p, f"{p} {goals}"


def _f(x: float, digits: int = 2) -> str:
    return "—" if x != x else f"{x:,.{digits}f}"


def _var(r, name: str, default=""):
    return r[name].values.item() if name in r else default


def search_table(ds, limit: int = 20):
    """A rich table of the best ``limit`` strategies of a search Dataset."""
    from rich.table import Table

    spec = json.loads(ds.attrs["spec"])
    p, slo = _slo_text(ds)
    money, efficiency = _has_prices(ds), _mixed(ds)
    per = "dollar" if ds.attrs.get("rank_by") == "dollar" else "GPU"
    t = Table(title=f"{spec['model']} on {spec['gpus']}x {spec['gpu']}: goodput per {per}, "
              f"{slo}", title_justify="left")
    columns = [("#", "right"), ("strategy", "left"), ("GPUs", "right"),
               ("req/s/GPU", "right"), ("req/s [a, b)", "right"), ("analytic", "right"),
               (f"{p} TTFT", "right"), (f"{p} TPOT", "right")]
    columns += [("$/h", "right"), ("req/$", "right")] if money else []
    columns += [("CE", "right")] if efficiency else []
    for col, just in (*columns, ("level", "left"), ("binds", "left"), ("status", "left")):
        t.add_column(col, justify=just, no_wrap=True)
    for i in range(min(limit, ds.sizes["strategy"])):
        r = ds.isel(strategy=i)
        decided = str(r["status"].values) == "decided"
        censored = decided and bool(_var(r, "censored", 0))
        cells = [str(int(r["rank"])) if int(r["rank"]) else "",
                 str(r["name"].values), str(int(r["gpus"])),
                 ("≥ " if censored else "")
                 + _f(float(r["goodput_per_gpu"] if decided else r["analytic_per_gpu"]), 3)
                 + ("" if decided else "*"),
                 (f"{_f(float(r['goodput']))} [{_f(float(r['goodput_low']))}, "
                  f"{_f(float(r['goodput_high']))})") if decided else "—",
                 _f(float(r["analytic_goodput"])),
                 _f(float(r["ttft_p_s"]) * 1e3, 0) + (" ms" if decided else ""),
                 _f(float(r["tpot_p_s"]) * 1e3, 1) + (" ms" if decided else "")]
        if money:
            cells += [_f(float(r["cost_per_hour"])),
                      _f(float(r["goodput_per_dollar"]), 0) if decided else "—"]
        if efficiency:
            cells.append(_f(float(r["cost_efficiency"])))
        t.add_row(*cells, str(r["fidelity"].values), str(_var(r, "binding")),
                  str(r["status"].values))
    return t


def _mixed(ds) -> bool:
    """Several GPU types and a baseline to measure cost efficiency against."""
    return bool(ds.attrs.get("baseline")) and "," in json.loads(ds.attrs["spec"])["gpu"]


def _has_prices(ds) -> bool:
    return "cost_per_hour" in ds and bool(np.isfinite(ds["cost_per_hour"].values).any())


def legend(ds) -> str:
    """What the table's columns mean (module docstring)."""
    spec = json.loads(ds.attrs["spec"])
    conf = spec.get("confidence", 0.95)
    present = [s for s in STATUS_MEANING if (ds["status"].values == s).any()]
    per = "per dollar" if ds.attrs.get("rank_by") == "dollar" else "per GPU"
    lines = [
        f"#: rank among decided strategies by goodput {per} (1 = best).",
        "req/s/GPU: goodput per GPU; * = analytic estimate (not decided at fidelity); "
        "≥ = censored (the SLO still held at the highest rate the runs can vouch for).",
        f"req/s [a, b): goodput and its {conf:.0%} interval: the SLO is met with confidence "
        "at a and confidently violated at b (or b is the capacity bound). The width includes "
        f"the search's resolution (--rtol {spec.get('rtol', 0.05):g}): an interval one "
        "bracket wide means the verdict flips between two evaluated rates.",
        "level: fidelity that decided the strategy: " + "; ".join(
            f"{k} = {v}" for k, v in LEVEL_MEANING.items()) + ".",
        "binds: what limits the goodput: the TTFT or TPOT goal, or capacity (throughput, "
        "not the SLO).",
        "status: " + "; ".join(f"{s} = {STATUS_MEANING[s]}" for s in present) + ".",
    ]
    if _has_prices(ds):
        lines.append("$/h: the strategy's GPUs times their price per GPU-hour (--price); "
                     "req/$: requests served per dollar at the goodput.")
    if _mixed(ds):
        lines.append(f"CE: cost efficiency, requests per dollar relative to the baseline "
                     f"{ds.attrs['baseline']} (the best all-{spec['gpu'].split(',')[0]} "
                     "strategy; Frontier §6.2); above 1 serves more per dollar.")
    return "\n".join(lines)


def feasible(ds) -> bool:
    """Some decided strategy has a positive goodput."""
    ok = (ds["status"].values == "decided") & (ds["goodput"].values > 0)
    return bool(ok.any())


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _goodput_text(r) -> str:
    """``at least 17.35 req/s per GPU, 138.78 req/s in total (interval [..., ...) req/s)``."""
    least = "at least " if bool(_var(r, "censored", 0)) else ""
    return (f"{least}{float(r['goodput_per_gpu']):,.2f} req/s per GPU, {least}"
            f"{float(r['goodput']):,.2f} req/s in total (interval "
            f"[{float(r['goodput_low']):,.2f}, {float(r['goodput_high']):,.2f}) req/s)")


def _binds_text(r) -> str:
    binds = str(_var(r, "binding")) or "the SLO"
    if binds == "capacity":
        return ("capacity binds, not the SLO (the SLO still holds at the highest rate the "
                "runs can vouch for)")
    return f"the {binds} goal binds"


def recommendation(ds) -> str:
    """The strategy to deploy, in one paragraph (module docstring); empty if none is
    feasible."""
    if not feasible(ds):
        return ""
    spec = json.loads(ds.attrs["spec"])
    ranked = [int(i) for i in np.argsort(ds["rank"].values) if ds["rank"].values[i] > 0]
    best = ds.isel(strategy=ranked[0])
    text = (f"Deploy {best['name'].values} ({_describe(best)}; {int(best['gpus'])} of "
            f"{spec['gpus']:,} GPUs): {_goodput_text(best)}{_money_text(best)}; "
            f"{_binds_text(best)}.{_baseline_text(ds, best)}")
    score, unit = (("goodput_per_dollar", "requests per dollar")
                   if ds.attrs.get("rank_by") == "dollar" else ("goodput_per_gpu", "req/s per GPU"))
    if len(ranked) < 2 or not float(ds[score].values[ranked[1]]) > 0:
        return text + " No other strategy was decided with a positive goodput."
    second = ds.isel(strategy=ranked[1])
    a, b = float(best[score]), float(second[score])
    text += (f" Runner-up: {second['name'].values} ({_plural(int(second['gpus']), 'GPU')}) "
             f"at {b:,.2f} {unit}, {(a - b) / a:.1%} lower.")
    if all(str(_var(r, "binding")) == "capacity" for r in (best, second)):
        text += (" Both are capacity-bound, so this order is that of their analytic capacity "
                 "bounds; longer runs (--requests) would test them nearer capacity.")
    if (float(best["goodput_low"]) / _size(ds, best)
            < float(second["goodput_high"]) / _size(ds, second)):
        text += (f" Their intervals ({unit}) overlap: the order is not resolved at this run "
                 "length (more --seeds or --requests would settle it).")
    return text


def _size(ds, r) -> float:
    """What the ranking divides a goodput by: GPUs, or dollars per second."""
    if ds.attrs.get("rank_by") == "dollar":
        return float(r["cost_per_hour"]) / 3600.0
    return float(int(r["gpus"]))


def _money_text(r) -> str:
    """``, $11.80/h, 17,080 requests per dollar`` where the GPUs have prices."""
    if "cost_per_hour" not in r or not float(r["cost_per_hour"]) > 0:
        return ""
    return (f", ${float(r['cost_per_hour']):,.2f}/h, "
            f"{float(r['goodput_per_dollar']):,.0f} requests per dollar")


def _baseline_text(ds, best) -> str:
    """Spend ratio and cost efficiency against the homogeneous baseline (mixed GPU types)."""
    if not _mixed(ds) or str(best["name"].values) == ds.attrs["baseline"]:
        return ""
    return (f" Against the best all-{json.loads(ds.attrs['spec'])['gpu'].split(',')[0]} "
            f"strategy {ds.attrs['baseline']}: spend ratio {float(best['spend_ratio']):.2f}, "
            f"cost efficiency {float(best['cost_efficiency']):.2f} (Frontier §6.2).")


def _at(r, role: str) -> str:
    """``TP 2`` or ``TP 1 x DP 8`` of a strategy's ``prefill`` or ``decode`` instances."""
    tp, dp = int(r[f"tp_{role}"]), int(r[f"dp_{role}"]) if f"dp_{role}" in r else 1
    return f"TP {tp}" + (f" x DP {dp}" if dp > 1 else "")


def _describe(r) -> str:
    if str(r["architecture"].values) == "afd":
        return (f"{_plural(int(r['n_prefill']), 'prefill instance')} at TP "
                f"{int(r['tp_prefill'])} + {_plural(int(r['n_decode']), 'attention instance')} "
                f"at TP {int(r['tp_decode'])} + {_plural(int(r['n_ffn']), 'FFN instance')} at "
                f"TP {int(r['tp_ffn'])}, {_plural(int(r['micro_batches']), 'micro-batch')}")
    if str(r["architecture"].values) == "pd":
        return (f"{_plural(int(r['n_prefill']), 'prefill instance')} at {_at(r, 'prefill')}"
                f" + {_plural(int(r['n_decode']), 'decode instance')} at {_at(r, 'decode')}")
    return f"{_plural(int(r['n_prefill']), 'colocated instance')} at {_at(r, 'prefill')}"


def _class(r) -> tuple[tuple, str]:
    """``(sort key, name)`` of a strategy's class: architecture and TP sizes."""
    tp_p, tp_d = int(r["tp_prefill"]), int(r["tp_decode"])
    if str(r["architecture"].values) == "afd":
        tps = (tp_p, tp_d, int(r["tp_ffn"]))
        return (2, *tps), "afd tp" + "/".join(map(str, tps))
    dp_p, dp_d = (int(r["dp_prefill"]), int(r["dp_decode"])) if "dp_prefill" in r else (1, 1)
    if str(r["architecture"].values) == "pd":  # pd tp2/1, pd tp1/tp1dp4
        return (1, tp_p, dp_p, tp_d, dp_d), f"pd {pd_shapes_label(tp_p, dp_p, tp_d, dp_d)}"
    return (0, tp_p, dp_p, tp_d, dp_d), f"colocated {shape_label(tp_p, dp_p)}"


_PRIORITY = {"decided": 0, "pruned": 1, "oom": 2, "invalid": 2, "budget": 3}


def infeasible_reasons(ds) -> list[str]:
    """One ``class: reason`` line per strategy class (module docstring)."""
    found: dict[tuple, tuple[int, str]] = {}
    for i in range(ds.sizes["strategy"]):
        r = ds.isel(strategy=i)
        status = str(r["status"].values)
        if status not in _PRIORITY:
            continue  # dominated: its family's largest member speaks for it
        why = (str(_var(r, "summary")) or "decided with goodput 0") if status == "decided" \
            else str(r["reason"].values)
        key = _class(r)
        if _PRIORITY[status] < found.get(key, (9, ""))[0]:
            found[key] = (_PRIORITY[status], why)
    return [f"{name}: {found[(order, name)][1]}" for order, name in sorted(found)]
