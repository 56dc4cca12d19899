"""CostOracle: the public cost API — seconds per engine step, vectorized.

>>> oracle = CostOracle("llama-3.1-8b", "h100", tp=1)          # doctest: +SKIP
>>> oracle.decode_time(batch_size=np.arange(1, 257), context_len=2048)   # doctest: +SKIP

Specs become flat arrays once, in the constructor; every call after that is a numba
kernel over arrays (:mod:`serveplan.kernels.roofline`). A simulator embeds the oracle by
taking :attr:`CostOracle.kernel_args` and calling ``roofline.step_time`` itself.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serveplan.kernels import roofline as K
from serveplan.kernels.uniform import uniform_step_times

from .catalog import resolve_gpu, resolve_model
from .correctors import MOE_KERNEL_DTYPE, Runtime, Static, find_table, packed_factors
from .ops import (
    MOD_ATTN,
    MOD_FFN,
    MODULE_DISPATCH_KEY,
    MODULE_NAMES,
    MODULE_SECTIONS,
    OpTable,
    build_ops,
    family_peaks,
    norms_on_allreduce,
)
from .profile import FAMILIES, Profile, load_profile
from .quantization import Quantization, corrector_dtype
from .routing import MoERouting
from .specs import STEP_PHASES as PHASES
from .specs import GPUSpec, ModelSpec, Parallelism, SpecError


def cuda_graph_sizes(max_num_seqs: int = 256, max_size: int | None = None,
                     decode_query_len: int = 1) -> np.ndarray:
    """vLLM's default CUDA-graph capture sizes (v0.11): 1, 2, 4, 8..248 step 8, then step 16.

    The largest size is ``min(2 * max_num_seqs * decode_query_len, 512)`` unless
    ``max_size`` is given. With speculative decoding a decode brings ``decode_query_len =
    1 + num_speculative_tokens`` tokens and vLLM rounds every size up to a multiple of it,
    dropping those beyond the largest (``VllmConfig._set_cudagraph_sizes``,
    ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``).
    """
    q = int(decode_query_len)
    top = max_size if max_size is not None else min(2 * max_num_seqs * q, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    sizes = {-(-s // q) * q for s in sizes if s <= top}
    kept = sorted(s for s in sizes if s <= top) or ([q] if q <= top else [])
    return np.array(kept, dtype=np.float64)


SGLANG_GRAPH_MAX_BS = ((20, 8, 8), (35, 24, 80), (60, 32, 160), (90, 256, 512),
                       (160, 256, 512))
"""SGLang's default ``cuda_graph_max_bs`` by GPU memory: ``(below GiB, tp < 4, tp >= 4)``;
512 from 160 GiB (``ServerArgs._handle_gpu_memory_settings``, the rule that also sets its
``chunked_prefill_size``)."""


def sglang_cuda_graph_sizes(gpu_mem_gib: float, tp: int, speculative: bool = False) -> list[int]:
    """SGLang's default CUDA-graph capture batch sizes on a GPU of ``gpu_mem_gib``
    (``ServerArgs._generate_cuda_graph_batch_sizes``): 1, 2, 4, 8, 12, 16..256 step 8,
    272..496 step 16, then step 32 (with speculative decoding 1..8, 10..32 step 2, 40..64
    step 4, 72..256 step 8, then step 16), up to ``cuda_graph_max_bs``; bigger decode
    batches run eagerly."""
    top = next((small if tp < 4 else large for below, small, large in SGLANG_GRAPH_MAX_BS
                if gpu_mem_gib < below), 512)
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
                 *range(272, top + 1, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
                 *range(512, top + 1, 32)]
    return [s for s in sizes if s <= top]


TRTLLM_GRAPH_MAX_BS = 128
"""TensorRT-LLM's ``cuda_graph_config.max_batch_size`` when none is given."""


def trtllm_cuda_graph_sizes(max_batch_size: int = TRTLLM_GRAPH_MAX_BS,
                            padding: bool = False) -> list[int]:
    """TensorRT-LLM's CUDA-graph batch sizes for ``cuda_graph_config`` without
    ``batch_sizes`` (``CudaGraphConfig._generate_cuda_graph_batch_sizes``, 1.x): with
    ``enable_padding`` 1, 2, 4, 8..128 step 8, else 1..32, 64, 128; then the powers of two
    from 256 below ``2**ceil(log2(max_batch_size))``; those up to ``max_batch_size``, which
    is added when missing. Without padding only a batch of exactly one of these sizes
    replays a graph (``CostOracle(graph_padding=False)``)."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    sizes = [1, 2, 4, *range(8, 129, 8)] if padding else [*range(1, 33), 64, 128]
    sizes += [2**i for i in range(8, math.ceil(math.log2(max_batch_size)))]
    sizes = sorted(s for s in sizes if s <= max_batch_size)
    return sizes if sizes[-1] == max_batch_size else [*sizes, max_batch_size]


def _capture_sizes(sizes) -> np.ndarray:
    """Given capture sizes, checked, sorted and without repeats."""
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) \
            or (arr < 1).any():
        raise ValueError(f"graph_sizes must be a non-empty list of integers >= 1, got {sizes!r}")
    return np.unique(arr).astype(np.float64)


@dataclass(frozen=True)
class Breakdown:
    """Per-module seconds of one step, summed over the layers the module repeats on."""

    modules: list[dict]
    time_s: float
    bound: str
    cuda_graph: bool
    graph_mode: str = "eager"  # eager | full | piecewise

    def as_dict(self) -> dict:
        return {"time_s": self.time_s, "bound": self.bound, "cuda_graph": self.cuda_graph,
                "graph_mode": self.graph_mode, "modules": self.modules}


GRAPH_MODES = ("eager", "full", "piecewise")
"""Names of :data:`serveplan.kernels.roofline.GRAPH_NONE` / ``GRAPH_FULL`` /
``GRAPH_PIECEWISE``."""


class CostOracle:
    """Step latency of one serving instance (model × GPU × parallelism × profile).

    Parameters
    ----------
    model, gpu
        Catalog names, paths (HF ``config.json`` / GPU YAML), dicts or spec objects.
    tp, pp, ep, dp
        Tensor, pipeline, expert and attention-data parallel sizes of the instance.
    dtype, kv_dtype
        Weights: the checkpoint's quantization (default), a ``--dtype`` shorthand setting
        every weight class (``bf16``, ``fp8``, ``nvfp4``, ...) or a
        :class:`~.quantization.Quantization`; KV-cache dtype (default: the checkpoint's,
        i.e. the activations' unless it ships fp8 KV scales).
    cuda_graph
        Pure-decode steps replay a captured graph (batch padded to a capture size).
    piecewise_cuda_graph
        Mixed steps up to the largest capture size run as piecewise graphs around eager
        attention (vLLM V1's torch.compile default; padded to a capture size); else eager.
    profile
        A :class:`Profile`, a path to a profile JSON, or None for the GPU's shipped one.
    max_num_seqs
        Sets the largest CUDA-graph capture size as vLLM does.
    correctors
        Apply the profile's learned residual correctors (default); False prices the
        fitted roofline alone.
    moe_routing
        How routed tokens spread over the expert-parallel ranks (a :class:`MoERouting` or
        its fields as a dict; default uniform). A step is priced at its busiest rank.
    decode_query_len
        Tokens a decoding request brings per step: ``1 + num_speculative_tokens`` with
        speculative decoding (sets the CUDA-graph capture sizes as vLLM does).
    graph_sizes
        The engine's CUDA-graph capture sizes as it captures them (vLLM
        ``cudagraph_capture_sizes``, SGLang ``--cuda-graph-bs``, TensorRT-LLM
        ``cuda_graph_config.batch_sizes``); default vLLM's from ``max_num_seqs``. A step
        between two sizes is padded to the larger; beyond the largest it runs eager.
    graph_padding
        False: only a step of exactly a capture size replays a graph, the others run eager
        (TensorRT-LLM without ``cuda_graph_config.enable_padding``, its default).
    allreduce_fusion
        With ``tp > 1``, the residual-add + RMSNorm after each all-reduce runs inside it
        in decode steps (:func:`~.ops.norms_on_allreduce`; TensorRT-LLM's default, SGLang's
        ``--enable-flashinfer-allreduce-fusion``): no per-layer norm kernels there.
    """

    def __init__(self, model, gpu, tp: int = 1, pp: int = 1, ep: int = 1, dp: int = 1,
                 dtype: str | Quantization | None = None, kv_dtype: str | None = None,
                 cuda_graph: bool = True, profile: Profile | str | Path | None = None,
                 max_num_seqs: int = 256, correctors: bool = True,
                 moe_routing: MoERouting | dict | None = None, decode_query_len: int = 1,
                 piecewise_cuda_graph: bool = False, graph_sizes=None,
                 graph_padding: bool = True, allreduce_fusion: bool = False):
        self.model: ModelSpec = resolve_model(model)
        self.gpu: GPUSpec = resolve_gpu(gpu)
        self.parallel = Parallelism(tp=tp, pp=pp, ep=ep, dp=dp)
        self.routing = MoERouting.model_validate(moe_routing or {})
        self.moe_load = self._moe_load()
        if isinstance(profile, Profile):
            self.profile = profile
        else:
            self.profile = load_profile(self.gpu, profile)
        self.cuda_graph = cuda_graph
        self.piecewise_cuda_graph = bool(cuda_graph and piecewise_cuda_graph)
        self.graph_padding = bool(graph_padding)
        self.table: OpTable = build_ops(self.model, self.parallel, dtype, kv_dtype,
                                        self.profile.attention_impl,
                                        self.routing.redundant_experts, allreduce_fusion)
        self.allreduce_fusion = norms_on_allreduce(self.model, self.parallel,
                                                   self.profile.attention_impl,
                                                   allreduce_fusion)
        self.quantization: Quantization = self.table.quant
        self.weight_dtype = self.quantization.label
        self.kv_dtype = self.quantization.kv_cache
        self._peaks = family_peaks(self.table, self.gpu, self.model.dtype)
        self.mods = self._module_table()
        self.prm = self._params()
        if correctors and self.profile.correctors and self.profile.attention_impl == "fused":
            self.prm = self._attach_correctors(self.prm)
        K.fill_rates(self.table.ops, self.prm)
        self.graph_sizes = cuda_graph_sizes(max_num_seqs, decode_query_len=decode_query_len) \
            if graph_sizes is None else _capture_sizes(graph_sizes)
        self._agg = np.zeros((self.table.n_ops, K.N_AGG))
        self._comp = np.zeros(len(MODULE_NAMES))
        self._comm = np.zeros(len(MODULE_NAMES))
        self._q = np.zeros(1, dtype=np.int64)
        self._c = np.zeros(1, dtype=np.int64)
        self.profile_step_overhead_s = self.profile.step_overhead_s
        self.profile_ffn_dispatch_s = float(self.mods[MOD_FFN, K.M_DISPATCH])

    def with_runtime(self, step_overhead_s: float | None = None,
                     eager_dispatch_layer_s: float = 0.0) -> CostOracle:
        """This oracle under an engine runtime's terms (:class:`~.runtime.RuntimeTerms`):
        ``step_overhead_s`` per step outside the forward pass instead of its profile's
        (None: the GPU profile's own again), and ``eager_dispatch_layer_s`` more CPU time
        per layer to issue a step that runs outside CUDA graphs (charged with the FFN
        module's dispatch, which piecewise graphs capture: only eager steps pay it, and
        it overlaps the GPU work as every dispatch does); everything else is shared.
        Itself if neither changes."""
        seconds = self.profile_step_overhead_s if step_overhead_s is None else float(
            step_overhead_s)
        eager = self.profile_ffn_dispatch_s + float(eager_dispatch_layer_s)
        if seconds == self.prm[K.P_STEP_OVERHEAD] and eager == self.mods[MOD_FFN, K.M_DISPATCH]:
            return self
        twin = copy.copy(self)
        twin.profile = self.profile.model_copy(update={"step_overhead_s": seconds})
        twin.prm = self.prm.copy()
        twin.prm[K.P_STEP_OVERHEAD] = seconds
        twin.mods = self.mods.copy()
        twin.mods[MOD_FFN, K.M_DISPATCH] = eager
        for scratch in ("_agg", "_comp", "_comm", "_q", "_c"):
            setattr(twin, scratch, getattr(self, scratch).copy())
        return twin

    # ------------------------------------------------------------------ construction
    def _moe_load(self) -> float:
        """The busiest expert-parallel rank's routed load over the mean (1: balanced)."""
        m, ep = self.model, self.parallel.ep
        if not m.is_moe:
            if self.routing != MoERouting():
                raise SpecError(f"moe_routing: {m.name} has no experts to route")
            return 1.0
        self.routing.check(m.num_experts, ep, m.name)
        return self.routing.load_factor(m.num_experts, m.experts_per_token, ep)

    def _module_table(self) -> np.ndarray:
        disp = self.profile.dispatch_s
        mods = np.zeros((len(MODULE_NAMES), K.N_MOD_COLS))
        moe = self.table.ffn_moe_fraction
        for j, key in enumerate(MODULE_DISPATCH_KEY):
            if key == "mlp":
                value = (1 - moe) * disp.get("mlp", 0.0) + moe * disp.get("moe", 0.0)
            else:
                value = disp.get(key, 0.0)
            if key == "norm":
                value *= self.model.norms_per_layer / 2.0
            mods[j, K.M_DISPATCH] = value
            mods[j, K.M_SECTION] = MODULE_SECTIONS[j]
            mods[j, K.M_SPLIT] = 1.0 if j == MOD_ATTN else 0.0  # eager between graph pieces
        return mods

    def _params(self) -> np.ndarray:
        g, par, prof = self.gpu, self.parallel, self.profile
        prm = np.zeros(K.N_PARAMS)
        prm[K.P_LAYERS] = self.model.num_layers
        prm[K.P_PP] = par.pp
        prm[K.P_TP] = par.tp
        prm[K.P_EP] = par.ep
        prm[K.P_MOE_TOKENS] = par.dp
        prm[K.P_MOE_LOAD] = self.moe_load
        prm[K.P_GRAPH] = 2.0 if self.piecewise_cuda_graph else float(self.cuda_graph)
        prm[K.P_GRAPH_EXACT] = 0.0 if self.graph_padding else 1.0
        prm[K.P_GRAPH_LAUNCH] = prof.graph_launch_s
        prm[K.P_STEP_OVERHEAD] = prof.step_overhead_s
        prm[K.P_TILE] = prof.flash_tile
        in_node = par.tp * par.dp <= g.gpus_per_node
        prm[K.P_COMM_BW] = g.scaleup_bw if in_node else g.scaleout_bw
        lat = g.scaleup_latency_s if in_node else g.scaleout_latency_s
        prm[K.P_COMM_LAT] = lat if prof.comm_latency_s is None else prof.comm_latency_s
        p2p_in_node = par.gpus <= g.gpus_per_node
        prm[K.P_P2P_BW] = g.scaleup_bw if p2p_in_node else g.scaleout_bw
        prm[K.P_P2P_LAT] = g.scaleup_latency_s if p2p_in_node else g.scaleout_latency_s
        prm[K.P_P2P_BYTES] = self.model.hidden_size * 2.0
        prm[K.P_SM] = g.mem_bw
        prm[K.P_SC:K.P_SC + K.N_FAMILIES] = self._peaks
        for ph, phase in enumerate(PHASES):
            for f, fam in enumerate(FAMILIES):
                prm[K.eff_index(ph, f, 0)], prm[K.eff_index(ph, f, 1)] = \
                    prof.priced_eff(fam, phase)
        for f, fam in enumerate(FAMILIES):
            prm[K.P_FIXED + f] = prof.kernel_fixed(fam)
        return prm

    def _row_corrector(self, r: int, phase: str):
        """(stored table, feature bindings) of op row ``r`` in ``phase``, or (None, None).

        Each corrector feature (:data:`.correctors.FAMILY_FEATURES`) is bound to a kernel
        runtime feature times a model constant (:class:`.correctors.Runtime`), or to a
        constant of this deployment (:class:`.correctors.Static`). MoE and all-to-all
        tables are read at the mean expert-parallel rank's tokens: they scale the busiest
        rank's roofline time by the factor of a balanced layer (fitted tables are not
        monotone in tokens everywhere; read at the busiest rank's count, more routing skew
        could price a step faster). MoE rows read the table of the routing's
        :attr:`~.routing.MoERouting.measured_distribution` (AIConfigurator's power law by
        default; balanced where the profile has no power-law table).
        """
        ops, tables, m, par = self.table.ops, self.profile.correctors, self.model, self.parallel
        basis, fam = int(ops[r, K.C_BASIS]), int(ops[r, K.C_FAMILY])
        wclass = self.table.wclass[r]
        wdt = corrector_dtype(self.quantization.weights(wclass)) if wclass else "bf16"
        kvdt = "bf16" if self.kv_dtype in ("bf16", "fp16") else self.kv_dtype
        x1, x2 = ops[r, K.C_X1], ops[r, K.C_X2]
        if fam == K.F_GEMM and basis in (K.B_TOKENS, K.B_ROWS) and x1 > 0:
            bind = {"m": Runtime(K.FEAT_TOKENS), "n": Static(x1), "k": Static(x2)}
            return find_table(tables, "gemm", dtype=wdt), bind
        if basis in (K.B_ATTN_PREFILL, K.B_ATTN_DECODE) and m.attention == "gqa":
            hq = m.num_heads / par.tp
            hkv = max(1.0, m.num_kv_heads / par.tp)
            bind = {"q_len": Runtime(K.FEAT_Q_MEAN), "kv_len": Runtime(K.FEAT_KV_MEAN),
                    "batch_heads": Runtime(K.FEAT_BATCH, float(np.log2(hq))),
                    "batch_kv_heads": Runtime(K.FEAT_BATCH, float(np.log2(hkv))),
                    "head_dim": Static(m.head_dim), "gqa_ratio": Static(hq / hkv),
                    "batch": Runtime(K.FEAT_BATCH), "heads": Static(hq), "kv_heads": Static(hkv)}
            family = "attention_prefill" if basis == K.B_ATTN_PREFILL else "attention_decode"
            return find_table(tables, family, kv_dtype=kvdt), bind
        if basis == K.B_MOE:
            hidden = float(m.hidden_size)
            bind = {"tokens_per_expert": Runtime(K.FEAT_TOKENS, float(np.log2(par.dp * x2))),
                    "local_experts": Static(x1), "expert_size": Static(ops[r, K.C_A] / 6.0),
                    "hidden": Static(hidden), "expert_inter": Static(ops[r, K.C_A] / 6.0 / hidden)}
            return find_table(tables, "moe", dtype=MOE_KERNEL_DTYPE.get(wdt, wdt),
                              distribution=self.routing.measured_distribution), bind
        if basis == K.B_ALLREDUCE:
            bind = {"message_bytes": Runtime(K.FEAT_TOKENS, float(np.log2(ops[r, K.C_B]))),
                    "num_gpus": Static(par.tp)}
            return find_table(tables, "allreduce", phase=phase), bind
        if basis == K.B_ALLTOALL:
            shift = float(np.log2(ops[r, K.C_B]))  # bytes one rank sends: b·T (its tokens)
            bind = {"message_bytes": Runtime(K.FEAT_TOKENS, shift), "num_gpus": Static(par.ep)}
            return find_table(tables, "alltoall"), bind
        return None, None

    def _attach_correctors(self, prm: np.ndarray) -> np.ndarray:
        """Append each row's runtime corrector tables to ``prm``; set ``C_CORR`` offsets."""
        ops = self.table.ops
        parts = [prm]
        size = prm.shape[0]
        cache: dict[bytes, int] = {}
        for r in range(ops.shape[0]):
            for ph, phase in enumerate(PHASES):
                table, bind = self._row_corrector(r, phase)
                if table is None:
                    continue
                packed = packed_factors(table, bind)
                key = packed.tobytes()
                if key not in cache:
                    cache[key] = size
                    parts.append(packed)
                    size += packed.shape[0]
                ops[r, K.C_CORR + ph] = cache[key]
        return np.concatenate(parts)

    # ------------------------------------------------------------------ public API
    @property
    def kernel_args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(ops, mods, prm, graph_sizes)`` for :func:`roofline.step_time` in compiled loops."""
        return self.table.ops, self.mods, self.prm, self.graph_sizes

    def scratch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh ``(agg, comp, comm)`` scratch arrays for :func:`roofline.step_time`."""
        n_mod = len(MODULE_NAMES)
        return np.zeros((self.table.n_ops, K.N_AGG)), np.zeros(n_mod), np.zeros(n_mod)

    def _uniform(self, batch_size, new_tokens, context_len) -> np.ndarray | float:
        b, q, c = np.broadcast_arrays(np.asarray(batch_size, dtype=np.float64),
                                      np.asarray(new_tokens, dtype=np.float64),
                                      np.asarray(context_len, dtype=np.float64))
        if np.any(b < 0) or np.any(q < 0) or np.any(c < 0):
            raise ValueError("batch_size, token counts and context lengths must be >= 0")
        flat = [np.ascontiguousarray(x).ravel() for x in (b, q, c)]
        out = np.empty(flat[0].shape[0])
        uniform_step_times(flat[0], flat[1], flat[2], self.table.ops, self.mods, self.prm,
                             self.graph_sizes, out)
        out = out.reshape(b.shape)
        return float(out) if out.ndim == 0 else out

    def decode_time(self, batch_size, context_len):
        """Seconds of a pure-decode step: ``batch_size`` requests, one new token each, after
        ``context_len`` cached tokens. Broadcasts; returns a float for scalar input."""
        return self._uniform(batch_size, 1, context_len)

    def prefill_time(self, batch_size, input_len, context_len=0):
        """Seconds of a step prefilling ``batch_size`` prompts of ``input_len`` tokens
        (after ``context_len`` cached, e.g. prefix-cache hits or earlier chunks)."""
        return self._uniform(batch_size, input_len, context_len)

    def step_time(self, new_tokens, context_len) -> float:
        """Seconds of one mixed step: request i computes ``new_tokens[i]`` tokens on top
        of ``context_len[i]`` cached ones (vLLM v1 ``num_scheduled_tokens`` and
        ``num_computed_tokens``)."""
        q = new_tokens if isinstance(new_tokens, np.ndarray) else np.asarray(new_tokens)
        c = context_len if isinstance(context_len, np.ndarray) else np.asarray(context_len)
        if q.ndim == 0:
            self._q[0] = q
            self._c[0] = c
            q, c = self._q, self._c
        if q.shape != c.shape:
            raise ValueError(f"new_tokens {q.shape} and context_len {c.shape} differ in shape")
        return K.step_time(q, c, q.shape[0], self.table.ops, self.mods, self.prm,
                           self.graph_sizes, self._agg, self._comp, self._comm)

    def breakdown(self, new_tokens=None, context_len=None, *, phase: str | None = None,
                  batch_size: int = 1, input_len: int = 1, context: int = 0) -> Breakdown:
        """Per-module dispatch / compute / communication of one step.

        Give either per-request ``new_tokens`` and ``context_len`` arrays, or a uniform
        batch by ``phase`` ('prefill': ``batch_size`` × ``input_len`` new tokens after
        ``context``; 'decode': one token each after ``context``).
        """
        if new_tokens is None:
            if phase not in PHASES:
                raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
            q = 1 if phase == "decode" else input_len
            new_tokens = np.full(batch_size, q, dtype=np.int64)
            context_len = np.full(batch_size, context, dtype=np.int64)
        q = np.asarray(new_tokens, dtype=np.int64).ravel()
        c = np.asarray(context_len, dtype=np.int64).ravel()
        agg, comp, comm = self.scratch()
        T, _, graph = K.step_costs(q, c, q.shape[0], self.table.ops, self.mods, self.prm,
                                   self.graph_sizes, agg, comp, comm)
        total = K._finish(comp, comm, self.mods, self.prm, graph, T)
        layers = self.prm[K.P_LAYERS]
        rows = []
        disp_total = 0.0
        gpu_total = 0.0
        launch = self.prm[K.P_GRAPH_LAUNCH]
        for j, name in enumerate(MODULE_NAMES):
            reps = layers if MODULE_SECTIONS[j] == K.SECTION_LAYER else 1.0
            disp = K.module_dispatch(self.mods, j, graph, launch) * reps
            rows.append({"name": name, "dispatch_s": disp, "compute_s": comp[j] * reps,
                         "comm_s": comm[j] * reps})
            disp_total += disp
            gpu_total += (comp[j] + comm[j]) * reps
        if disp_total > gpu_total:
            bound = "dispatch"
        else:
            bound = self._gpu_bound(q, c)
        return Breakdown(rows, float(total), bound, graph != K.GRAPH_NONE,
                         GRAPH_MODES[int(graph)])

    def _gpu_bound(self, q, c) -> str:
        """'compute' or 'memory': which roofline side dominates the GPU time of the step."""
        ops = self.table.ops
        T = float(q.sum())
        agg = np.zeros((ops.shape[0], K.N_AGG))
        n = q.shape[0]
        tile = self.prm[K.P_TILE]
        t_c = t_m = 0.0
        for r in range(ops.shape[0]):
            basis = int(ops[r, K.C_BASIS])
            if basis in (K.B_ATTN_PREFILL, K.B_ATTN_DECODE, K.B_SCORES):
                K.attention_aggregates(q, c, n, basis != K.B_ATTN_DECODE, ops[r, K.C_WINDOW],
                                       tile, agg[r])
        phase = K.PHASE_DECODE if np.all(q <= 1) else K.PHASE_PREFILL
        for r in range(ops.shape[0]):
            basis = int(ops[r, K.C_BASIS])
            a, b, cc, fam = (ops[r, K.C_A], ops[r, K.C_B], ops[r, K.C_C],
                             int(ops[r, K.C_FAMILY]))
            if basis == K.B_TOKENS:
                w, byt = a * T, b * T + cc
            elif basis == K.B_ROWS:
                w, byt = a * n, b * n + cc
            elif basis in (K.B_ATTN_PREFILL, K.B_ATTN_DECODE):
                w, byt = a * agg[r, 0], b * agg[r, 1] + cc * agg[r, 2]
            elif basis == K.B_SCORES:
                w, byt = a * agg[r, 3], b * agg[r, 3] + cc * agg[r, 2]
            else:
                continue
            e_c = self.prm[K.eff_index(phase, fam, 0)]
            e_m = self.prm[K.eff_index(phase, fam, 1)]
            t_c += w / (e_c * self.prm[K.P_SC + fam])
            t_m += byt / (e_m * self.prm[K.P_SM])
        return "compute" if t_c >= t_m else "memory"

    def describe(self) -> dict:
        """The resolved configuration (for result attrs and CLI output)."""
        return {
            "model": self.model.name,
            "gpu": self.gpu.name,
            **self.parallel.model_dump(),
            "dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "cuda_graph": self.cuda_graph,
            **({"piecewise_cuda_graph": True} if self.piecewise_cuda_graph else {}),
            **({} if self.graph_padding or not self.cuda_graph else {"graph_padding": False}),
            **({"allreduce_fusion": True} if self.allreduce_fusion else {}),
            "profile": self.profile.name,
            **({"moe_routing": self.routing.model_dump(), "moe_load_factor": self.moe_load}
               if self.model.is_moe else {}),
        }


def check_dtype_supported(gpu: GPUSpec, dtype: str) -> None:
    """Raise if ``dtype`` cannot be served on ``gpu``."""
    if dtype == "fp8" and "fp8" not in gpu.flops:
        raise SpecError(
            f"{gpu.name} has no fp8 tensor cores; use --dtype bf16 (or fp16)"
        )
