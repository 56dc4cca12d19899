"""Simulator state: status codes, knob indices, preallocated arrays and per-request helpers.

Everything the compiled loop touches is a NumPy array grouped in a ``namedtuple``
(numba passes named tuples of arrays without boxing). There are three groups:

* :data:`Reqs` -- one entry per request (structure of arrays), sized once;
* :data:`Inst` -- per-instance scheduler state (running list, waiting ring buffer, block
  tables of the running slots, the batch in flight), stacked over instances;
* :class:`~serveplan.sim.kvcache.KVPool` -- the KV blocks of every instance.

Helpers here implement vLLM v1's request-level KV operations
(``KVCacheManager.get_computed_blocks`` / ``allocate_slots`` / ``free`` and the scheduler's
``_preempt_request``); policies in :mod:`serveplan.sim.scheduler` compose them.

Prefix-cache block hashes
-------------------------
Engine block ``j`` of request ``r`` holds tokens ``[j B, (j+1) B)`` (``B`` = ``block_size``).
If the workload carries prefix hash ids with block size ``H`` (Mooncake: 512 tokens,
synthetic prefixes: any) and the engine block lies inside the prompt, its hash is
``mix(hash_ids[r][h], j)`` with ``h = ((j+1) B - 1) // H``, the trace block holding the
engine block's last token: equal trace ids at ``h`` mean equal tokens up to the end of
trace block ``h`` (trace ids are prefix hashes), hence an equal engine block *and* an
equal prefix before it. So a hit needs the trace prefix to match through the trace block
containing the engine block; engine blocks of a partially matching trace block do not hit
(sharing is at the coarser of the two granularities). Every other block (no hash ids, or
holding output tokens) gets a hash private to its request, which only a preempted request
resuming its own work can hit -- as in vLLM, where such blocks stay cached after
preemption until evicted.
"""

from __future__ import annotations

from collections import namedtuple
from enum import IntEnum

import numpy as np

from ._jitcache import sim_jit
from .kvcache import (
    cache_block,
    charge_cpu_load,
    cpu_holds,
    cpu_on,
    cpu_pin,
    cpu_unpin,
    load_from_cpu,
    lookup,
    mix64,
    num_free,
    pop_free,
    release,
    touch,
)


class RequestStatus(IntEnum):
    """Ordered request status, stored as ``int8`` (as vLLM's ``RequestStatus``).

    ``status > PREEMPTED`` means finished.
    """

    PENDING = 0  # not arrived yet (or closed-loop request not yet released)
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    FINISHED_STOPPED = 4  # produced its output_len tokens
    FINISHED_LENGTH_CAPPED = 5  # stopped at max_model_len (output clipped)
    FINISHED_IGNORED = 6  # prompt longer than max_model_len - 1: rejected at arrival


PENDING = int(RequestStatus.PENDING)
WAITING = int(RequestStatus.WAITING)
RUNNING = int(RequestStatus.RUNNING)
PREEMPTED = int(RequestStatus.PREEMPTED)
FINISHED_STOPPED = int(RequestStatus.FINISHED_STOPPED)
FINISHED_LENGTH_CAPPED = int(RequestStatus.FINISHED_LENGTH_CAPPED)
FINISHED_IGNORED = int(RequestStatus.FINISHED_IGNORED)


class Policy(IntEnum):
    """Scheduler policy codes."""

    VLLM_V1 = 0  # running first, then waiting; mixed prefill/decode batches
    SGLANG = 1  # prefill-only batch when prefills can be scheduled, else decode
    PREFILL_PRIORITY = 2  # vLLM <= 0.6 (V0) / BestServe: whole prefills first, never mixed
    # 3 is POLICY_PYTHON (a research policy filled in Python)
    TRTLLM_NO_EVICT = 4  # TensorRT-LLM capacity scheduler GUARANTEED_NO_EVICT
    TRTLLM_MAX_UTILIZATION = 5  # TensorRT-LLM capacity scheduler MAX_UTILIZATION
    SKIP_JOIN_MLFQ = 6  # FastServe's skip-join MLFQ order, then vLLM v1's rules
    H2Q_BR = 7  # Frontier's history-aware two-queue order with bounded release, then vLLM v1


class Router(IntEnum):
    """Router codes (see :mod:`serveplan.sim.router`)."""

    ROUND_ROBIN = 0
    LEAST_OUTSTANDING_TOKENS = 1
    LEAST_REQUESTS = 2  # vLLM's DP balancer score: 4 * waiting + running


POLICY_VLLM_V1 = int(Policy.VLLM_V1)
POLICY_SGLANG = int(Policy.SGLANG)
POLICY_PREFILL_PRIORITY = int(Policy.PREFILL_PRIORITY)
POLICY_TRTLLM_NO_EVICT = int(Policy.TRTLLM_NO_EVICT)
POLICY_TRTLLM_MAX_UTILIZATION = int(Policy.TRTLLM_MAX_UTILIZATION)
POLICY_SKIP_JOIN_MLFQ = int(Policy.SKIP_JOIN_MLFQ)
POLICY_H2Q_BR = int(Policy.H2Q_BR)

POLICY_PYTHON = 3  # a Python research policy fills the batch (serveplan.sim.pyhook)

# per-instance engine knobs: knobs[i, K_*]. K_ROLE is the instance's role
# (serveplan.sim.pools.Role), K_COST its row in the cost tables, K_SEQ_CAP its configured
# max_num_seqs and K_SLOTS its sequence slots (a prefill instance has extra slots for the
# finished prefills whose KV it holds; K_MAX_SEQS may be lowered while it holds them).
# K_ASYNC: the engine schedules step k+1 while step k runs (vLLM's async scheduling, SGLang's
# and TRT-LLM's overlap schedulers); K_MULTI_STEP: decode steps per scheduling (vLLM <= 0.6
# ``num_scheduler_steps``); K_MIXED_CHUNK: SGLang ``--enable-mixed-chunk``;
# K_NEW_TOKEN_RATIO: SGLang's initial ``new_token_ratio`` in thousandths.
# K_SPEC_TOKENS: speculative decoding's num_speculative_tokens (0: off); K_SPEC_LOOKAHEAD:
# KV slots reserved past a verify step for the drafter (vLLM's num_lookahead_tokens).
# K_GROUP, K_GROUP_SIZE: the first instance and the size of the lockstep group the instance
# belongs to (the attention data-parallel ranks of one engine, which start their steps
# together and end them with the slowest, serveplan.sim.loop); a lone instance is its own
# group of one. K_DP_TOKENS: how many tokens the MoE layers of such a group see in a step
# (DP_TOKENS_*, serveplan.sim.pools.DPTokens). K_RECV_INTERVAL: SGLang's
# --scheduler-recv-interval (new requests are read every that many decode iterations).
# K_WAIT_ITERS, K_WAIT_TOKENS: TensorRT-LLM's batch waiting (batch_wait_timeout_iters, and
# batch_wait_max_tokens_ratio x max_num_tokens in tokens). K_LPM: SGLang's --schedule-policy
# lpm (serveplan.sim.sglang_lpm). K_ADP_BALANCE, K_ADP_TIMEOUT, K_ADP_BATCH_WAIT:
# TensorRT-LLM's attention_dp_config (enable_balance, timeout_iters, batching_wait_iters).
(K_POLICY, K_MAX_SEQS, K_MAX_TOKENS, K_BLOCK, K_PREFIX, K_CHUNKED, K_LONG_PREFILL,
 K_WATERMARK, K_MAX_MODEL_LEN, K_ROLE, K_COST, K_SEQ_CAP, K_SLOTS, K_ASYNC, K_MULTI_STEP,
 K_MIXED_CHUNK, K_NEW_TOKEN_RATIO, K_SPEC_TOKENS, K_SPEC_LOOKAHEAD, K_GROUP,
 K_GROUP_SIZE, K_DP_TOKENS, K_RECV_INTERVAL, K_WAIT_ITERS, K_WAIT_TOKENS, K_LPM,
 K_ADP_BALANCE, K_ADP_TIMEOUT, K_ADP_BATCH_WAIT) = range(29)
N_KNOBS = 29
DP_TOKENS_MAX, DP_TOKENS_SUM, DP_TOKENS_SGLANG = 0, 1, 2
# global knobs and counters: glob[G_*]. Arrivals are routed to instances
# [G_ENTRY_LO, G_ENTRY_HI) (the colocated or prefill instances); G_PAUSE is 1 + the instance
# whose Python policy must fill the next batch (0: not paused). G_STOP_DONE > 0: the loop
# returns once that many requests have finished (a layout switch, serveplan.sim.reconfig;
# the time in clock[0]); G_START_IDLE != 0: the loop first starts every idle instance with
# work at the time it is given (state set up outside the loop), then handles events.
# G_DEFER != 0 while a lockstep group schedules its members: a scheduled step is only
# marked busy, and the group prices its members together (serveplan.sim.step.price_step).
# G_CAP > 0: open-loop sends capped at G_CAP requests in flight (vllm bench serve
# --max-concurrency), G_INFLIGHT of them now; arrivals beyond wait, in order, from request
# G_HELD_HEAD on (G_HELD_LEN of them).
(G_ROUTER, G_CONCURRENCY, G_HASH_BLOCK, G_NEXT, G_NOPEN, G_DONE, G_RR, G_STEPS, G_ERROR,
 G_MAX_STEPS, G_ENTRY_LO, G_ENTRY_HI, G_PAUSE, G_STOP_DONE, G_START_IDLE,
 G_DEFER, G_CAP, G_INFLIGHT, G_HELD_HEAD, G_HELD_LEN) = range(20)
N_GLOB = 20
ERR_NONE, ERR_STALL, ERR_MAX_STEPS = 0, 1, 2
CPU_HIT = -2  # an inst.hits entry: the block is in the CPU tier, not on the GPU
# per-instance integer state: inst.ist[i, I_*]. I_RECV: decode iterations since the
# scheduler last read new requests (K_RECV_INTERVAL); I_LAST_EXTEND: the last step held
# prompt tokens; I_WAITED: iterations TensorRT-LLM has held new contexts (K_WAIT_ITERS).
# I_HOLD_CTX != 0: the step schedules no new context (TensorRT-LLM's attention-DP balance);
# I_ADP_WAITED, I_ADP_BATCHED: that balance's two counters, kept on the group's first rank.
(I_NRUN, I_WHEAD, I_WLEN, I_BUSY, I_BATCH, I_NSLOT, I_STEPS, I_RECV, I_LAST_EXTEND,
 I_WAITED, I_HOLD_CTX, I_ADP_WAITED, I_ADP_BATCHED) = range(13)
N_IST = 13
# per-instance float accumulators: inst.acc[i, A_*]. A_LAST_START: start of the last step;
# A_CUTOFF: requests that reached the engine after it are not seen by the step being
# scheduled (async scheduling formed it while the previous step ran); A_NEW_TOKEN_RATIO:
# SGLang's current (decaying) new_token_ratio; A_LAST_POLL: when the scheduler last read
# new requests (K_RECV_INTERVAL > 1).
(A_BUSY_UNTIL, A_BUSY_TIME, A_KV_TIME, A_BATCH_TIME, A_TOKENS, A_PREFILL_TOKENS, A_LAST_START,
 A_CUTOFF, A_NEW_TOKEN_RATIO, A_LAST_POLL) = range(10)
N_ACC = 10

Reqs = namedtuple("Reqs", [
    "arrival", "prompt", "output", "computed", "n_out", "status", "inst", "slot",
    "t_sched", "t_first", "t_last", "t_finish", "itl_max", "n_preempt", "hit",
    "hash_ids", "hash_off", "cpu_hit", "prio",
])
Inst = namedtuple("Inst", [
    "ist", "acc", "run", "wq", "blocks", "nblk", "nhashed", "free_slots",
    "b_req", "b_new", "b_ctx", "load", "hits",
])


def make_reqs(arrival, prompt, output, hash_ids=None, hash_off=None) -> Reqs:
    """Request arrays for ``n`` requests (copies; the inputs are not modified)."""
    n = len(prompt)
    nan = np.full(n, np.nan)
    if hash_ids is None:
        hash_ids = np.zeros(0, dtype=np.int64)
        hash_off = np.zeros(n + 1, dtype=np.int64)
    return Reqs(
        arrival=np.array(arrival, dtype=np.float64),
        prompt=np.array(prompt, dtype=np.int64),
        output=np.array(output, dtype=np.int64),
        computed=np.zeros(n, dtype=np.int64),
        n_out=np.zeros(n, dtype=np.int64),
        status=np.zeros(n, dtype=np.int8),
        inst=np.full(n, -1, dtype=np.int32),
        slot=np.full(n, -1, dtype=np.int32),
        t_sched=nan.copy(), t_first=nan.copy(), t_last=nan.copy(), t_finish=nan.copy(),
        itl_max=nan.copy(),
        n_preempt=np.zeros(n, dtype=np.int32),
        hit=np.full(n, -1, dtype=np.int64),
        hash_ids=np.array(hash_ids, dtype=np.int64),  # a writable copy (traces are read-only)
        hash_off=np.array(hash_off, dtype=np.int64),
        cpu_hit=np.zeros(n, dtype=np.int64),
        prio=np.zeros(n, dtype=np.int64),
    )


def _initial_acc(n_inst: int) -> np.ndarray:
    acc = np.zeros((n_inst, N_ACC), dtype=np.float64)
    acc[:, A_CUTOFF] = np.inf
    return acc


def make_inst(n_inst: int, max_num_seqs, max_blocks_per_req: int, queue_cap: int) -> Inst:
    """Per-instance state: ``max_num_seqs`` slots (an int, or one per instance) of
    ``max_blocks_per_req`` blocks each; arrays are sized for the largest instance."""
    slots = np.broadcast_to(np.asarray(max_num_seqs, dtype=np.int64), (n_inst,))
    s, mb = int(slots.max()), int(max_blocks_per_req)
    inst = Inst(
        ist=np.zeros((n_inst, N_IST), dtype=np.int64),
        acc=_initial_acc(n_inst),
        run=np.full((n_inst, s), -1, dtype=np.int64),
        wq=np.full((n_inst, max(int(queue_cap), 1)), -1, dtype=np.int32),
        blocks=np.full((n_inst, s, mb), -1, dtype=np.int32),
        nblk=np.zeros((n_inst, s), dtype=np.int32),
        nhashed=np.zeros((n_inst, s), dtype=np.int32),
        free_slots=np.tile(np.arange(s, dtype=np.int32)[::-1], (n_inst, 1)),
        b_req=np.zeros((n_inst, s), dtype=np.int64),
        b_new=np.zeros((n_inst, s), dtype=np.int64),
        b_ctx=np.zeros((n_inst, s), dtype=np.int64),
        load=np.zeros(n_inst, dtype=np.int64),
        hits=np.zeros(mb, dtype=np.int32),
    )
    for i, k in enumerate(slots):
        inst.free_slots[i, : int(k)] = np.arange(int(k), dtype=np.int32)[::-1]
    inst.ist[:, I_NSLOT] = slots
    return inst


# ------------------------------------------------------------------------ waiting queue
@sim_jit
def wq_push_back(inst, i, r):
    cap = inst.wq.shape[1]
    inst.wq[i, (inst.ist[i, I_WHEAD] + inst.ist[i, I_WLEN]) % cap] = r
    inst.ist[i, I_WLEN] += 1


@sim_jit
def wq_push_front(inst, i, r):
    cap = inst.wq.shape[1]
    h = (inst.ist[i, I_WHEAD] - 1) % cap
    inst.wq[i, h] = r
    inst.ist[i, I_WHEAD] = h
    inst.ist[i, I_WLEN] += 1


@sim_jit
def wq_peek(inst, i):
    return np.int64(inst.wq[i, inst.ist[i, I_WHEAD]])


@sim_jit
def wq_pop(inst, i):
    cap = inst.wq.shape[1]
    r = np.int64(inst.wq[i, inst.ist[i, I_WHEAD]])
    inst.ist[i, I_WHEAD] = (inst.ist[i, I_WHEAD] + 1) % cap
    inst.ist[i, I_WLEN] -= 1
    return r


# ------------------------------------------------------------------------ KV per request
@sim_jit
def cdiv(a, b):
    return (a + b - 1) // b


@sim_jit
def num_tokens(reqs, r):
    """Prompt plus generated tokens (vLLM ``request.num_tokens``)."""
    return reqs.prompt[r] + reqs.n_out[r]


@sim_jit
def block_key(reqs, r, j, block_size, hash_block):
    """Prefix-cache hash of engine block ``j`` of request ``r`` (module docstring)."""
    end = (j + 1) * block_size
    if hash_block > 0 and end <= reqs.prompt[r]:
        h = (end - 1) // hash_block
        return mix64(mix64(2 * reqs.hash_ids[reqs.hash_off[r] + h]) + j)
    return mix64(mix64(2 * r + 1) + j)


@sim_jit
def find_cached_blocks(pool, inst, reqs, knobs, glob, i, r):
    """Longest run of cached leading blocks of ``r`` (at most ``num_tokens - 1`` tokens).

    The block ids go to ``inst.hits``; returns their count (vLLM ``get_computed_blocks``).
    Where the GPU cache stops, the instance's CPU tier may continue the run: those blocks
    are marked ``CPU_HIT`` and loaded at admission (:func:`allocate_waiting`), as vLLM's
    offloading connector extends the GPU hit (``get_num_new_matched_tokens``).
    """
    if knobs[i, K_PREFIX] == 0:
        return 0
    bs = knobs[i, K_BLOCK]
    limit = (num_tokens(reqs, r) - 1) // bs
    k = 0
    while k < limit:
        b = lookup(pool, i, block_key(reqs, r, k, bs, glob[G_HASH_BLOCK]))
        if b < 0:
            break
        inst.hits[k] = b
        k += 1
    if k < limit and cpu_on(pool, i):
        while k < limit and cpu_holds(pool, i, block_key(reqs, r, k, bs, glob[G_HASH_BLOCK])):
            inst.hits[k] = CPU_HIT
            k += 1
    return k


@sim_jit
def hit_takes_free_block(pool, inst, i, k):
    """Whether hit ``k`` of ``inst.hits`` takes a block off the free list when admitted: a
    cached block sitting in the free list, or a CPU-tier block loaded into a fresh one."""
    return inst.hits[k] == CPU_HIT or pool.ref[i, inst.hits[k]] == 0


@sim_jit
def _cache_full_blocks(pool, inst, reqs, knobs, glob, i, r, s, upto_tokens, private):
    """Register the request's full blocks below ``upto_tokens`` in the prefix cache.

    Blocks with a private hash (see the module docstring) are registered only when
    ``private`` is set, i.e. when the request is preempted: only the request itself can hit
    them, and only after its preemption, so registering them then is equivalent to vLLM's
    registering at allocation, at a fraction of the hashing.
    """
    if knobs[i, K_PREFIX] == 0:
        return
    bs = knobs[i, K_BLOCK]
    full = upto_tokens // bs
    if not private:
        shared = reqs.prompt[r] // bs if glob[G_HASH_BLOCK] > 0 else 0
        full = min(full, shared)
    for j in range(inst.nhashed[i, s], full):
        cache_block(pool, i, inst.blocks[i, s, j], block_key(reqs, r, j, bs, glob[G_HASH_BLOCK]))
    if full > inst.nhashed[i, s]:
        inst.nhashed[i, s] = full


@sim_jit
def allocate_running(pool, inst, reqs, knobs, glob, i, r, num_new):
    """Blocks for ``num_new`` more tokens of running request ``r``; False if not enough free."""
    total = reqs.computed[r] + num_new
    if not reserve_blocks(pool, inst, reqs, knobs, i, r, total):
        return False
    _cache_full_blocks(pool, inst, reqs, knobs, glob, i, r, reqs.slot[r], total, False)
    return True


@sim_jit
def reserve_blocks(pool, inst, reqs, knobs, i, r, tokens):
    """Blocks for the first ``tokens`` tokens of running request ``r``, taken now; they
    enter the prefix cache as their tokens are computed (:func:`allocate_running`).
    False, changing nothing, if not enough are free."""
    s = reqs.slot[r]
    need = cdiv(tokens, knobs[i, K_BLOCK]) - inst.nblk[i, s]
    if need > num_free(pool, i):
        return False
    for _ in range(need):
        inst.blocks[i, s, inst.nblk[i, s]] = pop_free(pool, i)
        inst.nblk[i, s] += 1
    return True


@sim_jit
def _take_hits(pool, inst, reqs, glob, i, r, s, n_hit, bs):
    """The ``n_hit`` hit blocks of ``r`` become the first of slot ``s``'s block table: GPU
    hits are touched; CPU-tier hits are pinned, loaded into fresh blocks and unpinned
    (last block first, so a prefix's head stays the most recently used), and the load is
    charged to the instance's next step."""
    n_cpu = 0
    for k in range(n_hit):
        if inst.hits[k] == CPU_HIT:
            cpu_pin(pool, i, block_key(reqs, r, k, bs, glob[G_HASH_BLOCK]))
            n_cpu += 1
    for k in range(n_hit):
        b = inst.hits[k]
        if b == CPU_HIT:
            b = load_from_cpu(pool, i, block_key(reqs, r, k, bs, glob[G_HASH_BLOCK]))
        else:
            touch(pool, i, b)
        inst.blocks[i, s, k] = b
    if n_cpu == 0:
        return
    for k in range(n_hit - 1, n_hit - n_cpu - 1, -1):
        cpu_unpin(pool, i, block_key(reqs, r, k, bs, glob[G_HASH_BLOCK]))
    charge_cpu_load(pool, i, n_cpu)
    if reqs.hit[r] < 0:  # first admission (admit_request records the total)
        reqs.cpu_hit[r] = n_cpu * bs


@sim_jit
def allocate_waiting(pool, inst, reqs, knobs, glob, i, r, n_hit, num_new, watermark,
                     reserve_tokens):
    """Admit waiting request ``r``: reuse its ``n_hit`` cached blocks (``inst.hits``) and
    allocate the rest for ``num_new`` tokens, keeping ``watermark`` blocks free. Hits in
    the CPU tier are loaded into fresh blocks now and their transfer is charged to the
    instance's next step (a synchronous load before the request's first forward pass).

    Returns False, changing nothing, if the free blocks do not suffice -- for the first
    ``max(n_hit * block_size + num_new, reserve_tokens)`` tokens (a policy may ask for its
    whole prompt to fit before admitting a chunk of it). Cached hits that are currently
    free count against the free blocks (they leave the free list when touched).
    """
    bs = knobs[i, K_BLOCK]
    total_blocks = cdiv(n_hit * bs + num_new, bs)
    check_blocks = max(total_blocks, cdiv(reserve_tokens, bs))
    evictable = 0
    for k in range(n_hit):
        if hit_takes_free_block(pool, inst, i, k):
            evictable += 1
    if check_blocks - n_hit + evictable + watermark > num_free(pool, i):
        return False
    n_slot = inst.ist[i, I_NSLOT] - 1
    s = inst.free_slots[i, n_slot]
    inst.ist[i, I_NSLOT] = n_slot
    reqs.slot[r] = s
    _take_hits(pool, inst, reqs, glob, i, r, s, n_hit, bs)
    inst.nblk[i, s] = n_hit
    inst.nhashed[i, s] = n_hit
    for k in range(n_hit, total_blocks):
        inst.blocks[i, s, k] = pop_free(pool, i)
    inst.nblk[i, s] = total_blocks
    _cache_full_blocks(pool, inst, reqs, knobs, glob, i, r, s, n_hit * bs + num_new, False)
    return True


@sim_jit
def free_request(pool, inst, reqs, i, r):
    """Release the blocks of ``r`` (last block first, so tails are evicted first) and its slot."""
    s = reqs.slot[r]
    for j in range(inst.nblk[i, s] - 1, -1, -1):
        release(pool, i, inst.blocks[i, s, j])
    inst.nblk[i, s] = 0
    inst.nhashed[i, s] = 0
    inst.free_slots[i, inst.ist[i, I_NSLOT]] = s
    inst.ist[i, I_NSLOT] += 1
    reqs.slot[r] = -1


@sim_jit
def preempt_at(pool, inst, reqs, knobs, glob, i, idx, cache_upto, to_front):
    """Preempt the running request at position ``idx`` (recompute): keep its first
    ``cache_upto`` computed tokens' full blocks cached, free its blocks, reset its progress
    and put it at the front (``to_front``) or the back of the waiting queue. The running
    list keeps its order. Returns the request's id."""
    n = inst.ist[i, I_NRUN] - 1
    r = inst.run[i, idx]
    for j in range(idx, n):
        inst.run[i, j] = inst.run[i, j + 1]
    inst.ist[i, I_NRUN] = n
    _cache_full_blocks(pool, inst, reqs, knobs, glob, i, r, reqs.slot[r],
                       min(cache_upto, reqs.computed[r]), True)
    free_request(pool, inst, reqs, i, r)
    reqs.status[r] = PREEMPTED
    reqs.computed[r] = 0
    reqs.n_preempt[r] += 1
    if to_front:
        wq_push_front(inst, i, r)
    else:
        wq_push_back(inst, i, r)
    return r


@sim_jit
def preempt_last(pool, inst, reqs, knobs, glob, i):
    """Preempt the last-admitted running request (vLLM's recompute preemption): its
    computed blocks stay cached and it goes to the front of the waiting queue."""
    r = inst.run[i, inst.ist[i, I_NRUN] - 1]
    return preempt_at(pool, inst, reqs, knobs, glob, i, inst.ist[i, I_NRUN] - 1,
                      reqs.computed[r], True)


@sim_jit
def allocate_or_preempt(pool, inst, reqs, knobs, glob, i, r, num_new):
    """Blocks for ``num_new`` more tokens of running ``r``, preempting the last-admitted
    running request until they fit (possibly ``r`` itself, which then gets none).
    Returns ``(allocated, preempted any)``."""
    preempted = False
    ok = allocate_running(pool, inst, reqs, knobs, glob, i, r, num_new)
    while not ok:
        victim = preempt_last(pool, inst, reqs, knobs, glob, i)
        preempted = True
        if victim == r:
            break
        ok = allocate_running(pool, inst, reqs, knobs, glob, i, r, num_new)
    return ok, preempted


@sim_jit
def add_to_batch(inst, reqs, i, r, num_new):
    """Schedule ``num_new`` tokens of ``r`` in the step; advance its computed tokens."""
    j = inst.ist[i, I_BATCH]
    inst.b_req[i, j] = r
    inst.b_new[i, j] = num_new
    inst.b_ctx[i, j] = reqs.computed[r]
    reqs.computed[r] += num_new
    inst.ist[i, I_BATCH] = j + 1


@sim_jit
def admit_request(inst, reqs, knobs, i, r, n_hit, num_new, now):
    """Move waiting request ``r`` -- the head of the queue, its blocks allocated -- to the
    end of the running list and schedule its first ``num_new`` tokens after its ``n_hit``
    cached blocks."""
    bs = knobs[i, K_BLOCK]
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


@sim_jit
def is_decode(reqs, r):
    """One new token to compute after at least one output (a decode step)."""
    return reqs.n_out[r] > 0 and reqs.computed[r] == num_tokens(reqs, r) - 1


@sim_jit
def waiting_visible(inst, reqs, i, r):
    """Whether waiting request ``r`` reached the engine before the step being scheduled was
    formed (async scheduling hides later arrivals: ``A_CUTOFF``)."""
    return reqs.arrival[r] <= inst.acc[i, A_CUTOFF]
