"""The runtime around the GPU step: async scheduling, per-step CPU work, the front end.

Every expected time is written out by hand from the engines' event order with affine step
costs (known step times), so a test fails if the loop orders an event differently.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from serveplan.sim.costs import AffineStepCost
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import PoolSpec
from serveplan.sim.runtime import FrontEnd, StepRuntime
from serveplan.sim.workload import Requests

STEP = 0.010  # every step takes 10 ms


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _params(**kw) -> EngineParams:
    return EngineParams(num_gpu_blocks=1000, max_model_len=4096, **kw)


def _run(arrival, prompt, output, *, concurrency=None, runtime=None, frontend=None,
         think=None, **kw):
    req = Requests(arrival_s=np.asarray(arrival, dtype=float), prompt_len=np.asarray(prompt),
                   output_len=np.asarray(output), concurrency=concurrency,
                   client_delay_s=think)
    pool = PoolSpec(_params(**kw), AffineStepCost(STEP), runtime=runtime)
    return run_pools(req, [pool], frontend=frontend).reqs


def test_async_scheduling_lets_an_arrival_join_one_step_later():
    """Request A (t = 0) runs alone: its prefill is the step [0, 10 ms], its decodes
    [10, 20], [20, 30], ... Request B reaches the engine at 15 ms, during A's second step.

    Synchronous scheduler: the step after the running one is formed when it ends (20 ms),
    so B's prefill is the step [20, 30] and its TTFT is 30 - 15 = 15 ms.
    Async scheduling (vLLM V1 ``--async-scheduling``): the step [20, 30] was formed when
    the step [10, 20] started, at 10 ms, before B arrived; B joins the step formed at
    20 ms, which runs [30, 40]: TTFT 40 - 15 = 25 ms, one step later."""
    args = ([0.0, 0.015], [16, 16], [50, 2])
    sync = _run(*args)
    async_ = _run(*args, async_scheduling=True)
    assert sync.t_first[1] - sync.arrival[1] == pytest.approx(0.015)
    assert async_.t_first[1] - async_.arrival[1] == pytest.approx(0.025)
    # A's own token times are the same: its decodes are scheduled ahead either way
    np.testing.assert_allclose(sync.t_first[0], async_.t_first[0])


def test_async_scheduling_on_an_idle_engine_schedules_at_once():
    """A request that reaches an idle engine is scheduled at once, async or not: with A
    finished at 20 ms (prefill [0, 10], one decode [10, 20]), B arriving at 0.5 s gets its
    first token at 0.51 s."""
    res = _run([0.0, 0.5], [16, 16], [2, 2], async_scheduling=True)
    assert res.t_finish[0] == pytest.approx(0.020)
    assert res.t_first[1] == pytest.approx(0.510)


def test_step_cpu_work_adds_without_async_and_overlaps_with_it():
    """CPU work per step 4 ms + 1 ms per request, GPU 10 ms. One request, prompt 16,
    output 3 (three steps of one request): synchronous steps take 10 + 4 + 1 = 15 ms
    (finish 45 ms); with async scheduling max(10, 5) = 10 ms (finish 30 ms). A GPU extra of
    2 ms per step (e.g. tensor-parallel synchronisation) adds to the GPU side: 12 ms."""
    rt = StepRuntime(cpu_base_s=0.004, cpu_per_request_s=0.001)
    assert _run([0.0], [16], [3], runtime=rt).t_finish[0] == pytest.approx(0.045)
    assert _run([0.0], [16], [3], runtime=rt, async_scheduling=True).t_finish[0] == \
        pytest.approx(0.030)
    rt_gpu = StepRuntime(gpu_extra_s=0.002)
    assert _run([0.0], [16], [3], runtime=rt_gpu).t_finish[0] == pytest.approx(0.036)


def test_prefill_tokens_lengthen_the_steps_that_hold_them():
    """0.1 ms per prompt token of a step on the GPU side. A (prompt 16, output 3) at 0:
    its prefill step takes 10 + 1.6 = 11.6 ms, its decodes 10 ms: tokens at 11.6, 21.6,
    31.6. B (prompt 20, output 2) at 15 joins the step formed at 21.6, which holds A's
    decode and B's 20 prompt tokens: 10 + 2 = 12 ms, so A's third token comes at 33.6 and
    B's first at 33.6 too; B's last at 43.6."""
    rt = StepRuntime(gpu_per_prefill_token_s=1e-4)
    res = _run([0.0, 0.015], [16, 20], [3, 2], runtime=rt)
    assert res.t_first.tolist() == pytest.approx([0.0116, 0.0336])
    assert res.t_finish.tolist() == pytest.approx([0.0336, 0.0436])


def test_a_prompt_carrying_step_pays_its_per_step_cost_once():
    """5 ms once per step that carries prompt tokens, however many. A (prompt 16, output 3)
    at 0: its prefill step takes 10 + 5 = 15 ms, its decodes 10 ms: tokens at 15, 25, 35.
    B (prompt 20, output 2) at 18 joins the step formed at 25 with A's last decode: 15 ms,
    so A finishes and B gets its first token at 40; B's last at 50. Two prompts that wait
    together (B and C at 5 ms, during A's prefill) share the step formed at 15 ms with A's
    decode and pay the 5 ms once: [15, 30], every first token of theirs at 30 ms."""
    rt = StepRuntime(gpu_per_prefill_step_s=0.005)
    res = _run([0.0, 0.018], [16, 20], [3, 2], runtime=rt)
    assert res.t_first.tolist() == pytest.approx([0.015, 0.040])
    assert res.t_finish.tolist() == pytest.approx([0.040, 0.050])
    shared = _run([0.0, 0.005, 0.005], [16, 20, 24], [3, 2, 2], runtime=rt)
    assert shared.t_first.tolist() == pytest.approx([0.015, 0.030, 0.030])


def test_the_expert_term_scales_with_moe_layers_times_experts():
    """7 us per MoE layer and expert: DeepSeek-V3's 58 MoE layers of 256 experts cost
    58 x 256 x 7e-6 = 0.103936 s per prompt-carrying step; a dense model nothing, and a
    disaggregated prefill instance nothing."""
    from serveplan.estimator.runtime import RuntimeTerms

    terms = RuntimeTerms(prefill_step_expert_layer_s=7e-6)
    assert terms.step_runtime(61, 8, 58 * 256).gpu_per_prefill_step_s == pytest.approx(0.103936)
    assert terms.step_runtime(80, 8).gpu_per_prefill_step_s == 0.0
    prefill = terms.step_runtime(61, 8, 58 * 256, prefill_instance=True)
    assert prefill.gpu_per_prefill_step_s == 0.0  # not on a disaggregated prefill instance


def test_front_end_serves_requests_first_come_first_served():
    """Front end: 2 ms per request + 10 us per prompt token to set up; 3 ms + 1 ms per
    token of the step to stream a step's tokens. Two requests of 100 prompt tokens sent at
    t = 0: set-up takes 2 + 1 = 3 ms each, one after the other, so the engine gets them at
    3 and 6 ms. A's prefill is the step [3, 13]; B joins the next step [13, 23] (A decodes
    in it too). A's first token reaches the client 13 + 3 + 1 (one token in that step) =
    17 ms after it was sent; B's 23 + 3 + 2 (two tokens in that step) = 28 ms. Both have
    output 2: A's last token comes from the step [13, 23] (two tokens): 23 + 5 = 28 ms;
    B's from [23, 33] (one token): 33 + 4 = 37 ms."""
    fe = FrontEnd(request_s=0.002, prompt_token_s=1e-5, output_s=0.003, output_per_token_s=0.001)
    res = _run([0.0, 0.0], [100, 100], [2, 2], frontend=fe)
    np.testing.assert_allclose(res.arrival, [0.0, 0.0])
    np.testing.assert_allclose(res.t_first, [0.017, 0.028])
    np.testing.assert_allclose(res.t_finish, [0.028, 0.037])


def test_closed_loop_client_sends_after_receiving_and_the_front_end_delays_it():
    """One client (concurrency 1), two requests of prompt 100, output 2, the front end as
    above. Request 0: sent 0, engine 3 ms, prefill [3, 13], decode [13, 23]; its last token
    reaches the client at 23 + 3 + 1 = 27 ms, when the client sends request 1. The engine
    gets it at 27 + 3 = 30 ms: prefill [30, 40] (first token at the client 44 ms, TTFT 17 ms),
    decode [40, 50], finish at the client 54 ms."""
    fe = FrontEnd(request_s=0.002, prompt_token_s=1e-5, output_s=0.003, output_per_token_s=0.001)
    res = _run([np.nan, np.nan], [100, 100], [2, 2], concurrency=1, frontend=fe)
    np.testing.assert_allclose(res.arrival, [0.0, 0.027])
    np.testing.assert_allclose(res.t_first, [0.017, 0.044])
    np.testing.assert_allclose(res.t_finish, [0.027, 0.054])


def test_closed_loop_client_waits_its_think_time_through_the_front_end():
    """The case above with a think time of 5 ms before request 1: the client receives
    request 0's last token at 27 ms and sends request 1 at 32 ms; the engine gets it at 35:
    prefill [35, 45] (first token at the client 49 ms), decode [45, 55], finish 59 ms."""
    fe = FrontEnd(request_s=0.002, prompt_token_s=1e-5, output_s=0.003, output_per_token_s=0.001)
    res = _run([np.nan, np.nan], [100, 100], [2, 2], concurrency=1, frontend=fe,
               think=[0.0, 0.005])
    np.testing.assert_allclose(res.arrival, [0.0, 0.032])
    np.testing.assert_allclose(res.t_first, [0.017, 0.049])
    np.testing.assert_allclose(res.t_finish, [0.027, 0.059])


def test_think_times_reorder_sends_across_clients():
    """Two clients, output 1 (a request is its prefill step). Both send at 0; the engine
    takes request 0 at once (step [0, 10]) and request 1 next ([10, 20]). Client 0 thinks
    30 ms before request 2 (sent at 40 ms), client 1 12 ms before request 3 (sent at 32 ms,
    before request 2: step [32, 42]). Request 2 waits for that step: [42, 52]. Client 1
    thinks 1 ms: request 5 at 43 ms; client 0 none: request 4 at 52 ms; both join the step
    [52, 62]."""
    res = _run(np.full(6, np.nan), np.full(6, 16), np.ones(6, dtype=int), concurrency=2,
               think=[0.0, 0.0, 0.030, 0.012, 0.0, 0.001])
    np.testing.assert_allclose(res.arrival, [0.0, 0.0, 0.040, 0.032, 0.052, 0.043])
    np.testing.assert_allclose(res.t_finish, [0.010, 0.020, 0.052, 0.042, 0.062, 0.062])


def test_front_end_engine_arrivals_match_a_plain_fifo_recursion():
    """The front end's set-up queue equals e_i = max(sent_i, e_{i-1}) + s_i."""
    rng = np.random.default_rng(3)
    sent = np.sort(rng.uniform(0, 1, 500))
    prompt = rng.integers(1, 4000, 500)
    fe = FrontEnd(request_s=0.001, prompt_token_s=2e-6)
    e, prev = [], -np.inf
    for t, p in zip(sent, prompt, strict=True):
        prev = max(t, prev) + 0.001 + 2e-6 * p
        e.append(prev)
    np.testing.assert_allclose(fe.engine_arrivals(sent, prompt), e, rtol=0, atol=1e-12)


def test_api_servers_set_requests_up_side_by_side_and_release_them_in_order():
    """Two API servers, 2 ms per request + 10 us per prompt token. Sent at 0, 0, 0, 1 ms
    with 1000, 100, 100, 100 prompt tokens: request 0 takes server A [0, 12] ms, request 1
    server B [0, 3], request 2 waits for B [3, 6], request 3 for B [6, 9]. Each reaches the
    engine once the requests sent before it have: 12, 12, 12, 12 ms (request 0's long set-up
    holds the others back). The servers are then free at 12 and 9 ms. One server serves them
    one after the other: 12, 15, 18, 21 ms."""
    two = FrontEnd(request_s=0.002, prompt_token_s=1e-5, servers=2)
    sent, prompt = np.array([0.0, 0.0, 0.0, 0.001]), np.array([1000, 100, 100, 100])
    at, free = two.serve(sent, prompt)
    np.testing.assert_allclose(at, [0.012] * 4)
    np.testing.assert_allclose(sorted(free), [0.009, 0.012])
    np.testing.assert_allclose(replace(two, servers=1).engine_arrivals(sent, prompt),
                               [0.012, 0.015, 0.018, 0.021])
    with pytest.raises(ValueError, match="servers"):
        FrontEnd(servers=0)


def test_a_closed_loop_through_two_api_servers():
    """The front end of the first test with two API servers; two clients, prompt 1000
    (set-up 2 + 10 = 12 ms), output 1 (a request is its prefill step, and its one token
    reaches the client 3 + 1 = 4 ms after it). Requests 0 and 1, sent at 0, are set up side
    by side and reach the engine together at 12 ms; the engine starts request 0's step at
    once [12, 22] (received at 26 ms) and request 1's next [22, 32] (received at 36). Client
    0 sends request 2 at 26 ms: set up [26, 38], step [38, 48], received at 52. Client 1
    sends request 3 at 36 ms on the other server: set up [36, 48], step [48, 58], received
    at 62. One server would set request 1 up only after request 0 [12, 24] (received at 38 ms)."""
    fe = FrontEnd(request_s=0.002, prompt_token_s=1e-5, output_s=0.003, output_per_token_s=0.001,
                  servers=2)
    res = _run(np.full(4, np.nan), np.full(4, 1000), np.ones(4, dtype=int), concurrency=2,
               frontend=fe)
    np.testing.assert_allclose(res.arrival, [0.0, 0.0, 0.026, 0.036])
    np.testing.assert_allclose(res.t_finish, [0.026, 0.036, 0.052, 0.062])
    one = _run(np.full(2, np.nan), np.full(2, 1000), np.ones(2, dtype=int), concurrency=2,
               frontend=replace(fe, servers=1))
    np.testing.assert_allclose(one.t_finish, [0.026, 0.038])


def test_runtime_terms_reject_negative_values():
    with pytest.raises(ValueError, match="cpu_base_s"):
        StepRuntime(cpu_base_s=-1.0)
    with pytest.raises(ValueError, match="output_s"):
        FrontEnd(output_s=float("nan"))


def test_recv_interval_hides_arrivals_until_the_nth_decode_iteration():
    """SGLang ``--scheduler-recv-interval 4``: before each batch a counter grows by 1 after
    a decode batch and by 4 after a prefill; the socket is read when it reaches 4.
    A arrives at 0 on an idle engine (read at once): prefill [0, 10]; the read at 10
    (after a prefill) sees nothing new; decodes [10, 20], [20, 30], [30, 40], [40, 50]
    count 1, 2, 3, 4: B, which arrived at 15, is first read at 50 and prefilled in
    [50, 60]: TTFT 45 ms. Reading every iteration, B joins the batch formed at 20: 15 ms."""
    args = ([0.0, 0.015], [16, 16], [50, 2])
    every = _run(*args)
    skip = _run(*args, scheduler_recv_interval=4)
    assert (every.t_first - every.arrival)[1] == pytest.approx(0.015)
    assert (skip.t_first - skip.arrival)[1] == pytest.approx(0.045)
    assert skip.t_first[0] == pytest.approx(0.010)  # A unaffected


def test_an_idle_engine_reads_new_requests_at_once():
    """A (2 tokens) ends at 20 ms; B arrives at 25 on an idle engine, which spins and
    reads its socket: B's prefill is [25, 35] whatever the interval."""
    res = _run([0.0, 0.025], [16, 16], [2, 2], scheduler_recv_interval=30)
    assert (res.t_first - res.arrival).tolist() == pytest.approx([0.010, 0.010])


def test_a_disaggregated_prefill_pool_is_not_charged_the_expert_term():
    """The shipped TensorRT-LLM terms on Qwen3-30B-A3B (48 MoE layers x 128 experts =
    6,144): a colocated pool pays 6,144 x the term per prompt-carrying step, a prefill pool
    nothing (its decode pool carries no prompts either way), the other terms alike."""
    from serveplan.estimator.runtime import load_runtime_profile
    from serveplan.resolution import resolve

    pool = {"model": "qwen3-30b-a3b", "gpu": "h100", "engine": "trtllm", "num_gpu_blocks": 4000}
    per_expert = load_runtime_profile("trtllm").terms.prefill_step_expert_layer_s
    assert per_expert > 0.0
    colocated = resolve({"pools": [{**pool, "role": "colocated"}]}).pools[0].spec().runtime
    prefill, decode = (p.spec().runtime for p in resolve(
        {"pools": [{**pool, "role": "prefill"}, {**pool, "role": "decode"}]}).pools)
    assert colocated.gpu_per_prefill_step_s == pytest.approx(6144 * per_expert)
    assert prefill.gpu_per_prefill_step_s == 0.0
    assert replace(prefill, gpu_per_prefill_step_s=colocated.gpu_per_prefill_step_s) == colocated
    assert decode == colocated
