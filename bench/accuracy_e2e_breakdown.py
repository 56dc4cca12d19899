"""Where the end-to-end error sits: overall (also with each run counted once), per group
and per engine x load, at light load the time the measured TTFT spends outside the
simulated engine, the TTFT rise with the output length, and the floor repeated
measurements put under any prediction.

Every table here is computed from the rows and the predictions of one run, so
``--report-only`` rebuilds it from the rows CSV.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from serveplan.e2e_fit import measured_means

LOAD_BANDS = ((1, 8, "<= 8"), (9, 128, "9-128"), (129, None, "> 128"))
"""Concurrency bands (clients) of the engine x load table: light load, where TTFT is
mostly one prefill plus the time around it; moderate; and saturated, where it is mostly
the wait for a free slot."""
LIGHT_LOAD = 8  # clients: the light-load gap table's rows have at most this many


def rel_err(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """predicted / measured - 1, elementwise."""
    return pred / meas - 1.0


def med_abs(pred, meas) -> np.ndarray:
    """Median |error| of TTFT and TPOT."""
    return np.median(np.abs(rel_err(pred, meas)), axis=0)


def overall(preds: dict, meas: np.ndarray, keep: np.ndarray | None = None) -> dict:
    """Median |error| of TTFT and TPOT per setting, over the rows ``keep`` selects (all by
    default); a row a setting could not predict (NaN) is left out of that setting's."""
    sel = slice(None) if keep is None else keep
    out = {}
    for name, p in preds.items():
        err = np.abs(rel_err(p[sel], meas[sel]))
        out[name] = {"ttft_med_abs": float(np.nanmedian(err[:, 0])),
                     "tpot_med_abs": float(np.nanmedian(err[:, 1]))}
    return out


MEASUREMENT_DECIMALS = 2
"""Decimals of a millisecond two rows' TTFT and TPOT must agree to for one run: the
coarsest export in the data (the gap-analysis CSVs) rounds the runs it repeats to 0.01 ms."""


def measurement_id(row) -> tuple:
    """What one measurement is: the engine, system and load (isl, osl, clients) with the
    measured TTFT and TPOT to :data:`MEASUREMENT_DECIMALS` decimals of a millisecond
    (:func:`distinct_measurements`)."""
    d = MEASUREMENT_DECIMALS
    return (row.engine, row.system, row.isl, row.osl, row.concurrency, f"{row.ttft_ms:.{d}f}",
            f"{row.tpot_ms:.{d}f}")


def distinct_measurements(rows) -> np.ndarray:
    """Which rows are the first of their measurement. Rows of one engine, system and load
    (isl, osl, clients) whose measured TTFT and TPOT agree to 0.01 ms are one run exported
    more than once -- some under another checkpoint's name (DeepSeek-R1 / V3) or another
    recorded layout (tp 16 beside tp 4 on one 8-GPU node), differing at most in the last
    binary digit; some in a gap-analysis CSV that rounds them to 0.01 ms (Qwen3.5-397B
    on SGLang, Kimi-K2.5 on vLLM) -- and only the first counts. Two runs agreeing to 0.01
    ms in both TTFT and TPOT at one load would be counted once; none are known to."""
    seen, keep = set(), np.zeros(len(rows), dtype=bool)
    for i, r in enumerate(rows):
        ident = measurement_id(r)
        keep[i] = ident not in seen
        seen.add(ident)
    return keep


def overall_distinct(rows, preds: dict, meas: np.ndarray) -> dict:
    """:func:`overall` with each measurement counted once (:func:`distinct_measurements`),
    and how many rows that leaves."""
    keep = distinct_measurements(rows)
    return {"rows": int(keep.sum()), "settings": overall(preds, meas, keep)}


def verdict(before, after) -> str:
    """Median |errors| before -> after, for a fit's summary."""
    return (f"median abs TTFT/TPOT {100 * before[0]:.1f}/{100 * before[1]:.1f} % unfitted -> "
            f"{100 * after[0]:.1f}/{100 * after[1]:.1f} %")


def before_after(before: float, after: float) -> str:
    """``"6.3 -> 6.4 %"`` for two fractions: one decimal of a percent, or as many more (up
    to three) as it takes for two different figures not to print alike."""
    for digits in (1, 2, 3):
        b, a = f"{100 * before:.{digits}f}", f"{100 * after:.{digits}f}"
        if b != a:
            break
    return f"{b} -> {a} %"


def worse_models(rows, idx, before, after) -> list[str]:
    """The models among ``rows[idx]`` whose median |error| of TTFT or TPOT is higher in
    ``after`` than in ``before`` (predictions of those rows, in order), with the figures."""
    meas = measured_means([rows[k] for k in idx])
    worse = []
    for m in sorted({rows[k].model for k in idx}):
        at = [j for j, k in enumerate(idx) if rows[k].model == m]
        b, a = (med_abs(p[at], meas[at]) for p in (before, after))
        parts = [f"{name} {before_after(b[j], a[j])}"
                 for j, name in enumerate(("TTFT", "TPOT")) if a[j] > b[j]]
        if parts:
            worse.append(f"{m}: {', '.join(parts)}")
    return worse


def err_stats(e: np.ndarray) -> dict | None:
    """Median |error| and median error (bias) of TTFT and TPOT over the rows of ``e``
    (``(n, 2)``) whose two errors are finite, or None if none is."""
    e = e[np.isfinite(e).all(axis=1)]
    if not len(e):
        return None
    return {"ttft_med_abs": float(np.median(np.abs(e[:, 0]))),
            "ttft_bias": float(np.median(e[:, 0])),
            "tpot_med_abs": float(np.median(np.abs(e[:, 1]))),
            "tpot_bias": float(np.median(e[:, 1]))}


def _grouped(keys) -> dict:
    groups = defaultdict(list)
    for k, key in enumerate(keys):
        if key is not None:
            groups[key].append(k)
    return dict(sorted(groups.items()))


def _stats_table(groups: dict, heads, meas: np.ndarray, preds: dict[str, np.ndarray]):
    """One entry per group (``heads(key)`` and its row count), with the error statistics of
    every prediction setting that has a finite one."""
    table = []
    for key, idx in groups.items():
        entry = {**heads(key), "rows": len(idx)}
        for name, p in preds.items():
            stats = err_stats(rel_err(p[idx], meas[idx]))
            if stats is not None:
                entry[name] = stats
        table.append(entry)
    return table


def group_table(rows, meas: np.ndarray, preds: dict[str, np.ndarray]) -> list[dict]:
    """Error statistics of every prediction setting per engine x model x system x mode."""
    groups = _grouped((r.engine, r.model, r.system, r.mode) for r in rows)
    fields = ("engine", "model", "system", "mode")
    heads = lambda key: dict(zip(fields, key, strict=True))  # noqa: E731
    return _stats_table(groups, heads, meas, preds)


def load_band(concurrency: int) -> str:
    """The :data:`LOAD_BANDS` label of a row's concurrency."""
    for low, high, label in LOAD_BANDS:
        if concurrency >= low and (high is None or concurrency <= high):
            return label
    raise ValueError(f"concurrency {concurrency} is below every band")


def engine_load_table(rows, meas: np.ndarray, preds: dict[str, np.ndarray]) -> list[dict]:
    """Error statistics of every prediction setting per engine x load band (bands in
    :data:`LOAD_BANDS` order)."""
    order = {label: i for i, (_, _, label) in enumerate(LOAD_BANDS)}
    groups = _grouped((r.engine, order[load_band(r.concurrency)]) for r in rows)
    heads = lambda key: {"engine": key[0], "load": LOAD_BANDS[key[1]][2]}  # noqa: E731
    return _stats_table(groups, heads, meas, preds)


def light_load_gaps(rows, meas: np.ndarray, engine_only: np.ndarray) -> list[dict]:
    """At most :data:`LIGHT_LOAD` clients, colocated: per engine x model x system x prompt
    length, the medians of the measured TTFT, of the simulated engine's without runtime
    terms (``engine_only``), and of their difference -- in ms, and in the row's own
    measured decode steps (difference / measured TPOT). A per-engine term can carry this
    time only where it is alike across the engine's models and systems."""
    keys = ((r.engine, r.model, r.system, r.isl)
            if r.mode == "agg" and r.concurrency <= LIGHT_LOAD else None for r in rows)
    table = []
    for (engine, model, system, isl), idx in _grouped(keys).items():
        m, p = meas[idx], engine_only[idx]
        ok = np.isfinite(p[:, 0])
        if not ok.any():
            continue
        gap = m[ok, 0] - p[ok, 0]
        table.append({"engine": engine, "model": model, "system": system, "isl": isl,
                      "rows": int(ok.sum()), "measured_ms": float(np.median(m[ok, 0])),
                      "engine_ms": float(np.median(p[ok, 0])),
                      "gap_ms": float(np.median(gap)),
                      "gap_steps": float(np.median(gap / m[ok, 1]))})
    return table


def osl_slopes(rows, preds) -> list[dict]:
    """TTFT change from osl 1024 to 8192 at fixed engine, model, system, agg tp, isl and
    concurrency (a repeated measurement: the last one)."""
    index = {(r.engine, r.model, r.system, r.tp, r.isl, r.concurrency, r.osl): k
             for k, r in enumerate(rows) if r.mode == "agg"}
    out = []
    for (e, m, system, tp, isl, c, osl), k in index.items():
        k2 = index.get((e, m, system, tp, isl, c, 8192))
        if osl != 1024 or k2 is None:
            continue
        row = {"engine": e, "model": m, "system": system, "tp": tp, "isl": isl,
               "concurrency": c, "measured": rows[k2].ttft_ms - rows[k].ttft_ms}
        for name, p in preds.items():
            row[name] = float(p[k2, 0] - p[k, 0])
        out.append(row)
    return out


def repeat_spread(rows, key) -> dict:
    """How far repeated measurements of one deployment and load (rows alike under ``key``,
    whatever their engine version) lie apart: each measurement date against the median of
    the group's other dates (|x / median - 1|), over groups measured on two or more dates
    -- the floor under any prediction's error. A run's copies (:func:`distinct_measurements`,
    whatever date or none they carry) count once; rows of one date count as one run (their
    median); undated rows count once per distinct measurement."""
    first = distinct_measurements(rows)
    groups = defaultdict(lambda: defaultdict(list))
    for r in (r for k, r in enumerate(rows) if first[k]):
        when = r.measured[:10] or (r.ttft_ms, r.tpot_ms)
        groups[replace(key(r), version="")][when].append((r.ttft_ms, r.tpot_ms))
    dev = []
    for by_date in groups.values():
        v = np.array([np.median(runs, axis=0) for runs in by_date.values()])
        for i in range(len(v) if len(v) > 1 else 0):
            others = np.delete(v, i, axis=0)
            dev.append(np.abs(v[i] / np.median(others, axis=0) - 1.0))
    dev = np.array(dev).reshape(-1, 2)
    if not len(dev):
        return {"measurements": 0}
    return {"measurements": len(dev), "ttft_median": float(np.median(dev[:, 0])),
            "ttft_p75": float(np.percentile(dev[:, 0], 75)),
            "tpot_median": float(np.median(dev[:, 1])),
            "tpot_p75": float(np.percentile(dev[:, 1], 75))}
