"""``serveplan estimate`` and ``serveplan memory``."""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from serveplan.commands.app import app
from serveplan.commands.common import check_at_most
from serveplan.errors import UserError, report_errors
from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.engine_memory import ENGINE_RULES, ENGINES, plan_engine_memory
from serveplan.estimator.memory import GIB, BatchFit, MemoryPlan, batch_kv_fit, plan_memory
from serveplan.estimator.oracle import Breakdown, CostOracle, check_dtype_supported
from serveplan.estimator.profile import load_profile
from serveplan.estimator.routing import MAX_REDUNDANT, MAX_SKEW, MoERouting
from serveplan.estimator.specs import Parallelism
from serveplan.pools_config import WEIGHT_DTYPE_ALIASES


class Phase(str, Enum):
    prefill = "prefill"
    decode = "decode"


class WeightDType(str, Enum):
    """``--dtype`` shorthand: every weight class in one format (docs/precision.md)."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp8_block = "fp8_block"
    nvfp4 = "nvfp4"
    fp4 = "fp4"  # alias of nvfp4, as in the pools YAML
    mxfp4 = "mxfp4"
    int4 = "int4"

    @property
    def format(self) -> str:
        """The weight format this shorthand names (``fp4`` is NVFP4)."""
        return WEIGHT_DTYPE_ALIASES.get(self.value, self.value)


class KvDType(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


class MoETraffic(str, Enum):
    """``--moe-traffic``: :attr:`serveplan.estimator.routing.MoERouting.traffic`."""

    power_law = "power_law"
    balanced = "balanced"


BatchOpt = typer.Option(1, "--batch", "-b", min=1,
                        help="Requests in the step (at most 1,048,576).")
ModelOpt = typer.Option(..., "--model", "-m",
                        help="Catalog name (llama-3.1-8b, qwen3-30b-a3b, ...) or config.json path.")
GpuOpt = typer.Option(..., "--gpu", "-g", help="Catalog name (h100, h200, a100-80gb, ...) or YAML.")
TpOpt = typer.Option(1, "--tp", min=1, help="Tensor-parallel size.")
PpOpt = typer.Option(1, "--pp", min=1, help="Pipeline-parallel size.")
EpOpt = typer.Option(1, "--ep", min=1, help="Expert-parallel size (MoE).")
DpOpt = typer.Option(1, "--dp", min=1, help="Attention data-parallel size (MoE with EP).")
DtypeOpt = typer.Option(None, "--dtype", help="Every weight class in this format: bf16, "
                        "fp16, fp8, fp8_block, nvfp4 (alias fp4: the engines' fp4), mxfp4 or int4 "
                        "(default: the checkpoint's quantization; docs/precision.md).")
KvDtypeOpt = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the checkpoint's).")
ProfileOpt = typer.Option(None, "--profile", exists=False,
                          help="Calibration profile JSON (default: shipped profile for the GPU).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")
SkewOpt = typer.Option(0.0, "--moe-routing-skew", min=0.0, max=MAX_SKEW,
                       help="Zipf exponent s of expert popularity, p_e ~ e^-s (0: uniform "
                       "routing); the step waits for the busiest --ep rank.")
RedundantOpt = typer.Option(0, "--redundant-experts", min=0, max=MAX_REDUNDANT,
                            help="EPLB's replicas of the hottest experts (vLLM "
                            "num_redundant_experts); places experts by load.")
EplbOpt = typer.Option(False, "--enable-eplb",
                       help="Place experts by load as EPLB (implied by --redundant-experts).")
DEFAULT_TRAFFIC = MoERouting.model_fields["traffic"].default
TrafficOpt = typer.Option(DEFAULT_TRAFFIC, "--moe-traffic",
                          help="Router traffic the experts are priced under: power_law "
                          "(AIConfigurator's, as served traffic) or balanced.")


MAX_BATCH = 1 << 20
"""Largest ``--batch`` (requests in one step)."""


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


@app.command()
@report_errors
def estimate(
    model: str = ModelOpt, gpu: str = GpuOpt, tp: int = TpOpt, pp: int = PpOpt,
    ep: int = EpOpt, dp: int = DpOpt,
    phase: Phase = typer.Option(Phase.decode, "--phase", help="prefill or decode step."),
    batch: int = BatchOpt,
    input_len: int = typer.Option(
        1, "--input-len", min=1, help="Prefill: new prompt tokens per request."),
    context_len: int = typer.Option(
        0, "--context-len", min=0,
        help="Tokens already in the KV cache per request (decode context, or prefix hits)."),
    dtype: WeightDType | None = DtypeOpt,
    kv_dtype: KvDType | None = KvDtypeOpt,
    cuda_graph: bool = typer.Option(True, "--cuda-graph/--no-cuda-graph",
                                    help="Replay pure-decode steps as CUDA graphs."),
    profile: Path | None = ProfileOpt,
    moe_routing_skew: float = SkewOpt, redundant_experts: int = RedundantOpt,
    enable_eplb: bool = EplbOpt, moe_traffic: MoETraffic = TrafficOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Time of one engine step: per-module dispatch, compute and communication.

    Requests longer than the model's max_position_embeddings are refused. When the batch's
    KV cache (block-rounded, vLLM's rule at its defaults) does not fit on the deployment, a
    warning line goes to stderr and --json carries "fits_in_memory": false; the step time
    is still printed (a roofline what-if). With a skewed MoE router the step is priced at
    its busiest expert-parallel rank (docs/moe.md).
    """
    check_at_most("--batch", batch, MAX_BATCH, "the step's per-request arrays are "
                  "allocated; no engine batches more")
    routing = _routing(model, ep, moe_routing_skew, redundant_experts, enable_eplb,
                       moe_traffic.value)
    oracle = _oracle(model, gpu, tp, pp, ep, dp, dtype, kv_dtype, cuda_graph, profile,
                     routing)
    new = _new_tokens(phase, input_len)
    _check_positions(oracle, context_len, new, phase)
    kv = _batch_memory(oracle, batch, context_len + new)
    bd = oracle.breakdown(phase=phase.value, batch_size=batch, input_len=input_len,
                          context=context_len)
    tokens = batch * new
    if as_json:
        out = bd.as_dict()
        out["config"] = oracle.describe()
        out["tokens"] = tokens
        out["tokens_per_s"] = tokens / bd.time_s
        out["fits_in_memory"] = kv.fits
        out["kv_cache"] = asdict(kv)
        typer.echo(json.dumps(out, indent=2))
        return
    cfg = oracle.describe()
    title = (f"{cfg['model']} on {cfg['gpu']} tp={tp} pp={pp}"
             + (f" ep={ep}" if ep > 1 else "")
             + f" · {phase.value} batch={batch}"
             + (f" input_len={input_len}" if phase is Phase.prefill else "")
             + f" context_len={context_len}")
    _print_step(bd, oracle, title, tokens)


def _print_step(bd: Breakdown, oracle: CostOracle, title: str, tokens: int) -> None:
    """The per-module table and the step line of ``estimate``."""
    console = Console()
    table = Table(title=title)
    table.add_column("module")
    for col in ("dispatch ms", "compute ms", "comm ms"):
        table.add_column(col, justify="right")
    for row in bd.modules:
        table.add_row(row["name"], _ms(row["dispatch_s"]), _ms(row["compute_s"]),
                      _ms(row["comm_s"]))
    console.print(table)
    graph = " (CUDA graph)" if bd.cuda_graph else ""
    console.print(f"step time [bold]{_ms(bd.time_s)} ms[/bold]{graph}, {bd.bound}-bound, "
                  f"{tokens / bd.time_s:,.0f} tokens/s")
    if oracle.moe_load > 1.0:
        console.print(f"MoE: the busiest ep rank holds {oracle.moe_load:.3f}x the mean load")
    lender = oracle.profile.provenance.get("borrowed_from")
    if lender is not None:
        speed = ", ".join(f"{phase} {v:g}x" for phase, v in
                          sorted(oracle.profile.phase_speed.items(), reverse=True))
        speed = f"; at its measured speed, {speed}" if speed else ""
        console.print(f"profile: {lender}'s (no per-op data for {oracle.gpu.name}{speed})")


Engine = Enum("Engine", {e: e for e in ENGINES}, type=str)  # vllm, sglang, trtllm


def _knob(flag: str, help_: str, *aliases: str):
    """An engine knob: unset by default, so the engine's own default (or rule) applies."""
    return typer.Option(None, flag, *aliases, help=help_, show_default=False)


EngineOpt = typer.Option("vllm", "--engine", "-e",
                         help="Whose memory rule sizes the KV cache (see docs/memory.md).")
MaxModelLenOpt = typer.Option(None, "--max-model-len",
                              help="Longest request (default: the model's).")
PartitionOpt = typer.Option(
    None, "--pp-layer-partition",
    help="Layers per pipeline stage, e.g. 5,6,5,6 (VLLM_PP_LAYER_PARTITION, "
         "SGLANG_PP_LAYER_PARTITION, TensorRT-LLM's pp_partition); default: the engine's split.")
# vLLM
GpuUtilOpt = _knob("--gpu-memory-utilization", "vLLM: fraction of device memory (default 0.9).")
MnbtOpt = _knob("--max-num-batched-tokens", "vLLM: tokens in the profiling forward (8192).")
MnsOpt = _knob("--max-num-seqs", "vLLM: rows in the sampler's profiling run (256).")
BlockOpt = _knob("--block-size", "vLLM: tokens per KV block (16; 64 for MLA).")
KvMemOpt = _knob("--kv-cache-memory-bytes", "vLLM: KV bytes per GPU (skips profiling).",
                 "--kv-cache-memory")
OverrideOpt = _knob("--num-gpu-blocks-override", "vLLM: force the number of KV blocks.")
# SGLang
MsfOpt = _knob("--mem-fraction-static",
               "SGLang: share of free memory for weights + KV pool (default by TP and GPU).")
PageOpt = _knob("--page-size", "SGLang: tokens per KV page (1).")
MaxTotalOpt = _knob("--max-total-tokens", "SGLang: cap on the KV pool's tokens.")
ChunkOpt = _knob("--chunked-prefill-size", "SGLang: prefill chunk (default by GPU memory).")
# TensorRT-LLM
FreeFracOpt = _knob("--free-gpu-memory-fraction",
                    "TensorRT-LLM: share of the memory left after weights and activations (0.9).")
TpbOpt = _knob("--tokens-per-block", "TensorRT-LLM: tokens per KV block (32).")
MaxNumTokOpt = _knob("--max-num-tokens", "TensorRT-LLM: tokens in the profiling run (8192).")
MaxTokOpt = _knob("--max-tokens", "TensorRT-LLM: cap on the KV cache's tokens.")


@app.command()
@report_errors
def memory(
    model: str = ModelOpt, gpu: str = GpuOpt, tp: int = TpOpt, pp: int = PpOpt,
    ep: int = EpOpt, dp: int = DpOpt, engine: Engine = EngineOpt,  # type: ignore[valid-type]
    max_model_len: int | None = MaxModelLenOpt, pp_layer_partition: str | None = PartitionOpt,
    gpu_memory_utilization: float | None = GpuUtilOpt, max_num_batched_tokens: int | None = MnbtOpt,
    max_num_seqs: int | None = MnsOpt, block_size: int | None = BlockOpt,
    kv_cache_memory_bytes: float | None = KvMemOpt,
    num_gpu_blocks_override: int | None = OverrideOpt,
    mem_fraction_static: float | None = MsfOpt, page_size: int | None = PageOpt,
    max_total_tokens: int | None = MaxTotalOpt, chunked_prefill_size: int | None = ChunkOpt,
    free_gpu_memory_fraction: float | None = FreeFracOpt, tokens_per_block: int | None = TpbOpt,
    max_num_tokens: int | None = MaxNumTokOpt, max_tokens: int | None = MaxTokOpt,
    dtype: WeightDType | None = DtypeOpt, kv_dtype: KvDType | None = KvDtypeOpt,
    profile: Path | None = ProfileOpt, as_json: bool = JsonOpt,
) -> None:
    """KV-cache plan of one instance: weights, activations, KV blocks, by the engine's rule.

    Each engine's knobs keep the engine's own names; giving one to another engine is an
    error. A plan that does not fit is one error line (with --json: the plan, exit 1).
    """
    knobs = dict(
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        block_size=block_size, kv_cache_memory_bytes=kv_cache_memory_bytes,
        num_gpu_blocks_override=num_gpu_blocks_override, mem_fraction_static=mem_fraction_static,
        page_size=page_size, max_total_tokens=max_total_tokens,
        chunked_prefill_size=chunked_prefill_size,
        free_gpu_memory_fraction=free_gpu_memory_fraction, tokens_per_block=tokens_per_block,
        max_num_tokens=max_num_tokens, max_tokens=max_tokens)
    plan = plan_engine_memory(
        engine.value, model, gpu, Parallelism(tp=tp, pp=pp, ep=ep, dp=dp),
        max_model_len=max_model_len, dtype=dtype.format if dtype else None,
        kv_dtype=kv_dtype.value if kv_dtype else None,
        profile=load_profile(gpu, profile) if profile else None,
        pp_layer_partition=pp_layer_partition, **knobs)
    if as_json:
        typer.echo(json.dumps(plan.as_dict(), indent=2))
        if not plan.fits:
            raise typer.Exit(1)
        return
    if not plan.fits:
        raise UserError(plan.reason)
    _print_memory_plan(plan, f"{model} on {gpu} tp={tp} pp={pp} · {engine.value} · "
                             f"memory per GPU")


def _print_memory_plan(plan: MemoryPlan, title: str) -> None:
    """The memory table (GiB per part), the engine's rule and the KV summary line of a plan
    that fits."""
    console = Console()
    table = Table(title=title)
    table.add_column("part")
    table.add_column("GiB", justify="right")
    rows = [
        ("device memory", plan.total_bytes),
        (f"budget ({plan.memory_fraction_name} {plan.memory_fraction:g})", plan.budget_bytes),
        ("weights", plan.weights_bytes),
        ("peak activation", plan.activation_bytes),
        ("non-torch (NCCL, workspaces)", plan.non_torch_bytes),
        ("KV cache", plan.available_kv_bytes),
    ]
    for name, v in rows:
        table.add_row(name, f"{v / GIB:.2f}")
    console.print(table)
    console.print(f"rule: {ENGINE_RULES[plan.engine]}")
    if len(plan.layers_per_stage) > 1:
        console.print(f"layers per stage {list(plan.layers_per_stage)}; "
                      f"stage {plan.worst_stage} holds the fewest KV tokens")
    unit = "pages" if plan.engine == "sglang" else "blocks"
    console.print(
        f"KV {plan.kv_bytes_per_token / 1024:.1f} KiB/token · {unit[:-1]} size "
        f"{plan.block_size} · [bold]{plan.num_gpu_blocks:,} {unit}[/bold] = "
        f"{plan.kv_tokens:,} usable tokens "
        f"({plan.kv_tokens / plan.max_model_len:.1f} × max_model_len {plan.max_model_len:,})"
    )
    if plan.kv_groups:  # a hybrid model: sliding-window / linear-attention layers
        state = (f" · linear-attention state {plan.state_bytes_per_request / 2**20:.1f} "
                 f"MiB/request" if plan.state_bytes_per_request else "")
        concurrent = (f" · {plan.max_concurrent_requests:,} requests of max_model_len at once"
                      if plan.max_concurrent_requests else "")
        console.print(f"{plan.kv_groups}{state}{concurrent}")


def _new_tokens(phase: Phase, input_len: int) -> int:
    """Tokens a request adds in the step: ``--input-len`` in a prefill, 1 in a decode."""
    if phase is Phase.decode and input_len != 1:
        raise UserError("--input-len applies to --phase prefill; a decode step adds 1 token")
    return input_len if phase is Phase.prefill else 1


def _check_positions(oracle: CostOracle, context_len: int, new: int, phase: Phase) -> None:
    """A request longer than the model's positions cannot be served: refuse it."""
    limit = oracle.model.max_position_embeddings
    if context_len + new > limit:
        what = (f"--input-len {new:,} + --context-len {context_len:,}" if phase is Phase.prefill
                else f"--context-len {context_len:,} + 1 decode token")
        raise UserError(f"{what} = {context_len + new:,} tokens per request exceeds "
                        f"{oracle.model.name}'s max_position_embeddings={limit:,}")


def _batch_memory(oracle: CostOracle, batch: int, tokens_per_request: int) -> BatchFit:
    """The batch's KV against vLLM's plan for this deployment; warns when it does not fit."""
    par = oracle.parallel
    plan = plan_memory(oracle.model, oracle.gpu, par, max_model_len=tokens_per_request,
                       dtype=oracle.quantization, kv_dtype=oracle.kv_dtype,
                       profile=oracle.profile)
    kv = batch_kv_fit(plan, batch, tokens_per_request)
    if plan.available_kv_bytes <= 0:
        typer.echo(f"warning: this step does not fit in memory: {plan.reason}", err=True)
    elif not kv.fits:
        where = f"{oracle.gpu.name} tp={par.tp}" + (f" pp={par.pp}" if par.pp > 1 else "")
        typer.echo(f"warning: this step does not fit in memory: batch {batch:,} × "
                   f"{tokens_per_request:,} tokens needs {kv.blocks_needed:,} KV blocks "
                   f"({kv.bytes_needed / GIB:.1f} GiB per GPU) but vLLM's plan on {where} "
                   f"holds {kv.blocks_available:,} ({kv.bytes_available / GIB:.1f} GiB)",
                   err=True)
    return kv


def _routing(model: str, ep: int, skew: float, redundant: int, eplb: bool,
             traffic: str = DEFAULT_TRAFFIC) -> MoERouting | None:
    """The routing flags as a :class:`MoERouting` (None when none is given)."""
    if not (skew or redundant or eplb or traffic != DEFAULT_TRAFFIC):
        return None
    spec = resolve_model(model)
    if not spec.is_moe:
        raise UserError(f"--moe-routing-skew, --redundant-experts, --enable-eplb, "
                        f"--moe-traffic: {spec.name} has no experts to route")
    routing = MoERouting(kind="zipf" if skew else "uniform", skew=skew,
                         redundant_experts=redundant, eplb=True if eplb else None,
                         traffic=traffic)
    routing.check(spec.num_experts, ep, spec.name, field="--redundant-experts")
    return routing


def _oracle(model, gpu, tp, pp, ep, dp, dtype, kv_dtype, cuda_graph, profile,
            routing=None) -> CostOracle:
    oracle = CostOracle(model, gpu, tp=tp, pp=pp, ep=ep, dp=dp,
                        dtype=dtype.format if dtype else None,
                        kv_dtype=kv_dtype.value if kv_dtype else None,
                        cuda_graph=cuda_graph, profile=profile, moe_routing=routing)
    check_dtype_supported(oracle.gpu, oracle.weight_dtype)
    return oracle
