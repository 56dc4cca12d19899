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
  per generated token (recomputation after preemption is not counted): the router knows
  each request's true output length (clairvoyant). A prefill request counts its prompt
  until its prefill completes. Ties go to the lowest index.
* ``least-requests``: vLLM's data-parallel balancer score ``4 * waiting + running``.
"""

from __future__ import annotations

from ._jitcache import sim_jit
from .state import G_ENTRY_HI, G_ENTRY_LO, G_RR, I_NRUN, I_WLEN

ROUTER_ROUND_ROBIN, ROUTER_LEAST_TOKENS, ROUTER_LEAST_REQUESTS = 0, 1, 2


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
def route(code, r, inst, glob):
    """Instance index for request ``r`` under router ``code``."""
    lo, hi = glob[G_ENTRY_LO], glob[G_ENTRY_HI]
    if code == ROUTER_LEAST_TOKENS:
        return route_least_tokens(lo, hi, inst, glob)
    if code == ROUTER_LEAST_REQUESTS:
        return route_least_requests(lo, hi, inst, glob)
    return route_round_robin(lo, hi, inst, glob)
