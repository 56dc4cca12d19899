"""Calibration profiles: every constant of the cost model, per GPU (and engine).

A profile holds what the roofline does not know by itself: efficiencies ``e_c`` / ``e_m``
per op family and phase (BestServe eq. 3), CPU dispatch time per module (Algorithm 1),
kernel and graph launch costs, collective efficiency, the per-step engine overhead, and
memory-planner constants. Defaults live here; fitted profiles ship as JSON in
``data/profiles/<gpu>.json`` and load automatically; ``--profile FILE`` overrides both.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from .catalog import resolve_gpu
from .correctors import GridTable
from .notes import announce_once
from .specs import GPUSpec, SpecError, check_phase_speed, read_text_file
from .validation import file_problems

FAMILIES = ("gemm", "attention", "elementwise", "moe", "comm")
MODULES = ("embedding", "norm", "attention", "mlp", "moe", "final_norm", "lm_head", "sampler")


class Efficiency(BaseModel):
    """MFU ``e_c`` and MBU ``e_m`` of one op family in one phase (0 < e <= 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ec: float = Field(gt=0, le=1)
    em: float = Field(gt=0, le=1)


class PhaseEfficiency(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    prefill: Efficiency
    decode: Efficiency


def _eff(pc, pm, dc, dm) -> PhaseEfficiency:
    return PhaseEfficiency(prefill=Efficiency(ec=pc, em=pm), decode=Efficiency(ec=dc, em=dm))


class Profile(BaseModel):
    """All tunable constants of the cost model for one GPU (+ engine).

    ``attention_impl``: ``fused`` models vLLM's kernels (fused norms and activations,
    FlashAttention / paged attention reading each request's KV); ``eager`` models the
    unfused Hugging Face operator sequence of BestServe's Tables 6-13 (materialised score
    matrix, fp32 upcast, repeat_kv), for reproducing that paper.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    source: str = "hand-set defaults (not fitted)"
    attention_impl: Literal["fused", "eager"] = "fused"
    efficiency: dict[str, PhaseEfficiency] = Field(
        default_factory=lambda: {
            "gemm": _eff(0.70, 0.80, 0.60, 0.75),
            "attention": _eff(0.50, 0.70, 0.50, 0.65),
            "elementwise": _eff(0.50, 0.60, 0.50, 0.50),
            "moe": _eff(0.50, 0.65, 0.40, 0.60),
            "comm": _eff(0.70, 0.70, 0.50, 0.50),
        }
    )
    # CPU dispatch per module instance in eager mode (seconds)
    dispatch_s: dict[str, float] = Field(
        default_factory=lambda: {
            "embedding": 10e-6,
            "norm": 8e-6,
            "attention": 45e-6,
            "mlp": 25e-6,
            "moe": 60e-6,
            "final_norm": 8e-6,
            "lm_head": 15e-6,
            "sampler": 60e-6,
        }
    )
    kernel_fixed_s: float = Field(2.0e-6, ge=0, description="GPU time every kernel costs")
    kernel_fixed_family_s: dict[str, float] = Field(
        default_factory=dict,
        description="per-family override of kernel_fixed_s (fitted profiles set these)",
    )
    graph_launch_s: float = Field(30e-6, ge=0, description="CPU time to replay one CUDA graph")
    step_overhead_s: float = Field(
        0.5e-3, ge=0, description="engine CPU time per step outside the forward pass"
    )
    flash_tile: int = Field(128, gt=0, description="FlashAttention query tile (rows)")
    comm_latency_s: float | None = Field(
        None, ge=0, description="per-collective latency; default: the GPU's scale-up latency"
    )
    # memory planner
    non_torch_bytes: float = Field(
        0.25 * 2**30, ge=0, description="cuBLAS/attention workspaces and allocator slack per rank"
    )
    nccl_bytes: dict[int, float] = Field(
        default_factory=lambda: {1: 0.0, 2: 342e6, 4: 392e6, 8: 392e6},
        description="NCCL buffers per rank by group size (aiconfigurator's observed values)",
    )
    phase_speed: dict[str, float] = Field(
        default_factory=dict,
        description="GPU time of the compute and memory work per phase divided by these "
        "('prefill', 'decode'; collectives and kernel launches not): a borrowed profile's, "
        "from its GPU's lender_speed",
    )
    correctors: dict[str, GridTable] = Field(
        default_factory=dict,
        description="learned residual correctors by name (serveplan.estimator.correctors)",
    )
    provenance: dict[str, Any] = Field(
        default_factory=dict, description="how the profile was made: data, versions, command"
    )

    def eff(self, family: str, phase: str) -> Efficiency:
        return getattr(self.efficiency[family], phase)

    def priced_eff(self, family: str, phase: str) -> tuple[float, float]:
        """``(e_c, e_m)`` the oracle prices ``family`` with in ``phase``: :meth:`eff` times
        the phase's :attr:`phase_speed` (collectives: :meth:`eff`)."""
        e = self.eff(family, phase)
        speed = 1.0 if family == "comm" else self.phase_speed.get(phase, 1.0)
        return e.ec * speed, e.em * speed

    def kernel_fixed(self, family: str) -> float:
        """Fixed GPU seconds of one kernel of ``family``."""
        return self.kernel_fixed_family_s.get(family, self.kernel_fixed_s)

    def nccl(self, group: int) -> float:
        if group <= 1:
            return 0.0
        keys = sorted(k for k in self.nccl_bytes if k <= group) or [min(self.nccl_bytes)]
        return self.nccl_bytes[keys[-1]]

    @field_validator("efficiency")
    @classmethod
    def _check_efficiency(cls, efficiency: dict) -> dict:
        missing = [f for f in FAMILIES if f not in efficiency]
        if missing:
            raise SpecError(f"lacks families {missing}")
        return efficiency

    @field_validator("dispatch_s", "kernel_fixed_family_s")
    @classmethod
    def _check_keys(cls, per_key: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        what, known = (("module", MODULES) if info.field_name == "dispatch_s" else
                       ("family", FAMILIES))
        unknown = [k for k in per_key if k not in known]
        if unknown:
            raise SpecError(f"unknown {what}(s) {unknown}; known: {known}")
        return per_key

    @field_validator("phase_speed")
    @classmethod
    def _check_phase_speed(cls, phase_speed: dict[str, float]) -> dict[str, float]:
        check_phase_speed("phase_speed", phase_speed)
        return phase_speed


ENGINES = ("vllm", "trtllm", "sglang")
DEFAULT_ENGINE = "vllm"


def bundled_profile_name(gpu: str, engine: str = DEFAULT_ENGINE) -> str:
    """File name of the shipped profile of ``gpu`` under ``engine`` (vLLM: ``<gpu>.json``)."""
    return f"{gpu}.json" if engine == DEFAULT_ENGINE else f"{gpu}-{engine}.json"


def _shipped(name: str, engine: str) -> Profile | None:
    path = resources.files(__package__).joinpath("data", "profiles",
                                                  bundled_profile_name(name, engine))
    if not path.is_file():
        return None
    return Profile(**json.loads(path.read_text()))


def _shipped_gpus(engine: str) -> list[str]:
    """The GPUs with a shipped profile under ``engine``."""
    names = {f.name for f in resources.files(__package__).joinpath("data", "profiles").iterdir()}
    gpus = {n.removesuffix(".json") for n in names if n.endswith(".json")
            and not any(n.endswith(f"-{e}.json") for e in ENGINES)}
    return sorted(g for g in gpus if bundled_profile_name(g, engine) in names)


def _bundled(gpu: str | GPUSpec, engine: str = DEFAULT_ENGINE) -> Profile | None:
    """The shipped profile of ``gpu`` under ``engine``; for a GPU without one, that of the
    GPU its catalog entry borrows from (``profile_from``: the same SM architecture, e.g.
    B300 and GB200 from B200), its provenance saying so; else None."""
    if not isinstance(gpu, GPUSpec):
        try:
            gpu = resolve_gpu(gpu)
        except SpecError:  # a name outside the catalog: only its own file can match
            return _shipped(str(gpu), engine)
    own = _shipped(gpu.name, engine)
    if own is not None or gpu.profile_from is None:
        return own
    lender = _shipped(gpu.profile_from, engine)
    if lender is None:
        raise SpecError(f"GPU {gpu.name}: profile_from {gpu.profile_from!r} names no GPU with "
                        f"a shipped {engine} profile; those GPUs: {', '.join(_shipped_gpus(engine))}")
    note = {"borrowed_by": gpu.name, "borrowed_from": gpu.profile_from, "reason": (
        f"no per-op data for {gpu.name}; fractions of peak fitted on {gpu.profile_from}, "
        "the same SM architecture, applied to its own peaks")}
    speed = dict(gpu.lender_speed or {})
    if speed:
        note["lender_speed"] = speed
    return lender.model_copy(update={"name": f"{lender.name} (for {gpu.name})",
                                     "provenance": {**lender.provenance, **note},
                                     "phase_speed": speed})


def load_profile(gpu: str | GPUSpec | None = None, path: str | Path | None = None) -> Profile:
    """The profile at ``path`` if given, else the shipped one for ``gpu`` (or for the GPU
    its catalog entry borrows from, ``profile_from``), else defaults.

    ``path`` may also name an engine (``vllm``, ``trtllm``, ``sglang``): the shipped
    profile fitted on that engine's measurements for ``gpu`` (``--profile trtllm``).
    """
    if path is not None and str(path) in ENGINES and not Path(path).exists():
        prof = _bundled(gpu, str(path)) if gpu is not None else None
        if prof is None:
            name = gpu.name if isinstance(gpu, GPUSpec) else gpu
            raise SpecError(f"no shipped {path} profile for GPU {name!r}")
        return prof
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise SpecError(f"{p}: no such profile file" if not p.exists() else
                            f"{p}: not a file (expected a calibration profile JSON)")
        try:
            text = read_text_file(p, "a calibration profile JSON")
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except OSError as exc:
            raise SpecError(f"{p}: cannot read ({exc.strerror})") from None
        if not isinstance(data, dict):
            raise SpecError(f"{p}: expected a JSON object of profile fields, got "
                            f"{type(data).__name__}")
        try:
            return Profile(**data)
        except ValidationError as exc:
            raise SpecError(file_problems(exc, p, text, root="profile")) from None
    if gpu is not None:
        prof = _bundled(gpu)
        if prof is not None:
            return prof
        _announce_uncalibrated(gpu)
    return Profile()


def _announce_uncalibrated(gpu: str | GPUSpec) -> None:
    """Say once that ``gpu``'s steps are priced by the :class:`Profile` defaults."""
    name = gpu.name if isinstance(gpu, GPUSpec) else str(gpu)
    announce_once(
        f"GPU {name} has no calibration profile (none shipped, no profile_from): its steps "
        "are priced at the default fractions of peak, which no measurement fitted, so "
        "expect larger errors than on the calibrated GPUs "
        f"({', '.join(_shipped_gpus(DEFAULT_ENGINE))}, and those borrowing their "
        "profiles). In a GPU YAML, profile_from names a calibrated GPU of the same "
        "architecture to borrow from; --profile loads your own (docs/calibration.md).")


def bestserve_910b3_profile() -> Profile:
    """BestServe §4.1 / Table 3 constants for CodeLlama-34B on Ascend 910B3.

    e_c = 0.65 both phases; e_m = 0.6 (prefill) / 0.3 (decode); e_+ = 0.6 / 0.3;
    dispatch per module from Table 3 (RMSNorm 0.024 ms, Attention 0.190 ms, MLP 0.041 ms);
    unfused operator tables (``attention_impl='eager'``); no per-kernel or per-step extras.
    """
    e = _eff(0.65, 0.6, 0.65, 0.3)
    return Profile(
        name="bestserve-910b3",
        source="BestServe (arXiv 2506.05871) section 4.1 and Table 3",
        attention_impl="eager",
        efficiency={
            "gemm": e,
            "attention": e,
            "elementwise": e,
            "moe": e,
            "comm": _eff(0.6, 0.6, 0.3, 0.3),
        },
        dispatch_s={
            "embedding": 0.0,
            "norm": 0.024e-3,
            "attention": 0.190e-3,
            "mlp": 0.041e-3,
            "moe": 0.041e-3,
            "final_norm": 0.0,
            "lm_head": 0.0,
            "sampler": 0.0,
        },
        kernel_fixed_s=0.0,
        graph_launch_s=0.0,
        step_overhead_s=0.0,
        comm_latency_s=0.0,
    )
