"""Fit an engine's runtime terms to a user's own benchmark runs (``calibrate --runs``).

Each run (a file :mod:`serveplan.runs` reads) is paired with the deployment that produced
it. The prediction of a run under candidate terms is its replay
(:func:`serveplan.run_compare.replay`) with those terms; its figures are the medians of
TTFT and TPOT over the successful requests, the same as the measured side. The fit is
:func:`serveplan.estimator.runtime_fit.fit_terms` (robust; first-order solves with the
simulator in the loop, within bounds; terms the runs cannot identify are refused with the
runs that would identify them).

Validation is leave-one-run-out: each run is predicted by terms fitted on the others, and
its error before (the engine's shipped terms) and after is reported. With a single run
there is nothing to hold out; the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serveplan.deployments import instance_gpus
from serveplan.e2e import with_terms
from serveplan.estimator.runtime import FitDomain, RuntimeTerms, load_runtime_profile
from serveplan.estimator.runtime_fit import FIT_TERMS, FitResult, fit_terms
from serveplan.run_compare import latency_stats, measured_latencies, replay, simulated_latencies
from serveplan.runs.model import BenchRun
from serveplan.user_input import UserError


@dataclass(frozen=True)
class RunCase:
    """One run and the resolved deployment that produced it."""

    run: BenchRun
    resolved: object

    @property
    def engine(self) -> str | None:
        rts = {p.instance.runtime.engine for p in self.resolved.pools if p.instance.runtime}
        return rts.pop() if len(rts) == 1 else None

    @property
    def tp(self) -> int:
        return max(p.config.tp for p in self.resolved.pools)

    @property
    def label(self) -> str:
        return self.run.name


def _medians(stats: dict) -> np.ndarray:
    """Median TTFT and TPOT (s) from ``latency_stats``-style keys."""
    return np.array([stats["p50_ttft_s"], stats["p50_tpot_s"]], dtype=float)


def measured_medians(case: RunCase) -> np.ndarray:
    """Median TTFT and TPOT (s) of the run as measured (its summary without records)."""
    run = case.run
    stats = latency_stats(measured_latencies(run)) if run.has_requests else run.summary
    try:
        out = _medians(stats)
    except KeyError as exc:
        raise UserError(f"{run.path}: no median {str(exc.args[0])[4:8].upper()} in the file "
                        "(and no per-request records to compute it)") from None
    if not (np.isfinite(out).all() and (out > 0).all()):
        raise UserError(f"{run.path}: median TTFT / TPOT not positive ({out[0]!r}, {out[1]!r} "
                        "s): no successful multi-token requests to fit to")
    return out


def predicted_medians(case: RunCase, terms: RuntimeTerms, seed: int = 0) -> np.ndarray:
    """Median TTFT and TPOT (s) of the run replayed with ``terms``."""
    ds = replay(case.run, with_terms(case.resolved, terms), seed)
    lat, _ = simulated_latencies(ds, from_first_send=case.run.send_s is not None)
    return _medians(latency_stats(lat))


def _engine(cases: list[RunCase]) -> str:
    engines = {c.engine for c in cases}
    if None in engines or len(engines) != 1:
        raise UserError("--engine: every run's deployment must name the same engine (vllm, "
                        "sglang or trtllm): the terms fitted are that engine's runtime")
    return engines.pop()


def fit_runs(cases: list[RunCase], base: RuntimeTerms, names=FIT_TERMS,
             max_evals: int = 40, seed: int = 0) -> FitResult:
    """Terms fitted to ``cases`` (medians of TTFT and TPOT of each run)."""
    measured = np.array([measured_medians(c) for c in cases])

    def predict(terms: RuntimeTerms) -> np.ndarray:
        return np.array([predicted_medians(c, terms, seed) for c in cases])

    tp = np.array([c.tp for c in cases])
    disaggregated = np.array([c.resolved.disaggregated for c in cases])
    return fit_terms(predict, measured, tp, base=base, names=names, max_evals=max_evals,
                     disaggregated=disaggregated)


@dataclass(frozen=True)
class Validation:
    """Leave-one-run-out errors (|pred / meas - 1| of median TTFT, TPOT) per run."""

    labels: tuple[str, ...]
    before: np.ndarray  # (n, 2): the engine's shipped terms
    after: np.ndarray  # (n, 2): terms fitted without the run (NaN: not held out)

    def rows(self) -> list[dict]:
        return [{"run": lab, "ttft_err_before": float(b[0]), "tpot_err_before": float(b[1]),
                 "ttft_err_after": _num(a[0]), "tpot_err_after": _num(a[1])}
                for lab, b, a in zip(self.labels, self.before, self.after, strict=True)]


def _num(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def leave_one_run_out(cases: list[RunCase], base: RuntimeTerms, names=FIT_TERMS,
                      max_evals: int = 40, seed: int = 0) -> Validation:
    """Each run predicted with terms fitted on the other runs (module docstring)."""
    n = len(cases)
    before = np.array([np.abs(predicted_medians(c, base, seed) / measured_medians(c) - 1.0)
                       for c in cases])
    after = np.full((n, 2), np.nan)
    if n > 1:
        for i, case in enumerate(cases):
            rest = cases[:i] + cases[i + 1:]
            terms = fit_runs(rest, base, names, max_evals, seed).terms
            after[i] = np.abs(predicted_medians(case, terms, seed) / measured_medians(case) - 1)
    return Validation(tuple(c.label for c in cases), before, after)


def runs_domain(cases: list[RunCase]) -> FitDomain:
    """The runs' GPUs, models, instance sizes and modes (colocated, disaggregated) as the
    calibrated profile's fit domain (no release range: a run's deployment need not name its
    engine version)."""
    instances = [p.instance for c in cases for p in c.resolved.pools]
    oracles = [i.oracle for i in instances]
    return FitDomain.of(f"{len(cases)} benchmark run(s) given to serveplan calibrate --runs",
                        {o.gpu.name for o in oracles}, {o.model.name: o.model for o in oracles},
                        instance_gpus=[instance_gpus(i.deployment) for i in instances],
                        disaggregated=[c.resolved.disaggregated for c in cases])


def profile_json(cases: list[RunCase], fit: FitResult, validation: Validation) -> str:
    """The engine's runtime profile with the fitted terms (``runtime_profile:`` /
    ``--runtime-profile`` load it)."""
    engine = _engine(cases)
    shipped = load_runtime_profile(engine)
    provenance = {"command": "serveplan calibrate --runs",
                  "runs": [str(c.run.path) for c in cases], "fit": fit.summary(),
                  "leave_one_run_out": validation.rows(),
                  "versions_from": f"the shipped {engine} profile"}
    return shipped.fitted_json(fit.terms, provenance, runs_domain(cases))


def calibrate_runs(cases: list[RunCase], out: Path, *, names=FIT_TERMS,
                   max_evals: int = 40, seed: int = 0) -> tuple[FitResult, Validation]:
    """Fit, validate, write ``out``; the fit and the validation."""
    if not cases:
        raise UserError("--runs: give at least one benchmark result")
    _engine(cases)
    base = next(p.instance.runtime.terms for p in cases[0].resolved.pools
                if p.instance.runtime is not None)
    fit = fit_runs(cases, base, names, max_evals, seed)
    validation = leave_one_run_out(cases, base, names, max_evals, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile_json(cases, fit, validation))
    return fit, validation


__all__ = ["RunCase", "Validation", "calibrate_runs", "fit_runs", "leave_one_run_out",
           "measured_medians", "predicted_medians", "profile_json"]
