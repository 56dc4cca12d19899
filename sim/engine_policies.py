"""Engine-specific schedulers: TensorRT-LLM's in-flight batching and vLLM <= 0.6 multi-step
(compiled). SGLang's memory management is in :mod:`serveplan.sim.sglang_policy`.

Each policy fills instance ``i``'s batch like the built-in ones in
:mod:`serveplan.sim.scheduler` (``inst.b_req`` / ``b_new`` / ``b_ctx``), with the KV
helpers of :mod:`serveplan.sim.state`. ``docs/engines.md`` gives the source lines each rule
follows; the tests in ``tests/test_engine_policies.py`` derive event times from them.

TensorRT-LLM (C++ batch manager, ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp``,
``microBatchScheduler.cpp``, ``scheduledBlocksManager.cpp``, ``kvCacheManager.cpp``, 2025
main branch; the PyTorch backend binds the same classes)
---------------------------------------------------------------------------------------
A step is the capacity scheduler (which requests may hold KV) followed by the micro-batch
scheduler (``max_batch_size`` = ``max_num_seqs``, ``max_num_tokens`` =
``max_num_batched_tokens``). Batches mix generation and context requests.

* ``GUARANTEED_NO_EVICT`` (TRT-LLM's default): the free blocks, minus what every running
  request still needs to complete (``getRemainingBlocksToCompletion``:
  ``cdiv(prompt + max_new_tokens, block) - allocated``), are what new requests may reserve;
  a waiting request is admitted, first come first served, only if its own
  ``cdiv(prompt + output, block)`` fits, and admission stops at the first that does not.
  Nothing is ever preempted.
* ``MAX_UTILIZATION``: requests in order (running ones, then waiting ones) take the blocks
  of their next step only (``getNeededBlocksOneStep``: a decode's next token, a new
  context's whole prompt); when a running request's blocks do not fit, the most recently
  started request is paused (its KV freed, recomputed later from the head of the queue) and
  nothing new is admitted in that step; a waiting request that does not fit stops
  admission.
* Micro-batch: generation requests are placed first (the capacity scheduler lists them
  first; with chunking their tokens are counted before any context chunk), one token each
  (the capacity pass gives every running generation request its block, scheduled or not);
  without context chunking (TRT-LLM's default) a context request needs its whole prompt in
  the remaining token budget -- counted in full even when its prefix is reused -- and the
  first that does not fit stops admission. With chunking (``enable_chunked_prefill``)
  contexts take first come first served chunks of the remaining budget, a truncated chunk
  rounded down to whole blocks (``kFIRST_COME_FIRST_SERVED``, ``chunkUnitSize`` =
  ``tokens_per_block``, at most ``max_num_tokens``).
* A context takes the blocks of its whole prompt with its first chunk (``addSequence``);
  they join the prefix cache as their tokens are computed.
* Not modelled: ``beneficialToSkip`` (deferring a context whose first new block another
  context is computing), a later waiting context overtaking one whose chunk rounds to 0,
  the watermark (TRT-LLM has none; ``watermark`` is ignored).

vLLM <= 0.6 multi-step (``vllm/engine/llm_engine.py`` ``step``, ``core/scheduler.py``
``_get_num_lookahead_slots``, v0.6.x)
---------------------------------------------------------------------------------------
With ``num_scheduler_steps = N`` the V0 scheduler (``prefill-priority``) runs a prefill
batch as one step (no lookahead slots for prefills) and a decode-only batch as ``N``
steps without rescheduling: every request's KV for the burst is allocated up front (here
``k = min(N, tokens still to generate)`` tokens; vLLM's lookahead slots go past
``max_tokens``, which the simulator's per-request block tables do not hold) and the step
returns outputs only after its last step, so a request's ``k`` tokens reach the client
together. The batch entry keeps ``b_new = 1`` (the shape of each of the ``N`` forward
passes) while ``reqs.computed`` advances by ``k``: :func:`tokens_emitted` and
:func:`burst_steps` tell the step how many tokens each request gets and how many forward
passes the step takes.
"""

from __future__ import annotations

import numpy as np

from ._jitcache import sim_jit
from .kvcache import num_free
from .sglang_policy import CLIP_MAX_NEW_TOKENS
from .state import (
    I_ADP_BATCHED,
    I_ADP_WAITED,
    I_BATCH,
    I_HOLD_CTX,
    I_NRUN,
    I_WAITED,
    I_WHEAD,
    I_WLEN,
    K_ADP_BATCH_WAIT,
    K_ADP_TIMEOUT,
    K_BLOCK,
    K_CHUNKED,
    K_GROUP_SIZE,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_MULTI_STEP,
    K_WAIT_ITERS,
    K_WAIT_TOKENS,
    Policy,
    add_to_batch,
    admit_request,
    allocate_or_preempt,
    allocate_running,
    allocate_waiting,
    cdiv,
    find_cached_blocks,
    is_decode,
    num_tokens,
    reserve_blocks,
    waiting_visible,
    wq_peek,
)


# ------------------------------------------------------------------------ TensorRT-LLM
@sim_jit
def trt_chunk(knobs, i, remaining, capacity):
    """TRT-LLM's first-come-first-served context chunk: all ``remaining`` tokens if they fit
    in ``capacity``, else ``capacity`` rounded down to whole chunk units (possibly 0). The
    unit is ``tokens_per_block``, at most ``max_num_tokens``."""
    if remaining <= capacity:
        return remaining
    unit = min(knobs[i, K_BLOCK], knobs[i, K_MAX_TOKENS])
    return capacity // unit * unit


@sim_jit
def blocks_to_completion(inst, reqs, knobs, i, r):
    """Blocks request ``r`` still needs to finish (``getRemainingBlocksToCompletion``):
    those of ``prompt + output`` tokens minus those it holds."""
    total = cdiv(reqs.prompt[r] + reqs.output[r], knobs[i, K_BLOCK])
    s = reqs.slot[r]
    return total - (inst.nblk[i, s] if s >= 0 else 0)


@sim_jit
def _trt_capacity(pool, inst, reqs, knobs, glob, i):
    """Capacity pass over the running requests in admission order: each generation request
    takes the block of its next token (contexts hold their prompt's blocks already); on
    shortage the most recently started request is paused (never under no-evict, whose
    reservations cover every request). Returns whether a request was paused."""
    paused = False
    idx = 0
    while idx < inst.ist[i, I_NRUN]:
        r = inst.run[i, idx]
        if is_decode(reqs, r):
            ok, pre = allocate_or_preempt(pool, inst, reqs, knobs, glob, i, r, 1)
            paused = paused or pre
            if not ok:
                break
        idx += 1
    return paused


@sim_jit
def _trt_micro_batch(pool, inst, reqs, knobs, glob, i):
    """Generation requests first, one token each in admission order, until the token budget
    runs out; then the next chunks of the contexts in progress. Returns the budget left."""
    budget = knobs[i, K_MAX_TOKENS]
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if is_decode(reqs, r):
            if budget < 1:
                return budget
            add_to_batch(inst, reqs, i, r, 1)
            budget -= 1
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        remaining = num_tokens(reqs, r) - reqs.computed[r]
        if remaining <= 0 or is_decode(reqs, r):  # a generation request just scheduled
            continue
        chunk = trt_chunk(knobs, i, remaining, budget)
        if chunk > 0 and allocate_running(pool, inst, reqs, knobs, glob, i, r, chunk):
            add_to_batch(inst, reqs, i, r, chunk)
            budget -= chunk
    return budget


@sim_jit
def _trt_admit(pool, inst, reqs, knobs, glob, i, budget, now, reserve, avail):
    """Admit waiting requests first come first served. ``reserve`` (no-evict): each needs
    its blocks to completion within ``avail``; otherwise its prompt's blocks must be free.
    A context takes the blocks of its whole prompt with its first chunk."""
    bs = knobs[i, K_BLOCK]
    chunked = knobs[i, K_CHUNKED] != 0
    while inst.ist[i, I_WLEN] > 0 and inst.ist[i, I_NRUN] < knobs[i, K_MAX_SEQS]:
        r = wq_peek(inst, i)
        if not waiting_visible(inst, reqs, i, r):
            break
        need = blocks_to_completion(inst, reqs, knobs, i, r)
        if reserve and need > avail:
            break
        if not reserve and cdiv(num_tokens(reqs, r), bs) > num_free(pool, i):
            break
        n_hit = find_cached_blocks(pool, inst, reqs, knobs, glob, i, r)
        remaining = num_tokens(reqs, r) - n_hit * bs
        if chunked:
            num_new = trt_chunk(knobs, i, remaining, budget)
            charge = num_new
            if num_new <= 0:
                break
        else:
            num_new = remaining
            charge = num_tokens(reqs, r)  # the micro-batch counts the whole prompt
            if charge > budget:
                break
        if not allocate_waiting(pool, inst, reqs, knobs, glob, i, r, n_hit, num_new, 0, 0):
            break
        admit_request(inst, reqs, knobs, i, r, n_hit, num_new, now)
        reserve_blocks(pool, inst, reqs, knobs, i, r, num_tokens(reqs, r))
        budget -= charge
        avail -= need


@sim_jit
def _trt_context_tokens(inst, reqs, knobs, i, gen):
    """Prompt tokens the micro-batch would schedule after ``gen`` generation tokens: the
    visible waiting prompts, whole and in order, while they fit ``max_num_tokens`` and the
    free sequence slots (0: no context would be scheduled)."""
    tokens, cap = gen, inst.wq.shape[1]
    for k in range(min(inst.ist[i, I_WLEN], knobs[i, K_MAX_SEQS] - inst.ist[i, I_NRUN])):
        r = np.int64(inst.wq[i, (inst.ist[i, I_WHEAD] + k) % cap])
        if not waiting_visible(inst, reqs, i, r) or tokens + num_tokens(reqs, r) > \
                knobs[i, K_MAX_TOKENS]:
            break
        tokens += num_tokens(reqs, r)
    return tokens - gen


@sim_jit
def _trt_hold_contexts(inst, reqs, knobs, i, budget):
    """TensorRT-LLM's batch waiting (``PyExecutor._waiting_requests``; not under attention
    DP, a lockstep group): with generation requests in the step and new contexts to
    schedule, hold the contexts while fewer than ``batch_wait_timeout_iters`` iterations
    were held and the step would hold fewer than ``batch_wait_max_tokens_ratio x
    max_num_tokens`` tokens (its generation tokens plus the visible waiting prompts that fit
    the budget); the count restarts when they go."""
    limit = knobs[i, K_WAIT_ITERS]
    gen = knobs[i, K_MAX_TOKENS] - budget  # the micro-batch's tokens so far
    if limit == 0 or gen == 0 or inst.ist[i, I_WLEN] == 0 or knobs[i, K_GROUP_SIZE] > 1:
        return False
    ctx = _trt_context_tokens(inst, reqs, knobs, i, gen)
    if ctx == 0:
        return False  # no context would be scheduled: nothing to hold
    if inst.ist[i, I_WAITED] < limit and gen + ctx < knobs[i, K_WAIT_TOKENS]:
        inst.ist[i, I_WAITED] += 1
        return True
    inst.ist[i, I_WAITED] = 0
    return False


@sim_jit
def trt_balance_adp(inst, reqs, knobs, g, n):
    """TensorRT-LLM's attention-DP balance (``PyExecutor._balance_adp_requests``) for the
    ``n`` ranks of lockstep group ``g`` about to schedule a step: sets ``I_HOLD_CTX`` on
    every rank. Every rank with a free slot and a context to schedule: contexts wait
    ``batching_wait_iters`` iterations if every rank also has generation requests, else go;
    otherwise they wait, until ``timeout_iters`` iterations have or some rank has no
    generation request. The counters live on rank ``g``. Approximated: a rank's context
    counts if its prompt fits the token budget and a slot (the KV check of the capacity
    scheduler is left out)."""
    free, ctx, gen = True, True, True
    for j in range(g, g + n):
        running = inst.ist[j, I_NRUN]
        free = free and running < knobs[j, K_MAX_SEQS]
        ctx = ctx and _trt_context_tokens(inst, reqs, knobs, j, running) > 0
        gen = gen and running > 0
    hold = 0
    if free and ctx:
        inst.ist[g, I_ADP_WAITED] = 0
        if gen:
            if inst.ist[g, I_ADP_BATCHED] < knobs[g, K_ADP_BATCH_WAIT]:
                inst.ist[g, I_ADP_BATCHED] += 1
                hold = 1
            else:
                inst.ist[g, I_ADP_BATCHED] = 0
    else:
        inst.ist[g, I_ADP_WAITED] += 1
        hold = 1
        if inst.ist[g, I_ADP_WAITED] >= knobs[g, K_ADP_TIMEOUT] or not gen:
            inst.ist[g, I_ADP_WAITED] = 0
            hold = 0
    for j in range(g, g + n):
        inst.ist[j, I_HOLD_CTX] = hold


@sim_jit
def schedule_trtllm(pool, inst, reqs, knobs, glob, i, now, no_evict):
    """TensorRT-LLM in-flight batching with the ``GUARANTEED_NO_EVICT`` (``no_evict``) or
    ``MAX_UTILIZATION`` capacity scheduler (module docstring), its attention-DP balance
    (``I_HOLD_CTX``, :func:`trt_balance_adp`) and its batch waiting
    (:func:`_trt_hold_contexts`)."""
    avail = num_free(pool, i)
    if no_evict:
        for j in range(inst.ist[i, I_NRUN]):
            avail -= blocks_to_completion(inst, reqs, knobs, i, inst.run[i, j])
    paused = _trt_capacity(pool, inst, reqs, knobs, glob, i)
    budget = _trt_micro_batch(pool, inst, reqs, knobs, glob, i)
    if not paused and inst.ist[i, I_HOLD_CTX] == 0 and \
            not _trt_hold_contexts(inst, reqs, knobs, i, budget):
        _trt_admit(pool, inst, reqs, knobs, glob, i, budget, now, no_evict, avail)


# ------------------------------------------------------------------------ vLLM multi-step
@sim_jit
def schedule_decode_burst(pool, inst, reqs, knobs, glob, i, steps):
    """A decode-only batch of ``steps`` forward passes (vLLM <= 0.6 multi-step): each running
    request in admission order gets KV for ``k = min(steps, tokens left)`` tokens up front
    (preempting the last-admitted on block shortage, as V0's ``_schedule_running``), one
    token of the token budget and ``k`` computed tokens."""
    budget = knobs[i, K_MAX_TOKENS]
    idx = 0
    while idx < inst.ist[i, I_NRUN] and budget > 0:
        r = inst.run[i, idx]
        if not is_decode(reqs, r):
            idx += 1
            continue
        k = min(steps, reqs.output[r] - reqs.n_out[r])
        ok, _ = allocate_or_preempt(pool, inst, reqs, knobs, glob, i, r, k)
        if not ok:
            break
        add_to_batch(inst, reqs, i, r, 1)
        reqs.computed[r] += k - 1
        budget -= 1
        idx += 1


@sim_jit
def tokens_emitted(reqs, r):
    """Output tokens request ``r`` gets at the end of its step: 0 after a prefill chunk, 1
    after the step that completes its prompt or a decode step, ``k`` after a ``k``-token
    multi-step burst (``computed`` ran ``k - 1`` tokens past ``num_tokens``)."""
    k = reqs.computed[r] - num_tokens(reqs, r) + 1
    return k if k > 0 else 0


@sim_jit
def burst_steps(inst, reqs, knobs, i):
    """Forward passes instance ``i``'s scheduled step takes: ``num_scheduler_steps`` for a
    multi-step decode burst (every entry a decode), else 1."""
    n = knobs[i, K_MULTI_STEP]
    if n <= 1 or inst.ist[i, I_BATCH] == 0:
        return 1
    for j in range(inst.ist[i, I_BATCH]):
        r = inst.b_req[i, j]
        if reqs.n_out[r] == 0 or inst.b_ctx[i, j] != num_tokens(reqs, r) - 1:
            return 1
    return n


# ------------------------------------------------------------------------ capacity
def kv_tokens_to_admit(policy, new_token_ratio, prompt, output):
    """KV tokens an empty instance must hold for ``policy`` ever to admit a request of
    ``prompt`` and ``output`` tokens and run it to its end (arrays or numbers).

    Every policy holds the KV of all tokens but the last (``prompt + output - 1``).
    TensorRT-LLM's ``GUARANTEED_NO_EVICT`` reserves ``prompt + output`` tokens before
    admitting; SGLang with its reservation admits only if ``prompt + min(output, 4096)``
    is smaller than the free tokens. With fewer, the request waits forever.
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    peak = prompt + output - 1
    if int(policy) == int(Policy.TRTLLM_NO_EVICT):
        return prompt + output
    if int(policy) == int(Policy.SGLANG) and new_token_ratio > 0:
        return np.maximum(peak, prompt + np.minimum(output, CLIP_MAX_NEW_TOKENS) + 1)
    return peak


__all__ = ["blocks_to_completion", "burst_steps", "kv_tokens_to_admit", "schedule_decode_burst",
           "schedule_trtllm", "tokens_emitted", "trt_chunk"]
