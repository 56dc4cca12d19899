"""The search's result as an ``xarray.Dataset``: one entry per strategy on a ``strategy``
dim in rank order, with its architecture, instance counts, TP sizes, GPU types and GPUs as
coords, its goodput (per GPU and per dollar), bounds, latencies and verdict as variables.

With prices for every GPU type, each strategy also carries Frontier's spend ratio and cost
efficiency (:mod:`serveplan.pricing`) against the *baseline*: the best decided strategy all
on the first GPU type given (the homogeneous deployment a mixed one must beat).
"""

from __future__ import annotations

import numpy as np

from serveplan.deployments import PDDeployment, strategy_name
from serveplan.pricing import cost_efficiency, spend_ratio
from serveplan.search_afd import afd_coords, afd_label, is_afd

__all__ = ["pd_shapes_label", "shape_label", "strategy_dataset", "strategy_label"]


COORDS = ("architecture", "n_prefill", "n_decode", "tp_prefill", "tp_decode", "gpu_prefill",
          "gpu_decode")
DP_COORDS = ("dp_prefill", "dp_decode")
"""Coords of a search that tries attention data parallelism (``--dp``)."""
AFD_COORDS = ("n_ffn", "tp_ffn", "gpu_ffn", "micro_batches")
"""Coords of a search that includes AFD (``n_decode`` etc. are then the attention pool's;
other strategies have no FFN pool: 0, 0, "" and 0)."""


def _coords(d) -> dict:
    if is_afd(d):
        return afd_coords(d)
    if isinstance(d, PDDeployment):
        return {"architecture": "pd", "n_prefill": d.prefill.num_instances,
                "n_decode": d.decode.num_instances, "tp_prefill": d.prefill.tp,
                "tp_decode": d.decode.tp, "gpu_prefill": d.prefill.gpu,
                "gpu_decode": d.decode.gpu, "dp_prefill": d.prefill.dp, "dp_decode": d.decode.dp}
    return {"architecture": "colocated", "n_prefill": d.num_instances,
            "n_decode": d.num_instances, "tp_prefill": d.tp, "tp_decode": d.tp,
            "gpu_prefill": d.gpu, "gpu_decode": d.gpu, "dp_prefill": d.dp, "dp_decode": d.dp}


def shape_label(tp: int, dp: int) -> str:
    """``tp2``, ``tp1dp8``: an instance's tensor x attention data parallelism."""
    return f"tp{tp}" + (f"dp{dp}" if dp > 1 else "")


def pd_shapes_label(tp_p: int, dp_p: int, tp_d: int, dp_d: int) -> str:
    """The prefill and decode shapes of a PD strategy: ``tp2`` (both alike), ``tp2/1``,
    ``tp1/tp1dp4``."""
    p, d = shape_label(tp_p, dp_p), shape_label(tp_d, dp_d)
    if p == d:
        return p
    return f"{p}/{d[2:] if dp_p == dp_d == 1 else d}"


def strategy_label(d, with_gpus: bool = False) -> str:
    """``3p2d-tp2/1``, ``4m-tp1dp8`` (``-h100/h20`` appended when ``with_gpus``)."""
    c = _coords(d)
    if c["architecture"] == "afd":
        return afd_label(d, strategy_name(d), with_gpus)
    gpu = ""
    if with_gpus:
        gpu = ("-" + c["gpu_prefill"] if c["gpu_prefill"] == c["gpu_decode"]
               else f"-{c['gpu_prefill']}/{c['gpu_decode']}")
    shapes = pd_shapes_label(c["tp_prefill"], c["dp_prefill"], c["tp_decode"], c["dp_decode"])
    return f"{strategy_name(d)}-{shapes}{gpu}"  # 4m-tp1dp8, 3p2d-tp2/1, 3p2d-tp2/tp1dp8


def _baseline(rows, spec):
    """The best decided strategy all on the first GPU type (module doc), or ``None``."""
    first = spec.gpu_types[0]
    homogeneous = [r for r in rows if r.status == "decided" and r.goodput > 0
                   and {v for k, v in _coords(r.deployment).items() if k.startswith("gpu_")}
                   == {first}]
    return homogeneous[0] if homogeneous else None


_ORDER = {"decided": 0, "budget": 1, "dominated": 2, "pruned": 3, "oom": 4, "invalid": 5}


def strategy_dataset(rows, spec, seconds: float):
    import xarray as xr

    from serveplan import __version__

    def key(r):
        value = r.score(r.goodput if r.status == "decided" else r.analytic, spec.rank_by)
        return (_ORDER.get(r.status, 9), -(value if value == value else -1.0), r.gpus)

    rows = sorted(rows, key=key)
    base = _baseline(rows, spec)
    mixed = len(spec.gpu_types) > 1
    names = COORDS + (DP_COORDS if max(spec.dp) > 1 else ()) + \
        (AFD_COORDS if "afd" in spec.architectures else ())
    none = {"n_ffn": 0, "tp_ffn": 0, "gpu_ffn": "", "micro_batches": 0, "dp_prefill": 1,
            "dp_decode": 1}
    coords = {k: ("strategy", [_coords(r.deployment).get(k, none.get(k)) for r in rows])
              for k in names}
    coords["name"] = ("strategy", [strategy_label(r.deployment, mixed) for r in rows])
    coords["gpus"] = ("strategy", np.array([r.gpus for r in rows], dtype=np.int64))
    coords["strategy"] = np.arange(len(rows))

    def col(f):
        return ("strategy", np.array([f(r) for r in rows], dtype=np.float64))

    data = {
        "goodput": col(lambda r: r.goodput),
        "goodput_low": col(lambda r: r.low),
        "goodput_high": col(lambda r: r.high),
        "goodput_per_gpu": col(lambda r: r.per_gpu(r.goodput)),
        "analytic_goodput": col(lambda r: r.analytic),
        "analytic_per_gpu": col(lambda r: r.per_gpu(r.analytic)),
        **_cost_columns(base, col),
        "upper_bound": col(lambda r: r.bound),
        "ttft_p_s": col(lambda r: r.ttft),
        "tpot_p_s": col(lambda r: r.tpot),
        "min_ttft_s": col(lambda r: r.min_ttft),
        "min_tpot_s": col(lambda r: r.min_tpot),
        "decide_seconds": col(lambda r: r.seconds),
        "status": ("strategy", np.array([r.status for r in rows], dtype=object)),
        "reason": ("strategy", np.array([r.reason for r in rows], dtype=object)),
        "binding": ("strategy", np.array([r.binding for r in rows], dtype=object)),
        "censored": ("strategy", np.array([r.censored for r in rows], dtype=np.int8)),
        "summary": ("strategy", np.array([r.summary for r in rows], dtype=object)),
        "fidelity": ("strategy", np.array([r.fidelity for r in rows], dtype=object)),
        "deployment": ("strategy", np.array([r.deployment.model_dump_json() for r in rows],
                                            dtype=object)),
    }
    ranked = [i for i, r in enumerate(rows) if r.status == "decided"]
    rank = np.zeros(len(rows), dtype=np.int64)
    for k, i in enumerate(ranked):
        rank[i] = k + 1
    data["rank"] = ("strategy", rank, {"description": "1 = best decided; 0 = not decided"})
    attrs = {"spec": spec.model_dump_json(), "serveplan_version": __version__,
             "slo": spec.slo.model_dump_json(), "search_seconds": seconds,
             "kind": "search", "rank_by": spec.rank_by,
             "baseline": "" if base is None else strategy_label(base.deployment, mixed)}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _cost_columns(base, col) -> dict:
    """Dollars per hour, goodput per dollar, and spend ratio / cost efficiency against the
    baseline row ``base`` (module doc; NaN without prices or without a baseline)."""
    b_cost, b_rate = (base.cost, base.goodput) if base is not None else (np.nan, np.nan)
    return {
        "cost_per_hour": col(lambda r: r.cost),
        "goodput_per_dollar": col(lambda r: r.per_dollar(r.goodput)),
        "spend_ratio": col(lambda r: spend_ratio(r.cost, b_cost)),
        "cost_efficiency": col(lambda r: cost_efficiency(
            r.goodput if r.status == "decided" else np.nan, r.cost, b_rate, b_cost)),
    }
