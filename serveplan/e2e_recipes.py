"""The engine flags of InferenceX's single-node recipes, for the measured rows they ran.

The rows of InferenceX's exports (:func:`serveplan.e2e.row_client`) were served by
InferenceX's launch scripts (``benchmarks/single_node/fixed_seq_len/<model>_<precision>_
<gpu>[_trt].sh``, read at commit ``8eec0d4``), not by the generator rules in the data's
``methodology/`` folder. What those scripts pass, by engine, model family, precision and GPU,
under serveplan's knob names (``max_num_seqs`` is SGLang's ``--max-running-requests`` and
TensorRT-LLM's ``max_batch_size``; ``max_num_batched_tokens`` SGLang's
``--chunked-prefill-size`` and TensorRT-LLM's ``max_num_tokens``; ``gpu_memory_utilization``
SGLang's ``--mem-fraction-static`` and TensorRT-LLM's ``free_gpu_memory_fraction``). A flag a
script does not pass keeps the engine's default (:mod:`serveplan.estimator.runtime`). Every
recipe turns prefix caching off (``--no-enable-prefix-caching``, ``--disable-radix-cache``,
``enable_block_reuse: false``) and none enables SGLang's mixed chunks or TensorRT-LLM's
chunked prefill; the DeepSeek SGLang scripts fuse the RMSNorms into the all-reduces
(``--enable-flashinfer-allreduce-fusion``, TensorRT-LLM's default); the Qwen3.5 fp8 script's
``--flashinfer-allreduce-fusion-backend auto`` names a backend without the enabling flag
and is read as no fusion (not checked against SGLang's source);
``max_model_len`` is the sweep's ``isl + osl + 256``; the fp8 and fp4 Qwen3.5 scripts keep
the recurrent state in bf16 (``--mamba-ssm-dtype bfloat16``; the checkpoint says fp32, which
the bf16 scripts keep). The KV cache is the
precision profile's (fp8 for fp8 and fp4 rows, :mod:`serveplan.e2e_served`) where a script
asks for fp8 KV; several Hopper scripts pass no KV dtype (vLLM, SGLang) or ``dtype: auto``
(TensorRT-LLM), which is the checkpoint's 16-bit KV for these checkpoints: their recipes say
``kv_dtype="auto"`` (:data:`AUTO_KV`).

Approximated: the scripts as they stand at that commit (the rows span November 2025 to April
2026; flags changed in between; the TensorRT-LLM DeepSeek rows of 2025 take that year's
scripts, :func:`_dsr1_trtllm_2025`, vLLM's Kimi-K2.5 fp4 rows of March 2026 and on B300 PR
862's flags, :func:`_kimi_fp4_vllm_first`, its MiniMax-M2.5 fp8 rows on v0.17.0 PR 757's,
:func:`_minimax_fp8_vllm_v017`), DeepSeek-V3 rows take DeepSeek-R1's recipe, Llama-3.1-70B
rows the old ``70b_*_slurm.sh`` / ``_docker.sh`` flags (which copy: :func:`_llama_trtllm`);
TensorRT-LLM's CUDA graphs as each script's ``cuda_graph_config`` sets them (padded, up to
its ``max_batch_size``), vLLM's as ``--max-cudagraph-capture-size 2048`` does where a script
passes it (:data:`_VLLM_GRAPHS_2048`); not modelled: the SGLang CUDA-graph batch limits and
speculative decoding (the MTP variants are separate scripts; the rows do not say which ran,
but the image, sweep or layout InferenceX ran only for them does: :func:`mtp_depth`). Rows on
GB200 / GB300 (multi-node launches) have no recipe here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from serveplan.estimator.oracle import cuda_graph_sizes, trtllm_cuda_graph_sizes

__all__ = ["AUTO_KV", "MTP_IMAGES", "MTP_SWEEPS", "NODE_GPUS", "RECIPES", "Recipe", "layout",
           "model_family", "mtp_depth", "prompts_per_client", "recipe_for", "recipe_knobs"]

MAX_MODEL_LEN_PAD = 256  # the sweep generator's max_model_len = isl + osl + 256
NODE_GPUS = 8  # every recipe here is a single-node launch on an eight-GPU HGX board
AUTO_KV = "auto"  # a recipe's kv_dtype: the checkpoint's own (no KV flag, or ``dtype: auto``)

_FAMILIES = (("deepseek-r1", "dsr1"), ("deepseek-v3", "dsr1"), ("kimi-k2.5", "kimik2.5"),
             ("minimax-m2.5", "minimaxm2.5"), ("qwen3.5-397b", "qwen3.5"),
             ("gpt-oss-120b", "gptoss"), ("glm-5", "glm5"), ("llama-3.1-70b", "70b"),
             ("llama-3.3-70b", "70b"))


def model_family(model: str) -> str | None:
    """InferenceX's model prefix for an HF id (None: no single-node recipe)."""
    name = model.lower().split("/")[-1]
    return next((fam for key, fam in _FAMILIES if name.startswith(key)), None)


Knobs = Callable[[object], dict]


@dataclass(frozen=True)
class Recipe:
    """One launch script: which rows it served and the knobs it sets (a function of the
    row, since some flags follow TP, the concurrency or the sequence lengths)."""

    engine: str
    family: str
    precisions: tuple[str, ...]
    gpus: tuple[str, ...]
    script: str
    knobs: Knobs
    always_ep: bool = False  # experts spread over every rank whatever EP_SIZE says
    attention_dp: bool = False  # the script has a DP_ATTENTION switch (else it ignores it)
    ran: Callable[[object], bool] | None = None  # the rows this state of it served (None: all)


def _recv(high: int, low: int, at: int = 16) -> Callable[[object], int]:
    """SGLang ``--scheduler-recv-interval``: ``high`` from ``at`` clients on, else ``low``."""
    return lambda r: high if r.concurrency >= at else low


def _c64(x: int) -> int:
    return -(-x // 64) * 64


def _trt_tokens(r, floor: int = 8192) -> int:
    """``max(floor, roundup64(CONC + ISL + 64))``, the DeepSeek TensorRT-LLM scripts' budget
    (the 2025 scripts had no floor)."""
    return max(floor, _c64(r.concurrency + r.isl + 64))


def _measured_before(r, day: str) -> bool:
    """Whether ``r`` records a measurement date before ``day`` (ISO dates compare as text)."""
    return bool(r.measured) and r.measured < day


def _trt_graphs(max_batch_size: int) -> dict:
    """The scripts' ``cuda_graph_config``: ``enable_padding: true`` and ``max_batch_size``
    (the sizes TensorRT-LLM generates from them)."""
    return dict(cuda_graph_padding=True,
                cuda_graph_sizes=trtllm_cuda_graph_sizes(max_batch_size, padding=True))


def _trt_adp(r, **config) -> dict:
    """With attention DP, the scripts' ``attention_dp_config: enable_balance: true`` (and
    the fields they set)."""
    return dict(attention_dp_config=dict(enable_balance=True, **config)) if r.dp > 1 else {}


_AR_FUSION = dict(allreduce_fusion=True)  # --enable-flashinfer-allreduce-fusion
_VLLM_GRAPHS_2048 = dict(cuda_graph_sizes=[int(s) for s in cuda_graph_sizes(max_size=2048)])
"""``--max-cudagraph-capture-size 2048``: vLLM's capture sizes up to 2,048 tokens (mixed
steps up to that size replay piecewise graphs)."""


def _dsr1_fp8_sglang(r) -> dict:
    if r.tp >= 8:  # TP8: 128 running, 32k chunks, 0.82; recv 30 from 16 clients, else 10
        return dict(max_num_seqs=128, max_num_batched_tokens=32768, gpu_memory_utilization=0.82,
                    scheduler_recv_interval=_recv(30, 10)(r), **_AR_FUSION)
    return dict(max_num_seqs=32, max_num_batched_tokens=8192, gpu_memory_utilization=0.95,
                scheduler_recv_interval=10, **_AR_FUSION)


def _dsr1_fp4_sglang(r) -> dict:
    dpa = r.dp > 1
    return dict(max_num_seqs=256, max_num_batched_tokens=32768 if dpa else 16384,
                gpu_memory_utilization=0.85,
                scheduler_recv_interval=1 if dpa else _recv(30, 10)(r), **_AR_FUSION)


_BF16_STATE = dict(mamba_ssm_dtype="bf16")  # the fp8 / fp4 Qwen3.5 scripts' --mamba-ssm-dtype


def _one_k(r) -> bool:
    return r.isl == r.osl == 1024


DSR1_TRT_FLOOR_FROM = "2026-01-09"
"""The first measurement date the DeepSeek TensorRT-LLM scripts can have had the 8,192-token
floor on their budget: InferenceX's copies of 2026-01-08 (6320e9b, after PR 406's rename)
have none, those of late January (1fc5d73) have it. No row is dated in between."""


def _dsr1_trtllm_2025(r) -> dict:
    """dsr1_fp{4,8}_b200_trt_slurm.sh as they ran to early January 2026 (``release:
    1.1.0rc2.post2``; InferenceX's copies of October 2025 to 2026-01-08 agree): the budget
    ``roundup64(CONC + ISL + 64)`` without the floor, KV fraction 0.8, CUDA graphs padded up
    to 256 (fp8) / 512 (fp4) requests, no batch waiting; attention DP as now. Not modelled:
    their MoE backends (fp8 DeepGEMM; fp4 CUTLASS from 256 clients with 1k prompts, above
    32 with 8k)."""
    return dict(max_num_batched_tokens=_trt_tokens(r, floor=0),
                gpu_memory_utilization=0.8,
                **_trt_graphs(256 if r.precision == "fp8" else 512),
                **_trt_adp(r, batching_wait_iters=0, timeout_iters=60))


def _dsr1_trtllm(r) -> dict:
    """dsr1_fp{4,8}_b200_trt.sh: the budget above; KV fraction 0.75 for fp8 8k/1k at TP4,
    else 0.8; fp8 1k/1k from 64 clients holds contexts up to 40 iterations for 0.8 of the
    budget (``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``; TensorRT-LLM
    ignores them under attention DP); attention DP balanced (60 iterations, no batching
    wait). Rows measured before :data:`DSR1_TRT_FLOOR_FROM` ran the older scripts
    (:func:`_dsr1_trtllm_2025`)."""
    if _measured_before(r, DSR1_TRT_FLOOR_FROM):
        return _dsr1_trtllm_2025(r)
    fp8 = r.precision == "fp8"
    knobs = dict(max_num_batched_tokens=_trt_tokens(r), gpu_memory_utilization=(
        0.75 if fp8 and r.isl == 8192 and r.tp == 4 else 0.8), **_trt_graphs(r.concurrency),
        **_trt_adp(r, batching_wait_iters=0, timeout_iters=60))
    if fp8 and _one_k(r) and r.concurrency >= 64:
        knobs.update(batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
    return knobs


def _llama_trtllm(r) -> dict:
    """70b_*_trt_slurm.sh / _docker.sh: ``--max_num_tokens 16384``; 1k/1k below TP 8 holds
    contexts up to 20 iterations for 0.9 of that budget.

    The fp4 slurm script InferenceX's repository holds (73ef922) passes ``$MAX_MODEL_LEN``
    instead (2,304 tokens at 1k/1k); its docker twin (c2faa3d) and the fp8 script
    (a267b4b) pass 16384, and the rows do not say which runner served them. The rows rule
    the small budget out: with it at most two ~920-token contexts fit a step, and they wait
    the full 20 iterations unless both are near 1,024 tokens (TensorRT-LLM's
    ``_waiting_requests``), about two admissions per 21 iterations: 4.3 requests/s at the
    21.9 ms TPOT of the 128-client TP 1 run, which completed 6.1 per second."""
    knobs = dict(max_num_batched_tokens=16384, **_trt_graphs(1024))
    if _one_k(r) and r.tp < 8:
        knobs.update(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
    return knobs


GPTOSS_VLLM_FP8_KV_FROM = "2025-12-05"
"""When ``gptoss_fp4_b200_docker.sh`` took ``kv-cache-dtype: fp8`` (InferenceX PR 273, the
vLLM 0.11.2 image); before it the script set no KV dtype: the checkpoint's bf16."""


def _gptoss_vllm(r) -> dict:
    """gptoss_fp4_b200.sh: 512 running, 8,192-token budget, 0.9 of memory, CUDA graphs up to
    2,048 tokens; the KV cache the checkpoint's own for rows measured before
    :data:`GPTOSS_VLLM_FP8_KV_FROM`."""
    knobs = dict(max_num_seqs=512, max_num_batched_tokens=8192, gpu_memory_utilization=0.9,
                 **_VLLM_GRAPHS_2048)
    if _measured_before(r, GPTOSS_VLLM_FP8_KV_FROM):
        knobs["kv_dtype"] = AUTO_KV
    return knobs


KIMI_VLLM_FP4_TUNED_FROM = "2026-04-20"
"""The first measurement date of vLLM Kimi-K2.5 fp4 rows on B200 with InferenceX PR 1047's
flags (``--kv-cache-dtype fp8 --max-cudagraph-capture-size 2048 --max-num-batched-tokens
$((ISL * 2)) --stream-interval 20``). The PR was opened after PR 947 (2026-03-26) and had
merged by 2026-04-21 (PR 1107's diff carries its changelog entry); the rows are dated
2026-03-11, 03-27 and 04-20, so those of March ran PR 862's flags. That the 04-20 runs had
the new ones is inferred from that window, not recorded."""


def _kimi_fp4_vllm_first(r) -> dict:
    """kimik2.5_fp4_b{2,3}00.sh as PR 862 wrote them (the B300 script, which says it reuses
    the B200 recipe as is, kept them at 8eec0d4; PR 1698 of June 2026 added the rest):
    ``--max-num-seqs $CONC``, 0.9 of memory, no KV dtype (the checkpoint's own, fp8 for
    NVFP4), no token budget or capture size (vLLM's defaults)."""
    return dict(max_num_seqs=r.concurrency, gpu_memory_utilization=0.9, kv_dtype=AUTO_KV)


def _minimax_fp8_vllm_v017(r) -> dict:
    """minimaxm2.5_fp8_b200.sh before InferenceX PR 947, which moved its image from v0.17.0
    to v0.19.0 and added the KV dtype, capture size and token budget in the same change
    (PR 757's script): 0.95 of memory, ``--block-size=32``, no KV dtype (the checkpoint's
    bf16), vLLM's default budget and capture sizes; ``--enable-expert-parallel`` whenever
    ``EP_SIZE -ge 1`` (PR 947 made it ``-gt 1``). Not modelled: its
    ``VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0``, which put the fp8 MoE on
    other kernels than the image's defaults."""
    return dict(gpu_memory_utilization=0.95, block_size=32, kv_dtype=AUTO_KV)


def _ran_v017(r) -> bool:
    return r.version == "0.17.0"


_F = "benchmarks/single_node/fixed_seq_len/"
_B, _BB = ("b200",), ("b200", "b300")
RECIPES: tuple[Recipe, ...] = (
    # ---- vLLM
    Recipe("vllm", "gptoss", ("fp4",), ("b200", "b300"), _F + "gptoss_fp4_b200.sh",
           _gptoss_vllm),
    Recipe("vllm", "gptoss", ("fp4",), ("h100",), _F + "gptoss_fp4_h100.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.9, max_model_len=10240, kv_dtype=AUTO_KV)),
    Recipe("vllm", "gptoss", ("fp4",), ("h200",), _F + "gptoss_fp4_h200.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.9, kv_dtype=AUTO_KV,
                          max_model_len=r.isl + r.osl + (20 if _one_k(r) else 256))),
    Recipe("vllm", "kimik2.5", ("int4",), ("b200", "b300"), _F + "kimik2.5_int4_b200.sh",
           lambda r: dict(max_num_seqs=r.concurrency, gpu_memory_utilization=0.95)),
    Recipe("vllm", "kimik2.5", ("int4",), ("h200",), _F + "kimik2.5_int4_h200.sh",
           lambda r: dict(max_num_seqs=r.concurrency, gpu_memory_utilization=0.95)),
    Recipe("vllm", "kimik2.5", ("fp4",), _B, _F + "kimik2.5_fp4_b200.sh", _kimi_fp4_vllm_first,
           ran=lambda r: _measured_before(r, KIMI_VLLM_FP4_TUNED_FROM)),
    Recipe("vllm", "kimik2.5", ("fp4",), _B, _F + "kimik2.5_fp4_b200.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=2 * r.isl,
                          gpu_memory_utilization=0.9, **_VLLM_GRAPHS_2048)),
    Recipe("vllm", "kimik2.5", ("fp4",), ("b300",), _F + "kimik2.5_fp4_b300.sh",
           _kimi_fp4_vllm_first),
    Recipe("vllm", "minimaxm2.5", ("fp8",), _B, _F + "minimaxm2.5_fp8_b200.sh",
           _minimax_fp8_vllm_v017, always_ep=True, ran=_ran_v017),
    Recipe("vllm", "minimaxm2.5", ("fp8",), _BB, _F + "minimaxm2.5_fp8_b200.sh",
           lambda r: dict(max_num_batched_tokens=2 * r.isl, gpu_memory_utilization=0.9,
                          block_size=32, **_VLLM_GRAPHS_2048)),
    Recipe("vllm", "minimaxm2.5", ("fp4",), _BB, _F + "minimaxm2.5_fp4_b200.sh",
           lambda r: dict(max_num_batched_tokens=2 * r.isl, gpu_memory_utilization=0.9,
                          **_VLLM_GRAPHS_2048),
           attention_dp=True),
    Recipe("vllm", "minimaxm2.5", ("fp8",), ("h100",), _F + "minimaxm2.5_fp8_h100.sh",
           lambda r: dict(max_num_seqs=256, gpu_memory_utilization=0.9, kv_dtype=AUTO_KV)),
    Recipe("vllm", "minimaxm2.5", ("fp8",), ("h200",), _F + "minimaxm2.5_fp8_h200.sh",
           lambda r: dict(gpu_memory_utilization=0.95, kv_dtype=AUTO_KV),
           always_ep=True),  # ``if [ "$EP_SIZE" -ge 1 ]; then EP=" --enable-expert-parallel"``
    Recipe("vllm", "70b", ("fp8", "fp4", "bf16", ""), ("h100", "h200", "b200", "b300"),
           "benchmarks/70b_fp8_h200_slurm.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.9, async_scheduling=True)),
    # ---- SGLang
    Recipe("sglang", "dsr1", ("fp4",), _BB, _F + "dsr1_fp4_b200.sh", _dsr1_fp4_sglang,
           attention_dp=True),  # 25cbe715's version (the DP branch)
    Recipe("sglang", "dsr1", ("fp8",), _BB, _F + "dsr1_fp8_b200.sh", _dsr1_fp8_sglang),
    Recipe("sglang", "dsr1", ("fp8",), ("h200",), _F + "dsr1_fp8_h200.sh",
           lambda r: dict(max_num_seqs=512 if r.isl == r.osl == 1024 else 256,
                          max_num_batched_tokens=32768, gpu_memory_utilization=0.82,
                          kv_dtype=AUTO_KV)),
    Recipe("sglang", "glm5", ("fp4",), _BB, _F + "glm5_fp4_b200.sh",
           lambda r: dict(max_num_batched_tokens=32768, gpu_memory_utilization=0.9,
                          scheduler_recv_interval=10)),
    Recipe("sglang", "glm5", ("fp8",), _BB, _F + "glm5_fp8_b200.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=32768,
                          gpu_memory_utilization=0.85)),
    Recipe("sglang", "glm5", ("fp8",), ("h200",), _F + "glm5_fp8_h200.sh",
           lambda r: dict(gpu_memory_utilization=0.85, kv_dtype=AUTO_KV)),
    Recipe("sglang", "qwen3.5", ("bf16", ""), _BB, _F + "qwen3.5_bf16_b200.sh",
           lambda r: dict(max_num_seqs=128, max_num_batched_tokens=32768,
                          gpu_memory_utilization=0.82, scheduler_recv_interval=_recv(30, 10)(r))),
    Recipe("sglang", "qwen3.5", ("fp8",), _B, _F + "qwen3.5_fp8_b200.sh",
           lambda r: dict(max_num_batched_tokens=16384, gpu_memory_utilization=0.8,
                          scheduler_recv_interval=_recv(30, 10, 5)(r), **_BF16_STATE)),
    Recipe("sglang", "qwen3.5", ("fp4",), _B, _F + "qwen3.5_fp4_b200.sh",
           lambda r: dict(max_num_batched_tokens=16384, gpu_memory_utilization=0.8,
                          scheduler_recv_interval=_recv(30, 10, 5)(r), **_BF16_STATE)),
    Recipe("sglang", "qwen3.5", ("fp8",), ("b300",), _F + "qwen3.5_fp8_b300.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=16384,
                          gpu_memory_utilization=0.8, scheduler_recv_interval=10,
                          **_BF16_STATE)),
    Recipe("sglang", "qwen3.5", ("fp4",), ("b300",), _F + "qwen3.5_fp4_b300.sh",
           lambda r: dict(max_num_seqs=128, max_num_batched_tokens=32768,
                          gpu_memory_utilization=0.8, scheduler_recv_interval=_recv(30, 10)(r),
                          **_BF16_STATE)),
    Recipe("sglang", "qwen3.5", ("fp8",), ("h200",), _F + "qwen3.5_fp8_h200.sh",
           lambda r: dict(max_num_seqs=128, max_num_batched_tokens=16384,
                          gpu_memory_utilization=0.8, **_BF16_STATE)),
    # not stored at 8eec0d4; f89cdfe's version, which says it lowered the memory fraction
    # (0.8 -> 0.75) and the chunk (16384 -> 8192) of an earlier one
    Recipe("sglang", "qwen3.5", ("fp8",), ("h100",), _F + "qwen3.5_fp8_h100.sh",
           lambda r: dict(max_num_seqs=64, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.75, **_BF16_STATE)),
    # ---- TensorRT-LLM (PyTorch backend)
    Recipe("trtllm", "dsr1", ("fp4", "fp8"), _BB, _F + "dsr1_fp8_b200_trt.sh", _dsr1_trtllm,
           attention_dp=True),
    Recipe("trtllm", "dsr1", ("fp8",), ("h200",), _F + "dsr1_fp8_h200_trt.sh",
           lambda r: dict(max_num_batched_tokens=_trt_tokens(r), gpu_memory_utilization=0.75,
                          **_trt_graphs(128), **_trt_adp(r, batching_wait_iters=0,
                                                         timeout_iters=60)),
           attention_dp=True),
    Recipe("trtllm", "gptoss", ("fp4",), _BB, "benchmarks/gptoss_fp4_b200_trt.sh",
           lambda r: dict(max_num_seqs=512, max_num_batched_tokens=20000,
                          gpu_memory_utilization=0.85, **_trt_graphs(r.concurrency),
                          **_trt_adp(r)),
           attention_dp=True),
    Recipe("trtllm", "gptoss", ("fp4",), ("h200",), _F + "gptoss_fp4_h200_trt.sh",
           lambda r: dict(max_num_seqs=r.concurrency, max_num_batched_tokens=20000,
                          gpu_memory_utilization=0.85, kv_dtype=AUTO_KV,
                          **_trt_graphs(r.concurrency)),
           attention_dp=True),
    Recipe("trtllm", "70b", ("fp8",), ("h200", "b200", "b300"),
           "benchmarks/70b_fp8_b200_trt_slurm.sh", _llama_trtllm),  # H200: a267b4b's copy
    Recipe("trtllm", "70b", ("fp4", "bf16", ""), ("h200", "b200", "b300"),
           "benchmarks/70b_fp4_b200_trt_slurm.sh", _llama_trtllm),
)


def recipe_for(row) -> Recipe | None:
    """The launch script that served ``row`` (an agg row of InferenceX's exports), or None."""
    family, gpu = model_family(row.model), row.system.removesuffix("_sxm")
    return next((rc for rc in RECIPES if rc.engine == row.engine and rc.family == family
                 and row.precision in rc.precisions and gpu in rc.gpus
                 and (rc.ran is None or rc.ran(row))), None)


def recipe_knobs(row) -> dict | None:
    """The pool fields of ``row``'s recipe (None: no recipe): its flags, prefix caching off,
    no mixed chunks, ``max_model_len = isl + osl + 256``.

    A recipe's fixed running-request cap is its sweep's top concurrency ("capped so KV
    memory is not reserved for requests that never run", ``dsr1_fp8_b200.sh``); a row
    measured with more clients than the cap ran the script before it was pinned, so it
    keeps the engine's own limit."""
    rc = recipe_for(row)
    if rc is None:
        return None
    knobs = {"enable_prefix_caching": False, "max_model_len": row.isl + row.osl + MAX_MODEL_LEN_PAD,
             **rc.knobs(row)}
    if knobs.get("max_num_seqs", row.concurrency) < row.concurrency:
        del knobs["max_num_seqs"]
    if row.engine == "sglang":
        knobs["enable_mixed_chunk"] = False
    return knobs


def layout(row) -> tuple[int, int, int]:
    """``(tp, dp, ep)`` of the worker that served ``row``. InferenceX counts a DP-attention
    worker's GPUs in ``tp`` (``tp: 4, dp-attn: true`` is ``vllm serve -tp 1 -dp 4
    --enable-expert-parallel``: four GPUs); its exports record such a worker as ``tp`` 4,
    ``attention_dp`` 4, ``moe_ep`` 16 -- sixteen GPUs, more than the node has for 4 x 4 on a
    B200. A row with a recipe, ``dp > 1`` and ``moe_ep = tp x dp`` is therefore ``dp`` ranks
    of ``tp / dp`` GPUs with the experts over all ``tp``.

    The database behind the exports also counts a worker without a GPU count as ``tp x ep``
    GPUs (InferenceX-app's topology fallback), so a TensorRT-LLM ``--tp_size 8 --ep_size 8``
    worker -- eight GPUs, experts split eight ways -- is recorded as ``tp`` 64 (or
    ``attention_dp`` 64 with ``enable_attention_dp``), ``moe_tp`` 8, ``moe_ep`` 8. A row with
    a recipe whose ``tp x dp = moe_tp x moe_ep`` is more GPUs than its node has
    (:data:`NODE_GPUS`) is therefore ``moe_tp`` GPUs (one rank of them, or that many
    attention-DP ranks) with ``moe_ep``-way experts. A row recorded with attention DP whose
    script has no ``DP_ATTENTION`` switch (``Recipe.attention_dp`` false: the vLLM MiniMax
    fp8 and Kimi scripts, among others) ran ``--tensor-parallel-size $TP``: one worker of
    ``tp`` GPUs, with its experts over them when the export records expert parallelism. A
    recipe whose script turns expert parallelism on whatever ``EP_SIZE`` is (``always_ep``)
    spreads the experts over all ``tp x dp`` GPUs. Any other row as recorded."""
    rc = recipe_for(row)
    if rc is None:
        return row.tp, max(row.dp, 1), row.ep
    if row.dp > 1 and not rc.attention_dp:  # DP_ATTENTION set, but the script ignores it
        tp, dp, ep = row.tp, 1, row.tp if row.ep > 1 else 1
    else:
        tp, dp, ep = _worker_layout(row)
    return (tp, dp, tp * dp) if rc.always_ep else (tp, dp, ep)


def _worker_layout(row) -> tuple[int, int, int]:
    """The GPUs of a recipe's worker as :func:`layout` reads them off the export."""
    tp, dp, ep = row.tp, max(row.dp, 1), row.ep
    if dp > 1 and ep == tp * dp and tp % dp == 0:
        return tp // dp, dp, tp
    gpus = row.moe_tp
    if tp * dp > NODE_GPUS and tp * dp == gpus * ep:
        return (1, gpus, ep) if dp > 1 else (gpus, 1, ep)
    return tp, dp, ep


MTP_IMAGES = ("tensorrt-llm/release:1.2.0rc6.post3",)
"""Container images InferenceX ran only for its MTP variants (``dsr1-fp{4,8}-b200-trt-mtp``
in ``.github/configs/nvidia-master.yaml``; the plain variants ran ``1.2.0rc6.post2``)."""

MTP_SWEEPS = (("tensorrt-llm/release:1.1.0rc2.post2", "2026-01-14"),)
"""(image, measurement date) of sweeps that ran only the MTP variants, on an image the plain
variants shared. InferenceX PR 392 (opened 2026-01-07) added ``dsr1-fp{4,8}-b200-trt-mtp`` on
``release:1.1.0rc2.post2`` with a ``perf-changelog.yaml`` entry naming only the ``-mtp``
keys, and ``run-sweep.yml`` sweeps the keys a pushed changelog entry names; the plain keys
had no throughput entry from then until PRs 594 / 620 moved them to ``1.2.0rc6.post2``.
Every row of that image is dated 2025-12-15 or 2026-01-14."""


def _ran_mtp_sweep(row) -> bool:
    """Whether ``row``'s source names an MTP-only image, or an MTP-only sweep's image and date."""
    source = row.source.replace("#", "/")
    return (any(image in source for image in MTP_IMAGES)
            or any(image in source and row.measured == date for image, date in MTP_SWEEPS))


QWEN_MTP_STEPS = 3
"""EAGLE steps of ``qwen3.5-fp8-b200-sglang-mtp`` (``--speculative-num-steps 3``, 4 draft
tokens, top-k 1; InferenceX PR 898)."""


def _ran_qwen_mtp(row) -> bool:
    """A Qwen3.5 fp8 row of SGLang 0.5.9 at TP 4 without expert or attention DP: from PR 898
    (March 2026) to the May images, ``nvidia-master.yaml`` swept that layout only in
    ``qwen3.5-fp8-b200-sglang-mtp`` (``{tp: 4, ep: 1}``, image ``lmsysorg/sglang:v0.5.9-cu130``;
    the plain key swept TP 8 / EP 1 and TP 4 / EP 4 on ``v0.5.9-cu129-amd64``, then
    ``-cu130-amd64``), whose recipe the B300 rows of that image reused. Every such row that
    records its image names ``v0.5.9-cu130``."""
    return (row.engine == "sglang" and model_family(row.model) == "qwen3.5"
            and row.precision == "fp8" and row.version == "0.5.9"
            and (row.tp, max(row.dp, 1), row.ep) == (4, 1, 1))


def mtp_depth(row) -> int:
    """Draft tokens per step of ``row``'s MTP run (0: the row did not run MTP): the
    ``*_trt_mtp.sh`` scripts run three, one with attention DP; the Qwen3.5 SGLang MTP
    script three EAGLE steps."""
    if _ran_qwen_mtp(row):
        return QWEN_MTP_STEPS
    if not (row.engine == "trtllm" and model_family(row.model) == "dsr1"
            and _ran_mtp_sweep(row)):
        return 0
    return 1 if layout(row)[1] > 1 else 3


DEEPSEEK_PROMPTS_UNTIL = "2026-01-01"
"""The end of the year InferenceX's B200 docker runner sized DeepSeek-R1-0528 sweeps apart
(``runners/launch_b200-nvd.sh`` of 2025; a January 2026 copy sizes every sweep alike)."""


def prompts_per_client(row) -> int | None:
    """Prompts per client of ``row``'s sweep where its runner set them apart from the
    client's default (None): the 2025 B200 docker runner exported ``NUM_PROMPTS = 50 x CONC``
    (``20 x CONC`` at 8k outputs) for ``deepseek-ai/DeepSeek-R1-0528``, the checkpoint of the
    fp8 DeepSeek sweeps it launched (SGLang's and vLLM's docker scripts; the fp4 sweeps'
    checkpoint name did not match)."""
    if (row.engine in ("sglang", "vllm") and model_family(row.model) == "dsr1"
            and row.precision == "fp8" and row.system == "b200_sxm"
            and _measured_before(row, DEEPSEEK_PROMPTS_UNTIL)):
        return 20 if row.osl == 8192 else 50
    return None
