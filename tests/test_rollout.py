"""The mid-run layout switch (serveplan.sim.reconfig) against hand-computed step times.

Every case uses an affine step cost (``base + per_token * tokens``), so each step's length
is written out in the test; the no-switch runs are the loop's own, unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.costs import AffineStepCost, prefill_seconds
from serveplan.sim.engine import EngineParams
from serveplan.sim.loop import run_loop
from serveplan.sim.loop_api import _build_world, run_pools
from serveplan.sim.pools import PoolSpec
from serveplan.sim.reconfig import active_series, run_with_switch, run_without_switch
from serveplan.sim.state import G_DONE, G_STOP_DONE
from serveplan.sim.workload import Requests


def _pool(cost, n=1, **knobs):
    prm = dict(num_gpu_blocks=4000, max_num_seqs=8, max_num_batched_tokens=1024,
               enable_prefix_caching=False)
    prm.update(knobs)
    return PoolSpec(EngineParams(**prm), cost, num_instances=n)


def _burst(prompt, output):
    return Requests(np.zeros(len(prompt)), np.asarray(prompt), np.asarray(output))


def test_switch_at_first_instant_below_threshold():
    """Four requests at t = 0, prompts of 10, outputs 2, 3, 5, 8; one step takes 1 s whatever
    it holds. The first arrival starts step 1 (0 -> 1) alone (the loop starts idle instances
    after each event), so request 0 gets its first token at 1 and the other three join step 2
    (1 -> 2): their first tokens come at 2 and token k at k + 1. Finishes: 2, 4, 6, 9.
    Threshold 3: the active count goes 4, 3 (at t = 2, not below), then 2 at t = 4 -- the
    switch. The two left have 3 tokens each; after a 0.5 s pause on the same layout with
    their KV, token 4 comes at 5.5: they finish at 4.5 + 2 = 6.5 and 4.5 + 5 = 9.5."""
    req = _burst([10, 10, 10, 10], [2, 3, 5, 8])
    pool = _pool(AffineStepCost(1.0))
    run = run_with_switch(req, pool, pool, stop_done=4 - 3 + 1, pause=0.5, kv="transfer")
    assert run.t_switch == 4.0
    np.testing.assert_array_equal(run.snapshot.ids, [2, 3])
    np.testing.assert_array_equal(run.snapshot.n_out, [3, 3])
    np.testing.assert_allclose(run.t_finish, [2.0, 4.0, 6.5, 9.5])
    np.testing.assert_array_equal(run.n_out, [2, 3, 5, 8])
    t, active = active_series(run.t_finish)
    np.testing.assert_allclose(t, [0, 2, 4, 6.5, 9.5])
    np.testing.assert_array_equal(active, [4, 3, 2, 1, 0])


def test_threshold_never_crossed_means_no_switch():
    """stop_done = n: the last finish ends the run before any switch. (Request 0 runs step 1
    alone, request 1 joins step 2: finishes at 2 and 1 + 3 = 4.)"""
    req = _burst([10, 10], [2, 3])
    pool = _pool(AffineStepCost(1.0))
    run = run_with_switch(req, pool, pool, stop_done=2, pause=5.0)
    assert run.snapshot is None and np.isnan(run.t_switch)
    np.testing.assert_allclose(run.t_finish, [2.0, 4.0])


def test_recompute_costs_one_prefill_of_the_context():
    """Prompts of 100, outputs 2 and 6; a step costs 1 s + 0.01 s per token. Step 1 prefills
    request 0 alone (the first arrival starts it): 2.0 s. Step 2 decodes request 0 and
    prefills request 1, 101 tokens: 2.01 s, so request 0 finishes at 4.01 -- below the
    threshold of 2 active -- and request 1 has 1 token. With recompute its context,
    100 + 1 = 101 tokens, is prefilled on B: 1 + 1.01 = 2.01 s, emitting token 2 at 6.02;
    four decode steps of 1.01 s end it at 10.06. With its KV transferred it decodes on at
    once and ends as without a switch: 4.01 + 5 x 1.01 = 9.06."""
    req = _burst([100, 100], [2, 6])
    cost = AffineStepCost(1.0, per_token_s=0.01)
    pool = _pool(cost)
    rec = run_with_switch(req, pool, pool, stop_done=1, kv="recompute")
    assert rec.t_switch == pytest.approx(4.01)
    assert rec.migration.context.tolist() == [101]
    b_first_step = prefill_seconds(cost, rec.migration.context, 1024)[0]
    assert b_first_step == pytest.approx(1 + 0.01 * 101)
    assert rec.t_finish[1] == pytest.approx(4.01 + b_first_step + 4 * 1.01)
    moved = run_with_switch(req, pool, pool, stop_done=1, kv="transfer")
    base = run_without_switch(req, pool)
    assert base.t_finish[1] == pytest.approx(4.01 + 5 * 1.01)
    np.testing.assert_allclose(moved.t_finish, base.t_finish, rtol=0, atol=1e-12)


def _random_burst(n, seed):
    rng = np.random.default_rng(seed)
    return _burst(rng.integers(20, 200, n), rng.integers(1, 120, n))


@pytest.mark.parametrize("budget", [1024, 48])
def test_zero_cost_switch_to_the_same_instance_changes_nothing(budget):
    """One instance, equal layouts, KV transferred, no pause: B's first step is exactly the
    step A abandoned at the switch (same running list, same computed tokens, same waiting
    queue), so every request finishes when it does without a switch. A 48-token budget
    leaves chunked prefills half done at the switch; 8 slots keep a waiting queue."""
    req = _random_burst(60, 1)
    pool = _pool(AffineStepCost(0.01, per_token_s=1e-4, per_request_s=1e-3),
                 max_num_batched_tokens=budget)
    base = run_without_switch(req, pool)
    for stop in (5, 30, 55):
        run = run_with_switch(req, pool, pool, stop_done=stop, pause=0.0, kv="transfer")
        assert run.snapshot is not None
        np.testing.assert_array_equal(run.t_finish, base.t_finish)
        np.testing.assert_array_equal(run.t_first, base.t_first)


def test_stop_and_resume_in_place_is_exact():
    """The loop's stop (G_STOP_DONE) returns after the instant's steps have started; calling
    it again continues as if it had never stopped (four instances, events interleaved)."""
    req = _random_burst(80, 2)
    pool = _pool(AffineStepCost(0.01, per_token_s=1e-4, per_request_s=1e-3), n=4)
    base = run_pools(req, [pool])
    world, _, _ = _build_world(req, (pool,), None, 0, None, 1 << 10, None)
    world.glob[G_STOP_DONE] = 37
    run_loop(world, 0.0)
    assert world.glob[G_DONE] == 37
    assert world.clock[0] == np.sort(base.hs.t_finish)[36]
    world.glob[G_STOP_DONE] = 0
    run_loop(world, world.clock[0])
    np.testing.assert_array_equal(world.hs.t_finish, base.hs.t_finish)


def test_wider_layout_takes_the_tail_on_fewer_instances():
    """Four instances switch to two when fewer than 6 are active (35 of 40 finished): the
    five left are dealt round-robin over B's instances, and every request still gets its
    whole output."""
    req = _random_burst(40, 3)
    a = _pool(AffineStepCost(0.01, per_token_s=1e-4), n=4)
    b = _pool(AffineStepCost(0.005, per_token_s=1e-4), n=2)
    run = run_with_switch(req, a, b, stop_done=40 - 6 + 1, pause=1.0, kv="recompute")
    assert len(run.snapshot.ids) == 5
    np.testing.assert_array_equal(run.migration.b_instance, [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(run.n_out, run.output)
    assert np.all(run.t_finish[run.snapshot.ids] > run.t_resume)
