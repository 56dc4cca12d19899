"""The Argonne fixed-batch runs calibrated on their own cluster, leave-one-model-out.

``bench/accuracy.py`` prices a fixed batch as one prefill step and ``output_len - 1`` decode
steps of the GPU, with the engine's shipped profile. What that sum leaves out is the
engine's time per step outside the priced kernels, which belongs to an engine release on a
node, not to a model: vLLM's 2024 release on the Argonne H100 node spends 1.8-2.1 ms more
per step than priced at TP 1 and 3.3-5.5 ms at TP 2-4. Two runtime terms
(:class:`~serveplan.estimator.runtime.RuntimeTerms`) carry such time, and both move a
batch's latency linearly:

    latency = GPU-step sum + steps x (step_overhead_s - the profile's)
                           + steps x layers x [tp > 1] x tp_sync_per_layer_s

(``steps`` = the output length: one prefill and ``output_len - 1`` decode steps;
``step_overhead_s`` replaces the GPU profile's time per step outside the forward pass,
``tp_sync_per_layer_s`` is charged per layer and step at tp > 1, as the simulator charges
them). Each engine on each GPU type -- one node and one engine install in these runs -- is
fitted with :func:`~serveplan.estimator.runtime_fit.fit_first_order` (the robust loss the
end-to-end fits use) on its other models' runs that fit the KV cache, and predicts the
held-out model's runs: what a user does with ``serveplan calibrate --runs`` on the cluster
they own, checked on models the fit never saw. A model whose runs are all at tp > 1
(Llama-2-70B, Mixtral-8x7B) is predicted from the 7-8B models' runs at TP 1, 2 and 4.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from serveplan.estimator.runtime_fit import TERM_SCALES, fit_first_order, identifiable

TERMS = ("step_overhead_s", "tp_sync_per_layer_s")


def latency_slopes(rows: pd.DataFrame) -> np.ndarray:
    """Seconds of each run's batch latency per second of each of :data:`TERMS`, ``(n, 2)``."""
    steps = rows["output_len"].to_numpy(float)
    sync = steps * rows["layers"].to_numpy(float) * (rows["tp"].to_numpy() > 1)
    return np.stack([steps, sync], axis=-1)


def fit_cluster(rows: pd.DataFrame) -> np.ndarray:
    """:data:`TERMS` fitted to ``rows`` (one engine on one GPU type), from the profile's
    step overhead and no synchronisation, within the bounds of :data:`~serveplan.estimator.runtime_fit.TERM_SCALES`; the
    synchronisation stays 0 unless the runs are at tp 1 and tp > 1 both
    (:func:`~serveplan.estimator.runtime_fit.identifiable`)."""
    x = np.array([rows["profile_step_overhead_s"].iloc[0], 0.0])
    names, _ = identifiable(TERMS, rows["tp"].to_numpy())
    cols = [TERMS.index(name) for name in names]
    jac = latency_slopes(rows)[:, None, cols]  # one measured figure per run
    upper = np.array([TERM_SCALES[name][1] for name in names])
    x[cols] = fit_first_order(rows["predicted_s"].to_numpy(float)[:, None], jac,
                              rows["measured_s"].to_numpy(float)[:, None], x[cols], upper)
    return x


def predict_with(rows: pd.DataFrame, terms: np.ndarray) -> np.ndarray:
    """Each run's batch latency with :data:`TERMS` at ``terms``."""
    shift = terms - np.stack([rows["profile_step_overhead_s"].to_numpy(float),
                              np.zeros(len(rows))], axis=-1)
    return rows["predicted_s"].to_numpy(float) + np.sum(latency_slopes(rows) * shift, axis=1)


def calibrated_lomo(res: pd.DataFrame) -> tuple[np.ndarray, list[dict]]:
    """Each run's latency predicted with the terms fitted on its engine and GPU's other
    models' runs that fit the KV cache (NaN where there are none), and those fits."""
    out = np.full(len(res), np.nan)
    fits = []
    for (engine, gpu), cluster in res.groupby(["engine", "gpu"]):
        for model in sorted(cluster["model"].unique()):
            train = cluster[(cluster["model"] != model) & cluster["fits_kv"]]
            if train.empty:
                continue
            terms = fit_cluster(train)
            held = cluster[cluster["model"] == model]
            out[held.index.to_numpy()] = predict_with(held, terms)
            fits.append({"engine": engine, "gpu": gpu, "held_out": model,
                         "train_runs": len(train), **dict(zip(TERMS, map(float, terms),
                                                              strict=True))})
    return out, fits


__all__ = ["TERMS", "calibrated_lomo", "fit_cluster", "latency_slopes", "predict_with"]
