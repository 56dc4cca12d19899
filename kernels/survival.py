"""Survival-estimator kernels: SIBYL's EMA bucket update and the one :math:`\\hat S` lookup.

All kernels are cached :func:`serveplan.kernels.jit` functions over flat arrays with no
validation inside (the Python wrappers in :mod:`serveplan.queueing.survival` validate).
Nothing is compiled at import: compilation happens on the first call (or is loaded from
numba's on-disk cache).

State layout shared by every kernel (the *online survival state*):

``surv`` : float64[n_buckets]
    ``surv[i]`` is the estimate :math:`\\hat S((i+1)\\Delta)` of :math:`S(x) = P(L > x)` at
    the bucket boundary :math:`(i+1)\\Delta` (SIBYL §4.2: boundaries :math:`\\Delta, 2\\Delta,
    \\dots, n\\Delta`). The value at length 0 is not stored: :math:`\\hat S(0) = 1`.
``delta`` : float
    Bucket width :math:`\\Delta` in tokens (> 0).
``alpha`` : float
    EMA smoothing factor :math:`\\alpha \\in (0, 1)` (weight of the old value).

The :math:`\\hat S` convention (one for every caller)
-----------------------------------------------------
:math:`\\hat S` is a right-continuous step function, as a Kaplan-Meier estimate is: between
boundaries it keeps the value of the boundary at or below the length,

.. math:: \\hat S(x) = \\hat S(\\lfloor x / \\Delta \\rfloor \\Delta),\\qquad \\hat S(x) = 1
          \\text{ for } x < \\Delta,

and beyond the last boundary it is held at ``surv[-1]``. :func:`step_index` is the only
place that maps a length to a table entry; :func:`survival_at`, :func:`conditional_survival`,
:func:`projected_active_load` and SIBYL's projected-load kernel
(:mod:`serveplan.kernels.sibyl`) all read :math:`\\hat S` through it.

Conditional survival :math:`\\hat S(b) / \\hat S(a)` (SIBYL Eq. 3) uses the lookup tables
of :func:`survival_tables`: ``tab = [1, surv...]`` with zeros replaced by a tiny value and
its reciprocal, so the ratio needs no branch; it is capped at 1, and it is 1 where
:math:`\\hat S(a) = 0` (no recent completion reached ``a``, yet the request is observed
alive: SIBYL's PROB@1 convention, Appendix J). Every kernel has a NumPy reference in
:data:`REFERENCE` (same name, ``_ref`` suffix) that the tests compare against.

The EMA update counts a completion of length :math:`L` as surviving boundary :math:`l` when
:math:`L > l`, so the state estimates :math:`P(L > l)`, the quantity Eq. 3 and Kaplan-Meier
define. (Eq. 4 of the paper writes :math:`\\mathbb{I}_{L \\ge l}`; the two differ by the mass
exactly at a boundary, which matters at an output cap that is a multiple of :math:`\\Delta`:
with :math:`\\ge`, :math:`\\hat S(8192)` would be the share of requests *stopped* at 8192.)
"""

from __future__ import annotations

import numpy as np

from serveplan.kernels import jit

__all__ = [
    "REFERENCE",
    "conditional_survival",
    "conditional_survival_ref",
    "cond_prob",
    "ema_survival_update",
    "ema_survival_update_many",
    "ema_survival_update_many_ref",
    "ema_survival_update_ref",
    "projected_active_load",
    "projected_active_load_ref",
    "refresh_tables",
    "step_index",
    "survival_at",
    "survival_at_ref",
    "survival_step_ref",
    "survival_tables",
]

TINY = 2.0**-1000
"""Stand-in for a zero survival in the lookup tables (keeps the ratio branch-free); a power
of two, so ``TINY * (1 / TINY)`` is exactly 1."""


# --------------------------------------------------------------------------------------------
# the one lookup convention
# --------------------------------------------------------------------------------------------


@jit(cache=True, inline="always", error_model="numpy")
def step_index(length, delta, nmax):
    """Table index of :math:`\\hat S(length)`: ``floor(length / delta)`` clamped to
    ``[0, nmax]`` (index 0 is :math:`\\hat S(0) = 1`, index ``i`` the boundary ``i delta``)."""
    x = length / delta
    if x <= 0.0:
        return 0
    i = int(x)
    return i if i < nmax else nmax


@jit(cache=True, inline="always", error_model="numpy")
def cond_prob(tab, inv_tab, delta, l_now, l_future):
    """:math:`\\min(\\hat S(l_{future}) / \\hat S(l_{now}), 1)` from :func:`survival_tables`."""
    nmax = tab.shape[0] - 1
    p = tab[step_index(l_future, delta, nmax)] * inv_tab[step_index(l_now, delta, nmax)]
    return p if p < 1.0 else 1.0


def survival_tables(surv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(tab, inv_tab)`` for lookups: ``tab = [1, surv...]``, zeros replaced by a tiny value."""
    tab = np.empty(surv.shape[0] + 1)
    tab[0] = 1.0
    tab[1:] = surv
    tab = np.maximum(tab, TINY)
    return tab, 1.0 / tab


@jit(cache=True, error_model="numpy")
def refresh_tables(surv, tab, inv_tab):
    """Refill ``tab``/``inv_tab`` in place after the estimator ``surv`` changed."""
    tab[0] = 1.0
    inv_tab[0] = 1.0
    for i in range(surv.shape[0]):
        v = surv[i] if surv[i] > TINY else TINY
        tab[i + 1] = v
        inv_tab[i + 1] = 1.0 / v


@jit(cache=True, error_model="numpy")
def _tables(surv):
    """:func:`survival_tables` inside compiled code."""
    tab = np.empty(surv.shape[0] + 1)
    inv = np.empty(surv.shape[0] + 1)
    refresh_tables(surv, tab, inv)
    return tab, inv


# --------------------------------------------------------------------------------------------
# numba kernels
# --------------------------------------------------------------------------------------------


@jit(cache=True, error_model="numpy")
def ema_survival_update(surv, delta, alpha, final_len):
    """One completion of length ``final_len`` (SIBYL Eq. 4, in place):
    ``surv[i] <- alpha * surv[i] + (1 - alpha) * 1{final_len > (i+1)*delta}``."""
    w = 1.0 - alpha
    for i in range(surv.shape[0]):
        if final_len > (i + 1) * delta:
            surv[i] = alpha * surv[i] + w
        else:
            surv[i] = alpha * surv[i]


@jit(cache=True, error_model="numpy")
def ema_survival_update_many(surv, delta, alpha, final_lens):
    """Apply :func:`ema_survival_update` for each completion in ``final_lens`` in order."""
    for k in range(final_lens.shape[0]):
        ema_survival_update(surv, delta, alpha, final_lens[k])


@jit(cache=True, error_model="numpy")
def survival_at(surv, delta, lengths, out):
    """Write :math:`\\hat S(lengths[k])` into ``out[k]`` (the step convention above)."""
    n = surv.shape[0]
    for k in range(lengths.shape[0]):
        i = step_index(lengths[k], delta, n)
        out[k] = 1.0 if i == 0 else surv[i - 1]


@jit(cache=True, error_model="numpy")
def conditional_survival(surv, delta, l_now, l_future, out):
    """Write :math:`P_k = \\hat S(l_{future,k}) / \\hat S(l_{now,k})` (SIBYL Eq. 3/6), capped
    at 1 and 1 where :math:`\\hat S(l_{now,k}) = 0`, into ``out[k]``."""
    tab, inv = _tables(surv)
    for k in range(l_now.shape[0]):
        out[k] = cond_prob(tab, inv, delta, l_now[k], l_future[k])


@jit(cache=True, error_model="numpy")
def projected_active_load(surv, delta, instance, l_in, l_now, rate, horizon, out):
    """Accumulate SIBYL Eq. (6) per instance: ``out[j] = sum_k M_k * P_k`` over k on j.

    ``M_k = l_in[k] + l_now[k] + rate[k] * horizon`` and ``P_k`` the conditional survival
    from ``l_now[k]`` to ``l_now[k] + rate[k] * horizon``. ``out`` is zeroed first;
    ``instance[k]`` indexes ``out``.
    """
    tab, inv = _tables(surv)
    for j in range(out.shape[0]):
        out[j] = 0.0
    for k in range(l_now.shape[0]):
        lf = l_now[k] + rate[k] * horizon
        out[instance[k]] += (l_in[k] + lf) * cond_prob(tab, inv, delta, l_now[k], lf)


# --------------------------------------------------------------------------------------------
# NumPy references
# --------------------------------------------------------------------------------------------


def ema_survival_update_ref(surv, delta, alpha, final_len):
    """NumPy reference of :func:`ema_survival_update` (in place)."""
    bounds = np.arange(1, surv.shape[0] + 1) * delta
    surv *= alpha
    surv += (1.0 - alpha) * (final_len > bounds)


def ema_survival_update_many_ref(surv, delta, alpha, final_lens):
    """NumPy reference of :func:`ema_survival_update_many` (in place).

    Closed form of n sequential EMA steps: ``s_n = a^n s_0 + (1-a) sum_k a^(n-1-k) I_k``.
    """
    bounds = np.arange(1, surv.shape[0] + 1) * delta
    n = final_lens.shape[0]
    weights = (1.0 - alpha) * alpha ** np.arange(n - 1, -1, -1, dtype=np.float64)
    ind = np.asarray(final_lens)[:, None] > bounds[None, :]
    surv *= alpha**n
    surv += weights @ ind


def survival_step_ref(surv, delta, lengths):
    """:math:`\\hat S` at ``lengths`` written as a Kaplan-Meier-style step lookup:
    ``[1, *surv][searchsorted(boundaries, lengths, side="right")]``."""
    bounds = np.arange(1, surv.shape[0] + 1, dtype=np.float64) * delta
    idx = np.searchsorted(bounds, np.asarray(lengths, dtype=np.float64), side="right")
    return np.concatenate(([1.0], surv))[idx]


def survival_at_ref(surv, delta, lengths, out):
    """NumPy reference of :func:`survival_at`."""
    out[:] = survival_step_ref(surv, delta, lengths)


def conditional_survival_ref(surv, delta, l_now, l_future, out):
    """NumPy reference of :func:`conditional_survival`. Survivals are floored at
    :data:`TINY`, as the kernels' tables hold them, so where ``S(l_now)`` is 0 (or below
    TINY, and ``S(l_future)`` with it) the answer is 1."""
    den = np.maximum(survival_step_ref(surv, delta, l_now), TINY)
    num = np.maximum(survival_step_ref(surv, delta, l_future), TINY)
    out[:] = np.minimum(num / den, 1.0)


def projected_active_load_ref(surv, delta, instance, l_in, l_now, rate, horizon, out):
    """NumPy reference of :func:`projected_active_load`."""
    lf = l_now + rate * horizon
    p = np.empty_like(lf, dtype=np.float64)
    conditional_survival_ref(surv, delta, l_now, lf, p)
    out[:] = 0.0
    np.add.at(out, instance, (l_in + lf) * p)


REFERENCE = {
    "ema_survival_update": ema_survival_update_ref,
    "ema_survival_update_many": ema_survival_update_many_ref,
    "survival_at": survival_at_ref,
    "conditional_survival": conditional_survival_ref,
    "projected_active_load": projected_active_load_ref,
}
"""Kernel name -> NumPy reference implementation with the same signature."""
