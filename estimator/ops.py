"""Op tables: model + parallelism + dtypes -> per-layer operators as flat arrays.

Each operator is one row of work (FLOP) and traffic (bytes) coefficients on one GPU rank
(see :mod:`serveplan.kernels.roofline` for the columns and bases). Rows belong to modules
(embedding, norms, attention, MLP / MoE, final norm, LM head, sampler), the unit at which
the CPU dispatches work (BestServe Algorithm 1).

Two operator sets:

``fused`` (default, vLLM): merged QKV and gate-up projections, fused residual-add + norm,
fused SiLU-and-mul, FlashAttention for prefill (score matrix never in HBM; K/V streamed
once per query tile) and paged attention for decode (each request's KV read once). With
``allreduce_fusion`` and ``tp > 1`` the residual-add + RMSNorm after each all-reduce runs
inside the all-reduce kernel in decode steps (TensorRT-LLM's
``AllReduceFusionOp.RESIDUAL_RMS_NORM`` on its one- and two-shot kernels, SGLang's
``--enable-flashinfer-allreduce-fusion`` up to its token limit): the two per-layer norm
rows are marked ``C_DECODE_FUSED`` and cost nothing there (the network's first norm, which
follows no all-reduce, stands in for the final norm's, which does and is kept); a mixed
step's messages go to NCCL, which the engines follow with a separate norm kernel.

Weights are charged the bytes of their class's storage format, scales included
(:class:`~.quantization.Quantization`); each row keeps its weight class in
:attr:`OpTable.wclass` so the oracle can price its GEMMs at the rate of the dtype they
compute in (:func:`family_peaks`).

``eager`` (BestServe Tables 6-13): the Hugging Face operator sequence with a materialised
score matrix. Kept to reproduce BestServe's Table 3. Two entries of those tables are
physically wrong and fixed here: the decode ``mul`` traffic is ``6bh0`` (the tables'
``6bsh0`` charges the whole context to an elementwise product of one token) and the TP
decode ``K_PROJ`` work is divided by ``t`` like ``V_PROJ``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from serveplan.kernels import roofline as K

from .linear_attention import add_gdn_rows
from .quantization import DTYPE_BYTES, Quantization, resolve_quantization
from .specs import GPUSpec, ModelSpec, Parallelism

MODULE_NAMES = ("embedding", "input_norm", "attention", "post_norm", "ffn", "final_norm",
                "lm_head", "sampler")
MOD_EMBED, MOD_NORM1, MOD_ATTN, MOD_NORM2, MOD_FFN, MOD_FNORM, MOD_HEAD, MOD_SAMPLE = range(8)
MODULE_SECTIONS = (K.SECTION_PRE, K.SECTION_LAYER, K.SECTION_LAYER, K.SECTION_LAYER,
                   K.SECTION_LAYER, K.SECTION_POST, K.SECTION_POST, K.SECTION_POST)
# profile dispatch key of each module
MODULE_DISPATCH_KEY = ("embedding", "norm", "attention", "norm", "mlp", "final_norm",
                       "lm_head", "sampler")


MOE_KERNELS = 5  # kernels of one fused-MoE call (align, gate-up, act, down, reduce)


def gemm_coeffs(n, k, act, wbytes):
    """Work/traffic coefficients of ``Y[T, n] = X[T, k] @ W[k, n]`` (basis: tokens T).

    Returns ``(a, b, c)`` with ``W = a T`` FLOP and ``Q = b T + c`` bytes: ``a = 2 n k``,
    ``b = act (n + k)`` (read X, write Y), ``c = wbytes n k`` (read the weight once).
    Works elementwise on arrays.
    """
    return 2.0 * n * k, act * (n + k), wbytes * n * k


def gqa_attention_coeffs(hq, hkv, d, act, kvb):
    """Coefficients of fused (Flash / paged) GQA attention on one rank, prefill or decode.

    Returns ``(a, b, c)`` with ``W = a pairs`` (QK^T and PV: ``a = 4 hq d``) and
    ``Q = b kv_read + c q`` bytes: K and V of each KV token read (``b = 2 hkv d kvb``) and
    Q read plus O written per query token (``c = 2 hq d act``). ``pairs`` and ``kv_read``
    come from :func:`serveplan.kernels.roofline.attention_request`.
    """
    return 4.0 * hq * d, 2.0 * hkv * d * kvb, 2.0 * hq * d * act


def moe_coeffs(h, inter, act, wbytes):
    """Coefficients of the routed experts of one rank (basis: token-expert assignments A).

    Returns ``(a, b, c)`` with ``W = a A`` (gate, up and down projections: ``a = 6 h inter``),
    ``Q = b A + c E_active``: activations in and out per assignment
    (``b = act (2 h + 3 inter)``) and each active expert's three matrices once
    (``c = 3 h inter wbytes``). ``inter`` is the expert width on this rank.
    """
    return 6.0 * h * inter, act * (2.0 * h + 3.0 * inter), 3.0 * h * inter * wbytes


def moe_routing(tokens, topk, num_experts, local_experts):
    """Expected token-expert assignments on a rank and experts hit, under uniform routing.

    A token picks a given expert with probability ``p = topk / num_experts``; a rank with
    ``local_experts`` experts receives ``tokens p local_experts`` assignments and
    ``local_experts (1 - (1 - p)^tokens)`` of its experts see at least one token.
    Elementwise on arrays (the kernel's ``_expected_active`` for one value).
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    p = np.asarray(topk, dtype=np.float64) / num_experts
    assign = tokens * p * local_experts
    active = np.where(tokens > 0, local_experts * (1.0 - (1.0 - p) ** tokens), 0.0)
    return assign, active


@dataclass
class OpTable:
    """Operators of one rank as arrays, with names for breakdowns and, per row, the weight
    class it reads (``""``: none) under ``quant``."""

    ops: np.ndarray
    names: list[str] = field(default_factory=list)
    ffn_moe_fraction: float = 0.0  # share of layers whose FFN is MoE (for dispatch mixing)
    wclass: list[str] = field(default_factory=list)
    quant: Quantization | None = None

    @property
    def n_ops(self) -> int:
        return self.ops.shape[0]


class _Builder:
    def __init__(self, wbytes: dict[str, float]):
        self.rows: list[np.ndarray] = []
        self.names: list[str] = []
        self.wclass: list[str] = []
        self.wb = wbytes  # bytes per weight of each class

    def add(self, name, module, basis, a=0.0, b=0.0, c=0.0, family=K.F_ELEM, count=1.0,
            frac=1.0, window=0.0, x1=0.0, x2=0.0, param=0.0, wclass=""):
        if frac <= 0.0:
            return
        row = np.zeros(K.N_COLS)
        row[K.C_MODULE] = module
        row[K.C_BASIS] = basis
        row[K.C_A] = a
        row[K.C_B] = b
        row[K.C_C] = c
        row[K.C_FAMILY] = family
        row[K.C_COUNT] = count
        row[K.C_FRAC] = frac
        row[K.C_WINDOW] = window
        row[K.C_X1] = x1
        row[K.C_X2] = x2
        row[K.C_PARAM] = param
        self.rows.append(row)
        self.names.append(name)
        self.wclass.append(wclass)

    def gemm(self, name, module, n, k, act, wclass, frac=1.0, basis=K.B_TOKENS):
        """Y[T, n] = X[T, k] · W[k, n] with weights of class ``wclass`` (see
        :func:`gemm_coeffs`)."""
        a, b, c = gemm_coeffs(n, k, act, self.wb[wclass])
        self.add(name, module, basis, a=a, b=b, c=c, family=K.F_GEMM, frac=frac, x1=n, x2=k,
                 param=c, wclass=wclass)


def build_ops(model: ModelSpec, par: Parallelism,
              weight_dtype: str | Quantization | None = None, kv_dtype: str | None = None,
              impl: str = "fused", redundant_experts: int = 0,
              allreduce_fusion: bool = False) -> OpTable:
    """Operator table of one rank for ``model`` split by ``par``.

    ``weight_dtype``: the checkpoint's quantization when None, a ``--dtype`` shorthand
    (``bf16``, ``fp8``, ``nvfp4``, ...: every weight class in that format) or a
    :class:`~.quantization.Quantization`; ``kv_dtype`` overrides its KV cache dtype
    (:func:`~.quantization.resolve_quantization`). Activations are 16-bit. EPLB's
    ``redundant_experts`` (:mod:`.routing`) add ``redundant_experts / ep`` to each rank.
    ``allreduce_fusion``: the per-layer RMSNorms ride on the decode steps' all-reduces
    (module docstring).
    """
    par.check_model(model)
    quant = resolve_quantization(model.quantization, model.dtype, weight_dtype, kv_dtype)
    act = 2.0
    kvb = float(DTYPE_BYTES[quant.kv_cache])
    t = par.tp
    h = model.hidden_size
    V = model.vocab_size / t
    b = _Builder(quant.bytes_by_class())
    eager = impl == "eager"
    _embedding(b, model, t, act)

    # ---- norms -------------------------------------------------------------------------
    per_norm = model.norms_per_layer / 2.0  # gemma-2 has a pre and a post norm per block
    fused = norms_on_allreduce(model, par, impl, allreduce_fusion)
    for mod, tag in ((MOD_NORM1, "input_norm"), (MOD_NORM2, "post_norm")):
        _norm(b, tag, mod, model, h, act, eager, per_norm)
        b.rows[-1][K.C_DECODE_FUSED] = float(fused)

    # ---- attention ---------------------------------------------------------------------
    if model.attention == "mla":
        _mla(b, model, par, act, kvb)
    else:
        _gqa(b, model, par, act, kvb, eager)
    if model.num_linear_layers:
        add_gdn_rows(b, model, t, act, MOD_ATTN, model.linear_fraction)
    if t > 1:
        b.add("attn_allreduce", MOD_ATTN, K.B_ALLREDUCE, b=h * act, family=K.F_COMM, count=0)

    # ---- FFN: dense MLP on some layers, MoE on the others ------------------------------
    moe_frac = model.num_moe_layers / model.num_layers
    dense_frac = 1.0 - moe_frac
    if dense_frac > 0:
        _mlp(b, "mlp", model, model.intermediate_size / t, h, act, "mlp", eager, dense_frac)
    if moe_frac > 0:
        _moe(b, model, par, act, moe_frac, redundant_experts)
    if t > 1:
        b.add("ffn_allreduce", MOD_FFN, K.B_ALLREDUCE, b=h * act, family=K.F_COMM, count=0)

    # ---- final norm, LM head (one logit row per request), sampler ----------------------
    _norm(b, "final_norm", MOD_FNORM, model, h, act, eager, 1.0, final=True)
    _head(b, model, V, act)
    return OpTable(np.array(b.rows), b.names, moe_frac, b.wclass, quant)


def norms_on_allreduce(model: ModelSpec, par: Parallelism, impl: str = "fused",
                       allreduce_fusion: bool = False) -> bool:
    """Whether the per-layer norms run inside the all-reduces: fusion asked for, a TP
    all-reduce to fuse into, fused kernels, and one RMSNorm before each of attention and
    the FFN (a LayerNorm or a sandwich of four norms is not what the fused kernels do)."""
    return bool(allreduce_fusion and par.tp > 1 and impl == "fused" and model.norm != "layer"
                and model.norms_per_layer == 2)


def _embedding(b, model, t, act):
    """Vocab-parallel embedding: each rank gathers its rows, then an all-reduce."""
    h, emb = model.hidden_size, b.wb["embedding"]
    b.add("embed_gather", MOD_EMBED, K.B_TOKENS, b=2 * h * act,
          param=model.vocab_size / t * h * emb, wclass="embedding")
    if model.learned_positions:
        b.add("pos_embed_add", MOD_EMBED, K.B_TOKENS, a=h, b=3 * h * act,
              param=model.max_position_embeddings * h * emb, wclass="embedding")
    if t > 1:
        b.add("embed_allreduce", MOD_EMBED, K.B_ALLREDUCE, b=h * act, family=K.F_COMM, count=0)


def _head(b, model, V, act):
    """LM head over this rank's ``V`` vocabulary rows (a tied head reads the embedding
    table and stores nothing of its own), then the sampler over the gathered fp32 logits
    (softmax / penalties / top-p read and write)."""
    h = model.hidden_size
    head = "embedding" if model.tie_word_embeddings else "lm_head"
    w_head = b.wb[head]
    head_params = 0.0 if model.tie_word_embeddings else V * h * w_head
    b.add("lm_head", MOD_HEAD, K.B_ROWS, a=2 * V * h, b=act * h + 4 * V, c=w_head * V * h,
          family=K.F_GEMM, param=head_params, x1=V, x2=h, wclass=head)
    b.add("sampler", MOD_SAMPLE, K.B_ROWS, a=5 * model.vocab_size, b=12 * model.vocab_size,
          count=4)


def family_peaks(table: OpTable, gpu: GPUSpec, act: str) -> np.ndarray:
    """Peak FLOP/s of each op family for ``table`` on ``gpu``; rescales, in place, the work
    of the GEMM rows that compute in a slower dtype than their family's peak.

    The kernels price every row of a family at one peak (``prm[P_SC + family]``). GEMMs
    take the highest peak among their rows' compute dtypes
    (:meth:`~.quantization.TensorFormat.compute_dtype`); a row computing in a slower one
    (a 16-bit attention projection beside NVFP4 MLPs, a 16-bit LM head) carries its work
    in units of that peak, ``a S_gemm / S_row``, so ``W / (e_c S_gemm)`` is its time at its
    own peak. Routed experts: their compute dtype; attention: the attention math's dtype;
    elementwise ops and collectives: the activations' ``act``. Call once per table.

    Parameters
    ----------
    table : OpTable
        From :func:`build_ops` (its ``quant`` and per-row ``wclass``); ``C_A`` of its GEMM
        rows is rescaled in place.
    gpu : GPUSpec
        Supplies the peak of each dtype.
    act : str
        The activations' dtype.

    Returns
    -------
    numpy.ndarray
        ``N_FAMILIES`` peaks, FLOP/s, for ``prm[P_SC:P_SC + N_FAMILIES]``.
    """
    quant, ops = table.quant, table.ops
    peaks = np.full(K.N_FAMILIES, gpu.peak_flops(act))
    rows = np.flatnonzero(ops[:, K.C_FAMILY] == K.F_GEMM)
    row_peak = np.array([gpu.peak_flops(quant.weights(table.wclass[r]).compute_dtype(
        gpu.flops, act)) for r in rows])
    if rows.size:
        peaks[K.F_GEMM] = row_peak.max()
        ops[rows, K.C_A] *= peaks[K.F_GEMM] / row_peak
    peaks[K.F_MOE] = gpu.peak_flops(quant.experts.compute_dtype(gpu.flops, act))
    peaks[K.F_ATTN] = gpu.peak_flops(quant.attention)
    return peaks


def _norm(b, tag, mod, model, h, act, eager, weight, final=False):
    if model.norm == "layer":
        # LayerNorm (x - mean)/std * g + beta, then the residual add (OPT)
        b.add(tag, mod, K.B_TOKENS, a=8 * h * weight, b=(2 * h * act + 3 * h * act) * weight,
              c=2 * h * act, count=2 * weight, param=2 * h * act * weight)
    elif eager:
        # BestServe Table 6: POW, MEAN, ADD, RSQRT, MUL, MUL (fp32 intermediates)
        b.add(tag, mod, K.B_TOKENS, a=(4 * h + 2) * weight, b=(14 * h + 14) * weight,
              c=2 * h, count=6 * weight, param=h * act * weight)
    else:
        # vLLM fused_add_rms_norm: read x and residual, write both; the first norm of the
        # network and the final norm have no residual to add
        traffic = (2 * h if final else 4 * h) * act
        b.add(tag, mod, K.B_TOKENS, a=4 * h * weight, b=traffic * weight, c=h * act,
              count=weight, param=h * act * weight)


def _qkv_projections(b, model, hq, hkv, act, eager, lf):
    """Q, K, V projections (one merged GEMM unless ``eager``; ``q_proj`` doubled for a gated
    output) and the q/k norms, on ``lf`` of the layers."""
    h, d, A = model.hidden_size, model.head_dim, MOD_ATTN
    gate = 2 if model.attn_output_gate else 1
    if eager:
        b.gemm("q_proj", A, hq * d * gate, h, act, "qkv", frac=lf)
        b.gemm("k_proj", A, hkv * d, h, act, "qkv", frac=lf)
        b.gemm("v_proj", A, hkv * d, h, act, "qkv", frac=lf)
    else:
        b.gemm("qkv_proj", A, (hq * gate + 2 * hkv) * d, h, act, "qkv", frac=lf)
    if model.qk_norm:
        b.add("qk_norm", A, K.B_TOKENS, a=4 * (hq + hkv) * d, b=2 * (hq + hkv) * d * act,
              count=2, frac=lf)
    if model.qk_norm and model.qk_norm_scope == "layer" and model.num_heads > hq:
        # the ranks' sums of squares of q and of k (two fp32 per token) all-reduced
        # before the norm (MiniMaxText01RMSNormTP.forward_qk)
        b.add("qk_norm_allreduce", A, K.B_ALLREDUCE, b=2 * 4.0, family=K.F_COMM, count=0,
              frac=lf)


def _gqa(b, model, par, act, kvb, eager):
    """GQA attention on the layers that have it: all but the linear-attention ones (``lf``
    of the layers), ``sliding_fraction`` of all layers windowed. A gated output
    (``attn_output_gate``) doubles ``q_proj`` and multiplies the output by its sigmoid;
    attention sinks (one logit per head) are not priced."""
    t = par.tp
    lf = 1.0 - model.linear_fraction
    h = model.hidden_size
    d = model.head_dim
    hq = model.num_heads / t
    hkv = max(1.0, model.num_kv_heads / t)  # KV heads are replicated when fewer than tp
    A = MOD_ATTN
    _qkv_projections(b, model, hq, hkv, act, eager, lf)
    kv_token = 2 * hkv * d * kvb  # K and V of one token on this rank
    if eager:
        # BestServe Table 10 charges RoPE on the full hidden size, not h/t; kept for
        # reproduction. The KV update is part of the decode attention row below.
        r = model.num_kv_heads / model.num_heads
        b.add("rope", A, K.B_TOKENS, a=3.5 * h * (1 + r),
              b=2 * h * (8.5 + 8.5 * r + 2 / model.num_heads), count=1, frac=lf)
    else:
        b.add("rope", A, K.B_TOKENS, a=3.5 * (hq + hkv) * d, b=2 * (hq + hkv) * d * act,
              frac=lf)
        b.add("kv_cache_write", A, K.B_TOKENS, b=kv_token + 2 * hkv * d * act, frac=lf)
    windows = [(0.0, lf - model.sliding_fraction)]
    if model.sliding_fraction > 0:
        windows.append((float(model.sliding_window), model.sliding_fraction))
    for window, frac in windows:
        if frac <= 0:
            continue
        sfx = "" if window == 0 else "_swa"
        if eager:
            # BestServe Table 10 (prefill, TP): QK^T and @V each W = 2·hq·d and
            # Q = 2·hq bytes per score entry plus 4·hq·d per query token; div, mask add and
            # softmax together W = 5·hq, Q = 12·hq + 2 per score entry (memory-bound).
            b.add("attn_matmuls" + sfx, A, K.B_SCORES, a=4 * hq * d, b=4 * hq, c=8 * hq * d,
                  family=K.F_ATTN, frac=frac, window=window, count=2)
            b.add("attn_softmax" + sfx, A, K.B_SCORES, a=5 * hq, b=12 * hq + 2,
                  family=K.F_ELEM, frac=frac, window=window, count=3)
            # Table 11 (decode, TP), per cached token: KV update, repeat_kv, QK^T, div,
            # mask add, fp32 upcast, softmax, @V; the kappa rates are taken as e_m·S_m
            dec_b = 4 * hkv * d + 6 * hq * d + 20 * hq + 2
            b.add("attn_decode" + sfx, A, K.B_ATTN_DECODE, a=4 * hq * d + 5 * hq, b=dec_b,
                  c=4 * hq * d, family=K.F_ATTN, frac=frac, window=window, count=8)
            continue
        a, kv_b, qo_c = gqa_attention_coeffs(hq, hkv, d, act, kvb)
        b.add("attn_prefill" + sfx, A, K.B_ATTN_PREFILL, a=a, b=kv_b, c=qo_c,
              family=K.F_ATTN, frac=frac, window=window)
        b.add("attn_decode" + sfx, A, K.B_ATTN_DECODE, a=a, b=kv_b, c=qo_c,
              family=K.F_ATTN, frac=frac, window=window)
    if model.attn_output_gate:
        b.add("attn_output_gate", A, K.B_TOKENS, a=4 * hq * d, b=3 * hq * d * act, frac=lf)
    b.gemm("o_proj", A, h, hq * d, act, "o_proj", frac=lf)


def _mla(b, model, par, act, kvb):
    """DeepSeek multi-head latent attention as vLLM runs it.

    Decode absorbs W_UK / W_UV into the query / output (MQA over the 576-wide latent);
    prefill expands K/V with kv_b_proj. Both cost 2·hq·kv_lora·(nope+v) FLOP per new
    token in the up-projections, modelled as one GEMM; expanding cached context tokens
    for chunked prefill is not charged (a few % of a long prefill).
    """
    t = par.tp
    h = model.hidden_size
    hq = model.num_heads / t
    nope, rope, v = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    lora_q, lora_kv = model.q_lora_rank, model.kv_lora_rank
    A = MOD_ATTN
    if lora_q:
        b.gemm("q_a_kv_a_proj", A, lora_q + lora_kv + rope, h, act, "qkv")  # replicated
        b.add("q_a_norm", A, K.B_TOKENS, a=4 * lora_q, b=2 * lora_q * act, count=1)
        b.gemm("q_b_proj", A, hq * (nope + rope), lora_q, act, "qkv")
    else:
        b.gemm("q_proj", A, hq * (nope + rope), h, act, "qkv")
        b.gemm("kv_a_proj", A, lora_kv + rope, h, act, "qkv")
    b.add("kv_a_norm_rope", A, K.B_TOKENS, a=4 * lora_kv + 3.5 * (hq + 1) * rope,
          b=2 * (lora_kv + (hq + 1) * rope) * act, count=2)
    b.gemm("kv_b_proj", A, hq * (nope + v), lora_kv, act, "qkv")
    latent = (lora_kv + rope) * kvb  # one cached token, not split by TP
    b.add("kv_cache_write", A, K.B_TOKENS, b=latent + (lora_kv + rope) * act)
    if model.index_topk:
        _dsa_indexer(b, model, act)
    top = float(model.index_topk)  # sparse attention reads the top-k tokens (0: all)
    b.add("attn_prefill", A, K.B_ATTN_PREFILL, a=2 * hq * (nope + rope) + 2 * hq * v,
          b=hq * (nope + rope + v) * act, c=hq * (nope + rope + v) * act, family=K.F_ATTN,
          window=top)
    b.add("attn_decode", A, K.B_ATTN_DECODE, a=2 * hq * (lora_kv + rope) + 2 * hq * lora_kv,
          b=latent, c=2 * hq * (lora_kv + rope) * act, family=K.F_ATTN, window=top)
    b.gemm("o_proj", A, h, hq * v, act, "o_proj")


INDEX_KEY_BYTES = 1.0  # the indexer's key cache: fp8 ...
INDEX_SCALE_BYTES = 4.0  # ... with one fp32 scale per 128-wide key (vLLM, SGLang)


def index_key_bytes(model) -> float:
    """Bytes one cached token's indexer key takes in one layer (0 without sparse attention):
    fp8 values plus an fp32 scale per 128 (DeepSeek-V3.2's and GLM-5's ``index_head_dim``
    of 128: 132 bytes)."""
    if not model.index_topk:
        return 0.0
    d = model.index_head_dim
    return d * INDEX_KEY_BYTES + -(-d // 128) * INDEX_SCALE_BYTES


def _dsa_indexer(b, model, act):
    """DeepSeek sparse attention's lightning indexer, as vLLM and SGLang run it: its
    projections (queries from the q-LoRA latent, one shared key and a weight per head from
    the hidden state) are replicated on every TP rank, its fp8 keys are cached beside the
    latent, and every query scores every cached token of its request (``index_n_heads`` dot
    products of ``index_head_dim``, fp8) before the top-``index_topk`` pick. The top-k
    selection itself is not priced."""
    A, h = MOD_ATTN, model.hidden_size
    n, d = model.index_n_heads, model.index_head_dim
    b.gemm("indexer_q_proj", A, n * d, model.q_lora_rank or h, act, "qkv")
    b.gemm("indexer_k_weights_proj", A, d + n, h, act, "qkv")
    key = index_key_bytes(model)
    b.add("indexer_k_cache_write", A, K.B_TOKENS, b=key + d * act)
    for phase, basis in (("prefill", K.B_ATTN_PREFILL), ("decode", K.B_ATTN_DECODE)):
        b.add(f"indexer_scores_{phase}", A, basis, a=2 * n * d, b=key, c=n * d * INDEX_KEY_BYTES,
              family=K.F_ATTN)


def _mlp(b, tag, model, inter, h, act, wc, eager, frac):
    """Gated (or OPT's plain) MLP of width ``inter`` with weights of class ``wc``."""
    F = MOD_FFN
    if model.mlp == "plain":  # OPT: fc1 -> ReLU -> fc2
        b.gemm(f"{tag}.fc1", F, inter, h, act, wc, frac=frac)
        b.add(f"{tag}.relu", F, K.B_TOKENS, a=inter, b=2 * inter * act, frac=frac)
        b.gemm(f"{tag}.fc2", F, h, inter, act, wc, frac=frac)
        return
    if eager:  # BestServe Table 1 / 12
        b.gemm(f"{tag}.gate_proj", F, inter, h, act, wc, frac=frac)
        b.add(f"{tag}.silu", F, K.B_TOKENS, a=5 * inter, b=4 * inter, frac=frac)
        b.gemm(f"{tag}.up_proj", F, inter, h, act, wc, frac=frac)
        b.add(f"{tag}.mul", F, K.B_TOKENS, a=inter, b=6 * inter, frac=frac)
        b.gemm(f"{tag}.down_proj", F, h, inter, act, wc, frac=frac)
        b.add(f"{tag}.add", F, K.B_TOKENS, a=h, b=4 * inter, frac=frac)
        return
    b.gemm(f"{tag}.gate_up_proj", F, 2 * inter, h, act, wc, frac=frac)
    b.add(f"{tag}.act_and_mul", F, K.B_TOKENS, a=5 * inter, b=3 * inter * act, frac=frac)
    b.gemm(f"{tag}.down_proj", F, h, inter, act, wc, frac=frac)


def _moe(b, model, par, act, frac, redundant=0):
    """Router, routed experts (fused MoE), shared experts, EP all-to-all.

    With ``ep == 1`` every rank holds all experts sharded ``tp * dp`` ways; with ``ep > 1``
    each rank holds ``E / ep`` experts, each sharded over the ``moe_tp = tp * dp / ep``
    ranks of its expert-parallel group (whole experts when ``ep = tp * dp``). The step's tokens T are one attention-DP
    rank's; its experts see the tokens of all ``dp`` ranks, T · dp (ranks taken as equally
    loaded). Routing is taken as uniform: a token picks a given expert with probability
    top-k / E, so E[assignments on this rank] = tokens · top-k · E_local / E and
    E[active experts] = E_local (1 - (1 - k/E)^tokens). All-to-all (EP with attention DP):
    the rank sends its own T tokens' activations to their top-k experts (dispatch) and gets
    them back (combine), ``T · k · h · act`` bytes each way -- not the group's T · dp.
    Experts sharded under attention DP (``moe_tp > 1``) see every rank's tokens instead, as
    the engines run it (SGLang's DP gather, TensorRT-LLM's all-gather / reduce-scatter,
    vLLM's naive dispatch): each rank gathers the other ``dp - 1`` ranks' ``T · h · act``
    and reduce-scatters the partial sums back (the same bytes).
    The kernel prices the busiest rank: its routed load over the mean scales both
    (:mod:`.routing`). With ``redundant`` EPLB replicas a rank holds ``(E + R) / ep``
    physical experts, each picked with probability ``k / (E + R)`` on average.
    """
    F = MOD_FFN
    h = model.hidden_size
    E, k = model.num_experts, model.experts_per_token
    ep = par.ep
    shard = par.moe_tp
    inter = model.moe_intermediate_size / shard
    physical = E + redundant
    local = physical / ep
    b.gemm("moe.router", F, E, h, act, "router", frac=frac)  # replicated gate
    a, per_assign, per_expert = moe_coeffs(h, inter, act, b.wb["experts"])
    b.add("moe.experts", F, K.B_MOE, a=a, b=per_assign, c=per_expert, family=K.F_MOE,
          count=MOE_KERNELS, frac=frac, x1=local, x2=k / physical, param=local * per_expert,
          wclass="experts")
    if model.num_shared_experts:
        _mlp(b, "moe.shared", model, model.shared_intermediate_size / par.tp, h, act,
             "shared_experts", False, frac)
    if par.dp > 1 and shard == 1:
        b.add("moe.dispatch_a2a", F, K.B_ALLTOALL, b=k * h * act, family=K.F_COMM, count=0,
              frac=frac)
        b.add("moe.combine_a2a", F, K.B_ALLTOALL, b=k * h * act, family=K.F_COMM, count=0,
              frac=frac)
    elif par.dp > 1:
        b.add("moe.dispatch_allgather", F, K.B_GATHER, b=h * act, family=K.F_COMM, count=0,
              frac=frac, x1=par.dp)
        b.add("moe.combine_reducescatter", F, K.B_GATHER, b=h * act, family=K.F_COMM,
              count=0, frac=frac, x1=par.dp)
