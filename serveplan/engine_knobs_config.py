"""Engine-specific knobs of an instance: TensorRT-LLM's attention-DP balance, and the rule
that each engine's own knob is given only with that engine.

``attention_dp_config`` is TensorRT-LLM's ``attention_dp_config`` (``AttentionDpConfig``,
``llm_args.py``) for an instance with ``dp > 1`` (``enable_attention_dp``): with
``enable_balance`` the executor holds new context requests until every attention-DP rank
has one to schedule (``PyExecutor._balance_adp_requests``; :mod:`serveplan.sim.engine_policies`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AttentionDPConfig(BaseModel):
    """TensorRT-LLM ``attention_dp_config``; defaults as TensorRT-LLM's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enable_balance: bool = Field(False, description=(
        "Hold new contexts until every attention-DP rank has one (or timeout_iters pass)."))
    timeout_iters: int = Field(50, ge=0, le=1 << 20, description=(
        "Iterations after which held contexts go even if some rank has none."))
    batching_wait_iters: int = Field(10, ge=0, le=1 << 20, description=(
        "Iterations contexts wait for more while every rank has contexts and generation."))

    def engine_knobs(self) -> dict:
        """The simulator's engine knobs (:class:`~serveplan.sim.params.EngineParams`);
        none without balance."""
        if not self.enable_balance:
            return {}
        return dict(attention_dp_balance=True, attention_dp_timeout_iters=self.timeout_iters,
                    attention_dp_batching_wait_iters=self.batching_wait_iters)


def engine_knob_problem(cfg) -> tuple[str, str, object] | None:
    """``(field, why, value)`` for a knob of ``cfg`` (an instance config) that belongs to
    another engine than the one it names, or None."""
    engine, scheduler = cfg.engine, cfg.scheduler
    sglang = engine == "sglang" or (scheduler == "sglang" and (cfg.new_token_ratio or 0) > 0)
    if cfg.schedule_policy == "lpm" and not sglang:
        return ("schedule_policy", "lpm is SGLang's --schedule-policy: give it with engine: "
                "sglang (or scheduler: sglang and a new_token_ratio > 0)", cfg.schedule_policy)
    if cfg.cuda_graph_padding is False and engine in ("vllm", "sglang"):
        return ("cuda_graph_padding", f"{engine} always pads a decode batch to the next "
                "capture size; unpadded graphs are TensorRT-LLM's (engine: trtllm, or no "
                "engine)", False)
    adp = cfg.attention_dp_config
    trtllm = engine == "trtllm" or (engine is None and scheduler.startswith("trtllm"))
    if adp is not None and not (trtllm and cfg.dp > 1):
        return ("attention_dp_config", "TensorRT-LLM's attention-DP config: give it with "
                f"engine: trtllm and dp > 1 (got engine {engine}, dp {cfg.dp})",
                adp.model_dump())
    return None
