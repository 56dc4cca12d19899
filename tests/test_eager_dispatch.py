"""An engine's CPU time per layer to issue a step outside CUDA graphs
(``RuntimeTerms.eager_dispatch_layer_s``): it joins the FFN module's dispatch, which the
oracle overlaps with the GPU work (BestServe's Algorithm 1), so a dispatch-bound eager step
pays it once per layer, a GPU-bound one hides it, and graph steps -- full or piecewise --
never pay it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from serveplan.e2e import with_terms
from serveplan.estimator.ops import MOD_FFN
from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.runtime import RuntimeTerms, load_runtime_profile
from serveplan.kernels import roofline as K
from serveplan.resolution import resolve

LAYERS = 32  # Llama-3.1-8B
EXTRA = 1e-3  # s per layer: far above any per-layer GPU time of a one-token step


def _step(oracle: CostOracle, q, c) -> float:
    return oracle.step_time(q, c)


def test_a_dispatch_bound_eager_step_pays_it_once_per_layer():
    """One decode token, no graphs. Once the CPU issues each layer slower than the GPU runs
    it, the layers finish one dispatch apart: a further second per layer costs ``layers``
    seconds. Below that point the GPU's own time hides part of it (never more than
    ``layers x extra``)."""
    eager = CostOracle("llama-3.1-8b", "h100", cuda_graph=False)
    slow, slower = (eager.with_runtime(eager_dispatch_layer_s=x) for x in (EXTRA, 2 * EXTRA))
    assert _step(slower, [1], [100]) - _step(slow, [1], [100]) == pytest.approx(
        LAYERS * EXTRA, rel=1e-9)
    assert 0.0 < _step(slow, [1], [100]) - _step(eager, [1], [100]) <= LAYERS * EXTRA
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
    grown = _step(eager.with_runtime(eager_dispatch_layer_s=small), [8192], [0]) - _step(
        eager, [8192], [0])
    assert 0.0 <= grown <= small + 1e-12


def test_graph_steps_never_pay_it():
    """A decode batch replays a full graph; under piecewise graphs a mixed step up to the
    largest capture size replays the pieces around eager attention (whose dispatch the term
    does not touch). Both keep their time exactly; beyond the capture sizes the step runs
    eager, dispatch-bound at this size: each further second per layer costs ``layers``."""
    full = CostOracle("llama-3.1-8b", "h100")
    assert _step(full.with_runtime(eager_dispatch_layer_s=EXTRA), [1] * 8, [500] * 8) == \
        _step(full, [1] * 8, [500] * 8)
    piecewise = CostOracle("llama-3.1-8b", "h100", piecewise_cuda_graph=True, max_num_seqs=4)
    slow, slower = (piecewise.with_runtime(eager_dispatch_layer_s=x) for x in (EXTRA, 2 * EXTRA))
    assert _step(slow, [5, 1], [0, 300]) == _step(piecewise, [5, 1], [0, 300])  # 6 <= 8
    grown = _step(slower, [60, 1], [0, 300]) - _step(slow, [60, 1], [0, 300])  # 61 > 8
    assert grown == pytest.approx(LAYERS * EXTRA, rel=1e-9)


def test_the_engine_profile_sets_it_and_the_fitting_path_switches_it(tmp_path):
    prof = load_runtime_profile("vllm").model_dump(mode="json")
    prof["terms"] = {"eager_dispatch_layer_s": 2e-4}
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(prof))
    resolved = resolve({"pools": [{"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100",
                                   "engine": "vllm", "engine_version": "0.11.0",
                                   "runtime_profile": str(path)}]})
    oracle = resolved.pools[0].instance.oracle
    base = CostOracle("llama-3.1-8b", "h100").mods[MOD_FFN, K.M_DISPATCH]
    assert oracle.mods[MOD_FFN, K.M_DISPATCH] == pytest.approx(base + 2e-4)
    unfitted = with_terms(resolved, RuntimeTerms()).pools[0]
    assert unfitted.cost.mods[MOD_FFN, K.M_DISPATCH] == pytest.approx(base)


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
