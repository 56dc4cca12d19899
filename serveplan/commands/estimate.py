"""``serveplan estimate`` and ``serveplan memory``."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from serveplan.commands.app import app
from serveplan.errors import UserError, report_errors
from serveplan.estimator.memory import GIB, MemoryPlan, plan_memory
from serveplan.estimator.oracle import CostOracle, check_dtype_supported
from serveplan.estimator.profile import load_profile
from serveplan.estimator.specs import Parallelism


class Phase(str, Enum):
    prefill = "prefill"
    decode = "decode"


class WeightDType(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


ModelOpt = typer.Option(..., "--model", "-m",
                        help="Catalog name (llama-3.1-8b, qwen3-30b-a3b, ...) or config.json path.")
GpuOpt = typer.Option(..., "--gpu", "-g", help="Catalog name (h100, h200, a100-80gb, ...) or YAML.")
TpOpt = typer.Option(1, "--tp", min=1, help="Tensor-parallel size.")
PpOpt = typer.Option(1, "--pp", min=1, help="Pipeline-parallel size.")
EpOpt = typer.Option(1, "--ep", min=1, help="Expert-parallel size (MoE).")
DpOpt = typer.Option(1, "--dp", min=1, help="Attention data-parallel size (MoE with EP).")
DtypeOpt = typer.Option(None, "--dtype", help="Weight dtype (default: the checkpoint's).")
KvDtypeOpt = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: model dtype).")
ProfileOpt = typer.Option(None, "--profile", exists=False,
                          help="Calibration profile JSON (default: shipped profile for the GPU).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


@app.command()
@report_errors
def estimate(
    model: str = ModelOpt,
    gpu: str = GpuOpt,
    tp: int = TpOpt,
    pp: int = PpOpt,
    ep: int = EpOpt,
    dp: int = DpOpt,
    phase: Phase = typer.Option(Phase.decode, "--phase", help="prefill or decode step."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Requests in the step."),
    input_len: int = typer.Option(
        1, "--input-len", min=1, help="Prefill: new prompt tokens per request."),
    context_len: int = typer.Option(
        0, "--context-len", min=0,
        help="Tokens already in the KV cache per request (decode context, or prefix hits)."),
    dtype: WeightDType | None = DtypeOpt,
    kv_dtype: WeightDType | None = KvDtypeOpt,
    cuda_graph: bool = typer.Option(True, "--cuda-graph/--no-cuda-graph",
                                    help="Replay pure-decode steps as CUDA graphs."),
    profile: Path | None = ProfileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Time of one engine step: per-module dispatch, compute and communication."""
    oracle = _oracle(model, gpu, tp, pp, ep, dp, dtype, kv_dtype, cuda_graph, profile)
    if phase is Phase.decode and input_len != 1:
        raise UserError("--input-len applies to --phase prefill; a decode step adds 1 token")
    bd = oracle.breakdown(phase=phase.value, batch_size=batch, input_len=input_len,
                          context=context_len)
    tokens = batch * (input_len if phase is Phase.prefill else 1)
    if as_json:
        out = bd.as_dict()
        out["config"] = oracle.describe()
        out["tokens"] = tokens
        out["tokens_per_s"] = tokens / bd.time_s
        typer.echo(json.dumps(out, indent=2))
        return
    console = Console()
    cfg = oracle.describe()
    title = (f"{cfg['model']} on {cfg['gpu']} tp={tp} pp={pp}"
             + (f" ep={ep}" if ep > 1 else "")
             + f" · {phase.value} batch={batch}"
             + (f" input_len={input_len}" if phase is Phase.prefill else "")
             + f" context_len={context_len}")
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


@app.command()
@report_errors
def memory(
    model: str = ModelOpt,
    gpu: str = GpuOpt,
    tp: int = TpOpt,
    pp: int = PpOpt,
    ep: int = EpOpt,
    dp: int = DpOpt,
    gpu_memory_utilization: float = typer.Option(
        0.9, "--gpu-memory-utilization", min=0.0, max=1.0,
        help="Fraction of device memory vLLM may use."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", min=1,
                                               help="Tokens in the profiling forward."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", min=1,
                                     help="Rows in the sampler's profiling run."),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", min=1, help="Longest request (default: the model's)."),
    block_size: int | None = typer.Option(
        None, "--block-size", min=1, help="Tokens per KV block (default 16; 64 for MLA)."),
    dtype: WeightDType | None = DtypeOpt,
    kv_dtype: WeightDType | None = KvDtypeOpt,
    kv_cache_memory: float | None = typer.Option(
        None, "--kv-cache-memory", min=0, help="Bytes of KV cache per GPU (skips profiling)."),
    num_gpu_blocks_override: int | None = typer.Option(
        None, "--num-gpu-blocks-override", min=1, help="Force the number of KV blocks."),
    profile: Path | None = ProfileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """KV-cache plan of one instance: weights, activations, KV blocks (vLLM V1's rule)."""
    par = Parallelism(tp=tp, pp=pp, ep=ep, dp=dp)
    prof = load_profile(gpu, profile) if profile else None
    plan = plan_memory(
        model, gpu, par, gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        max_model_len=max_model_len, block_size=block_size,
        dtype=dtype.value if dtype else None, kv_dtype=kv_dtype.value if kv_dtype else None,
        profile=prof, kv_cache_memory_bytes=kv_cache_memory,
        num_gpu_blocks_override=num_gpu_blocks_override,
    )
    if as_json:
        typer.echo(json.dumps(plan.as_dict(), indent=2))
        if not plan.fits:
            raise typer.Exit(1)
        return
    if not plan.fits:
        raise UserError(plan.reason)
    _print_memory_plan(plan, f"{model} on {gpu} tp={tp} pp={pp} · memory per GPU")


def _print_memory_plan(plan: MemoryPlan, title: str) -> None:
    """The memory table (GiB per part) and the KV block summary line of a plan that fits."""
    console = Console()
    table = Table(title=title)
    table.add_column("part")
    table.add_column("GiB", justify="right")
    rows = [
        ("device memory × utilization", plan.total_bytes * plan.gpu_memory_utilization),
        ("weights", plan.weights_bytes),
        ("peak activation", plan.activation_bytes),
        ("non-torch (NCCL, workspaces)", plan.non_torch_bytes),
        ("KV cache", plan.available_kv_bytes),
    ]
    for name, v in rows:
        table.add_row(name, f"{v / GIB:.2f}")
    console.print(table)
    console.print(
        f"KV {plan.kv_bytes_per_token / 1024:.1f} KiB/token · block_size {plan.block_size} · "
        f"[bold]{plan.num_gpu_blocks:,} blocks[/bold] = {plan.kv_tokens:,} tokens "
        f"({plan.kv_tokens / plan.max_model_len:.1f} × max_model_len {plan.max_model_len:,})"
    )


def _oracle(model, gpu, tp, pp, ep, dp, dtype, kv_dtype, cuda_graph, profile) -> CostOracle:
    oracle = CostOracle(model, gpu, tp=tp, pp=pp, ep=ep, dp=dp,
                        dtype=dtype.value if dtype else None,
                        kv_dtype=kv_dtype.value if kv_dtype else None,
                        cuda_graph=cuda_graph, profile=profile)
    check_dtype_supported(oracle.gpu, oracle.weight_dtype)
    return oracle
