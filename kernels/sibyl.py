"""SIBYL's speculative load projection for early decode assignment (compiled).

SIBYL (``papers/sibyl.txt`` §3.2, Eq. 1, 5-8; Algorithm 1) binds a new request to the decode
instance with the least *projected* load at its handoff moment ``tau = now + prefill``:

* Type 1, active decodes (Eq. 6): ``(l_in + l(tau)) · S(l(tau)) / S(l(now))`` with
  ``l(tau) = l(now) + v_k (tau - now)`` and ``v_k`` the request's observed decode rate;
* Type 2, pending requests that start decoding before tau (Eq. 7):
  ``(l_in + l_k(tau)) · S(l_k(tau))`` with ``l_k(tau) = (tau - tau_k) · v_sys``;
* Type 3, pending requests that start after tau. The paper gives two forms that disagree:
  Eq. 8, ``ReLU(l_in - v_sys (tau_k - tau))`` (a penalty that *decays* with the distance
  to tau), and Algorithm 1 lines 16-18, ``max(0, l_in - Δgap)`` with
  ``Δgap = (tau - tau_k) v_sys < 0``, i.e. ``l_in + v_sys (tau_k - tau)`` (a penalty that
  *grows* with it). Eq. 8 is the default; the flag ``TYPE3_ALG1`` selects Algorithm 1's.

State is laid out per instance (``[n_instances, capacity]`` slots plus a count per
instance, removal by swapping in the last slot) so each instance's sum is a contiguous loop
into a register: 256 instances × 100 active requests take a few tens of microseconds.

Survival lookups use the bucket estimator of :mod:`serveplan.queueing.survival` and its one
lookup convention, :func:`serveplan.kernels.survival.cond_prob` (a right-continuous step
function, as Kaplan-Meier; ratios capped at 1, and 1 where the denominator is zero).

Variants for the paper's ablation (Appendix J) are bit flags: ``PROB_ONE`` sets the
survival factor to 1, ``NO_TYPE1/2/3`` drop a term, ``REQUEST_COUNT`` counts requests
(mass 1 for Types 1-2, and 1 for a Type 3 request whose penalty is positive) instead of
tokens. :func:`pick_least` chooses among the least loaded instances by a tie-break mode
(rotation, lowest index or a random draw).
"""

from __future__ import annotations

import numpy as np

from serveplan.kernels import jit
from serveplan.kernels.survival import (
    TINY,
    cond_prob,
    refresh_tables,
    step_index,
    survival_step_ref,
    survival_tables,
)

PROB_ONE, NO_TYPE1, NO_TYPE2, NO_TYPE3, REQUEST_COUNT = 1, 2, 4, 8, 16
TYPE3_ALG1 = 32
VARIANTS = {
    "sibyl": 0,
    "sibyl-p1": PROB_ONE,
    "sibyl-no-type1": NO_TYPE1,
    "sibyl-no-type2": NO_TYPE2,
    "sibyl-no-type3": NO_TYPE3,
    "sibyl-reqlevel": REQUEST_COUNT,
    "sibyl-alg1": TYPE3_ALG1,
}
TIE_ROTATION, TIE_LOWEST, TIE_RANDOM = 0, 1, 2
TIE_BREAKS = {"rotation": TIE_ROTATION, "lowest": TIE_LOWEST, "random": TIE_RANDOM}
"""Tie-break name -> code for :func:`pick_least`."""

__all__ = ["NO_TYPE1", "NO_TYPE2", "NO_TYPE3", "PROB_ONE", "REFERENCE", "REQUEST_COUNT",
           "TIE_BREAKS", "TYPE3_ALG1", "VARIANTS", "argmin_load", "pick_least",
           "projected_loads", "projected_loads_ref", "refresh_tables", "slot_add",
           "slot_remove", "survival_tables"]


@jit(cache=True, inline="always", error_model="numpy")
def type3_penalty(l_in, v_sys, gap, alg1):
    """Type 3 term of a request starting ``gap = tau_k - tau > 0`` after the handoff:
    Eq. 8 ``max(l_in - v_sys gap, 0)``, or Algorithm 1 ``l_in + v_sys gap``."""
    if alg1:
        return l_in + v_sys * gap
    pen = l_in - v_sys * gap
    return pen if pen > 0.0 else 0.0


@jit(cache=True, fastmath=True, error_model="numpy")
def projected_loads(now, tau, v_sys, tab, inv_tab, delta,
                    act_count, act_lin, act_len, act_rate,
                    pend_count, pend_lin, pend_start, flags, out):
    """Projected load of every decode instance at the handoff moment ``tau`` (Eq. 1).

    ``act_*[j, s]`` for ``s < act_count[j]``: prompt length, tokens generated so far and
    observed decode rate (tokens/s) of the active decodes on instance j. ``pend_*[j, s]``
    for ``s < pend_count[j]``: prompt length and projected decode start of the requests
    bound to j that are still in prefill. Writes ``out[j]``.
    """
    nmax = tab.shape[0] - 1
    h = tau - now
    alg1 = (flags & TYPE3_ALG1) != 0
    prob_one = (flags & PROB_ONE) != 0
    count_mode = (flags & REQUEST_COUNT) != 0
    use1 = (flags & NO_TYPE1) == 0
    use2 = (flags & NO_TYPE2) == 0
    use3 = (flags & NO_TYPE3) == 0
    for j in range(act_count.shape[0]):
        acc = 0.0
        if use1:
            for s in range(act_count[j]):
                ln = act_len[j, s]
                lf = ln + act_rate[j, s] * h
                mass = 1.0 if count_mode else act_lin[j, s] + lf
                if prob_one:
                    acc += mass
                else:
                    acc += mass * cond_prob(tab, inv_tab, delta, ln, lf)
        for s in range(pend_count[j]):
            start = pend_start[j, s]
            if start <= tau:
                if use2:
                    lf = (tau - start) * v_sys
                    mass = 1.0 if count_mode else pend_lin[j, s] + lf
                    if prob_one:
                        acc += mass
                    else:
                        acc += mass * tab[step_index(lf, delta, nmax)]
            elif use3:
                pen = type3_penalty(pend_lin[j, s], v_sys, start - tau, alg1)
                if pen > 0.0:
                    acc += 1.0 if count_mode else pen
        out[j] = acc


@jit(cache=True, error_model="numpy")
def argmin_load(loads, eligible):
    """Index of the least loaded eligible instance (ties: lowest index); -1 if none."""
    best = -1
    for j in range(loads.shape[0]):
        if eligible[j] and (best < 0 or loads[j] < loads[best]):
            best = j
    return best


@jit(cache=True, error_model="numpy")
def pick_least(loads, eligible, mode, draw):
    """The least loaded eligible instance, -1 if none; among equal loads: with
    ``TIE_ROTATION`` the first at or after ``draw`` (cyclically: a counter that advances
    per decision fills idle instances in turn), with ``TIE_LOWEST`` the lowest index, with
    ``TIE_RANDOM`` the ``draw mod n_ties``-th (``draw`` a pseudo-random number)."""
    best = argmin_load(loads, eligible)
    if best < 0 or mode == TIE_LOWEST:
        return best
    n = loads.shape[0]
    low = loads[best]
    if mode == TIE_ROTATION:
        for k in range(n):
            i = (draw + k) % n
            if eligible[i] and loads[i] == low:
                return i
        return best
    ties = 0
    for i in range(n):
        if eligible[i] and loads[i] == low:
            ties += 1
    t = draw % ties
    for i in range(n):
        if eligible[i] and loads[i] == low:
            if t == 0:
                return i
            t -= 1
    return best


@jit(cache=True, error_model="numpy")
def slot_add(count, j, cols, values):
    """Append one entry to instance ``j``: ``cols[c][j, count[j]] = values[c]``; -1 if full."""
    s = count[j]
    if s >= cols[0].shape[1]:
        return -1
    for c in range(len(cols)):
        cols[c][j, s] = values[c]
    count[j] = s + 1
    return s


@jit(cache=True, error_model="numpy")
def slot_remove(count, j, s, cols):
    """Remove slot ``s`` of instance ``j`` by moving the last slot into it; returns the
    slot index that moved (so the caller can update its back-pointer), or -1."""
    last = count[j] - 1
    count[j] = last
    if s == last:
        return -1
    for c in range(len(cols)):
        cols[c][j, s] = cols[c][j, last]
    return last


def projected_loads_ref(now, tau, v_sys, surv, delta, act, pend, flags):
    """Plain reference: ``act``/``pend`` are lists (per instance) of tuples
    ``(l_in, l_now, rate)`` and ``(l_in, start)``; Ŝ is the Kaplan-Meier-style step lookup
    :func:`serveplan.kernels.survival.survival_step_ref`."""

    def s_hat(length):
        return float(survival_step_ref(surv, delta, [length])[0])

    def prob(l_now, l_fut):
        den = s_hat(l_now)
        return 1.0 if den <= 0.0 else min(s_hat(l_fut) / den, 1.0)

    out = np.zeros(len(act))
    for j in range(len(act)):
        total = 0.0
        if not flags & NO_TYPE1:
            for l_in, ln, rate in act[j]:
                lf = ln + rate * (tau - now)
                mass = 1.0 if flags & REQUEST_COUNT else l_in + lf
                total += mass * (1.0 if flags & PROB_ONE else prob(ln, lf))
        for l_in, start in pend[j]:
            if start <= tau:
                if not flags & NO_TYPE2:
                    lf = (tau - start) * v_sys
                    mass = 1.0 if flags & REQUEST_COUNT else l_in + lf
                    total += mass * (1.0 if flags & PROB_ONE else max(s_hat(lf), TINY))
            elif not flags & NO_TYPE3:
                if flags & TYPE3_ALG1:
                    pen = l_in + v_sys * (start - tau)
                else:
                    pen = max(l_in - v_sys * (start - tau), 0.0)
                total += (1.0 if pen > 0 else 0.0) if flags & REQUEST_COUNT else pen
        out[j] = total
    return out


def pick_least_ref(loads, eligible, mode, draw):
    """Plain reference of :func:`pick_least`."""
    loads = np.asarray(loads)
    idx = [j for j in range(len(loads)) if eligible[j]]
    if not idx:
        return -1
    low = min(loads[j] for j in idx)
    ties = [j for j in idx if loads[j] == low]
    if mode == TIE_LOWEST:
        return ties[0]
    if mode == TIE_ROTATION:
        n = len(loads)
        return min(ties, key=lambda j: (j - draw) % n)
    return ties[draw % len(ties)]


REFERENCE = {"projected_loads": projected_loads_ref, "pick_least": pick_least_ref}
