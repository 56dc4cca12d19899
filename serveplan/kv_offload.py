"""``kv_offload``: an instance's CPU KV tier in a config (:mod:`serveplan.sim.cpu_tier`).

Per instance (colocated deployment, ``prefill``/``decode`` pool, or a pool of the pool
form)::

    kv_offload: {cpu_gb: 64}                  # GiB of host memory per instance
    kv_offload: {cpu_bytes: 68719476736, store_on: compute, host_bw: 50e9}

The size is one of ``cpu_bytes``, ``cpu_gb`` (GiB, as vLLM and LMCache count their "GB"),
``kv_offloading_size`` (vLLM's ``--kv-offloading-size``: GiB per instance, summed over its
TP ranks; the same as ``cpu_gb``) or ``max_local_cpu_size`` (LMCache's
``LMCACHE_MAX_LOCAL_CPU_SIZE``: GiB per worker process, i.e. per rank; multiplied by the
instance's ``tp * pp``). 0 means no tier. ``host_bw`` (bytes/s per GPU and direction) and
``latency_s`` override the GPU catalog's host link (``host_bw``, ``host_latency_s``).
``store_on``: ``evict`` writes a block to the tier when the GPU prefix cache evicts it,
``compute`` as soon as it is computed (vLLM's offloading connector).

vLLM's ``--cpu-offload-gb`` is not a KV tier (it offloads model weights) and is not
accepted here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GIB = float(1 << 30)
HOST_BYTES_PER_GPU = 512 * GIB
"""Host memory per GPU a CPU tier may take: 512 GiB, the most any shipping 8-GPU server
gives (DGX B200 with 4 TB for 8 GPUs; DGX H100 has 2 TB, a GB200 superchip 480 GB of
LPDDR5X for two GPUs). A larger tier is a typo (bytes given as GiB) rather than a plan."""
SIZE_FIELDS = ("cpu_bytes", "cpu_gb", "kv_offloading_size", "max_local_cpu_size")


class KVOffloadConfig(BaseModel):
    """An instance's CPU KV tier (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_bytes: float | None = Field(None, ge=0, allow_inf_nan=False,
                                    description="Host memory of the tier, bytes per instance.")
    cpu_gb: float | None = Field(None, ge=0, allow_inf_nan=False,
                                 description="Host memory of the tier, GiB per instance.")
    kv_offloading_size: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="vLLM --kv-offloading-size: GiB per "
        "instance (all TP ranks together).")
    max_local_cpu_size: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="LMCache max_local_cpu_size: GiB per "
        "rank (times tp * pp).")
    store_on: Literal["evict", "compute"] = Field(
        "evict", description="When a block goes to the tier: evicted from the GPU prefix "
        "cache, or computed (write-through, vLLM's offloading connector).")
    host_bw: float | None = Field(None, gt=0, allow_inf_nan=False, description="Host link, "
                                  "bytes/s per GPU and direction (default: the GPU catalog's).")
    latency_s: float | None = Field(None, ge=0, le=1, description="Per-load latency, seconds "
                                    "(default: the GPU catalog's host_latency_s).")

    @model_validator(mode="after")
    def _one_size(self):
        given = [f for f in SIZE_FIELDS if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError(f"give the tier's size as exactly one of {', '.join(SIZE_FIELDS)}"
                             f" (got {', '.join(given) if given else 'none'})")
        return self

    @property
    def size_field(self) -> str:
        return next(f for f in SIZE_FIELDS if getattr(self, f) is not None)

    def size_bytes(self, ranks: int) -> float:
        """Host bytes of the tier of one instance of ``ranks`` GPUs (``tp * pp``)."""
        field = self.size_field
        value = float(getattr(self, field))
        if field == "cpu_bytes":
            return value
        return value * GIB * (ranks if field == "max_local_cpu_size" else 1)


def host_memory_problem(cfg: KVOffloadConfig, ranks: int, gpus: int) -> str | None:
    """Why the tier cannot fit the host memory of an instance's ``gpus`` GPUs (None: it
    can); :data:`HOST_BYTES_PER_GPU` per GPU."""
    size, limit = cfg.size_bytes(ranks), HOST_BYTES_PER_GPU * gpus
    if size <= limit:
        return None
    return (f"{size / GIB:,.4g} GiB of host memory per instance is more than "
            f"{limit / GIB:,.0f} GiB ({HOST_BYTES_PER_GPU / GIB:.0f} GiB per GPU, the most a "
            f"GPU server has, x {gpus} GPU{'s' if gpus > 1 else ''}); is the size in GiB?")


__all__ = ["GIB", "HOST_BYTES_PER_GPU", "KVOffloadConfig", "host_memory_problem"]
