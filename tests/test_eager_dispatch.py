"""An engine's CPU time per layer to issue a step outside CUDA graphs
(``RuntimeTerms.eager_dispatch_layer_s``): it joins the FFN module's dispatch, which the
oracle overlaps with the GPU work (BestServe's Algorithm 1), so a dispatch-bound eager step
pays it once per layer, a GPU-bound one hides it, and graph steps -- full or piecewise --
never pay it. How the engine profile and the fitting path set it: ``test_step_overhead.py``,
beside the step overhead, the oracle's other runtime term."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.ops import MOD_FFN
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.runtime import RuntimeTerms
from serveplan.kernels import roofline as K

LAYERS = 32  # Llama-3.1-8B
EXTRA = 1e-3  # s per layer: far above any per-layer GPU time of a one-token step


def test_a_dispatch_bound_eager_step_pays_it_once_per_layer():
    """One decode token, no graphs. Once the CPU issues each layer slower than the GPU runs
    it, the layers finish one dispatch apart: a further second per layer costs ``layers``
    seconds. Below that point the GPU's own time hides part of it (never more than
    ``layers x extra``)."""
    eager = CostOracle("llama-3.1-8b", "h100", cuda_graph=False)
    slow, slower = (eager.with_runtime(eager_dispatch_layer_s=x) for x in (EXTRA, 2 * EXTRA))
    assert slower.step_time([1], [100]) - slow.step_time([1], [100]) == pytest.approx(
        LAYERS * EXTRA, rel=1e-9)
    assert 0.0 < slow.step_time([1], [100]) - eager.step_time([1], [100]) <= LAYERS * EXTRA
    assert slow.mods[MOD_FFN, K.M_DISPATCH] == pytest.approx(
        eager.mods[MOD_FFN, K.M_DISPATCH] + EXTRA)
    assert eager.with_runtime() is eager  # no terms: itself
    assert slow.with_runtime().mods[MOD_FFN, K.M_DISPATCH] == eager.mods[MOD_FFN, K.M_DISPATCH]


def test_a_gpu_bound_eager_step_hides_it_but_for_the_first_layers_wait():
    """An 8,192-token prefill keeps the GPU busier than 0.1 ms per layer of dispatch: the
    CPU runs ahead, and only the first layer's issue delays the GPU (at most one layer's
    extra, not 32)."""
    eager = CostOracle("llama-3.1-8b", "h100", cuda_graph=False)
    small = 1e-4
    slow = eager.with_runtime(eager_dispatch_layer_s=small)
    grown = slow.step_time([8192], [0]) - eager.step_time([8192], [0])
    assert 0.0 <= grown <= small + 1e-12


def test_graph_steps_never_pay_it():
    """A decode batch replays a full graph; under piecewise graphs a mixed step up to the
    largest capture size replays the pieces around eager attention (whose dispatch the term
    does not touch). Both keep their time exactly; beyond the capture sizes the step runs
    eager, dispatch-bound at this size: each further second per layer costs ``layers``."""
    full = CostOracle("llama-3.1-8b", "h100")
    assert full.with_runtime(eager_dispatch_layer_s=EXTRA).step_time([1] * 8, [500] * 8) == \
        full.step_time([1] * 8, [500] * 8)
    piecewise = CostOracle("llama-3.1-8b", "h100", piecewise_cuda_graph=True, max_num_seqs=4)
    slow, slower = (piecewise.with_runtime(eager_dispatch_layer_s=x) for x in (EXTRA, 2 * EXTRA))
    assert slow.step_time([5, 1], [0, 300]) == piecewise.step_time([5, 1], [0, 300])  # 6 <= 8
    grown = slower.step_time([60, 1], [0, 300]) - slow.step_time([60, 1], [0, 300])  # 61 > 8
    assert grown == pytest.approx(LAYERS * EXTRA, rel=1e-9)


def test_calibrate_recovers_it_from_runs_generated_with_it(sim_compiled):
    """``serveplan calibrate --runs``'s fit (simulator in the loop) finds the eager term of
    runs made with it: one client decoding Llama-3.1-8B on H100 without graphs, where a
    step is dispatch-bound once the term exceeds its GPU lead (the slope is 0 below that
    and ``layers`` above it; the fit starts from 0)."""
    from serveplan.estimator.runtime_fit import fit_terms
    from serveplan.sim.loop_api import run_pools
    from serveplan.sim.params import EngineParams
    from serveplan.sim.pools import PoolSpec
    from serveplan.sim.workload import Requests

    eager = CostOracle("llama-3.1-8b", "h100", cuda_graph=False)

    def predict(terms: RuntimeTerms) -> np.ndarray:
        cost = eager.with_runtime(*terms.oracle_terms())
        out = []
        for prompt in (200, 2000):
            req = Requests(arrival_s=np.full(3, np.nan), prompt_len=np.full(3, prompt),
                           output_len=np.full(3, 20), concurrency=1)
            pool = PoolSpec(EngineParams(num_gpu_blocks=4000, max_model_len=8192), cost)
            r = run_pools(req, [pool]).reqs
            out.append([np.median(r.t_first - r.arrival) * 1e3,
                        np.median((r.t_finish - r.t_first) / 19) * 1e3])
        return np.array(out)

    measured = predict(RuntimeTerms(eager_dispatch_layer_s=5e-4))
    fit = fit_terms(predict, measured, tp=np.array([1, 1]), names=("eager_dispatch_layer_s",),
                    max_evals=40)
    assert fit.fitted == ("eager_dispatch_layer_s",)
    assert fit.terms.eager_dispatch_layer_s == pytest.approx(5e-4, rel=0.02)
    assert np.median(fit.err_after) < 0.005 < np.median(fit.err_before)
