"""TensorRT-LLM's attention-DP balance (``attention_dp_config.enable_balance``).

``PyExecutor._balance_adp_requests`` runs every iteration on every attention-DP rank with
the counts all ranks gather (scheduled contexts, scheduled generation requests):

* every rank has a free slot (generation requests < ``max_batch_size``) and a context to
  schedule: the waiting count restarts; if every rank also has generation requests, the
  contexts wait while fewer than ``batching_wait_iters`` iterations did, else they go;
* otherwise the waiting count grows and the contexts wait -- unless it reached
  ``timeout_iters`` or some rank has no generation request, when it restarts and they go.

The count grows on every iteration that is not the first case, with or without a context
anywhere. Without attention DP's balance, TensorRT-LLM also skips its batch waiting
(``batch_wait_timeout_iters``) under attention DP (``_schedule``:
``not self.enable_attention_dp and self.enable_batch_waiting``).

Every run below: two ranks in lockstep, steps of 2 ms + 0.1 ms a token, round robin, no
async scheduling. A (t = 0, 10-token prompt) goes to rank 0 and prefills 0 -> 3 ms (rank 1
has no generation request: contexts go); B (0.5 ms) goes to rank 1 and prefills 3 -> 6 ms
while A decodes (rank 0 has no context, rank 1 no generation request: they go). From 6 ms
both decode, 2.1 ms a step: 6, 8.1, 10.2, 12.3, 14.4 ms. C (10 ms, 100-token prompt) goes
to rank 0 and is first scheduled at 10.2 ms.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.costs import AffineStepCost
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams, Policy
from serveplan.sim.pools import PoolSpec
from serveplan.sim.workload import Requests


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _first_tokens_ms(arrivals, prompts, outputs, lockstep=2, **knobs):
    params = EngineParams(num_gpu_blocks=256, max_model_len=1024,
                          policy=Policy.TRTLLM_NO_EVICT, enable_chunked_prefill=False,
                          **knobs)
    pool = PoolSpec(params, AffineStepCost(0.002, 1e-4), 2, lockstep=lockstep)
    reqs = Requests(arrival_s=np.array(arrivals), prompt_len=np.array(prompts),
                    output_len=np.array(outputs))
    res = run_pools(reqs, [pool], router="round-robin")
    assert res.reqs.inst.tolist() == [k % 2 for k in range(len(arrivals))]
    return res.reqs.t_first * 1e3


ABC = ([0.0, 0.0005, 0.010], [10, 10, 100], [30, 30, 2])


def test_without_balance_a_context_goes_at_once():
    """C prefills in the 10.2 ms step: 2 ms + 0.1 ms x (100 + A's decode) = 12.1 ms."""
    assert _first_tokens_ms(*ABC) == pytest.approx([3.0, 6.0, 22.3])


def test_a_context_waits_for_the_timeout_when_one_rank_has_none():
    """Timeout 5: the count restarts at 3 ms (rank 1 had no generation request), then
    grows 1, 2 at 6 and 8.1 ms (no context anywhere), 3, 4 at 10.2 and 12.3 ms (C waits: rank
    1 has none) and reaches 5 at 14.4 ms: C goes, 14.4 + 12.1 = 26.5 ms."""
    got = _first_tokens_ms(*ABC, attention_dp_balance=True, attention_dp_timeout_iters=5,
                           attention_dp_batching_wait_iters=0)
    assert got == pytest.approx([3.0, 6.0, 26.5])
    # a timeout the idle iterations already reached lets C go at once
    got = _first_tokens_ms(*ABC, attention_dp_balance=True, attention_dp_timeout_iters=3,
                           attention_dp_batching_wait_iters=0)
    assert got == pytest.approx([3.0, 6.0, 22.3])


def test_contexts_on_every_rank_wait_the_batching_iterations():
    """D (10.05 ms, 100 tokens) goes to rank 1: at 10.2 ms both ranks have a context and a
    generation request, so they wait batching_wait_iters = 2 iterations (10.2, 12.3 ms) and
    go at 14.4 ms: both first tokens at 26.5 ms (22.3 ms without the balance)."""
    arrivals, prompts, outputs = ABC[0] + [0.01005], ABC[1] + [100], ABC[2] + [2]
    got = _first_tokens_ms(arrivals, prompts, outputs, attention_dp_balance=True,
                           attention_dp_timeout_iters=50, attention_dp_batching_wait_iters=2)
    assert got == pytest.approx([3.0, 6.0, 26.5, 26.5])
    assert _first_tokens_ms(arrivals, prompts, outputs) == pytest.approx([3.0, 6.0, 22.3, 22.3])


def test_attention_dp_ranks_skip_batch_waiting():
    """Batch waiting (40 iterations, up to the whole budget) would hold C; under attention
    DP TensorRT-LLM skips it, so C goes at 10.2 ms as without it."""
    got = _first_tokens_ms(*ABC, batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=1.0)
    assert got == pytest.approx([3.0, 6.0, 22.3])


def test_balance_knobs_are_checked():
    with pytest.raises(ValueError, match="attention_dp_timeout_iters must be an integer >= 0"):
        EngineParams(num_gpu_blocks=8, policy=Policy.TRTLLM_NO_EVICT,
                     attention_dp_balance=True, attention_dp_timeout_iters=-1)
    with pytest.raises(ValueError, match="attention_dp_balance is TensorRT-LLM's"):
        EngineParams(num_gpu_blocks=8, attention_dp_balance=True)


def _pool(**kw) -> dict:
    return {"role": "colocated", "model": "qwen3-30b-a3b", "gpu": "h100", "engine": "trtllm",
            "tp": 1, "dp": 2, "ep": 2, "max_model_len": 4096, **kw}


def test_a_pool_passes_its_attention_dp_config_to_the_engine():
    from serveplan.resolution import resolve

    cfg = {"enable_balance": True, "timeout_iters": 60, "batching_wait_iters": 0}
    params = resolve({"pools": [_pool(attention_dp_config=cfg)]}).pools[0].instance.params
    assert params.attention_dp_balance and params.attention_dp_timeout_iters == 60
    assert params.attention_dp_batching_wait_iters == 0
    plain = resolve({"pools": [_pool()]}).pools[0].instance.params
    assert not plain.attention_dp_balance


def test_attention_dp_config_needs_trtllm_and_dp():
    from pydantic import ValidationError

    from serveplan.pools_config import to_pools

    cfg = {"enable_balance": True}
    with pytest.raises(ValidationError, match=r"pools.0.attention_dp_config\n  TensorRT-LLM's"):
        to_pools({"pools": [_pool(dp=1, ep=1, attention_dp_config=cfg)]})
    with pytest.raises(ValidationError, match=r"got engine vllm, dp 2"):
        to_pools({"pools": [_pool(engine="vllm", attention_dp_config=cfg)]})
    with pytest.raises(ValidationError, match="timeout_iters"):
        to_pools({"pools": [_pool(attention_dp_config={"timeout_iters": -3})]})
