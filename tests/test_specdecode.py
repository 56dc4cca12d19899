"""Speculative decoding in the loop: event times, step prices, KV blocks and acceptance
derived by hand from vLLM V1's rules (``docs/speculative.md``).

Steps are priced by :class:`AffineStepCost` (``base + per_token * tokens + per_request *
requests``), so every time below is written out; a verify step of a lone request computes
``k + 1`` tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_invariants import check_pool_intact

from serveplan.sim.costs import AffineStepCost
from serveplan.sim.kvcache import M_NFREE
from serveplan.sim.lifecycle import on_arrival
from serveplan.sim.loop_api import _build_world, run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import PoolSpec
from serveplan.sim.recorder import recorded_steps
from serveplan.sim.results import to_dataset
from serveplan.sim.specdecode import draw_accepted
from serveplan.sim.speculative import (
    SI_SEED,
    ST_ACCEPTED,
    ST_DRAFT_S,
    ST_DRAFTED,
    ST_EMITTED,
    ST_VERIFIES,
    ST_VERIFY_S,
    SpecDecode,
    spec_tables,
)
from serveplan.sim.state import A_BUSY_UNTIL, A_TOKENS, G_NEXT, I_STEPS, Policy
from serveplan.sim.step import complete_step, start_step
from serveplan.sim.summary import summarize
from serveplan.sim.workload import Requests

BASE, PER_TOKEN = 0.01, 0.001


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def lone(prompt, output):
    return Requests(arrival_s=np.array([0.0]), prompt_len=np.array([prompt]),
                    output_len=np.array([output]))


def params(**kw):
    kw.setdefault("num_gpu_blocks", 400)
    kw.setdefault("block_size", 4)
    kw.setdefault("max_model_len", 4096)
    kw.setdefault("enable_prefix_caching", False)
    return EngineParams(**kw)


def run(requests, sd, cost=None, **kw):
    pool = PoolSpec(params(**kw), cost or AffineStepCost(BASE, PER_TOKEN), 1, speculative=sd)
    return run_pools(requests, [pool])


# ------------------------------------------------------------------------- event times
@pytest.mark.parametrize("n, k", [(11, 3), (2, 4), (9, 1), (40, 5), (1, 3)])
def test_full_acceptance_emits_k_plus_one_per_step(n, k):
    # Acceptance 1, free (ngram) drafts. Prompt 20: the prefill step takes
    # 0.01 + 0.001 * 20 = 0.03 s and emits the first token. Every later step verifies
    # k drafts: k + 1 tokens, 0.01 + 0.001 (k + 1) s, and emits k + 1 tokens (the last
    # one only what is left), so n - 1 tokens take ceil((n - 1) / (k + 1)) steps.
    res = run(lone(20, n), SpecDecode(k, 1.0))
    r = res.reqs
    steps = math.ceil((n - 1) / (k + 1))
    verify = BASE + PER_TOKEN * (k + 1)
    assert r.t_first[0] == pytest.approx(0.03)
    assert r.t_finish[0] == pytest.approx(0.03 + steps * verify)
    assert r.n_out[0] == n
    assert res.inst.ist[0, I_STEPS] == 1 + steps
    st = res.costs.spec.stats[0]
    assert st[ST_VERIFIES] == steps and st[ST_EMITTED] == n - 1
    if n > 1:  # TPOT = the step time over the tokens each step brings
        ds = to_dataset(res)
        assert float(ds["tpot_s"][0]) == pytest.approx(steps * verify / (n - 1))


def test_zero_acceptance_one_token_per_step_at_verify_plus_draft_cost():
    # k = 2, acceptance 0, drafter priced 0.002 + 0.0005 per token. Prompt 20, output 6.
    # Prefill step: target 0.01 + 0.001 * 20 = 0.030; drafter's first pass over the step's
    # 20 tokens 0.002 + 0.0005 * 20 = 0.012, then k - 1 = 1 pass of the one request that
    # sampled, 0.002 + 0.0005 = 0.0025 -> 0.0445 s.
    # Each decode step: verify 0.01 + 0.001 * 3 = 0.013; drafter 0.002 + 0.0005 * 3 =
    # 0.0035 and 0.0025 -> 0.019 s, one token each, 5 steps.
    sd = SpecDecode(2, 0.0, draft_cost=AffineStepCost(0.002, 0.0005), method="eagle")
    res = run(lone(20, 6), sd)
    r = res.reqs
    assert r.t_first[0] == pytest.approx(0.0445)
    assert r.t_finish[0] == pytest.approx(0.0445 + 5 * 0.019)
    st = res.costs.spec.stats[0]
    assert (st[ST_VERIFIES], st[ST_DRAFTED], st[ST_ACCEPTED], st[ST_EMITTED]) == (5, 10, 0, 5)
    assert st[ST_DRAFT_S] == pytest.approx(0.0145 + 5 * 0.006)
    assert st[ST_VERIFY_S] == pytest.approx(0.030 + 5 * 0.013)


def test_verify_steps_are_decode_tokens_and_share_the_token_budget():
    # Budget 6 tokens, k = 3 (a decode asks for 4), A and B (prompt 3) arrive at 0; A's
    # arrival starts the first step alone.
    # step 0: A's prompt, 3 prefill tokens.
    # step 1: A verifies 4; B's first chunk takes the 2 left -> 6 tokens, 2 of prefill.
    # step 2: A 4; B's last prompt token 1 -> 5 tokens, 1 of prefill.
    # steps 3, 4: A 4; B asks for 4 and gets the 2 left (vLLM trims its drafts to 1)
    #   -> 6 tokens, none of prefill (a verify counts as decode tokens).
    reqs = Requests(arrival_s=np.array([0.0, 0.0]), prompt_len=np.array([3, 3]),
                    output_len=np.array([30, 30]))
    res = run(reqs, SpecDecode(3, 1.0), max_num_batched_tokens=6, max_num_seqs=2)
    ds = to_dataset(res)
    np.testing.assert_array_equal(ds["num_tokens"].values[:5], [3, 6, 5, 6, 6])
    np.testing.assert_array_equal(ds["num_prefill_tokens"].values[:5], [3, 2, 1, 0, 0])
    st = res.costs.spec.stats[0]
    assert st[ST_EMITTED] == 29 + 29  # every token after the first came from a verify


# ------------------------------------------------------------------------- KV blocks
def test_blocks_held_after_a_step_are_the_accepted_context():
    # Block size 4, prompt 10, output 8, k = 3 (eagle: 3 lookahead slots), acceptance
    # [1, 0, 0]: one draft accepted per step, so 2 tokens per step.
    # prefill: 10 tokens -> 3 blocks; after it: 3 blocks (10 computed).
    # step 1: reserves 10 + 4 + 3 = 17 tokens -> 5 blocks; accepts 1 -> context
    #         10 + 2 = 12 tokens -> 3 blocks kept (n_out 3).
    # step 2: 12 + 7 = 19 -> 5 blocks; context 14 -> 4 blocks (n_out 5).
    # step 3: 14 + 7 = 21 -> 6 blocks; context 16 -> 4 blocks (n_out 7).
    # step 4: 16 + 7 = 23 -> 6 blocks; one token left: finishes, every block returns.
    sd = SpecDecode(3, (1.0, 0.0, 0.0), method="eagle")
    pool = PoolSpec(params(num_gpu_blocks=40), AffineStepCost(BASE, PER_TOKEN), 1,
                    speculative=sd)
    w, _, _ = _build_world(lone(10, 8), (pool,), None, 0, None, 64, None)
    on_arrival(w, 0, 0.0)
    w.glob[G_NEXT] = 1
    expect = [(3, 3, 1), (5, 3, 3), (5, 4, 5), (6, 4, 7), (6, 0, 8)]
    now = 0.0
    for reserved, kept, n_out in expect:
        start_step(w, 0, now)
        slot = w.views[0].slot[0]
        assert w.inst.nblk[0, slot] == reserved
        assert w.pool.meta[0, M_NFREE] == 40 - reserved  # the pool agrees
        now = w.inst.acc[0, A_BUSY_UNTIL]
        complete_step(w, 0, now)
        assert w.views[0].n_out[0] == n_out
        held = w.inst.nblk[0, slot] if w.views[0].slot[0] >= 0 else 0
        assert held == kept
        assert w.pool.meta[0, M_NFREE] == 40 - kept


def test_capacity_counts_the_verify_and_lookahead_slots():
    # prompt 10 + output 8: 17 tokens of KV without speculation (5 blocks of 4); the last
    # verify step also reserves k = 3 drafts and 3 lookahead slots: 16 + 4 + 3 = 23 -> 6.
    with pytest.raises(ValueError, match="needs 6 KV blocks with speculative decoding"):
        run(lone(10, 8), SpecDecode(3, 1.0, method="eagle"), num_gpu_blocks=5)


# ------------------------------------------------------------------------- acceptance
def _pmf(rates):
    """P(a = j) = prod_{i<=j} a_i * (1 - a_{j+1}) for j < k, prod_{i<=k} a_i for j = k."""
    surv = np.concatenate([[1.0], np.cumprod(rates)])
    return np.append(surv[:-1] * (1.0 - np.asarray(rates)), surv[-1])


def test_draws_follow_the_acceptance_profile():
    # 40,000 draws over (request, position) keys. Each frequency has a binomial standard
    # error sqrt(p (1 - p) / N) <= 0.0025; 5 of them bound the deviation (a false alarm
    # well below 1e-5 per test).
    rates = np.array([0.9, 0.7, 0.5, 0.3])
    tab = spec_tables(n_rows=1)
    tab.rate[0, :4] = rates
    tab.irow[0, SI_SEED] = 7
    n = 40_000
    a = np.array([draw_accepted(tab, 0, r % 200, r // 200, 4) for r in range(n)])
    freq = np.bincount(a, minlength=5) / n
    pmf = _pmf(rates)
    assert np.all(np.abs(freq - pmf) <= 5 * np.sqrt(pmf * (1 - pmf) / n))


def test_mean_acceptance_length_matches_the_closed_form():
    # E[accepted] = sum_{i<=k} prod_{j<=i} a_j = 0.9 + 0.63 + 0.315 + 0.0945 = 1.9395, so
    # the mean acceptance length is 2.9395. Its sampling error over N verifies is
    # sd(a) / sqrt(N) with sd(a) from the pmf; 4 of them bound the deviation.
    rates = (0.9, 0.7, 0.5, 0.3)
    sd = SpecDecode(4, rates, seed=3)
    reqs = Requests(arrival_s=np.arange(60) * 0.05, prompt_len=np.full(60, 16),
                    output_len=np.full(60, 300))
    res = run(reqs, sd, num_gpu_blocks=20_000, max_num_seqs=64)
    s = summarize(to_dataset(res))
    pmf = _pmf(rates)
    j = np.arange(5)
    mean, var = (pmf * j).sum(), (pmf * j * j).sum() - (pmf * j).sum() ** 2
    assert mean == pytest.approx(1.9395)
    n = res.costs.spec.stats[0, ST_VERIFIES]
    assert n > 5000
    assert abs(s["spec_acceptance_length"] - (1 + mean)) <= 4 * np.sqrt(var / n)
    assert sd.acceptance_length() == pytest.approx(2.9395)
    # every request still produces exactly its output
    assert np.all(res.reqs.n_out == 300)


def test_runs_are_reproducible_and_the_seed_matters():
    reqs = Requests(arrival_s=np.arange(20) * 0.01, prompt_len=np.full(20, 32),
                    output_len=np.full(20, 50))
    a = run(reqs, SpecDecode(3, 0.6, seed=1)).reqs.t_finish.copy()
    b = run(reqs, SpecDecode(3, 0.6, seed=1)).reqs.t_finish.copy()
    c = run(reqs, SpecDecode(3, 0.6, seed=2)).reqs.t_finish.copy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_speculation_needs_a_decoding_vllm_pool():
    with pytest.raises(ValueError, match="vllm-v1 scheduler only"):
        run(lone(10, 5), SpecDecode(2, 0.5), policy=Policy.SGLANG)
    with pytest.raises(ValueError, match="acceptance must be one rate or 3"):
        SpecDecode(3, (0.5, 0.5))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        SpecDecode(2, 1.5)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpecDecode(0, 0.5)


# ------------------------------------------------------------------------- invariants
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 12), k=st.integers(1, 6), rate=st.floats(0.0, 1.0),
       blocks=st.integers(12, 80), budget=st.integers(16, 96), seed=st.integers(0, 99),
       lookahead=st.booleans())
def test_random_runs_finish_exactly_and_account_for_every_token(n, k, rate, blocks, budget,
                                                                seed, lookahead):
    # Every request ends with exactly its output, the pool gets every block back, steps
    # respect the budget and the blocks, and -- without preemption -- the scheduled tokens
    # are the kept ones (prompt + output - 1 - prefix hits, per request) plus, per verify
    # of d drafts emitting e tokens, the 1 + d - e computed and thrown away.
    rng = np.random.default_rng(seed)
    reqs = Requests(arrival_s=np.sort(rng.uniform(0, 0.2, n)),
                    prompt_len=rng.integers(1, 40, n), output_len=rng.integers(1, 30, n))
    sd = SpecDecode(k, rate, method="eagle" if lookahead else "ngram", seed=seed)
    try:
        res = run(reqs, sd, num_gpu_blocks=blocks, max_num_batched_tokens=budget,
                  max_num_seqs=8)
    except ValueError as exc:
        assert "num_gpu_blocks" in str(exc)
        return
    r = res.reqs
    np.testing.assert_array_equal(r.n_out, r.output)
    check_pool_intact(res, 0)
    s = recorded_steps(res.rec)
    assert np.all(s["tokens"] <= budget) and np.all(s["kv_used"] <= blocks)
    st_ = res.costs.spec.stats[0]
    assert st_[ST_ACCEPTED] <= st_[ST_DRAFTED]
    if r.n_preempt.sum() == 0:
        kept = (r.prompt + r.output - 1 - r.hit).sum()
        thrown = st_[ST_VERIFIES] + st_[ST_DRAFTED] - st_[ST_EMITTED]
        assert res.inst.acc[0, A_TOKENS] == kept + thrown
