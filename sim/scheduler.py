"""Scheduler policies: fill one instance's next batch (compiled).

A policy reads the instance's running list and waiting queue and writes the step's batch
(``inst.b_req`` / ``b_new`` / ``b_ctx``, count in ``inst.ist[i, I_BATCH]``), allocating KV
blocks and preempting as it goes. Token counts follow vLLM v1: a request has
``num_tokens = prompt + generated`` and ``computed`` tokens; each step schedules up to
``num_tokens - computed`` of them, so a prefill, a chunk of one, a recompute after
preemption and a decode (one token) are the same operation.

* ``vllm-v1`` (``Scheduler.schedule``): running requests first, in admission order, each
  capped by ``long_prefill_token_threshold`` and the remaining token budget; when blocks run
  out the last-admitted running request is preempted (recompute), possibly the request
  itself. Then, if nothing was preempted, waiting requests in FCFS order while the budget,
  ``max_num_seqs`` and free blocks (minus the watermark) allow; without chunked prefill a
  prompt that does not fit the remaining budget stops admission. Batches mix prefills and
  decodes.
* ``sglang`` with ``new_token_ratio > 0``: SGLang's own scheduler -- reservation of future
  decode tokens, retraction, ``batch_is_full`` -- in :mod:`serveplan.sim.sglang_policy`.
* ``sglang`` with ``new_token_ratio = 0`` (a simpler model): prefill first with decode
  fallback. If any prefill work can be scheduled (an unfinished chunked prefill first, then
  waiting requests) the step is prefill-only (with ``enable_mixed_chunk`` the running
  decodes join it); otherwise all running requests decode, preempting the last-admitted on
  block shortage. A waiting request is admitted only when blocks for its whole prompt are
  free (without it a chunked prefill could be preempted and re-admitted forever while
  decodes starve); ``watermark`` gives head-room.
* ``prefill-priority`` (vLLM <= 0.6 V0 default scheduler, BestServe §3.4.4): as the simple
  ``sglang`` but never chunked -- whole prompts are admitted first and decodes wait for
  them. With ``num_scheduler_steps > 1`` a decode batch is a multi-step burst
  (:mod:`serveplan.sim.engine_policies`).
* ``trtllm-no-evict`` / ``trtllm-max-utilization``: TensorRT-LLM's capacity and micro-batch
  schedulers (:mod:`serveplan.sim.engine_policies`).

The watermark is applied to admissions from the waiting queue only when some other request
holds or is being given blocks (so an idle instance can always admit).
"""

from __future__ import annotations

from ._jitcache import sim_jit
from .engine_policies import schedule_decode_burst, schedule_trtllm
from .kvcache import num_used
from .sglang_policy import mix_decodes, schedule_sglang
from .specdecode import has_drafts, lookahead_slots, verify_tokens
from .state import (
    I_BATCH,
    I_NRUN,
    I_WLEN,
    K_BLOCK,
    K_CHUNKED,
    K_LONG_PREFILL,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_MIXED_CHUNK,
    K_MULTI_STEP,
    K_NEW_TOKEN_RATIO,
    K_POLICY,
    K_WATERMARK,
    POLICY_PREFILL_PRIORITY,
    POLICY_SGLANG,
    POLICY_TRTLLM_MAX_UTILIZATION,
    POLICY_TRTLLM_NO_EVICT,
    POLICY_VLLM_V1,
    add_to_batch,
    admit_request,
    allocate_or_preempt,
    allocate_waiting,
    find_cached_blocks,
    is_decode,
    num_tokens,
    waiting_visible,
    wq_peek,
)

MODE_ALL, MODE_PREFILL, MODE_DECODE = 0, 1, 2


@sim_jit
def _cap_new_tokens(knobs, i, num_new, budget):
    thresh = knobs[i, K_LONG_PREFILL]
    if knobs[i, K_CHUNKED] != 0 and 0 < thresh < num_new:
        num_new = thresh
    return min(num_new, budget)


@sim_jit
def schedule_running(pool, inst, reqs, knobs, glob, i, budget, mode):
    """Schedule running requests in order; returns ``(budget left, preempted any)``.

    ``mode``: ``MODE_ALL`` every request (vLLM v1), ``MODE_PREFILL`` only unfinished
    prefills (a chunked prefill continuing), ``MODE_DECODE`` only decodes. When blocks run
    out the last-admitted running request is preempted, in every mode (chunked prefills
    admitted together could otherwise wait for each other's blocks forever).
    """
    preempted = False
    idx = 0
    while idx < inst.ist[i, I_NRUN] and budget > 0:
        r = inst.run[i, idx]
        if mode != MODE_ALL and is_decode(reqs, r) != (mode == MODE_DECODE):
            idx += 1
            continue
        spec = has_drafts(reqs, knobs, i, r)  # a verify step (specdecode)
        want = verify_tokens(reqs, knobs, i, r) if spec else \
            num_tokens(reqs, r) - reqs.computed[r]
        num_new = _cap_new_tokens(knobs, i, want, budget)
        if num_new <= 0:
            idx += 1
            continue
        extra = lookahead_slots(reqs, knobs, i, r, num_new) if spec else 0
        ok, pre = allocate_or_preempt(pool, inst, reqs, knobs, glob, i, r, num_new + extra)
        preempted = preempted or pre
        if not ok:
            break
        add_to_batch(inst, reqs, i, r, num_new)
        budget -= num_new
        idx += 1
    return budget, preempted


@sim_jit
def schedule_waiting(pool, inst, reqs, knobs, glob, i, budget, now, chunked, whole_prompt):
    """Admit waiting requests in FCFS order; returns the budget left.

    ``whole_prompt``: admit a (chunk of a) prompt only if blocks for all of it are free, as
    SGLang's ``PrefillAdder`` does; vLLM v1 checks the scheduled chunk only.
    """
    while inst.ist[i, I_WLEN] > 0 and budget > 0:
        left = admit_head(pool, inst, reqs, knobs, glob, i, budget, now, chunked, whole_prompt)
        if left < 0:
            break
        budget = left
    return budget


@sim_jit
def admit_head(pool, inst, reqs, knobs, glob, i, budget, now, chunked, whole_prompt):
    """Admit the head of the waiting queue with ``budget`` tokens left (one turn of
    :func:`schedule_waiting`); returns the budget left, or -1 if the head cannot be
    admitted (admission stops)."""
    if inst.ist[i, I_NRUN] >= knobs[i, K_MAX_SEQS]:
        return -1
    r = wq_peek(inst, i)
    if not waiting_visible(inst, reqs, i, r):
        return -1  # reached the engine after this step was formed (async scheduling)
    n_hit = find_cached_blocks(pool, inst, reqs, knobs, glob, i, r)
    num_new = num_tokens(reqs, r) - n_hit * knobs[i, K_BLOCK]
    if chunked:
        num_new = _cap_new_tokens(knobs, i, num_new, budget)
    elif num_new > budget:
        return -1
    busy = inst.ist[i, I_BATCH] > 0 or num_used(pool, i) > 0
    watermark = knobs[i, K_WATERMARK] if busy else 0
    reserve = num_tokens(reqs, r) if whole_prompt else 0
    if not allocate_waiting(pool, inst, reqs, knobs, glob, i, r, n_hit, num_new, watermark,
                            reserve):
        return -1
    admit_request(inst, reqs, knobs, i, r, n_hit, num_new, now)
    return budget - num_new


@sim_jit
def schedule_vllm_v1(pool, inst, reqs, knobs, glob, i, now):
    """vLLM v1 ``Scheduler.schedule``: running first, then waiting, mixed batches."""
    budget = knobs[i, K_MAX_TOKENS]
    budget, preempted = schedule_running(pool, inst, reqs, knobs, glob, i, budget, MODE_ALL)
    if not preempted:
        schedule_waiting(pool, inst, reqs, knobs, glob, i, budget, now, knobs[i, K_CHUNKED] != 0,
                         False)


@sim_jit
def _count_decodes(inst, reqs, i):
    n = 0
    for j in range(inst.ist[i, I_NRUN]):
        if is_decode(reqs, inst.run[i, j]):
            n += 1
    return n


@sim_jit
def schedule_prefill_first(pool, inst, reqs, knobs, glob, i, now, chunked, mixed, steps):
    """Prefill-only batch if any prefill can run, else a decode-only batch.

    ``mixed`` (SGLang ``--enable-mixed-chunk``): the running decodes join a prefill batch,
    their tokens taken from its budget first. ``steps`` > 1 (vLLM <= 0.6
    ``num_scheduler_steps``): a decode-only batch is a multi-step burst.
    """
    budget = knobs[i, K_MAX_TOKENS]
    if mixed:
        budget -= _count_decodes(inst, reqs, i)
    if chunked:
        budget, _ = schedule_running(pool, inst, reqs, knobs, glob, i, budget, MODE_PREFILL)
    schedule_waiting(pool, inst, reqs, knobs, glob, i, budget, now, chunked, True)
    if inst.ist[i, I_BATCH] > 0:
        if mixed:
            mix_decodes(pool, inst, reqs, knobs, glob, i)
    elif steps > 1:
        schedule_decode_burst(pool, inst, reqs, knobs, glob, i, steps)
    else:
        schedule_running(pool, inst, reqs, knobs, glob, i, knobs[i, K_MAX_TOKENS], MODE_DECODE)


@sim_jit
def schedule(pool, inst, reqs, knobs, glob, i, now):
    """Fill instance ``i``'s next batch with its policy; returns the batch size."""
    inst.ist[i, I_BATCH] = 0
    policy = knobs[i, K_POLICY]
    if policy == POLICY_VLLM_V1:
        schedule_vllm_v1(pool, inst, reqs, knobs, glob, i, now)
    elif policy == POLICY_SGLANG and knobs[i, K_NEW_TOKEN_RATIO] > 0:
        schedule_sglang(pool, inst, reqs, knobs, glob, i, now)
    elif policy == POLICY_SGLANG:
        schedule_prefill_first(pool, inst, reqs, knobs, glob, i, now, knobs[i, K_CHUNKED] != 0,
                               knobs[i, K_MIXED_CHUNK] != 0, 1)
    elif policy == POLICY_TRTLLM_NO_EVICT or policy == POLICY_TRTLLM_MAX_UTILIZATION:
        schedule_trtllm(pool, inst, reqs, knobs, glob, i, now,
                        policy == POLICY_TRTLLM_NO_EVICT)
    else:
        steps = knobs[i, K_MULTI_STEP] if policy == POLICY_PREFILL_PRIORITY else 1
        schedule_prefill_first(pool, inst, reqs, knobs, glob, i, now, False, False, steps)
    return inst.ist[i, I_BATCH]
