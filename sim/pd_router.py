"""Decode-pool routers for disaggregated serving, and the state they read (compiled).

A router binds a request to a decode instance, either when it is dispatched to a prefill
instance (*early* assignment: its KV can stream while the prefill runs) or when its prefill
ends (*late*). Routers are chosen by an int code; :func:`route_decode` dispatches.

* ``round-robin``: decode instances in turn.
* ``least-loaded`` (ILS, SIBYL's "instantaneous load scheduling"): the instance with the
  smallest token occupancy ``sum(prompt + generated)`` over the requests *decoding* on it
  now. Requests bound to it but still in prefill or transfer are invisible, which is the
  myopia SIBYL (``papers/sibyl.txt`` §2.3) describes.
* ``least-requests``: the instance with the fewest requests decoding on it now.
* ``sibyl`` and its ablation variants (:data:`serveplan.kernels.sibyl.VARIANTS`): the
  instance with the least *projected* load at the handoff moment ``tau``
  (:func:`serveplan.kernels.sibyl.projected_loads`, SIBYL Eq. 1, 6-8).

Ties among the least loaded instances are broken by a mode
(:data:`serveplan.kernels.sibyl.TIE_BREAKS`, :func:`serveplan.kernels.sibyl.pick_least`):
``rotation`` (default) starts the scan one instance further at each decision, so idle
instances fill in round-robin order; ``lowest`` takes the lowest index; ``random`` a
pseudo-random tie (a 31-bit linear congruential generator seeded per run). The mode matters
when many loads are equal: SIBYL without its Type 1 term sees all-zero loads whenever
nothing is pending, and with rotation it then *is* round-robin.

SIBYL state (:data:`RouterState`)
---------------------------------
The kernel reads a per-instance slot layout ``[n_decode, capacity]``; it is kept up to date
incrementally so a decision touches only the arrays it sums:

* *active* slots (Type 1): prompt length, tokens generated so far ``l_k(now)`` and the
  observed decode rate ``v_k`` (tokens generated on the decode instance / time since it
  joined; the system rate until its first decode token) of each request that has joined
  its decode instance and not finished;
* *pending* slots (Types 2, 3): prompt length and projected decode start ``tau_k`` (the
  ``tau`` computed when it was assigned, as Algorithm 1 line 11) of each request bound to
  the instance that has not joined it yet (in prefill, waiting for KV room, in transfer).

A slot is removed by moving the instance's last slot into it (``slot_of`` is the
back-pointer). If an instance's pending slots are full it is not eligible (SIBYL would not
pick it anyway: its projected load is large); the capacity is a run parameter.

The survival estimator (``surv``, SIBYL Eq. 4) starts from a prior (``surv_init``: e.g.
:func:`serveplan.queueing.survival.bucket_prior` of a sample of output lengths; ones, the
PROB@1 state, without one) and is updated with the final output length of every completed
request (EMA factor ``alpha``, bucket step ``delta``); its lookup tables are refreshed lazily
before the next decision. The system decode rate ``v_sys`` is an
exponentially weighted ratio over decode steps, ``sum(batch) / sum(batch * step_time)``
(tokens per request-second, a batch-weighted harmonic mean of ``1 / step_time``), with a
decay of ``1 - 1 / (4 n_decode)`` per step; before the first step it is ``v_sys_init``.

Occupancy bookkeeping (``occ``, ``nact``) serves the ILS routers and the *optimal
assignment* check: at a request's handoff (prefill end) its decode instance is optimal if
no instance has a smaller occupancy (tokens), resp. fewer decoding requests.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from serveplan.kernels.sibyl import (
    TIE_BREAKS,
    TIE_RANDOM,
    TIE_ROTATION,
    VARIANTS,
    pick_least,
    projected_loads,
    refresh_tables,
    survival_tables,
)
from serveplan.kernels.survival import ema_survival_update
from serveplan.queueing.survival import bucket_prior

from ._jitcache import sim_jit

D_ROUND_ROBIN, D_LEAST_TOKENS, D_LEAST_REQUESTS, D_SIBYL = 0, 1, 2, 3
DECODE_ROUTERS = {
    "round-robin": (D_ROUND_ROBIN, 0),
    "least-loaded": (D_LEAST_TOKENS, 0),
    "least-requests": (D_LEAST_REQUESTS, 0),
    **{name: (D_SIBYL, flags) for name, flags in VARIANTS.items()},
}
"""Router name -> (code, SIBYL variant flags)."""
ROUTER_ALIASES = {"rr": "round-robin", "ils": "least-loaded", "ils-tokens": "least-loaded",
                  "ils-requests": "least-requests"}

# float parameters / accumulators: rt.fp[F_*]
F_VNUM, F_VDEN, F_VINIT, F_DELTA, F_ALPHA, F_DECAY, F_INV_DELTA, F_DIRTY = range(8)
F_PREFILL_PER_TOKEN = 8  # colocated SIBYL: seconds of prefill per prompt token
N_FP = 9
# int parameters / counters: rt.ip[R_*]
R_CODE, R_FLAGS, R_RR, R_SIBYL = range(4)
R_TIE, R_RNG, R_ENTRY_SIBYL = 4, 5, 6  # tie-break mode, its generator, colocated SIBYL on
N_IP = 7
_LCG_A, _LCG_C, _LCG_M = 1103515245, 12345, 1 << 31  # random tie-break; products < 2**62

RouterState = namedtuple("RouterState", [
    "occ", "nact", "act_count", "act_lin", "act_len", "act_rate", "act_req",
    "pend_count", "pend_lin", "pend_start", "pend_req", "slot_of", "t_join",
    "surv", "tab", "inv_tab", "loads", "eligible", "fp", "ip",
])


def _router_code(name: str) -> tuple[int, int]:
    """``(code, SIBYL variant flags)`` of router ``name`` (a key of :data:`DECODE_ROUTERS` or
    an alias); raises ``ValueError`` naming the valid choices."""
    name = ROUTER_ALIASES.get(name, name)
    if name not in DECODE_ROUTERS:
        raise ValueError(f"router given an invalid value: {name!r} (valid: "
                         f"{', '.join(list(DECODE_ROUTERS) + list(ROUTER_ALIASES))})")
    return DECODE_ROUTERS[name]


def _tie_code(tie_break: str) -> int:
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break given an invalid value: {tie_break!r} "
                         f"(valid: {', '.join(TIE_BREAKS)})")
    return TIE_BREAKS[tie_break]


def _check_sibyl_params(delta: float, alpha: float, v_sys_init: float) -> None:
    if not (np.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be finite and > 0, got {delta!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not (np.isfinite(v_sys_init) and v_sys_init > 0):
        raise ValueError(f"v_sys_init must be finite and > 0, got {v_sys_init!r}")


def _initial_survival(surv_init: np.ndarray | None, max_length: int, delta: float,
                      prior=None):
    """Survival values at the bucket boundaries and their lookup tables ``(surv, tab, inv)``:
    ``surv_init``, else the Kaplan-Meier estimate of the ``prior`` sample, else ones."""
    nb = max(int(np.ceil(max_length / delta)), 1)
    if surv_init is None and prior is not None:
        surv_init = bucket_prior(prior, delta, nb)
    surv = np.ones(nb) if surv_init is None else np.array(surv_init, dtype=np.float64)
    if surv.shape != (nb,):
        raise ValueError(f"surv_init must have {nb} values, got shape {surv.shape}")
    tab, inv = survival_tables(surv)
    return surv, tab, inv


def _param_arrays(code: int, flags: int, n_decode: int, delta: float, alpha: float,
                  v_sys_init: float, tie: int = TIE_ROTATION,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The float and int parameter vectors ``(fp, ip)`` (layouts ``F_*`` and ``R_*``)."""
    fp = np.zeros(N_FP)
    fp[F_VINIT] = v_sys_init
    fp[F_DELTA] = delta
    fp[F_ALPHA] = alpha
    fp[F_DECAY] = 1.0 - 1.0 / (4.0 * n_decode)
    fp[F_INV_DELTA] = 1.0 / delta
    ip = np.zeros(N_IP, dtype=np.int64)
    ip[R_CODE] = code
    ip[R_FLAGS] = flags
    ip[R_SIBYL] = int(code == D_SIBYL)
    ip[R_TIE] = tie
    ip[R_RNG] = int(seed) % _LCG_M
    return fp, ip


def make_router_state(name: str, n_requests: int, n_decode: int, *, active_capacity: int,
                      pending_capacity: int, max_length: int, delta: float = 128.0,
                      alpha: float = 0.99, v_sys_init: float = 30.0,
                      surv_init: np.ndarray | None = None, prior=None,
                      tie_break: str = "rotation", seed: int = 0) -> RouterState:
    """Router state for ``n_decode`` instances.

    Parameters
    ----------
    name : str
        A key of :data:`DECODE_ROUTERS` (or an alias of :data:`ROUTER_ALIASES`).
    active_capacity, pending_capacity : int
        Slots per instance for decoding and pending requests (SIBYL only).
    max_length : int
        Longest output the survival estimator resolves (buckets of ``delta`` tokens).
    delta, alpha : float
        SIBYL's bucket step and EMA factor (Eq. 4).
    v_sys_init : float
        System decode rate (tokens/s per request) before the first decode step.
    surv_init : array, optional
        Initial survival values at the bucket boundaries (default ones: PROB@1 until
        completions are seen, as :class:`serveplan.queueing.survival.OnlineSurvival`).
    prior : array, optional
        A sample of output lengths (e.g. drawn from the workload's length law with another
        seed); without ``surv_init``, Ŝ starts at its Kaplan-Meier estimate.
    tie_break : str
        Among equally loaded instances: ``rotation``, ``lowest`` or ``random`` (module doc).
    seed : int
        Seed of the ``random`` tie-break's generator.
    """
    code, flags = _router_code(name)
    tie = _tie_code(tie_break)
    _check_sibyl_params(delta, alpha, v_sys_init)
    sibyl = code == D_SIBYL
    nd = int(n_decode)
    ca = max(int(active_capacity), 1) if sibyl else 1
    cp = max(int(pending_capacity), 1) if sibyl else 1
    surv, tab, inv = _initial_survival(surv_init, max_length, delta, prior)
    fp, ip = _param_arrays(code, flags, nd, delta, alpha, v_sys_init, tie, seed)
    zi = np.zeros(nd, dtype=np.int64)
    return RouterState(
        occ=zi.copy(), nact=zi.copy(), act_count=zi.copy(),
        act_lin=np.zeros((nd, ca)), act_len=np.zeros((nd, ca)), act_rate=np.zeros((nd, ca)),
        act_req=np.full((nd, ca), -1, dtype=np.int64), pend_count=zi.copy(),
        pend_lin=np.zeros((nd, cp)), pend_start=np.zeros((nd, cp)),
        pend_req=np.full((nd, cp), -1, dtype=np.int64),
        slot_of=np.full(max(int(n_requests), 1), -1, dtype=np.int64),
        t_join=np.full(max(int(n_requests), 1), np.nan),
        surv=surv, tab=tab, inv_tab=inv, loads=np.zeros(nd),
        eligible=np.ones(nd, dtype=np.bool_), fp=fp, ip=ip,
    )


# ------------------------------------------------------------------------ rates
@sim_jit
def v_sys(rt):
    """System-average decode rate (tokens/s per decoding request)."""
    if rt.fp[F_VDEN] > 0.0:
        return rt.fp[F_VNUM] / rt.fp[F_VDEN]
    return rt.fp[F_VINIT]


@sim_jit
def on_decode_step(rt, batch, dt):
    """A decode step of ``batch`` requests took ``dt`` seconds."""
    if batch <= 0 or dt <= 0.0:
        return
    a = rt.fp[F_DECAY]
    rt.fp[F_VNUM] = a * rt.fp[F_VNUM] + batch
    rt.fp[F_VDEN] = a * rt.fp[F_VDEN] + batch * dt


# ------------------------------------------------------------------------ slots
@sim_jit
def _pend_add(rt, d, r, l_in, start):
    s = rt.pend_count[d]
    if s >= rt.pend_lin.shape[1]:
        return False
    rt.pend_lin[d, s] = l_in
    rt.pend_start[d, s] = start
    rt.pend_req[d, s] = r
    rt.pend_count[d] = s + 1
    rt.slot_of[r] = s
    return True


@sim_jit
def _free_slot(req, count, slot_of, d, r):
    """Remove ``r``'s slot on instance ``d`` by moving the instance's last slot into it;
    returns ``(slot, last)`` so the caller moves its value columns from ``last`` to
    ``slot`` when they differ."""
    s = slot_of[r]
    last = count[d] - 1
    if last != s:
        moved = req[d, last]
        req[d, s] = moved
        slot_of[moved] = s
    req[d, last] = -1
    count[d] = last
    slot_of[r] = -1
    return s, last


@sim_jit
def _pend_remove(rt, d, r):
    s, last = _free_slot(rt.pend_req, rt.pend_count, rt.slot_of, d, r)
    if last != s:
        rt.pend_lin[d, s] = rt.pend_lin[d, last]
        rt.pend_start[d, s] = rt.pend_start[d, last]


@sim_jit
def _act_add(rt, d, r, l_in, l_now, rate):
    s = rt.act_count[d]
    rt.act_lin[d, s] = l_in
    rt.act_len[d, s] = l_now
    rt.act_rate[d, s] = rate
    rt.act_req[d, s] = r
    rt.act_count[d] = s + 1
    rt.slot_of[r] = s


@sim_jit
def _act_remove(rt, d, r):
    s, last = _free_slot(rt.act_req, rt.act_count, rt.slot_of, d, r)
    if last != s:
        rt.act_lin[d, s] = rt.act_lin[d, last]
        rt.act_len[d, s] = rt.act_len[d, last]
        rt.act_rate[d, s] = rt.act_rate[d, last]


# ------------------------------------------------------------------------ lifecycle
@sim_jit
def on_assign(rt, r, d, prompt, tau):
    """``r`` is bound to decode instance ``d``, expected to start decoding at ``tau``."""
    if rt.ip[R_SIBYL] != 0:
        _pend_add(rt, d, r, float(prompt), tau)


@sim_jit
def on_join(rt, r, d, prompt, n_out, now):
    """``r``'s KV arrived on ``d``: it decodes from now with ``n_out`` tokens generated."""
    rt.occ[d] += prompt + n_out
    rt.nact[d] += 1
    rt.t_join[r] = now
    if rt.ip[R_SIBYL] != 0:
        if rt.slot_of[r] >= 0:
            _pend_remove(rt, d, r)
        _act_add(rt, d, r, float(prompt), float(n_out), v_sys(rt))


@sim_jit
def on_token(rt, r, d, n_out, n_decoded, now):
    """``r`` on ``d`` emitted a token: ``n_out`` generated in all, ``n_decoded`` on ``d``."""
    rt.occ[d] += 1
    if rt.ip[R_SIBYL] != 0:
        s = rt.slot_of[r]
        rt.act_len[d, s] = n_out
        el = now - rt.t_join[r]
        if el > 0.0:
            rt.act_rate[d, s] = n_decoded / el


@sim_jit
def on_finish(rt, r, d, prompt, n_out_before):
    """``r`` finished on ``d`` (it held ``prompt + n_out_before`` tokens before its last)."""
    rt.occ[d] -= prompt + n_out_before
    rt.nact[d] -= 1
    if rt.ip[R_SIBYL] != 0:
        _act_remove(rt, d, r)
        ema_survival_update(rt.surv, rt.fp[F_DELTA], rt.fp[F_ALPHA], float(n_out_before + 1))
        rt.fp[F_DIRTY] = 1.0


# ------------------------------------------------------------------------ decisions
@sim_jit
def _argmin_int(a, start):
    """Least entry of ``a``; among equal ones the first at or after ``start`` (cyclically)."""
    n = a.shape[0]
    best = start % n
    for k in range(1, n):
        j = (start + k) % n
        if a[j] < a[best]:
            best = j
    return best


@sim_jit
def _next_start(rt):
    s = rt.ip[R_RR]
    rt.ip[R_RR] = s + 1
    return s


@sim_jit
def _draw(rt):
    """The tie-break's number for this decision: the rotation counter (advanced once per
    decision, whatever the mode) or, for ``random``, the next value of the generator."""
    s = _next_start(rt)
    if rt.ip[R_TIE] != TIE_RANDOM:
        return s
    x = (_LCG_A * rt.ip[R_RNG] + _LCG_C) % _LCG_M
    rt.ip[R_RNG] = x
    return x >> 8  # the low bits of a power-of-two LCG are weak


@sim_jit
def pick(rt, loads):
    """Least entry of ``loads`` among ``rt.eligible``, ties by the run's mode; -1 if none."""
    return pick_least(loads, rt.eligible, rt.ip[R_TIE], _draw(rt))


@sim_jit
def sibyl_decide(rt, now, tau):
    """SIBYL's choice (Algorithm 1): least projected load at ``tau`` among eligible."""
    if rt.fp[F_DIRTY] != 0.0:
        refresh_tables(rt.surv, rt.tab, rt.inv_tab)
        rt.fp[F_DIRTY] = 0.0
    cap = rt.pend_lin.shape[1]
    for j in range(rt.eligible.shape[0]):
        rt.eligible[j] = rt.pend_count[j] < cap
    projected_loads(now, tau, v_sys(rt), rt.tab, rt.inv_tab, rt.fp[F_DELTA],
                    rt.act_count, rt.act_lin, rt.act_len, rt.act_rate,
                    rt.pend_count, rt.pend_lin, rt.pend_start, rt.ip[R_FLAGS], rt.loads)
    j = pick(rt, rt.loads)
    if j < 0:  # every instance's pending slots are full: the fewest pending
        return _argmin_int(rt.pend_count, rt.ip[R_RR])
    return j


@sim_jit
def _pick_all(rt, loads):
    for j in range(rt.eligible.shape[0]):
        rt.eligible[j] = True
    return pick(rt, loads)


@sim_jit
def route_decode(rt, now, tau):
    """Decode instance for a request assigned at ``now`` expected to hand off at ``tau``."""
    code = rt.ip[R_CODE]
    nd = rt.occ.shape[0]
    if nd == 1:
        return 0
    if code == D_LEAST_TOKENS:
        return _pick_all(rt, rt.occ)
    if code == D_LEAST_REQUESTS:
        return _pick_all(rt, rt.nact)
    if code == D_SIBYL:
        return sibyl_decide(rt, now, tau)
    return _next_start(rt) % nd


@sim_jit
def is_least_loaded(rt, d):
    """``(tokens, requests)``: whether ``d`` has the least occupancy / fewest decoding
    requests now (ties count as least)."""
    ok_t = True
    ok_r = True
    for j in range(rt.occ.shape[0]):
        if rt.occ[j] < rt.occ[d]:
            ok_t = False
        if rt.nact[j] < rt.nact[d]:
            ok_r = False
    return ok_t, ok_r


__all__ = ["DECODE_ROUTERS", "ROUTER_ALIASES", "RouterState", "is_least_loaded",
           "make_router_state", "pick", "on_assign", "on_decode_step", "on_finish", "on_join",
           "on_token", "route_decode", "sibyl_decide", "v_sys"]
