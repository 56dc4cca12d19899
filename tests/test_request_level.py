"""BestServe's per-request simulators (sim/request_level.py) against queueing theory."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.goodput import attainment_interval
from serveplan.queueing import formulas as F
from serveplan.sim import request_level as RL
from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.workload import Fixed, PoissonArrivals, generate_requests


def tables(step_s: float, prompt, output, rows: int = 64):
    return RL.cost_tables(AffineStepCost(step_s), prompt, output, max_prefill_batch=rows,
                          max_decode_batch=rows)


def poisson(n, rate, isl, osl, seed):
    return generate_requests(n, PoissonArrivals(rate), Fixed(isl), Fixed(osl), seed=seed)


def test_pseudo_batch_size_eq9():
    assert RL.pseudo_batch([0, 1, 4, 9, 99], 2.5).tolist() == [1, 1, 2, 4, 40]
    assert RL.pseudo_batch(3, 1.0).tolist() == 4


def test_prefill_pool_single_server_is_md1():
    """One prefill server, batch 1, constant service D, Poisson input: TTFT = W + D."""
    lam, d = 6.0, 0.1
    ttft = []
    for seed in range(4):
        r = poisson(20_000, lam, 100, 2, seed)
        pre, dec = tables(d, r.prompt_len, r.output_len), tables(1e-6, r.prompt_len,
                                                                r.output_len)
        first, _ = RL.pd_times(r.arrival_s, r.prompt_len, r.output_len, pre, dec,
                               num_prefill=1, num_decode=1, prefill_max_num_seqs=1,
                               prefill_max_num_batched_tokens=8192, decode_max_num_seqs=64,
                               decode_kv_tokens=1e9, kv_transfer_s=0.0)
        ttft.append((first - r.arrival_s)[2000:])
    ttft = np.concatenate(ttft)
    assert ttft.mean() == pytest.approx(float(F.md1_wait(lam, d)) + d, rel=0.03)
    for q in (0.5, 0.9, 0.99):
        assert np.quantile(ttft, q) == pytest.approx(
            float(F.md1_wait_quantile(q, lam, d)) + d, rel=0.05)


def test_colocated_single_slot_is_md1():
    """max_num_seqs = 1: prefill then L-1 decode steps, nothing overlaps -> M/D/1 with
    service L * step; TTFT = W + step."""
    lam, step, osl = 12.0, 0.01, 5
    ttft = []
    for seed in range(4):
        r = poisson(20_000, lam, 16, osl, seed)
        tab = tables(step, r.prompt_len, r.output_len)
        first, finish = RL.colocated_times(r.arrival_s, r.prompt_len, r.output_len, tab,
                                           num_instances=1, max_num_seqs=1,
                                           max_num_batched_tokens=8192, kv_tokens=1e9)
        np.testing.assert_allclose(finish - first, (osl - 1) * step)
        ttft.append((first - r.arrival_s)[2000:])
    ttft = np.concatenate(ttft)
    s = osl * step
    assert ttft.mean() == pytest.approx(float(F.md1_wait(lam, s)) + step, rel=0.03)
    assert np.quantile(ttft, 0.9) == pytest.approx(
        float(F.md1_wait_quantile(0.9, lam, s)) + step, rel=0.05)


def test_iteration_level_single_slot_matches_the_same_md1(sim_compiled):
    """The event simulator in the same regime (one slot, constant step) is the same M/D/1."""
    lam, step, osl = 12.0, 0.01, 5
    r = poisson(20_000, lam, 16, osl, 0)
    res = run_engine(r, AffineStepCost(step), EngineParams(num_gpu_blocks=4096,
                                                           max_num_seqs=1,
                                                           max_model_len=256))
    ttft = (res.reqs.t_first - res.reqs.arrival)[2000:]
    np.testing.assert_allclose(res.reqs.t_finish - res.reqs.t_first, (osl - 1) * step)
    s = osl * step
    assert ttft.mean() == pytest.approx(float(F.md1_wait(lam, s)) + step, rel=0.05)


def test_prefill_suspends_running_decodes():
    """A prefill arriving during a decode pushes that decode's end by the prefill time."""
    arrival = np.array([0.0, 0.05])
    prompt = np.array([16, 16])
    output = np.array([11, 11])
    tab = tables(0.01, prompt, output)
    first, finish = RL.colocated_times(arrival, prompt, output, tab, num_instances=1,
                                       max_num_seqs=8, max_num_batched_tokens=8192,
                                       kv_tokens=1e6)
    # r0: prefill [0, .01], decode 10 steps at b+ = 1 -> .11, suspended .05-.06 -> .12
    # r1: prefill [.05, .06], decode with b = 1 busy -> b+ = max(floor(2/2.5), 1) = 1
    np.testing.assert_allclose(first, [0.01, 0.06])
    np.testing.assert_allclose(finish, [0.12, 0.16])


def test_decode_boxes_queue_fifo_when_full():
    arrival = np.zeros(3)
    prompt = np.full(3, 16)
    output = np.full(3, 11)
    pre, dec = tables(1e-3, prompt, output), tables(0.01, prompt, output)
    first, finish = RL.pd_times(arrival, prompt, output, pre, dec, num_prefill=1,
                                num_decode=1, prefill_max_num_seqs=8,
                                prefill_max_num_batched_tokens=8192, decode_max_num_seqs=2,
                                decode_kv_tokens=1e6, kv_transfer_s=0.002, tau=1.0)
    np.testing.assert_allclose(first, 0.001)  # batch prefill 1 ms; then 2 ms transfer
    # boxes: b = 0 -> b+ = 1; b = 1 -> b+ = 2 (tau = 1); the third waits for the first box
    np.testing.assert_allclose(finish, [0.103, 0.103, 0.203])


def test_attainment_interval_covers_the_md1_truth():
    """Coverage of the batch-means interval on independent runs of a known queue."""
    lam, d, goal = 7.0, 0.1, 0.3
    truth = float(F.md1_wait_cdf(goal - d, lam, d))
    covered = 0
    runs = 40
    for seed in range(runs):
        r = poisson(4000, lam, 100, 2, 100 + seed)
        pre, dec = tables(d, r.prompt_len, r.output_len), tables(1e-6, r.prompt_len,
                                                                r.output_len)
        first, _ = RL.pd_times(r.arrival_s, r.prompt_len, r.output_len, pre, dec,
                               num_prefill=1, num_decode=1, prefill_max_num_seqs=1,
                               prefill_max_num_batched_tokens=8192, decode_max_num_seqs=8,
                               decode_kv_tokens=1e9, kv_transfer_s=0.0)
        ok = (first - r.arrival_s)[400:] <= goal
        iv = attainment_interval([ok], 0.95)
        covered += iv.low <= truth <= iv.high
    assert covered / runs >= 0.85


def test_inputs_are_validated():
    tab = tables(0.01, np.array([4]), np.array([4]))
    with pytest.raises(ValueError, match="sorted"):
        RL.colocated_times([1.0, 0.0], [4, 4], [4, 4], tab, num_instances=1, max_num_seqs=4,
                           max_num_batched_tokens=64, kv_tokens=100)
    with pytest.raises(ValueError, match="tau"):
        RL.colocated_times([0.0], [4], [4], tab, num_instances=1, max_num_seqs=4,
                           max_num_batched_tokens=64, kv_tokens=100, tau=0.0)
