"""The analytic level against closed forms (queueing/analytic.py)."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.queueing import formulas as F
from serveplan.queueing.analytic import (
    InstanceCosts,
    colocated_estimate,
    kv_transfer_time,
    max_rate,
    pd_estimate,
    two_point,
)


def affine_costs(prefill=0.1, a=0.01, b=0.0, out=11, max_batch=64, scv=0.0):
    """An instance whose decode step is ``a + b * B`` and whose prefill takes ``prefill`` s."""
    return InstanceCosts(prefill_s=prefill, prefill_scv=scv, prefill_batched_s=prefill,
                         decode_tokens=out - 1.0, t_step=lambda B: a + b * np.asarray(B),
                         max_batch=max_batch, mean_input=100.0, gpus=1,
                         fixed_lengths=scv == 0.0)


def test_pd_prefill_is_md1_with_kv_transfer():
    c = affine_costs()
    lam = np.array([1.0, 5.0, 8.0])
    est = pd_estimate(lam, 1, 1, c, c, kv_transfer_s=0.02)
    rho = lam * 0.1
    np.testing.assert_allclose(est.ttft_mean, rho * 0.1 / (2 * (1 - rho)) + 0.1)
    np.testing.assert_allclose(est.ttft_quantile(0.9),
                               F.md1_wait_quantile(0.9, lam, 0.1) + 0.1)
    np.testing.assert_allclose(est.ttft_cdf(0.3), F.md1_wait_cdf(0.2, lam, 0.1))
    # the transfer delays the second token: spread over the 10 decode steps
    np.testing.assert_allclose(est.tpot_mean, 0.01 + 0.02 / 10)


def test_pd_decode_affine_fixed_point_closed_form():
    a, b, out = 0.01, 0.001, 101
    c = affine_costs(a=a, b=b, out=out, max_batch=256)
    lam = np.array([0.5, 2.0, 5.0])
    est = pd_estimate(lam, 4, 2, c, c)
    lam_d = lam / 2
    L = out - 1
    batch = lam_d * L * a / (1 - lam_d * L * b)
    batch = np.where(batch < 1, lam_d * L * (a + b), batch)  # a batch is at least one request
    np.testing.assert_allclose(est.decode_batch, batch, rtol=1e-9)
    np.testing.assert_allclose(est.tpot_quantile(0.9), a + b * np.maximum(batch, 1), rtol=1e-9)


def test_colocated_decode_is_stretched_by_prefill_load():
    a, b, out, s = 0.01, 0.001, 101, 0.05
    c = affine_costs(prefill=s, a=a, b=b, out=out, max_batch=256)
    lam = np.array([1.0, 3.0])
    est = colocated_estimate(lam, 1, c)
    rho = lam * s
    L = out - 1
    # B (1 - rho) = lam L (a + b B)
    batch = lam * L * a / ((1 - rho) - lam * L * b)
    np.testing.assert_allclose(est.decode_batch, batch, rtol=1e-9)
    step = a + b * np.maximum(batch, 1)
    np.testing.assert_allclose(est.tpot_mean, step / (1 - rho), rtol=1e-9)
    # TTFT: M/D/1 prefill wait + prefill + one decode step of the running batch
    np.testing.assert_allclose(est.ttft_quantile(0.5),
                               F.md1_wait_quantile(0.5, lam, s) + s + step, rtol=1e-9)
    np.testing.assert_allclose(est.utilisation, rho + lam * L / c.decode_peak[1])


def test_colocated_round_robin_thins_arrival_variability():
    c = affine_costs(prefill=0.1, out=1)
    one = colocated_estimate([4.0], 1, c, ca2=1.0)
    four = colocated_estimate([16.0], 4, c, ca2=1.0)  # same per-instance load, Erlang-4 input
    assert four.ttft_mean[0] < one.ttft_mean[0]
    np.testing.assert_allclose(four.ttft_mean - 0.1,
                               F.kingman_wait(4.0, 0.1, 0.25, 0.0))


def test_gg_c_prefill_pool_uses_allen_cunneen():
    c = affine_costs(prefill=0.2, scv=0.5)
    est = pd_estimate([12.0], 3, 1, c, c, ca2=1.0)
    want = F.allen_cunneen_wait(12.0, 0.2, 3, 1.0, 0.5)
    np.testing.assert_allclose(est.ttft_mean - 0.2, want)
    np.testing.assert_allclose(est.ttft_quantile(0.95) - 0.2,
                               F.ggc_wait_quantile(0.95, 12.0, 0.2, 3, 1.0, 0.5))


@pytest.mark.parametrize("builder", ["pd", "colocated"])
def test_utilisation_at_or_above_one_is_infeasible(builder):
    c = affine_costs(prefill=0.1)
    lam = np.array([5.0, 10.0, 20.0])
    est = (pd_estimate(lam, 1, 1, c, c) if builder == "pd" else colocated_estimate(lam, 1, c))
    assert est.feasible[0]
    assert not est.feasible[1:].any()
    assert np.all(np.isinf(est.ttft_quantile(0.9)[1:]))
    assert np.all(np.isinf(est.tpot_quantile(0.9)[1:]))
    assert np.all(est.utilisation[1:] >= 1.0)
    assert np.all(est.ttft_cdf(10.0)[1:] == 0.0)


def test_decode_overload_is_infeasible():
    c = affine_costs(prefill=0.001, a=0.01, b=0.001, out=1001, max_batch=32)
    est = pd_estimate([0.1, 100.0], 1, 1, c, c)
    assert est.feasible.tolist() == [True, False]
    assert est.decode_utilisation[1] >= 1.0


def test_kv_transfer_time():
    # 2048 tokens x 320 KiB over 4 parallel 50 GB/s links + 10 us
    t = kv_transfer_time(2048, 327680, 50e9, 4, 8, latency_s=1e-5)
    assert t == pytest.approx(2048 * 327680 / (50e9 * 4) + 1e-5)
    with pytest.raises(ValueError, match="link_bw"):
        kv_transfer_time(1, 1, 0.0, 1, 1)


def test_two_point_rule_is_exact_for_quadratics():
    mean, var = two_point(lambda x: 1 + 2 * x + 3 * x**2, 10.0, 2.0)
    assert mean == pytest.approx(1 + 20 + 3 * (100 + 4))
    m, v = two_point(lambda x: 5 * x, 10.0, 2.0)
    assert (m, v) == (pytest.approx(50.0), pytest.approx(100.0))


def test_max_rate_finds_the_threshold_of_md1_quantile():
    goal = 0.5
    rate = max_rate(lambda r: F.md1_wait_quantile(0.9, r, 0.1) + 0.1 <= goal, 10.0,
                    rtol=1e-6)
    assert F.md1_wait_quantile(0.9, rate, 0.1) + 0.1 <= goal
    assert F.md1_wait_quantile(0.9, rate * (1 + 1e-5), 0.1) + 0.1 > goal
    assert max_rate(lambda r: r < 0, 1.0) == 0.0
