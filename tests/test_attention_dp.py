"""Attention data-parallel ranks: schedulers of their own that step in lockstep.

An engine with ``dp`` attention-DP ranks (vLLM ``--data-parallel-size``, SGLang
``--enable-dp-attention``, TensorRT-LLM ``enable_attention_dp``) gives each rank its own
scheduler, requests and KV cache, but the ranks meet in every MoE layer's collectives: idle
ranks run dummy batches (vLLM ``execute_dummy_batch``, SGLang ``ForwardMode.IDLE``) and a
step ends when the slowest rank's does.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.oracle import CostOracle
from serveplan.kernels import roofline as K
from serveplan.kernels.reference import step_time_ref
from serveplan.resolution import resolve
from serveplan.sim.costs import AffineStepCost
from serveplan.sim.kvlink import KVLink
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import DPTokens, PoolSpec
from serveplan.sim.step import dp_moe_tokens
from serveplan.sim.workload import Requests


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _two_requests() -> Requests:
    """A: t = 0, prompt 10, output 3. B: t = 1 ms, prompt 200, output 2."""
    return Requests(arrival_s=np.array([0.0, 0.001]), prompt_len=np.array([10, 200]),
                    output_len=np.array([3, 2]))


def _run(lockstep: int):
    params = EngineParams(num_gpu_blocks=64, max_model_len=1024)
    pool = PoolSpec(params, AffineStepCost(0.002, 1e-4), 2, lockstep=lockstep)
    res = run_pools(_two_requests(), [pool], router="round-robin")
    r = res.reqs
    return r.inst.tolist(), r.t_first * 1e3, res.pd.t_finish[:2] * 1e3


def test_lockstep_ranks_wait_for_the_slowest():
    """Steps cost 2 ms + 0.1 ms per token; round robin sends A to rank 0, B to rank 1.

    Lockstep: A's prefill runs 0 -> 3 ms (rank 1 has nothing yet). B, arriving at 1 ms,
    waits for that step. At 3 ms both ranks start: A decodes (2.1 ms), B prefills 200
    tokens (22 ms); both end at 25 ms, so A's second token comes at 25 ms, not 5.1. Then
    both decode (2.1 ms): A's third and B's second token at 27.1 ms.

    Independent ranks: A at 3, 5.1, 7.2 ms; B prefills 1 -> 23 ms and decodes to 25.1 ms.
    """
    inst, first, finish = _run(lockstep=2)
    assert inst == [0, 1]
    assert first == pytest.approx([3.0, 25.0])
    assert finish == pytest.approx([27.1, 27.1])
    _, first, finish = _run(lockstep=1)
    assert first == pytest.approx([3.0, 23.0])
    assert finish == pytest.approx([7.2, 25.1])


def test_lockstep_must_divide_the_instances():
    params = EngineParams(num_gpu_blocks=64)
    with pytest.raises(ValueError, match="lockstep must be an integer >= 1 that divides"):
        PoolSpec(params, AffineStepCost(0.01), 3, lockstep=2)


def test_a_python_policy_cannot_drive_lockstep_ranks():
    params = EngineParams(num_gpu_blocks=64, max_model_len=1024)
    pool = PoolSpec(params, AffineStepCost(0.01), 2, lockstep=2)
    with pytest.raises(ValueError, match="cannot drive attention-DP ranks in lockstep"):
        run_pools(_two_requests(), [pool], policy=lambda ctx: None)


def _pool(**kw) -> dict:
    return {"pools": [{"model": "qwen3-30b-a3b", "gpu": "h100", "role": "colocated",
                       "tp": 1, "dp": 4, "ep": 4, "max_num_seqs": 64, **kw}]}


def test_a_dp_instance_runs_as_dp_ranks_of_its_own():
    """dp 4 on 2 instances: 8 schedulers in lockstep groups of 4; vLLM (and the engine-less
    default) gives every rank the whole max_num_seqs and the rank's own KV plan."""
    rp = resolve(_pool(count=2)).pools[0]
    spec = rp.spec()
    assert (spec.num_instances, spec.lockstep) == (8, 4)
    assert spec.params.max_num_seqs == 64
    assert spec.params.num_gpu_blocks == rp.instance.memory["num_gpu_blocks"] - 1


def test_sglang_divides_its_limits_over_dp_ranks():
    """SGLang under --enable-dp-attention: max_running_requests // dp_size per rank
    (TpModelWorker) and chunked_prefill_size // dp_size (ServerArgs): 64 // 4 = 16 and
    8192 // 4 = 2048 (a multiple of its 16-token pages here)."""
    rp = resolve(_pool(engine="sglang", max_num_batched_tokens=8192, block_size=16)).pools[0]
    assert rp.params.max_num_seqs == 16
    assert rp.params.max_num_batched_tokens == 2048
    vllm = resolve(_pool(engine="vllm", max_num_batched_tokens=8192)).pools[0]
    assert (vllm.params.max_num_seqs, vllm.params.max_num_batched_tokens) == (64, 8192)


def test_kv_link_places_each_dp_rank_on_its_own_gpus():
    """One TP 8 prefill instance (GPUs 0-7, node 0) and two decode instances of tp 4 x dp 2
    (GPUs 8-15 and 16-23): decode ranks start at GPUs 8, 12, 16, 20 -> nodes 1, 1, 2, 2."""
    pre = CostOracle("qwen3-30b-a3b", "h100", tp=8)
    dec = CostOracle("qwen3-30b-a3b", "h100", tp=4, dp=2, ep=8)
    link = KVLink.from_specs(pre, dec, 1, 2, decode_ranks=2)
    p_nodes, d_nodes = link.nodes(1, 4)
    assert p_nodes.tolist() == [0] and d_nodes.tolist() == [1, 1, 2, 2]
    # the goodput search runs the same link
    from serveplan.config import PoissonWorkload
    from serveplan.fidelity import PreparedDeployment

    inst = {"model": "qwen3-30b-a3b", "gpu": "h100", "max_model_len": 4096}
    pd = {"architecture": "pd", "prefill": {**inst, "tp": 8, "num_instances": 1},
          "decode": {**inst, "tp": 4, "dp": 2, "ep": 8, "num_instances": 2}}
    work = PoissonWorkload(kind="poisson", rate=1.0, num_requests=10, isl=256, osl=8)
    p_nodes, d_nodes = PreparedDeployment(pd, work, seeds=(0,)).serving.link.nodes(1, 4)
    assert p_nodes.tolist() == [0] and d_nodes.tolist() == [1, 1, 2, 2]


def test_dp_ranks_serve_more_than_one_rank_at_the_same_load():
    """Closed loop of 64 clients on Qwen3-30B-A3B, H100: one dp 4 / ep 4 instance spreads
    them over four ranks of 16, so its decode steps are priced at a rank's 16 sequences
    rather than 64 on one rank: TPOT falls below the dp 1 instance's, which runs all 64 on
    one GPU (the MoE sees 4 x 16 = 64 tokens either way; attention and the dense layers
    see a quarter)."""
    from serveplan.simulation import _run

    def tpot(dp: int) -> float:
        n = 256
        reqs = Requests(arrival_s=np.full(n, np.nan), prompt_len=np.full(n, 512),
                        output_len=np.full(n, 64), concurrency=64)
        res = _run(resolve(_pool(dp=dp, ep=dp)), reqs)
        r = res.reqs
        return float(np.median((res.pd.t_finish[:n] - r.t_first) / 63))

    assert tpot(4) < tpot(1)


def test_goodput_and_search_bound_count_every_dp_rank():
    """The analytic capacity counts schedulers (two dp 2 instances: exactly twice one), the
    search's upper bound stays above the goodput the event loop decides for a dp 2
    instance (a bound counting one rank per instance would prune it), and its two ranks
    serve more than one GPU alone."""
    from serveplan.config import SLO, PoissonWorkload
    from serveplan.fidelity import PreparedDeployment
    from serveplan.goodput import find_goodput
    from serveplan.search import upper_bound

    base = {"model": "qwen3-30b-a3b", "gpu": "h100", "tp": 1, "num_instances": 1,
            "max_model_len": 4096, "max_num_seqs": 32}
    work = PoissonWorkload(kind="poisson", rate=1.0, num_requests=400, isl=1024, osl=64)
    slo = SLO(ttft_ms=1000, tpot_ms=60)
    one = PreparedDeployment(base, work, seeds=(0,))
    two = PreparedDeployment({**base, "ep": 2, "dp": 2}, work, seeds=(0,))
    per_rank = two.capacity() / 2
    assert per_rank == pytest.approx(PreparedDeployment(
        {**base, "ep": 2, "dp": 2, "num_instances": 2}, work, seeds=(0,)).capacity() / 4)
    g = find_goodput(two, slo, fidelity="iteration", seeds=(0,), rtol=0.1)
    assert g.rate > 0
    assert upper_bound(two, slo) >= g.rate
    assert g.rate > find_goodput(one, slo, fidelity="iteration", seeds=(0,), rtol=0.1).rate


# --- what the MoE layers of the ranks see together (DPTokens) ------------------------------

@pytest.mark.parametrize(("rule", "n", "total", "most", "extend", "expected"), [
    (DPTokens.MAX, 4, 5, 4, False, 16),   # vLLM pads every rank to the busiest: 4 x 4
    (DPTokens.MAX, 4, 5, 4, True, 16),
    (DPTokens.SUM, 4, 5, 4, False, 5),    # TensorRT-LLM gathers what the ranks hold
    (DPTokens.SGLANG, 4, 5, 4, True, 5),  # extend in the batch: SUM_LEN
    (DPTokens.SGLANG, 4, 5, 4, False, 5),  # decode, 2 x 5 < 4 x 4: SUM_LEN
    (DPTokens.SGLANG, 2, 5, 4, False, 8),  # decode, 2 x 5 >= 2 x 4: MAX_LEN
    (DPTokens.SGLANG, 2, 4, 4, False, 8),  # a tie goes to MAX_LEN (`>=` in SGLang)
])
def test_dp_moe_tokens_follow_each_engines_rule(rule, n, total, most, extend, expected):
    """SGLang ``DpPaddingMode.get_dp_padding_mode``: SUM_LEN when a rank extends, else
    MAX_LEN if ``sum_len * 2 >= max_len * dp_size``; vLLM ``get_dp_padding`` pads to the
    max; TensorRT-LLM sends each rank's own tokens."""
    assert dp_moe_tokens(int(rule), n, total, most, extend) == expected


def _moe_step(oracle, new, ctx, moe_tokens):
    """The NumPy reference step of one rank whose MoE rows see ``moe_tokens`` tokens."""
    ops, mods, prm, gs = oracle.kernel_args
    prm = prm.copy()
    prm[K.P_MOE_TOKENS] = moe_tokens / sum(new)
    return step_time_ref(np.array(new), np.array(ctx), ops, mods, prm, gs)


@pytest.mark.parametrize("rule", [DPTokens.MAX, DPTokens.SUM, DPTokens.SGLANG])
def test_a_group_step_prices_the_moe_at_the_groups_tokens(rule):
    """Qwen3-30B-A3B on H100, tp 1 x dp 2 x ep 2; round robin: A (t = 0, 32-token prompt,
    2 tokens out) on rank 0, B (t = 0.1 ms, 512-token prompt) on rank 1.

    Step 1: A prefills alone; its experts see 2 x 32 = 64 tokens (MAX) or 32 (SUM; SGLang
    extends, so SUM_LEN). Step 2: A decodes 1 token while B prefills 512; the experts see
    2 x 512 = 1,024 (MAX) or 513 (SUM, SGLang) tokens on both ranks, and the step ends with
    the slower rank. Each rank's time is the NumPy reference's."""
    oracle = CostOracle("qwen3-30b-a3b", "h100", tp=1, dp=2, ep=2)
    params = EngineParams(num_gpu_blocks=256, max_model_len=2048)
    pool = PoolSpec(params, oracle, 2, lockstep=2, dp_tokens=rule)
    reqs = Requests(arrival_s=np.array([0.0, 1e-4]), prompt_len=np.array([32, 512]),
                    output_len=np.array([2, 1]))
    res = run_pools(reqs, [pool], router="round-robin")
    pad = rule == DPTokens.MAX
    t1 = _moe_step(oracle, [32], [0], 64 if pad else 32)
    g2 = 1024 if pad else 513
    t2 = t1 + max(_moe_step(oracle, [1], [32], g2), _moe_step(oracle, [512], [0], g2))
    assert res.reqs.inst.tolist() == [0, 1]
    assert res.reqs.t_first == pytest.approx([t1, t2], rel=1e-9)
    assert res.pd.t_finish[:2] == pytest.approx([t2, t2], rel=1e-9)


def test_padding_to_the_busiest_rank_is_the_oracles_own_dp_price():
    """With MAX a rank holding the most tokens is priced exactly as the oracle prices one
    rank of its dp (every rank taken as loaded alike), and no rule charges more than MAX."""
    oracle = CostOracle("qwen3-30b-a3b", "h100", tp=1, dp=2, ep=2)
    assert _moe_step(oracle, [512], [0], 1024) == pytest.approx(
        oracle.step_time(np.array([512]), np.array([0])), rel=1e-9)
    assert _moe_step(oracle, [512], [0], 513) < _moe_step(oracle, [512], [0], 1024)


def test_each_engine_gets_its_own_rule():
    pools = {e: resolve(_pool(engine=e)).pools[0] for e in ("vllm", "sglang", "trtllm")}
    assert {e: p.spec().dp_tokens for e, p in pools.items()} == {
        "vllm": DPTokens.MAX, "sglang": DPTokens.SGLANG, "trtllm": DPTokens.SUM}
    assert resolve(_pool()).pools[0].spec().dp_tokens == DPTokens.MAX  # no engine: vLLM's
    eager = resolve(_pool(engine="vllm", cuda_graph=False)).pools[0]
    assert eager.spec().dp_tokens == DPTokens.SUM  # vLLM pads only with CUDA graphs
