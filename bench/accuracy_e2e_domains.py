"""Held-out rows inside and outside their fold's fit domain.

Each fold fits its terms on the engine's rows of its other held-out units (each run once,
as the fits count them). The rows it holds out lie inside that fold's fit domain or outside
it (:func:`serveplan.e2e_domain.row_outside`): on a GPU, in a mode (colocated or
disaggregated), at an instance size, of a kind (dense or MoE), a size or an engine release
its training rows did not have -- the same checks a simulation makes against a shipped
profile's domain. The table compares the held-out error where the fold's terms are carried
inside their runs with where they are carried outside them, per engine.

Computed from the rows and the held-out predictions, so ``--report-only`` rebuilds it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from accuracy_e2e_breakdown import distinct_measurements, err_stats, rel_err

from serveplan.e2e_domain import domain_of, row_facts, row_outside
from serveplan.estimator.runtime import DOMAIN_ASPECTS

ASPECT_LABELS = {"gpu": "GPU", "mode": "colocated / disaggregated",
                 "instance": "GPUs an instance", "kind": "dense / MoE",
                 "size": "parameters", "version": "engine release"}
"""How the report names each aspect of :data:`DOMAIN_ASPECTS`."""


def held_out_outside(rows, units: list[str], data_dir: Path) -> list[tuple[str, ...]]:
    """For each row, the aspects in which it lies outside the fit domain of the fold that
    holds out its unit (``units[k]``: row k's held-out unit); () inside, or where its
    engine has a single unit (no fold)."""
    facts = [row_facts(r, data_dir) for r in rows]
    counted = distinct_measurements(rows)
    aspects: list[tuple[str, ...]] = [()] * len(rows)
    for engine in sorted({r.engine for r in rows}):
        idx = [k for k, r in enumerate(rows) if r.engine == engine]
        held = sorted({units[k] for k in idx})
        for unit in held if len(held) > 1 else ():
            domain = domain_of([facts[k] for k in idx if units[k] != unit and counted[k]])
            for k in idx:
                if units[k] == unit:
                    aspects[k] = tuple(row_outside(domain, facts[k]))
    return aspects


def fold_domain_table(rows, meas: np.ndarray, held_out: np.ndarray,
                      aspects: list[tuple[str, ...]]) -> list[dict]:
    """Per engine: the held-out error (``held_out``, ms) on the rows inside their fold's
    domain, on those outside it in any aspect, and on those outside in each aspect (a row
    outside in two counts under both); then the same over every engine's rows (``all``)."""
    out = []
    for engine in [*sorted({r.engine for r in rows}), "all"]:
        idx = [k for k, r in enumerate(rows) if engine in (r.engine, "all")]
        groups = {"inside": [k for k in idx if not aspects[k]],
                  "outside, any aspect": [k for k in idx if aspects[k]]}
        groups.update({f"outside: {ASPECT_LABELS[a]}": [k for k in idx if a in aspects[k]]
                       for a in DOMAIN_ASPECTS})
        for name, sel in groups.items():
            stats = err_stats(rel_err(held_out[sel], meas[sel])) if sel else None
            if stats is not None:
                out.append({"engine": engine, "rows": name, "n": len(sel), **stats})
    return out


def fold_domain_section(table: list[dict]) -> str:
    """The report's section on :func:`fold_domain_table` (none without a table)."""
    if not table:
        return ""
    lines = ["| engine | held-out rows | rows | TTFT med abs % | TTFT bias % | TPOT med abs % "
             "| TPOT bias % |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {t['engine']} | {t['rows']} | {t['n']} | {100 * t['ttft_med_abs']:.1f} | "
              f"{100 * t['ttft_bias']:+.1f} | {100 * t['tpot_med_abs']:.1f} | "
              f"{100 * t['tpot_bias']:+.1f} |" for t in table]
    return f"""## Held out inside and outside the fold's fit domain

Setting (c). Each fold's terms come from the engine's other models' rows; a held-out row
lies outside that fold's fit domain where its GPU, its mode (colocated or disaggregated),
an instance's GPUs, its model's kind (dense or MoE) or size, or its engine release is not
among the training rows' (`serveplan.e2e_domain.row_outside`, the checks a simulation
makes against a shipped profile's domain, which covers every model). A row outside in two
aspects counts under both.

{chr(10).join(lines)}
"""
