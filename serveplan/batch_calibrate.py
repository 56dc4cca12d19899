"""A node's step terms from fixed-batch latency runs (``calibrate --batch-runs``).

A fixed batch -- ``batch_size`` prompts of ``input_len`` tokens each generating exactly
``output_len`` tokens, as ``vllm bench latency`` runs it -- takes one prefill step and
``output_len - 1`` decode steps. The cost oracle prices their GPU work; what a node and an
engine release add per step beyond it (the sampler, input preparation, the workers' step
broadcast, the collectives' launches) is two runtime terms
(:class:`~serveplan.estimator.runtime.RuntimeTerms`), and both move the batch's latency
linearly::

    latency = oracle's batch + steps x (step_overhead_s - the GPU profile's)
                             + steps x layers x [tp > 1] x tp_sync_per_layer_s

with ``steps = output_len``. :func:`fit_step_terms` fits them with the robust loss of the
end-to-end fits (:func:`~serveplan.estimator.runtime_fit.fit_first_order`); the
synchronisation only from runs at tp 1 and tp > 1 both. On the Argonne runs a node's
terms fitted on some models predict another's batches within 2 % in the median at TP > 1
(``bench/results/accuracy.md``). A batch is priced with all its prompts in one prefill
step; an engine whose token budget is smaller prefills it in chunks, a few more steps than
this counts. A batch that does not fit the KV cache the engine would allocate is refused:
the engine would preempt or serialise it, which a fixed-batch sum cannot price.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from serveplan.estimator.runtime import ENGINE_NAMES, FitDomain, load_runtime_profile
from serveplan.estimator.runtime_fit import TERM_SCALES, fit_first_order, identifiable
from serveplan.estimator.validation import file_problems
from serveplan.user_input import UserError, yaml_mapping

STEP_TERMS = ("step_overhead_s", "tp_sync_per_layer_s")
MAX_BATCH = 1 << 16


class BatchRun(BaseModel):
    """One fixed-batch run: its measured latency (a ``vllm bench latency --output-json``
    file, or seconds) and what ran."""

    model_config = ConfigDict(extra="forbid")

    latency: Path | None = None
    latency_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    model: str
    tp: int = Field(1, ge=1, le=1024)
    batch_size: int = Field(ge=1, le=MAX_BATCH)
    input_len: int = Field(ge=1, le=1 << 20)
    output_len: int = Field(ge=1, le=1 << 20)
    dtype: str | None = None
    kv_dtype: str | None = None

    @model_validator(mode="after")
    def _one_latency(self):
        if (self.latency is None) == (self.latency_s is None):
            raise ValueError("give latency (a vllm bench latency JSON file) or latency_s "
                             "(seconds), one of them")
        return self


class BatchManifest(BaseModel):
    """The runs of one node (GPU type) and engine."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    engine: Literal[ENGINE_NAMES] = "vllm"  # type: ignore[valid-type]
    profile: str | None = None
    runs: list[BatchRun] = Field(min_length=1)


def read_manifest(path: Path) -> BatchManifest:
    """The manifest at ``path``; its problems as one error naming field, file and line."""
    data = yaml_mapping(path, "a YAML manifest of fixed-batch runs")
    try:
        return BatchManifest.model_validate(data)
    except ValidationError as exc:
        raise UserError(file_problems(exc, path, root="manifest")) from None


def read_latency_json(path: Path) -> float:
    """The median of a ``vllm bench latency --output-json`` file's ``latencies`` (its
    ``avg_latency`` if it lists none), in seconds."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: cannot read the latency file ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a vllm bench latency JSON file ({exc})") from None
    values = data.get("latencies") if isinstance(data, dict) else None
    if not values and isinstance(data, dict):
        values = [data.get("avg_latency")]
    ok = isinstance(values, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in values)
    if not ok:
        raise UserError(f"{path}: latencies (or avg_latency): expected seconds > 0, as "
                        "vllm bench latency --output-json writes them")
    return float(np.median(values))


def batch_latency(oracle, batch: int, input_len: int, output_len: int) -> float:
    """One prefill step of the whole batch, then ``output_len - 1`` decode steps."""
    t = float(oracle.prefill_time(batch, input_len))
    if output_len > 1:
        ctx = input_len + np.arange(output_len - 1)
        t += float(np.sum(oracle.decode_time(np.full(output_len - 1, batch), ctx)))
    return t


def latency_slopes(output_len, layers, tp) -> np.ndarray:
    """Seconds of each run's latency per second of each of :data:`STEP_TERMS`, ``(n, 2)``."""
    steps = np.asarray(output_len, float)
    return np.stack([steps, steps * np.asarray(layers, float) * (np.asarray(tp) > 1)], axis=-1)


def fit_step_terms(predicted, measured, output_len, layers, tp,
                   profile_step_overhead_s: float) -> np.ndarray:
    """:data:`STEP_TERMS` fitted to runs of one node, from the profile's step overhead and
    no synchronisation, within :data:`~serveplan.estimator.runtime_fit.TERM_SCALES`' bounds;
    the synchronisation stays 0 unless the runs are at tp 1 and tp > 1 both."""
    x = np.array([profile_step_overhead_s, 0.0])
    names, _ = identifiable(STEP_TERMS, np.asarray(tp))
    cols = [STEP_TERMS.index(name) for name in names]
    jac = latency_slopes(output_len, layers, tp)[:, None, cols]  # one figure per run
    upper = np.array([TERM_SCALES[name][1] for name in names])
    x[cols] = fit_first_order(np.asarray(predicted, float)[:, None], jac,
                              np.asarray(measured, float)[:, None], x[cols], upper)
    return x


def predict_with(predicted, output_len, layers, tp, profile_step_overhead_s,
                 terms: np.ndarray) -> np.ndarray:
    """Each run's latency with :data:`STEP_TERMS` at ``terms``."""
    shift = np.asarray(terms, float) - np.array([profile_step_overhead_s, 0.0])
    return np.asarray(predicted, float) + latency_slopes(output_len, layers, tp) @ shift


@dataclass(frozen=True)
class PricedRuns:
    """The runs of a manifest as the oracle prices them (one entry per run)."""

    labels: list[str]
    models: list[str]
    tp: np.ndarray
    layers: np.ndarray
    output_len: np.ndarray
    predicted_s: np.ndarray  # the oracle's batch latency (the GPU profile's step overhead)
    measured_s: np.ndarray
    profile_step_overhead_s: float
    domain: FitDomain

    def fit(self, keep: np.ndarray | None = None) -> np.ndarray:
        """:data:`STEP_TERMS` fitted to the runs ``keep`` (a boolean mask; default all)."""
        k = np.ones(len(self.labels), bool) if keep is None else keep
        return fit_step_terms(self.predicted_s[k], self.measured_s[k], self.output_len[k],
                              self.layers[k], self.tp[k], self.profile_step_overhead_s)

    def predict(self, terms: np.ndarray) -> np.ndarray:
        return predict_with(self.predicted_s, self.output_len, self.layers, self.tp,
                            self.profile_step_overhead_s, terms)


def _price(run: BatchRun, i: int, manifest: BatchManifest, path: Path, profile):
    """``(oracle, predicted seconds)`` of run ``i``, or one error naming it."""
    from serveplan.estimator.engine_memory import plan_engine_memory
    from serveplan.estimator.oracle import CostOracle
    from serveplan.estimator.specs import Parallelism, SpecError

    where = f"{path}: runs[{i}]"
    tokens = run.batch_size * (run.input_len + run.output_len)
    try:
        oracle = CostOracle(run.model, manifest.gpu, tp=run.tp, dtype=run.dtype,
                            kv_dtype=run.kv_dtype, profile=profile,
                            max_num_seqs=max(256, run.batch_size))
        plan = plan_engine_memory(manifest.engine, run.model, manifest.gpu,
                                  Parallelism(tp=run.tp), dtype=run.dtype,
                                  kv_dtype=run.kv_dtype, profile=profile,
                                  max_model_len=run.input_len + run.output_len)
    except (SpecError, ValueError, KeyError) as exc:
        raise UserError(f"{where}: {str(exc).strip(chr(39))}") from None
    if not plan.fits:
        raise UserError(f"{where}: {plan.reason}")
    if tokens > plan.kv_tokens:
        raise UserError(f"{where}: the batch holds {tokens:,} tokens and {manifest.engine}'s "
                        f"KV cache {plan.kv_tokens:,}: the engine would preempt or serialise "
                        "it, which a fixed-batch sum cannot price; leave the run out")
    return oracle, batch_latency(oracle, run.batch_size, run.input_len, run.output_len)


def price_runs(path: Path, manifest: BatchManifest) -> PricedRuns:
    """Each run of ``manifest`` (read from ``path``) with its latency read and priced by
    the oracle."""
    from serveplan.estimator.catalog import resolve_gpu
    from serveplan.estimator.profile import load_profile
    from serveplan.estimator.specs import SpecError

    profile_ref = manifest.profile
    if profile_ref is not None and (path.parent / profile_ref).exists():
        profile_ref = str(path.parent / profile_ref)
    try:
        resolve_gpu(manifest.gpu)
    except (SpecError, KeyError, ValueError) as exc:
        raise UserError(f"{path}: gpu: {str(exc).strip(chr(39))}") from None
    try:
        profile = load_profile(manifest.gpu, profile_ref)
    except (SpecError, ValueError, OSError) as exc:
        raise UserError(f"{path}: profile: {exc}") from None
    labels, models, oracles, cols = [], [], [], []
    for i, run in enumerate(manifest.runs):
        measured = (run.latency_s if run.latency is None
                    else read_latency_json(path.parent / run.latency))
        oracle, predicted = _price(run, i, manifest, path, profile)
        labels.append(str(run.latency) if run.latency is not None else f"runs[{i}]")
        models.append(oracle.model.name)
        oracles.append(oracle)
        cols.append((run.tp, oracle.model.num_layers, run.output_len, predicted, measured))
    tp, layers, out_len, pred, meas = (np.array(c) for c in zip(*cols, strict=True))
    domain = FitDomain.of(f"{len(labels)} fixed-batch run(s) given to serveplan calibrate "
                          "--batch-runs", {oracles[0].gpu.name},
                          {o.model.name: o.model for o in oracles},
                          instance_gpus=[int(t) for t in tp], disaggregated=[False] * len(tp))
    return PricedRuns(labels, models, tp.astype(int), layers.astype(int), out_len.astype(int),
                      pred.astype(float), meas.astype(float), profile.step_overhead_s, domain)


def held_out(runs: PricedRuns) -> tuple[np.ndarray, str]:
    """Each run's latency predicted by terms fitted without it: without its model's runs
    when the runs cover two models or more, else without the run itself (NaN for a lone
    run); and how."""
    groups = runs.models if len(set(runs.models)) > 1 else runs.labels
    how = "model" if groups is runs.models else "run"
    out = np.full(len(groups), np.nan)
    if len(groups) < 2:
        return out, how
    for g in sorted(set(groups)):
        mine = np.array([x == g for x in groups])
        out[mine] = runs.predict(runs.fit(~mine))[mine]
    return out, how


def calibrate_batches(path: Path, out: Path) -> dict:
    """Fit the step terms to the manifest at ``path``, validate them held out, write the
    engine's runtime profile with them to ``out``; the report."""
    manifest = read_manifest(path)
    runs = price_runs(path, manifest)
    terms = runs.fit()
    held, how = held_out(runs)
    _, skipped = identifiable(STEP_TERMS, runs.tp)
    notes = [f"{name} not fitted: it {why}" for name, why in skipped.items()]
    notes += [f"{name} is at its bound ({TERM_SCALES[name][1] * 1e3:g} ms): the runs ask for "
              "more time per step than the term may carry; check each run's batch size, "
              "lengths, model and tp" for name, value in zip(STEP_TERMS, terms, strict=True)
              if value >= TERM_SCALES[name][1] * (1 - 1e-6)]
    rel = lambda pred: pred / runs.measured_s - 1.0  # noqa: E731
    report = {"out": str(out), "engine": manifest.engine, "gpu": manifest.gpu,
              "terms": dict(zip(STEP_TERMS, map(float, terms), strict=True)),
              "profile_step_overhead_s": runs.profile_step_overhead_s,
              "held_out_by": how, "notes": notes,
              "runs": [{"run": lab, "model": m, "tp": int(t), "measured_s": float(ms),
                        "err_before": float(b), "err_fitted": float(f),
                        "err_held_out": None if not np.isfinite(h) else float(h)}
                       for lab, m, t, ms, b, f, h in zip(
                           runs.labels, runs.models, runs.tp, runs.measured_s,
                           rel(runs.predicted_s), rel(runs.predict(terms)), rel(held),
                           strict=True)]}
    shipped = load_runtime_profile(manifest.engine)
    provenance = {"command": "serveplan calibrate --batch-runs", "manifest": str(path),
                  "fit": report, "versions_from": f"the shipped {manifest.engine} profile",
                  "other_terms_from": shipped.provenance}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(shipped.fitted_json(shipped.terms.model_copy(update=report["terms"]),
                                       provenance, runs.domain))
    return report


__all__ = ["MAX_BATCH", "STEP_TERMS", "BatchManifest", "BatchRun", "PricedRuns",
           "batch_latency", "calibrate_batches", "fit_step_terms", "held_out",
           "latency_slopes", "predict_with", "price_runs", "read_latency_json",
           "read_manifest"]
