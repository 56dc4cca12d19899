"""The options that name the deployment behind a benchmark run (``compare``, ``calibrate
--runs``), declared once, and the deployment they build."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from serveplan.errors import UserError


class EngineOpt(str, Enum):
    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"


class FormatOpt(str, Enum):
    vllm = "vllm"
    sglang = "sglang"
    aiperf = "aiperf"
    genai_perf = "genai-perf"
    guidellm = "guidellm"
    inference_perf = "inference-perf"


DeploymentFile = Annotated[Path | None, typer.Option(
    "--deployment", "-d", help="YAML with the deployment that ran (any form: colocated, pd, "
    "pools; a whole simulate config works too) instead of --model, --gpu, --tp, ...")]
Model = Annotated[str | None, typer.Option(
    "--model", help="Catalog name or HF config.json. Default: the model the result names.")]
Gpu = Annotated[str | None, typer.Option("--gpu", "-g", help="Catalog GPU name or GPU YAML.")]
TP = Annotated[int, typer.Option("--tp", min=1, max=64, help="Tensor-parallel size.")]
PP = Annotated[int, typer.Option("--pp", min=1, max=64, help="Pipeline-parallel size.")]
Instances = Annotated[int, typer.Option(
    "--num-instances", min=1, max=1024, help="Engine instances behind the endpoint.")]
Engine = Annotated[EngineOpt | None, typer.Option(
    "--engine", help="The engine that ran: its scheduler, defaults and runtime terms.")]
EngineVersion = Annotated[str | None, typer.Option(
    "--engine-version", help="e.g. 0.11.0 (default: the newest the engine profile knows).")]
RuntimeProfile = Annotated[Path | None, typer.Option(
    "--runtime-profile", help="Runtime terms written by `serveplan calibrate --runs`.")]
MaxNumSeqs = Annotated[int | None, typer.Option(
    "--max-num-seqs", min=1, max=1 << 16, help="The engine's max_num_seqs.")]
MaxBatchedTokens = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", min=1, max=1 << 24, help="The engine's per-step token budget.")]
MaxModelLen = Annotated[int | None, typer.Option(
    "--max-model-len", min=2, max=1 << 24, help="The engine's max_model_len.")]
NumGpuBlocks = Annotated[int | None, typer.Option(
    "--num-gpu-blocks", min=1, max=1 << 24, help="KV blocks per instance (the engine's log "
    "prints it).")]
PrefixCaching = Annotated[bool | None, typer.Option(
    "--prefix-caching/--no-prefix-caching", help="Automatic prefix caching (default: the "
    "engine's).")]
Format = Annotated[FormatOpt | None, typer.Option(
    "--format", help="The result's tool (default: from its file names and keys).")]
Seed = Annotated[int, typer.Option(
    "--seed", min=0, help="Seed of a send schedule the result does not record (vLLM's gamma "
    "gaps).")]
Sets = Annotated[list[str] | None, typer.Option(
    "--set", help="Any deployment field: --set deployment.pools.0.block_size=32.")]


def deployment_from_flags(*, model, gpu, tp, pp, count, engine, engine_version, knobs,
                          runtime_profile) -> dict:
    """A one-pool colocated deployment (pools form) from the flags."""
    if gpu is None:
        raise UserError("--gpu: name the GPU the run used (e.g. --gpu h100), or pass "
                        "--deployment FILE")
    pool = {"role": "colocated", "model": model, "gpu": gpu, "tp": tp, "pp": pp,
            "count": count, **{k: v for k, v in knobs.items() if v is not None}}
    if engine is not None:
        pool.update(engine=engine, engine_version=engine_version)
        if runtime_profile is not None:
            pool["runtime_profile"] = str(runtime_profile)
    elif engine_version is not None or runtime_profile is not None:
        raise UserError("--engine: --engine-version and --runtime-profile need the engine "
                        "(--engine vllm | sglang | trtllm)")
    return {"pools": [pool]}


def deployment_from_file(path: Path) -> dict:
    """The ``deployment`` mapping of a YAML file (a simulate config or a bare deployment)."""
    from serveplan.config import read_yaml

    data = read_yaml(path)
    dep = data.get("deployment", data) if isinstance(data, dict) else None
    if not isinstance(dep, dict) or not dep:
        raise UserError(f"{path}: deployment: expected a mapping (model, gpu, ... or pools)")
    return dep


def resolve_with_sets(dep: dict, sets: dict):
    """The resolved deployment after ``--set deployment.…`` overrides."""
    from serveplan.config_paths import set_path
    from serveplan.resolution import resolve

    data = {"deployment": dep}
    for key, value in sets.items():
        data = set_path(data, key, value)
    return resolve(data["deployment"])


DEPLOYMENT_FLAGS = ("deployment", "model", "gpu", "tp", "pp", "count", "engine",
                    "engine_version", "runtime_profile", "max_num_seqs",
                    "max_num_batched_tokens", "max_model_len", "num_gpu_blocks",
                    "prefix_caching")
"""The parameter names of the options above that describe the deployment."""


def run_deployment(run_model: str | None, result: Path, flags: dict, sets: list[str] | None):
    """The resolved deployment behind a run: ``--deployment FILE`` or the flags (a mapping
    of :data:`DEPLOYMENT_FLAGS` to the command's values), then ``--set``."""
    from serveplan.commands.common import parse_set

    f = {k: flags[k] for k in DEPLOYMENT_FLAGS}
    if f["deployment"] is not None:
        dep = deployment_from_file(f["deployment"])
    else:
        if not (f["model"] or run_model):
            raise UserError(f"--model: {result.name} does not name its model; pass --model")
        knobs = {"max_num_seqs": f["max_num_seqs"], "max_model_len": f["max_model_len"],
                 "max_num_batched_tokens": f["max_num_batched_tokens"],
                 "num_gpu_blocks": f["num_gpu_blocks"],
                 "enable_prefix_caching": f["prefix_caching"]}
        engine = f["engine"]
        dep = deployment_from_flags(
            model=f["model"] or run_model, gpu=f["gpu"], tp=f["tp"], pp=f["pp"],
            count=f["count"], engine=engine.value if isinstance(engine, Enum) else engine,
            engine_version=f["engine_version"], knobs=knobs,
            runtime_profile=f["runtime_profile"])
    resolved = resolve_with_sets(dep, parse_set(sets or []))
    note = other_model_note(run_model, result, resolved)
    if note:
        typer.echo(f"note: {note}", err=True)
    return resolved


ARCHITECTURE_FIELDS = ("model_type", "num_layers", "hidden_size", "num_heads",
                       "num_kv_heads", "intermediate_size", "num_experts")
"""What tells two models apart here: checkpoints of one architecture (an instruct or a
quantized variant, DeepSeek-R1 and V3) agree on all of them."""


def other_model_note(run_model: str | None, result: Path, resolved) -> str | None:
    """Why the run's model (as its result names it) is not the model the deployment
    simulates, or None: they share an architecture, or the name is none the catalog
    knows (a local path, a fine-tune's repo), so nothing can be said."""
    from serveplan.estimator.catalog import resolve_model
    from serveplan.estimator.specs import SpecError

    if not run_model:
        return None
    try:
        ran = resolve_model(run_model)
    except SpecError:
        return None
    simulated = [p.instance.oracle.model for p in resolved.pools]
    shape = [getattr(ran, f) for f in ARCHITECTURE_FIELDS]
    if any([getattr(m, f) for f in ARCHITECTURE_FIELDS] == shape for m in simulated):
        return None
    names = ", ".join(sorted({m.name for m in simulated}))
    return (f"{result.name} ran {run_model} ({ran.name}); the deployment simulates {names}, "
            "another architecture: check --model (or the --deployment file)")
