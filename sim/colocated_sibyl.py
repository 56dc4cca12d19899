"""SIBYL's projected-load router among colocated (data-parallel) instances (compiled).

SIBYL (``papers/sibyl.txt`` §4) routes to the instance whose load is least at the moment
the new request starts decoding. In a colocated deployment that moment is the end of the
request's own prefill on the chosen instance, ``tau = now + h``, and the instance's work is
its own running list and waiting queue (:mod:`serveplan.sim.state`). The projection of
instance ``i`` (the entry router's :func:`serveplan.sim.router.route_with_state` calls
:func:`route_sibyl`):

* Type 1 -- requests in ``i``'s running list that have emitted a token (they decode now):
  Eq. 6, ``(prompt + l(tau)) · Ŝ(l(tau)) / Ŝ(l(now))`` with ``l(now)`` the tokens generated
  so far and ``l(tau) = l(now) + v_k h``; ``v_k`` is the request's observed rate (tokens after
  its first over the time since its first), ``v_sys`` until it has two tokens.
* Type 2 -- requests waiting on ``i`` or still prefilling there: an FCFS engine serves them
  before the new request, so they start decoding before ``tau``; they are taken to start
  *now* (``tau_k = now``, the earliest they can) and projected as Eq. 7 from the tokens they
  already have (a preempted request keeps its count): ``(prompt + l0 + v_sys h) ·
  Ŝ(l0 + v_sys h) / Ŝ(l0)``.
* Type 3 -- nothing: no request already on ``i`` starts decoding after the new one.

``h`` is the new request's prompt times a prefill cost per token (the pool's prefill time of
its mean prompt divided by that prompt, set when the run starts): the request's own
prefill, without the queue ahead of it or chunking -- an approximation. ``v_sys`` is the
mean observed rate of the entry pool's decoding requests at the decision (the router state's
initial rate when none decodes). Ŝ is the router state's survival estimator, warm-started
from a prior sample when one is given and updated (Eq. 4) by :func:`on_colocated_finish` at
every colocated completion; the flags of SIBYL's variants (``PROB_ONE``, ``NO_TYPE1``,
``NO_TYPE2``, ``REQUEST_COUNT``) apply; ties follow the router state's tie-break mode.
:func:`colocated_loads_ref` is the NumPy reference of the loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serveplan.kernels.sibyl import NO_TYPE1, NO_TYPE2, PROB_ONE, REQUEST_COUNT
from serveplan.kernels.survival import (
    cond_prob,
    ema_survival_update,
    refresh_tables,
    survival_step_ref,
)

from ._jitcache import sim_jit
from .costs import decode_rate, prefill_seconds
from .pd_router import (
    F_ALPHA,
    F_DELTA,
    F_DIRTY,
    F_PREFILL_PER_TOKEN,
    F_VINIT,
    R_ENTRY_SIBYL,
    R_FLAGS,
    R_SIBYL,
    make_router_state,
    pick,
)
from .state import I_NRUN, I_WHEAD, I_WLEN


@dataclass(frozen=True)
class SibylOptions:
    """SIBYL's settings for colocated instances (those of a decode pool are in
    :class:`~serveplan.sim.pools.Handoff`).

    ``delta``/``alpha``: bucket step and EMA factor (Eq. 4); ``max_length``: longest output
    resolved (default: the pool's ``max_model_len``); ``prior``: a sample of output lengths
    whose Kaplan-Meier estimate starts Ŝ (default: none, Ŝ = 1); ``tie_break``:
    ``rotation``, ``lowest`` or ``random``; ``variant``: a name of
    :data:`serveplan.kernels.sibyl.VARIANTS`; ``seed``: the random tie-break's seed.
    """

    delta: float = 128.0
    alpha: float = 0.99
    max_length: int | None = None
    prior: object = None
    tie_break: str = "rotation"
    variant: str = "sibyl"
    seed: int = 0


def colocated_router_state(pool, n: int, prompt: np.ndarray, opts: SibylOptions | None):
    """Router state for SIBYL over the colocated ``pool`` (``opts`` None: an inert state)."""
    if opts is None:
        return make_router_state("round-robin", 1, 1, active_capacity=1, pending_capacity=1,
                                 max_length=1, delta=128.0, alpha=0.99, v_sys_init=1.0)
    mean_prompt = float(prompt.mean()) if prompt.size else 1.0
    chunk = int(pool.params.max_num_batched_tokens)
    tokens = max(int(round(mean_prompt)), 1)
    per_token = float(prefill_seconds(pool.cost, np.array([min(tokens, chunk)]), chunk)[0])
    rt = make_router_state(opts.variant, n, int(pool.num_instances), active_capacity=1,
                           pending_capacity=1,
                           max_length=opts.max_length or pool.params.max_model_len,
                           delta=opts.delta, alpha=opts.alpha,
                           v_sys_init=decode_rate(pool.cost, mean_prompt),
                           prior=opts.prior, tie_break=opts.tie_break, seed=opts.seed)
    rt.ip[R_SIBYL] = 0  # no decode pool: the P->D hooks stay off
    rt.ip[R_ENTRY_SIBYL] = 1
    rt.fp[F_PREFILL_PER_TOKEN] = per_token / min(tokens, chunk)
    return rt


@sim_jit
def _own_rate(reqs, r, now, v_sys):
    """Observed decode rate of ``r``: tokens after its first over the time since its first."""
    el = now - reqs.t_first[r]
    if reqs.n_out[r] > 1 and el > 0.0:
        return (reqs.n_out[r] - 1) / el
    return v_sys


@sim_jit
def system_rate(inst, reqs, lo, hi, now, v_init):
    """Mean observed rate of the decoding requests on instances ``[lo, hi)`` (``v_init`` if
    none has two tokens yet)."""
    total = 0.0
    k = 0
    for i in range(lo, hi):
        for s in range(inst.ist[i, I_NRUN]):
            r = inst.run[i, s]
            if reqs.n_out[r] > 1 and now > reqs.t_first[r]:
                total += (reqs.n_out[r] - 1) / (now - reqs.t_first[r])
                k += 1
    return total / k if k > 0 else v_init


@sim_jit
def _term(tab, inv_tab, delta, prompt, l0, lf, flags):
    """``mass · P`` of one request projected from ``l0`` to ``lf`` generated tokens."""
    mass = 1.0 if (flags & REQUEST_COUNT) != 0 else prompt + lf
    if (flags & PROB_ONE) != 0:
        return mass
    return mass * cond_prob(tab, inv_tab, delta, l0, lf)


@sim_jit
def colocated_load(inst, reqs, i, now, h, v_sys, tab, inv_tab, delta, flags):
    """Projected load of colocated instance ``i`` at ``now + h`` (module doc)."""
    acc = 0.0
    for s in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, s]
        l0 = float(reqs.n_out[r])
        if reqs.n_out[r] >= 1 and reqs.computed[r] >= reqs.prompt[r]:
            if (flags & NO_TYPE1) == 0:
                lf = l0 + _own_rate(reqs, r, now, v_sys) * h
                acc += _term(tab, inv_tab, delta, reqs.prompt[r], l0, lf, flags)
        elif (flags & NO_TYPE2) == 0:
            acc += _term(tab, inv_tab, delta, reqs.prompt[r], l0, l0 + v_sys * h, flags)
    if (flags & NO_TYPE2) == 0:
        cap = inst.wq.shape[1]
        for k in range(inst.ist[i, I_WLEN]):
            r = inst.wq[i, (inst.ist[i, I_WHEAD] + k) % cap]
            l0 = float(reqs.n_out[r])
            acc += _term(tab, inv_tab, delta, reqs.prompt[r], l0, l0 + v_sys * h, flags)
    return acc


@sim_jit
def route_sibyl(lo, hi, inst, reqs, rt, r, now):
    """The colocated instance in ``[lo, hi)`` with the least projected load for ``r``."""
    if rt.fp[F_DIRTY] != 0.0:
        refresh_tables(rt.surv, rt.tab, rt.inv_tab)
        rt.fp[F_DIRTY] = 0.0
    h = reqs.prompt[r] * rt.fp[F_PREFILL_PER_TOKEN]
    v = system_rate(inst, reqs, lo, hi, now, rt.fp[F_VINIT])
    for i in range(lo, hi):
        rt.loads[i - lo] = colocated_load(inst, reqs, i, now, h, v, rt.tab, rt.inv_tab,
                                          rt.fp[F_DELTA], rt.ip[R_FLAGS])
        rt.eligible[i - lo] = True
    return lo + pick(rt, rt.loads)


@sim_jit
def on_colocated_finish(rt, n_out):
    """A colocated request finished with ``n_out`` tokens: SIBYL's Eq. 4 update, if on."""
    if rt.ip[R_ENTRY_SIBYL] != 0:
        ema_survival_update(rt.surv, rt.fp[F_DELTA], rt.fp[F_ALPHA], float(n_out))
        rt.fp[F_DIRTY] = 1.0


def colocated_loads_ref(now, h, v_init, surv, delta, instances, flags=0):
    """NumPy reference of the loads :func:`route_sibyl` compares.

    ``instances[i]`` is ``(running, waiting)``: lists of ``(prompt, n_out, t_first,
    prefilled)`` tuples (``prefilled``: its prompt is computed). Returns the loads.
    """
    def prob(a, b):
        den = survival_step_ref(surv, delta, [a])[0]
        return 1.0 if den <= 0 else min(survival_step_ref(surv, delta, [b])[0] / den, 1.0)

    def term(prompt, l0, lf):
        mass = 1.0 if flags & REQUEST_COUNT else prompt + lf
        return mass * (1.0 if flags & PROB_ONE else prob(l0, lf))

    rates = [(n - 1) / (now - t) for run, _ in instances for _, n, t, _ in run
             if n > 1 and now > t]
    v_sys = float(np.mean(rates)) if rates else v_init
    out = np.zeros(len(instances))
    for i, (run, wait) in enumerate(instances):
        for prompt, n, t, prefilled in run:
            if n >= 1 and prefilled:
                if not flags & NO_TYPE1:
                    v = (n - 1) / (now - t) if n > 1 and now > t else v_sys
                    out[i] += term(prompt, n, n + v * h)
            elif not flags & NO_TYPE2:
                out[i] += term(prompt, n, n + v_sys * h)
        if not flags & NO_TYPE2:
            out[i] += sum(term(p, n, n + v_sys * h) for p, n, _, _ in wait)
    return out


__all__ = ["SibylOptions", "colocated_load", "colocated_loads_ref", "colocated_router_state",
           "on_colocated_finish", "route_sibyl", "system_rate"]
