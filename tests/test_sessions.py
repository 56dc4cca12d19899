"""Stateful sessions in the loop (serveplan.sim.session_state / sessions / session_results).

Each expected number is derived by hand in the test from vLLM's block rules and the cost
oracle's price of the one step that runs; nothing is copied from a previous run."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim import workload as W
from serveplan.sim.engine import EngineParams, run_engine
from serveplan.sim.results import to_dataset
from serveplan.sim.sessions import SessionRounds, one_round_sessions, session_requests
from serveplan.sim.summary import summarize

BS = 16


def rounds(sessions, arrival, *, kinds=None):
    """SessionRounds from ``[[(new, out, delay), ...], ...]`` (delay of round 0 unused)."""
    sess, new, out, delay, kind = [], [], [], [], []
    for s, rs in enumerate(sessions):
        for k, (n, o, d) in enumerate(rs):
            sess.append(s)
            new.append(n)
            out.append(o)
            delay.append(d)
            kind.append(1 if k == len(rs) - 1 else 0)
    return SessionRounds(session=np.array(sess), new_tokens=np.array(new),
                         output_tokens=np.array(out), kind=np.array(kinds or kind, dtype=np.int8),
                         delay_s=np.array(delay, dtype=float), arrival_s=np.array(arrival, float))


def run(req, cost, **knobs):
    """One instance with vLLM v1 defaults and the given knobs."""
    return run_engine(req, cost, EngineParams(**{"num_gpu_blocks": 4000, "max_model_len": 8192,
                                                 **knobs}))


def test_rows_prompt_is_history_plus_new_tokens():
    # session 0 arrives at 0.5, session 1 at 0.0: rows 0, 1 are first rounds by arrival
    # (session 1 then 0), then the later rounds by session and round.
    req = session_requests(rounds([[(100, 10, 0), (50, 20, 1.0)], [(200, 5, 0)]], [0.5, 0.0]),
                           hash_block=BS)
    plan = req.sessions
    np.testing.assert_array_equal(plan.session, [0, 1, 1])
    np.testing.assert_array_equal(plan.round, [0, 0, 1])
    # the later round of the session that arrived second (index 1): 100 + 10 + 50 = 160
    np.testing.assert_array_equal(req.prompt_len, [200, 100, 160])
    np.testing.assert_array_equal(plan.prev, [-1, -1, 1])
    np.testing.assert_array_equal(plan.next, [-1, 2, -1])
    assert np.isnan(req.arrival_s[2]) and list(req.arrival_s[:2]) == [0.0, 0.5]
    # one stream per session: round 1's first ceil(100 / 16) = 7 ids are round 0's
    np.testing.assert_array_equal(req.hashes(2)[:7], req.hashes(1))
    assert not set(req.hashes(0)) & set(req.hashes(1))


def test_cached_history_pays_only_new_tokens(oracle_8b, sim_compiled):
    # Round 0: 1024 prompt + 17 output tokens. Its KV holds the 1024 + 16 computed tokens
    # (the last output token is emitted, never computed) = 65 full blocks of 16. Round 1
    # (sent 2 s after) has prompt 1024 + 17 + 512 = 1553; with the 1040 cached tokens it
    # computes 1553 - 1040 = 513 tokens (the last output token and the 512 new ones) after a
    # context of 1040, in one step on an idle instance: TTFT = that step's price.
    req = session_requests(rounds([[(1024, 17, 0), (512, 4, 2.0)]], [0.0]), hash_block=BS)
    res = run(req, oracle_8b)
    ds = to_dataset(res)
    assert int(ds["prefix_hit_tokens"][1]) == 1040
    expected = oracle_8b.step_time([513], [1040])
    assert float(ds["ttft_s"][1]) == pytest.approx(expected, rel=1e-9)
    assert float(ds["arrival_s"][1]) == pytest.approx(float(ds["finish_s"][0]) + 2.0, abs=1e-12)


def test_evicted_history_is_recomputed(oracle_8b, sim_compiled):
    # 100 blocks of 16 tokens. Session A's round 0 (1024 + 17) leaves 65 cached blocks; a
    # one-round session B (prompt 1599, 1 output token: ceil(1599 / 16) = 100 blocks)
    # arrives during A's 5 s tool delay and takes every block, evicting A's history. A's round
    # 1 (prompt 1553) then hits nothing: TTFT = one step of 1553 new tokens, no context.
    req = session_requests(rounds([[(1024, 17, 0), (512, 4, 5.0)], [(1599, 1, 0)]], [0.0, 1.0]),
                           hash_block=BS)
    res = run(req, oracle_8b, num_gpu_blocks=100, max_model_len=1700)
    ds = to_dataset(res)
    later = int(np.flatnonzero(ds["round"].values == 1)[0])
    assert int(ds["prefix_hit_tokens"][later]) == 0
    assert float(ds["ttft_s"][later]) == pytest.approx(oracle_8b.step_time([1553], [0]),
                                                       rel=1e-9)


def test_tool_delay_shifts_the_next_round_exactly(sim_compiled):
    # Same session, tool delay 1 s or 4 s: the later round is sent exactly delay seconds after
    # the earlier round's finish (no front end), so its arrival moves by 3 s and, on an
    # otherwise idle instance, so does everything after it.
    from serveplan.sim.costs import AffineStepCost

    cost = AffineStepCost(0.01, 1e-5)
    out = []
    for delay in (1.0, 4.0):
        req = session_requests(rounds([[(300, 5, 0), (40, 5, delay)]], [0.2]), hash_block=BS)
        ds = to_dataset(run(req, cost))
        assert float(ds["arrival_s"][1]) == pytest.approx(float(ds["finish_s"][0]) + delay,
                                                          abs=1e-12)
        out.append(ds)
    assert float(out[1]["finish_s"][1] - out[0]["finish_s"][1]) == pytest.approx(3.0, abs=1e-9)
    assert float(out[1]["finish_s"][0]) == float(out[0]["finish_s"][0])


def test_session_affinity_overrides_the_router(sim_compiled):
    # Round-robin over 3 instances would send the 6 rows to 0, 1, 2, 0, 1, 2 in arrival
    # order; with sessions, each later round goes where its session's round 0 went.
    from serveplan.sim.costs import AffineStepCost

    three = [(64, 3, 0.5), (32, 3, 0.5), (32, 3, 0.5)]
    req = session_requests(rounds([three, three], [0.0, 0.01]), hash_block=BS)
    res = run_engine(req, AffineStepCost(0.01, 1e-5),
                     EngineParams(num_gpu_blocks=500, max_model_len=1024), num_instances=3)
    ds = to_dataset(res)
    routed, sess = ds["routed_to"].values, ds["session_id"].values
    assert list(routed[:2]) == [0, 1]  # the router placed the first rounds
    for s in (0, 1):
        assert set(routed[sess == s]) == {s}
    # each later round hits its history: 64 + 3 = 67 tokens, 66 computed -> 4 full blocks
    assert int(ds["prefix_hit_tokens"].values[(sess == 0) & (ds["round"].values == 1)][0]) == 64


def test_one_round_sessions_equal_plain_requests(oracle_8b, sim_compiled):
    # A session of one round is an ordinary request: every per-request result is identical.
    req = W.generate_requests(60, W.PoissonArrivals(8.0), W.LogNormal(400, 0.8, 3000),
                              W.LogNormal(60, 0.8, 400), seed=3)
    plain = to_dataset(run_engine(req, oracle_8b, EngineParams(num_gpu_blocks=900),
                                  num_instances=2))
    sess = to_dataset(run_engine(one_round_sessions(req, 16 * 64), oracle_8b,
                                 EngineParams(num_gpu_blocks=900), num_instances=2))
    for var in plain.data_vars:
        np.testing.assert_array_equal(plain[var].values, sess[var].values, err_msg=var)
    assert sess.sizes["session"] == 60


def test_session_metrics_by_hand(sim_compiled):
    # Affine steps of 10 ms + 1e-5 s per token on one instance; one session: thinking round
    # (prompt 100, 3 tokens), tool 1 s, answer round (new 20). Round 0: prefill step 0.01 +
    # 100e-5 = 0.011 s, then 2 decode steps of 0.01001: finish 0.03102. Round 1 is sent at
    # 1.03102; prompt 100 + 3 + 20 = 123, cached 6 full blocks (102 computed tokens -> 96),
    # so its prefill computes 27 tokens: 0.01027 s. aTTFT = 1.03102 + 0.01027 - 0 = 1.04129.
    from serveplan.sim.costs import AffineStepCost

    req = session_requests(rounds([[(100, 3, 0), (20, 2, 1.0)]], [0.0]), hash_block=BS)
    ds = to_dataset(run_engine(req, AffineStepCost(0.01, 1e-5),
                               EngineParams(num_gpu_blocks=100, max_model_len=512)))
    assert float(ds["answer_ttft_s"][0]) == pytest.approx(1.04129, abs=1e-9)
    # makespan adds the answer's second token: one decode step of 0.01001
    assert float(ds["session_makespan_s"][0]) == pytest.approx(1.04129 + 0.01001, abs=1e-9)
    s = summarize(ds)
    # hidden planning: (100 new + 3 output) tokens over the thinking round's 0.03102 s
    assert s["hidden_planning_throughput"] == pytest.approx(103 / 0.03102, rel=1e-9)
    assert s["followup_history_tokens"] == 103 and s["followup_prefix_hit_tokens"] == 96
