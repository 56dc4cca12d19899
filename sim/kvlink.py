"""How KV moves between the instances of two roles: per-token link time, latency, placement."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def rank_kv_bytes_per_token(oracle) -> float:
    """KV bytes of one token on one rank of an instance (its cost ``oracle``: model,
    parallelism, KV dtype): :func:`~serveplan.estimator.memory.kv_bytes_per_token_layer`
    times the layers of the rank's pipeline stage (the first stage is the largest)."""
    from serveplan.estimator.memory import kv_bytes_per_token_layer

    layers = -(-oracle.model.num_layers // oracle.parallel.pp)
    return kv_bytes_per_token_layer(oracle.model, oracle.parallel.tp, oracle.kv_dtype) * layers


@dataclass(frozen=True)
class KVLink:
    """How KV moves from prefill to decode instances.

    Parameters
    ----------
    seconds_per_token : (float, float)
        Link time of one prompt token's KV alone on the link, over (scale-up, scale-out):
        the per-rank KV bytes of a token divided by the per-GPU bandwidth.
    latency_s : (float, float)
        Latency added to every transfer, per link kind.
    bytes_per_token : float
        KV bytes moved per prompt token, all ranks together (for reporting).
    num_layers : int
        Layers of the model: a layer-wise transfer cannot end before its prefill plus one
        layer's share.
    prefill_nodes, decode_nodes : int arrays, optional
        Node of each instance; a pair on the same node uses the scale-up link. Default:
        every transfer crosses nodes (scale-out).

    The default link is free (no time, no latency): KV arrives as the prefill ends.
    """

    seconds_per_token: tuple[float, float] = (0.0, 0.0)
    latency_s: tuple[float, float] = (0.0, 0.0)
    bytes_per_token: float = 0.0
    num_layers: int = 1
    prefill_nodes: tuple[int, ...] | None = None
    decode_nodes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("seconds_per_token", "latency_s"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if v.shape != (2,) or not np.all(np.isfinite(v)) or np.any(v < 0):
                raise ValueError(f"{name} must be two finite numbers >= 0 (scale-up, "
                                 f"scale-out), got {getattr(self, name)!r}")
        if int(self.num_layers) != self.num_layers or self.num_layers < 1:
            raise ValueError(f"num_layers must be an integer >= 1, got {self.num_layers!r}")

    @classmethod
    def uniform(cls, seconds_per_token: float, latency_s: float = 0.0, *,
                bytes_per_token: float = 0.0, num_layers: int = 1) -> KVLink:
        """The same link between every pair (all transfers over the scale-out kind)."""
        return cls((seconds_per_token, seconds_per_token), (latency_s, latency_s),
                   bytes_per_token, num_layers)

    @classmethod
    def from_specs(cls, prefill_oracle, decode_oracle, n_prefill: int, n_decode: int, *,
                   placement: str = "packed", bandwidth: float | None = None,
                   latency_s: float | None = None, prefill_ranks: int = 1,
                   decode_ranks: int = 1) -> KVLink:
        """The link of a deployment, from its two cost oracles (model, GPU, parallelism).

        KV per token and rank is :func:`~serveplan.estimator.memory.kv_bytes_per_token_layer`
        times the layers of the rank's pipeline stage (the first stage is the largest);
        ranks transfer in parallel, so the side with more bytes per rank sets the time.
        ``bytes_per_token`` is what the decode ranks receive in all.

        Placement: instances take ``tp * pp * dp`` consecutive GPUs, prefill instances
        first; ``packed`` lets decode instances share the prefill pool's last node (when
        both pools use the same GPU type), ``separate`` starts them on a fresh node. A pair
        of instances whose first GPUs share a node uses the scale-up link (NVLink), else
        the scale-out one. ``bandwidth`` (bytes/s per GPU) and ``latency_s`` override both
        kinds. ``prefill_ranks`` / ``decode_ranks``: the attention data-parallel ranks an
        instance runs as (the simulator's instances; rank r of an instance starts at its
        ``r * tp * pp``-th GPU).
        """
        from serveplan.estimator.memory import kv_bytes_per_token_layer

        per_rank = rank_kv_bytes_per_token
        if placement not in ("packed", "separate"):
            raise ValueError(f"placement given an invalid value: {placement!r} "
                             "(valid: packed, separate)")

        po, do = prefill_oracle, decode_oracle
        rank_bytes = max(per_rank(po), per_rank(do))
        total = (kv_bytes_per_token_layer(do.model, do.parallel.tp, do.kv_dtype)
                 * do.model.num_layers * do.parallel.tp)
        gp, gd = po.gpu, do.gpu
        up_bw = min(gp.scaleup_bw, gd.scaleup_bw)
        out_bw = min(gp.scaleout_bw, gd.scaleout_bw)
        up_lat = max(gp.scaleup_latency_s, gd.scaleup_latency_s)
        out_lat = max(gp.scaleout_latency_s, gd.scaleout_latency_s)
        if bandwidth is not None:
            if not bandwidth > 0:
                raise ValueError(f"bandwidth must be > 0 bytes/s, got {bandwidth!r}")
            up_bw = out_bw = float(bandwidth)
        if latency_s is not None:
            if not (np.isfinite(latency_s) and latency_s >= 0):
                raise ValueError(f"latency_s must be a finite number >= 0, got {latency_s!r}")
            up_lat = out_lat = float(latency_s)
        g_p = po.parallel.tp * po.parallel.pp * po.parallel.dp
        g_d = do.parallel.tp * do.parallel.pp * do.parallel.dp
        gpn = int(gp.gpus_per_node)
        p_off = rank_offsets(n_prefill, g_p, prefill_ranks, po.parallel)
        start = n_prefill * g_p
        if placement == "separate" or gp.name != gd.name:
            start = -(-start // gpn) * gpn
        d_off = start + rank_offsets(n_decode, g_d, decode_ranks, do.parallel)
        return cls((rank_bytes / up_bw, rank_bytes / out_bw), (up_lat, out_lat), float(total),
                   int(do.model.num_layers), tuple(int(v) for v in p_off // gpn),
                   tuple(int(v) for v in d_off // int(gd.gpus_per_node)))

    def table(self) -> np.ndarray:
        return np.array([[self.seconds_per_token[0], self.latency_s[0]],
                         [self.seconds_per_token[1], self.latency_s[1]]], dtype=np.float64)

    def nodes(self, n_prefill: int, n_decode: int) -> tuple[np.ndarray, np.ndarray]:
        if self.prefill_nodes is None or self.decode_nodes is None:
            return (np.arange(n_prefill, dtype=np.int64),
                    np.arange(n_prefill, n_prefill + n_decode, dtype=np.int64))
        pn = np.asarray(self.prefill_nodes, dtype=np.int64)
        dn = np.asarray(self.decode_nodes, dtype=np.int64)
        if pn.shape != (n_prefill,) or dn.shape != (n_decode,):
            raise ValueError(f"prefill_nodes / decode_nodes must have {n_prefill} / {n_decode} "
                             f"entries, got {pn.shape} / {dn.shape}")
        return pn, dn


def rank_offsets(n: int, gpus: int, ranks: int, par) -> np.ndarray:
    """First GPU of each of ``ranks`` attention-DP ranks of ``n`` consecutive instances of
    ``gpus`` GPUs each (rank r of an instance starts at its ``r * par.tp * par.pp``-th)."""
    return (np.arange(n)[:, None] * gpus
            + np.arange(ranks)[None, :] * par.tp * par.pp).ravel()


__all__ = ["KVLink", "rank_kv_bytes_per_token", "rank_offsets"]
