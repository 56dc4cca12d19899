"""The Argonne fixed-batch runs calibrated on their own node, leave-one-model-out.

``bench/accuracy.py`` prices a fixed batch with the engine's shipped profile. What that
leaves out is the engine's time per step outside the priced kernels, which belongs to an
engine release on a node, not to a model (vLLM's 2024 release on the Argonne H100 node:
1.8-2.1 ms more per step than priced at TP 1, 3.3-5.5 ms at TP 2-4). Each engine on each
GPU type -- one node and one engine install in these runs -- gets the step overhead and
tensor-parallel synchronisation that ``serveplan calibrate --batch-runs`` fits
(:mod:`serveplan.batch_calibrate`, whose module docstring has the model), fitted on its
other models' runs that fit the KV cache, and predicts the held-out model's runs: a node's
own calibration, checked on models the fit never saw. A model whose runs are all at tp > 1
(Llama-2-70B, Mixtral-8x7B) is predicted from the 7-8B models' runs at TP 1, 2 and 4.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from serveplan.batch_calibrate import STEP_TERMS, fit_step_terms, predict_with


def _columns(rows: pd.DataFrame) -> tuple:
    return (rows["output_len"].to_numpy(), rows["layers"].to_numpy(), rows["tp"].to_numpy(),
            float(rows["profile_step_overhead_s"].iloc[0]))


def fit_cluster(rows: pd.DataFrame) -> np.ndarray:
    """The step terms fitted to ``rows`` (one engine on one GPU type;
    :func:`serveplan.batch_calibrate.fit_step_terms`)."""
    out_len, layers, tp, step0 = _columns(rows)
    return fit_step_terms(rows["predicted_s"].to_numpy(), rows["measured_s"].to_numpy(),
                          out_len, layers, tp, step0)


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
            out_len, layers, tp, step0 = _columns(held)
            out[held.index.to_numpy()] = predict_with(held["predicted_s"].to_numpy(), out_len,
                                                      layers, tp, step0, terms)
            fits.append({"engine": engine, "gpu": gpu, "held_out": model,
                         "train_runs": len(train), **dict(zip(STEP_TERMS, map(float, terms),
                                                              strict=True))})
    return out, fits


__all__ = ["calibrated_lomo", "fit_cluster"]
