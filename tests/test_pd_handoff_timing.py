"""The prefill -> decode boundary, timed by hand on tiny deployments.

Two things are pinned here. First, the handoff path is tight: a finished prefill reaches
its decode instance exactly one transfer after its first token when the instance is idle,
and at the next step boundary when it is busy (vLLM admits a loaded request where its
scheduler admits waiting ones); an idle decode instance starts the moment KV arrives.
Second, the wait that least-loaded decode routing (ILS) produces: requests bound in the
same instant all go to the instance that looks least loaded, because requests bound to an
instance count only once they decode there (SIBYL's "invisible load", ``papers/sibyl.txt``
§2.3); the last of them waits in the pull queue for a sequence slot while another instance
has one free. Round-robin spreads the same requests and nobody waits beyond a step.

Costs are affine so every time below is a sum written out in the test: a prefill step of
``n`` prompt tokens takes ``0.010 + 1e-5 n`` s, a decode step 5 ms whatever its batch, a
KV transfer ``2e-6`` s per prompt token (shared equally by the transfers at the busier
end) plus 1 ms of latency.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.engine import AffineStepCost, EngineParams
from serveplan.sim.pd import KVLink, PoolSpec, run_pd
from serveplan.sim.results import to_dataset
from serveplan.sim.workload import Requests

PREFILL = AffineStepCost(0.010, 1e-5)
DECODE = AffineStepCost(0.005)
LINK = KVLink.uniform(2e-6, 1e-3)
EXACT = {"rtol": 0, "atol": 1e-12}


def _times(ds):
    """Per-request times (``routed_to``: the index within the decode pool)."""
    return {k: ds[k].values for k in ("first_token_s", "assigned_s", "kv_ready_s",
                                      "transfer_start_s", "kv_arrival_s", "decode_start_s",
                                      "finish_s", "kv_wait_s", "routed_to")}


def _pools(decode_seqs, n_decode):
    prefill = PoolSpec(EngineParams(num_gpu_blocks=4000, max_model_len=4096), PREFILL)
    decode = PoolSpec(EngineParams(num_gpu_blocks=4000, max_model_len=4096,
                                   max_num_seqs=decode_seqs), DECODE, n_decode)
    return prefill, decode


def test_handoff_times_by_hand_1p1d():
    """One prefill and one decode instance, two requests.

    A (arrives 0, prompt 1000, output 6): prefill 0 -> 0.010 + 1000e-5 = 0.020 (first
    token); the decode instance is idle, so it pulls at once: transfer 0.020 -> 0.020 +
    1000 x 2e-6 + 1e-3 = 0.023; decode starts at 0.023 and its 5 tokens take 5 steps:
    finish 0.023 + 5 x 0.005 = 0.048.

    B (arrives 0.010, prompt 500, output 3): waits for A's prefill step, prefill 0.020 ->
    0.020 + 0.010 + 500e-5 = 0.035. The decode instance is then inside A's step 0.033 ->
    0.038, so B is pulled at that boundary: transfer 0.038 -> 0.038 + 500 x 2e-6 + 1e-3 =
    0.040, delivered during the step 0.038 -> 0.043; B decodes from the next step, 0.043,
    and its 2 tokens end at 0.053.
    """
    req = Requests(np.array([0.0, 0.010]), np.array([1000, 500]), np.array([6, 3]))
    prefill, decode = _pools(16, 1)
    t = _times(to_dataset(run_pd(req, prefill, decode, link=LINK)))
    np.testing.assert_allclose(t["first_token_s"], [0.020, 0.035], **EXACT)
    np.testing.assert_allclose(t["kv_ready_s"], [0.020, 0.035], **EXACT)
    np.testing.assert_allclose(t["transfer_start_s"], [0.020, 0.038], **EXACT)
    np.testing.assert_allclose(t["kv_arrival_s"], [0.023, 0.040], **EXACT)
    np.testing.assert_allclose(t["decode_start_s"], [0.023, 0.043], **EXACT)
    np.testing.assert_allclose(t["finish_s"], [0.048, 0.053], **EXACT)


def test_first_token_from_the_decode_instance():
    """The same two requests with ``first_token="decode"``: each first token reaches the
    client as its decode instance starts decoding it (A at 0.023, B at 0.043, the times
    above), so TTFT counts the transfer and B's wait for a step boundary (A 0.023, B 0.043 -
    0.010 = 0.033) while every other time stays; TPOT is one 5 ms step each. A one-token
    request (C, arrives 0.100, prompt 100: prefill 0.100 -> 0.111) never decodes: its
    prefill's token stands."""
    req = Requests(np.array([0.0, 0.010, 0.100]), np.array([1000, 500, 100]),
                   np.array([6, 3, 1]))
    prefill, decode = _pools(16, 1)
    ds = to_dataset(run_pd(req, prefill, decode, link=LINK, first_token="decode"))
    t = _times(ds)
    np.testing.assert_allclose(t["first_token_s"], [0.023, 0.043, 0.111], **EXACT)
    np.testing.assert_allclose(ds["ttft_s"].values, [0.023, 0.033, 0.011], **EXACT)
    np.testing.assert_allclose(t["finish_s"][:2], [0.048, 0.053], **EXACT)
    np.testing.assert_allclose(ds["tpot_s"].values[:2], [0.005, 0.005], **EXACT)
    with pytest.raises(ValueError, match="first_token given an invalid value"):
        run_pd(req, prefill, decode, link=LINK, first_token="router")



def test_first_token_recomputed_by_the_decode_instance():
    """``first_token="recompute"`` (vLLM: the decode side leaves the last prompt token of a
    remote prefill uncomputed and samples the first token itself). A: transfer ends 0.023,
    its first decode step (the last prompt token) ends 0.028 -- the first token -- and its
    other 5 tokens take 5 steps: finish 0.053. B: prefilled by 0.035, pulled at the step
    boundary 0.038 (A's steps run 0.023, 0.028, 0.033, 0.038, ...), transferred by 0.040,
    first step 0.043 -> 0.048, 2 more tokens: finish 0.058. TTFT: A 0.028, B 0.048 - 0.010
    = 0.038, one step more than with ``decode``; TPOT stays one 5 ms step. C (one token)
    keeps its prefill's token."""
    req = Requests(np.array([0.0, 0.010, 0.100]), np.array([1000, 500, 100]),
                   np.array([6, 3, 1]))
    prefill, decode = _pools(16, 1)
    ds = to_dataset(run_pd(req, prefill, decode, link=LINK, first_token="recompute"))
    t = _times(ds)
    np.testing.assert_allclose(t["kv_arrival_s"][:2], [0.023, 0.040], **EXACT)
    np.testing.assert_allclose(t["decode_start_s"][:2], [0.023, 0.043], **EXACT)
    np.testing.assert_allclose(t["first_token_s"], [0.028, 0.048, 0.111], **EXACT)
    np.testing.assert_allclose(ds["ttft_s"].values, [0.028, 0.038, 0.011], **EXACT)
    np.testing.assert_allclose(t["finish_s"][:2], [0.053, 0.058], **EXACT)
    np.testing.assert_allclose(ds["tpot_s"].values[:2], [0.005, 0.005], **EXACT)
    np.testing.assert_array_equal(ds["output_len"].values, [6, 3, 1])

def _herd_requests():
    """A (arrives 0, prompt 1000, output 20) decodes on one instance; E (arrives 0.021,
    prompt 2000, output 1: it finishes at its prefill and never needs a decode instance)
    keeps the prefill instance busy until 0.021 + 0.010 + 0.020 = 0.051, so that B, C and
    D (arrive at 0.030, prompt 500, output 5) are prefilled together in the next step,
    0.051 -> 0.051 + 0.010 + 1500e-5 = 0.076."""
    return Requests(np.array([0.0, 0.021, 0.030, 0.030, 0.030]),
                    np.array([1000, 2000, 500, 500, 500]), np.array([20, 1, 5, 5, 5]))


A, B, C, D = 0, 2, 3, 4  # request indices (1 is E)


@pytest.mark.parametrize("router", ["least-loaded", "least-requests"])
@pytest.mark.parametrize("assignment", ["early", "late"])
def test_least_loaded_routing_herds_simultaneous_handoffs(router, assignment):
    """Two decode instances with two sequence slots each.

    A is bound first (both instances empty: the tie goes to instance 0), prefilled 0 ->
    0.020, transferred by 0.020 + 1000 x 2e-6 + 1e-3 = 0.023 and decodes on instance 0
    until 0.023 + 19 x 0.005 = 0.118. Whether B, C and D are bound at their arrival (early,
    0.030) or at their first token (late, 0.076), instance 0 decodes A and instance 1
    nothing, and a request bound to instance 1 counts only once it decodes there: all
    three go to instance 1. It pulls B and C at 0.076 (its two slots); their transfers
    share both ends (1/2 each): 0.076 + 2 x 500 x 2e-6 + 1e-3 = 0.079. B is delivered first
    and the idle instance starts at once; C, delivered in the same instant, joins the next
    step, 0.084 (an instance starts as soon as it has work). B's 4 tokens end at 0.079 +
    4 x 0.005 = 0.099, C's at 0.084 + 0.020 = 0.104. Only when B frees its slot is D
    pulled: 0.099 + 500 x 2e-6 + 1e-3 = 0.101, into the step boundary 0.104, finish 0.104 +
    0.020 = 0.124. D waited 0.099 - 0.076 = 0.023 s in the pull queue while instance 0 had
    a free slot throughout.
    """
    prefill, decode = _pools(2, 2)
    res = run_pd(_herd_requests(), prefill, decode, link=LINK, router=router,
                 assignment=assignment)
    t = {k: v[[A, B, C, D]] for k, v in _times(to_dataset(res)).items()}
    np.testing.assert_array_equal(t["routed_to"], [0, 1, 1, 1])
    bound = 0.030 if assignment == "early" else 0.076
    np.testing.assert_allclose(t["assigned_s"][1:], bound, **EXACT)
    np.testing.assert_allclose(t["first_token_s"], [0.020, 0.076, 0.076, 0.076], **EXACT)
    np.testing.assert_allclose(t["transfer_start_s"], [0.020, 0.076, 0.076, 0.099], **EXACT)
    np.testing.assert_allclose(t["kv_arrival_s"], [0.023, 0.079, 0.079, 0.101], **EXACT)
    np.testing.assert_allclose(t["decode_start_s"], [0.023, 0.079, 0.084, 0.104], **EXACT)
    np.testing.assert_allclose(t["finish_s"], [0.118, 0.099, 0.104, 0.124], **EXACT)
    np.testing.assert_allclose(t["kv_wait_s"], [0.0, 0.0, 0.0, 0.023], **EXACT)
    # while D waited, instance 0 held A alone: one of its two slots was free
    on_0 = (t["routed_to"] == 0) & (t["transfer_start_s"] <= 0.076) & (t["finish_s"] >= 0.099)
    assert on_0.sum() == 1


def test_round_robin_spreads_the_same_requests():
    """Round-robin binds A, B, C, D to instances 0, 1, 0, 1 (E needs none): no instance
    holds more than its two slots, so no pull waits for one. B and D are pulled by the idle
    instance 1 at their first token; C, bound to instance 0, at the end of A's step
    0.073 -> 0.078, a step boundary 2 ms after its first token."""
    prefill, decode = _pools(2, 2)
    t = _times(to_dataset(run_pd(_herd_requests(), prefill, decode, link=LINK,
                                 router="round-robin")))
    t = {k: v[[A, B, C, D]] for k, v in t.items()}
    np.testing.assert_array_equal(t["routed_to"], [0, 1, 0, 1])
    np.testing.assert_allclose(t["transfer_start_s"], [0.020, 0.076, 0.078, 0.076],
                               **EXACT)
    assert t["kv_wait_s"].max() <= DECODE.base_s


def test_the_engines_handoff_term_delays_every_first_token_once():
    """An engine's ``disagg_handoff_s`` (orchestrator hop, transfer setup, pickup) is a
    latency on every handoff. Two prompts on an idle deployment: A's KV is ready at 9.3 ms,
    B's at 18.1 ms. With a handoff of 0.25 s the decode instance is still idle when both
    are pulled, so a handoff of 0.5 s moves both first tokens by exactly 0.25 s more (a
    serialised hop would move B's by 0.5 s), and both decodes (hence TPOT) keep their
    length. Without a handoff A is pulled at once, so 0.25 s moves its first token by
    exactly 0.25 s; B's by less, since without the handoff it waited for A's step."""
    from serveplan.e2e import with_terms
    from serveplan.estimator.runtime import RuntimeTerms
    from serveplan.resolution import resolve
    from serveplan.simulation import run_resolved

    pool = {"model": "llama-3.1-8b", "gpu": "h100", "engine": "vllm",
            "engine_version": "0.11.0", "num_gpu_blocks": 4000}
    resolved = resolve({"pools": [{**pool, "role": "prefill"}, {**pool, "role": "decode"}]})
    req = Requests(np.zeros(2), np.array([300, 200]), np.array([4, 4]))

    def times(handoff):
        res = run_resolved(with_terms(resolved, RuntimeTerms(disagg_handoff_s=handoff)), req)
        first = res.first_token_times[:2]
        return first - res.reqs.arrival[:2], res.pd.t_finish[:2] - first

    (ttft0, _), (ttft1, decode1), (ttft2, decode2) = times(0.0), times(0.25), times(0.5)
    assert ttft1[0] - ttft0[0] == pytest.approx(0.25, abs=1e-9)
    assert 0.0 < ttft1[1] - ttft0[1] <= 0.25
    np.testing.assert_allclose(ttft2 - ttft1, [0.25, 0.25], rtol=0, atol=1e-9)
    np.testing.assert_allclose(decode2, decode1, rtol=0, atol=1e-9)
    assert resolved.handoff_link is resolved.link  # the shipped term of this version: none
