"""KV-cache transfer between prefill and decode instances: a fluid link model (compiled).

Each transfer moves one request's prompt KV from its prefill instance to its decode
instance. Its size is expressed as *work*: the seconds it would take alone at the full
per-GPU link bandwidth, ``work = prompt_tokens * bytes_per_rank_per_token / bandwidth``
(ranks send in parallel, see :func:`link_table`).

Links and sharing
-----------------
Every instance has two links, a scale-up one (NVLink, used when the peer sits in the same
node) and a scale-out one (IB/RoCE NIC). A transfer uses the link of its *kind* at both
ends. Concurrent transfers share links *fairly*: a transfer between prefill instance ``p``
and decode instance ``d`` progresses at rate ``1 / max(n_p, n_d)`` of the full bandwidth,
where ``n_p`` and ``n_d`` count the active transfers of the same kind at each end. This is
equal sharing at the busier end (the sum of rates on any link never exceeds 1); it is not
max-min fair (a transfer limited at one end does not hand its unused share at the other end
to others). Rates are recomputed whenever a transfer starts, stalls or ends.

Latency is added once, after the data has moved (state ``TAIL``: the transfer no longer
uses bandwidth, its request is delivered ``latency`` seconds later).

Layer-wise overlap
------------------
A transfer may start while its prefill is still running (vLLM's layer-wise KV push). It then
cannot finish before the prefill does: its remaining work may not drop below ``floor`` --
the share of the last layer, ``work / num_layers`` -- until :func:`xfer_prefill_done`. A
transfer that reaches its floor early *stalls* (state ``STALLED``, no bandwidth used).
This approximates the prefill's KV production as "all layers but the last are available";
a link slower than the prefill is modelled correctly, a faster one finishes one layer's
transfer after the prefill.

State
-----
:data:`Xfer` holds per-request arrays (state, remaining work, floor, rate, last update,
next event time, endpoints, kind, latency) and a compact list of the transfers in flight;
the next transfer event is cached in ``tnext`` and recomputed after each change, in
``O(transfers in flight)``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ._jitcache import sim_jit

X_NONE, X_ACTIVE, X_STALLED, X_TAIL, X_DONE = 0, 1, 2, 3, 4
KIND_SCALEUP, KIND_SCALEOUT = 0, 1
XM_COUNT, XM_NEXT = 0, 1

Xfer = namedtuple("Xfer", ["state", "rem", "floor", "rate", "last", "evt", "pe", "de",
                           "kind", "lat", "alist", "apos", "n_p", "n_d", "meta", "tnext"])


def make_xfer(n_requests: int, n_prefill: int, n_decode: int) -> Xfer:
    """Empty transfer state for ``n_requests`` requests between the two pools."""
    n = max(int(n_requests), 1)
    return Xfer(
        state=np.zeros(n, dtype=np.int8),
        rem=np.zeros(n), floor=np.zeros(n), rate=np.zeros(n), last=np.zeros(n),
        evt=np.full(n, np.inf),
        pe=np.full(n, -1, dtype=np.int64), de=np.full(n, -1, dtype=np.int64),
        kind=np.zeros(n, dtype=np.int64), lat=np.zeros(n),
        alist=np.full(n, -1, dtype=np.int64), apos=np.full(n, -1, dtype=np.int64),
        n_p=np.zeros((2, max(int(n_prefill), 1)), dtype=np.int64),
        n_d=np.zeros((2, max(int(n_decode), 1)), dtype=np.int64),
        meta=np.array([0, -1], dtype=np.int64),
        tnext=np.array([np.inf]),
    )


@sim_jit
def _count(x, r, delta):
    k = x.kind[r]
    if x.pe[r] >= 0:
        x.n_p[k, x.pe[r]] += delta
    x.n_d[k, x.de[r]] += delta


@sim_jit
def _share(x, r):
    k = x.kind[r]
    m = x.n_d[k, x.de[r]]
    if x.pe[r] >= 0 and x.n_p[k, x.pe[r]] > m:
        m = x.n_p[k, x.pe[r]]
    return 1.0 / m


@sim_jit
def _advance(x, now):
    """Progress every active transfer to ``now`` at its current rate."""
    for k in range(x.meta[XM_COUNT]):
        r = x.alist[k]
        if x.state[r] == X_ACTIVE:
            rem = x.rem[r] - x.rate[r] * (now - x.last[r])
            x.rem[r] = rem if rem > x.floor[r] else x.floor[r]
        x.last[r] = now


@sim_jit
def _rerate(x):
    """New fair shares and event times; cache the earliest event."""
    best = np.inf
    arg = -1
    for k in range(x.meta[XM_COUNT]):
        r = x.alist[k]
        s = x.state[r]
        if s == X_ACTIVE:
            x.rate[r] = _share(x, r)
            x.evt[r] = x.last[r] + (x.rem[r] - x.floor[r]) / x.rate[r]
        elif s == X_STALLED:
            x.rate[r] = 0.0
            x.evt[r] = np.inf
        if x.evt[r] < best:
            best = x.evt[r]
            arg = r
    x.tnext[0] = best
    x.meta[XM_NEXT] = arg


@sim_jit
def _remove(x, r):
    k = x.apos[r]
    last = x.meta[XM_COUNT] - 1
    moved = x.alist[last]
    x.alist[k] = moved
    x.apos[moved] = k
    x.alist[last] = -1
    x.apos[r] = -1
    x.meta[XM_COUNT] = last
    x.state[r] = X_DONE


@sim_jit
def xfer_begin(x, r, now, work, floor, lat, pe, de, kind):
    """Start moving request ``r``'s KV (``work`` seconds alone on the link) at ``now``.

    ``floor`` > 0 while the prefill is still running (layer-wise overlap); ``pe < 0`` means
    no prefill-side link (a delay-model prefill stage). Returns True if the KV arrived at
    once (no work, no latency): the caller delivers it; nothing was recorded.
    """
    if work <= 0.0 and floor <= 0.0 and lat <= 0.0:
        x.state[r] = X_DONE
        return True
    _advance(x, now)
    x.rem[r] = work
    x.floor[r] = floor
    x.lat[r] = lat
    x.pe[r] = pe
    x.de[r] = de
    x.kind[r] = kind
    x.last[r] = now
    c = x.meta[XM_COUNT]
    x.alist[c] = r
    x.apos[r] = c
    x.meta[XM_COUNT] = c + 1
    if work > floor:
        x.state[r] = X_ACTIVE
        _count(x, r, 1)
    elif floor > 0.0:
        x.state[r] = X_STALLED
    else:
        x.state[r] = X_TAIL
        x.evt[r] = now + lat
    _rerate(x)
    return False


@sim_jit
def xfer_prefill_done(x, r, now):
    """The prefill of ``r`` finished: lift the floor of its transfer (if one is running)."""
    s = x.state[r]
    if s != X_ACTIVE and s != X_STALLED:
        return
    _advance(x, now)
    x.floor[r] = 0.0
    if s == X_STALLED:
        if x.rem[r] > 0.0:
            x.state[r] = X_ACTIVE
            _count(x, r, 1)
        else:
            x.state[r] = X_TAIL
            x.evt[r] = now + x.lat[r]
    _rerate(x)


@sim_jit
def xfer_next_time(x):
    """Time of the next transfer event (inf if none)."""
    return x.tnext[0]


@sim_jit
def xfer_event(x, now):
    """Handle the transfer event due at ``now``; returns the request delivered, or -1."""
    r = x.meta[XM_NEXT]
    if r < 0:
        return -1
    _advance(x, now)
    s = x.state[r]
    delivered = -1
    if s == X_ACTIVE:
        x.rem[r] = x.floor[r]
        _count(x, r, -1)
        if x.floor[r] > 0.0:
            x.state[r] = X_STALLED
        elif x.lat[r] > 0.0:
            x.state[r] = X_TAIL
            x.evt[r] = now + x.lat[r]
        else:
            _remove(x, r)
            delivered = r
    elif s == X_TAIL:
        _remove(x, r)
        delivered = r
    _rerate(x)
    return delivered


def link_table(kv_bytes_per_rank_token: float, scaleup_bw: float, scaleout_bw: float,
               scaleup_latency_s: float, scaleout_latency_s: float) -> np.ndarray:
    """``[seconds per token, latency]`` per link kind (rows: scale-up, scale-out).

    ``kv_bytes_per_rank_token`` is the larger of the per-rank KV bytes per token of the two
    sides (a prefill rank sends its shard, a decode rank receives its shard; ranks work in
    parallel, so the busiest rank sets the time).
    """
    out = np.zeros((2, 2))
    for k, (bw, lat) in enumerate(((scaleup_bw, scaleup_latency_s),
                                   (scaleout_bw, scaleout_latency_s))):
        if not (bw > 0):
            raise ValueError(f"link bandwidth must be > 0 bytes/s, got {bw!r}")
        if not (np.isfinite(lat) and lat >= 0):
            raise ValueError(f"link latency must be a finite number >= 0, got {lat!r}")
        out[k, 0] = 0.0 if np.isinf(bw) else kv_bytes_per_rank_token / bw
        out[k, 1] = lat
    return out


__all__ = ["KIND_SCALEOUT", "KIND_SCALEUP", "X_ACTIVE", "X_DONE", "X_NONE", "X_STALLED",
           "X_TAIL", "Xfer", "link_table", "make_xfer", "xfer_begin", "xfer_event",
           "xfer_next_time", "xfer_prefill_done"]
