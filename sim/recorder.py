"""The per-step time series of a run, decimated to a fixed capacity (compiled).

Every engine step of every instance is offered to one recorder in the order steps start.
While the buffer has room every step is kept; when it is full every other kept sample is
dropped and the stride doubles, so memory stays bounded on long runs and the kept steps
are evenly spread (``meta``: count, stride, steps seen).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ._jitcache import sim_jit

Rec = namedtuple("Rec", ["t", "dt", "ints", "meta"])
"""Per-step time series, decimated to a fixed capacity: start times, durations, the integer
columns :data:`INT_COLUMNS` and ``meta`` (count, stride, steps seen)."""
R_COUNT, R_STRIDE, R_SEEN = range(3)
INT_COLUMNS = ("inst", "batch", "tokens", "prefill_tokens", "kv_used", "waiting", "running")


def make_rec(capacity: int) -> Rec:
    """An empty recorder holding at most ``capacity`` (rounded up to even) steps."""
    cap = max(2, int(capacity) + (int(capacity) & 1))
    return Rec(t=np.zeros(cap), dt=np.zeros(cap),
               ints=np.zeros((cap, len(INT_COLUMNS)), dtype=np.int32),
               meta=np.array([0, 1, 0], dtype=np.int64))


@sim_jit
def _rec_compact(rec):
    """Keep every other sample and double the stride (bounded memory on long runs)."""
    half = rec.t.shape[0] // 2
    for k in range(half):
        rec.t[k] = rec.t[2 * k]
        rec.dt[k] = rec.dt[2 * k]
        for c in range(rec.ints.shape[1]):
            rec.ints[k, c] = rec.ints[2 * k, c]
    rec.meta[R_COUNT] = half
    rec.meta[R_STRIDE] *= 2


@sim_jit
def record_step(rec, now, dt, i, bn, tokens, prefill_tokens, kv_used, waiting, running):
    """Offer one step (instance ``i``, started at ``now``, lasting ``dt``) to the recorder."""
    seen = rec.meta[R_SEEN]
    rec.meta[R_SEEN] = seen + 1
    if seen % rec.meta[R_STRIDE] != 0:
        return
    if rec.meta[R_COUNT] == rec.t.shape[0]:
        _rec_compact(rec)
        if seen % rec.meta[R_STRIDE] != 0:
            return
    k = rec.meta[R_COUNT]
    rec.t[k] = now
    rec.dt[k] = dt
    values = (int(i), int(bn), int(tokens), int(prefill_tokens), int(kv_used), int(waiting),
              int(running))
    for c in range(len(values)):
        rec.ints[k, c] = values[c]
    rec.meta[R_COUNT] = k + 1


def recorded_steps(rec: Rec) -> dict[str, np.ndarray]:
    """The filled part of the step records, as a dict of arrays."""
    k = int(rec.meta[R_COUNT])
    cols = {name: rec.ints[:k, c] for c, name in enumerate(INT_COLUMNS)}
    return {"t": rec.t[:k], "dt": rec.dt[:k], **cols}


__all__ = ["R_COUNT", "R_SEEN", "R_STRIDE", "Rec", "make_rec", "record_step", "recorded_steps"]
