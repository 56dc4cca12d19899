"""A CPU tier for the KV cache: what a pool's instances get, and what a run reports.

Models vLLM's KV offloading (``--kv-offloading-size``, the ``OffloadingConnector`` with its
CPU backend) and LMCache's local CPU backend (``max_local_cpu_size``): each instance owns a
pool of KV blocks in host memory, keyed by the same prefix hashes as its GPU prefix cache
and evicted least recently used first. The compiled side lives in
:mod:`serveplan.sim.kvcache` (``pool.cpu``); this module sizes and prices it
(:class:`CPUTier`), lays it out over a run's instances (:func:`cpu_pool_for`) and turns
its counters into result variables (:func:`cpu_tier_vars`) and summary figures
(:func:`cpu_tier_summary`).

What is modelled
----------------
* **Stores.** A hashed, full GPU block goes to the CPU tier when the GPU prefix cache
  evicts it (``store_on="evict"``, the default: the tier holds what the GPU lost) or as
  soon as it is computed (``store_on="compute"``, write-through -- what vLLM's
  ``OffloadingConnector`` does: it offloads each newly full block after the step that
  computed it). Stores run on their own stream and overlap compute in both engines, so
  they cost the step nothing here; their bytes are counted (``cpu_bytes_stored``). A
  hash the tier already holds moves no bytes.
* **Loads.** A prefix lookup that misses on the GPU continues in the CPU tier; the
  blocks it finds there are copied into fresh GPU blocks when the request is admitted.
  The load takes ``blocks x seconds_per_block + latency_s`` (one transfer per request
  admission) and is added to the step that admits the request: the request's first
  forward pass starts after its KV is on the GPU.

Approximations
--------------
* Loads are synchronous: every request of the admitting step waits for them, as with
  LMCache's default (non-layer-wise) retrieval in the connector's ``start_load_kv``. vLLM's
  native connector loads asynchronously instead -- the request waits
  (``WAITING_FOR_REMOTE_KVS``) while other requests' steps run. That would need a timed
  wake-up event in the loop; here the load lengthens one step instead, which overstates
  the cost to the requests batched with the loading one and understates the loading
  request's wait by up to one step.
* The host link is the per-GPU bandwidth from the GPU catalog (``host_bw``), each rank
  moving its own shard in parallel; loads and stores do not contend for it, and
  concurrent loads of several requests in one step do not share it (each pays its own
  latency, their times add).
* Blocks have the GPU's block size (vLLM's connector may group several GPU blocks into
  one offloaded block; LMCache uses 256-token chunks): a lookup hits at GPU-block
  granularity.
* A decode instance never looks prefixes up, so its CPU tier stays empty and is not built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kvcache import (
    C_LOADED,
    C_LOADS,
    C_STORED,
    CPU_STORE_COMPUTE,
    CPU_STORE_EVICT,
    F_LOAD_TIME,
    CPUPool,
    make_cpu_pool,
)
from .pools import Role

STORE_MODES = {"evict": CPU_STORE_EVICT, "compute": CPU_STORE_COMPUTE}
"""``store_on`` name -> the compiled mode code."""


@dataclass(frozen=True)
class CPUTier:
    """The CPU KV tier of each instance of a pool.

    Parameters
    ----------
    num_blocks : int
        KV blocks the tier holds (0: no tier).
    block_bytes : float
        Bytes of one block over all of the instance's ranks (for the byte counts).
    seconds_per_block : float
        Host-link time of one block: one rank's share of the block over the per-GPU host
        bandwidth (the ranks load in parallel).
    latency_s : float
        Added once per load (one load per request admission).
    store_on : {"evict", "compute"}
        When a block is written to the tier (module docstring).
    """

    num_blocks: int
    block_bytes: float = 0.0
    seconds_per_block: float = 0.0
    latency_s: float = 0.0
    store_on: str = "evict"

    def __post_init__(self) -> None:
        if int(self.num_blocks) != self.num_blocks or self.num_blocks < 0:
            raise ValueError(f"num_blocks must be an integer >= 0, got {self.num_blocks!r}")
        for name in ("block_bytes", "seconds_per_block", "latency_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.store_on not in STORE_MODES:
            raise ValueError(f"store_on given an invalid value: {self.store_on!r} "
                             f"(valid: {', '.join(STORE_MODES)})")

    @classmethod
    def from_link(cls, cpu_bytes: float, block_size: int, rank_bytes_per_token: float,
                  ranks: int, host_bw: float, latency_s: float = 0.0,
                  store_on: str = "evict") -> CPUTier:
        """The tier that ``cpu_bytes`` of host memory buys an instance of ``ranks`` GPUs,
        each holding ``rank_bytes_per_token`` of KV per token and moving it over its own
        host link of ``host_bw`` bytes/s:

        ``block_bytes = block_size * rank_bytes_per_token * ranks``,
        ``num_blocks = floor(cpu_bytes / block_bytes)``,
        ``seconds_per_block = block_size * rank_bytes_per_token / host_bw``.
        """
        if not host_bw > 0:
            raise ValueError(f"host_bw must be > 0 bytes/s, got {host_bw!r}")
        rank_block = float(block_size) * float(rank_bytes_per_token)
        block_bytes = rank_block * int(ranks)
        return cls(int(cpu_bytes // block_bytes), block_bytes, rank_block / float(host_bw),
                   float(latency_s), store_on)

    def per_engine(self, engines: int) -> CPUTier:
        """The tier of one of ``engines`` virtual engines sharing it (pipeline parallel)."""
        return CPUTier(self.num_blocks // engines, self.block_bytes, self.seconds_per_block,
                       self.latency_s, self.store_on)

    def describe(self) -> dict:
        return {"cpu_kv_blocks": self.num_blocks, "cpu_kv_bytes": self.num_blocks
                * self.block_bytes, "block_bytes": self.block_bytes,
                "seconds_per_block": self.seconds_per_block, "latency_s": self.latency_s,
                "store_on": self.store_on}


def _tier_of(spec) -> CPUTier | None:
    tier = getattr(spec, "cpu_tier", None)
    if tier is None or tier.num_blocks == 0 or spec.role == Role.DECODE:
        return None  # (a decode instance never looks prefixes up)
    return tier


def cpu_pool_for(pools, pool_of) -> CPUPool:
    """The CPU tiers of a run's instances (``pool_of``: each instance's pool index)."""
    tiers = [_tier_of(pools[k]) for k in pool_of]
    return make_cpu_pool([t.num_blocks if t else 0 for t in tiers],
                         [t.seconds_per_block if t else 0.0 for t in tiers],
                         [t.latency_s if t else 0.0 for t in tiers],
                         [STORE_MODES[t.store_on] if t else 0 for t in tiers])


def cpu_tier_vars(res) -> dict:
    """Result variables of a run with a CPU tier (none without one, so a run without it
    gives the same Dataset as before the tier existed).

    Per request (entry instance, first admission): ``gpu_hit_tokens`` and
    ``cpu_hit_tokens``, which add up to ``prefix_hit_tokens``. Per instance: the tier's
    capacity, bytes stored and loaded, loads and the time they added to steps.
    """
    tiers = [_tier_of(res.pools[k]) for k in res.pool_of]
    if not any(tiers):
        return {}
    r, cpu = res.reqs, res.pool.cpu
    block = np.array([t.block_bytes if t else 0.0 for t in tiers])
    blocks = np.array([t.num_blocks if t else 0 for t in tiers], dtype=np.int64)
    cpu_hit = r.cpu_hit
    tok = {"units": "tokens"}
    req, inst = ("request",), ("instance",)
    return {
        "gpu_hit_tokens": (req, np.maximum(r.hit, 0) - cpu_hit,
                           {**tok, "description": "prompt tokens found in the GPU prefix "
                                                  "cache at first admission"}),
        "cpu_hit_tokens": (req, cpu_hit.copy(),
                           {**tok, "description": "prompt tokens loaded from the CPU tier at "
                                                  "first admission"}),
        "cpu_kv_blocks": (inst, blocks, {"units": "blocks", "description": "CPU tier capacity"}),
        "cpu_kv_bytes": (inst, blocks * block, {"units": "B"}),
        "cpu_bytes_stored": (inst, cpu.meta[:, C_STORED] * block,
                             {"units": "B", "description": "GPU -> CPU (overlaps compute)"}),
        "cpu_bytes_loaded": (inst, cpu.meta[:, C_LOADED] * block,
                             {"units": "B", "description": "CPU -> GPU"}),
        "cpu_loads": (inst, cpu.meta[:, C_LOADS].copy(),
                      {"units": "1", "description": "CPU -> GPU transfers (one per admission)"}),
        "cpu_load_s": (inst, cpu.fl[:, F_LOAD_TIME].copy(),
                       {"units": "s", "description": "step time spent waiting for loads"}),
    }


def cpu_tier_summary(ds, done: np.ndarray) -> dict:
    """Summary figures of a run with a CPU tier (empty without one): hit rates by tier
    (over the completed requests' prompt tokens, as ``prefix_hit_rate``), bytes moved
    and the time loads added to steps."""
    if "cpu_hit_tokens" not in ds:
        return {}
    prompt = float(ds["prompt_len"].values[done].sum())

    def rate(var):
        return float(ds[var].values[done].sum() / prompt) if prompt else 0.0

    return {"gpu_prefix_hit_rate": rate("gpu_hit_tokens"),
            "cpu_prefix_hit_rate": rate("cpu_hit_tokens"),
            "cpu_bytes_stored": float(ds["cpu_bytes_stored"].values.sum()),
            "cpu_bytes_loaded": float(ds["cpu_bytes_loaded"].values.sum()),
            "cpu_load_time_s": float(ds["cpu_load_s"].values.sum())}


__all__ = ["CPUTier", "STORE_MODES", "cpu_pool_for", "cpu_tier_summary", "cpu_tier_vars"]
