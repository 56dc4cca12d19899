"""Decode routers on hand-built states, SIBYL against the kernel's reference, and the
online survival estimator against known distributions (SIBYL §5.2's calibration error)."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.kernels.sibyl import REFERENCE, VARIANTS
from serveplan.queueing.survival import OnlineSurvival, calibration_error
from serveplan.sim import pd_router as R
from serveplan.sim.workload import LogNormal, Uniform


def _state(name, n_dec=3, **kw):
    kw.setdefault("active_capacity", 16)
    kw.setdefault("pending_capacity", 16)
    kw.setdefault("max_length", 1024)
    return R.make_router_state(name, 4096, n_dec, **kw)


def test_round_robin_cycles():
    rt = _state("rr")
    assert [R.route_decode(rt, 0.0, 0.0) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_sees_only_decoding_requests():
    """ILS uses the token occupancy of requests decoding now: a request bound to an
    instance but still in prefill is invisible (SIBYL's 'invisible load')."""
    rt = _state("least-loaded")
    R.on_join(rt, 0, 0, 500, 1, 0.0)      # instance 0: 501 tokens
    R.on_join(rt, 1, 1, 100, 1, 0.0)      # instance 1: 101 tokens
    R.on_join(rt, 2, 2, 200, 1, 0.0)      # instance 2: 201 tokens
    R.on_assign(rt, 3, 1, 5000, 1.0)      # pending on 1: invisible
    assert R.route_decode(rt, 0.0, 1.0) == 1
    for _ in range(150):
        R.on_token(rt, 1, 1, 2, 1, 0.1)   # instance 1 grows to 251 tokens
    assert rt.occ.tolist() == [501, 251, 201]
    assert R.route_decode(rt, 0.0, 1.0) == 2
    R.on_finish(rt, 0, 0, 500, 1)
    assert R.route_decode(rt, 0.0, 1.0) == 0


def test_least_requests_counts_decoding_requests():
    rt = _state("ils-requests")
    for r, d in enumerate([0, 0, 1, 2, 2]):
        R.on_join(rt, r, d, 10, 1, 0.0)
    assert R.route_decode(rt, 0.0, 0.0) == 1
    ok_t, ok_r = R.is_least_loaded(rt, 1)
    assert ok_r and ok_t


def _random_state(name, rng, n_dec=5):
    rt = _state(name, n_dec, active_capacity=32, pending_capacity=32, max_length=2048,
                delta=64.0)
    surv = np.sort(rng.uniform(0, 1, rt.surv.shape[0]))[::-1]
    surv[-5:] = 0.0
    rt.surv[:] = surv
    rt.fp[R.F_DIRTY] = 1.0
    act = [[] for _ in range(n_dec)]
    pend = [[] for _ in range(n_dec)]
    r = 0
    for d in range(n_dec):
        for _ in range(rng.integers(0, 8)):
            l_in = int(rng.integers(10, 1500))
            R.on_join(rt, r, d, l_in, 1, 0.0)
            n_out = int(rng.integers(1, 2000))
            el = float(rng.uniform(1, 60))
            R.on_token(rt, r, d, n_out, n_out - 1, el)
            act[d].append((l_in, n_out, (n_out - 1) / el))
            r += 1
        for _ in range(rng.integers(0, 5)):
            l_in = int(rng.integers(10, 1500))
            start = float(rng.uniform(0.0, 3.0))
            R.on_assign(rt, r, d, l_in, start)
            pend[d].append((l_in, start))
            r += 1
    return rt, act, pend


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_sibyl_loads_match_the_kernel_reference(variant):
    rng = np.random.default_rng(sorted(VARIANTS).index(variant))
    rt, act, pend = _random_state(variant, rng)
    now, tau = 60.0, 61.5
    j = R.sibyl_decide(rt, now, tau)
    ref = REFERENCE["projected_loads"](now, tau, R.v_sys(rt), rt.surv, 64.0, act, pend,
                                       VARIANTS[variant])
    np.testing.assert_allclose(rt.loads, ref, rtol=1e-9)
    assert j == int(np.argmin(ref))


def test_sibyl_counts_survival_and_shadow_load():
    """Instance 0 runs a request that will almost surely be finished by tau (all outputs
    end at 100 tokens); instance 1 runs a short request that will still run, and has a
    pending request starting before tau. ILS picks instance 1 (fewer tokens now); SIBYL
    picks 0 (projected empty)."""
    kw = dict(max_length=256, delta=16.0)
    sib, ils = _state("sibyl", 2, **kw), _state("least-loaded", 2, **kw)
    for rt in (sib, ils):
        for _ in range(2000):
            R.on_join(rt, 99, 0, 1, 99, 0.0)
            R.on_finish(rt, 99, 0, 1, 99)  # every completion has 100 tokens
        R.on_join(rt, 0, 0, 900, 1, 0.0)
        R.on_token(rt, 0, 0, 90, 89, 1.0)      # 90 tokens at 89 tok/s: ends within tau
        R.on_join(rt, 1, 1, 300, 1, 0.0)
        R.on_token(rt, 1, 1, 5, 4, 1.0)        # young: likely still running at tau
        R.on_assign(rt, 2, 1, 400, 1.2)        # shadow: starts before tau
    assert R.route_decode(ils, 1.0, 2.0) == 1
    assert R.route_decode(sib, 1.0, 2.0) == 0
    assert sib.loads[0] == pytest.approx(0.0, abs=1e-3)
    assert sib.loads[1] > 700


def test_sibyl_skips_instances_with_full_pending_slots():
    rt = _state("sibyl", 2, pending_capacity=2)
    R.on_assign(rt, 0, 0, 1, 5.0)
    R.on_assign(rt, 1, 0, 1, 5.0)
    R.on_join(rt, 2, 1, 5000, 1, 0.0)
    assert R.route_decode(rt, 0.0, 0.1) == 1


def test_slot_back_pointers_survive_swap_removal():
    rt = _state("sibyl", 1)
    for r in range(6):
        R.on_join(rt, r, 0, 100 + r, 1, 0.0)
    R.on_finish(rt, 1, 0, 101, 1)
    R.on_finish(rt, 4, 0, 104, 1)
    live = [0, 2, 3, 5]
    assert rt.act_count[0] == 4
    for r in live:
        assert rt.act_req[0, rt.slot_of[r]] == r
        assert rt.act_lin[0, rt.slot_of[r]] == 100 + r
    assert rt.occ[0] == sum(101 + r for r in live)


def test_unknown_router_is_named():
    with pytest.raises(ValueError, match="router given an invalid value: 'fastest'"):
        _state("fastest")


@pytest.mark.parametrize("dist", [LogNormal.from_mean(5657, 0.9, 8192), Uniform(1, 8192)])
def test_online_survival_converges(dist):
    """EMA buckets (SIBYL Eq. 4) track P(L > l): calibration error as SIBYL §5.2 (mean
    absolute error of conditional survival over a dense (current, target) grid)."""
    est = OnlineSurvival.create(8192, 128, 0.998)
    est.update(dist.sample(20000, seed=1))
    grid = np.arange(0, 7680, 64.0)  # S >= 6% everywhere (the uniform's tail is thin)
    err = calibration_error(est, dist.sf, grid, grid)
    assert err.mae < 0.03
    boundaries = est.boundaries
    np.testing.assert_allclose(est.surv, dist.sf(boundaries), atol=0.08)


def test_router_state_survival_matches_online_estimator():
    """The router's in-loop EMA is the same estimator as OnlineSurvival."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 1000, 500)
    rt = _state("sibyl", 1, max_length=1024, delta=32.0, alpha=0.97)
    est = OnlineSurvival.create(1024, 32, 0.97)
    for k, n_out in enumerate(lengths):
        R.on_join(rt, k, 0, 10, 1, 0.0)
        R.on_finish(rt, k, 0, 10, int(n_out) - 1)
    est.update(lengths.astype(float))
    np.testing.assert_allclose(rt.surv, est.surv, rtol=1e-12)


# ----------------------------------------------------------------------------- entry routers
def _entry_state(placement, prompt, computed, n_out):
    """Instances with requests queued (``"w"``) or running (``"r"``) by hand:
    ``placement[i]`` lists ``(request, "w" | "r")`` on instance ``i``."""
    from serveplan.sim.state import (
        G_ENTRY_HI,
        G_ENTRY_LO,
        I_NRUN,
        N_GLOB,
        make_inst,
        make_reqs,
        wq_push_back,
    )

    n = len(prompt)
    reqs = make_reqs(np.zeros(n), prompt, np.full(n, 10_000))
    reqs.computed[:] = computed
    reqs.n_out[:] = n_out
    inst = make_inst(len(placement), 8, 4, 8)
    for i, entries in enumerate(placement):
        for r, where in entries:
            if where == "w":
                wq_push_back(inst, i, r)
            else:
                inst.run[i, inst.ist[i, I_NRUN]] = r
                inst.ist[i, I_NRUN] += 1
    glob = np.zeros(N_GLOB, dtype=np.int64)
    glob[G_ENTRY_LO], glob[G_ENTRY_HI] = 0, len(placement)
    return inst, reqs, glob


def test_least_estimated_tokens_uses_only_what_a_router_sees():
    """Hand-computed loads with E = 100 expected output tokens: the true output lengths
    (10,000 each, set in ``_entry_state``) play no part -- the router is not clairvoyant."""
    from serveplan.sim import router as ER

    prompt = [500, 200, 300, 50, 400]
    computed = [0, 200, 150, 50, 0]      # request 1 decoding, 2 half prefilled, 3 decoding
    n_out = [0, 30, 0, 120, 0]           # request 3 is past the expected length
    placement = [[(0, "w")],             # 500 + 100                    = 600
                 [(1, "r"), (2, "r")],   # (0 + 70) + (150 + 100)        = 320
                 [(3, "r"), (4, "w")]]   # (0 + 1) + (400 + 100)         = 501
    inst, reqs, glob = _entry_state(placement, prompt, computed, n_out)
    loads = [ER.estimated_load(inst, reqs, i, 100) for i in range(3)]
    assert loads == [600, 320, 501]
    ref = ER.estimated_loads_reference([[r for r, _ in p] for p in placement], prompt,
                                       computed, n_out, 100)
    assert loads == ref.tolist()
    code = ER.ROUTER_LEAST_ESTIMATED_TOKENS
    assert ER.route_with_requests(code, 0, reqs, 100, inst, glob) == 1
    # a longer expected output weighs request counts more: 1 request beats 2 at E = 1,000
    assert ER.route_with_requests(code, 0, reqs, 1_000, inst, glob) == 0
    # the other codes keep their meaning through the same entry point: 4 waiting + running
    # scores 4, 2, 5
    assert ER.route_with_requests(ER.ROUTER_LEAST_REQUESTS, 0, reqs, 100, inst, glob) == 1


def test_least_estimated_tokens_matches_its_reference_on_random_states():
    from serveplan.sim import router as ER

    rng = np.random.default_rng(3)
    for _ in range(20):
        n, k = 12, 4
        prompt = rng.integers(1, 2_000, n)
        computed = np.minimum(rng.integers(0, 2_500, n), prompt + 50)
        n_out = rng.integers(0, 400, n)
        owner = rng.integers(0, k, n)
        placement = [[(r, "w" if rng.random() < 0.5 else "r") for r in np.flatnonzero(
            owner == i)[:8]] for i in range(k)]
        inst, reqs, glob = _entry_state(placement, prompt, computed, n_out)
        ref = ER.estimated_loads_reference([[r for r, _ in p] for p in placement], prompt,
                                           computed, n_out, 256)
        got = ER.route_with_requests(ER.ROUTER_LEAST_ESTIMATED_TOKENS, 0, reqs, 256, inst, glob)
        assert got == int(np.argmin(ref))
