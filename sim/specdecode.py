"""Speculative decoding in the step (compiled): verify shape, pricing, acceptance, KV.

Follows vLLM V1 (``vllm/v1/core/sched/scheduler.py``, ``v1/spec_decode/eagle.py``,
``v1/sample/rejection_sampler.py``); the settings are :class:`~.speculative.SpecDecode`.

Scheduling (:func:`has_drafts`, :func:`verify_tokens`, :func:`lookahead_slots`)
    A running request that decodes asks for ``1 + k`` tokens (its last sampled token and
    ``k`` drafts: ``num_tokens_with_spec - num_computed_tokens``), capped like any
    request by the token budget and ``long_prefill_token_threshold`` (a capped request
    verifies fewer drafts, as vLLM trims ``spec_token_ids``) and by ``max_model_len - 1 -
    computed``. Its KV allocation covers the scheduled tokens plus the drafter's lookahead
    slots (``num_lookahead_tokens``: ``k`` for EAGLE / MTP / draft models, 0 for ngram),
    capped at ``max_model_len``. On a decode instance (prefill/decode disaggregation) a
    request's first step there has no drafts: its first token came from the prefill
    instance, and the decode instance's drafter has not run on it yet.

Pricing (:func:`spec_step_seconds`)
    The target's step is priced by the pool's cost row with decodes of up to ``k + 1``
    query tokens (:func:`serveplan.kernels.roofline.step_time_q`: decode attention class,
    one logit row per query token, a CUDA-graph step padded to the capture size >= the
    step's tokens). The drafter (its own cost row; none for ngram) runs as vLLM's
    ``EagleProposer``: a first pass over every token the target computed in the step,
    then ``k - 1`` passes of one token for each request that sampled a token in the step
    (a decode, or a prefill that completed), at its context grown by one per pass. A
    drafter's pass is its forward time alone (the per-step engine overhead is the target
    step's).

Verification (:func:`settle_verify`)
    At the step's end a decoding request that verified ``d`` drafts accepts the first
    ``a`` of them, position ``i`` with probability ``rate[i]`` given the earlier ones
    accepted; it emits ``min(a + 1, output left)`` tokens (the accepted drafts and the
    bonus token, cut at ``max_tokens`` as vLLM's stop check does). Only the accepted
    context stays in its KV: ``computed`` falls back to ``num_tokens - 1`` and the blocks
    past it return to the pool (vLLM keeps them allocated to the request and overwrites
    them next step; the next allocation asks for at least as many, so the blocks held at
    scheduling are the same). The draws are a hash of (seed, request, output position,
    draft position) -- reproducible and independent of batching.

Approximations: every decode proposes ``k`` drafts (vLLM's ngram proposer proposes
nothing when it finds no match -- fold that into the acceptance rate); drafting is
synchronous GPU time in the step (no overlap with the target); the drafter's own KV and
weights are not taken from the KV budget.
"""

from __future__ import annotations

from serveplan.kernels.roofline import P_STEP_OVERHEAD

from ._jitcache import sim_jit
from .costs import KIND_ORACLE, FittedThroughputCost, batch_seconds
from .kvcache import mix64, release
from .pools import Role
from .speculative import (
    SI_DRAFT_ROW,
    SI_SEED,
    ST_ACCEPTED,
    ST_DRAFT_S,
    ST_DRAFTED,
    ST_EMITTED,
    ST_VERIFIES,
    ST_VERIFY_S,
)
from .state import (
    K_BLOCK,
    K_COST,
    K_MAX_MODEL_LEN,
    K_ROLE,
    K_SPEC_LOOKAHEAD,
    K_SPEC_TOKENS,
    Policy,
    cdiv,
    is_decode,
    num_tokens,
)

ROLE_DECODE = int(Role.DECODE)

UNIT = 1.0 / 9007199254740992.0  # 2**-53


@sim_jit
def has_drafts(reqs, knobs, i, r):
    """Whether running request ``r`` on instance ``i`` brings drafts to verify: it decodes
    on a speculating instance, and that instance's drafter has seen it (on a decode
    instance, not before its first step there: its first token came from the prefill
    instance, whose drafts are not transferred)."""
    if knobs[i, K_SPEC_TOKENS] == 0 or not is_decode(reqs, r):
        return False
    return knobs[i, K_ROLE] != ROLE_DECODE or reqs.n_out[r] > 1


@sim_jit
def verify_tokens(reqs, knobs, i, r):
    """Tokens decoding request ``r`` asks for on instance ``i``: ``1 + k``, at most
    ``max_model_len - 1 - computed``."""
    room = knobs[i, K_MAX_MODEL_LEN] - 1 - reqs.computed[r]
    want = 1 + knobs[i, K_SPEC_TOKENS]
    return want if want < room else max(room, 1)


@sim_jit
def lookahead_slots(reqs, knobs, i, r, num_new):
    """KV slots reserved past the ``num_new`` scheduled tokens (capped at max_model_len)."""
    room = knobs[i, K_MAX_MODEL_LEN] - reqs.computed[r] - num_new
    la = knobs[i, K_SPEC_LOOKAHEAD]
    return la if la < room else max(room, 0)


@sim_jit
def draw_accepted(spec, c, r, n_out, drafts):
    """Accepted leading drafts of request ``r`` at output position ``n_out`` (cost row
    ``c``'s profile): position ``p`` is accepted when its uniform draw is below
    ``rate[c, p]``, and the first rejection ends the run."""
    h = mix64(mix64(mix64(spec.irow[c, SI_SEED]) ^ r) ^ n_out)
    a = 0
    while a < drafts:
        u = (mix64(h ^ (a + 1)) >> 10) * UNIT
        if not u < spec.rate[c, a]:
            break
        a += 1
    return a


@sim_jit
def _draft_seconds(costs, c, inst, reqs, i, bn, tokens, q_decode):
    """GPU seconds of the drafter (module docstring; 0 for a free drafter)."""
    spec = costs.spec
    d = spec.irow[c, SI_DRAFT_ROW]
    if d < 0:
        return 0.0
    overhead = _engine_step_overhead(costs, d)  # paid once, by the target's step
    t = batch_seconds(costs, d, inst.b_new[i], inst.b_ctx[i], bn, tokens, q_decode) - overhead
    m = 0
    for j in range(bn):
        end = inst.b_ctx[i, j] + inst.b_new[i, j]
        if end >= num_tokens(reqs, inst.b_req[i, j]):  # samples a token in this step
            spec.q[m] = 1
            spec.c[m] = end
            m += 1
    if m == 0:
        return t
    for _ in range(int(q_decode) - 2):  # k - 1 passes of one token each
        for x in range(m):
            spec.c[x] += 1
        t += batch_seconds(costs, d, spec.q, spec.c, m, m, 1.0) - overhead
    return t


@sim_jit
def _engine_step_overhead(costs, d):
    """The per-engine-step CPU seconds an oracle row adds to every priced step
    (``P_STEP_OVERHEAD``): a drafter's passes run inside the target's step, so they
    do not pay it again."""
    if costs.flags[d, 0] != KIND_ORACLE:
        return 0.0
    return costs.prm[costs.off[d, 4] + P_STEP_OVERHEAD]


@sim_jit
def spec_step_seconds(costs, inst, reqs, knobs, i, bn, tokens):
    """GPU seconds of instance ``i``'s step with speculative decoding: the target's verify
    step plus the drafter's passes (both recorded in the instance's statistics)."""
    c = knobs[i, K_COST]
    q_decode = float(knobs[i, K_SPEC_TOKENS] + 1)
    verify = batch_seconds(costs, c, inst.b_new[i], inst.b_ctx[i], bn, tokens, q_decode)
    draft = _draft_seconds(costs, c, inst, reqs, i, bn, tokens, q_decode)
    costs.spec.stats[i, ST_VERIFY_S] += verify
    costs.spec.stats[i, ST_DRAFT_S] += draft
    return verify + draft


@sim_jit
def trim_blocks(pool, inst, knobs, i, s, tokens):
    """Release slot ``s``'s blocks past the first ``tokens`` tokens (last first)."""
    keep = cdiv(tokens, knobs[i, K_BLOCK])
    for j in range(inst.nblk[i, s] - 1, keep - 1, -1):
        release(pool, i, inst.blocks[i, s, j])
    if keep < inst.nblk[i, s]:
        inst.nblk[i, s] = keep


@sim_jit
def settle_verify(pool, inst, reqs, knobs, spec, i, j, r):
    """End of a verify step for batch entry ``j`` (request ``r``): draw its accepted
    drafts, set ``computed`` so that it emits accepted + 1 tokens (capped at its output)
    and keep only the accepted context's blocks. Entries that were not decoding (prefill
    chunks, a prompt's last chunk) are left alone."""
    if reqs.n_out[r] == 0 or inst.b_ctx[i, j] != num_tokens(reqs, r) - 1:
        return
    drafts = inst.b_new[i, j] - 1
    if drafts <= 0:  # a decode without drafts: one token, as without speculation
        return
    a = draw_accepted(spec, knobs[i, K_COST], r, reqs.n_out[r], drafts)
    left = reqs.output[r] - reqs.n_out[r]
    e = a + 1 if a + 1 < left else left
    reqs.computed[r] = num_tokens(reqs, r) - 1 + e
    trim_blocks(pool, inst, knobs, i, reqs.slot[r], reqs.computed[r])
    st = spec.stats
    st[i, ST_VERIFIES] += 1
    st[i, ST_DRAFTED] += drafts
    st[i, ST_ACCEPTED] += a
    st[i, ST_EMITTED] += e


def check_spec_pools(pools) -> None:
    """Speculative decoding runs on colocated and decode pools scheduled by ``vllm-v1``
    and priced by a cost oracle or an affine step cost."""
    for p in pools:
        if getattr(p, "speculative", None) is None:
            continue
        if p.role in (Role.PREFILL, Role.ATTENTION):
            raise ValueError("speculative decoding applies to colocated and decode pools, "
                             f"not to a {p.role.name.lower()} pool")
        if int(p.params.policy) != int(Policy.VLLM_V1):
            raise ValueError("speculative decoding is modelled for the vllm-v1 scheduler "
                             f"only, not {Policy(p.params.policy).name.lower()}")
        if isinstance(p.cost, FittedThroughputCost) or isinstance(
                p.speculative.draft_cost, FittedThroughputCost):
            raise ValueError("speculative decoding needs a cost oracle or an affine step "
                             "cost (the fitted throughput has no per-token term)")


__all__ = ["check_spec_pools", "draw_accepted", "has_drafts", "lookahead_slots", "settle_verify", "spec_step_seconds",
           "trim_blocks", "verify_tokens"]
