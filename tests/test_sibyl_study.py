"""SIBYL as the router study uses it, on hand computations: the one Ŝ convention (a
Kaplan-Meier step function), the warm start, the tie-breaks, Type 3 per Eq. 8 and per
Algorithm 1, and SIBYL among colocated instances."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.kernels import sibyl as KS
from serveplan.kernels import survival as K
from serveplan.queueing.survival import OnlineSurvival, bucket_prior, kaplan_meier
from serveplan.sim import pd_router as R

# A small sample, Δ = 4, boundaries 4, 8, 12. Hand-computed Kaplan-Meier (no censoring, so
# the empirical survival #{L > x} / 5): S(4) = #{5, 5, 9, 12} / 5 = 0.8,
# S(8) = #{9, 12} / 5 = 0.4, S(12) = #{} / 5 = 0.
SAMPLE = [3, 5, 5, 9, 12]
KM_AT_BOUNDARIES = [0.8, 0.4, 0.0]


def test_kaplan_meier_step_convention_by_hand():
    assert np.allclose(bucket_prior(SAMPLE, 4.0, 3), KM_AT_BOUNDARIES)
    surv = np.array(KM_AT_BOUNDARIES)
    # right-continuous steps: 1 below 4; 0.8 on [4, 8); 0.4 on [8, 12); 0 from 12 on
    x = np.array([0.0, 3.99, 4.0, 7.99, 8.0, 11.5, 12.0, 40.0])
    want = [1.0, 1.0, 0.8, 0.8, 0.4, 0.4, 0.0, 0.0]
    out = np.empty(x.size)
    K.survival_at(surv, 4.0, x, out)
    assert out.tolist() == want
    est = OnlineSurvival.create(12, 4.0, 0.5, initial=surv)
    assert est.survival(x).tolist() == want
    # the same step function as the Kaplan-Meier estimate at the boundary below x
    km = kaplan_meier(SAMPLE)
    assert np.allclose(km(np.floor(x / 4.0) * 4.0), want)
    # conditional survival S(b)/S(a): S(8)/S(4) = 0.5; inside one bucket 1; past 0 -> 1
    p = est.conditional([4.0, 4.0, 5.0, 12.0], [8.0, 7.0, 12.0, 20.0])
    assert p.tolist() == pytest.approx([0.5, 1.0, 0.0, 1.0], abs=1e-299)  # 0: a tiny value


def test_sibyl_kernel_reads_the_same_step_function():
    """One active request, l_in 0, from 5 to 9 generated tokens (rate 2, horizon 2):
    (0 + 9) * S(9) / S(5) = 9 * 0.4 / 0.8 = 4.5; a Type 2 request starting 1 s before tau
    at v_sys 4 (4 tokens): (10 + 4) * S(4) = 14 * 0.8 = 11.2."""
    surv = np.array(KM_AT_BOUNDARIES)
    tab, inv = KS.survival_tables(surv)
    out = np.empty(2)
    KS.projected_loads(0.0, 2.0, 4.0, tab, inv, 4.0, np.array([1, 0]),
                       np.zeros((2, 1)), np.array([[5.0], [0.0]]), np.array([[2.0], [0.0]]),
                       np.array([0, 1]), np.array([[0.0], [10.0]]),
                       np.array([[0.0], [1.0]]), 0, out)
    assert out.tolist() == pytest.approx([4.5, 11.2])


def test_ema_update_by_hand():
    """alpha 0.5, a completion of 8 tokens: it survives 4 (8 > 4) but not 8 or 12:
    [0.5 * 0.8 + 0.5, 0.5 * 0.4, 0] = [0.9, 0.2, 0]."""
    s = np.array(KM_AT_BOUNDARIES)
    K.ema_survival_update(s, 4.0, 0.5, 8.0)
    assert s.tolist() == pytest.approx([0.9, 0.2, 0.0])


def test_warm_start_from_a_prior_sample():
    rt = R.make_router_state("sibyl", 8, 2, active_capacity=4, pending_capacity=4,
                             max_length=12, delta=4.0, prior=SAMPLE)
    assert rt.surv.tolist() == KM_AT_BOUNDARIES
    assert rt.tab.tolist()[:3] == [1.0, 0.8, 0.4]
    cold = R.make_router_state("sibyl", 8, 2, active_capacity=4, pending_capacity=4,
                               max_length=12, delta=4.0)
    assert cold.surv.tolist() == [1.0, 1.0, 1.0]


def test_warm_start_reaches_the_run():
    from serveplan.sim.costs import AffineStepCost
    from serveplan.sim.engine import EngineParams
    from serveplan.sim.loop_api import _router_state
    from serveplan.sim.pools import Handoff, PoolSpec, Role

    params = EngineParams(num_gpu_blocks=64, max_num_seqs=4, max_model_len=64)
    cost = AffineStepCost(0.01)
    pools = (PoolSpec(params, cost, 1, Role.PREFILL), PoolSpec(params, cost, 2, Role.DECODE))
    h = Handoff(router="sibyl", sibyl_prior=SAMPLE, sibyl_delta=4.0, sibyl_max_length=12,
                tie_break="lowest")
    rt = _router_state(pools, h, 3, np.array([10, 10, 10]), np.zeros(3, dtype=bool))
    assert rt.surv.tolist() == KM_AT_BOUNDARIES
    assert rt.ip[R.R_TIE] == KS.TIE_BREAKS["lowest"]


def test_config_prior_is_drawn_from_the_length_law_with_another_seed():
    from serveplan.config import SimulationConfig
    from serveplan.resolution import resolve
    from serveplan.simulation import build_requests, sibyl_prior

    cfg = SimulationConfig.model_validate({
        "deployment": {"pools": [
            {"role": "prefill", "model": "llama-3.1-8b", "gpu": "h100", "count": 1},
            {"role": "decode", "model": "llama-3.1-8b", "gpu": "h100", "count": 2}],
            "decode_router": "sibyl", "sibyl": {"prior_samples": 2000}},
        "workload": {"kind": "poisson", "rate": 5, "num_requests": 2000,
                     "isl": 100, "osl": {"dist": "uniform", "low": 1, "high": 1000}}})
    resolved = resolve(cfg.deployment)
    prior = sibyl_prior(cfg.workload, resolved, cfg.seed)
    run = build_requests(cfg.workload, cfg.seed).output_len
    assert prior.shape == (2000,) and prior.min() >= 1 and prior.max() <= 1000
    assert not np.array_equal(np.sort(prior), np.sort(run))  # another draw
    # the same law: uniform on 1..1000 has mean 500.5, sd 288.7 -> the mean of 2,000 draws
    # is within 4 standard errors (4 * 288.7 / sqrt(2000) = 25.8)
    assert abs(prior.mean() - 500.5) < 25.8
    no_prior = resolve(cfg.deployment.model_copy(update={"sibyl": cfg.deployment.sibyl
                                                         .model_copy(update={"prior_samples": 0})}))
    assert sibyl_prior(cfg.workload, no_prior, cfg.seed) is None


@pytest.mark.parametrize(("mode", "draw", "want"), [
    ("lowest", 0, 1), ("lowest", 4, 1),
    ("rotation", 0, 1), ("rotation", 2, 3), ("rotation", 4, 4), ("rotation", 5, 1),
    ("random", 7, 3), ("random", 9, 1), ("random", 5, 4),
])
def test_tie_breaks_by_hand(mode, draw, want):
    """Loads [2, 1, 5, 1, 1]: ties at 1, 3, 4. Lowest: 1. Rotation from ``draw``: the first
    tie at or after it, cyclically (5 wraps to 0 -> 1). Random: tie number draw mod 3
    (7 -> 1 -> instance 3; 9 -> 0 -> 1; 5 -> 2 -> 4)."""
    loads = np.array([2.0, 1.0, 5.0, 1.0, 1.0])
    eligible = np.ones(5, dtype=np.bool_)
    code = KS.TIE_BREAKS[mode]
    assert KS.pick_least(loads, eligible, code, draw) == want
    assert KS.REFERENCE["pick_least"](loads, eligible, code, draw) == want
    eligible[1] = False  # an ineligible tie is skipped: lowest -> 3
    assert KS.pick_least(loads, eligible, KS.TIE_LOWEST, 0) == 3


def test_without_type1_is_round_robin_only_under_rotation():
    """With nothing pending and Type 1 dropped every projected load is 0: rotation deals
    the instances in turn (round-robin), lowest index sends everything to instance 0, random
    spreads them without a cycle."""
    def decisions(tie):
        rt = R.make_router_state("sibyl-no-type1", 64, 3, active_capacity=4,
                                 pending_capacity=64, max_length=1024, tie_break=tie, seed=1)
        R.on_join(rt, 60, 0, 100, 1, 0.0)  # an active request: invisible without Type 1
        return [R.route_decode(rt, 0.0, 0.0) for _ in range(6)]

    assert decisions("rotation") == [0, 1, 2, 0, 1, 2]
    assert decisions("lowest") == [0, 0, 0, 0, 0, 0]
    rand = decisions("random")
    assert set(rand) <= {0, 1, 2} and rand != [0, 1, 2, 0, 1, 2]


def test_tie_break_applies_to_least_loaded():
    rt = R.make_router_state("least-loaded", 8, 3, active_capacity=1, pending_capacity=1,
                             max_length=64, tie_break="lowest")
    assert [R.route_decode(rt, 0.0, 0.0) for _ in range(3)] == [0, 0, 0]
    with pytest.raises(ValueError, match="tie_break given an invalid value: 'first'"):
        R.make_router_state("sibyl", 8, 3, active_capacity=1, pending_capacity=1,
                            max_length=64, tie_break="first")


def test_type3_eq8_and_algorithm1_differ_by_hand():
    """v_sys 40 tok/s, tau = now + 2 s, Ŝ = 1 everywhere.

    Instance 0: one pending request, prompt 100, starting 1 s after tau (Type 3).
      Eq. 8:        ReLU(100 - 40 * 1) = 60
      Algorithm 1:  max(0, 100 - Δgap), Δgap = (tau - tau_k) * 40 = -40  ->  140
    Instance 1: one active request, prompt 50, 30 generated, 10 tok/s (Type 1):
      (50 + 30 + 10 * 2) * 1 = 100 under both.
    Eq. 8 picks instance 0 (60 < 100), Algorithm 1 instance 1 (100 < 140).
    """
    picks = {}
    for name in ("sibyl", "sibyl-alg1"):
        rt = R.make_router_state(name, 8, 2, active_capacity=4, pending_capacity=4,
                                 max_length=1024, v_sys_init=40.0)
        R.on_assign(rt, 0, 0, 100, 3.0)
        R.on_join(rt, 1, 1, 50, 30, 0.0)
        rt.act_rate[1, rt.slot_of[1]] = 10.0
        picks[name] = R.route_decode(rt, 0.0, 2.0)
        expect = [60.0, 100.0] if name == "sibyl" else [140.0, 100.0]
        assert rt.loads.tolist() == pytest.approx(expect)
    assert picks == {"sibyl": 0, "sibyl-alg1": 1}


def _colocated(flags_name="sibyl"):
    """Two colocated instances by hand (module constants in the test below)."""
    from serveplan.sim.state import (
        G_ENTRY_HI,
        G_ENTRY_LO,
        I_NRUN,
        N_GLOB,
        make_inst,
        make_reqs,
        wq_push_back,
    )

    # requests: A decoding on 0, C decoding on 1 (first token only), B waiting on 1, new N
    prompt = [300, 100, 200, 1000]
    reqs = make_reqs(np.zeros(4), prompt, np.full(4, 10_000))
    reqs.computed[:] = [300 + 180, 100, 0, 0]
    reqs.n_out[:] = [181, 1, 0, 0]
    reqs.t_first[:] = [4.0, 9.5, np.nan, np.nan]
    inst = make_inst(2, 8, 4, 8)
    for i, r in ((0, 0), (1, 1)):
        inst.run[i, inst.ist[i, I_NRUN]] = r
        inst.ist[i, I_NRUN] += 1
    wq_push_back(inst, 1, 2)
    glob = np.zeros(N_GLOB, dtype=np.int64)
    glob[G_ENTRY_LO], glob[G_ENTRY_HI] = 0, 2
    rt = R.make_router_state(flags_name, 4, 2, active_capacity=1, pending_capacity=1,
                             max_length=400, delta=100.0, v_sys_init=20.0,
                             surv_init=np.array([0.8, 0.5, 0.25, 0.1]))
    rt.ip[R.R_SIBYL] = 0
    rt.ip[R.R_ENTRY_SIBYL] = 1
    rt.fp[R.F_PREFILL_PER_TOKEN] = 0.001
    return inst, reqs, glob, rt


def test_colocated_sibyl_by_hand():
    """now = 10 s; the new request's prompt is 1000 tokens at 1 ms each: h = 1 s.
    Ŝ = 1, 0.8, 0.5, 0.25, 0.1 on [0,100), [100,200), [200,300), [300,400), [400,...).

    v_sys: the one request with two or more tokens is A: 180 tokens after its first in
    10 - 4 = 6 s, 30 tok/s.
    Instance 0, A (Type 1): 181 -> 181 + 30 * 1 = 211 tokens;
      (300 + 211) * Ŝ(211) / Ŝ(181) = 511 * 0.5 / 0.8 = 319.375.
    Instance 1, C (Type 1, one token, rate v_sys): 1 -> 31: (100 + 31) * 1 = 131;
      B (waiting, Type 2 from now): 0 -> 30: (200 + 30) * Ŝ(30) = 230; total 361.
    SIBYL picks 0. Without survival (PROB@1) instance 0 weighs 511 > 361: it picks 1.
    """
    from serveplan.sim import colocated_sibyl as CS
    from serveplan.sim import router as ER

    inst, reqs, glob, rt = _colocated()
    assert ER.route_with_state(ER.ROUTER_SIBYL, 3, reqs, rt, 10.0, inst, glob) == 0
    assert rt.loads.tolist() == pytest.approx([319.375, 361.0])
    ref = CS.colocated_loads_ref(10.0, 1.0, 20.0, rt.surv, 100.0, [
        ([(300, 181, 4.0, True)], []),
        ([(100, 1, 9.5, True)], [(200, 0, np.nan, False)])])
    assert ref.tolist() == pytest.approx([319.375, 361.0])
    inst, reqs, glob, rt = _colocated("sibyl-p1")
    assert ER.route_with_state(ER.ROUTER_SIBYL, 3, reqs, rt, 10.0, inst, glob) == 1
    assert rt.loads.tolist() == pytest.approx([511.0, 361.0])
    # a colocated completion updates the estimator (Eq. 4, alpha 0.99): 150 survives 100
    CS.on_colocated_finish(rt, 150)
    assert rt.surv.tolist() == pytest.approx([0.99 * 0.8 + 0.01, 0.99 * 0.5, 0.99 * 0.25,
                                              0.99 * 0.1])


def test_colocated_sibyl_runs_end_to_end():
    from serveplan.sim.colocated_sibyl import SibylOptions
    from serveplan.sim.costs import AffineStepCost
    from serveplan.sim.engine import EngineParams
    from serveplan.sim.loop_api import run_pools
    from serveplan.sim.pools import PoolSpec
    from serveplan.sim.workload import Requests

    rng = np.random.default_rng(0)
    n = 60
    req = Requests(np.sort(rng.uniform(0, 3, n)), rng.integers(20, 200, n),
                   rng.integers(2, 120, n))
    pool = PoolSpec(EngineParams(num_gpu_blocks=400, max_num_seqs=8, max_model_len=512),
                    AffineStepCost(0.005, 1e-5), 3)
    opts = SibylOptions(delta=16.0, prior=rng.integers(2, 120, 500), tie_break="lowest")
    res = run_pools(req, [pool], router="sibyl", entry_sibyl=opts)
    assert np.all(np.isfinite(res.hs.t_finish))
    assert set(np.unique(res.views[0].inst)) == {0, 1, 2}
    # Ŝ moved from its prior by n completions of weight 1 - alpha each
    assert not np.allclose(res.rt.surv, bucket_prior(opts.prior, 16.0, 32))
    with pytest.raises(ValueError, match="router 'sibyl' picks among colocated"):
        from serveplan.sim.pools import Handoff, Role
        run_pools(req, [PoolSpec(pool.params, pool.cost, 1, Role.PREFILL),
                        PoolSpec(pool.params, pool.cost, 1, Role.DECODE)],
                  router="sibyl", handoff=Handoff())
