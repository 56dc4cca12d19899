"""SGLang's scheduler with its memory management (compiled): reservation of future decode
tokens, retraction, ``batch_is_full`` and mixed chunks.

Followed: SGLang ``python/sglang/srt/managers/scheduler.py`` (``get_next_batch_to_run``,
``get_new_batch_prefill``, ``update_running_batch``), ``schedule_policy.py``
(``PrefillAdder``), ``schedule_batch.py`` (``check_decode_mem``, ``retract_decode``,
``mix_with_running``) and ``global_config.py`` of the v0.4.x - v0.5.x releases (2025), where
these rules are the same. Pages are the simulator's KV blocks (SGLang's ``page_size``).

The policy (``sglang``) uses this module when the instance's ``new_token_ratio`` knob is
positive; with 0 it keeps the earlier, simpler model in :mod:`serveplan.sim.scheduler`. Each
scheduler iteration (one simulator step):

1. *Prefill* (``get_new_batch_prefill``), unless admission is closed (``batch_is_full``)
   and no chunked prefill is in progress. Remaining tokens ``rem_total = free tokens -
   offset``, where the offset starts at ``sum over running requests of min(max_new -
   generated, 4096) * new_token_ratio`` (plus one token per running request with mixed
   chunks) and grows by every admitted request's ``ceil_page(input) + min(max_new,
   4096)``. A chunked prefill in progress continues first (``add_chunked_req``: a chunk of
   ``min(chunk budget, rem_total)``). Waiting requests, first come first served: a request
   needs ``input + min(max_new - generated, 4096) < rem_total`` -- checked again after its
   cached prefix is locked (cached free blocks stop counting as evictable) -- else
   ``NO_TOKEN``: admission closes and stops; an input larger than the remaining input
   budget stops admission once something was admitted; with chunked prefill a prompt larger
   than the remaining chunk budget is cut to whole pages and becomes the chunked request.
   After each admission, no remaining tokens close admission; no budget left stops it.
   Running requests count as SGLang's running batch does -- after a decode batch, its
   finished requests included until the next decode iteration filters them: with
   ``max_running_requests`` reached admission closes.
2. If a prefill batch formed: with ``enable_mixed_chunk`` the running decodes join it (one
   token each), else it runs alone.
3. Else *decode* (``update_running_batch``): all running requests, one token each. If the
   free blocks do not hold the next token of each (``check_decode_mem``), requests are
   *retracted* -- fewest generated tokens first, then longest prompt, then the last
   admitted -- until ``retract_decode_steps`` (20) tokens per remaining request are free
   (at least one is retracted, one always stays); a retracted request frees its KV except
   its prompt's full blocks, which stay cached, and goes to the back of the waiting queue
   to be prefilled again with its generated tokens. The ratio then becomes ``min(1,
   (generated + 20 * n) / sum of max_new)`` over the ``n`` remaining requests; without
   retraction it decays by ``(init - min) / 600`` to ``min = 0.14 * init``. A decode
   iteration whose batch lost requests (finished or retracted) reopens admission.
4. An iteration without any batch (an idle instance) resets the ratio to its initial value.

The ``lpm`` schedule policy sorts the waiting queue first (:mod:`serveplan.sim.sglang_lpm`).
Not modelled: ``dfs-weight``, ``max_prefill_tokens`` apart
from the token budget (both are ``max_num_batched_tokens`` here), the order of running
requests after a mixed batch (SGLang puts the new ones first; it only breaks retraction
ties), ``ignore_eos`` requests' separate admission test.
"""

from __future__ import annotations

from ._jitcache import sim_jit
from .kvcache import M_SCHED_FULL, M_SCHED_NRUN, num_free
from .sglang_lpm import lpm_sort
from .state import (
    A_BUSY_UNTIL,
    A_NEW_TOKEN_RATIO,
    I_BATCH,
    I_NRUN,
    I_STEPS,
    I_WLEN,
    K_BLOCK,
    K_CHUNKED,
    K_LPM,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_MIXED_CHUNK,
    K_NEW_TOKEN_RATIO,
    add_to_batch,
    admit_request,
    allocate_running,
    allocate_waiting,
    cdiv,
    find_cached_blocks,
    hit_takes_free_block,
    is_decode,
    num_tokens,
    preempt_at,
    waiting_visible,
    wq_peek,
)

MIN_RATIO_FACTOR = 0.14  # global_config.default_min_new_token_ratio_factor
DECAY_STEPS = 600.0  # global_config.default_new_token_ratio_decay_steps
RETRACT_DECODE_STEPS = 20  # global_config.retract_decode_steps
CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.CLIP_MAX_NEW_TOKENS_ESTIMATION


@sim_jit
def init_ratio(knobs, i):
    """The instance's initial ``new_token_ratio`` (the knob holds thousandths)."""
    return knobs[i, K_NEW_TOKEN_RATIO] / 1000.0


@sim_jit
def in_prefill(reqs, r):
    """Running request ``r`` has prompt (or recompute) tokens left before it decodes."""
    left = num_tokens(reqs, r) - reqs.computed[r]
    return left > 1 or (left == 1 and reqs.n_out[r] == 0)


@sim_jit
def _ceil_page(tokens, bs):
    return cdiv(tokens, bs) * bs


@sim_jit
def _running_offset(inst, reqs, i, ratio):
    """Tokens reserved for the running decodes' future outputs."""
    offset = 0.0
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if not in_prefill(reqs, r):
            offset += min(reqs.output[r] - reqs.n_out[r], CLIP_MAX_NEW_TOKENS) * ratio
    return offset


@sim_jit
def _chunked_request(inst, reqs, i):
    """The running request whose prefill is in progress (SGLang's ``chunked_req``), or -1."""
    for j in range(inst.ist[i, I_NRUN]):
        if in_prefill(reqs, inst.run[i, j]):
            return inst.run[i, j]
    return -1


@sim_jit
def _evictable_hits(pool, inst, i, n_hit):
    """Hit blocks (``inst.hits``) that take a free block when admitted: cached ones in the
    free list, and CPU-tier ones (loaded into fresh blocks)."""
    n = 0
    for k in range(n_hit):
        if hit_takes_free_block(pool, inst, i, k):
            n += 1
    return n


@sim_jit
def _continue_chunk(pool, inst, reqs, knobs, glob, i, r, rem_chunk, rem_total):
    """``add_chunked_req``: the next chunk of ``r``. Returns ``(tokens charged, output
    tokens reserved)``."""
    bs = knobs[i, K_BLOCK]
    room = min(rem_chunk, int(rem_total))
    remaining = num_tokens(reqs, r) - reqs.computed[r]
    chunk = min(remaining, room)
    if chunk <= 0 or not allocate_running(pool, inst, reqs, knobs, glob, i, r, chunk):
        return 0, 0
    add_to_batch(inst, reqs, i, r, chunk)
    reserve = min(reqs.output[r], CLIP_MAX_NEW_TOKENS) if chunk == remaining else 0
    return _ceil_page(chunk, bs), reserve


@sim_jit
def _admit_one(pool, inst, reqs, knobs, glob, i, r, now, free_tok, total_off, rem_input,
               rem_chunk, n_can_run):
    """``PrefillAdder.add_one_req`` for waiting request ``r``. Returns ``(result, tokens
    charged, output tokens reserved, evictable hit tokens locked)``; result 0: admitted,
    1: no tokens (close admission), 2: stop for another reason."""
    bs = knobs[i, K_BLOCK]
    n_hit = find_cached_blocks(pool, inst, reqs, knobs, glob, i, r)
    extend = num_tokens(reqs, r) - n_hit * bs
    total = extend + min(max(reqs.output[r] - reqs.n_out[r], 0), CLIP_MAX_NEW_TOKENS)
    input_tokens = _ceil_page(extend, bs)
    locked = _evictable_hits(pool, inst, i, n_hit) * bs
    if total >= free_tok - total_off:
        return 1, 0, 0, 0
    if input_tokens >= rem_input and n_can_run > 0:
        return 2, 0, 0, 0
    if total >= free_tok - locked - total_off:  # the prefix is locked: no longer evictable
        return 1, 0, 0, 0
    num_new, reserve = extend, min(reqs.output[r], CLIP_MAX_NEW_TOKENS)
    if knobs[i, K_CHUNKED] != 0 and input_tokens > rem_chunk:
        num_new, reserve = rem_chunk // bs * bs, 0
        if num_new <= 0:
            return 2, 0, 0, 0
    if not allocate_waiting(pool, inst, reqs, knobs, glob, i, r, n_hit, num_new, 0, 0):
        return 1, 0, 0, 0
    admit_request(inst, reqs, knobs, i, r, n_hit, num_new, now)
    return 0, _ceil_page(num_new, bs), reserve, locked


@sim_jit
def _prefill(pool, inst, reqs, knobs, glob, i, now, chunked_r, seen_running, full):
    """``get_new_batch_prefill``; returns whether admission is closed afterwards."""
    if chunked_r < 0 and seen_running >= knobs[i, K_MAX_SEQS]:
        return True
    if knobs[i, K_LPM] != 0:  # calc_priority
        lpm_sort(pool, inst, reqs, knobs, glob, i)
    bs = knobs[i, K_BLOCK]
    offset = _running_offset(inst, reqs, i, inst.acc[i, A_NEW_TOKEN_RATIO])
    mixed = seen_running if knobs[i, K_MIXED_CHUNK] != 0 else 0
    free_tok = num_free(pool, i) * bs
    total_off = mixed + offset
    cur_off = mixed
    rem_input = knobs[i, K_MAX_TOKENS] - mixed
    rem_chunk = rem_input if knobs[i, K_CHUNKED] != 0 else 1 << 62
    n_can_run = 0
    if chunked_r >= 0:
        charge, reserve = _continue_chunk(pool, inst, reqs, knobs, glob, i, chunked_r,
                                          rem_chunk, free_tok - total_off)
        total_off += charge + reserve
        cur_off += charge
        rem_input -= charge
        rem_chunk -= charge
        n_can_run += 1
    while inst.ist[i, I_WLEN] > 0 and not full:
        if (n_can_run >= knobs[i, K_MAX_SEQS] - seen_running
                or inst.ist[i, I_NRUN] >= knobs[i, K_MAX_SEQS]):
            return True
        r = wq_peek(inst, i)
        if not waiting_visible(inst, reqs, i, r):
            break
        res, charge, reserve, locked = _admit_one(pool, inst, reqs, knobs, glob, i, r, now,
                                                  free_tok, total_off, rem_input, rem_chunk,
                                                  n_can_run)
        if res != 0:
            return full or res == 1
        free_tok -= locked
        total_off += charge + reserve
        cur_off += charge
        rem_input -= charge
        rem_chunk -= charge
        n_can_run += 1
        if free_tok - total_off <= 0 or free_tok - cur_off <= 0:
            return True
        if rem_input <= 0 or rem_chunk <= 0:
            break
    return full


@sim_jit
def mix_decodes(pool, inst, reqs, knobs, glob, i):
    """``mix_with_running``: every running decode joins the prefill batch with one token
    (SGLang allocates without a memory check; a decode whose block is missing waits)."""
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if is_decode(reqs, r) and allocate_running(pool, inst, reqs, knobs, glob, i, r, 1):
            add_to_batch(inst, reqs, i, r, 1)


@sim_jit
def _decode_blocks(inst, reqs, knobs, i):
    """Blocks the running decodes need for their next token, and how many decodes there
    are."""
    need = 0
    n = 0
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if is_decode(reqs, r):
            need += cdiv(reqs.computed[r] + 1, knobs[i, K_BLOCK]) - inst.nblk[i, reqs.slot[r]]
            n += 1
    return need, n


@sim_jit
def _retract_victim(inst, reqs, i):
    """Running position of the next request to retract: fewest generated tokens, then
    longest prompt, then the last admitted (the end of SGLang's sorted list)."""
    best = -1
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if not is_decode(reqs, r):
            continue
        if best < 0:
            best = j
            continue
        b = inst.run[i, best]
        if reqs.n_out[r] < reqs.n_out[b] or (
                reqs.n_out[r] == reqs.n_out[b] and reqs.prompt[r] >= reqs.prompt[b]):
            best = j
    return best


@sim_jit
def retract_decode(pool, inst, reqs, knobs, glob, i):
    """``retract_decode``: retract until the remaining decodes have ``RETRACT_DECODE_STEPS``
    free tokens each (and their next blocks), at least one, never the last. Returns the new
    ``new_token_ratio``."""
    bs = knobs[i, K_BLOCK]
    first = True
    while True:
        need, n = _decode_blocks(inst, reqs, knobs, i)
        free = num_free(pool, i)
        if n <= 1 or (not first and free * bs >= RETRACT_DECODE_STEPS * n and need <= free):
            break
        first = False
        j = _retract_victim(inst, reqs, i)
        r = inst.run[i, j]
        preempt_at(pool, inst, reqs, knobs, glob, i, j, reqs.prompt[r], False)
    generated = 0
    max_new = 0
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if is_decode(reqs, r):
            generated += reqs.n_out[r]
            max_new += reqs.output[r]
    return min(1.0, (generated + RETRACT_DECODE_STEPS * n) / max_new)


@sim_jit
def _decode(pool, inst, reqs, knobs, glob, i, seen_running, full):
    """``update_running_batch`` and the decode batch; returns whether admission stays
    closed."""
    need, n = _decode_blocks(inst, reqs, knobs, i)
    if n == 0:
        return False
    ratio = inst.acc[i, A_NEW_TOKEN_RATIO]
    if need > num_free(pool, i):
        ratio = retract_decode(pool, inst, reqs, knobs, glob, i)
    else:
        low = init_ratio(knobs, i) * MIN_RATIO_FACTOR
        ratio = max(ratio - (init_ratio(knobs, i) - low) / DECAY_STEPS, low)
    inst.acc[i, A_NEW_TOKEN_RATIO] = ratio
    _, n_left = _decode_blocks(inst, reqs, knobs, i)
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if is_decode(reqs, r) and allocate_running(pool, inst, reqs, knobs, glob, i, r, 1):
            add_to_batch(inst, reqs, i, r, 1)
    return full and n_left >= seen_running


@sim_jit
def _batch_size_seen(inst, reqs, i):
    """Requests in SGLang's running batch: all running ones but a prefill in progress."""
    n = 0
    for j in range(inst.ist[i, I_NRUN]):
        if not in_prefill(reqs, inst.run[i, j]):
            n += 1
    return n


@sim_jit
def schedule_sglang(pool, inst, reqs, knobs, glob, i, now):
    """One SGLang scheduler iteration on instance ``i`` (module docstring)."""
    if inst.ist[i, I_STEPS] == 0 or (inst.ist[i, I_NRUN] == 0
                                     and now > inst.acc[i, A_BUSY_UNTIL]):
        inst.acc[i, A_NEW_TOKEN_RATIO] = init_ratio(knobs, i)  # an idle iteration
    seen_running = pool.meta[i, M_SCHED_NRUN]
    if seen_running < 0:
        seen_running = _batch_size_seen(inst, reqs, i)
    full = pool.meta[i, M_SCHED_FULL] != 0
    chunked_r = _chunked_request(inst, reqs, i)
    if chunked_r >= 0 or (not full and inst.ist[i, I_WLEN] > 0):
        full = _prefill(pool, inst, reqs, knobs, glob, i, now, chunked_r, seen_running, full)
    decoded = False
    if inst.ist[i, I_BATCH] > 0:
        if knobs[i, K_MIXED_CHUNK] != 0:
            mix_decodes(pool, inst, reqs, knobs, glob, i)
    else:
        full = _decode(pool, inst, reqs, knobs, glob, i, seen_running, full)
        decoded = inst.ist[i, I_BATCH] > 0
    if inst.ist[i, I_BATCH] == 0 and inst.ist[i, I_NRUN] == 0 and inst.ist[i, I_WLEN] > 0:
        # the last requests finished while admission was closed: SGLang's next iteration
        # finds no batch (resetting the ratio) and the one after prefills -- at once here
        inst.acc[i, A_NEW_TOKEN_RATIO] = init_ratio(knobs, i)
        full = _prefill(pool, inst, reqs, knobs, glob, i, now, -1, 0, False)
    # After a decode batch SGLang's running batch keeps its finished requests until the
    # next decode iteration filters them; a prefill batch is filtered as it merges (-1).
    pool.meta[i, M_SCHED_NRUN] = _batch_size_seen(inst, reqs, i) if decoded else -1
    pool.meta[i, M_SCHED_FULL] = 1 if full else 0


__all__ = ["CLIP_MAX_NEW_TOKENS", "DECAY_STEPS", "MIN_RATIO_FACTOR", "RETRACT_DECODE_STEPS",
           "in_prefill", "init_ratio", "mix_decodes", "retract_decode", "schedule_sglang"]
