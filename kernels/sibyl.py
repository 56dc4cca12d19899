"""SIBYL's speculative load projection for early decode assignment (compiled).

SIBYL (``papers/sibyl.txt`` §3.2, Eq. 1, 5-8; Algorithm 1) binds a new request to the decode
instance with the least *projected* load at its handoff moment ``tau = now + prefill``:

* Type 1, active decodes (Eq. 6): ``(l_in + l(tau)) · S(l(tau)) / S(l(now))`` with
  ``l(tau) = l(now) + v_k (tau - now)`` and ``v_k`` the request's observed decode rate;
* Type 2, pending requests that start decoding before tau (Eq. 7):
  ``(l_in + l_k(tau)) · S(l_k(tau))`` with ``l_k(tau) = (tau - tau_k) · v_sys``;
* Type 3, pending requests that start after tau (Eq. 8): ``ReLU(l_in - v_sys (tau_k - tau))``.

State is laid out per instance (``[n_instances, capacity]`` slots plus a count per
instance, removal by swapping in the last slot) so each instance's sum is a contiguous loop
into a register: 256 instances × 100 active requests take a few tens of microseconds.

Survival lookups use the bucket estimator of :mod:`serveplan.queueing.survival`: ``surv[i]``
estimates P(L >= (i+1)Δ). Here Ŝ(l) is the value at the bucket boundary at or below ``l``
(a step function: ``tab[min(floor(l/Δ), n)]`` with ``tab[0] = 1``), and the ratio uses a
precomputed reciprocal table (zeros replaced by a tiny value, so a request whose survival
has already reached zero projects with probability 1, SIBYL's Appendix J convention).

Variants for the paper's ablation (Appendix J) are bit flags: ``PROB_ONE`` sets the
survival factor to 1, ``NO_TYPE1/2/3`` drop a term, ``REQUEST_COUNT`` counts requests
(mass 1 for Types 1-2, and 1 for a Type 3 request whose penalty is positive) instead of
tokens.
"""

from __future__ import annotations

import numpy as np

from serveplan.kernels import jit

PROB_ONE, NO_TYPE1, NO_TYPE2, NO_TYPE3, REQUEST_COUNT = 1, 2, 4, 8, 16
VARIANTS = {
    "sibyl": 0,
    "sibyl-p1": PROB_ONE,
    "sibyl-no-type1": NO_TYPE1,
    "sibyl-no-type2": NO_TYPE2,
    "sibyl-no-type3": NO_TYPE3,
    "sibyl-reqlevel": REQUEST_COUNT,
}
_TINY = 1e-300


def survival_tables(surv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(tab, inv_tab)`` for lookups: ``tab = [1, surv...]``, zeros replaced by a tiny value."""
    tab = np.empty(surv.shape[0] + 1)
    tab[0] = 1.0
    tab[1:] = surv
    tab = np.maximum(tab, _TINY)
    return tab, 1.0 / tab


@jit(cache=True, error_model="numpy")
def refresh_tables(surv, tab, inv_tab):
    """Refill ``tab``/``inv_tab`` in place after the estimator ``surv`` changed."""
    tab[0] = 1.0
    inv_tab[0] = 1.0
    for i in range(surv.shape[0]):
        v = surv[i] if surv[i] > _TINY else _TINY
        tab[i + 1] = v
        inv_tab[i + 1] = 1.0 / v


@jit(cache=True, fastmath=True, error_model="numpy")
def projected_loads(now, tau, v_sys, tab, inv_tab, inv_delta,
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
                    i_n = min(int(ln * inv_delta), nmax)
                    i_f = min(int(lf * inv_delta), nmax)
                    acc += mass * tab[i_f] * inv_tab[i_n]
        for s in range(pend_count[j]):
            start = pend_start[j, s]
            if start <= tau:
                if use2:
                    lf = (tau - start) * v_sys
                    mass = 1.0 if count_mode else pend_lin[j, s] + lf
                    if prob_one:
                        acc += mass
                    else:
                        acc += mass * tab[min(int(lf * inv_delta), nmax)]
            elif use3:
                pen = pend_lin[j, s] - v_sys * (start - tau)
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
    ``(l_in, l_now, rate)`` and ``(l_in, start)``; Ŝ is the bucket step function."""

    def s_hat(length):
        i = int(np.floor(length / delta))
        if i <= 0:
            return 1.0
        return max(float(surv[min(i, len(surv)) - 1]), _TINY)

    out = np.zeros(len(act))
    for j in range(len(act)):
        total = 0.0
        if not flags & NO_TYPE1:
            for l_in, ln, rate in act[j]:
                lf = ln + rate * (tau - now)
                mass = 1.0 if flags & REQUEST_COUNT else l_in + lf
                prob = 1.0 if flags & PROB_ONE else s_hat(lf) / s_hat(ln)
                total += mass * prob
        for l_in, start in pend[j]:
            if start <= tau:
                if not flags & NO_TYPE2:
                    lf = (tau - start) * v_sys
                    mass = 1.0 if flags & REQUEST_COUNT else l_in + lf
                    total += mass * (1.0 if flags & PROB_ONE else s_hat(lf))
            elif not flags & NO_TYPE3:
                pen = max(l_in - v_sys * (start - tau), 0.0)
                total += (1.0 if pen > 0 else 0.0) if flags & REQUEST_COUNT else pen
        out[j] = total
    return out


REFERENCE = {"projected_loads": projected_loads_ref}
