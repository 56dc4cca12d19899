"""Routers: which colocated instance receives an arriving request (compiled).

A router is a small function of the request and the instances' state arrays, chosen by an
int code (:class:`~serveplan.sim.state.Router`); :func:`route` dispatches. Adding a router
means adding a code, a function with the same arguments and one branch in :func:`route`.

* ``round-robin``: instances in turn (a counter in ``glob[G_RR]``).
* ``least-outstanding-tokens``: the instance with the fewest outstanding tokens, where a
  request counts ``prompt + output`` tokens when routed, loses its prompt when its prefill
  completes and one token per generated token (recomputation after preemption is not
  counted). Ties go to the lowest index.
* ``least-requests``: vLLM's data-parallel balancer score ``4 * waiting + running``.
"""

from __future__ import annotations

from ._jitcache import sim_jit
from .state import G_RR, I_NRUN, I_WLEN

ROUTER_ROUND_ROBIN, ROUTER_LEAST_TOKENS, ROUTER_LEAST_REQUESTS = 0, 1, 2


@sim_jit
def route_round_robin(r, reqs, inst, glob):
    n_inst = inst.ist.shape[0]
    i = glob[G_RR] % n_inst
    glob[G_RR] += 1
    return i


@sim_jit
def route_least_tokens(r, reqs, inst, glob):
    best = 0
    for i in range(1, inst.ist.shape[0]):
        if inst.load[i] < inst.load[best]:
            best = i
    return best


@sim_jit
def route_least_requests(r, reqs, inst, glob):
    best = 0
    best_score = 4 * inst.ist[0, I_WLEN] + inst.ist[0, I_NRUN]
    for i in range(1, inst.ist.shape[0]):
        score = 4 * inst.ist[i, I_WLEN] + inst.ist[i, I_NRUN]
        if score < best_score:
            best, best_score = i, score
    return best


@sim_jit
def route(code, r, reqs, inst, glob):
    """Instance index for request ``r`` under router ``code``."""
    if inst.ist.shape[0] == 1:
        return 0
    if code == ROUTER_LEAST_TOKENS:
        return route_least_tokens(r, reqs, inst, glob)
    if code == ROUTER_LEAST_REQUESTS:
        return route_least_requests(r, reqs, inst, glob)
    return route_round_robin(r, reqs, inst, glob)
