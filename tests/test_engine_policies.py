"""Engine-faithful schedulers: event times derived by hand from each engine's rules.

Every step takes ``STEP`` seconds (``AffineStepCost(STEP)``), so each request's times
follow from the order of events written out in the test. The rules and the engine source
they come from are in ``docs/engines.md``: TensorRT-LLM's capacity and micro-batch
schedulers, SGLang's ``PrefillAdder`` / ``retract_decode`` / ``batch_is_full``, vLLM
0.6's multi-step scheduling.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_invariants import check_pool_intact
from test_sim_scheduler import make_requests

from serveplan.sim.engine import AffineStepCost, EngineParams, recorded_steps, run_engine
from serveplan.sim.engine_policies import burst_steps, kv_tokens_to_admit, tokens_emitted
from serveplan.sim.kvcache import make_pool
from serveplan.sim.scheduler import schedule
from serveplan.sim.state import (
    A_NEW_TOKEN_RATIO,
    FINISHED_IGNORED,
    I_BATCH,
    N_GLOB,
    PREEMPTED,
    WAITING,
    Policy,
    make_inst,
    make_reqs,
    wq_push_back,
)
from serveplan.sim.workload import PoissonArrivals, PrefixSharing, Uniform, generate_requests

STEP = 0.01
TRT_NO_EVICT, TRT_MAX_UTIL = Policy.TRTLLM_NO_EVICT, Policy.TRTLLM_MAX_UTILIZATION


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def run(requests, **params):
    params.setdefault("max_model_len", 4096)
    params.setdefault("enable_prefix_caching", False)
    return run_engine(requests, AffineStepCost(STEP), EngineParams(**params))


def times(res, name):
    return getattr(res.reqs, name)


# ---------------------------------------------------------------------------- TensorRT-LLM
# A (prompt 32, output 40) at 0, B (32, 40) at 0.001, C (16, 40) at 0.002; 16-token blocks.
# GUARANTEED_NO_EVICT reserves cdiv(prompt + output, 16) blocks to completion: 5, 5, 4.
ABC = ([0.0, 0.001, 0.002], [32, 32, 16], [40, 40, 40])


@pytest.mark.parametrize("blocks", [13, 14])
def test_trtllm_no_evict_reserves_blocks_to_completion(blocks):
    res = run(make_requests(*ABC), policy=TRT_NO_EVICT, num_gpu_blocks=blocks, block_size=16,
              enable_chunked_prefill=False)
    # t=0: A admitted (5 <= blocks), its prefill takes 2 blocks.
    # t=0.01: free = blocks - 2; A still needs 5 - 2 = 3 -> blocks - 5 left to reserve.
    #   B takes 5 -> blocks - 10 left; C needs 4: admitted iff blocks >= 14.
    # Otherwise C waits for A's end (A's 40 tokens at 0.01 .. 0.40): at t=0.40 only B
    # holds a reservation (5), so 5 blocks are left and C (4) enters.
    c_sched = 0.01 if blocks >= 14 else 0.40
    np.testing.assert_allclose(times(res, "t_sched"), [0.0, 0.01, c_sched], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_first"), [0.01, 0.02, c_sched + STEP], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_finish"), [0.40, 0.41, c_sched + 0.40],
                               atol=1e-9)
    np.testing.assert_array_equal(res.reqs.n_preempt, [0, 0, 0])  # never evicts
    assert recorded_steps(res.rec)["kv_used"].max() <= blocks


def test_trtllm_max_utilization_pauses_the_most_recently_started():
    res = run(make_requests(*ABC), policy=TRT_MAX_UTIL, num_gpu_blocks=10, block_size=16,
              enable_chunked_prefill=False)
    # Next-step blocks only: t=0 A (2 blocks); t=0.01 A's decode (block 3), B (2), C (1):
    # free 4. Before the step at t=0.01k (k >= 2) A has computed 31 + k tokens, B 30 + k,
    # C 14 + k, each needing a block when computed + 1 crosses a multiple of 16:
    # k=2: B block 3, C block 2 (free 2); k=17: A block 4 (free 1); k=18: B block 4
    # (free 0), C block 3 does not fit -> C, the most recently started, is paused
    # (its 2 blocks freed, n_out = 17 tokens so far). No admission in that step; from
    # k=19 C needs cdiv(16 + 17, 16) = 3 free blocks for its recompute; A (k=33) and B
    # (k=34) take the last two. A ends at 0.40 (5 blocks back): C recomputes 33 tokens in
    # [0.40, 0.41] (token 18), then 22 more tokens -> 0.63.
    np.testing.assert_array_equal(res.reqs.n_preempt, [0, 0, 1])
    np.testing.assert_allclose(times(res, "t_finish"), [0.40, 0.41, 0.63], atol=1e-9)
    assert res.reqs.itl_max[2] == pytest.approx(0.41 - 0.18)
    steps = recorded_steps(res.rec)
    assert steps["tokens"][40] == 1 + 33  # B's decode and C's recompute


def test_trtllm_context_needs_its_whole_prompt_in_the_token_budget():
    # A (32, 5) at 0, B (32, 2) at 0.001, C (16, 2) at 0.002; budget 40, no chunking.
    # t=0.01: A's generation token first (39 left), B's 32-token context (7 left); C's 16
    # do not fit -> C waits for t=0.02 (A and B decode: 38 left).
    reqs = make_requests([0.0, 0.001, 0.002], [32, 32, 16], [5, 2, 2])
    res = run(reqs, policy=TRT_NO_EVICT, num_gpu_blocks=100, block_size=16,
              max_num_batched_tokens=40, enable_chunked_prefill=False)
    np.testing.assert_allclose(times(res, "t_sched"), [0.0, 0.01, 0.02], atol=1e-9)
    np.testing.assert_array_equal(recorded_steps(res.rec)["tokens"][:3], [32, 33, 18])


@pytest.mark.parametrize("policy", [TRT_NO_EVICT, TRT_MAX_UTIL])
def test_trtllm_chunks_are_whole_blocks_after_the_generation_tokens(policy):
    # A (32, 5) at 0, B (100, 2) at 0.001; budget 40, chunked context (FCFS, 16-token unit).
    # t=0.01: A's token, then B gets min(100, 39) = 39 -> floored to 32; t=0.02: again 32;
    # t=0.03: B's last 36 fit whole (36 <= 39); t=0.04: A and B decode.
    reqs = make_requests([0.0, 0.001], [32, 100], [5, 2])
    res = run(reqs, policy=policy, num_gpu_blocks=100, block_size=16,
              max_num_batched_tokens=40)
    np.testing.assert_array_equal(recorded_steps(res.rec)["tokens"], [32, 33, 33, 37, 2])
    np.testing.assert_allclose(times(res, "t_first"), [0.01, 0.04], atol=1e-9)


# ---------------------------------------------------------------------------- SGLang
@pytest.mark.parametrize("tokens", [429, 430])
def test_sglang_reserves_future_tokens_and_closes_admission(tokens):
    # 1-token pages; new_token_ratio 1.0 (min 0.14, decay 0.86 / 600 per decode step).
    # A (10, 400) at 0; B (10, 10) at 0.001. At t=0.01 A has 1 token and holds 10 pages:
    # rem_total = (tokens - 10) - min(400 - 1, 4096) * 1.0 = tokens - 409; B needs
    # 10 + 10 < rem_total: admitted at 0.01 iff tokens >= 430. With 429 the refusal
    # (NO_TOKEN) sets batch_is_full: no prefill is tried again until the running batch
    # shrinks -- at A's end, 0.40 + 3.60 = 4.00 -- although from t=0.02 the decayed ratio
    # would admit B (418 - 398 * (1 - 0.86 / 600) = 20.57 > 20).
    reqs = make_requests([0.0, 0.001], [10, 10], [400, 10])
    res = run(reqs, policy=Policy.SGLANG, new_token_ratio=1.0, num_gpu_blocks=tokens,
              block_size=1)
    b_sched = 0.01 if tokens >= 430 else 4.00
    assert times(res, "t_sched")[1] == pytest.approx(b_sched)
    assert times(res, "t_finish")[1] == pytest.approx(b_sched + 0.10)


def test_sglang_ratio_decays_per_decode_step_and_resets_when_idle():
    init, low = 0.7, 0.7 * 0.14
    decay = (init - low) / 600
    # A (10, 11): 10 decode steps; B (10, 3) arrives to an idle instance: reset, 2 decodes
    one = run(make_requests([0.0], [10], [11]), policy=Policy.SGLANG, new_token_ratio=init,
              num_gpu_blocks=100, block_size=1)
    assert one.inst.acc[0, A_NEW_TOKEN_RATIO] == pytest.approx(init - 10 * decay, rel=1e-12)
    two = run(make_requests([0.0, 1.0], [10, 10], [11, 3]), policy=Policy.SGLANG,
              new_token_ratio=init, num_gpu_blocks=100, block_size=1)
    assert two.inst.acc[0, A_NEW_TOKEN_RATIO] == pytest.approx(init - 2 * decay, rel=1e-12)
    long = run(make_requests([0.0], [10], [700]), policy=Policy.SGLANG, new_token_ratio=init,
               num_gpu_blocks=1000, block_size=1)
    assert long.inst.acc[0, A_NEW_TOKEN_RATIO] == pytest.approx(low)  # floored


def test_sglang_retracts_fewest_outputs_longest_prompt_last_admitted():
    # 100 one-token pages, ratio 0.1. A (30, 60) at 0, B (30, 30) at 0.001, C (20, 30) at
    # 0.002.
    # t=0: A: 30 + 60 < 100, admitted.
    # t=0.01: offset 59 * 0.1 = 5.9, free 70: B (60 < 64.1) admitted, offset 65.9;
    #   C (50 >= 4.1): NO_TOKEN, admission closed. B's prefill runs alone.
    # t=0.02 + 0.01j: A and B decode (n_out 1 + j each, 40 - 2j pages free); at j = 20
    #   (0.22) no page is left: retract one -- A and B tie on outputs (21) and prompts
    #   (30): the last admitted, B, goes to the back of the queue (50 pages freed). Ratio
    #   = (21 + 20 * 1) / 60; the batch shrank, admission reopens.
    # t=0.23: offset 38 * 41/60 = 25.97, free 49: C (50) refused again, closed.
    # A's 60th token at 0.61. Then C (50 < 100) enters; B's recompute (51 + 9 >= 100 - 50)
    #   is refused. C: first token 0.62, last 0.91; B recomputes 51 tokens in [0.91, 0.92]
    #   (token 22) and ends at 1.00.
    reqs = make_requests([0.0, 0.001, 0.002], [30, 30, 20], [60, 30, 30])
    res = run(reqs, policy=Policy.SGLANG, new_token_ratio=0.1, num_gpu_blocks=100,
              block_size=1)
    np.testing.assert_array_equal(res.reqs.n_preempt, [0, 1, 0])
    np.testing.assert_allclose(times(res, "t_sched"), [0.0, 0.01, 0.61], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_first"), [0.01, 0.02, 0.62], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_finish"), [0.61, 1.00, 0.91], atol=1e-9)
    assert res.reqs.itl_max[1] == pytest.approx(0.92 - 0.22)


def test_sglang_finished_request_frees_its_slot_one_iteration_later():
    # max_running_requests 2: A (10, 3) and C (10, 10) at 0, B (10, 3) at 0.001.
    # t=0: A's prefill starts as A arrives (C arrives next, in the same instant).
    # t=0.01: C's prefill alone; with 2 running the batch is full: admission closes.
    # t=0.02 on: A and C decode; A's last token at 0.04. The iteration at 0.04 still
    #   counts A (SGLang filters finished requests in the decode iteration): it decodes C
    #   alone and reopens admission. t=0.05: B's prefill, alone (C waits a step).
    # C: tokens at 0.02 .. 0.05, 0.07 .. 0.12; B: 0.06 .. 0.08.
    reqs = make_requests([0.0, 0.0, 0.001], [10, 10, 10], [3, 10, 3])
    res = run(reqs, policy=Policy.SGLANG, new_token_ratio=0.7, num_gpu_blocks=1000,
              max_num_seqs=2)
    np.testing.assert_allclose(times(res, "t_sched"), [0.0, 0.01, 0.05], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_finish"), [0.04, 0.12, 0.08], atol=1e-9)
    assert res.reqs.itl_max[1] == pytest.approx(2 * STEP)


@pytest.mark.parametrize("ratio", [0.0, 0.7])
def test_sglang_mixed_chunk_runs_decodes_with_the_prefill(ratio):
    # A (16, 10) at 0, B (40, 2) at 0.015: t=0 A's prefill, t=0.01 A's decode, t=0.02 B's
    # prefill -- alone (A waits a step) or, with mixed chunks, with A's decode.
    reqs = make_requests([0.0, 0.015], [16, 40], [10, 2])
    kw = dict(policy=Policy.SGLANG, new_token_ratio=ratio, num_gpu_blocks=1000)
    split = run(reqs, **kw)
    mixed = run(reqs, enable_mixed_chunk=True, **kw)
    np.testing.assert_array_equal(recorded_steps(split.rec)["tokens"][:3], [16, 1, 40])
    np.testing.assert_array_equal(recorded_steps(mixed.rec)["tokens"][:3], [16, 1, 41])
    assert split.reqs.itl_max[0] == pytest.approx(2 * STEP)
    assert mixed.reqs.itl_max[0] == pytest.approx(STEP)


# ---------------------------------------------------------------------------- vLLM multi-step
def test_multi_step_allocates_the_burst_up_front():
    # prefill-priority with num_scheduler_steps 4, 16-token blocks. A (20, 10), B (20, 3).
    params = EngineParams(num_gpu_blocks=20, policy=Policy.PREFILL_PRIORITY,
                          num_scheduler_steps=4, block_size=16, enable_prefix_caching=False)
    knobs = params.knob_row()[None, :]
    pool, inst = make_pool([20]), make_inst(1, 4, 4, 8)
    reqs, glob = make_reqs([0.0, 0.0], [20, 20], [10, 3]), np.zeros(N_GLOB, dtype=np.int64)
    for r in (0, 1):
        wq_push_back(inst, 0, r)
        reqs.status[r] = WAITING
    assert schedule(pool, inst, reqs, knobs, glob, 0, 0.0) == 2  # both prompts, one step
    assert burst_steps(inst, reqs, knobs, 0) == 1
    for r in (0, 1):  # the prefill step's end: one token each
        reqs.n_out[r] += tokens_emitted(reqs, r)
    inst.ist[0, I_BATCH] = 0
    assert schedule(pool, inst, reqs, knobs, glob, 0, STEP) == 2
    # A: k = min(4, 10 - 1) = 4 tokens -> computed 24 (2 blocks); B: k = min(4, 3 - 1) = 2
    np.testing.assert_array_equal(inst.b_new[0, :2], [1, 1])
    np.testing.assert_array_equal(inst.b_ctx[0, :2], [20, 20])
    np.testing.assert_array_equal(reqs.computed, [24, 22])
    np.testing.assert_array_equal(inst.nblk[0, reqs.slot], [2, 2])
    assert burst_steps(inst, reqs, knobs, 0) == 4
    assert [tokens_emitted(reqs, r) for r in (0, 1)] == [4, 2]


def test_multi_step_tokens_reach_the_client_in_bursts():
    # A (20, 10) at 0, B (20, 2) at 0.02, num_scheduler_steps 4.
    # [0, 0.01] A's prefill (token 1); [0.01, 0.05] burst: tokens 2-5 at 0.05. B arrived
    # during the burst: [0.05, 0.06] its prefill alone (V0 runs prefills first).
    # [0.06, 0.10] burst: A tokens 6-9, B token 2 (done); [0.10, 0.14] A's last token --
    # the burst still takes 4 steps.
    reqs = make_requests([0.0, 0.02], [20, 20], [10, 2])
    res = run(reqs, policy=Policy.PREFILL_PRIORITY, num_scheduler_steps=4, num_gpu_blocks=100)
    np.testing.assert_allclose(times(res, "t_sched"), [0.0, 0.05], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_first"), [0.01, 0.06], atol=1e-9)
    np.testing.assert_allclose(times(res, "t_finish"), [0.14, 0.10], atol=1e-9)
    assert res.reqs.itl_max[0] == pytest.approx(0.05)  # 0.05 -> 0.10
    np.testing.assert_allclose(recorded_steps(res.rec)["dt"], [STEP, 4 * STEP, STEP,
                                                               4 * STEP, 4 * STEP])


# ---------------------------------------------------------------------------- capacity
def test_kv_tokens_to_admit():
    assert kv_tokens_to_admit(Policy.VLLM_V1, 0.0, 10, 5) == 14
    assert kv_tokens_to_admit(TRT_NO_EVICT, 0.0, 10, 5) == 15  # cdiv(prompt + output)
    assert kv_tokens_to_admit(Policy.SGLANG, 0.7, 10, 5) == 16  # 10 + 5 < free tokens
    assert kv_tokens_to_admit(Policy.SGLANG, 0.0, 10, 5) == 14
    assert kv_tokens_to_admit(Policy.SGLANG, 0.7, 10, 5000) == 5009  # the estimate clips


# ---------------------------------------------------------------------------- invariants
@st.composite
def engine_scenarios(draw):
    requests = generate_requests(
        draw(st.integers(1, 30)), PoissonArrivals(draw(st.floats(1.0, 200.0))),
        Uniform(1, draw(st.integers(1, 200))), Uniform(1, draw(st.integers(1, 40))),
        seed=draw(st.integers(0, 2**16)),
        prefix=PrefixSharing(2, draw(st.integers(0, 64)), 16) if draw(st.booleans()) else None)
    policy = draw(st.sampled_from([TRT_NO_EVICT, TRT_MAX_UTIL, Policy.SGLANG]))
    ratio = draw(st.sampled_from([0.0, 0.1, 0.7, 1.0])) if policy == Policy.SGLANG else 0.0
    block = draw(st.sampled_from([1, 4, 16]))
    need = kv_tokens_to_admit(policy, ratio, requests.prompt_len, requests.output_len)
    params = dict(
        policy=policy, new_token_ratio=ratio, block_size=block,
        num_gpu_blocks=int(-(-need.max() // block)) + draw(st.sampled_from([0, 1, 4, 200])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.integers(16, 600)),
        enable_prefix_caching=draw(st.booleans()),
        enable_chunked_prefill=draw(st.booleans()),
        enable_mixed_chunk=draw(st.booleans()),
    )
    if policy == Policy.SGLANG and params["enable_chunked_prefill"]:
        # SGLang's server_args require chunked_prefill_size % page_size == 0
        params["max_num_batched_tokens"] = -(-params["max_num_batched_tokens"] // block) * block
    return requests, params


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_scenarios())
def test_engine_policies_finish_every_request(case):
    """With KV for ``kv_tokens_to_admit`` every request finishes with all its tokens, the
    blocks and batches stay within bounds and GUARANTEED_NO_EVICT never preempts."""
    requests, params = case
    try:
        res = run_engine(requests, AffineStepCost(0.01), EngineParams(**params))
    except ValueError as exc:  # a whole prompt larger than the budget without chunking
        assert "max_num_batched_tokens" in str(exc) and not params["enable_chunked_prefill"]
        return
    r = res.reqs
    live = r.status != FINISHED_IGNORED
    assert np.all(r.status > PREEMPTED)
    np.testing.assert_array_equal(r.n_out[live], r.output[live])
    steps = recorded_steps(res.rec)
    assert steps["kv_used"].max() <= params["num_gpu_blocks"]
    assert steps["batch"].max() <= params["max_num_seqs"]
    check_pool_intact(res, 0)
    if params["policy"] == TRT_NO_EVICT:
        assert r.n_preempt.sum() == 0


# ------------------------------------------------------- TensorRT-LLM batch waiting
def test_trtllm_batch_waiting_holds_contexts_while_generation_runs():
    """``batch_wait_timeout_iters 3``, ``batch_wait_max_tokens_ratio 0.5`` of a 100-token
    budget (``PyExecutor._waiting_requests``): while generation requests run, new contexts
    are held as long as fewer than 3 iterations were held and the step would hold fewer
    than 50 tokens. A (16, 50) at 0 on an idle engine: prefill [0, 10], no wait (nothing
    generates). B (16, 2) at 15: the step formed at 20 would hold A's token + B's 16 = 17
    < 50: held at 20, 30 and 40 (counter 1, 2, 3); at 50 the counter has reached 3: B's
    prefill [50, 60], TTFT 45 ms (15 ms without waiting). A 60-token C at 15 (61 >= 50)
    is not held: [20, 30], TTFT 15 ms."""
    reqs = make_requests([0.0, 0.015], [16, 16], [50, 2])
    knobs = dict(policy=TRT_NO_EVICT, num_gpu_blocks=1000, max_num_batched_tokens=100,
                 enable_chunked_prefill=False)
    plain = run(reqs, **knobs)
    held = run(reqs, batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.5, **knobs)
    assert (times(plain, "t_first") - times(plain, "arrival"))[1] == pytest.approx(0.015)
    assert (times(held, "t_first") - times(held, "arrival"))[1] == pytest.approx(0.045)
    assert times(held, "t_first")[0] == pytest.approx(0.010)
    big = run(make_requests([0.0, 0.015], [16, 60], [50, 2]), batch_wait_timeout_iters=3,
              batch_wait_max_tokens_ratio=0.5, **knobs)
    assert (times(big, "t_first") - times(big, "arrival"))[1] == pytest.approx(0.015)
