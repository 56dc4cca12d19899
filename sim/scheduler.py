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
* ``sglang``: prefill first with decode fallback. If any prefill work can be scheduled
  (an unfinished chunked prefill first, then waiting requests) the step is prefill-only;
  otherwise all running requests decode, preempting the last-admitted on block shortage.
  A waiting request is admitted only when blocks for its whole prompt are free (SGLang's
  ``PrefillAdder``; without it a chunked prefill could be preempted and re-admitted
  forever while decodes starve). SGLang's reservation of future decode tokens
  (``new_token_ratio``) is not modelled; use ``watermark`` for head-room.
* ``prefill-priority`` (vLLM <= 0.5 default scheduler, BestServe §3.4.4): as ``sglang``
  but never chunked -- whole prompts are admitted first and decodes wait for them.

The watermark is applied to admissions from the waiting queue only when some other request
holds or is being given blocks (so an idle instance can always admit).
"""

from __future__ import annotations

from ._jitcache import sim_jit
from .kvcache import num_used
from .state import (
    A_CUTOFF,
    I_BATCH,
    I_NRUN,
    I_WLEN,
    K_BLOCK,
    K_CHUNKED,
    K_LONG_PREFILL,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_POLICY,
    K_WATERMARK,
    POLICY_SGLANG,
    POLICY_VLLM_V1,
    RUNNING,
    add_to_batch,
    allocate_running,
    allocate_waiting,
    find_cached_blocks,
    num_tokens,
    preempt_last,
    wq_peek,
    wq_pop,
)

MODE_ALL, MODE_PREFILL, MODE_DECODE = 0, 1, 2


@sim_jit
def _is_decode(reqs, r):
    """One new token to compute after at least one output (a decode step)."""
    return reqs.n_out[r] > 0 and reqs.computed[r] == num_tokens(reqs, r) - 1


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
        if mode != MODE_ALL and _is_decode(reqs, r) != (mode == MODE_DECODE):
            idx += 1
            continue
        num_new = _cap_new_tokens(knobs, i, num_tokens(reqs, r) - reqs.computed[r], budget)
        if num_new <= 0:
            idx += 1
            continue
        ok = allocate_running(pool, inst, reqs, knobs, glob, i, r, num_new)
        while not ok:
            victim = preempt_last(pool, inst, reqs, knobs, glob, i)
            preempted = True
            if victim == r:
                break
            ok = allocate_running(pool, inst, reqs, knobs, glob, i, r, num_new)
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
    bs = knobs[i, K_BLOCK]
    while inst.ist[i, I_WLEN] > 0 and budget > 0:
        if inst.ist[i, I_NRUN] >= knobs[i, K_MAX_SEQS]:
            break
        r = wq_peek(inst, i)
        if reqs.arrival[r] > inst.acc[i, A_CUTOFF]:
            break  # reached the engine after this step was formed (async scheduling)
        n_hit = find_cached_blocks(pool, inst, reqs, knobs, glob, i, r)
        num_new = num_tokens(reqs, r) - n_hit * bs
        if chunked:
            num_new = _cap_new_tokens(knobs, i, num_new, budget)
        elif num_new > budget:
            break
        busy = inst.ist[i, I_BATCH] > 0 or num_used(pool, i) > 0
        watermark = knobs[i, K_WATERMARK] if busy else 0
        reserve = num_tokens(reqs, r) if whole_prompt else 0
        if not allocate_waiting(pool, inst, reqs, knobs, glob, i, r, n_hit, num_new, watermark,
                                reserve):
            break
        wq_pop(inst, i)
        inst.run[i, inst.ist[i, I_NRUN]] = r
        inst.ist[i, I_NRUN] += 1
        reqs.status[r] = RUNNING
        if reqs.t_sched[r] != reqs.t_sched[r]:  # NaN: first time scheduled
            reqs.t_sched[r] = now
        if reqs.hit[r] < 0:
            reqs.hit[r] = n_hit * bs
        reqs.computed[r] = n_hit * bs
        add_to_batch(inst, reqs, i, r, num_new)
        budget -= num_new
    return budget


@sim_jit
def schedule_vllm_v1(pool, inst, reqs, knobs, glob, i, now):
    """vLLM v1 ``Scheduler.schedule``: running first, then waiting, mixed batches."""
    budget = knobs[i, K_MAX_TOKENS]
    budget, preempted = schedule_running(pool, inst, reqs, knobs, glob, i, budget, MODE_ALL)
    if not preempted:
        schedule_waiting(pool, inst, reqs, knobs, glob, i, budget, now, knobs[i, K_CHUNKED] != 0,
                         False)


@sim_jit
def schedule_prefill_first(pool, inst, reqs, knobs, glob, i, now, chunked):
    """Prefill-only batch if any prefill can run, else a decode-only batch."""
    budget = knobs[i, K_MAX_TOKENS]
    if chunked:
        budget, _ = schedule_running(pool, inst, reqs, knobs, glob, i, budget, MODE_PREFILL)
    schedule_waiting(pool, inst, reqs, knobs, glob, i, budget, now, chunked, True)
    if inst.ist[i, I_BATCH] > 0:
        return
    schedule_running(pool, inst, reqs, knobs, glob, i, knobs[i, K_MAX_TOKENS], MODE_DECODE)


@sim_jit
def schedule(pool, inst, reqs, knobs, glob, i, now):
    """Fill instance ``i``'s next batch with its policy; returns the batch size."""
    inst.ist[i, I_BATCH] = 0
    policy = knobs[i, K_POLICY]
    if policy == POLICY_VLLM_V1:
        schedule_vllm_v1(pool, inst, reqs, knobs, glob, i, now)
    elif policy == POLICY_SGLANG:
        schedule_prefill_first(pool, inst, reqs, knobs, glob, i, now, knobs[i, K_CHUNKED] != 0)
    else:
        schedule_prefill_first(pool, inst, reqs, knobs, glob, i, now, False)
    return inst.ist[i, I_BATCH]
