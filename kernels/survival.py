"""Survival-estimator kernels: SIBYL's EMA bucket update and conditional survival.

All kernels are cached :func:`serveplan.kernels.jit` functions over flat arrays with no
validation inside (the Python wrappers in :mod:`serveplan.queueing.survival` validate). Nothing is compiled at
import: compilation happens on the first call (or is loaded from numba's on-disk cache).

State layout shared by every kernel (the *online survival state*):

``surv`` : float64[n_buckets]
    ``surv[i]`` is the estimate :math:`\\hat S((i+1)\\Delta)` at the bucket boundary
    :math:`(i+1)\\Delta`, i.e. the boundaries are :math:`\\Delta, 2\\Delta, \\dots,
    n\\Delta` (SIBYL §4.2). The value at length 0 is not stored: :math:`\\hat S(0) = 1`.
``delta`` : float
    Bucket width :math:`\\Delta` in tokens (> 0).
``alpha`` : float
    EMA smoothing factor :math:`\\alpha \\in (0, 1)` (weight of the old value).

Between boundaries :math:`\\hat S` is interpolated linearly (node 0 has value 1); beyond the
last boundary it is held constant at ``surv[-1]``. Every kernel has a NumPy reference in
:data:`REFERENCE` (same name, ``_ref`` suffix) that the tests compare against.
"""

from __future__ import annotations

import numpy as np

from serveplan.kernels import jit

__all__ = [
    "REFERENCE",
    "conditional_survival",
    "conditional_survival_ref",
    "ema_survival_update",
    "ema_survival_update_many",
    "ema_survival_update_many_ref",
    "ema_survival_update_ref",
    "projected_active_load",
    "projected_active_load_ref",
    "survival_at",
    "survival_at_ref",
]


# --------------------------------------------------------------------------------------------
# numba kernels
# --------------------------------------------------------------------------------------------


@jit(cache=True, error_model="numpy")
def ema_survival_update(surv, delta, alpha, final_len):
    """Apply SIBYL Eq. (4) for one completion of length ``final_len``, in place.

    ``surv[i] <- alpha * surv[i] + (1 - alpha) * 1{final_len >= (i+1)*delta}`` for every i.
    """
    w = 1.0 - alpha
    for i in range(surv.shape[0]):
        if final_len >= (i + 1) * delta:
            surv[i] = alpha * surv[i] + w
        else:
            surv[i] = alpha * surv[i]


@jit(cache=True, error_model="numpy")
def ema_survival_update_many(surv, delta, alpha, final_lens):
    """Apply :func:`ema_survival_update` for each completion in ``final_lens`` in order."""
    w = 1.0 - alpha
    n = surv.shape[0]
    for k in range(final_lens.shape[0]):
        f = final_lens[k]
        for i in range(n):
            if f >= (i + 1) * delta:
                surv[i] = alpha * surv[i] + w
            else:
                surv[i] = alpha * surv[i]


@jit(cache=True, error_model="numpy")
def _table(surv):
    """Padded node table ``[1, surv[0], ..., surv[n-1], surv[n-1]]`` (branch-free lookups)."""
    n = surv.shape[0]
    tab = np.empty(n + 2)
    tab[0] = 1.0
    for i in range(n):
        tab[i + 1] = surv[i]
    tab[n + 1] = surv[n - 1]
    return tab


@jit(cache=True, inline="always", error_model="numpy")
def _interp(tab, inv_delta, fn, length):
    """Piecewise-linear S-hat at ``length`` from the padded table (flat outside [0, n*delta])."""
    x = min(max(length * inv_delta, 0.0), fn)
    i = int(x)
    lo = tab[i]
    return lo + (x - i) * (tab[i + 1] - lo)


@jit(cache=True, error_model="numpy")
def survival_at(surv, delta, lengths, out):
    """Write S-hat(lengths[k]) into ``out[k]`` (linear interpolation between boundaries)."""
    tab = _table(surv)
    inv = 1.0 / delta
    fn = float(surv.shape[0])
    for k in range(lengths.shape[0]):
        out[k] = _interp(tab, inv, fn, lengths[k])


@jit(cache=True, error_model="numpy")
def conditional_survival(surv, delta, l_now, l_future, out):
    """Write P_k = S-hat(l_future[k]) / S-hat(l_now[k]) (SIBYL Eq. 3/6) into ``out[k]``.

    The ratio is capped at 1; where S-hat(l_now) <= 0 (no recent completion reached l_now) the
    result is 1 (the request is observed alive; SIBYL's PROB@1 convention, Appendix J).
    """
    tab = _table(surv)
    inv = 1.0 / delta
    fn = float(surv.shape[0])
    for k in range(l_now.shape[0]):
        den = _interp(tab, inv, fn, l_now[k])
        p = min(_interp(tab, inv, fn, l_future[k]) / (den if den > 0.0 else 1.0), 1.0)
        out[k] = p if den > 0.0 else 1.0


@jit(cache=True, error_model="numpy")
def projected_active_load(surv, delta, instance, l_in, l_now, rate, horizon, out):
    """Accumulate SIBYL Eq. (6) per instance: ``out[j] = sum_k M_k * P_k`` over k on j.

    ``M_k = l_in[k] + l_now[k] + rate[k] * horizon`` and
    ``P_k = S-hat(l_now[k] + rate[k] * horizon) / S-hat(l_now[k])`` (capped at 1, 1 where the
    denominator is 0). ``out`` is zeroed first; ``instance[k]`` indexes ``out``.
    """
    tab = _table(surv)
    inv = 1.0 / delta
    fn = float(surv.shape[0])
    for j in range(out.shape[0]):
        out[j] = 0.0
    for k in range(l_now.shape[0]):
        lf = l_now[k] + rate[k] * horizon
        den = _interp(tab, inv, fn, l_now[k])
        p = min(_interp(tab, inv, fn, lf) / (den if den > 0.0 else 1.0), 1.0)
        p = p if den > 0.0 else 1.0
        out[instance[k]] += (l_in[k] + lf) * p


# --------------------------------------------------------------------------------------------
# NumPy references
# --------------------------------------------------------------------------------------------


def ema_survival_update_ref(surv, delta, alpha, final_len):
    """NumPy reference of :func:`ema_survival_update` (in place)."""
    bounds = np.arange(1, surv.shape[0] + 1) * delta
    surv *= alpha
    surv += (1.0 - alpha) * (final_len >= bounds)


def ema_survival_update_many_ref(surv, delta, alpha, final_lens):
    """NumPy reference of :func:`ema_survival_update_many` (in place).

    Closed form of n sequential EMA steps: ``s_n = a^n s_0 + (1-a) sum_k a^(n-1-k) I_k``.
    """
    bounds = np.arange(1, surv.shape[0] + 1) * delta
    n = final_lens.shape[0]
    weights = (1.0 - alpha) * alpha ** np.arange(n - 1, -1, -1, dtype=np.float64)
    ind = np.asarray(final_lens)[:, None] >= bounds[None, :]
    surv *= alpha**n
    surv += weights @ ind


def _interp_ref(surv, delta, lengths):
    """Vectorised form of the kernels' lookup (same arithmetic, so the same rounding).

    It equals ``np.interp(lengths, arange(n + 1) * delta, [1, *surv])`` with flat ends up to
    rounding at the nodes; the tests check that too.
    """
    n = surv.shape[0]
    tab = np.concatenate(([1.0], surv, surv[-1:]))
    x = np.minimum(np.maximum(np.asarray(lengths, dtype=np.float64) * (1.0 / delta), 0.0), n)
    i = x.astype(np.int64)
    lo = tab[i]
    return lo + (x - i) * (tab[i + 1] - lo)


def survival_at_ref(surv, delta, lengths, out):
    """NumPy reference of :func:`survival_at`."""
    out[:] = _interp_ref(surv, delta, lengths)


def conditional_survival_ref(surv, delta, l_now, l_future, out):
    """NumPy reference of :func:`conditional_survival`."""
    den = _interp_ref(surv, delta, l_now)
    num = _interp_ref(surv, delta, l_future)
    p = np.minimum(num / np.where(den > 0.0, den, 1.0), 1.0)
    out[:] = np.where(den > 0.0, p, 1.0)


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
