"""How routed tokens spread over the expert-parallel ranks, and the straggler they make.

An expert-parallel (EP) MoE layer finishes when its busiest rank does: the all-to-all
dispatch has delivered, and the grouped GEMMs are done, only when the rank holding the
most token-expert assignments is. :class:`MoERouting` describes the router's statistics
and where the experts sit; :meth:`MoERouting.rank_loads` gives each rank's expected share
of a layer's assignments and :meth:`MoERouting.load_factor` the busiest rank's share over
the mean, ``f = max_r L_r / mean_r L_r = ep · max_r L_r``. The cost kernels price the
busiest rank as a rank of a balanced layer with ``f`` times the tokens
(:data:`serveplan.kernels.roofline.P_MOE_LOAD`): ``f`` times the expert work and ``f``
times the all-to-all bytes.

Popularity
    The share of a layer's token-expert assignments each expert receives: ``uniform``
    (1/E each), or ``zipf`` over the experts' popularity rank ``e = 1..E``,
    ``p_e = e^-s / sum_j j^-s`` (``s`` = ``skew``; ``s = 0`` is uniform). A token picks
    ``k`` *distinct* experts, so no expert can take more than 1/k of the assignments:
    shares above 1/k are capped there and the excess goes to the other experts in
    proportion to ``p`` (water-filling, :func:`expert_shares`).
Static placement (default)
    Experts sit on the ranks in contiguous blocks of E/ep by id, and nothing ties an
    expert's popularity to its id: the loads are the expectation over every equally likely
    placement of E/ep experts per rank -- all of them when there are at most
    :data:`EXACT_PLACEMENTS` distinct ones, else :data:`SAMPLED_PLACEMENTS` drawn with a
    fixed seed (the same for every skew, so a larger skew is priced on the same
    placements). ``rank_loads`` are the expected loads of the busiest rank, the second
    busiest, and so on.
EPLB (``eplb``, ``redundant_experts``)
    As DeepSeek's expert-parallel load balancer (used by vLLM and SGLang), with the loads
    known: ``R`` redundant replicas go one at a time to the expert with the highest load
    per replica (a replica takes an equal part of its expert's load), then the ``E + R``
    physical experts are packed ``(E + R) / ep`` per rank, heaviest first, each onto the
    least-loaded rank with a free slot.

What is approximated: the loads are *expected* shares, the limit of many tokens. A step's
router draws tokens at random, so a small decode batch is more uneven than its expected
loads say; that sampling spread is not added. Within the busiest rank the tokens are taken
as spread evenly over its experts when counting the experts they hit (an upper bound on the
weights it reads). Popularity is the same for every layer and every step (EPLB is priced
at its balanced state, not while it re-plans).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .specs import SpecError

MAX_SKEW = 8.0
"""Largest Zipf exponent: at s = 8 the hottest expert already has 99.6 % of the popularity,
so every token picks the same top-k experts (a larger s changes nothing)."""
MAX_REDUNDANT = 4096
"""Most redundant experts (EPLB deployments use a few dozen; DeepSeek-V3 runs 32)."""
EXACT_PLACEMENTS = 4096
"""Static placements are averaged over all distinct ones up to this many."""
SAMPLED_PLACEMENTS = 2048
"""Beyond :data:`EXACT_PLACEMENTS`, the number of random placements averaged."""
PLACEMENT_SEED = 0
"""Seed of the sampled placements (fixed: the loads are a property of the deployment)."""
TRAFFIC_DISTRIBUTION = {"power_law": "power_law_1.01", "balanced": "balanced"}
"""The measured router distribution (AIConfigurator's label) each
:attr:`MoERouting.traffic` prices a rank's expert GEMMs with."""


class MoERouting(BaseModel):
    """Routing statistics and expert placement of an MoE deployment (module doc).

    ``kind`` defaults to ``zipf`` when ``skew`` is given, else ``uniform``; ``skew``
    defaults to 1 for ``zipf``. ``redundant_experts`` (vLLM's ``num_redundant_experts``)
    turns EPLB on; ``eplb: true`` without replicas rearranges the experts only.

    >>> round(MoERouting(kind="zipf", skew=1.0).load_factor(4, 1, 2), 4)  # 98/75, by hand
    1.3067
    >>> MoERouting().load_factor(256, 8, 8)
    1.0
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["uniform", "zipf"] = "uniform"
    skew: float = Field(0.0, ge=0.0, le=MAX_SKEW, allow_inf_nan=False, description=(
        "Zipf exponent s of expert popularity, p_e ~ e^-s (0 = uniform)."))
    redundant_experts: int = Field(0, ge=0, le=MAX_REDUNDANT, description=(
        "EPLB's replicas of the hottest experts (vLLM num_redundant_experts)."))
    eplb: bool | None = Field(None, description=(
        "Place experts by load as EPLB (default: on when redundant_experts > 0)."))
    traffic: Literal["power_law", "balanced"] = Field("power_law", description=(
        "Router traffic the expert GEMMs are priced under, as measured per op: power_law "
        "(AIConfigurator's power law of exponent 1.01, what its estimator prices served "
        "traffic with, timed on the busiest rank: fewer distinct experts hit at tens of "
        "tokens, a hot expert's longer GEMM at thousands) or balanced (every expert "
        "equally loaded). A zipf popularity (any skew) prices its skew itself, on the "
        "balanced tables."))

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data):
        if isinstance(data, dict):
            data = dict(data)
            if "num_redundant_experts" in data and "redundant_experts" not in data:
                data["redundant_experts"] = data.pop("num_redundant_experts")
            if data.get("kind") is None:
                data["kind"] = "zipf" if data.get("skew") is not None else "uniform"
            if data["kind"] == "zipf" and data.get("skew") is None:
                data["skew"] = 1.0
        return data

    @field_validator("skew")
    @classmethod
    def _uniform_has_no_skew(cls, v: float, info: ValidationInfo) -> float:
        if info.data.get("kind") == "uniform" and v != 0.0:
            raise ValueError(f"uniform routing has no skew (got {v:g}); say kind: zipf")
        return v

    @field_validator("eplb")
    @classmethod
    def _replicas_need_eplb(cls, v: bool | None, info: ValidationInfo) -> bool | None:
        replicas = info.data.get("redundant_experts", 0)
        if v is False and replicas:
            raise ValueError(f"redundant_experts ({replicas}) are EPLB's replicas: leave eplb "
                             "out or set it true, or drop redundant_experts")
        return v

    @property
    def balanced_placement(self) -> bool:
        """Experts placed by load (EPLB) rather than by id."""
        return self.eplb if self.eplb is not None else self.redundant_experts > 0

    @property
    def measured_distribution(self) -> str:
        """The AIConfigurator router distribution whose MoE tables price these experts:
        the :attr:`traffic`'s, but balanced under a ``zipf`` popularity (any skew), whose
        load factor prices the skew instead (it is not counted twice)."""
        return TRAFFIC_DISTRIBUTION[self.traffic if self.kind == "uniform" else "balanced"]

    @property
    def is_uniform(self) -> bool:
        """Every expert equally popular (``uniform``, or ``zipf`` with ``skew`` 0)."""
        return self.kind == "uniform" or self.skew == 0.0

    def check(self, num_experts: int, ep: int, model: str = "the model",
              field: str = "moe_routing.redundant_experts") -> None:
        """Raise :class:`SpecError` naming ``field`` if the replicas cannot be placed."""
        replicas = self.redundant_experts
        if replicas and ep <= 1:
            raise SpecError(f"{field}: {replicas} replicas need expert parallelism (ep > 1); "
                            "with ep = 1 every rank holds every expert")
        if (num_experts + replicas) % ep:
            raise SpecError(
                f"{field}: {num_experts} experts of {model} + "
                f"{replicas} redundant = {num_experts + replicas} do not split evenly over "
                f"ep={ep} ranks (each rank holds (experts + redundant) / ep)")

    def rank_loads(self, num_experts: int, top_k: int, ep: int) -> np.ndarray:
        """Expected share of a layer's token-expert assignments on each of the ``ep``
        ranks, busiest first (they sum to 1)."""
        self.check(num_experts, ep)
        if ep <= 1:
            return np.ones(1)
        if self.is_uniform and not self.balanced_placement:
            return np.full(ep, 1.0 / ep)
        loads = _rank_loads(self.kind, self.skew, self.redundant_experts,
                            self.balanced_placement, num_experts, top_k, ep)
        return np.array(loads)

    def load_factor(self, num_experts: int, top_k: int, ep: int) -> float:
        """The busiest rank's load over the mean, ``ep · max_r L_r`` (>= 1; exactly 1 for
        uniform routing, whose experts split evenly over the ranks)."""
        loads = self.rank_loads(num_experts, top_k, ep)
        if ep <= 1 or (self.is_uniform and not self.balanced_placement):
            return 1.0
        return max(1.0, float(ep * loads[0]))


def expert_shares(num_experts: int, top_k: int, skew: float) -> np.ndarray:
    """Share of the assignments of each expert, in popularity order (sum 1).

    Zipf popularity ``p_e ∝ e^-skew`` capped at ``1/top_k`` (a token picks an expert at
    most once), the excess spread over the uncapped experts in proportion to ``p``.
    """
    p = np.arange(1, num_experts + 1, dtype=np.float64) ** -skew
    p /= p.sum()
    cap = 1.0 / top_k
    capped = np.zeros(num_experts, dtype=bool)
    w = p
    while True:
        over = (w > cap) & ~capped
        if not over.any():
            return w
        capped |= over
        if capped.all():  # top_k = num_experts: every token takes every expert
            return np.full(num_experts, cap)
        w = np.where(capped, cap, p * (1.0 - cap * capped.sum()) / p[~capped].sum())


@functools.lru_cache(maxsize=256)
def _rank_loads(kind: str, skew: float, redundant: int, balanced: bool, num_experts: int,
                top_k: int, ep: int) -> tuple[float, ...]:
    shares = expert_shares(num_experts, top_k, skew if kind == "zipf" else 0.0)
    if balanced:
        loads = eplb_rank_loads(shares, ep, redundant)
    else:
        loads = static_rank_loads(shares, ep)
    return tuple(float(x) for x in loads)


def static_rank_loads(shares: np.ndarray, ep: int) -> np.ndarray:
    """Expected rank loads, busiest first, over the placements of ``len(shares) / ep``
    experts per rank that ignore popularity (module doc)."""
    blocks = placements(shares.shape[0], ep)  # (placements, ep, experts per rank)
    loads = shares[blocks].sum(axis=-1)
    return np.sort(loads, axis=1)[:, ::-1].mean(axis=0)


def placements(num_experts: int, ep: int) -> np.ndarray:
    """Expert indices per rank, ``(n, ep, num_experts // ep)``: every distinct placement
    (ranks unordered) when there are at most :data:`EXACT_PLACEMENTS`, else
    :data:`SAMPLED_PLACEMENTS` random ones drawn with :data:`PLACEMENT_SEED`."""
    per_rank = num_experts // ep
    distinct = math.factorial(num_experts) // (math.factorial(per_rank) ** ep
                                               * math.factorial(ep))
    if distinct <= EXACT_PLACEMENTS:
        out = np.array(list(_partitions(tuple(range(num_experts)), per_rank)))
        return out.reshape(-1, ep, per_rank)
    rng = np.random.default_rng(PLACEMENT_SEED)
    order = np.argsort(rng.random((SAMPLED_PLACEMENTS, num_experts)), axis=1)
    return order.reshape(SAMPLED_PLACEMENTS, ep, per_rank)


def _partitions(items: tuple[int, ...], size: int):
    """Every split of ``items`` into unordered blocks of ``size``, as flat tuples (block by
    block; each block holds the smallest item left)."""
    if not items:
        yield ()
        return
    first, rest = items[0], items[1:]
    for others in itertools.combinations(rest, size - 1):
        block = (first, *others)
        left = tuple(x for x in rest if x not in others)
        for tail in _partitions(left, size):
            yield block + tail


def eplb_rank_loads(shares: np.ndarray, ep: int, redundant: int) -> np.ndarray:
    """Rank loads, busiest first, after EPLB's replication and greedy packing (module doc).

    Ties go to the lower index: the more popular expert, the lower-numbered rank.
    """
    replicas = np.ones(shares.shape[0])
    for _ in range(redundant):
        replicas[np.argmax(shares / replicas)] += 1.0
    physical = np.repeat(shares / replicas, replicas.astype(np.int64))
    slots = physical.shape[0] // ep
    load = np.zeros(ep)
    used = np.zeros(ep, dtype=np.int64)
    for x in np.sort(physical)[::-1]:
        free = np.flatnonzero(used < slots)
        rank = free[np.argmin(load[free])]
        load[rank] += x
        used[rank] += 1
    return np.sort(load)[::-1]


__all__ = ["MoERouting", "eplb_rank_loads", "expert_shares", "placements",
           "static_rank_loads"]
