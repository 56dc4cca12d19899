"""Which measurement rows each calibration fit uses (constants fit and corrector tables).

Part of :mod:`serveplan.estimator.calibrate`, which re-exports the public names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .opwork import COMM_FAMILIES
from .routing import TRAFFIC_DISTRIBUTION

__all__ = ["DEFAULT_MOE_DISTRIBUTION", "MIN_ROWS", "ORACLE_DTYPE", "POWER_LAW_MOE_DISTRIBUTION",
           "oracle_dtype", "select_training_rows"]

#: Router distribution the MoE constants and the ``moe:<dtype>`` correctors are fitted on:
#: uniform, like the roofline's routing model (``ops.moe_routing``).
DEFAULT_MOE_DISTRIBUTION = TRAFFIC_DISTRIBUTION["balanced"]
#: The skewed router distribution of the ``moe:<dtype>:power_law_1.01`` correctors
#: (:data:`~.routing.TRAFFIC_DISTRIBUTION`): AIConfigurator's power law of exponent 1.01, the
#: distribution its own estimator prices served MoE traffic with. Under expert parallelism
#: AIC times the busiest rank (its generator swaps the most loaded rank into rank 0).
POWER_LAW_MOE_DISTRIBUTION = TRAFFIC_DISTRIBUTION["power_law"]
MIN_ROWS = 20  # fewest rows a family (or corrector table) is fitted on


#: Measured dtype labels -> the format name the oracle looks corrector tables up by
#: (:func:`~.quantization.corrector_dtype`): fp16 counts as bf16, AIConfigurator's
#: weight-only int4 is the oracle's ``int4``.
ORACLE_DTYPE = {"fp16": "bf16", "int4_wo": "int4"}


def oracle_dtype(dtype: pd.Series) -> np.ndarray:
    """Each row's dtype as the oracle's corrector tables are keyed (:data:`ORACLE_DTYPE`)."""
    d = dtype.astype(str).to_numpy()
    out = d.astype(object)  # object: a key may be longer than every label
    for measured, key in ORACLE_DTYPE.items():
        out[d == measured] = key
    return out


def _main_kernel(df: pd.DataFrame) -> pd.Series:
    """Whether each row ran its (family, dtype) group's most frequent kernel.

    Frameworks dispatch several kernels for one op (FA3 and Triton attention in SGLang,
    Triton and CUTLASS MoE in vLLM); the one measured most often is the default path. MoE
    groups are per parallel layout too (tp, ep): vLLM picks the block-fp8 MoE kernel by
    it (Triton for TP-sharded experts, FlashInfer CUTLASS under expert parallelism).
    """
    if "kernel" not in df.columns or not len(df):
        return pd.Series(True, index=df.index)
    key = df["op_family"].astype(str) + "|" + df["dtype"].astype(str)
    if {"tp", "ep"} <= set(df.columns):
        layout = "|" + df["tp"].astype(str) + "|" + df["ep"].astype(str)
        key = key.where(df["op_family"].astype(str) != "moe", key + layout)
    kern = df["kernel"].astype(str)
    top = kern.groupby(key).agg(lambda s: s.value_counts().index[0])
    return kern == key.map(top)


def select_training_rows(df: pd.DataFrame, family: str, **select: str) -> np.ndarray:
    """Boolean mask of the rows a family fit (or one corrector table) uses.

    ``select`` keys: ``dtype`` (GEMM / MoE weights, as :func:`oracle_dtype`), ``kv_dtype``
    (attention), ``phase`` (collectives: ``prefill`` eager / ``decode`` graph runs),
    ``distribution`` (MoE router: :data:`DEFAULT_MOE_DISTRIBUTION` unless given, when
    present). Attention uses full-attention rows (no sliding window); all-reduce the
    framework's own kernel where measured, else NCCL.
    """
    fam = df["op_family"].astype(str).to_numpy()
    mask = fam == family
    if family not in COMM_FAMILIES:  # collectives: graph and eager runs are both wanted
        mask &= _main_kernel(df).to_numpy()
    if "dtype" in select:
        mask &= oracle_dtype(df["dtype"]) == select["dtype"]
    if family.startswith("attention"):
        window = pd.to_numeric(df.get("window_size"), errors="coerce")
        mask &= np.nan_to_num(np.asarray(window, dtype=float)) == 0
        if "kv_dtype" in select:
            kv = oracle_dtype(df["kv_dtype"].astype(str).replace("", "bf16"))
            mask &= kv == select["kv_dtype"]
    if family == "moe":
        dist = df["moe_distribution"].astype(str).to_numpy()
        wanted = select.get("distribution", DEFAULT_MOE_DISTRIBUTION)
        if wanted != DEFAULT_MOE_DISTRIBUTION or (mask & (dist == wanted)).any():
            mask &= dist == wanted
    if family in COMM_FAMILIES:
        library = np.isin(df["engine"].astype(str).to_numpy(), ("nccl", "oneccl"))
        own = mask & ~library
        if own.any():  # the framework's own kernel (custom all-reduce)
            mask = own
            if "phase" in select:
                graph = df["kernel"].astype(str).str.endswith("_graph").to_numpy()
                mask &= graph == (select["phase"] == "decode")
        else:
            mask &= library
            half = df["dtype"].astype(str).to_numpy() == "fp16"
            if (mask & half).any():
                mask &= half
    return mask
