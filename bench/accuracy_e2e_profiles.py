"""The shipped runtime profiles as ``bench/accuracy_e2e.py --write-profiles`` writes them:
each engine's fitted terms, their provenance and the runs they were fitted on."""

from __future__ import annotations

import json
from pathlib import Path

from accuracy_e2e_breakdown import distinct_measurements

from serveplan.e2e_domain import fit_domain
from serveplan.estimator.runtime import RuntimeTerms, load_runtime_profile

PROFILES = Path(__file__).resolve().parent.parent / "estimator" / "data" / "runtime"


def fit_domains(rows, data_dir) -> dict:
    """Each engine's fit domain (:func:`serveplan.e2e_domain.fit_domain`): its rows as the
    fits count them, each run once."""
    counted = [r for r, keep in zip(rows, distinct_measurements(rows), strict=True) if keep]
    return {e: fit_domain([r for r in counted if r.engine == e], data_dir)
            for e in sorted({r.engine for r in counted})}


def write_profiles(full: dict, stamp: str, rows, data_dir) -> None:
    """Each engine's fitted terms, provenance and fit domain (:func:`fit_domains`) into its
    shipped runtime profile."""
    domains = fit_domains(rows, data_dir)
    for engine, info in full.items():
        path = PROFILES / f"{engine}.json"
        prof = json.loads(path.read_text())
        prof.pop("domain", None)
        if info.get("fitted"):
            prof["domain"] = domains[engine].model_dump(mode="json")
            prof["terms"] = RuntimeTerms.model_validate(info["terms"]).model_dump()
            prof["provenance"] = {
                "terms": "fitted by bench/accuracy_e2e.py (serveplan.estimator.runtime_fit) on "
                         "the expressible rows of e2e/aic_silicon_blackwell for this engine "
                         "(a run exported more than once counted once), each simulated "
                         "on its GPU as the catalog has it (B300 at its measured "
                         "lender_speed), validated leave-one-model-out with that speed "
                         "held out too (bench/results/accuracy_e2e.md)",
                "date": stamp, "median_abs_err_before": info["median_abs_err_before"],
                "median_abs_err_held_out": info["median_abs_err_held_out"],
                "held_out_models_worse": info["held_out_worse"],
                "term_set": info.get("term_set")}
        else:
            prof["terms"] = {}
            prof["provenance"] = {"terms": f"not fitted: {info['reason']}", "date": stamp}
        path.write_text(json.dumps(prof, indent=2) + "\n")
        load_runtime_profile(engine)  # still valid
