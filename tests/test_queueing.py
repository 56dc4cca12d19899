"""Tests for serveplan.queueing.formulas and serveplan.queueing.fixed_point."""

from __future__ import annotations

import math

import numpy as np
import pytest

from serveplan.queueing import fixed_point as fp
from serveplan.queueing import formulas as F

# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def lindley_waits(interarrival: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Waiting times of a FIFO single-server queue (Lindley recursion, vectorised).

    W_0 = 0, W_{n+1} = max(0, W_n + S_n - A_{n+1}) equals X_n - min_{k<=n} X_k with
    X_n = sum_{i<n} (S_i - A_{i+1}).
    """
    x = np.concatenate(([0.0], np.cumsum(service[:-1] - interarrival[1:])))
    return x - np.minimum.accumulate(x)


# ------------------------------------------------------------------------------------------
# closed forms and hand computations
# ------------------------------------------------------------------------------------------


def test_utilisation_and_mm1_closed_forms():
    lam, mu = 3.0, 5.0
    rho = lam / mu
    assert F.utilisation(lam, 1 / mu) == pytest.approx(rho)
    assert F.utilisation(lam, 1 / mu, servers=3) == pytest.approx(rho / 3)
    assert F.mm1_wait(lam, 1 / mu) == pytest.approx(rho / (mu - lam))
    assert F.mm1_sojourn(lam, 1 / mu) == pytest.approx(1 / (mu - lam))


def test_md1_and_mg1_closed_forms():
    lam, mu = 0.8, 1.25
    rho = lam / mu
    assert F.md1_wait(lam, 1 / mu) == pytest.approx(rho / (2 * mu * (1 - rho)))
    # P-K with SCV 1 is M/M/1; second-moment and SCV parameterisations agree
    assert F.mg1_wait(lam, 1 / mu, scv=1.0) == pytest.approx(F.mm1_wait(lam, 1 / mu))
    s, cs2 = 0.5, 2.5
    m2 = s * s * (1 + cs2)
    assert F.mg1_wait(1.2, s, second_moment=m2) == pytest.approx(F.mg1_wait(1.2, s, scv=cs2))
    assert F.mg1_wait(1.2, s, scv=cs2) == pytest.approx(1.2 * m2 / (2 * (1 - 0.6)))


@pytest.mark.parametrize(
    ("c", "a", "expected"),
    [
        (1, 0.5, 0.5),  # C(1, a) = rho
        (2, 1.0, 1.0 / 3.0),
        (3, 2.0, 4.0 / 9.0),  # (8/6 * 3) / (1 + 2 + 2 + 4) = 4/9
        (5, 4.0, 0.5541),  # standard table value
    ],
)
def test_erlang_c_table_values(c, a, expected):
    assert F.erlang_c(c, a) == pytest.approx(expected, abs=1e-4)


def test_erlang_c_matches_direct_sum_vectorised():
    c = np.array([1, 2, 4, 8, 16, 32])[:, None]
    a = np.linspace(0.05, 0.95, 7)[None, :] * c
    got = F.erlang_c(c, a)
    assert got.shape == (6, 7)
    for i in range(c.shape[0]):
        for j in range(a.shape[1]):
            ci, ai = int(c[i, 0]), float(a[i, j])
            top = ai**ci / math.factorial(ci) * ci / (ci - ai)
            ref = top / (sum(ai**k / math.factorial(k) for k in range(ci)) + top)
            assert got[i, j] == pytest.approx(ref, rel=1e-10)


def test_mmc_wait_matches_formula_and_mm1():
    lam, s, c = 7.0, 0.5, 4
    a = lam * s
    assert F.mmc_wait(lam, s, c) == pytest.approx(F.erlang_c(c, a) / (c / s - lam))
    assert F.mmc_wait(0.6, 1.0, 1) == pytest.approx(F.mm1_wait(0.6, 1.0))
    assert F.mmc_sojourn(lam, s, c) == pytest.approx(F.mmc_wait(lam, s, c) + s)


def test_kingman_and_allen_cunneen_reduce_to_markovian():
    lam = np.array([0.1, 0.5, 0.9])
    assert np.allclose(F.kingman_wait(lam, 1.0, 1.0, 1.0), F.mm1_wait(lam, 1.0))
    assert np.allclose(F.kingman_wait(lam, 1.0, 1.0, 0.0), F.md1_wait(lam, 1.0))
    assert np.allclose(F.allen_cunneen_wait(3 * lam, 1.0, 3, 1.0, 1.0), F.mmc_wait(3 * lam, 1.0, 3))
    # c = 1: Allen-Cunneen equals Kingman
    assert np.allclose(
        F.allen_cunneen_wait(lam, 2.0 / 3, 1, 0.3, 2.0), F.kingman_wait(lam, 2.0 / 3, 0.3, 2.0)
    )


def test_mm1_and_mmc_quantiles():
    lam, mu = 0.6, 1.0
    rho = lam / mu
    # P(W > t) = rho exp(-(mu - lam) t)
    for q in (0.5, 0.9, 0.99):
        t = F.mm1_wait_quantile(q, lam, 1 / mu)
        assert rho * np.exp(-(mu - lam) * t) == pytest.approx(1 - q)
    assert F.mm1_wait_quantile(0.3, lam, 1 / mu) == 0.0  # inside the atom 1 - rho = 0.4
    lam, s, c = 3.0, 1.0, 4
    pw = F.erlang_c(c, lam * s)
    t = F.mmc_wait_quantile(0.95, lam, s, c)
    assert pw * np.exp(-(c / s - lam) * t) == pytest.approx(0.05)
    # the G/G/c approximation is exact for SCVs 1
    assert F.ggc_wait_quantile(0.95, lam, s, c, 1.0, 1.0) == pytest.approx(t)


def test_exponential_tail_quantile_recovers_mean():
    # integral of the quantile function over q equals the mean
    q = (np.arange(200_000) + 0.5) / 200_000
    qs = F.exponential_tail_wait_quantile(q, 2.0, 0.7)
    assert qs.mean() == pytest.approx(2.0, rel=1e-3)


def test_md1_cdf_known_values():
    rho = 0.5
    # on [0, D): P(W <= t) = (1 - rho) exp(rho t / D)
    t = np.array([0.0, 0.25, 0.9])
    assert np.allclose(F.md1_wait_cdf(t, rho, 1.0), (1 - rho) * np.exp(rho * t))
    # on [D, 2D): (1 - rho)[e^{rho x} - rho (x - 1) e^{rho (x - 1)}]
    x = 1.5
    ref = (1 - rho) * (np.exp(rho * x) - rho * (x - 1) * np.exp(rho * (x - 1)))
    assert F.md1_wait_cdf(x, rho, 1.0) == pytest.approx(ref)
    # mean = integral of the tail equals P-K
    grid = np.linspace(0, 80, 160_001)
    tail = 1 - F.md1_wait_cdf(grid, 0.8, 1.0)
    assert np.trapezoid(tail, grid) == pytest.approx(F.md1_wait(0.8, 1.0), rel=1e-5)


@pytest.mark.parametrize("rho", [0.3, 0.7, 0.95, 0.99])
def test_md1_series_and_tail_agree_at_switch(rho):
    x = F.MD1_SERIES_SPAN
    below = F.md1_wait_cdf(x * (1 - 1e-12), rho, 1.0)
    above = F.md1_wait_cdf(x * (1 + 1e-12), rho, 1.0)
    assert abs(below - above) < 1e-9


def test_md1_quantile_inverts_cdf():
    rho = np.array([0.2, 0.6, 0.9, 0.97])[:, None]
    q = np.array([0.5, 0.9, 0.99, 0.9999])[None, :]
    t = F.md1_wait_quantile(q, rho / 2.0, 2.0)
    cdf = F.md1_wait_cdf(t, rho / 2.0, 2.0)
    inside = q > 1 - rho
    assert np.allclose(cdf[inside], np.broadcast_to(q, t.shape)[inside], atol=1e-9)
    assert np.all(t[~inside] == 0.0)


def test_bestserve_bracket():
    t_min = F.bestserve_t_min(0.3, 1.7)
    assert t_min == pytest.approx(2.0)
    lo, hi = F.goodput_bracket(t_min)
    assert lo == pytest.approx(0.1)
    assert hi == pytest.approx(1.2 / 2.0)
    lo, hi = F.goodput_bracket(np.array([1.0, 4.0]))
    assert np.allclose(hi, [1.2, 0.3]) and np.allclose(lo, [0.1, 0.1])


# ------------------------------------------------------------------------------------------
# overload and validation
# ------------------------------------------------------------------------------------------


def test_overload_returns_inf():
    lam = np.array([0.5, 1.0, 2.0])
    assert np.array_equal(np.isinf(F.mm1_wait(lam, 1.0)), [False, True, True])
    assert np.isinf(F.mm1_sojourn(1.0, 1.0))
    assert np.isinf(F.md1_wait(1.5, 1.0))
    assert np.isinf(F.mg1_wait(1.0, 1.0, scv=0.5))
    assert np.isinf(F.mmc_wait(4.0, 1.0, 4))
    assert np.isinf(F.kingman_wait(2.0, 1.0, 1.0, 1.0))
    assert np.isinf(F.allen_cunneen_wait(5.0, 1.0, 4, 1.0, 1.0))
    assert F.erlang_c(2, 3.0) == 1.0
    assert np.isinf(F.mm1_wait_quantile(0.9, 1.0, 1.0))
    assert np.isinf(F.md1_wait_quantile(0.5, 1.0, 1.0))
    assert np.isinf(F.ggc_wait_quantile(0.5, 3.0, 1.0, 2, 0.5, 0.5))
    assert F.md1_wait_cdf(5.0, 1.2, 1.0) == 0.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: F.mm1_wait(-1.0, 1.0), "arrival_rate must be finite and >= 0, got -1.0"),
        (lambda: F.mm1_wait(1.0, 0.0), "mean_service must be finite and > 0, got 0.0"),
        (lambda: F.erlang_c(2.5, 1.0), "servers must be an integer >= 1, got 2.5"),
        (lambda: F.mg1_wait(1.0, 1.0), "exactly one of scv and second_moment"),
        (lambda: F.mg1_wait(0.5, 1.0, second_moment=0.5), "second_moment must be >= mean_service"),
        (lambda: F.kingman_wait(0.5, 1.0, -0.1, 1.0), "ca2 must be finite and >= 0, got -0.1"),
        (lambda: F.mm1_wait_quantile(1.5, 0.5, 1.0), "q must be in \\[0, 1\\], got 1.5"),
        (lambda: F.goodput_bracket(0.0), "t_min must be finite and > 0, got 0.0"),
    ],
)
def test_errors_name_the_bad_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------------------
# Monte Carlo (fixed seed, Lindley recursion)
# ------------------------------------------------------------------------------------------


def test_md1_monte_carlo_mean_and_percentile():
    rng = np.random.default_rng(20240601)
    n, lam, d = 200_000, 0.7, 1.0
    w = lindley_waits(rng.exponential(1 / lam, n), np.full(n, d))[10_000:]
    assert w.mean() == pytest.approx(F.md1_wait(lam, d), rel=0.05)
    assert np.quantile(w, 0.9) == pytest.approx(F.md1_wait_quantile(0.9, lam, d), rel=0.05)
    assert np.mean(w <= 2.0) == pytest.approx(F.md1_wait_cdf(2.0, lam, d), abs=0.01)
    assert np.mean(w == 0.0) == pytest.approx(1 - lam * d, abs=0.01)


def test_mg1_monte_carlo_mean_gamma_service():
    rng = np.random.default_rng(7)
    n, lam, mean_s, cs2 = 200_000, 0.6, 1.0, 0.5
    shape = 1 / cs2
    s = rng.gamma(shape, mean_s / shape, n)
    w = lindley_waits(rng.exponential(1 / lam, n), s)[10_000:]
    assert w.mean() == pytest.approx(F.mg1_wait(lam, mean_s, scv=cs2), rel=0.05)


def test_mm1_monte_carlo_percentile():
    rng = np.random.default_rng(11)
    n, lam = 200_000, 0.5
    w = lindley_waits(rng.exponential(1 / lam, n), rng.exponential(1.0, n))[10_000:]
    assert np.quantile(w, 0.9) == pytest.approx(F.mm1_wait_quantile(0.9, lam, 1.0), rel=0.05)


# ------------------------------------------------------------------------------------------
# decode fixed point
# ------------------------------------------------------------------------------------------


def test_fixed_point_affine_closed_form():
    a, b, mean_len = 0.012, 0.0004, 200.0
    lam = np.array([0.5, 1.0, 5.0, 10.0])
    res = fp.decode_fixed_point(lam, mean_len, lambda bb: a + b * bb, max_batch=512)
    x = lam * mean_len
    expected = x * a / (1 - x * b)
    assert np.all(res.feasible)
    assert np.all(expected >= 1.0)  # the min_batch clamp is inactive here
    assert np.allclose(res.batch, expected, rtol=1e-12)
    assert np.allclose(res.tpot, a + b * expected, rtol=1e-12)
    # Little's law holds at the solution
    assert np.allclose(res.batch, x * res.tpot, rtol=1e-12)
    assert np.allclose(res.utilisation, x / (512 / (a + b * 512)))


def test_fixed_point_light_load_uses_batch_one_steps():
    a, b = 0.01, 0.001
    res = fp.decode_fixed_point(0.2, 4.0, lambda bb: a + b * bb, max_batch=64)
    # B = lambda L t(1) < 1
    assert res.batch == pytest.approx(0.2 * 4.0 * (a + b))
    assert res.tpot == pytest.approx(a + b)
    raw = fp.decode_fixed_point(0.2, 4.0, lambda bb: a + b * bb, max_batch=64, min_batch=0.0)
    assert raw.batch == pytest.approx(0.8 * a / (1 - 0.8 * b))


def test_fixed_point_infeasible_is_explicit():
    a, b, mean_len = 0.01, 0.001, 100.0
    lam = np.array([5.0, 10.0, 20.0])  # lambda L b = 0.5, 1.0, 2.0
    res = fp.decode_fixed_point(lam, mean_len, lambda bb: a + b * bb, max_batch=1e5)
    assert res.feasible.tolist() == [True, False, False]
    assert np.isinf(res.batch[1:]).all() and np.isinf(res.tpot[1:]).all()
    assert res.batch[0] == pytest.approx(500 * a / (1 - 0.5))
    assert np.all(res.utilisation[1:] >= 1.0)
    # feasible in principle but the root exceeds B_max
    capped = fp.decode_fixed_point(5.0, mean_len, lambda bb: a + b * bb, max_batch=8.0)
    assert not capped.feasible and np.isinf(capped.batch)


def test_fixed_point_smallest_root_nonmonotone_and_distribution_mean():
    class Lengths:
        mean = 100.0

    # t(B) has a bump: h(B) = B / t(B) crosses the demand three times; take the first
    def t_step(bb):
        return 0.01 + 0.03 * np.exp(-((bb - 20.0) ** 2) / 4.0) + 0.0001 * bb

    res = fp.decode_fixed_point(1.0, Lengths(), t_step, max_batch=256)
    b = float(res.batch)
    assert res.feasible
    assert b == pytest.approx(100.0 * float(t_step(np.array([b]))[0]), rel=1e-10)
    grid = np.linspace(1.0, b * (1 - 1e-9), 10_000)
    assert np.all(grid / t_step(grid) < 100.0)  # no earlier crossing


def test_fixed_point_zero_rate_and_validation():
    res = fp.decode_fixed_point(np.array([0.0]), 50.0, lambda bb: 0.02 + 0 * bb, max_batch=16)
    assert res.batch[0] == 0.0 and res.tpot[0] == pytest.approx(0.02) and res.feasible[0]
    with pytest.raises(ValueError, match="arrival_rate must be finite and >= 0, got -1.0"):
        fp.decode_fixed_point(-1.0, 50.0, lambda bb: 0.02 + 0 * bb, max_batch=16)
    with pytest.raises(ValueError, match="t_step must be finite and > 0"):
        fp.decode_fixed_point(1.0, 50.0, lambda bb: 0.0 * bb, max_batch=16)
    with pytest.raises(ValueError, match="mean output length must be finite and > 0, got 0.0"):
        fp.decode_fixed_point(1.0, 0.0, lambda bb: 0.02 + 0 * bb, max_batch=16)
