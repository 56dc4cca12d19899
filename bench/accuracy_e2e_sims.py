"""Simulating the end-to-end report's rows: each distinct deployment and load once, on
forked worker processes, longest first (``bench/accuracy_e2e.py`` and its probes).

A row on a GPU that borrows a measured speed (B300) is resolved twice over its life in the
report: at its held-out speed for every prediction the report scores
(:func:`resolve_all`), and at the catalog's speed, as a user's deployment runs, for the
fits whose terms ship (:func:`at_catalog_speed`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from accuracy_e2e_gpus import HELD_OUT_GPU, hold_out_gpu_speeds

from serveplan.e2e import resolve_row, row_client, simulate_row, with_terms
from serveplan.e2e_fit import mean_lengths
from serveplan.e2e_versions import engine_version
from serveplan.estimator.runtime import RuntimeTerms


def sim_key(row):
    """What a simulation of ``row`` depends on: the row without its id and measurements
    (the measurement date only through the engine version it selects, its source only
    through the client it names)."""
    version = engine_version(row.engine, row.version, row.measured)
    return replace(row, id="", ttft_ms=0.0, tpot_ms=0.0, measured="", version=version or "",
                   source=type(row_client(row)).__name__)


def unique_runs(rows):
    """The distinct simulations among ``rows``: (the index of each one's first row, the
    index of each row's simulation). Repeated measurements of one deployment and load are
    simulated once."""
    index, first, which = {}, [], []
    for k, r in enumerate(rows):
        key = sim_key(r)
        if key not in index:
            index[key] = len(first)
            first.append(k)
        which.append(index[key])
    return first, np.array(which, dtype=np.int64)


_SHARED: dict = {}  # rows and resolved deployments, inherited by forked workers


def fork_map(fn, tasks, jobs: int) -> list:
    """``[fn(t) for t in tasks]``, on ``jobs`` forked worker processes when ``jobs > 1``
    (they inherit this process's state, :data:`_SHARED` and the callers' own)."""
    if jobs <= 1 or len(tasks) < 2:
        return [fn(t) for t in tasks]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.map(fn, tasks, chunksize=1)


def _predict_task(task):
    """One simulation of :func:`predict_all`: ``(k, terms)``; ``terms`` None runs the
    row's deployment as resolved, ``"gpu"`` without the engine runtime; the row's own
    client (:func:`serveplan.e2e.row_client`)."""
    k, terms = task
    rows, resolved = _SHARED["rows"], _SHARED["resolved"]
    if terms == "gpu":
        return simulate_row(rows[k], _SHARED["data"], engine=False,
                            gpu=HELD_OUT_GPU.get(rows[k].id))
    res = with_terms(resolved[k], terms) if terms is not None else resolved[k]
    return simulate_row(rows[k], resolved=res)


def predict_all(rows, resolved, terms=None, jobs=1, data=None) -> np.ndarray:
    """Mean TTFT and TPOT (ms) of every row, each distinct simulation run once (on ``jobs``
    processes; ``terms="gpu"``: the GPU steps alone, resolved from ``data``)."""
    first, which = unique_runs(rows)
    _SHARED.update(rows=rows, resolved=resolved, data=data)
    order = sorted(range(len(first)), key=lambda i: -_sim_cost(rows[first[i]]))
    out = np.empty((len(first), 2))  # the longest first: no worker idles on a late one
    runs = fork_map(_predict_task, [(first[i], terms) for i in order], jobs)
    out[order] = np.array(runs, dtype=float).reshape(len(order), 2)
    return out[which]


def _sim_cost(row) -> int:
    """A simulation's rough cost, to order the runs: the tokens its clients move."""
    return row.concurrency * (row.isl + row.osl)


def prefill_seconds(row, resolved) -> float:
    """The oracle's prefill of one mean prompt of ``row``'s client, alone, on the
    instance that prefills it (a first-order slope's scale, :mod:`serveplan.e2e_fit`)."""
    pool = next((p for p in resolved.pools if p.config.role in ("prefill", "colocated")),
                resolved.pools[0])
    prompt = int(round(mean_lengths(row)[0]))
    return float(np.asarray(pool.instance.oracle.prefill_time(batch_size=1,
                                                              input_len=prompt)).ravel()[0])


def _resolve_each(rows, data, gpu) -> tuple[list, list]:
    """Every row's deployment resolved on ``gpu(row)`` (a GPU YAML; None: the catalog's),
    each distinct one once, and each row's oracle prefill of one mean prompt
    (:func:`prefill_seconds`)."""
    first, which = unique_runs(rows)
    resolved_u = [resolve_row(rows[k], data, gpu=gpu(rows[k])) for k in first]
    pre_u = [prefill_seconds(rows[k], res) for k, res in zip(first, resolved_u, strict=True)]
    return [resolved_u[w] for w in which], [pre_u[w] for w in which]


def resolve_all(rows, data) -> tuple[list, list]:
    """Every row's resolved deployment (B300 rows at their held-out speed,
    :func:`hold_out_gpu_speeds`) and oracle prefill (:func:`_resolve_each`)."""
    hold_out_gpu_speeds(rows)
    return _resolve_each(rows, data, lambda row: HELD_OUT_GPU.get(row.id))


def at_catalog_speed(rows, resolved, prefill_s, unfitted, data, jobs=1):
    """The inputs of the fits whose terms ship -- ``(resolved, prefill_s, unfitted)`` --
    with every row :func:`resolve_all` held out at another GPU speed (:data:`HELD_OUT_GPU`)
    resolved again on its catalog GPU, as a user's deployment runs: its oracle prefill and
    its unfitted predictions (setting (b)) anew. The other rows' are the given ones; the
    given lists and array are not changed."""
    moved = [k for k, r in enumerate(rows) if r.id in HELD_OUT_GPU]
    resolved, prefill_s, unfitted = list(resolved), list(prefill_s), np.array(unfitted)
    if not moved:
        return resolved, prefill_s, unfitted
    at_catalog = _resolve_each([rows[k] for k in moved], data, lambda row: None)
    for k, res, pre in zip(moved, *at_catalog, strict=True):
        resolved[k], prefill_s[k] = res, pre
    unfitted[moved] = predict_all([rows[k] for k in moved], [resolved[k] for k in moved],
                                  RuntimeTerms(), jobs)
    return resolved, prefill_s, unfitted
