"""The price of a layout switch: weights resharded, KV moved or recomputed.

A switch from layout A to layout B (same GPUs, :mod:`serveplan.sim.reconfig`) pauses
generation for

    pause = setup_s + weight_bytes_B / bw + max_i kv_bytes_i / bw

* ``setup_s``: a fixed term (process groups rebuilt, CUDA graphs recaptured, engines
  restarted); configurable, default 0.
* weights: every GPU of B receives its whole new shard, ``weight_bytes_B`` (the memory
  planner's resident weights of one rank, :func:`serveplan.estimator.memory.plan_memory`),
  over its own link, all GPUs in parallel. This ignores the part of the new shard a GPU
  already holds under A (a TP-2 shard contains half of each TP-4 shard it overlaps), so it
  is an upper bound for a careful reshard and the right order for a broadcast from the
  trainer or a checkpoint.
* KV (``kv: transfer``): B instance ``i`` receives the KV of the tokens its migrated
  requests keep, ``kv_bytes_i = tokens_i * kv_bytes_per_token_B`` per rank (the memory
  planner's bytes per token of one rank of B), each rank over its own link; the slowest
  instance sets the pause. With ``kv: recompute`` nothing moves: B prefills each context in
  its own steps, priced by its cost oracle inside the simulation, and
  :func:`recompute_estimate` reports what those prefills cost alone.
* ``bw`` is the GPU's scale-up link (NVLink) when an instance of A and one of B each fit in
  a node -- a node then holds whole replicas under both layouts and reshards within itself
  -- else its scale-out link (one NIC per GPU); ``link`` or ``link_bw`` override it.

``reconfig_cost_s`` replaces the whole pause with a measured value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from serveplan.sim.costs import prefill_seconds

LINKS = ("auto", "scale-up", "scale-out")


@dataclass(frozen=True)
class LayoutBytes:
    """What moving to layout B weighs, per GPU of B (from its memory plan)."""

    weight_bytes: float  # resident weights of one rank
    kv_bytes_per_token: float  # KV of one token on one rank (all its attention layers)
    gpus_per_instance: int


@dataclass(frozen=True)
class PauseCost:
    """The pause of one switch and its parts (seconds; bytes per GPU)."""

    setup_s: float
    weights_s: float
    kv_transfer_s: float
    override_s: float | None
    link: str
    link_bw: float
    weight_bytes: float
    kv_bytes_max: float

    @property
    def total_s(self) -> float:
        if self.override_s is not None:
            return self.override_s
        return self.setup_s + self.weights_s + self.kv_transfer_s

    def as_dict(self) -> dict:
        return {**asdict(self), "total_s": self.total_s}


def choose_link(gpu, gpus_a: int, gpus_b: int, link: str = "auto",
                link_bw: float | None = None) -> tuple[str, float]:
    """``(name, bytes/s per GPU)`` of the link a reshard uses (module docstring)."""
    if link not in LINKS:
        raise ValueError(f"link given an invalid value: {link!r} (valid: {', '.join(LINKS)})")
    if link == "auto":
        in_node = max(gpus_a, gpus_b) <= gpu.gpus_per_node
        link = "scale-up" if in_node else "scale-out"
    bw = gpu.scaleup_bw if link == "scale-up" else gpu.scaleout_bw
    if link_bw is not None:
        bw = float(link_bw)
    return link, float(bw)


def weight_reshard_seconds(weight_bytes: float, bw: float) -> float:
    """Seconds for every GPU of B to receive its shard of ``weight_bytes`` at ``bw``."""
    return float(weight_bytes) / float(bw)


def kv_transfer_bytes(migration, kv_bytes_per_token: float) -> np.ndarray:
    """KV bytes each rank of each B instance receives (the tokens its requests keep)."""
    per_inst = np.zeros(migration.num_b_instances)
    np.add.at(per_inst, migration.b_instance, migration.kv_kept)
    return per_inst * float(kv_bytes_per_token)


def pause_cost(migration, layout: LayoutBytes, link: tuple[str, float], *,
               setup_s: float = 0.0, override_s: float | None = None) -> PauseCost:
    """The pause of ``migration`` (a :class:`serveplan.sim.reconfig.Migration`) onto B."""
    name, bw = link
    kv = kv_transfer_bytes(migration, layout.kv_bytes_per_token)
    kv_max = float(kv.max()) if kv.size else 0.0
    return PauseCost(setup_s=float(setup_s),
                     weights_s=weight_reshard_seconds(layout.weight_bytes, bw),
                     kv_transfer_s=kv_max / bw, override_s=override_s, link=name,
                     link_bw=bw, weight_bytes=float(layout.weight_bytes), kv_bytes_max=kv_max)


def recompute_estimate(migration, cost, chunk: int) -> float:
    """Seconds the slowest B instance needs to prefill the contexts it recomputes, one
    after another and alone (``cost``: B's cost oracle; ``chunk``: its token budget). The
    simulation batches them with decodes instead; this is the figure to compare a pause
    with."""
    redo = migration.kv_kept == 0
    if not redo.any():
        return 0.0
    t = prefill_seconds(cost, migration.context[redo], chunk)
    per_inst = np.zeros(migration.num_b_instances)
    np.add.at(per_inst, migration.b_instance[redo], t)
    return float(per_inst.max())


__all__ = ["LINKS", "LayoutBytes", "PauseCost", "choose_link", "kv_transfer_bytes",
           "pause_cost", "recompute_estimate", "weight_reshard_seconds"]
