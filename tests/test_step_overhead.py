"""An engine's GPU time per step outside the forward pass (``RuntimeTerms.step_overhead_s``):
it replaces the GPU profile's ``step_overhead_s`` in every step the engine's pools run, and
the fitting path (``serveplan.e2e.with_terms``) switches it both ways -- as it does the
oracle's other runtime term, the eager dispatch (``eager_dispatch_layer_s``, priced in
``test_eager_dispatch.py``)."""

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
from serveplan.simulation import simulate

PROFILE_S = 0.5e-3  # the shipped GPU profiles' step_overhead_s


def _profile(tmp_path, **terms) -> str:
    prof = load_runtime_profile("vllm").model_dump(mode="json")
    prof["terms"] = terms
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(prof))
    return str(path)


def _pools(runtime_profile: str) -> dict:
    return {"pools": [{"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100",
                       "engine": "vllm", "engine_version": "0.11.0",
                       "runtime_profile": runtime_profile}]}


def test_an_oracle_with_another_step_overhead_differs_by_it_in_every_step():
    """step = forward pass + overhead: 0.2 ms instead of 0.5 ms takes 0.3 ms off any step,
    decode or prefill; None restores the profile's value; the original is untouched."""
    oracle = CostOracle("llama-3.1-8b", "h100")
    assert oracle.profile.step_overhead_s == PROFILE_S
    fast = oracle.with_runtime(0.2e-3)
    for q, c in (([1] * 8, [1000] * 8), ([512], [0])):
        assert oracle.step_time(q, c) - fast.step_time(q, c) == pytest.approx(0.3e-3, abs=1e-12)
    assert fast.profile.step_overhead_s == 0.2e-3
    assert fast.with_runtime(None).step_time([4], [100]) == oracle.step_time([4], [100])
    assert oracle.prm[K.P_STEP_OVERHEAD] == PROFILE_S
    assert oracle.with_runtime(PROFILE_S) is oracle


def test_the_engine_profile_sets_it_and_the_fitting_path_switches_it(tmp_path):
    resolved = resolve(_pools(_profile(tmp_path, step_overhead_s=0.2e-3)))
    pool = resolved.pools[0]
    assert pool.instance.oracle.prm[K.P_STEP_OVERHEAD] == 0.2e-3
    assert pool.instance.describe()["runtime_terms"]["step_overhead_s"] == 0.2e-3
    unfitted = with_terms(resolved, RuntimeTerms()).pools[0]  # None: the GPU profile's
    assert unfitted.cost is unfitted.instance.oracle
    assert unfitted.cost.prm[K.P_STEP_OVERHEAD] == PROFILE_S
    refit = with_terms(resolved, RuntimeTerms(step_overhead_s=1e-3)).pools[0]
    assert refit.cost.prm[K.P_STEP_OVERHEAD] == 1e-3


def test_the_engine_profile_sets_the_eager_dispatch_and_the_fitting_path_switches_it(tmp_path):
    """``eager_dispatch_layer_s`` joins the FFN module's dispatch of the pool's oracle."""
    resolved = resolve(_pools(_profile(tmp_path, eager_dispatch_layer_s=2e-4)))
    base = CostOracle("llama-3.1-8b", "h100").mods[MOD_FFN, K.M_DISPATCH]
    assert resolved.pools[0].instance.oracle.mods[MOD_FFN, K.M_DISPATCH] == pytest.approx(
        base + 2e-4)
    unfitted = with_terms(resolved, RuntimeTerms()).pools[0]
    assert unfitted.cost.mods[MOD_FFN, K.M_DISPATCH] == pytest.approx(base)


def test_a_lone_requests_decode_steps_each_take_the_difference(tmp_path):
    """One client, so one request at a time, 32 output tokens: each of its 31 decode steps
    runs alone, so TPOT moves by exactly 0.5 - 0.2 = 0.3 ms."""
    load = {"kind": "closed-loop", "concurrency": 1, "num_requests": 5, "isl": 256, "osl": 32}
    default = simulate(_pools(_profile(tmp_path)), load)
    (tmp_path / "fast").mkdir()
    fast = simulate(_pools(_profile(tmp_path / "fast", step_overhead_s=0.2e-3)), load)
    tpot = lambda ds: (ds["e2e_s"] - ds["ttft_s"]).values / 31  # noqa: E731
    np.testing.assert_allclose(tpot(default) - tpot(fast), 0.3e-3, rtol=0, atol=1e-9)
