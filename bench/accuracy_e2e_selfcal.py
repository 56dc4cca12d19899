"""Setting (e) of the end-to-end report: runtime terms calibrated on a deployment's own runs.

Settings (c) and (d) answer for a model the fit never saw. A serveplan user who has run a
few cheap benchmarks of their own deployment asks something else: calibrated on those
(``serveplan calibrate --runs``), how well does serveplan predict the loads they did not
run? Here a deployment is an engine, model, system, mode, precision and layout
(:func:`deployment_key`); one with at least :data:`MIN_LIGHT_ROWS` runs at up to
:data:`LIGHT_CLIENTS` clients and some rows above has :data:`SELF_TERMS` fitted on its light
runs, each once (the same two first-order steps as every fold's), and its heavier rows
predicted with them. No row informs its own prediction: the light rows fit, the heavier rows check.

:data:`SELF_TERMS` are the default terms without ``frontend_output_per_token_s``: at up to 8
clients the first token's step holds 1-8 requests, too few to tell a cost per request of
that step from the constant latency, and the heavier rows would extrapolate it to batches of
hundreds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
from accuracy_e2e_breakdown import err_stats, measurement_id, rel_err

LIGHT_CLIENTS = 8
MIN_LIGHT_ROWS = 3
SELF_TERMS = ("frontend_output_s", "frontend_prompt_token_s", "prefill_token_layer_s",
              "disagg_handoff_s")


def deployment_key(row) -> tuple:
    """What one deployment is: its engine, model, system, mode, precision and layout (the
    engine version is left out: a deployment's repeated measurements span releases)."""
    return (row.engine, row.model, row.system, row.mode, row.precision, row.tp, row.pp,
            row.dp, row.ep)


def calibration_groups(rows: Sequence, light: int = LIGHT_CLIENTS,
                       min_rows: int = MIN_LIGHT_ROWS) -> list[tuple[list[int], list[int]]]:
    """Per deployment with at least ``min_rows`` runs at up to ``light`` clients and a row
    above: (the positions of its light rows, each run once -- a run exported more than
    once is fitted on once, as every fold's fit counts it --, of its heavier rows, copies
    included, as the targets read the rows), in first-row order."""
    by_key: dict[tuple, list[int]] = defaultdict(list)
    for k, r in enumerate(rows):
        by_key[deployment_key(r)].append(k)
    groups = []
    for idx in by_key.values():
        first = {}
        for k in idx:
            first.setdefault(measurement_id(rows[k]), k)
        train = [k for k in first.values() if rows[k].concurrency <= light]
        test = [k for k in idx if rows[k].concurrency > light]
        if len(train) >= min_rows and test:
            groups.append((train, test))
    return groups


def self_calibrated(rows: Sequence, fit: Callable, predict: Callable) -> tuple[np.ndarray, list]:
    """Every heavier row of a calibrated deployment predicted with the terms ``fit(train)``
    returns (``(terms, summary)``) for its light rows, by ``predict(test, terms)`` (``(n,
    2)`` ms); NaN elsewhere. Also each deployment's summary."""
    pred = np.full((len(rows), 2), np.nan)
    fits = []
    for train, test in calibration_groups(rows):
        terms, summ = fit(train)
        pred[test] = predict(test, terms)
        r = rows[train[0]]
        fits.append({"deployment": "/".join(str(v) for v in deployment_key(r)),
                     "light_rows": len(train), "checked_rows": len(test),
                     "terms": {n: v for n, v in terms.model_dump().items() if v},
                     "fitted": summ["fitted"]})
    return pred, fits


def summary(rows: Sequence, meas: np.ndarray, held_out: np.ndarray, calibrated: np.ndarray,
            fits: list) -> dict:
    """Per engine and overall, on the rows (e) predicts: their count, the deployments, and
    the error statistics of (c) and (e) there."""
    checked = ~np.isnan(calibrated[:, 0])
    engines = sorted({rows[k].engine for k in np.flatnonzero(checked)})
    out = []
    for engine in [*engines, "all"]:
        sel = checked & np.array([engine in ("all", r.engine) for r in rows])
        deployments = sum(f["deployment"].startswith(engine + "/") or engine == "all"
                          for f in fits)
        out.append({"engine": engine, "rows": int(sel.sum()), "deployments": deployments,
                    "c": err_stats(rel_err(held_out[sel], meas[sel])),
                    "e": err_stats(rel_err(calibrated[sel], meas[sel]))})
    return {"light_clients": LIGHT_CLIENTS, "min_light_rows": MIN_LIGHT_ROWS,
            "terms": list(SELF_TERMS), "by_engine": out, "fits": fits}
