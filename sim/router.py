"""Entry routers: which instance of the entry role receives an arriving request (compiled).

The entry role's instances are ``[glob[G_ENTRY_LO], glob[G_ENTRY_HI])``: the colocated
instances, or the prefill instances of a disaggregated deployment. A router is a small
function of the request and the instances' state arrays, chosen by an int code
(:class:`~serveplan.sim.state.Router`); :func:`route` dispatches. Adding a router means
adding a code, a function with the same arguments and one branch in :func:`route`.
(The decode router of the prefill -> decode boundary is :mod:`serveplan.sim.pd_router`.)

* ``round-robin``: instances in turn (a counter in ``glob[G_RR]``).
* ``least-outstanding-tokens`` (a prefill pool's ``least-loaded``): the instance with the
  fewest outstanding tokens in ``inst.load``. A colocated request counts ``prompt +
  output`` tokens when routed, loses its prompt when its prefill completes and one token
  per generated token (recomputation after preemption is not counted). **It is
  clairvoyant**: it charges each request its true output length, which no real router
  knows before the request finishes, so it is an optimistic reference, not a deployable
  policy. A prefill request counts its prompt until its prefill completes (no output
  length involved: not clairvoyant). Ties go to the lowest index.
* ``least-requests``: vLLM's data-parallel balancer score ``4 * waiting + running``.
* ``least-estimated-tokens`` (:func:`route_least_estimated_tokens`, non-clairvoyant): the
  instance with the fewest estimated outstanding tokens, counting for every request queued
  or running there its prompt tokens not yet computed plus an *estimate* of its remaining
  output, ``max(E - generated, 1)`` with ``E`` a configured expected output length (e.g. the
  workload's mean): only what a real router sees -- prompt lengths and tokens generated so
  far. Unlike ``inst.load`` it also charges the recomputation of a preempted request's
  prompt. It reads the request arrays, so it is reached through
  :func:`route_with_requests`; :func:`estimated_loads_reference` is its NumPy reference.
* ``sibyl`` (colocated instances only): SIBYL's least projected load at the end of the new
  request's prefill, from the instances' running and waiting requests and a survival
  estimate of output lengths (:mod:`serveplan.sim.colocated_sibyl`). It reads the requests
  and the router state, so it is reached through :func:`route_with_state`.
"""

from __future__ import annotations

import numpy as np

from ._jitcache import sim_jit
from .colocated_sibyl import route_sibyl
from .state import G_ENTRY_HI, G_ENTRY_LO, G_RR, I_NRUN, I_WHEAD, I_WLEN

ROUTER_ROUND_ROBIN, ROUTER_LEAST_TOKENS, ROUTER_LEAST_REQUESTS = 0, 1, 2
ROUTER_LEAST_ESTIMATED_TOKENS = 3
ROUTER_SIBYL = 4


@sim_jit
def route_round_robin(lo, hi, inst, glob):
    i = lo + glob[G_RR] % (hi - lo)
    glob[G_RR] += 1
    return i


@sim_jit
def route_least_tokens(lo, hi, inst, glob):
    best = lo
    for i in range(lo + 1, hi):
        if inst.load[i] < inst.load[best]:
            best = i
    return best


@sim_jit
def route_least_requests(lo, hi, inst, glob):
    best = lo
    best_score = 4 * inst.ist[lo, I_WLEN] + inst.ist[lo, I_NRUN]
    for i in range(lo + 1, hi):
        score = 4 * inst.ist[i, I_WLEN] + inst.ist[i, I_NRUN]
        if score < best_score:
            best, best_score = i, score
    return best


@sim_jit
def _estimated_tokens(reqs, r, expected_output):
    """Prompt tokens of ``r`` not computed yet plus its estimated remaining output."""
    prompt_left = max(reqs.prompt[r] - reqs.computed[r], 0)
    return prompt_left + max(expected_output - reqs.n_out[r], 1)


@sim_jit
def estimated_load(inst, reqs, i, expected_output):
    """Estimated outstanding tokens of instance ``i``: its waiting and running requests."""
    total = 0
    cap = inst.wq.shape[1]
    head = inst.ist[i, I_WHEAD]
    for k in range(inst.ist[i, I_WLEN]):
        total += _estimated_tokens(reqs, inst.wq[i, (head + k) % cap], expected_output)
    for s in range(inst.ist[i, I_NRUN]):
        total += _estimated_tokens(reqs, inst.run[i, s], expected_output)
    return total


@sim_jit
def route_least_estimated_tokens(lo, hi, inst, reqs, expected_output):
    """The instance in ``[lo, hi)`` with the smallest :func:`estimated_load` (ties: lowest
    index)."""
    best = lo
    best_load = estimated_load(inst, reqs, lo, expected_output)
    for i in range(lo + 1, hi):
        load = estimated_load(inst, reqs, i, expected_output)
        if load < best_load:
            best, best_load = i, load
    return best


@sim_jit
def route(code, r, inst, glob):
    """Instance index for request ``r`` under router ``code``."""
    lo, hi = glob[G_ENTRY_LO], glob[G_ENTRY_HI]
    if code == ROUTER_LEAST_TOKENS:
        return route_least_tokens(lo, hi, inst, glob)
    if code == ROUTER_LEAST_REQUESTS:
        return route_least_requests(lo, hi, inst, glob)
    return route_round_robin(lo, hi, inst, glob)


@sim_jit
def route_with_requests(code, r, reqs, expected_output, inst, glob):
    """:func:`route` for callers that also pass the entry role's request arrays ``reqs``
    and the configured expected output length: adds ``least-estimated-tokens``."""
    if code == ROUTER_LEAST_ESTIMATED_TOKENS:
        return route_least_estimated_tokens(glob[G_ENTRY_LO], glob[G_ENTRY_HI], inst, reqs,
                                            expected_output)
    return route(code, r, inst, glob)


@sim_jit
def route_with_state(code, r, reqs, rt, now, inst, glob):
    """:func:`route` for callers that also pass the entry role's request arrays ``reqs``,
    the router state ``rt`` and the time: adds ``sibyl`` among colocated instances."""
    if code == ROUTER_SIBYL:
        return route_sibyl(glob[G_ENTRY_LO], glob[G_ENTRY_HI], inst, reqs, rt, r, now)
    return route(code, r, inst, glob)


def estimated_loads_reference(queued: list, prompt, computed, n_out,
                              expected_output: int) -> np.ndarray:
    """NumPy reference of :func:`estimated_load` for every instance: ``queued[i]`` lists the
    request indices waiting or running on instance ``i``."""
    prompt, computed, n_out = (np.asarray(a, dtype=np.int64) for a in (prompt, computed, n_out))
    out = np.zeros(len(queued), dtype=np.int64)
    for i, ids in enumerate(queued):
        ids = np.asarray(ids, dtype=np.int64)
        out[i] = (np.maximum(prompt[ids] - computed[ids], 0)
                  + np.maximum(expected_output - n_out[ids], 1)).sum()
    return out
