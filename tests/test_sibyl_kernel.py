"""SIBYL projected-load kernel against its plain reference; slot bookkeeping."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan.kernels.sibyl import (
    NO_TYPE1,
    NO_TYPE2,
    NO_TYPE3,
    PROB_ONE,
    VARIANTS,
    argmin_load,
    projected_loads,
    projected_loads_ref,
    slot_add,
    slot_remove,
    survival_tables,
)


def _state(rng, n_inst, cap, n_act, n_pend, now):
    act_count = rng.integers(0, n_act + 1, n_inst)
    pend_count = rng.integers(0, n_pend + 1, n_inst)
    act_lin = rng.integers(1, 2000, (n_inst, cap)).astype(float)
    act_len = rng.integers(0, 9000, (n_inst, cap)).astype(float)
    act_rate = rng.uniform(5, 80, (n_inst, cap))
    pend_lin = rng.integers(1, 2000, (n_inst, cap)).astype(float)
    pend_start = now + rng.uniform(-0.1, 2.0, (n_inst, cap))
    act = [[(act_lin[j, s], act_len[j, s], act_rate[j, s]) for s in range(act_count[j])]
           for j in range(n_inst)]
    pend = [[(pend_lin[j, s], pend_start[j, s]) for s in range(pend_count[j])]
            for j in range(n_inst)]
    return (act_count, act_lin, act_len, act_rate, pend_count, pend_lin, pend_start), act, pend


@pytest.mark.parametrize("flags", sorted(set(VARIANTS.values()) |
                                         {NO_TYPE1 | NO_TYPE2, PROB_ONE | NO_TYPE3}))
def test_kernel_matches_reference(flags):
    rng = np.random.default_rng(flags + 1)
    surv = np.sort(rng.uniform(0, 1, 40))[::-1]
    surv[-5:] = 0.0  # survival reaching zero exercises the probability-1 convention
    tab, inv = survival_tables(surv)
    now, tau, v_sys, delta = 100.0, 100.7, 35.0, 128.0
    arrays, act, pend = _state(rng, 17, 12, 10, 4, now)
    out = np.empty(17)
    projected_loads(now, tau, v_sys, tab, inv, delta, *arrays, flags, out)
    want = projected_loads_ref(now, tau, v_sys, surv, delta, act, pend, flags)
    np.testing.assert_allclose(out, want, rtol=1e-9)


def test_hand_example():
    # one instance, one active request: l_in 100, 300 generated, 50 tok/s, horizon 2 s
    # -> l(tau) = 400; buckets of 128: S(400) = surv[2] (boundary 384), S(300) = surv[1]
    surv = np.array([0.9, 0.6, 0.3, 0.1])
    tab, inv = survival_tables(surv)
    one = np.array([1])
    out = np.empty(1)
    projected_loads(0.0, 2.0, 40.0, tab, inv, 128.0, one, np.array([[100.0]]),
                    np.array([[300.0]]), np.array([[50.0]]), np.array([0]),
                    np.zeros((1, 1)), np.zeros((1, 1)), 0, out)
    assert out[0] == pytest.approx(500 * 0.3 / 0.6)
    # a pending request starting 0.5 s before tau (Type 2) and one 1 s after (Type 3)
    projected_loads(0.0, 2.0, 40.0, tab, inv, 128.0, np.array([0]), np.zeros((1, 2)),
                    np.zeros((1, 2)), np.zeros((1, 2)), np.array([2]),
                    np.array([[200.0, 90.0]]), np.array([[1.5, 3.0]]), 0, out)
    # Type 2: l = 0.5 * 40 = 20 -> bucket 0, S = 1: 220; Type 3: ReLU(90 - 40) = 50
    assert out[0] == pytest.approx(220 + 50)


@given(seed=st.integers(0, 2**31), flags=st.sampled_from(list(VARIANTS.values())))
@settings(max_examples=25, deadline=None)
def test_kernel_matches_reference_random(seed, flags):
    rng = np.random.default_rng(seed)
    surv = np.sort(rng.uniform(0, 1, 16))[::-1]
    tab, inv = survival_tables(surv)
    arrays, act, pend = _state(rng, 5, 6, 6, 6, 10.0)
    out = np.empty(5)
    projected_loads(10.0, 10.3, 20.0, tab, inv, 64.0, *arrays, flags, out)
    np.testing.assert_allclose(
        out, projected_loads_ref(10.0, 10.3, 20.0, surv, 64.0, act, pend, flags), rtol=1e-9)


def test_slots_and_argmin():
    count = np.zeros(3, dtype=np.int64)
    a = np.zeros((3, 2))
    b = np.zeros((3, 2))
    assert slot_add(count, 1, (a, b), (5.0, 6.0)) == 0
    assert slot_add(count, 1, (a, b), (7.0, 8.0)) == 1
    assert slot_add(count, 1, (a, b), (9.0, 9.0)) == -1  # full
    assert slot_remove(count, 1, 0, (a, b)) == 1  # last slot moved into 0
    assert count[1] == 1 and a[1, 0] == 7.0 and b[1, 0] == 8.0
    loads = np.array([3.0, 1.0, 1.0])
    assert argmin_load(loads, np.array([True, True, True])) == 1
    assert argmin_load(loads, np.array([True, False, True])) == 2
    assert argmin_load(loads, np.array([False, False, False])) == -1
