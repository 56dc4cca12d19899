"""Pipeline parallelism keeps ``pp`` micro-batches in flight: throughput grows with ``pp``."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.resolution import resolve
from serveplan.sim.workload import Requests
from serveplan.simulation import _run


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _deployment(pp: int) -> dict:
    return {"pools": [{"role": "colocated", "model": "llama-3.1-70b", "gpu": "h100", "tp": 4,
                       "pp": pp, "count": 1, "max_num_seqs": 64, "max_model_len": 4096,
                       "enable_prefix_caching": False}]}


def test_a_pipelined_instance_runs_as_pp_virtual_engines():
    """pp = 2: two virtual engines, each with half the instance's KV blocks."""
    res = resolve(_deployment(2))
    (spec,) = res.pool_specs()
    assert spec.num_instances == 2
    assert spec.params.num_gpu_blocks == res.params.num_gpu_blocks // 2


def test_decode_throughput_grows_with_pp_at_the_same_step_latency():
    """256 closed-loop clients decoding 512 tokens after 64-token prompts, max_num_seqs 64.
    With pp = 1 one engine steps 64 requests, each step taking L1(64); with pp = 2 two
    virtual engines step 64 each, each step taking the whole pipeline's latency L2(64)
    (about L1(64): the same layers, one activation send more). Token throughput ratio
    (pp2 / pp1) = (2 * 64 / L2(64)) / (64 / L1(64)) = 2 L1(64) / L2(64), both latencies
    from the oracle at the mean context (64 + 256 tokens). Prefills are a small share of
    the steps; allow 10 %."""
    n, conc, prompt, output = 768, 256, 64, 512
    req = Requests(arrival_s=np.full(n, np.nan), prompt_len=np.full(n, prompt),
                   output_len=np.full(n, output), concurrency=conc)
    rate = {}
    for pp in (1, 2):
        res = resolve(_deployment(pp))
        out = _run(res, req)
        span = np.nanmax(out.reqs.t_finish) - np.nanmin(out.reqs.arrival)
        rate[pp] = n * output / span
    ctx = prompt + output / 2
    l1 = float(resolve(_deployment(1)).oracle.decode_time(64, ctx))
    l2 = float(resolve(_deployment(2)).oracle.decode_time(64, ctx))
    assert rate[2] / rate[1] == pytest.approx(2 * l1 / l2, rel=0.10)
    assert rate[2] > 1.5 * rate[1]
