"""Roofline inputs of single measured ops, costed exactly as the op tables cost them.

A measurement row (a GEMM, an attention call, a fused-MoE layer, a collective; see
:mod:`serveplan.estimator.measurements`) becomes the work ``W`` (FLOP), traffic ``Q``
(bytes) and kernel count the cost oracle would charge for the same op, through the
coefficient helpers of :mod:`serveplan.estimator.ops` (:func:`~.ops.gemm_coeffs`,
:func:`~.ops.gqa_attention_coeffs`, :func:`~.ops.moe_coeffs`, :func:`~.ops.moe_routing`)
and the kernels' own attention pair/KV-read count. :func:`op_times` then prices the
rows with a profile's constants by the formulas of
:func:`serveplan.kernels.roofline.module_times`, and :func:`corrector_features` gives
the log2 features the residual correctors see (:data:`~.correctors.FAMILY_AXES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from serveplan.kernels import roofline as K

from .correctors import FAMILY_AXES, FAMILY_FEATURES
from .ops import MOE_KERNELS, gemm_coeffs, gqa_attention_coeffs, moe_coeffs, moe_routing
from .profile import FAMILIES, Profile
from .quantization import TensorFormat
from .specs import DTYPE_BYTES, STEP_PHASES, GPUSpec

__all__ = [
    "COMPUTE_FAMILIES",
    "COMM_FAMILIES",
    "OpWork",
    "WEIGHT_DTYPES",
    "corrector_features",
    "op_times",
    "op_work",
    "phase_of",
]

#: Measurement families priced by the roofline (op_family -> oracle efficiency family).
COMPUTE_FAMILIES = {"gemm": "gemm", "attention_prefill": "attention",
                    "attention_decode": "attention", "moe": "moe"}
#: Collective families the oracle prices (all-reduce, all-to-all).
COMM_FAMILIES = ("allreduce", "alltoall")
#: Weight dtypes the oracle can cost -> (bytes per weight, peak FLOP/s key).
#: NVFP4 weights take their format's bytes (fp8 scales per 16 included) and run on the fp4
#: tensor cores, as the oracle prices them (:mod:`.quantization`); AIConfigurator's
#: ``int4_wo`` (int4 weights, 16-bit activations) takes int4's bytes (fp16 scale per 128)
#: at the 16-bit peak, as the oracle prices w4a16.
WEIGHT_DTYPES = {"bf16": (2.0, "bf16"), "fp16": (2.0, "fp16"), "fp8": (1.0, "fp8"),
                 "fp8_block": (1.0, "fp8"),
                 "nvfp4": (TensorFormat(kind="nvfp4").bytes_per_element, "fp4"),
                 "int4_wo": (TensorFormat(kind="int4").bytes_per_element, "bf16")}
ACT_BYTES = 2.0  # activations are 16-bit, as in the op tables
DECODE_MAX_TOKENS = 512  # GEMM / MoE rows with at most this many tokens count as decode-sized
_FAMILY_CODE = {name: i for i, name in enumerate(K.FAMILY_NAMES)}


@dataclass(frozen=True)
class OpWork:
    """Per-row roofline inputs (arrays of one length; NaN where a row cannot be costed).

    ``family``: oracle efficiency family code (``K.F_*``); ``phase``: 0 prefill, 1 decode;
    ``peak``: the peak FLOP/s the oracle would use; ``comm``: 0 compute op, 1 ring
    all-reduce, 2 all-to-all; ``group``/``nbytes``: collective size and payload.
    """

    work: np.ndarray
    traffic: np.ndarray
    count: np.ndarray
    family: np.ndarray
    phase: np.ndarray
    peak: np.ndarray
    comm: np.ndarray
    group: np.ndarray
    nbytes: np.ndarray

    @property
    def valid(self) -> np.ndarray:
        """Rows the oracle can cost (known dtype and family)."""
        return np.isfinite(self.work) & np.isfinite(self.traffic)


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    """A feature column as float64 (all NaN when the table lacks it)."""
    if name not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64)


def _str(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].astype(str).to_numpy() if name in df.columns else np.full(len(df), "")


def phase_of(df: pd.DataFrame) -> np.ndarray:
    """Phase (0 prefill / 1 decode) whose efficiencies price each row.

    Attention: by family. Collectives: a framework's custom all-reduce replayed in a CUDA
    graph (``kernel`` ``vllm_graph``, ``sglang_graph``) is decode, everything else prefill. GEMM and MoE: decode
    when the row has at most :data:`DECODE_MAX_TOKENS` tokens (a decode batch fits a CUDA
    graph capture size), else prefill.
    """
    fam = _str(df, "op_family")
    phase = np.zeros(len(df), dtype=np.int64)
    phase[fam == "attention_decode"] = K.PHASE_DECODE
    kernel = _str(df, "kernel")
    graph = np.char.endswith(kernel.astype(str), "_graph")
    phase[np.isin(fam, COMM_FAMILIES) & graph] = K.PHASE_DECODE
    tokens = np.where(fam == "gemm", _col(df, "m"), _col(df, "num_tokens"))
    small = np.isin(fam, ("gemm", "moe")) & (tokens <= DECODE_MAX_TOKENS)
    phase[small] = K.PHASE_DECODE
    return phase


def _attention_counts(batch, q, kv, window, tile) -> tuple[np.ndarray, np.ndarray]:
    """Causal pairs and KV reads of ``batch`` identical requests (the kernel's counts)."""
    pairs = np.full(len(q), np.nan)
    kv_read = np.full(len(q), np.nan)
    keys = np.stack([q, kv, window], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    per_pairs = np.empty(len(uniq))
    per_kv = np.empty(len(uniq))
    for j, (qq, cc, ww) in enumerate(uniq):
        per_pairs[j], per_kv[j] = K.attention_request(float(qq), float(cc), float(ww), tile)
    inv = np.ravel(inv)
    pairs[:] = batch * per_pairs[inv]
    kv_read[:] = batch * per_kv[inv]
    return pairs, kv_read


def op_work(df: pd.DataFrame, gpu: GPUSpec, tile: float = 128.0) -> OpWork:
    """Work, traffic and kernel count of every measurement row, as the oracle costs it.

    Parameters
    ----------
    df : pandas.DataFrame
        Measurements in the schema of :mod:`serveplan.estimator.measurements`.
    gpu : GPUSpec
        Supplies the peak FLOP/s per dtype.
    tile : float
        FlashAttention query tile (the profile's ``flash_tile``).

    Returns
    -------
    OpWork
        NaN work for rows of other families or of dtypes the oracle does not cost
        (nvfp4, int4 weight-only, ...).
    """
    n_rows = len(df)
    fam = _str(df, "op_family")
    dtype = _str(df, "dtype")
    nan = np.full(n_rows, np.nan)
    work, traffic, count, peak = nan.copy(), nan.copy(), np.ones(n_rows), nan.copy()
    family = np.full(n_rows, -1, dtype=np.int64)
    comm = np.zeros(n_rows, dtype=np.int64)
    group, nbytes = nan.copy(), nan.copy()
    wbytes = np.array([WEIGHT_DTYPES.get(d, (np.nan, ""))[0] for d in dtype])
    wpeak = np.array([gpu.peak_flops(WEIGHT_DTYPES[d][1]) if d in WEIGHT_DTYPES else np.nan
                      for d in dtype])
    act_peak = gpu.peak_flops("bf16")

    g = fam == "gemm"
    if g.any():
        work[g], traffic[g] = _gemm_terms(df, g, wbytes[g])
        peak[g], family[g] = wpeak[g], K.F_GEMM

    att = np.isin(fam, ("attention_prefill", "attention_decode"))
    if att.any():
        work[att], traffic[att] = _attention_terms(df, att, tile)
        peak[att], family[att] = act_peak, K.F_ATTN

    moe = fam == "moe"
    if moe.any():
        work[moe], traffic[moe] = _moe_terms(df, moe, wbytes[moe])
        peak[moe], count[moe], family[moe] = wpeak[moe], MOE_KERNELS, K.F_MOE

    for code, name in ((1, "allreduce"), (2, "alltoall")):
        sel = fam == name
        if sel.any():
            comm[sel] = code
            group[sel], nbytes[sel] = _col(df, "num_gpus")[sel], _col(df, "message_bytes")[sel]
            work[sel], traffic[sel], count[sel], peak[sel] = 0.0, nbytes[sel], 0.0, act_peak
            family[sel] = K.F_COMM

    bad = family < 0
    work[bad] = np.nan
    return OpWork(work, traffic, count, family, phase_of(df), peak, comm, group, nbytes)


def _gemm_terms(df: pd.DataFrame, g: np.ndarray, wbytes: np.ndarray):
    """FLOPs and bytes of the GEMM rows ``g`` (``wbytes``: their weight bytes per element)."""
    a, b, c = gemm_coeffs(_col(df, "n")[g], _col(df, "k")[g], ACT_BYTES, wbytes)
    m = _col(df, "m")[g]
    return a * m, b * m + c


def _attention_terms(df: pd.DataFrame, att: np.ndarray, tile: float):
    """FLOPs and bytes of the attention rows ``att`` under FlashAttention query tile ``tile``."""
    kv_dtype = _str(df, "kv_dtype")[att]
    kvb = np.array([DTYPE_BYTES.get(k, np.nan) if k else 2.0 for k in kv_dtype])
    a, b, c = gqa_attention_coeffs(_col(df, "num_heads")[att], _col(df, "num_kv_heads")[att],
                                   _col(df, "head_dim")[att], ACT_BYTES, kvb)
    batch, q = _col(df, "batch_size")[att], _col(df, "query_len")[att]
    window = np.nan_to_num(_col(df, "window_size")[att])
    pairs, kv_read = _attention_counts(batch, q, _col(df, "kv_len")[att], window, tile)
    return a * pairs, b * kv_read + c * batch * q


def _moe_terms(df: pd.DataFrame, moe: np.ndarray, wbytes: np.ndarray):
    """FLOPs and bytes of the MoE rows ``moe`` (uniform routing, ``ops.moe_routing``)."""
    tp = np.nan_to_num(_col(df, "tp")[moe], nan=1.0)
    ep = np.nan_to_num(_col(df, "ep")[moe], nan=1.0)
    experts = _col(df, "num_experts")[moe]
    h = _col(df, "hidden_size")[moe]
    a, b, c = moe_coeffs(h, _col(df, "inter_size")[moe] / tp, ACT_BYTES, wbytes)
    assign, active = moe_routing(_col(df, "num_tokens")[moe], _col(df, "topk")[moe],
                                 experts, experts / ep)
    return a * assign, b * assign + c * active


def _profile_arrays(profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """e_c, e_m as (phase, family) arrays and fixed seconds per family."""
    ec = np.empty((2, K.N_FAMILIES))
    em = np.empty((2, K.N_FAMILIES))
    for p, phase in enumerate(STEP_PHASES):
        for f, fam in enumerate(FAMILIES):
            ec[p, f], em[p, f] = profile.priced_eff(fam, phase)
    fixed = np.array([profile.kernel_fixed(f) for f in FAMILIES])
    return ec, em, fixed


def op_times(w: OpWork, gpu: GPUSpec, profile: Profile) -> np.ndarray:
    """Seconds the oracle charges for each row with ``profile`` (no correctors).

    Compute rows: ``max(W / (e_c S_c), Q / (e_m S_m)) + count * fixed`` with the row's
    phase and family constants. Collectives: the kernels' all-reduce / all-to-all
    with the comm family's ``e_m``, the GPU's scale-up bandwidth and the profile's
    latency. NaN where the row cannot be costed.
    """
    ec, em, fixed = _profile_arrays(profile)
    fam = np.where(w.family >= 0, w.family, 0)
    e_c, e_m = ec[w.phase, fam], em[w.phase, fam]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.maximum(w.work / (e_c * w.peak), w.traffic / (e_m * gpu.mem_bw))
    t = t + w.count * fixed[fam]
    lat = gpu.scaleup_latency_s if profile.comm_latency_s is None else profile.comm_latency_s
    for i in np.flatnonzero(w.comm > 0):
        fn = K.allreduce_time if w.comm[i] == 1 else K.alltoall_time
        t[i] = fn(w.nbytes[i], w.group[i], gpu.scaleup_bw, lat, e_m[i])
    t[~w.valid] = np.nan
    return t


def _features(df: pd.DataFrame) -> dict:
    """Linear-scale corrector features by name (see :data:`.correctors.FAMILY_FEATURES`)."""
    c = lambda name: _col(df, name)  # noqa: E731
    tp = np.nan_to_num(c("tp"), nan=1.0)
    ep = np.nan_to_num(c("ep"), nan=1.0)
    return {
        "m": lambda: c("m"),
        "n": lambda: c("n"),
        "k": lambda: c("k"),
        "q_len": lambda: c("query_len"),
        "batch_heads": lambda: c("batch_size") * c("num_heads"),
        "batch": lambda: c("batch_size"),
        "heads": lambda: c("num_heads"),
        "kv_heads": lambda: c("num_kv_heads"),
        "head_dim": lambda: c("head_dim"),
        "gqa_ratio": lambda: c("num_heads") / c("num_kv_heads"),
        "kv_len": lambda: c("kv_len") + c("query_len"),
        "batch_kv_heads": lambda: c("batch_size") * c("num_kv_heads"),
        "tokens_per_expert": lambda: c("num_tokens") * c("topk") / c("num_experts"),
        "local_experts": lambda: c("num_experts") / ep,
        "expert_size": lambda: c("hidden_size") * c("inter_size") / tp,
        "hidden": lambda: c("hidden_size"),
        "expert_inter": lambda: c("inter_size") / tp,
        "message_bytes": lambda: c("message_bytes"),
        "num_gpus": lambda: c("num_gpus"),
    }


def corrector_features(df: pd.DataFrame, family: str,
                       names: tuple[str, ...] | None = None) -> np.ndarray:
    """log2 corrector features of ``family`` rows, columns ``names``
    (default :data:`.correctors.FAMILY_AXES` of the family).

    Defined as the kernel sees them at run time (the oracle's ``_row_corrector``): decode
    KV tokens read per request = ``kv_len + query_len``; MoE assignments per expert =
    ``num_tokens * topk / num_experts``; expert size = ``hidden * inter / tp``.
    """
    if family not in FAMILY_FEATURES:
        raise ValueError(f"no corrector features for op family {family!r}")
    names = FAMILY_AXES[family] if names is None else names
    bad = [n for n in names if n not in FAMILY_FEATURES[family]]
    if bad:
        raise ValueError(f"{family} has no corrector feature(s) {bad}; "
                         f"valid: {list(FAMILY_FEATURES[family])}")
    make = _features(df)
    cols = [make[n]() for n in names]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(np.stack(cols, axis=1))
