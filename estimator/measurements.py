"""Per-op GPU measurements in one long-format table, and importers that fill it.

The table is the training input of the efficiency fit and of the learned residual
correctors: one row is one measured call of one operator on one GPU. Every source
(AIConfigurator's collected database, Vidur's profiles, a user's own CSV) is converted
to this schema once, so the fitters never see a source's units or column names.

Schema
------
Identity columns (strings):

``op_family``
    What kind of op: one of :data:`OP_FAMILIES` (``gemm``, ``attention_prefill``,
    ``attention_decode``, ``moe``, ``moe_dispatch``, ``moe_combine``, ``allreduce``,
    ``allgather``, ``reduce_scatter``, ``alltoall``, ``p2p``, ``elementwise``,
    ``norm``, ``rope``, ``embedding``).
``op_name``
    The source's own label (``gemm``, ``context_attention``, ``mlp_up_proj`` ...).
``gpu``
    Our short GPU name (``h100``, ``h200``, ``b200``, ``a100-80gb``, ``l40s`` ...);
    see :func:`gpu_short_name`.
``engine``, ``engine_version``, ``engine_build``
    Framework that dispatched the kernel (``vllm``, ``trtllm``, ``sglang``, ``nccl``,
    ``oneccl``, ``vidur``), its version (for AIC: the version directory, which is how
    AIC keys its data), and the version string stored in the rows themselves, which
    can be a dev build or the older version a table was reused from.
``dtype``
    Compute / payload dtype, normalised (``bf16``, ``fp16``, ``fp8``, ``fp8_block``,
    ``nvfp4``, ``int8_sq``, ...; see :func:`normalize_dtype`).
``kv_dtype``
    KV-cache dtype (attention only; empty string elsewhere).
``kernel``, ``source``, ``moe_distribution``
    Optional: the kernel/backend the framework chose, where the row came from, and the
    MoE router token distribution label (``balanced``, ``power_law_1.2``).

Feature columns (float64, ``NaN`` where a feature does not apply):

============== ====== ===========================================================
column         unit   meaning
============== ====== ===========================================================
m, n, k        1      GEMM ``Y[m, n] = X[m, k] @ W[n, k]^T``; m = tokens
batch_size     1      sequences in the attention call
query_len      tok    new (query) tokens per sequence (prefill: prompt; decode: 1)
kv_len         tok    tokens already in the KV cache per sequence before the call
num_heads      1      query heads per GPU (after TP)
num_kv_heads   1      KV heads per GPU (after TP)
head_dim       1      head dimension
window_size    tok    sliding-window length, 0 = full attention
num_tokens     tok    tokens entering the op on this GPU (MoE, elementwise, a2a)
hidden_size    1      model hidden size (MoE, elementwise, a2a)
inter_size     1      MoE expert intermediate size (per expert, before TP)
num_experts    1      routed experts (global)
topk           1      experts per token
tp             1      tensor-parallel degree the shapes correspond to
ep             1      expert-parallel degree
moe_alpha      1      router skew: power-law exponent of expert popularity,
                      0 = balanced
num_gpus       1      GPUs taking part in a collective
num_nodes      1      nodes spanned by a collective
message_bytes  B      payload per GPU of a collective (elements x dtype bytes)
latency_s      s      measured time of ONE call on one GPU (always seconds)
============== ====== ===========================================================

Which features must be present (non-NaN) for which family is in
:data:`FAMILY_FEATURES`; :func:`validate_measurements` enforces it.

Sources
-------
:func:`load_aiconfigurator` reads NVIDIA AIConfigurator's per-op parquet tables
(latency in ms per op, except ``moe_a2a`` in µs); :func:`load_vidur` reads Vidur's
``mlp.csv`` and network CSVs (ms per op, median of repeats). :func:`read_measurements`
reads a CSV/Parquet already in this schema (accepting ``latency_ms``/``latency_us``).
Details and caveats are in ``docs/measurements.md``.
"""


from __future__ import annotations

from .measurements_aic import load_aiconfigurator
from .measurements_schema import (
    AIC_SYSTEM_TO_GPU,
    FAMILY_FEATURES,
    FLOAT_COLUMNS,
    LATENCY_UNIT_COLUMNS,
    MEASUREMENT_COLUMNS,
    OP_FAMILIES,
    STRING_COLUMNS,
    ColumnSpec,
    MeasurementError,
    empty_measurements,
    gpu_short_name,
    normalize_dtype,
    read_measurements,
    validate_measurements,
)
from .measurements_vidur import load_vidur

__all__ = [
    "AIC_SYSTEM_TO_GPU",
    "FAMILY_FEATURES",
    "FLOAT_COLUMNS",
    "LATENCY_UNIT_COLUMNS",
    "MEASUREMENT_COLUMNS",
    "OP_FAMILIES",
    "STRING_COLUMNS",
    "ColumnSpec",
    "MeasurementError",
    "empty_measurements",
    "gpu_short_name",
    "load_aiconfigurator",
    "load_vidur",
    "normalize_dtype",
    "read_measurements",
    "validate_measurements",
]
