"""Deployment configs: a list of role pools, and the two older forms it generalizes.

The pool form lists pools of identical instances, each with a ``role``, a ``count`` (alias
``num_instances``) and every :class:`InstanceConfig` field (model, GPU, parallelism, dtype,
scheduler, vLLM engine knobs)::

    deployment:
      pools:
        - {role: prefill, model: llama-3.1-8b, gpu: h100, count: 2, max_num_seqs: 16}
        - {role: decode,  model: llama-3.1-8b, gpu: h200, count: 4, tp: 2}
      router: least-loaded       # entry router: colocated instances, or prefill instances
      decode_router: sibyl       # prefill -> decode boundary (prefill/decode pools only)

Roles are one ``colocated`` pool; one ``prefill`` and one ``decode`` pool; or, for
attention/FFN disaggregation (``architecture: afd``), one ``prefill``, one ``attention`` and
one ``ffn`` pool (the attention instances hold the KV cache and run attention, the FFN
instances the FFN or experts; ``micro_batches`` and the ``afd_link*`` options shape the
per-layer activation ping-pong between them, :mod:`serveplan.sim.afd_cost`). All pools serve
the same model. The prefill/decode boundary takes the options of :class:`PDDeployment`
(``assignment``, ``layerwise_transfer``, ``placement``, ``kv_link_bw``,
``kv_link_latency_s``, ``kv_connector``, ``prefill_stage``, ``prefill_hold``,
``decode_cost``, ``first_token``, ``sibyl``); ``router`` is the colocated router
(``round-robin``, ``least-outstanding-tokens``, ``least-requests``) or the prefill router
(``least-loaded``, ``round-robin``), by architecture.

The older forms stay valid: :class:`Deployment` (one colocated pool, ``architecture:
colocated``) and :class:`PDDeployment` (``architecture: pd`` with ``prefill`` and
``decode``). They convert at the edges: :func:`to_pools` (any form to
:class:`PoolsDeployment`) and :func:`to_legacy` (to :class:`Deployment` or
:class:`PDDeployment`, for code written against those); :func:`parse_architecture` reads any
form from a mapping. :mod:`serveplan.config` re-exports everything here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from serveplan.config_bounds import (  # noqa: F401  (re-exported for the config modules)
    MAX_BLOCKS,
    MAX_GPUS,
    MAX_INSTANCES,
    MAX_REQUESTS,
    MAX_SEQS,
    MAX_TOKENS,
    Blocks,
    Gpus,
    Instances,
    Requests,
    SchedulerSteps,
    Seqs,
    Tokens,
    _Frozen,
    at_least,
    at_most,
)
from serveplan.config_names import (  # noqa: F401  (re-exported for the config modules)
    DECODE_ROUTER_ALIASES,
    STATE_DTYPE_ALIASES,
    WEIGHT_DTYPE_ALIASES,
    DecodeRouter,
    DecodeRouterName,
    DTypeName,
    EngineName,
    PrefillRouterName,
    RoleName,
    RouterName,
    SchedulerName,
    StateDType,
    WeightDType,
    WeightDTypeName,
)
from serveplan.engine_knobs_config import AttentionDPConfig, engine_knob_problem
from serveplan.estimator.routing import MoERouting
from serveplan.kv_offload import KVOffloadConfig, host_memory_problem
from serveplan.scheduler_knobs_config import SchedulerKnobsConfig
from serveplan.speculative import SpeculativeConfig


# ----------------------------------------------------------------------------- instances
class EngineConfig(_Frozen):
    """vLLM engine knobs (names and defaults as ``vllm serve``)."""

    max_num_seqs: Seqs = Field(256, ge=1)
    max_num_batched_tokens: Tokens | None = Field(
        None, ge=1, description="Token budget per step. Default: 8192 with chunked prefill, "
        "else max(max_model_len, 2048) as vLLM.")
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    block_size: Tokens | None = Field(None, ge=1, description="Default 16 (64 for MLA models).")
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: Tokens = Field(0, ge=0)
    num_gpu_blocks: Blocks | None = Field(
        None, ge=2, description="Override the memory planner (vLLM num_gpu_blocks_override; "
        "one block is vLLM's null block).")
    max_model_len: Tokens | None = Field(None, ge=2, description="Default: the model's context.")
    watermark: float | None = Field(
        None, ge=0.0, lt=1.0, description="Fraction of blocks kept free when admitting; "
        "default 0 (vLLM v1), 0.01 for prefill-priority (vLLM v0).")
    async_scheduling: bool | None = Field(
        None, description="Schedule the next step while this one runs (vLLM "
        "--async-scheduling, SGLang/TRT-LLM overlap scheduler). Default: the engine's.")
    num_scheduler_steps: SchedulerSteps | None = Field(
        None, ge=1, description="vLLM <= 0.6 multi-step decoding (--num-scheduler-steps).")
    enable_mixed_chunk: bool | None = Field(None, description="SGLang --enable-mixed-chunk.")
    scheduler_recv_interval: SchedulerSteps | None = Field(
        None, ge=1, description="SGLang --scheduler-recv-interval: new requests are read "
        "every N decode iterations (at once after a prefill or when idle). Default 1.")
    api_servers: Instances | None = Field(
        None, ge=1, description="API server processes per instance, which set requests up and "
        "tokenize them side by side (vLLM --api-server-count, SGLang --tokenizer-worker-num). "
        "Default 1.")
    batch_wait_timeout_iters: SchedulerSteps | None = Field(
        None, ge=0, description="TensorRT-LLM: hold new contexts while generation runs, for "
        "up to N iterations, until the step would hold batch_wait_max_tokens_ratio x "
        "max_num_tokens tokens. Default 0 (off).")
    batch_wait_max_tokens_ratio: float | None = Field(None, ge=0.0, le=1.0)
    new_token_ratio: float | None = Field(
        None, ge=0.0, le=1.0, description="SGLang's initial reservation of future decode "
        "tokens (init_new_token_ratio); 0 = none.")
    schedule_policy: Literal["fcfs", "lpm"] | None = Field(
        None, description="SGLang --schedule-policy: fcfs (the default) or lpm (the waiting "
        "queue by longest cached prefix, up to 128 waiting).")
    allreduce_fusion: bool | None = Field(
        None, description="Residual-add + RMSNorm inside each tensor-parallel all-reduce "
        "(TensorRT-LLM's default; SGLang --enable-flashinfer-allreduce-fusion); not under "
        "attention DP. Default: the engine's (off without one).")

    @model_validator(mode="after")
    def _budget_holds_seqs(self):
        mnbt = self.max_num_batched_tokens
        if mnbt is not None and mnbt < self.max_num_seqs:
            raise _error(type(self).__name__, ("max_num_batched_tokens",),
                         f"must be >= max_num_seqs ({self.max_num_seqs}), as vLLM requires; "
                         f"got {mnbt}", mnbt)
        return self


class InstanceConfig(EngineConfig):
    """One serving instance: model, hardware, parallelism, scheduler and engine knobs."""

    model: str = Field(description="Catalog name or HF config.json path.")
    gpu: str = Field(description="Catalog name or GPU YAML path.")
    tp: Gpus = Field(1, ge=1)
    pp: Gpus = Field(1, ge=1)
    ep: Gpus = Field(1, ge=1)
    dp: Gpus = Field(1, ge=1)
    dtype: WeightDType | None = Field(
        None, description="Every weight class in one format: bf16, fp16, fp8, fp8_block, "
        "nvfp4 (or fp4), mxfp4, int4; default: the checkpoint's quantization.")
    kv_dtype: DTypeName | None = None
    mamba_ssm_dtype: StateDType | None = Field(
        None, description="dtype of a hybrid model's recurrent (linear-attention / SSM) "
        "state, as vLLM's and SGLang's --mamba-ssm-dtype: fp32, bf16 or fp16 (float32, "
        "bfloat16, float16); default: the checkpoint's mamba_ssm_dtype (fp32 for Qwen3.5).")
    quantization: str | dict[str, Any] | None = Field(
        None, description="A checkpoint's quantization applied to the model's layers: a path "
        "to ModelOpt's hf_quant_config.json or to a config.json with a quantization_config, or "
        "the same block inline (e.g. {quant_algo: NVFP4, kv_cache_quant_algo: FP8, "
        "exclude_modules: [lm_head]}); docs/precision.md.")
    cuda_graph: bool = True
    cuda_graph_sizes: list[Annotated[int, Field(ge=1, le=1 << 20)]] | None = Field(
        None, min_length=1, description="The engine's CUDA-graph capture sizes (vLLM "
        "cudagraph_capture_sizes, SGLang --cuda-graph-bs, TensorRT-LLM cuda_graph_config."
        "batch_sizes); a step is padded to the next (cuda_graph_padding), beyond the largest "
        "it runs eager. Default: SGLang's own list (by GPU memory and tp) for engine: sglang, "
        "TensorRT-LLM's for engine: trtllm (max_batch_size 128), else vLLM's from "
        "max_num_seqs.")
    cuda_graph_padding: bool | None = Field(
        None, description="Pad a decode step to the next capture size (TensorRT-LLM "
        "cuda_graph_config.enable_padding); false: only a batch of exactly a capture size "
        "replays a graph, the others run eager. Default: false for engine: trtllm, as "
        "TensorRT-LLM; vLLM and SGLang always pad.")
    profile: str | None = Field(None, description="Calibration profile JSON path.")
    scheduler: SchedulerName = "vllm-v1"
    engine: EngineName | None = Field(
        None, description="Serving engine whose runtime to model (scheduler, knob defaults, "
        "front end and per-step CPU terms of its shipped profile); none: the GPU steps alone.")
    engine_version: str | None = Field(
        None, description="Engine version (e.g. 0.19.0); default: the newest the profile knows.")
    runtime_profile: str | None = Field(
        None, description="Runtime profile JSON path (default: the engine's shipped profile).")
    moe_routing: MoERouting | None = Field(
        None, description="MoE routing skew and expert placement across the ep ranks, e.g. "
        "{kind: zipf, skew: 1.0, redundant_experts: 32} (serveplan.estimator.routing); "
        "default uniform.")
    scheduler_knobs: SchedulerKnobsConfig | None = Field(
        None, description="Knobs of the session-aware schedulers skip-join-mlfq and h2q-br "
        "(docs/sessions.md); default: the paper's values where it gives them.")
    kv_offload: KVOffloadConfig | None = Field(
        None, description="A CPU KV tier per instance, e.g. {cpu_gb: 64} "
        "(serveplan.kv_offload); default none.")
    attention_dp_config: AttentionDPConfig | None = Field(
        None, description="TensorRT-LLM attention_dp_config (dp > 1), e.g. {enable_balance: "
        "true, timeout_iters: 60, batching_wait_iters: 0}; default none (no balance).")

    @model_validator(mode="after")
    def _one_weight_format(self):
        if self.dtype is not None and self.quantization is not None:
            raise _error(type(self).__name__, ("quantization",), "give dtype (one format for "
                         "every weight class) or quantization, not both", self.quantization)
        return self

    @model_validator(mode="after")
    def _engine_knobs_match_the_engine(self):
        problem = engine_knob_problem(self)
        if problem:
            raise _error(type(self).__name__, (problem[0],), problem[1], problem[2])
        return self

    @model_validator(mode="after")
    def _offload_fits_host(self):
        c = self.kv_offload
        problem = c and host_memory_problem(c, self.tp * self.pp, self.tp * self.pp * self.dp)
        if problem:
            raise _error(type(self).__name__, ("kv_offload", c.size_field), problem,
                         getattr(c, c.size_field))
        return self
    speculative: SpeculativeConfig | None = Field(
        None, description="Speculative decoding (vLLM --speculative-config): method, "
        "num_speculative_tokens, acceptance, draft_model (serveplan.speculative); "
        "colocated and decode pools.")


INSTANCE_FIELDS = tuple(InstanceConfig.model_fields)


def instance_fields(config: InstanceConfig) -> dict:
    """The :class:`InstanceConfig` fields the user set on ``config`` (a deployment or a
    pool): unset ones keep their defaults, so an engine's own defaults can fill them."""
    return {name: getattr(config, name) for name in INSTANCE_FIELDS
            if name in config.model_fields_set}


def _error(model: str, loc: tuple, message: str, value) -> ValidationError:
    """A validation error at ``loc`` (relative to the model being validated)."""
    return ValidationError.from_exception_data(model, [InitErrorDetails(
        type=PydanticCustomError("deployment", "{message}", {"message": message}),
        loc=loc, input=value)])


def _same_model(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


# ----------------------------------------------------------------------------- older forms
class Deployment(InstanceConfig):
    """Colocated deployment: ``num_instances`` identical instances behind a router."""

    architecture: Literal["colocated"] = "colocated"
    num_instances: Instances = Field(1, ge=1)
    router: RouterName = "round-robin"

    def to_pools(self) -> PoolsDeployment:
        return to_pools(self)


class Pool(InstanceConfig):
    """``num_instances`` identical instances of one role (a PD pool)."""

    num_instances: Instances = Field(1, ge=1)


class FittedThroughputConfig(_Frozen):
    """SIBYL's fitted decode throughput (Appendix I, Eq. 15): an instance running ``N``
    requests makes ``TPS(N) = alpha N^2 + beta N + gamma`` tokens/s, split equally; floored
    at ``min_tps``. Defaults: the paper's H20 / Qwen3-32B fit."""

    kind: Literal["fitted-throughput"] = "fitted-throughput"
    alpha: float = -0.423
    beta: float = 44.766
    gamma: float = -7.753
    min_tps: float = Field(1.0, gt=0)
    plateau: bool = Field(False, description="Hold TPS at its peak beyond the peak's batch "
                          "size (the paper's prose) instead of the raw quadratic (its simulator).")


class SibylConfig(_Frozen):
    """SIBYL router settings (``papers/sibyl.txt`` §4.2)."""

    delta: float = Field(128.0, ge=1, le=MAX_TOKENS, description="Survival bucket step "
                         "(tokens; outputs are whole tokens, so at least 1).")
    alpha: float = Field(0.99, gt=0, lt=1, description="EMA weight of the old value (Eq. 4).")
    max_length: Tokens | None = Field(None, ge=1, description="Longest output resolved; "
                                   "default: the decode pool's max_model_len.")
    pending_capacity: Requests | None = Field(None, ge=1, description="Pending slots per decode "
                                         "instance (default max(256, 8 n / n_decode)).")
    prior_samples: Requests = Field(0, ge=0, description="Output lengths drawn from the "
                                    "workload's own output-length law (another seed) whose "
                                    "Kaplan-Meier estimate starts the survival estimator; 0: "
                                    "it starts at 1 (every request survives until completions "
                                    "are seen).")
    tie_break: Literal["rotation", "lowest", "random"] = Field(
        "rotation", description="Among equally loaded decode instances: the next in turn "
        "(rotation), the lowest index, or a random one (every decode router).")


class _Boundary(_Frozen):
    """The prefill -> decode boundary options shared by the PD and pool forms."""

    assignment: Literal["early", "late"] = "early"
    layerwise_transfer: bool = False
    placement: Literal["packed", "separate"] = "packed"
    kv_link_bw: Annotated[float, at_least(1e6, "bytes/s; a KV cache of a few hundred MB "
                                          "then takes minutes per request")] | None = Field(
        None, gt=0, allow_inf_nan=False)
    kv_link_latency_s: Annotated[float, at_most(60, "seconds; links start a transfer within "
                                                "microseconds")] | None = Field(None, ge=0)
    kv_connector: str = "NixlConnector"
    prefill_stage: Literal["engine", "delay"] = "engine"
    prefill_hold: Seqs | None = Field(None, ge=0, description="Finished prefills whose KV an "
                                     "instance holds before admitting fewer (default 256).")
    decode_cost: Literal["oracle"] | FittedThroughputConfig = "oracle"
    first_token: Literal["prefill", "decode", "recompute"] | None = Field(
        None, description="Where the client's first token comes from: the prefill's step; "
        "the decode instance as it starts decoding the request (decode: SGLang's and "
        "TensorRT-LLM's disaggregated serving; TTFT then counts the KV transfer); or the end "
        "of the decode instance's first step, which recomputes the last prompt token "
        "(recompute: vLLM's NixlConnector). Default: the named engine's way, else prefill.")
    sibyl: SibylConfig = SibylConfig()

    @model_validator(mode="after")
    def _layerwise_early(self):
        if self.layerwise_transfer and self.assignment != "early":
            raise ValueError("layerwise_transfer needs assignment: early (the decode instance "
                             "must be known when the prefill starts)")
        return self


BOUNDARY_FIELDS = tuple(_Boundary.model_fields)


class _PDPools(_Frozen):
    architecture: Literal["pd"] = "pd"
    prefill: Pool
    decode: Pool
    router: DecodeRouter = "round-robin"
    prefill_router: PrefillRouterName = "least-loaded"


class PDDeployment(_Boundary, _PDPools):  # this base order keeps the fields in file order
    """Prefill/decode disaggregation: a prefill pool hands KV caches to a decode pool.

    ``router`` binds each request to a decode instance, at dispatch (``assignment: early``)
    or at its prefill end (``late``); ``prefill_router`` picks its prefill instance. KV moves
    over NVLink between instances on one node and over the scale-out network otherwise
    (``placement``: ``packed`` puts the decode pool right after the prefill pool,
    ``separate`` on its own nodes); ``kv_link_bw`` (bytes/s per GPU) and
    ``kv_link_latency_s`` override the GPU's links. ``layerwise_transfer`` streams KV while
    the prefill runs (early assignment only). ``prefill_stage: delay`` replaces the prefill
    pool by SIBYL's infinite-server delay (each prefill alone, no queueing);
    ``decode_cost`` may be SIBYL's fitted throughput instead of the cost oracle.
    ``kv_connector`` names vLLM's KV connector for launch export. Both pools serve the
    same model.
    """

    @model_validator(mode="after")
    def _one_model(self):
        p, d = self.prefill.model, self.decode.model
        if not _same_model(p, d):
            raise _error("PDDeployment", ("decode", "model"),
                         f"{d!r} differs from prefill.model {p!r}: the prefill and decode "
                         "pools must serve the same model", d)
        return self

    def to_pools(self) -> PoolsDeployment:
        return to_pools(self)


# ----------------------------------------------------------------------------- pool form
ROLE_SETS = {("colocated",): "colocated", ("decode", "prefill"): "pd",
             ("attention", "ffn", "prefill"): "afd"}
ROLE_ORDER = {"colocated": 0, "prefill": 1, "decode": 2, "attention": 3, "ffn": 4}
ENTRY_ROUTERS = {"colocated": (*get_args(RouterName), "sibyl"), "afd": get_args(PrefillRouterName),
                 "pd": get_args(PrefillRouterName)}  # colocated sibyl: the pool form only
ENTRY_ROUTER_ALIASES = {"colocated": {"rr": "round-robin", "least-loaded":
                                      "least-outstanding-tokens"},
                        "pd": {"rr": "round-robin"}, "afd": {"rr": "round-robin"}}
DEFAULT_ENTRY_ROUTER = {"colocated": "round-robin", "pd": "least-loaded", "afd": "least-loaded"}
PD_ONLY_FIELDS = ("decode_router", *(f for f in BOUNDARY_FIELDS if f != "sibyl"))
AFD_ONLY_FIELDS = ("micro_batches", "afd_link", "afd_link_bw", "afd_link_latency_s")


class PoolConfig(InstanceConfig):
    """``count`` identical instances with one ``role`` (``num_instances`` is an alias)."""

    role: RoleName
    count: Instances = Field(1, ge=1, description="Instances in the pool.")

    @model_validator(mode="before")
    @classmethod
    def _count_alias(cls, data):
        if isinstance(data, Mapping) and "num_instances" in data:
            if "count" in data:
                raise PydanticCustomError("deployment", "give count or num_instances (its "
                                          "alias), not both")
            data = {("count" if k == "num_instances" else k): v for k, v in data.items()}
        return data


def _role_of(pool) -> str | None:
    role = pool.get("role") if isinstance(pool, Mapping) else getattr(pool, "role", None)
    return role if isinstance(role, str) else None


def architecture_of(roles) -> str | None:
    """``colocated`` or ``pd`` for a supported list of pool roles, else None."""
    return ROLE_SETS.get(tuple(sorted(roles)))


class _AFDOptions(_Frozen):
    """The activation ping-pong between attention and FFN pools (``architecture: afd``)."""

    micro_batches: int = Field(2, ge=1, le=16, description="Micro-batches an attention "
                               "instance splits its batch into, so attention and FFN overlap "
                               "(1: none).")
    afd_link: Literal["scale-out", "scale-up"] = Field(
        "scale-out", description="The link activations cross between attention and FFN "
        "instances: the GPUs' network (scale-out) or one NVLink domain (scale-up).")
    afd_link_bw: Annotated[float, at_least(1e6, "bytes/s per GPU")] | None = Field(
        None, gt=0, allow_inf_nan=False, description="Override the link's bytes/s per GPU.")
    afd_link_latency_s: Annotated[float, at_most(1, "seconds per transfer")] | None = Field(
        None, ge=0, description="Override the link's latency per transfer.")


class _Pools(_AFDOptions):
    pools: tuple[PoolConfig, ...]
    architecture: Literal["colocated", "pd", "afd"] | None = None
    router: str | None = Field(None, description="Entry router: colocated instances (round-"
                               "robin | least-outstanding-tokens | least-requests | sibyl) or "
                               "prefill instances (least-loaded | round-robin).")
    decode_router: DecodeRouter = "round-robin"


class PoolsDeployment(_Boundary, _Pools):  # this base order puts the pools first
    """A deployment as a list of role pools (module docstring).

    ``architecture`` follows from the roles (``colocated`` or ``pd``); ``router`` defaults
    to ``round-robin`` for colocated pools and ``least-loaded`` for prefill pools.
    """

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data):
        if not isinstance(data, Mapping):
            return data
        if "prefill_router" in data:
            raise _error("PoolsDeployment", ("prefill_router",), "in the pool form the "
                         "prefill router is `router` (the entry router)",
                         data["prefill_router"])
        per_pool = [k for k in data if k in INSTANCE_FIELDS or k in ("count", "num_instances")]
        if per_pool:
            key = per_pool[0]
            field = "count" if key == "num_instances" else key
            raise _error("PoolsDeployment", (key,), f"in the pool form {key} is set per pool: "
                         f"pools[i].{field} (command line: --set deployment.pools.0.{field}=...)",
                         data[key])
        pools = data.get("pools")
        roles = [_role_of(p) for p in pools] if isinstance(pools, (list, tuple)) else []
        data = dict(data)
        if data.get("architecture") is None:  # from the roles (checked once they are valid)
            data["architecture"] = architecture_of(r for r in roles if r) or (
                "pd" if {"prefill", "decode"} & set(roles) else "colocated")
        router = data.get("router")
        if router is None:
            data["router"] = DEFAULT_ENTRY_ROUTER.get(data["architecture"], "round-robin")
        elif isinstance(router, str):
            data["router"] = ENTRY_ROUTER_ALIASES.get(data["architecture"], {}).get(router,
                                                                                   router)
        return data

    @model_validator(mode="after")
    def _check(self):
        roles = [p.role for p in self.pools]
        arch = architecture_of(roles)
        if not roles:
            raise _error("PoolsDeployment", ("pools",), "give at least one pool", [])
        if arch is None:
            raise _error("PoolsDeployment", ("pools",), f"roles {roles} are not supported: "
                         "give one colocated pool; one prefill and one decode pool; or one "
                         "prefill, one attention and one ffn pool (several pools per role "
                         "are not supported)", roles)
        if self.architecture != arch:
            raise _error("PoolsDeployment", ("architecture",), f"{self.architecture!r} does "
                         f"not match the pools' roles {roles} (architecture {arch!r})",
                         self.architecture)
        first = self.pools[0].model
        for i, p in enumerate(self.pools[1:], start=1):
            if not _same_model(p.model, first):
                raise _error("PoolsDeployment", ("pools", i, "model"), f"{p.model!r} differs "
                             f"from pools[0].model {first!r}: the prefill and decode pools "
                             "must serve the same model", p.model)
        self._check_options(arch)
        return self

    def _check_options(self, arch: str) -> None:
        valid = ENTRY_ROUTERS[arch]
        if self.router not in valid:
            kind = "colocated instances" if arch == "colocated" else "prefill instances"
            raise _error("PoolsDeployment", ("router",), f"{self.router!r} is not a router "
                         f"of {kind} (valid: {', '.join(valid)})", self.router)
        fields = type(self).model_fields  # a default value is harmless (dumps hold all)
        only = []
        if arch == "colocated":
            only.append((PD_ONLY_FIELDS, "prefill and decode pools"))
        if arch != "afd":
            only.append((AFD_ONLY_FIELDS, "attention and ffn pools"))
        if arch == "afd" and self.decode_cost != "oracle":
            raise _error("PoolsDeployment", ("decode_cost",), "the attention pool's steps "
                         "are priced by the attention and FFN oracles; a fitted decode "
                         "throughput does not apply", self.decode_cost)
        for names, what in only:
            extra = [f for f in names if getattr(self, f) != fields[f].default]
            if extra:
                raise _error("PoolsDeployment", (extra[0],), f"only for {what} (this "
                             f"deployment's architecture is {arch})", getattr(self, extra[0]))

    def pool(self, role: str) -> PoolConfig | None:
        """The pool with ``role``, if any."""
        return next((p for p in self.pools if p.role == role), None)

    def ordered_pools(self) -> tuple[PoolConfig, ...]:
        """The pools in role order: colocated, prefill, decode, attention, ffn."""
        return tuple(sorted(self.pools, key=lambda p: ROLE_ORDER[p.role]))

    def to_pools(self) -> PoolsDeployment:
        return self

    def to_legacy(self) -> Deployment | PDDeployment:
        return to_legacy(self)


# ----------------------------------------------------------------------------- conversions
AnyDeployment = Deployment | PDDeployment | PoolsDeployment


def to_pools(deployment: AnyDeployment | Mapping) -> PoolsDeployment:
    """Any deployment form (or mapping) as a :class:`PoolsDeployment`."""
    d = parse_architecture(dict(deployment)) if isinstance(deployment, Mapping) else deployment
    if isinstance(d, PoolsDeployment):
        return d
    if isinstance(d, Deployment):
        pool = PoolConfig(role="colocated", count=d.num_instances, **instance_fields(d))
        return PoolsDeployment(pools=(pool,), architecture="colocated", router=d.router)
    if isinstance(d, PDDeployment):
        pools = tuple(PoolConfig(role=role, count=p.num_instances, **instance_fields(p))
                      for role, p in (("prefill", d.prefill), ("decode", d.decode)))
        boundary = {name: getattr(d, name) for name in BOUNDARY_FIELDS}
        return PoolsDeployment(pools=pools, architecture="pd", router=d.prefill_router,
                               decode_router=d.router, **boundary)
    raise TypeError(f"not a deployment: {type(d).__name__}")


def to_legacy(deployment: AnyDeployment | Mapping) -> Deployment | PDDeployment:
    """Any deployment form (or mapping) as a :class:`Deployment` or :class:`PDDeployment`."""
    d = parse_architecture(dict(deployment)) if isinstance(deployment, Mapping) else deployment
    if isinstance(d, (Deployment, PDDeployment)):
        return d
    if not isinstance(d, PoolsDeployment):
        raise TypeError(f"not a deployment: {type(d).__name__}")
    if d.architecture == "afd":
        raise ValueError("an attention/FFN deployment has only the pool form (it has no "
                         "colocated or prefill/decode equivalent)")
    if d.architecture == "colocated":
        p = d.pools[0]
        return Deployment(num_instances=p.count, router=d.router, **instance_fields(p))
    pre, dec = (Pool(num_instances=p.count, **instance_fields(p))
                for p in (d.pool("prefill"), d.pool("decode")))
    boundary = {name: getattr(d, name) for name in BOUNDARY_FIELDS}
    return PDDeployment(prefill=pre, decode=dec, router=d.decode_router,
                        prefill_router=d.router, **boundary)


def parse_architecture(v):
    """A deployment mapping validated as :class:`PoolsDeployment` (it has a ``pools`` key),
    :class:`Deployment` or :class:`PDDeployment` (by ``architecture``, default
    ``colocated``); models pass through."""
    if not isinstance(v, Mapping):
        return v
    if "pools" in v:
        return PoolsDeployment.model_validate(v)
    arch = v.get("architecture", "colocated")
    if arch == "pd":
        return PDDeployment.model_validate(v)
    if arch == "colocated":
        return Deployment.model_validate(v)
    raise ValueError(f"architecture given an invalid value: {arch!r} (valid: 'colocated', "
                     "'pd'; or list role pools under `pools`)")


__all__ = ["AnyDeployment", "DECODE_ROUTER_ALIASES", "Deployment", "EngineConfig",
           "FittedThroughputConfig", "InstanceConfig", "PDDeployment", "Pool", "PoolConfig",
           "PoolsDeployment", "SibylConfig", "instance_fields", "parse_architecture",
           "to_legacy", "to_pools"]
