"""Resolving a deployment: any config form -> role pools -> what the simulator runs.

:func:`resolve` takes a deployment in any form (:class:`~serveplan.config.Deployment`,
:class:`~serveplan.config.PDDeployment`, the pool form
:class:`~serveplan.pools_config.PoolsDeployment`, or a mapping of one of them), turns it into
role pools and resolves each pool once: its cost oracle, its engine knobs with vLLM's
defaults filled in, and its KV capacity from the memory planner unless ``num_gpu_blocks`` is
given. A prefill/decode deployment also gets its KV link
(:meth:`~serveplan.sim.kvlink.KVLink.from_specs`) and, on request, SIBYL's fitted decode
throughput instead of the decode pool's oracle. The :class:`ResolvedServing` it returns
gives the simulator's inputs (:meth:`~ResolvedServing.pool_specs`,
:meth:`~ResolvedServing.handoff`, :attr:`~ResolvedServing.router`) and the JSON-able record
of what was resolved (:meth:`~ResolvedServing.describe`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from serveplan.afd import ResolvedFFN, afd_cost, describe_afd, ffn_max_tokens, resolve_ffn
from serveplan.deployments import strategy_name
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.engine_memory import plan_engine_memory
from serveplan.estimator.memory import default_block_size
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.runtime import EngineRuntime
from serveplan.estimator.specs import Parallelism
from serveplan.instance_knobs import (
    allreduce_fusion,
    dp_rank_share,
    graph_padding,
    graph_sizes,
    instance_runtime,
    knob,
)
from serveplan.pools_config import (
    MAX_BLOCKS,
    AnyDeployment,
    Deployment,
    InstanceConfig,
    PoolConfig,
    PoolsDeployment,
    instance_fields,
    to_legacy,
    to_pools,
)
from serveplan.quant_source import instance_dtype, instance_model
from serveplan.sim.costs import FittedThroughputCost
from serveplan.sim.cpu_tier import CPUTier
from serveplan.sim.engine import EngineParams
from serveplan.sim.kvlink import KVLink, rank_kv_bytes_per_token
from serveplan.sim.pools import DPTokens, Handoff, PoolSpec, Role
from serveplan.sim.runtime import FrontEnd, StepRuntime
from serveplan.sim.sessions import SchedulerKnobs
from serveplan.sim.speculative import SpecDecode
from serveplan.sim.state import Policy, Router
from serveplan.speculative import kv_blocks_with_drafter, resolve_speculative

POLICIES = {"vllm-v1": Policy.VLLM_V1, "sglang": Policy.SGLANG,
            "prefill-priority": Policy.PREFILL_PRIORITY,
            "trtllm-no-evict": Policy.TRTLLM_NO_EVICT,
            "trtllm-max-utilization": Policy.TRTLLM_MAX_UTILIZATION,
            "skip-join-mlfq": Policy.SKIP_JOIN_MLFQ, "h2q-br": Policy.H2Q_BR}
ROUTERS = {"round-robin": Router.ROUND_ROBIN,
           "least-outstanding-tokens": Router.LEAST_OUTSTANDING_TOKENS,
           "least-requests": Router.LEAST_REQUESTS}
ROLES = {"colocated": Role.COLOCATED, "prefill": Role.PREFILL, "decode": Role.DECODE,
         "attention": Role.ATTENTION}


# ----------------------------------------------------------------------------- one instance
@dataclass(frozen=True, eq=False)
class ResolvedDeployment:
    """A colocated deployment (or one pool of instances) with every default filled in:
    oracle, engine knobs, memory plan."""

    deployment: Deployment
    oracle: CostOracle
    params: EngineParams
    memory: dict | None  # the memory plan (None when num_gpu_blocks was given)
    runtime: EngineRuntime | None = None  # the engine's runtime (None: GPU steps alone)
    cpu_tier: CPUTier | None = None  # the CPU KV tier (None: none)
    speculative: SpecDecode | None = None  # speculative decoding (None: off)

    @property
    def scheduler(self) -> str:
        return knob(self.deployment, "scheduler", self.runtime)

    @property
    def dp_tokens(self) -> DPTokens:
        """What the MoE layers of the instance's DP ranks see in a step, by its engine:
        SGLang its own padding rule, TensorRT-LLM the ranks' tokens unpadded, vLLM (and the
        engine-less default) every rank padded to the busiest -- unpadded when eager."""
        engine = self.runtime.engine if self.runtime is not None else "vllm"
        if engine == "sglang":
            return DPTokens.SGLANG
        if engine == "trtllm" or not self.deployment.cuda_graph:
            return DPTokens.SUM
        return DPTokens.MAX

    def step_runtime(self, prefill_instance: bool = False) -> StepRuntime | None:
        """The per-step runtime terms of this instance type (None without an engine)."""
        if self.runtime is None:
            return None
        return self.runtime.step_runtime(self.oracle.model, self.deployment.tp, prefill_instance)

    def describe(self) -> dict:
        p = self.params
        return {
            **self.oracle.describe(),
            **(self.runtime.describe() if self.runtime is not None else {}),
            "scheduler": self.scheduler,
            "async_scheduling": p.async_scheduling,
            "num_scheduler_steps": p.num_scheduler_steps,
            "num_instances": self.deployment.num_instances,
            "router": self.deployment.router,
            "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "block_size": p.block_size,
            "num_gpu_blocks": p.num_gpu_blocks + 1,
            "usable_kv_blocks": p.num_gpu_blocks,
            "enable_prefix_caching": p.enable_prefix_caching,
            "enable_chunked_prefill": p.chunked,
            "long_prefill_token_threshold": p.long_prefill_token_threshold,
            "watermark": p.watermark,
            "max_model_len": p.max_model_len,
            "memory_plan": self.memory,
            **({"kv_offload": self.cpu_tier.describe()} if self.cpu_tier is not None else {}),
            **({"speculative": self.speculative.describe()} if self.speculative else {}),
        }


def _engine_memory_knobs(engine: str, d: InstanceConfig, mnbt: int, block_size: int,
                        max_num_seqs: int, prefix_caching: bool = True) -> dict:
    """The instance's knobs under the names of ``engine``'s memory rule; the memory fraction
    only where the user set one (else the engine's own default)."""
    fraction = (d.gpu_memory_utilization if "gpu_memory_utilization" in d.model_fields_set
                else None)
    if engine == "sglang":  # SGLang sizes its state pool by the cap only when one is given
        given = max_num_seqs if "max_num_seqs" in d.model_fields_set else None
        return {"mem_fraction_static": fraction, "chunked_prefill_size": mnbt,
                "max_running_requests": given,
                "disable_radix_cache": not prefix_caching}
    if engine == "trtllm":
        return {"free_gpu_memory_fraction": fraction, "tokens_per_block": block_size,
                "max_num_tokens": mnbt, "max_batch_size": max_num_seqs}
    return {"gpu_memory_utilization": d.gpu_memory_utilization, "block_size": block_size,
            "max_num_batched_tokens": mnbt, "max_num_seqs": max_num_seqs}


def _kv_blocks(d: InstanceConfig, oracle: CostOracle, mnbt: int, max_len: int,
               block_size: int, max_num_seqs: int, engine: str = "vllm",
               weights_role: str = "full", prefix_caching: bool = True
               ) -> tuple[int, dict | None]:
    """KV blocks per instance (vLLM's count, null block included) and the memory plan, by
    the memory rule of the instance's engine (vLLM's without one,
    :mod:`serveplan.estimator.engine_memory`). SGLang counts tokens and TensorRT-LLM its
    own blocks: their capacity in tokens becomes the simulator's blocks of ``block_size``;
    so does the full-attention capacity vLLM's hybrid allocator leaves a hybrid model
    (:mod:`serveplan.estimator.hybrid_memory`)."""
    if d.num_gpu_blocks is not None:
        return d.num_gpu_blocks, None
    plan = plan_engine_memory(
        engine, oracle.model, oracle.gpu, Parallelism(tp=d.tp, pp=d.pp, ep=d.ep, dp=d.dp),
        max_model_len=max_len, dtype=oracle.quantization, kv_dtype=d.kv_dtype,
        profile=oracle.profile, weights_role=weights_role,
        redundant_experts=oracle.routing.redundant_experts,
        **_engine_memory_knobs(engine, d, mnbt, block_size, max_num_seqs, prefix_caching))
    plan.raise_if_unfit()
    if engine == "vllm" and not oracle.model.is_hybrid:
        return plan.num_gpu_blocks, plan.as_dict()
    return plan.kv_tokens // block_size + 1, plan.as_dict()


def _cpu_tier(d: InstanceConfig, oracle: CostOracle, block_size: int) -> CPUTier | None:
    """The instance's CPU KV tier (:mod:`serveplan.kv_offload`): its host bytes in blocks
    of ``block_size`` tokens of every rank's KV, priced over the GPU's host link."""
    cfg = d.kv_offload
    ranks = d.tp * d.pp
    if cfg is None or cfg.size_bytes(ranks) == 0:
        return None
    field = f"kv_offload.{cfg.size_field}"
    gpu = oracle.gpu
    host_bw = cfg.host_bw or gpu.host_bw
    if host_bw is None:
        raise ValueError(f"kv_offload.host_bw: GPU {gpu.name} has no host link bandwidth "
                         "(host_bw) in its spec; give kv_offload.host_bw in bytes/s per GPU")
    latency = cfg.latency_s if cfg.latency_s is not None else gpu.host_latency_s
    tier = CPUTier.from_link(cfg.size_bytes(ranks), block_size, rank_kv_bytes_per_token(oracle),
                             ranks, host_bw, latency, cfg.store_on)
    if tier.num_blocks < 1:
        raise ValueError(f"{field}: {cfg.size_bytes(ranks):,.0f} bytes hold no KV block "
                         f"({tier.block_bytes:,.0f} bytes for {block_size} tokens); give more, "
                         "or 0 for no CPU tier")
    if tier.num_blocks > MAX_BLOCKS:
        raise ValueError(f"{field}: the tier would hold {tier.num_blocks:,} KV blocks, more "
                         f"than {MAX_BLOCKS:,} (the simulator preallocates each); give less "
                         "host memory or a larger block_size")
    return tier


def resolve_instance(d: Deployment, weights_role: str = "full",
                     disaggregated: bool | None = None) -> ResolvedDeployment:
    """Fill the engine's defaults (vLLM's without an engine) and size the KV cache of one
    instance type (``weights_role: attention``: an attention instance, without the FFN;
    ``disaggregated``: whether its deployment is, for the runtime terms' fit domain).

    ``num_gpu_blocks`` counts vLLM's null block, so the engine gets one block fewer.
    """
    gpu = resolve_gpu(d.gpu)
    rt = instance_runtime(d, gpu, disaggregated)
    max_num_seqs = dp_rank_share(rt, d, knob(d, "max_num_seqs", rt))
    padding = graph_padding(d, rt)
    oracle = CostOracle(instance_model(d), gpu, tp=d.tp, pp=d.pp, ep=d.ep, dp=d.dp,
                        dtype=instance_dtype(d), kv_dtype=d.kv_dtype, cuda_graph=d.cuda_graph,
                        piecewise_cuda_graph=rt is not None and rt.entry.piecewise_cuda_graph,
                        profile=d.profile, max_num_seqs=max_num_seqs, moe_routing=d.moe_routing,
                        decode_query_len=1 + (d.speculative.num_speculative_tokens
                                              if d.speculative else 0),
                        graph_sizes=graph_sizes(d, rt, gpu, padding), graph_padding=padding,
                        allreduce_fusion=allreduce_fusion(d, rt),
                        ).with_runtime(*(rt.terms.oracle_terms() if rt is not None else ()))
    max_len = d.max_model_len or oracle.model.max_position_embeddings
    scheduler = knob(d, "scheduler", rt)
    policy = POLICIES[scheduler]
    chunked = knob(d, "enable_chunked_prefill", rt) and policy != Policy.PREFILL_PRIORITY
    mnbt = knob(d, "max_num_batched_tokens", rt) if chunked or "max_num_batched_tokens" in \
        d.model_fields_set else None
    block_size = knob(d, "block_size", rt) or default_block_size(oracle.model)
    mnbt = dp_rank_share(rt, d, mnbt or (8192 if chunked else max(max_len, 2048)), block_size)
    if not chunked and mnbt < max_len and not scheduler.startswith("trtllm"):  # vLLM only
        raise ValueError(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_len}): "
            f"without chunked prefill ({scheduler}) a step must hold a whole prompt; raise "
            f"max_num_batched_tokens, lower max_model_len or enable chunked prefill")
    num_blocks, memory = _kv_blocks(d, oracle, mnbt, max_len, block_size, max_num_seqs,
                                    rt.engine if rt is not None else "vllm", weights_role,
                                    bool(knob(d, "enable_prefix_caching", rt)))
    if memory is not None and memory.get("state_request_cap"):
        max_num_seqs = min(max_num_seqs, memory["state_request_cap"])
    spec = resolve_speculative(d.speculative, oracle, d, max_num_seqs)
    if spec is not None and memory is not None and memory.get("engine") == "vllm":
        num_blocks = kv_blocks_with_drafter(memory, spec, oracle.model)
    watermark = knob(d, "watermark", rt, 0.01 if policy == Policy.PREFILL_PRIORITY else 0.0)
    params = EngineParams(
        num_gpu_blocks=num_blocks - 1, policy=policy, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt, block_size=block_size,
        enable_prefix_caching=knob(d, "enable_prefix_caching", rt),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=d.long_prefill_token_threshold, watermark=watermark,
        max_model_len=max_len, async_scheduling=knob(d, "async_scheduling", rt, False),
        num_scheduler_steps=knob(d, "num_scheduler_steps", rt, 1),
        enable_mixed_chunk=knob(d, "enable_mixed_chunk", rt, False),
        scheduler_recv_interval=knob(d, "scheduler_recv_interval", rt, 1),
        batch_wait_timeout_iters=knob(d, "batch_wait_timeout_iters", rt, 0),
        batch_wait_max_tokens_ratio=knob(d, "batch_wait_max_tokens_ratio", rt, 0.0),
        new_token_ratio=knob(d, "new_token_ratio", rt, 0.0),
        schedule_policy=knob(d, "schedule_policy", rt, "fcfs"),
        **(d.attention_dp_config.engine_knobs() if d.attention_dp_config else {}))
    return ResolvedDeployment(d, oracle, params, memory, rt, _cpu_tier(d, oracle, block_size),
                              spec)


def resolve_deployment(deployment: Deployment | PoolsDeployment | dict) -> ResolvedDeployment:
    """Resolve a colocated deployment (any form): :func:`resolve_instance`.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If the model does not fit (the memory planner's reason).
    ValueError
        If the deployment is not colocated (use :func:`resolve`).
    """
    d = deployment if isinstance(deployment, Deployment) else to_legacy(deployment)
    if not isinstance(d, Deployment):
        raise ValueError("resolve_deployment takes a colocated deployment; resolve a "
                         "prefill/decode one with serveplan.resolution.resolve")
    return resolve_instance(d)


# ----------------------------------------------------------------------------- role pools
@dataclass(frozen=True, eq=False)
class ResolvedPool:
    """One role pool resolved: its instance type and the cost that prices its steps."""

    config: PoolConfig
    instance: ResolvedDeployment
    cost: object  # the instance's CostOracle, or a FittedThroughputCost (decode pools)

    @property
    def role(self) -> Role:
        return ROLES[self.config.role]

    @property
    def params(self) -> EngineParams:
        return self.instance.params

    @property
    def oracle(self) -> CostOracle:
        return self.instance.oracle

    @property
    def gpu_name(self) -> str:
        return str(self.oracle.describe()["gpu"])

    @property
    def virtual_engines(self) -> int:
        """Micro-batches one instance keeps in flight: its pipeline stages."""
        return self.config.pp

    @property
    def dp_ranks(self) -> int:
        """Attention data-parallel ranks of one instance, each its own scheduler (an
        attention pool's ``dp`` belongs to its AFD step cost instead)."""
        return 1 if self.role == Role.ATTENTION else self.config.dp

    def spec(self) -> PoolSpec:
        """The pool as the simulator runs it. An instance with ``pp`` pipeline stages keeps
        ``pp`` micro-batches in flight: it runs as ``pp`` virtual engines (as vLLM's
        pipeline-parallel scheduler: one scheduler per virtual engine, each with
        ``num_gpu_blocks // pp`` of the KV blocks and its own ``max_num_seqs``), each step
        priced at the whole pipeline's latency by the oracle -- so throughput grows with
        ``pp`` while a request's step time does not shrink.

        An instance with ``dp`` attention data-parallel ranks runs as ``dp`` schedulers in
        lockstep (:attr:`PoolSpec.lockstep`), each with its own requests, ``max_num_seqs``
        and KV blocks (the memory plan is per rank), each step priced by the oracle as one
        rank's, its MoE layers seeing the tokens of all ranks
        (:attr:`ResolvedDeployment.dp_tokens`)."""
        fitted = isinstance(self.cost, FittedThroughputCost)
        runtime = None if fitted else self.instance.step_runtime(self.role == Role.PREFILL)
        params, pp, tier = self.params, self.virtual_engines, self.instance.cpu_tier
        if pp > 1:
            params = replace(params, num_gpu_blocks=max(params.num_gpu_blocks // pp, 1))
            tier = tier.per_engine(pp) if tier is not None else None
        dp = self.dp_ranks
        return PoolSpec(params, self.cost, self.config.count * pp * dp, self.role,
                        self.gpu_name, runtime, tier, self.instance.speculative, lockstep=dp,
                        dp_tokens=self.instance.dp_tokens)


def _resolve_pool(pool: PoolConfig, router: str, decode_cost,
                  instance=resolve_instance) -> ResolvedPool:
    d = Deployment(num_instances=pool.count, router=router, **instance_fields(pool))
    inst = instance(d, "attention" if pool.role == "attention" else "full",
                    pool.role != "colocated")
    cost = inst.oracle
    if pool.role == "decode" and not isinstance(decode_cost, str):
        c = decode_cost
        cost = FittedThroughputCost(c.alpha, c.beta, c.gamma, c.min_tps, c.plateau)
    return ResolvedPool(pool, inst, cost)


@dataclass(frozen=True, eq=False)
class ResolvedServing:
    """A deployment resolved pool by pool (module docstring).

    ``pools`` are in role order (colocated; or prefill, then decode), the order of the
    simulator's instances. ``link`` is the KV link of a prefill/decode deployment.
    """

    deployment: PoolsDeployment
    pools: tuple[ResolvedPool, ...]
    link: KVLink | None = None
    ffn: ResolvedFFN | None = None  # attention/FFN disaggregation: the FFN pool

    @property
    def architecture(self) -> str:
        return self.deployment.architecture

    @property
    def disaggregated(self) -> bool:
        """Requests cross from a prefill pool to a decode (or attention) pool."""
        return self.architecture != "colocated"

    @property
    def router(self) -> str:
        """The entry router: among colocated instances, or among prefill instances."""
        return self.deployment.router

    @property
    def block_size(self) -> int:
        """Block size of the entry pool (synthetic prefixes are hashed at it)."""
        return self.pools[0].params.block_size

    def pool(self, role: str) -> ResolvedPool | None:
        return next((p for p in self.pools if p.config.role == role), None)

    def pool_specs(self) -> list[PoolSpec]:
        """The simulator's pools (:class:`serveplan.sim.pools.PoolSpec`), in role order."""
        return [p.spec() for p in self.pools]

    def scheduler_knobs(self) -> SchedulerKnobs:
        """Knobs of the session-aware schedulers, from the entry pool."""
        cfg = self.pools[0].config.scheduler_knobs
        return cfg.knobs() if cfg is not None else SchedulerKnobs()

    def front_end(self) -> FrontEnd | None:
        """The API servers in front of the entry pool (None without an engine): every
        instance of it runs its own (``api_servers`` of them, default 1), as independent
        engine servers behind a router do."""
        rt = self.pools[0].instance.runtime
        if rt is None:
            return None
        entry = self.pools[0].config
        return replace(rt.front_end(), servers=entry.count * (entry.api_servers or 1))

    def handoff(self, router: str | None = None, prior=None) -> Handoff | None:
        """How requests cross from prefill to decode (None when colocated); ``router``
        overrides the decode router; ``prior`` is a sample of output lengths that starts
        SIBYL's survival estimator."""
        if not self.disaggregated:
            return None
        d = self.deployment
        s = d.sibyl
        return Handoff(router=router or d.decode_router, assignment=d.assignment,
                       layerwise=d.layerwise_transfer, link=self.handoff_link,
                       prefill_stage=d.prefill_stage, sibyl_delta=s.delta, sibyl_alpha=s.alpha,
                       sibyl_max_length=s.max_length, pending_capacity=s.pending_capacity,
                       prefill_hold=d.prefill_hold, sibyl_prior=prior,
                       tie_break=s.tie_break, first_token=self.first_token_source)

    @property
    def handoff_link(self) -> KVLink | None:
        """The KV link with the engine's handoff (``disagg_handoff_s`` of the decode
        side's runtime terms: orchestrator hop, transfer setup, pickup) added to its
        latency, so it delays every transfer's delivery without occupying the link. It is
        counted after the KV moves; in the engines the hop comes first and the decode
        instance pulls at its next step boundary, so a busy decode instance's wait for a
        boundary can differ from the engines' by up to one of its steps."""
        rt = self.pools[-1].instance.runtime
        extra = rt.terms.disagg_handoff_s if rt is not None else 0.0
        if self.link is None or extra == 0.0:
            return self.link
        return replace(self.link, latency_s=tuple(x + extra for x in self.link.latency_s))

    @property
    def first_token_source(self) -> str:
        """Where a disaggregated request's first token comes from (the deployment's
        ``first_token``). By default as the named engine serves it: vLLM's decode instance
        recomputes the last prompt token and samples the first token itself
        (``recompute``: its NixlConnector leaves the last token uncomputed), SGLang's and
        TensorRT-LLM's stream the token received with the KV (``decode``); without an
        engine, the prefill's token."""
        given = self.deployment.first_token
        if given is not None:
            return given
        engines = [p.config.engine for p in self.pools if p.config.engine]
        if not engines:
            return "prefill"
        return "recompute" if engines[-1] == "vllm" else "decode"

    def describe(self) -> dict:
        """The resolved values as a JSON-able dict (a Dataset's ``resolved`` attribute)."""
        if not self.disaggregated:  # the entry router is the deployment's, SIBYL's included
            sibyl = {"sibyl": self.deployment.sibyl.model_dump()} if self.router == "sibyl" else {}
            return {**self.pools[0].instance.describe(), "router": self.router, **sibyl}
        d, link = self.deployment, self.link
        pre, dec = self.pools
        afd = self.ffn is not None
        strategy = strategy_name(d)
        return {
            "architecture": self.architecture,
            "strategy": strategy,
            "prefill": {**pre.instance.describe(), "num_instances": pre.config.count},
            dec.config.role: {**dec.instance.describe(), "num_instances": dec.config.count,
                       "decode_cost": (d.decode_cost if isinstance(d.decode_cost, str)
                                       else d.decode_cost.model_dump())},
            "router": d.decode_router,
            "prefill_router": d.router,
            "assignment": d.assignment,
            "layerwise_transfer": d.layerwise_transfer,
            "prefill_stage": d.prefill_stage,
            "first_token": self.first_token_source,
            "placement": d.placement,
            "kv_bytes_per_token": link.bytes_per_token,
            "kv_seconds_per_token": {"scale_up": link.seconds_per_token[0],
                                     "scale_out": link.seconds_per_token[1]},
            "kv_latency_s": {"scale_up": link.latency_s[0], "scale_out": link.latency_s[1]},
            "sibyl": d.sibyl.model_dump(),
            **(describe_afd(d, dec.cost, self.ffn) if afd else {}),
        }

    # the views of the older resolved objects (ResolvedDeployment, ResolvedPD)
    @property
    def legacy(self):
        """The deployment as a :class:`Deployment` or :class:`PDDeployment`."""
        return to_legacy(self.deployment)

    @property
    def oracle(self) -> CostOracle:
        return self.pools[0].oracle

    @property
    def params(self) -> EngineParams:
        return self.pools[0].params

    @property
    def memory(self) -> dict | None:
        return self.pools[0].instance.memory

    @property
    def prefill(self) -> ResolvedDeployment | None:
        p = self.pool("prefill")
        return p.instance if p is not None else None

    @property
    def decode(self) -> ResolvedDeployment | None:
        p = self.pool("decode")
        return p.instance if p is not None else None

    @property
    def decode_cost(self):
        p = self.pool("decode")
        return p.cost if p is not None else None

    @property
    def prefill_spec(self) -> PoolSpec:
        return self.pool("prefill").spec()

    @property
    def decode_spec(self) -> PoolSpec:
        return self.pool("decode").spec()


def resolve(deployment: AnyDeployment | dict, *, instance=resolve_instance,
            ffn_pool=resolve_ffn) -> ResolvedServing:
    """Resolve every pool of a deployment (any form) and, for prefill/decode, its KV link.

    ``instance(deployment, weights_role, disaggregated)`` and ``ffn_pool(pool, max_tokens)``
    resolve one instance type and the FFN pool (:func:`resolve_instance`,
    :func:`resolve_ffn`); a strategy search passes cached ones.

    Raises
    ------
    serveplan.estimator.specs.SpecError
        If a pool's model does not fit its GPUs (the memory planner's reason).
    """
    d = to_pools(deployment)
    # a pool's own config never routes: SIBYL among colocated instances is the pool form's
    # entry router only (the per-pool Deployment does not list it)
    entry = d.router if d.architecture == "colocated" and d.router != "sibyl" else "round-robin"
    pools = tuple(_resolve_pool(p, entry, d.decode_cost, instance)
                  for p in d.ordered_pools() if p.role != "ffn")
    link, ffn = None, None
    if d.architecture != "colocated":
        pre, dec = pools
        link = KVLink.from_specs(pre.oracle, dec.oracle, pre.config.count, dec.config.count,
                                 placement=d.placement, bandwidth=d.kv_link_bw,
                                 latency_s=d.kv_link_latency_s, prefill_ranks=pre.dp_ranks,
                                 decode_ranks=dec.dp_ranks)
    if d.architecture == "afd":
        ffn = ffn_pool(d.pool("ffn"), ffn_max_tokens(d, pools[1].params.max_num_seqs))
        pools = (pools[0], replace(pools[1], cost=afd_cost(d, pools[1].oracle, ffn)))
    return ResolvedServing(d, pools, link, ffn)


__all__ = ["POLICIES", "ROUTERS", "ResolvedDeployment", "ResolvedPool", "ResolvedServing",
           "resolve", "resolve_deployment", "resolve_instance"]
