"""Resolving an attention/FFN-disaggregated deployment's FFN pool and its step cost.

An ``architecture: afd`` deployment has a prefill pool, an attention pool and an FFN pool.
The prefill and attention pools run in the simulator as the prefill and decode stages of a
disaggregated deployment (KV moves to the attention instance that decodes the request); the
FFN pool holds no requests. It is resolved here: its cost oracle, and its memory -- an FFN
instance holds the FFN (or expert) weights and its activations, and no KV cache. The
attention pool's steps are priced by :class:`~serveplan.sim.afd_cost.AFDStepCost`, which
joins both pools' oracles over the activation link.
"""

from __future__ import annotations

from dataclasses import dataclass

from serveplan.estimator.memory import GIB, activation_peak_bytes, resolve_setup
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.specs import SpecError
from serveplan.kernels.afd import AFD_EGRESS_S, AFD_INGRESS_S, AFD_LATENCY
from serveplan.pools_config import PoolConfig, PoolsDeployment
from serveplan.quant_source import instance_dtype
from serveplan.sim.afd_cost import AFDStepCost


@dataclass(frozen=True, eq=False)
class ResolvedFFN:
    """The FFN pool: its oracle and what one FFN instance's GPU holds."""

    config: PoolConfig
    oracle: CostOracle
    weight_bytes: float  # one rank
    activation_bytes: float  # one rank, peak
    available_bytes: float  # gpu_memory_utilization x device memory

    @property
    def gpus(self) -> int:
        return self.config.count * self.config.tp * self.config.pp * self.config.dp

    def describe(self) -> dict:
        return {**self.oracle.describe(), "num_instances": self.config.count,
                "weights_gib_per_gpu": self.weight_bytes / GIB,
                "activations_gib_per_gpu": self.activation_bytes / GIB,
                "available_gib_per_gpu": self.available_bytes / GIB}


def resolve_ffn(pool: PoolConfig, max_tokens: int) -> ResolvedFFN:
    """Resolve the FFN pool; ``max_tokens`` = the most tokens one FFN pass receives (the
    attention pool's ``max_num_seqs`` per instance times its instances, over the FFN
    instances). Raises :class:`SpecError` when its weights and activations do not fit."""
    if pool.pp != 1:
        raise SpecError("pools.ffn.pp: an FFN instance runs every layer's FFN in turn; "
                        "pipeline parallelism is not modelled for it (give pp: 1)")
    oracle = CostOracle(pool.model, pool.gpu, tp=pool.tp, ep=pool.ep, dp=pool.dp,
                        dtype=instance_dtype(pool), cuda_graph=pool.cuda_graph, profile=pool.profile,
                        moe_routing=pool.moe_routing, graph_sizes=pool.cuda_graph_sizes,
                        graph_padding=pool.cuda_graph_padding is not False)
    setup = resolve_setup(pool.model, pool.gpu, oracle.parallel, dtype=oracle.quantization,
                          profile=oracle.profile, weights_role="ffn",
                          redundant_experts=oracle.routing.redundant_experts)
    weights = setup.weights[0]
    acts = activation_peak_bytes(setup.model, setup.par, max_tokens, max_tokens, sampler=False)
    available = setup.gpu.memory_bytes * pool.gpu_memory_utilization
    need = weights + acts + setup.non_torch
    if need > available:
        raise SpecError(
            f"pools.ffn: an FFN instance of {setup.model.name} on {pool.tp * pool.dp} "
            f"{setup.gpu.name} needs {need / GIB:.1f} GiB per GPU (FFN weights "
            f"{weights / GIB:.1f}, activations {acts / GIB:.1f}, runtime "
            f"{setup.non_torch / GIB:.1f}) but {available / GIB:.1f} GiB is available; give "
            "it more GPUs (tp, ep) or more instances")
    return ResolvedFFN(pool, oracle, weights, acts, available)


def afd_cost(d: PoolsDeployment, attention: CostOracle, ffn: ResolvedFFN) -> AFDStepCost:
    """The attention pool's step cost under ``d``'s AFD options."""
    return AFDStepCost(attention, ffn.oracle, ffn_instances=ffn.config.count,
                       micro_batches=d.micro_batches, link_bw=d.afd_link_bw,
                       link_latency_s=d.afd_link_latency_s,
                       scaleup=d.afd_link == "scale-up")


def ffn_max_tokens(d: PoolsDeployment, max_num_seqs: int) -> int:
    """Most tokens one FFN pass can receive: every attention instance's full batch."""
    att, ffn = d.pool("attention"), d.pool("ffn")
    return max(1, -(-max_num_seqs * att.count // ffn.count))


def describe_afd(d: PoolsDeployment, cost: AFDStepCost, ffn: ResolvedFFN) -> dict:
    """The AFD-specific resolved values (a Dataset's ``resolved`` attribute)."""
    row = cost.afd_row()
    return {"ffn": ffn.describe(), "micro_batches": d.micro_batches, "afd_link": d.afd_link,
            "activation_bytes_per_token": cost.bytes_per_token,
            "activation_seconds_per_token": {"attention_egress": float(row[AFD_EGRESS_S]),
                                             "ffn_ingress": float(row[AFD_INGRESS_S])},
            "activation_latency_s": float(row[AFD_LATENCY])}


__all__ = ["ResolvedFFN", "afd_cost", "describe_afd", "ffn_max_tokens", "resolve_ffn"]
