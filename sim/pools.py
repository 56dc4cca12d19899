"""A deployment as the event loop sees it: pools of instances, each pool with one role.

A *pool* is a set of identical instances -- same role, engine knobs, step cost (so GPU
type and parallelism) -- and a deployment is a list of pools. Roles (:class:`Role`):

* ``COLOCATED`` (C): an engine that prefills and decodes its own requests;
* ``PREFILL`` (P) and ``DECODE`` (D): prefill/decode disaggregation -- a P instance
  prefills, the request's KV moves over a link (:class:`~serveplan.sim.kvlink.KVLink`),
  a D instance decodes;

* ``ATTENTION`` (A): the decode stage of attention/FFN disaggregation -- an instance that
  holds the KV cache and runs attention, its steps priced with the FFN pool that serves it
  (:class:`~serveplan.sim.afd_cost.AFDStepCost`). In the loop it is a decode instance
  (:func:`loop_role`); the FFN instances are part of its step cost, not instances of their
  own (they hold no requests).

How a request crosses from one role to the next is the :class:`Handoff` (decode router,
assignment time, transfer options).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Role(IntEnum):
    """Role codes of instances (stored per instance in the knob table)."""

    COLOCATED = 0
    PREFILL = 1
    DECODE = 2
    ATTENTION = 3


ROLE_NAMES = {Role.COLOCATED: "colocated", Role.PREFILL: "prefill", Role.DECODE: "decode",
              Role.ATTENTION: "attention"}
DOWNSTREAM_ROLES = ("decode", "attention")
"""Role names of the instances a disaggregated request ends on."""


class DPTokens(IntEnum):
    """How many tokens the MoE layers of a lockstep group (an engine's attention-DP ranks)
    see in one step, from the tokens ``t_r`` of its ``dp`` ranks (idle ranks: 0).

    * ``MAX``: ``dp x max(t_r)``. vLLM V1 pads every rank's batch to the largest across the
      DP group (``GPUModelRunner.get_dp_padding``; idle ranks run a padded dummy batch)
      unless ``enforce_eager`` is set.
    * ``SUM``: ``sum(t_r)``, no padding: TensorRT-LLM's attention DP gathers each rank's
      own token count; vLLM with ``enforce_eager``.
    * ``SGLANG``: SGLang's ``DpPaddingMode.get_dp_padding_mode``: ``SUM`` when a rank
      prefills (extend in the batch), else ``MAX`` when ``2 x sum >= dp x max``, else
      ``SUM``.
    """

    MAX = 0
    SUM = 1
    SGLANG = 2


def loop_role(role: Role) -> Role:
    """The role the loop runs an instance as (an attention instance decodes)."""
    return Role.DECODE if role == Role.ATTENTION else Role(role)


@dataclass(frozen=True)
class PoolSpec:
    """``num_instances`` identical instances: engine knobs, step cost, role.

    ``cost`` is a :class:`~serveplan.estimator.oracle.CostOracle`, an
    :class:`~serveplan.sim.costs.AffineStepCost` or (decode pools) a
    :class:`~serveplan.sim.costs.FittedThroughputCost`. ``gpu`` labels the pool's
    instances in results (default: the oracle's GPU name, if any). ``runtime`` is the
    engine's work per step besides the forward pass
    (:class:`~serveplan.sim.runtime.StepRuntime`; default none). ``cpu_tier`` is each
    instance's CPU KV tier (:class:`~serveplan.sim.cpu_tier.CPUTier`; default none).
    ``speculative``: the pool's speculative decoding
    (:class:`~serveplan.sim.speculative.SpecDecode`; default none). ``lockstep``: the
    instances step in consecutive groups of this many -- the attention data-parallel ranks
    of one engine (vLLM ``--data-parallel-size``, SGLang ``--enable-dp-attention``,
    TensorRT-LLM ``enable_attention_dp``): each rank holds its own requests and KV cache,
    but the ranks meet in every layer's MoE collectives, so a step of the group starts on
    every rank with work at once and ends when its slowest rank does (default 1: each
    instance steps on its own). ``dp_tokens``: the tokens the group's MoE layers see
    (:class:`DPTokens`; default ``MAX``, vLLM's padding).
    """

    params: object  # serveplan.sim.engine.EngineParams
    cost: object
    num_instances: int = 1
    role: Role = Role.COLOCATED
    gpu: str = ""
    runtime: object = None  # serveplan.sim.runtime.StepRuntime
    cpu_tier: object = None  # serveplan.sim.cpu_tier.CPUTier
    speculative: object = None  # serveplan.sim.speculative.SpecDecode (colocated, decode)
    lockstep: int = 1
    dp_tokens: DPTokens = DPTokens.MAX

    def __post_init__(self) -> None:
        if int(self.num_instances) != self.num_instances or self.num_instances < 1:
            raise ValueError(f"num_instances must be an integer >= 1, got {self.num_instances!r}")
        if int(self.lockstep) != self.lockstep or self.lockstep < 1 or \
                self.num_instances % self.lockstep:
            raise ValueError(f"lockstep must be an integer >= 1 that divides num_instances "
                             f"({self.num_instances}), got {self.lockstep!r}")
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "dp_tokens", DPTokens(self.dp_tokens))

    @property
    def gpu_name(self) -> str:
        if self.gpu:
            return self.gpu
        gpu = getattr(self.cost, "gpu", None)
        return str(getattr(gpu, "name", "")) if gpu is not None else ""


@dataclass(frozen=True)
class Handoff:
    """How requests cross from the prefill role to the decode role.

    Parameters
    ----------
    router : str
        Decode router (:data:`serveplan.sim.pd_router.DECODE_ROUTERS`).
    assignment : {"early", "late"}
        Bind the decode instance at dispatch (early) or at prefill end (late).
    layerwise : bool
        Stream KV while the prefill runs (early assignment only).
    link : KVLink, optional
        The KV transfer model (default: free).
    prefill_stage : {"engine", "delay"}
        Prefill instances, or SIBYL's infinite-server delay (open loop only).
    sibyl_delta, sibyl_alpha, sibyl_max_length, pending_capacity :
        SIBYL's survival bucket step and EMA factor, longest resolved output (default: the
        decode ``max_model_len``) and pending slots per decode instance.
    prefill_hold : int, optional
        Finished prefills whose KV a prefill instance may hold before it admits fewer new
        ones (default 256).
    sibyl_prior : array, optional
        A sample of output lengths whose Kaplan-Meier estimate starts SIBYL's survival
        estimator (default: none, the estimator starts at 1).
    tie_break : {"rotation", "lowest", "random"}
        How the decode router chooses among equally loaded instances.
    tie_seed : int
        Seed of the ``random`` tie-break.
    first_token : {"prefill", "decode", "recompute"}
        Where the client's first token comes from: the prefill's step (its end is the TTFT);
        the decode instance, which streams it when the request enters its first decode step
        (``decode``: SGLang's and TensorRT-LLM's decode side emits the token it received
        with the KV); or the end of the decode instance's first step for the request, which
        computes the last prompt token and samples the first token (``recompute``: vLLM's
        proxy drops the prefill's token, and the scheduler leaves the last prompt token of a
        remote prefill uncomputed, ``_update_waiting_for_remote_kv``), so the decode side
        generates all ``output`` tokens. Both engine ways count the transfer and the wait for
        a decode step in TTFT.
    """

    router: str = "round-robin"
    assignment: str = "early"
    layerwise: bool = False
    link: object = None
    prefill_stage: str = "engine"
    sibyl_delta: float = 128.0
    sibyl_alpha: float = 0.99
    sibyl_max_length: int | None = None
    pending_capacity: int | None = None
    prefill_hold: int | None = None
    sibyl_prior: object = None
    tie_break: str = "rotation"
    tie_seed: int = 0
    first_token: str = "prefill"


FIRST_TOKEN_SOURCES = ("prefill", "decode", "recompute")

__all__ = ["DOWNSTREAM_ROLES", "DPTokens", "FIRST_TOKEN_SOURCES", "Handoff", "PoolSpec",
           "ROLE_NAMES", "Role", "loop_role"]
