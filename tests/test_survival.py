"""Tests for serveplan.queueing.survival and the kernels in serveplan.kernels.survival."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from serveplan.kernels import survival as K
from serveplan.queueing.survival import (
    KaplanMeier,
    OnlineSurvival,
    calibration_error,
    empirical_survival,
    kaplan_meier,
)

# ------------------------------------------------------------------------------------------
# Kaplan-Meier
# ------------------------------------------------------------------------------------------


def test_km_without_censoring_is_empirical_survival():
    rng = np.random.default_rng(3)
    x = rng.integers(1, 50, size=400).astype(float)  # many ties
    km = kaplan_meier(x)
    grid = np.arange(0, 55, 0.5)
    assert np.allclose(km(grid), empirical_survival(x, grid), atol=1e-12)
    assert np.array_equal(km.times, np.unique(x))
    assert km.n_at_risk[0] == x.size and km.n_events.sum() == x.size


def test_km_hand_example_with_censoring():
    km = kaplan_meier([1, 2, 2, 3, 4, 5], observed=[1, 1, 0, 1, 0, 1])
    # t=1: 5/6; t=2: n=5 (censoring tied at 2 is at risk), d=1 -> 2/3; t=3: n=3 -> 4/9; t=5: 0
    assert km.times.tolist() == [1.0, 2.0, 3.0, 5.0]
    assert km.n_at_risk.tolist() == [6, 5, 3, 1]
    assert np.allclose(km.survival, [5 / 6, 2 / 3, 4 / 9, 0.0])
    assert np.allclose(km([0.5, 1.0, 2.5, 4.5, 9.0]), [1.0, 5 / 6, 2 / 3, 4 / 9, 0.0])
    g, s = km.on_grid([0.0, 3.0])
    assert g.tolist() == [0.0, 3.0] and np.allclose(s, [1.0, 4 / 9])
    # bucket prior reads the step function S(l) = P(L > l) at boundaries 1, 2, 3, 4
    # (no event at 4: the censoring there leaves S at 4/9)
    assert np.allclose(km.bucket_prior(1.0, 4), [5 / 6, 2 / 3, 4 / 9, 4 / 9])


def test_km_validation():
    with pytest.raises(ValueError, match="durations must be finite and >= 0, got -1.0"):
        kaplan_meier([1.0, -1.0])
    with pytest.raises(ValueError, match="observed must have the shape"):
        kaplan_meier([1.0, 2.0], observed=[True])


# ------------------------------------------------------------------------------------------
# kernels vs NumPy references
# ------------------------------------------------------------------------------------------


def _state(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.sort(rng.uniform(0.0, 1.0, n))[::-1].copy()


def test_update_kernels_match_reference():
    rng = np.random.default_rng(0)
    s0 = _state(rng, 40)
    lens = rng.uniform(0, 1400, 300)
    a, b = s0.copy(), s0.copy()
    K.ema_survival_update(a, 32.0, 0.97, 500.0)
    K.ema_survival_update_ref(b, 32.0, 0.97, 500.0)
    assert np.allclose(a, b, rtol=0, atol=1e-14)
    a, b, c = s0.copy(), s0.copy(), s0.copy()
    K.ema_survival_update_many(a, 32.0, 0.97, lens)
    K.ema_survival_update_many_ref(b, 32.0, 0.97, lens)
    for f in lens:
        K.ema_survival_update(c, 32.0, 0.97, f)
    assert np.allclose(a, b, rtol=0, atol=1e-12)
    assert np.array_equal(a, c)
    # a completion exactly on a boundary does not survive it (indicator L > l, S = P(L > l))
    d = np.zeros(3)
    K.ema_survival_update(d, 10.0, 0.5, 20.0)
    assert d.tolist() == [0.5, 0.0, 0.0]


def test_evaluation_kernels_match_reference():
    rng = np.random.default_rng(1)
    surv = _state(rng, 64)
    surv[-5:] = 0.0  # exercise the zero-denominator branch
    delta = 16.0
    n = 2_000
    l_now = rng.uniform(-5, 1100, n)
    l_fut = l_now + rng.uniform(0, 200, n)
    for name, args in [
        ("survival_at", (surv, delta, l_now)),
        ("conditional_survival", (surv, delta, l_now, l_fut)),
    ]:
        o1, o2 = np.empty(n), np.empty(n)
        getattr(K, name)(*args, o1)
        K.REFERENCE[name](*args, o2)
        assert np.allclose(o1, o2, rtol=1e-12, atol=1e-15), name
    # the lookup is a right-continuous step: the value of the boundary at or below x
    # (1 below delta), flat beyond the last boundary
    k = np.clip(np.floor(l_now / delta).astype(int), 0, surv.size)
    step = np.concatenate(([1.0], surv))[k]
    o1 = np.empty(n)
    K.survival_at(surv, delta, l_now, o1)
    assert np.array_equal(o1, step)
    inst = rng.integers(0, 7, n)
    l_in = rng.uniform(10, 3000, n)
    rate = rng.uniform(5, 60, n)
    o1, o2 = np.full(7, 99.0), np.full(7, -1.0)
    K.projected_active_load(surv, delta, inst, l_in, l_now, rate, 0.8, o1)
    K.REFERENCE["projected_active_load"](surv, delta, inst, l_in, l_now, rate, 0.8, o2)
    assert np.allclose(o1, o2, rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    surv=hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(0.0, 1.0)),
    delta=st.floats(0.5, 100.0),
    alpha=st.floats(0.01, 0.99),
    lens=hnp.arrays(np.float64, st.integers(0, 20), elements=st.floats(0.0, 4000.0)),
    queries=hnp.arrays(np.float64, st.integers(1, 20), elements=st.floats(0.0, 4000.0)),
    step=st.floats(0.0, 500.0),
)
def test_kernels_match_reference_hypothesis(surv, delta, alpha, lens, queries, step):
    s = -np.sort(-surv)  # non-increasing, as the estimator keeps it
    a, b = s.copy(), s.copy()
    K.ema_survival_update_many(a, delta, alpha, lens)
    K.ema_survival_update_many_ref(b, delta, alpha, lens)
    assert np.allclose(a, b, rtol=1e-10, atol=1e-12)
    assert np.all(np.diff(a) <= 1e-15) and np.all((a >= 0) & (a <= 1))
    o1, o2 = np.empty(queries.size), np.empty(queries.size)
    K.conditional_survival(a, delta, queries, queries + step, o1)
    K.conditional_survival_ref(a, delta, queries, queries + step, o2)
    assert np.allclose(o1, o2, rtol=1e-9, atol=1e-12)
    assert np.all((o1 >= 0) & (o1 <= 1))


# ------------------------------------------------------------------------------------------
# SIBYL online estimator
# ------------------------------------------------------------------------------------------


def test_online_estimator_converges_lognormal():
    rng = np.random.default_rng(2024)
    dist = stats.lognorm(s=0.8, scale=600.0)
    est = OnlineSurvival.create(max_length=8192, delta=32.0, alpha=0.999)
    assert np.all(est.surv == 1.0) and est.n_buckets == 256
    est.update(dist.rvs(size=30_000, random_state=rng))
    # boundary values track the true survival function
    b = est.boundaries[est.boundaries <= 3000]
    assert np.max(np.abs(est.survival(b) - dist.sf(b))) < 0.05
    # SIBYL §5.2 metric on a dense grid where S(current) >= 0.1 (90th percentile ~ 1680)
    cur = np.linspace(0, dist.ppf(0.9), 40)
    tgt = np.linspace(0, 4000, 80)
    ce = calibration_error(est, dist.sf, cur, tgt)
    assert ce.mae < 0.03
    assert ce.max_abs < 0.12
    assert ce.surface.shape == (40, 80)
    assert np.isnan(ce.surface[-1, 0])  # target < current is not a valid cell


def test_online_estimator_exponential_and_recency():
    rng = np.random.default_rng(5)
    est = OnlineSurvival.create(max_length=4000, delta=50.0, alpha=0.998)
    est.update(rng.exponential(300.0, 20_000))
    b = est.boundaries[:30]
    assert np.max(np.abs(est.surv[:30] - np.exp(-b / 300.0))) < 0.05
    # the workload shifts to longer outputs: the EMA forgets the old law
    est.update(rng.exponential(900.0, 6_000))
    assert np.max(np.abs(est.surv[:30] - np.exp(-b / 900.0))) < 0.06
    # conditional survival of an exponential is memoryless: S(a + h)/S(a) = exp(-h/900)
    p = est.conditional([100.0, 400.0, 800.0], [400.0, 700.0, 1100.0])
    assert np.allclose(p, np.exp(-300.0 / 900.0), atol=0.06)


def test_conditional_survival_conventions():
    est = OnlineSurvival.create(max_length=100, delta=10.0, alpha=0.5)
    # fresh state: every active request survives (PROB@1)
    assert np.all(est.conditional([0.0, 50.0], [30.0, 90.0]) == 1.0)
    est.surv[:] = np.linspace(0.9, 0.0, 10)  # S-hat(100) = 0
    # step function: 1 below the first boundary, 0.9 from 10 on (right-continuous)
    assert est.survival([5.0, 9.999, 10.0, 19.0])[0:4].tolist() == [1.0, 1.0, 0.9, 0.9]
    # Type 2 shadow task (l_now = 0) gives S-hat(l) itself
    assert est.conditional([0.0], [35.0])[0] == pytest.approx(est.survival([35.0])[0])
    # beyond the estimator's support the request is alive: probability 1, never NaN
    assert est.conditional([100.0, 150.0], [120.0, 200.0]).tolist() == [1.0, 1.0]
    # shrinking projection is capped at 1
    assert est.conditional([50.0], [20.0])[0] == 1.0


def test_projected_load_matches_loop_and_validates():
    rng = np.random.default_rng(9)
    est = OnlineSurvival.create(
        max_length=2048, delta=64.0, alpha=0.99, initial=stats.expon(scale=500).sf
    )
    n = 300
    inst = rng.integers(0, 5, n)
    l_in = rng.uniform(50, 2000, n)
    l_now = rng.uniform(0, 1800, n)
    rate = rng.uniform(10, 40, n)
    horizon = 1.5
    load = est.projected_load(inst, l_in, l_now, rate, horizon, n_instances=5)
    ref = np.zeros(5)
    for k in range(n):
        lf = l_now[k] + rate[k] * horizon
        p = min(est.survival([lf])[0] / est.survival([l_now[k]])[0], 1.0)
        ref[inst[k]] += (l_in[k] + lf) * p
    assert np.allclose(load, ref, rtol=1e-12)
    with pytest.raises(ValueError, match=r"instance indices must be in \[0, 5\), got 7"):
        est.projected_load([7], [1.0], [1.0], [1.0], 1.0, n_instances=5)
    with pytest.raises(ValueError, match="alpha must be in \\(0, 1\\), got 1.0"):
        OnlineSurvival.create(max_length=100, delta=10.0, alpha=1.0)
    with pytest.raises(ValueError, match="final_lengths must be finite and >= 0, got -3.0"):
        est.update([10.0, -3.0])


def test_calibration_error_exact_estimator_and_sample_truth():
    rng = np.random.default_rng(4)
    sample = rng.gamma(2.0, 200.0, 5_000)
    cur = np.linspace(0, 600, 13)
    tgt = np.linspace(0, 1500, 31)

    def exact(a, b):
        return empirical_survival(sample, b) / empirical_survival(sample, a)

    ce = calibration_error(exact, sample, cur, tgt)
    assert ce.mae == 0.0 and ce.max_abs == 0.0
    # a constant-1 predictor (PROB@1) is off by 1 - S(b)/S(a): MAE equals its mean
    ones = calibration_error(lambda a, b: np.ones_like(a), sample, cur, tgt)
    aa, bb = np.meshgrid(cur, tgt, indexing="ij")
    gap = 1 - empirical_survival(sample, bb) / empirical_survival(sample, aa)
    assert ones.mae == pytest.approx(gap[bb >= aa].mean())


def test_km_prior_seeds_online_estimator():
    rng = np.random.default_rng(8)
    x = rng.exponential(400.0, 50_000)
    km = kaplan_meier(x)
    assert isinstance(km, KaplanMeier)
    est = OnlineSurvival.create(
        max_length=2000, delta=100.0, alpha=0.99, initial=km.bucket_prior(100.0, 20)
    )
    assert np.allclose(est.surv, np.exp(-est.boundaries / 400.0), atol=0.01)


def test_a_survival_below_tiny_counts_as_zero():
    """S = [1, 1e-308, 0] on steps of 25: at 60 the estimator holds 1e-308, below the
    tables' floor (2^-1000), so S(60) counts as 0 and P(survive 60 -> 80) is 1, as where
    S(60) is 0 exactly (the case hypothesis found: kernel 1, reference 0 before)."""
    surv = np.array([1.0, 1e-308, 0.0])
    now, future = np.array([60.0]), np.array([80.0])
    for fn in (K.conditional_survival, K.conditional_survival_ref):
        out = np.empty(1)
        fn(surv, 25.0, now, future, out)
        assert out[0] == 1.0
