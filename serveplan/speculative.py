"""The ``speculative:`` block of a pool, and how it becomes the simulator's settings.

As vLLM's ``--speculative-config``::

    speculative:
      method: mtp                  # ngram | eagle | eagle3 | mtp | draft_model
      num_speculative_tokens: 2
      acceptance: [0.8, 0.6]       # P(draft i accepted | drafts before it accepted), or one rate
      # draft_model: llama-3.1-8b  # the draft_model method's model (eagle: an EAGLE head's config)

The drafter is priced by the cost oracle (:func:`draft_cost`): ``ngram`` takes no GPU time;
``mtp`` runs the checkpoint's own next-token-prediction layer (DeepSeek-V3's
``num_nextn_predict_layers``) as a one-layer model of the target's architecture with its
embedding and LM head; ``eagle`` / ``eagle3`` one dense decoder layer of the target's width
with its LM head (or the head whose config ``draft_model`` names); ``draft_model`` the
named model. The drafter runs with the target's tensor parallelism. See
``docs/speculative.md`` and :mod:`serveplan.sim.specdecode` for the loop's side.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from serveplan.sim.speculative import MAX_SPEC_TOKENS, SpecDecode

MethodName = Literal["ngram", "eagle", "eagle3", "mtp", "draft_model"]


def _rates(value):
    rates = value if isinstance(value, list) else [value]
    for i, a in enumerate(rates):
        if not 0.0 <= a <= 1.0:
            where = f" (position {i + 1})" if isinstance(value, list) else ""
            raise ValueError(f"acceptance rates must be in [0, 1], got {a:g}{where}")
    return value


class SpeculativeConfig(BaseModel):
    """Speculative decoding of a colocated or decode pool (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: MethodName = Field("ngram", description="vLLM's speculative_config.method.")
    num_speculative_tokens: int = Field(
        ge=1, le=MAX_SPEC_TOKENS, description="Draft tokens proposed per decoding request and "
        "step (k).")
    acceptance: Annotated[float | list[float], AfterValidator(_rates)] = Field(
        0.7, description="P(draft i accepted | drafts 1..i-1 accepted), one per position or "
        "one rate for all.")
    draft_model: str | None = Field(
        None, description="Catalog name or config.json of the draft model (method "
        "draft_model; for eagle: the EAGLE head's config).")
    seed: int = Field(0, ge=0, lt=2**62, description="Seed of the acceptance draws.")

    @model_validator(mode="after")
    def _check(self):
        if isinstance(self.acceptance, list) and \
                len(self.acceptance) not in (1, self.num_speculative_tokens):
            raise ValueError(f"acceptance: give one rate or {self.num_speculative_tokens} "
                             f"(one per draft position), got {len(self.acceptance)}")
        if self.method == "draft_model" and not self.draft_model:
            raise ValueError("draft_model: the draft_model method needs the draft model "
                             "(a catalog name or a config.json path)")
        if self.draft_model and self.method in ("ngram", "mtp"):
            raise ValueError(f"draft_model: the {self.method} method has no draft model "
                             "(give method: draft_model or eagle)")
        return self


def _mtp_model(target):
    """DeepSeek's MTP module as a one-layer model: a decoder layer of the target's kind
    (MoE if the target's later layers are) with the shared embedding and LM head. Its
    ``eh_proj`` (2h x h) and two extra norms are left out (< 1 % of the layer)."""
    if target.num_nextn_predict_layers <= 0:
        raise ValueError(f"speculative.method: mtp needs a model whose config.json has "
                         f"num_nextn_predict_layers > 0; {target.name} has none (use eagle, "
                         "draft_model or ngram)")
    return target.model_copy(update={
        "name": f"{target.name} MTP", "num_layers": 1,
        "num_moe_layers": 1 if target.is_moe else 0, "num_nextn_predict_layers": 0})


def _eagle_model(target):
    """An EAGLE head: one dense decoder layer of the target's width and the target's LM
    head (the FFN width: the target's dense one, else its active experts' total)."""
    inter = target.intermediate_size or target.moe_intermediate_size * max(
        target.experts_per_token + target.num_shared_experts, 1)
    return target.model_copy(update={
        "name": f"{target.name} EAGLE head", "num_layers": 1, "num_moe_layers": 0,
        "intermediate_size": inter, "num_experts": 0, "experts_per_token": 0,
        "num_nextn_predict_layers": 0})


def draft_cost(cfg: SpeculativeConfig, oracle, instance, max_num_seqs: int):
    """The drafter's cost oracle on the target's GPU and tensor parallelism (None for
    ngram). ``instance`` is the pool's :class:`~serveplan.pools_config.InstanceConfig`;
    ``max_num_seqs`` its resolved value (the drafter's CUDA-graph sizes follow it)."""
    from serveplan.estimator.catalog import resolve_model
    from serveplan.estimator.oracle import CostOracle
    from serveplan.quant_source import instance_dtype

    if cfg.method == "ngram":
        return None
    if cfg.draft_model:
        model = resolve_model(cfg.draft_model)
    elif cfg.method == "mtp":
        model = _mtp_model(oracle.model)
    else:
        model = _eagle_model(oracle.model)
    ep = instance.ep if model.is_moe else 1
    dp = instance.dp if model.is_moe else 1
    return CostOracle(model, oracle.gpu, tp=instance.tp, ep=ep, dp=dp, dtype=instance_dtype(instance),
                      kv_dtype=instance.kv_dtype, cuda_graph=instance.cuda_graph,
                      profile=oracle.profile, max_num_seqs=max_num_seqs,
                      decode_query_len=cfg.num_speculative_tokens + 1,
                      graph_sizes=instance.cuda_graph_sizes,
                      allreduce_fusion=oracle.allreduce_fusion)


def resolve_speculative(cfg: SpeculativeConfig | None, oracle, instance,
                        max_num_seqs: int) -> SpecDecode | None:
    """The simulator's :class:`~serveplan.sim.speculative.SpecDecode` of a pool."""
    if cfg is None:
        return None
    rates = cfg.acceptance if isinstance(cfg.acceptance, float) else tuple(cfg.acceptance)
    return SpecDecode(cfg.num_speculative_tokens, rates,
                      draft_cost(cfg, oracle, instance, max_num_seqs), cfg.method, None,
                      cfg.seed)


def kv_blocks_with_drafter(plan: dict, sd: SpecDecode, target) -> int:
    """KV blocks of a vLLM instance (null block included) once its drafter is loaded.

    vLLM loads the drafter's weights on every rank beside the target's and gives its
    attention layers their own KV in the same blocks, so
    ``blocks = (available_kv - drafter weights) // (block_size * (kv/token target +
    kv/token drafter))``. An EAGLE head or MTP layer shares the target's embedding and LM
    head: it adds one layer's weights (the target's mean layer) and one layer's KV; a
    draft model adds its whole weights and KV. ngram adds nothing. ``plan`` is the target's
    memory plan (:meth:`~serveplan.estimator.memory.MemoryPlan.as_dict`).
    """
    from serveplan.estimator.memory import plan_memory
    from serveplan.estimator.specs import Parallelism

    draft = sd.draft_cost
    if draft is None:
        return int(plan["num_gpu_blocks"])
    if sd.method == "draft_model":
        par = draft.parallel
        dp = plan_memory(draft.model, draft.gpu, Parallelism(tp=par.tp, ep=par.ep, dp=par.dp),
                         max_model_len=min(plan["max_model_len"],
                                           draft.model.max_position_embeddings),
                         dtype=draft.quantization, profile=draft.profile,
                         block_size=plan["block_size"])
        weights, kv = dp.weights_bytes, dp.kv_bytes_per_token
    else:
        weights = plan["weights_bytes"] / target.num_layers
        kv = plan["kv_bytes_per_token_layer"]
    per_block = plan["block_size"] * (plan["kv_bytes_per_token"] + kv)
    return max(int((plan["available_kv_bytes"] - weights) // per_block), 2)


SPEC_FLAGS = {"method": "spec_method", "num_speculative_tokens": "num_speculative_tokens",
              "acceptance": "spec_acceptance", "draft_model": "draft_model"}
"""``speculative`` fields -> the ``serveplan simulate`` options that set them."""


def apply_spec_flags(data: dict, values: dict) -> dict:
    """``data`` (a simulate config mapping) with the speculative-decoding options set on
    every pool that decodes: the colocated deployment, a pd deployment's ``decode`` pool,
    or the colocated / decode pools of the pool form. ``values`` maps field -> value
    (None: not given)."""
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return data
    dep = dict(data.get("deployment") or {})
    if isinstance(dep.get("pools"), list):
        dep["pools"] = [_with_spec(p, given) if isinstance(p, dict) and
                        p.get("role") != "prefill" else p for p in dep["pools"]]
    elif dep.get("architecture") == "pd":
        dep["decode"] = _with_spec(dict(dep.get("decode") or {}), given)
    else:
        dep = _with_spec(dep, given)
    return {**data, "deployment": dep}


def _with_spec(pool: dict, given: dict) -> dict:
    spec = pool.get("speculative")
    spec = dict(spec) if isinstance(spec, dict) else {}
    return {**pool, "speculative": {**spec, **given}}


__all__ = ["SPEC_FLAGS", "SpeculativeConfig", "apply_spec_flags", "draft_cost",
           "kv_blocks_with_drafter", "resolve_speculative"]
