"""Simulation vs queueing theory, over many seeds (Ciw-style trust checks).

A single-slot engine (``max_num_seqs=1``) with an affine step cost is a single-server FCFS
queue: a request holds the slot for one prefill step plus ``output_len - 1`` decode steps,
each ``D`` seconds, so its service time is ``output_len * D``. With Poisson arrivals:

* fixed output length: M/D/1, mean wait ``rho D / (2 (1 - rho))`` and the M/D/1 wait
  quantiles (:mod:`serveplan.queueing.formulas`);
* random output length: M/G/1, Pollaczek-Khinchine ``lambda E[S^2] / (2 (1 - rho))`` with
  ``E[S^2] = D^2 E[L^2]`` taken from the length distribution's own moments;
* the server's busy fraction equals ``rho = lambda E[S]`` (Little's law for the server).
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.queueing.formulas import md1_wait, md1_wait_quantile, mg1_wait
from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.state import A_BUSY_TIME
from serveplan.sim.workload import Fixed, PoissonArrivals, Uniform, generate_requests

D = 0.01  # seconds per engine step
SEEDS = range(20)
N = 5000


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def single_slot(rate, output, seed):
    requests = generate_requests(N, PoissonArrivals(rate), Fixed(16), output, seed=seed)
    params = EngineParams(num_gpu_blocks=1000, max_num_seqs=1, max_model_len=4096,
                          enable_prefix_caching=False)
    res = run_engine(requests, AffineStepCost(D), params)
    r = res.reqs
    wait = r.t_sched - r.arrival
    busy_fraction = res.inst.acc[0, A_BUSY_TIME] / (r.t_finish.max() - r.arrival.min())
    return wait, busy_fraction


def test_md1_mean_and_quantile_wait():
    rho = 0.5
    rate = rho / D
    waits, busy = [], []
    for seed in SEEDS:
        w, b = single_slot(rate, Fixed(1), seed)
        waits.append(w)
        busy.append(b)
    waits = np.concatenate(waits)
    assert waits.mean() == pytest.approx(float(md1_wait(rate, D)), rel=0.04)
    assert np.quantile(waits, 0.9) == pytest.approx(float(md1_wait_quantile(0.9, rate, D)),
                                                    rel=0.05)
    assert np.mean(busy) == pytest.approx(rho, rel=0.02)


def test_mg1_pollaczek_khinchine_with_decode_steps():
    out = Uniform(1, 9)  # service = output_len steps of D
    rho = 0.6
    rate = rho / (D * out.mean)
    waits, busy = [], []
    for seed in SEEDS:
        w, b = single_slot(rate, out, seed)
        waits.append(w.mean())
        busy.append(b)
    expected = float(mg1_wait(rate, D * out.mean, second_moment=D * D * out.second_moment))
    assert np.mean(waits) == pytest.approx(expected, rel=0.05)
    assert np.mean(busy) == pytest.approx(rho, rel=0.02)


def test_tpot_and_ttft_are_step_multiples():
    # ample budget: a running request is in every step, so every inter-token gap is one
    # step; the first token comes one step after admission, which waits at most for the
    # step in flight
    requests = generate_requests(50, PoissonArrivals(0.5), Fixed(64), Uniform(2, 20), seed=0)
    res = run_engine(requests, AffineStepCost(D),
                     EngineParams(num_gpu_blocks=1000, max_model_len=4096))
    r = res.reqs
    tpot = (r.t_finish - r.t_first) / (r.n_out - 1)
    np.testing.assert_allclose(tpot, D)
    np.testing.assert_allclose(r.t_first - r.t_sched, D)
    assert np.all(r.t_sched - r.arrival <= D + 1e-12)
