"""The end-to-end report's layout check (``bench/accuracy_e2e.py``): does the parallel
layout serveplan ranks best -- per GPU, or fastest per request -- match the measured best
among the rows that differ only in layout?"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from serveplan.e2e import agg_workers
from serveplan.e2e_recipes import layout as worker_layout


def _role_gpus(role) -> int:
    return role.tp * role.pp * max(role.dp, 1)


def _parallel(tp: int, pp: int, dp: int, ep: int) -> str:
    """A worker's parallel layout as a label: tensor, pipeline, attention-data and expert
    parallel sizes (a size of 1 left out; dp 0, not recorded, is 1)."""
    sizes = (("tp", tp), ("pp", pp), ("dp", max(dp, 1)), ("ep", ep))
    return " ".join(f"{name} {size}" for name, size in sizes if size > 1) or "tp 1"


def agg_layout(r) -> tuple[str, int]:
    """An agg row's parallel layout as it ran (a worker's tp, attention dp and ep by
    :func:`~serveplan.e2e_recipes.layout`, which reads InferenceX's exports; pp) and the
    GPUs of its workers."""
    tp, dp, ep = worker_layout(r)
    workers = agg_workers(r)
    gpus = tp * dp * r.pp * (workers if isinstance(workers, int) else 1)
    return _parallel(tp, r.pp, dp, ep), gpus


def pd_layout(r) -> tuple[str, int]:
    """A disaggregated row's split (prefill and decode workers x their parallel layout)
    and its GPUs."""
    p, d = r.prefill, r.decode
    label = (f"{p.workers}x({_parallel(p.tp, p.pp, p.dp, p.ep)})P + "
             f"{d.workers}x({_parallel(d.tp, d.pp, d.dp, d.ep)})D")
    return label, p.workers * _role_gpus(p) + d.workers * _role_gpus(d)


def best_layout(rows, preds, mode: str, layout) -> dict:
    """Per (engine, version, model, system, precision, isl, osl, concurrency) among
    ``mode`` rows with two or more layouts (``layout(row) -> (label, gpus)``): is the
    layout with the highest output tokens/s per GPU (closed loop: c * osl / (TTFT +
    (osl - 1) TPOT) / gpus) the measured best (``agree``), and is the one with the
    shortest request (TTFT + (osl - 1) TPOT) the measured fastest (``fastest``)? At fixed
    concurrency the first is mostly decided by the GPU counts; the second is not.
    ``chance``: the groups a pick at random among each group's layouts would get right on
    average. A layout is chosen for one checkpoint and one engine version, so layouts are
    compared within one precision and version (an unrecorded version is one)."""
    groups = defaultdict(list)
    for k, r in enumerate(rows):
        if r.mode == mode:
            groups[(r.engine, r.version, r.model, r.system, r.precision, r.isl, r.osl,
                    r.concurrency)].append(k)

    def per_gpu(k, ttft, tpot):
        r = rows[k]
        return r.concurrency * r.osl / ((ttft + (r.osl - 1) * tpot) / 1e3) / layout(r)[1]

    def request_s(k, ttft, tpot):
        return ttft + (rows[k].osl - 1) * tpot

    def same(score, p, idx):
        meas = max(idx, key=lambda k: score(k, rows[k].ttft_ms, rows[k].tpot_ms))
        return layout(rows[meas])[0] == layout(rows[max(idx, key=lambda k: score(k, *p[k]))])[0]

    result = {}
    for name, p in preds.items():
        agree = fastest = total = 0
        chance = 0.0
        for idx in groups.values():
            labels = {layout(rows[k])[0] for k in idx}
            if len(labels) < 2 or not np.isfinite(p[idx]).all():
                continue
            agree += same(per_gpu, p, idx)
            fastest += same(lambda k, a, b: -request_s(k, a, b), p, idx)
            chance += 1.0 / len(labels)
            total += 1
        result[name] = {"agree": agree, "fastest": fastest, "groups": total,
                        "chance": round(chance, 1)}
    return result
