"""The event loop: colocated instances stepping over structure-of-arrays request state.

One compiled loop (:func:`run_loop`) advances time from event to event. There are two
kinds of event, and the next one is found by comparing a few ``next_time`` values:

* the next open-loop arrival (requests are sorted by arrival, a pointer walks them);
* the earliest end of a step among the busy instances.

Closed-loop arrivals need no event: a request is released the moment its client's previous
request finishes, inside the step completion. After each event every idle instance with
work schedules its next step at the current time.

A step is schedule -> batch arrays -> cost -> update, as in vLLM: the policy fills the
batch (:func:`serveplan.sim.scheduler.schedule`), the cost oracle's
:func:`~serveplan.kernels.roofline.step_time` prices the actual mixed batch, and at the end
of the step every request whose computed tokens caught up with its tokens emits one output
token (the step that completes a prefill emits the first token). A request finishes when
it has emitted ``output_len`` tokens; its blocks return to the pool (still cached) and, in
a closed loop, the same client's next request arrives.

:func:`run_engine` is the Python entry point: it validates, builds the arrays, runs the
loop and returns an :class:`EngineResult` of plain arrays.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from serveplan.kernels.roofline import step_time

from . import _jitcache
from ._jitcache import sim_jit
from .kvcache import KVPool, make_pool, num_used
from .router import route
from .scheduler import schedule
from .state import (
    A_BATCH_TIME,
    A_BUSY_TIME,
    A_BUSY_UNTIL,
    A_KV_TIME,
    A_PREFILL_TOKENS,
    A_TOKENS,
    ERR_MAX_STEPS,
    ERR_STALL,
    FINISHED_IGNORED,
    FINISHED_LENGTH_CAPPED,
    FINISHED_STOPPED,
    G_CONCURRENCY,
    G_DONE,
    G_ERROR,
    G_HASH_BLOCK,
    G_MAX_STEPS,
    G_NEXT,
    G_NOPEN,
    G_ROUTER,
    G_STEPS,
    I_BATCH,
    I_BUSY,
    I_NRUN,
    I_STEPS,
    I_WLEN,
    K_BLOCK,
    K_CHUNKED,
    K_LONG_PREFILL,
    K_MAX_MODEL_LEN,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_POLICY,
    K_PREFIX,
    K_WATERMARK,
    N_GLOB,
    N_KNOBS,
    PREEMPTED,
    WAITING,
    Inst,
    Policy,
    Reqs,
    Router,
    cdiv,
    free_request,
    make_inst,
    make_reqs,
    num_tokens,
    wq_push_back,
)

Rec = namedtuple("Rec", ["t", "dt", "inst", "batch", "tokens", "prefill_tokens", "kv_used",
                         "waiting", "running", "meta"])
"""Per-step time series, decimated to a fixed capacity (``meta``: count, stride, seen)."""
R_COUNT, R_STRIDE, R_SEEN = range(3)


def make_rec(capacity: int) -> Rec:
    """An empty recorder holding at most ``capacity`` (rounded up to even) steps."""
    cap = max(2, int(capacity) + (int(capacity) & 1))
    z32 = np.zeros(cap, dtype=np.int32)
    return Rec(t=np.zeros(cap), dt=np.zeros(cap), inst=z32.copy(), batch=z32.copy(),
               tokens=z32.copy(), prefill_tokens=z32.copy(), kv_used=z32.copy(),
               waiting=z32.copy(), running=z32.copy(),
               meta=np.array([0, 1, 0], dtype=np.int64))


# ---------------------------------------------------------------------------- recorder
@sim_jit
def _rec_compact(rec):
    """Keep every other sample and double the stride (bounded memory on long runs)."""
    half = rec.t.shape[0] // 2
    for k in range(half):
        rec.t[k] = rec.t[2 * k]
        rec.dt[k] = rec.dt[2 * k]
        rec.inst[k] = rec.inst[2 * k]
        rec.batch[k] = rec.batch[2 * k]
        rec.tokens[k] = rec.tokens[2 * k]
        rec.prefill_tokens[k] = rec.prefill_tokens[2 * k]
        rec.kv_used[k] = rec.kv_used[2 * k]
        rec.waiting[k] = rec.waiting[2 * k]
        rec.running[k] = rec.running[2 * k]
    rec.meta[R_COUNT] = half
    rec.meta[R_STRIDE] *= 2


@sim_jit
def _record(rec, now, dt, i, bn, tokens, prefill_tokens, kv_used, waiting, running):
    seen = rec.meta[R_SEEN]
    rec.meta[R_SEEN] = seen + 1
    if seen % rec.meta[R_STRIDE] != 0:
        return
    if rec.meta[R_COUNT] == rec.t.shape[0]:
        _rec_compact(rec)
        if seen % rec.meta[R_STRIDE] != 0:
            return
    k = rec.meta[R_COUNT]
    rec.t[k] = now
    rec.dt[k] = dt
    rec.inst[k] = i
    rec.batch[k] = bn
    rec.tokens[k] = tokens
    rec.prefill_tokens[k] = prefill_tokens
    rec.kv_used[k] = kv_used
    rec.waiting[k] = waiting
    rec.running[k] = running
    rec.meta[R_COUNT] = k + 1


# ---------------------------------------------------------------------------- events
@sim_jit
def _arrive(pool, inst, reqs, knobs, glob, r, now):
    """Request ``r`` arrives at ``now``: route it to an instance's waiting queue.

    A request rejected up front (``FINISHED_IGNORED``) finishes at once and, in a closed
    loop, releases its client's next request in turn.
    """
    n = reqs.prompt.shape[0]
    conc = glob[G_CONCURRENCY]
    while True:
        if reqs.status[r] != FINISHED_IGNORED:
            i = route(glob[G_ROUTER], r, reqs, inst, glob)
            reqs.inst[r] = i
            reqs.status[r] = WAITING
            wq_push_back(inst, i, r)
            inst.load[i] += reqs.prompt[r] + reqs.output[r]
            return
        reqs.t_finish[r] = now
        glob[G_DONE] += 1
        if conc == 0 or r + conc >= n:
            return
        r += conc
        reqs.arrival[r] = now


@sim_jit
def _finish(pool, inst, reqs, knobs, glob, i, r, now):
    """``r`` produced its last token: free its blocks, release the client's next request."""
    reqs.status[r] = FINISHED_STOPPED
    reqs.t_finish[r] = now
    free_request(pool, inst, reqs, i, r)
    glob[G_DONE] += 1
    conc = glob[G_CONCURRENCY]
    if conc > 0 and r + conc < reqs.prompt.shape[0]:
        reqs.arrival[r + conc] = now
        _arrive(pool, inst, reqs, knobs, glob, r + conc, now)


@sim_jit
def complete_step(pool, inst, reqs, knobs, glob, i, now):
    """End of instance ``i``'s step at ``now``: emit tokens, finish requests."""
    finished = False
    for j in range(inst.ist[i, I_BATCH]):
        r = inst.b_req[i, j]
        if reqs.computed[r] < num_tokens(reqs, r):
            continue  # a prefill chunk: no token yet
        reqs.n_out[r] += 1
        if reqs.n_out[r] == 1:
            reqs.t_first[r] = now
            inst.load[i] -= reqs.prompt[r]
        else:
            gap = now - reqs.t_last[r]
            if not gap <= reqs.itl_max[r]:  # also replaces the initial NaN
                reqs.itl_max[r] = gap
        reqs.t_last[r] = now
        inst.load[i] -= 1
        if reqs.n_out[r] >= reqs.output[r]:
            _finish(pool, inst, reqs, knobs, glob, i, r, now)
            finished = True
    if finished:
        _drop_finished(inst, reqs, i)
    inst.ist[i, I_BATCH] = 0
    inst.ist[i, I_BUSY] = 0


@sim_jit
def _drop_finished(inst, reqs, i):
    """Remove finished requests from the running list, keeping admission order."""
    k = 0
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if reqs.status[r] <= PREEMPTED:
            inst.run[i, k] = r
            k += 1
    inst.ist[i, I_NRUN] = k


@sim_jit
def start_step(pool, inst, reqs, knobs, glob, rec, i, now, cost, ops, mods, prm, graph_sizes,
               agg, comp, comm):
    """Schedule and cost instance ``i``'s next step starting at ``now``; False if empty.

    ``cost[0] > 0`` selects the affine step cost ``cost[1] + cost[2] * tokens + cost[3] *
    requests``; otherwise the cost oracle's kernel prices the batch.
    """
    bn = schedule(pool, inst, reqs, knobs, glob, i, now)
    if bn == 0:
        return False
    launch_step(pool, inst, reqs, glob, rec, i, now, cost, ops, mods, prm, graph_sizes, agg,
                comp, comm)
    return True


@sim_jit
def launch_step(pool, inst, reqs, glob, rec, i, now, cost, ops, mods, prm, graph_sizes, agg,
                comp, comm):
    """Cost the scheduled batch of instance ``i``, mark it busy and record the step."""
    bn = inst.ist[i, I_BATCH]
    tokens = 0
    decode_tokens = 0
    for j in range(bn):
        r = inst.b_req[i, j]
        tokens += inst.b_new[i, j]
        if inst.b_new[i, j] == 1 and reqs.n_out[r] > 0 and reqs.computed[r] == num_tokens(reqs, r):
            decode_tokens += 1
    if cost[0] > 0.0:
        dt = cost[1] + cost[2] * tokens + cost[3] * bn
    else:
        dt = step_time(inst.b_new[i], inst.b_ctx[i], bn, ops, mods, prm, graph_sizes, agg,
                       comp, comm)
    used = num_used(pool, i)
    inst.acc[i, A_BUSY_UNTIL] = now + dt
    inst.acc[i, A_BUSY_TIME] += dt
    inst.acc[i, A_KV_TIME] += used * dt
    inst.acc[i, A_BATCH_TIME] += bn * dt
    inst.acc[i, A_TOKENS] += tokens
    inst.acc[i, A_PREFILL_TOKENS] += tokens - decode_tokens
    inst.ist[i, I_BUSY] = 1
    inst.ist[i, I_STEPS] += 1
    glob[G_STEPS] += 1
    _record(rec, now, dt, i, bn, tokens, tokens - decode_tokens, used, inst.ist[i, I_WLEN],
            inst.ist[i, I_NRUN])


@sim_jit
def run_loop(pool, inst, reqs, knobs, glob, rec, cost, ops, mods, prm, graph_sizes, agg,
             comp, comm):
    """Advance until every request has finished (or an error code is set in ``glob``)."""
    n = reqs.prompt.shape[0]
    n_inst = knobs.shape[0]
    inf = np.inf
    while glob[G_DONE] < n:
        t_arr = inf
        if glob[G_NEXT] < glob[G_NOPEN]:
            t_arr = reqs.arrival[glob[G_NEXT]]
        k = -1
        t_step = inf
        for i in range(n_inst):
            if inst.ist[i, I_BUSY] != 0 and inst.acc[i, A_BUSY_UNTIL] < t_step:
                t_step = inst.acc[i, A_BUSY_UNTIL]
                k = i
        if k < 0 and t_arr == inf:
            glob[G_ERROR] = ERR_STALL
            return
        if t_arr <= t_step:
            now = t_arr
            r = glob[G_NEXT]
            glob[G_NEXT] = r + 1
            _arrive(pool, inst, reqs, knobs, glob, r, now)
        else:
            now = t_step
            complete_step(pool, inst, reqs, knobs, glob, k, now)
        for i in range(n_inst):
            if inst.ist[i, I_BUSY] == 0 and (inst.ist[i, I_WLEN] > 0 or inst.ist[i, I_NRUN] > 0):
                start_step(pool, inst, reqs, knobs, glob, rec, i, now, cost, ops, mods, prm,
                           graph_sizes, agg, comp, comm)
        if glob[G_STEPS] >= glob[G_MAX_STEPS]:
            glob[G_ERROR] = ERR_MAX_STEPS
            return


# ---------------------------------------------------------------------------- Python API
@dataclass(frozen=True)
class AffineStepCost:
    """Step seconds ``base_s + per_token_s * tokens + per_request_s * requests``.

    A transparent stand-in for the cost oracle where a test or a queueing comparison needs
    known service times (e.g. M/D/1 with a constant step).
    """

    base_s: float
    per_token_s: float = 0.0
    per_request_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base_s", "per_token_s", "per_request_s"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.base_s + self.per_token_s + self.per_request_s <= 0:
            raise ValueError("an affine step cost must be positive for a non-empty step")


def _cost_arrays(cost) -> tuple:
    """``(cost, ops, mods, prm, graph_sizes, agg, comp, comm)`` for :func:`run_loop`."""
    if isinstance(cost, AffineStepCost):
        flags = np.array([1.0, cost.base_s, cost.per_token_s, cost.per_request_s])
        z1, z2 = np.zeros(1), np.zeros((1, 1))
        return (flags, z2, z2.copy(), z1, z1.copy(), z2.copy(), z1.copy(), z1.copy())
    ops, mods, prm, graph_sizes = cost.kernel_args
    agg, comp, comm = cost.scratch()
    return (np.zeros(4), ops, mods, prm, graph_sizes, agg, comp, comm)


@dataclass(frozen=True)
class EngineParams:
    """Engine knobs of one instance, with vLLM's names (all instances share them).

    ``watermark`` is the fraction of blocks kept free when admitting waiting requests
    (vLLM's ``watermark``; 0 in vLLM v1 0.8-0.11, 0.01 in vLLM v0).
    """

    num_gpu_blocks: int
    policy: Policy = Policy.VLLM_V1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    watermark: float = 0.0
    max_model_len: int = 131072

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "block_size",
                     "max_model_len"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be >= 0, got "
                             f"{self.long_prefill_token_threshold!r}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark!r}")

    @property
    def chunked(self) -> bool:
        """Whether prefills may be split (never under ``prefill-priority``)."""
        return self.enable_chunked_prefill and self.policy != Policy.PREFILL_PRIORITY

    def knob_row(self) -> np.ndarray:
        row = np.zeros(N_KNOBS, dtype=np.int64)
        row[K_POLICY] = int(self.policy)
        row[K_MAX_SEQS] = self.max_num_seqs
        row[K_MAX_TOKENS] = self.max_num_batched_tokens
        row[K_BLOCK] = self.block_size
        row[K_PREFIX] = int(self.enable_prefix_caching)
        row[K_CHUNKED] = int(self.chunked)
        row[K_LONG_PREFILL] = self.long_prefill_token_threshold
        row[K_WATERMARK] = int(self.watermark * self.num_gpu_blocks)
        row[K_MAX_MODEL_LEN] = self.max_model_len
        return row


@dataclass(frozen=True, eq=False)
class EngineResult:
    """Raw arrays of one run (see :mod:`serveplan.sim.results` for the Dataset)."""

    reqs: Reqs
    rec: Rec
    inst: Inst
    pool: KVPool
    glob: np.ndarray
    params: EngineParams
    num_instances: int
    output_requested: np.ndarray  # output_len before clipping to max_model_len

    @property
    def num_steps(self) -> int:
        return int(self.glob[G_STEPS])


def clip_lengths(prompt: np.ndarray, output: np.ndarray, max_model_len: int):
    """vLLM's limits: prompts of ``max_model_len`` tokens or more are rejected; outputs stop
    at ``max_model_len`` total tokens. Returns ``(output_clipped, ignored)``."""
    ignored = prompt >= max_model_len
    out = np.where(ignored, 1, np.minimum(output, max_model_len - prompt))
    return out.astype(np.int64), ignored


def _check_capacity(prompt, output, ignored, params: EngineParams) -> int:
    """Blocks one request may need at most; errors when a request could never run."""
    live = ~ignored
    if not live.any():
        return 1
    peak = prompt + output - 1  # tokens whose KV is computed by the last step
    blocks = -(-peak // params.block_size)
    worst = int(np.argmax(np.where(live, blocks, 0)))
    if blocks[worst] > params.num_gpu_blocks:
        raise ValueError(
            f"request {worst} needs {blocks[worst]} KV blocks ({prompt[worst]} prompt + "
            f"{output[worst]} output tokens, block_size={params.block_size}) but the instance "
            f"has num_gpu_blocks={params.num_gpu_blocks}; lower max_model_len or add KV memory")
    if not params.chunked:
        longest = int(np.argmax(np.where(live, peak, 0)))
        if peak[longest] > params.max_num_batched_tokens:
            raise ValueError(
                f"without chunked prefill a step must hold a whole prompt (or a recompute "
                f"after preemption): request {longest} needs {peak[longest]} tokens but "
                f"max_num_batched_tokens={params.max_num_batched_tokens}; raise it or enable "
                f"chunked prefill")
    return int(max(blocks[live].max(), 1))


def run_engine(requests, cost, params: EngineParams, *, num_instances: int = 1,
               router: Router | int = Router.ROUND_ROBIN, record_steps: int = 1 << 16,
               max_steps: int | None = None, policy=None) -> EngineResult:
    """Simulate ``requests`` on ``num_instances`` colocated instances.

    Parameters
    ----------
    requests : serveplan.sim.workload.Requests
        Arrival times (NaN for closed loop), prompt and output lengths, optional prefix
        hash ids.
    cost : serveplan.estimator.oracle.CostOracle or AffineStepCost
        Prices each step: the oracle's kernel on the actual batch, or an affine formula.
    params : EngineParams
        Scheduler policy and engine knobs of every instance.
    num_instances : int
        Colocated (data-parallel) instances behind the router.
    router : Router
        Routing policy code.
    record_steps : int
        Capacity of the per-step time series; longer runs are decimated by powers of two.
    max_steps : int, optional
        Stop with an error after this many engine steps (default: unlimited).
    policy : callable, optional
        A Python research scheduler ``policy(ctx)`` filling each batch through a
        :class:`~serveplan.sim.pyhook.SchedulerContext`; runs a slower Python driver loop
        (``params.policy`` is then ignored). The built-in policies never use it.

    Returns
    -------
    EngineResult
        Final request arrays, step records and accumulators.

    Raises
    ------
    ValueError
        If a request can never be scheduled (too few KV blocks, or a whole prompt larger
        than the token budget without chunked prefill), or the run stalls.
    """
    _jitcache.refresh()
    n = len(requests)
    if num_instances < 1:
        raise ValueError(f"num_instances must be >= 1, got {num_instances!r}")
    output_req = np.asarray(requests.output_len, dtype=np.int64)
    prompt = np.asarray(requests.prompt_len, dtype=np.int64)
    output, ignored = clip_lengths(prompt, output_req, params.max_model_len)
    max_blocks = _check_capacity(prompt, output, ignored, params)
    arrival = np.array(requests.arrival_s, dtype=np.float64)
    conc = requests.concurrency or 0
    if conc:
        arrival[: min(conc, n)] = 0.0
    hashed = requests.hash_ids is not None
    reqs = make_reqs(arrival, prompt, output, requests.hash_ids if hashed else None,
                     requests.hash_offsets if hashed else None)
    reqs.status[ignored] = FINISHED_IGNORED
    inst = make_inst(num_instances, params.max_num_seqs, max_blocks, n + 1)
    pool = make_pool([params.num_gpu_blocks] * num_instances)
    knobs = np.tile(params.knob_row(), (num_instances, 1))
    glob = np.zeros(N_GLOB, dtype=np.int64)
    glob[G_ROUTER] = int(router)
    glob[G_CONCURRENCY] = conc
    glob[G_HASH_BLOCK] = requests.hash_block_size if hashed else 0
    glob[G_NOPEN] = min(conc, n) if conc else n
    glob[G_MAX_STEPS] = np.iinfo(np.int64).max if max_steps is None else int(max_steps)
    rec = make_rec(record_steps)
    if n and policy is None:
        run_loop(pool, inst, reqs, knobs, glob, rec, *_cost_arrays(cost))
    elif n:
        from .pyhook import run_python_loop

        run_python_loop(pool, inst, reqs, knobs, glob, rec, _cost_arrays(cost), policy)
    if glob[G_ERROR] == ERR_STALL:
        raise ValueError("the simulation stalled: requests wait but no instance can schedule "
                         "them (check num_gpu_blocks and max_num_batched_tokens)")
    if glob[G_ERROR] == ERR_MAX_STEPS:
        raise ValueError(f"stopped after max_steps={max_steps} engine steps with "
                         f"{n - glob[G_DONE]} of {n} requests unfinished")
    capped = (reqs.status == FINISHED_STOPPED) & (output < output_req)
    reqs.status[capped] = FINISHED_LENGTH_CAPPED
    return EngineResult(reqs=reqs, rec=rec, inst=inst, pool=pool, glob=glob, params=params,
                        num_instances=num_instances, output_requested=output_req)


def recorded_steps(rec: Rec) -> dict[str, np.ndarray]:
    """The filled part of the step records, as a dict of arrays."""
    k = int(rec.meta[R_COUNT])
    return {name: getattr(rec, name)[:k] for name in Rec._fields if name != "meta"}


__all__ = ["AffineStepCost", "EngineParams", "EngineResult", "run_engine", "run_loop", "clip_lengths",
           "recorded_steps", "cdiv"]
