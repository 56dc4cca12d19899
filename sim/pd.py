"""Prefill/decode disaggregation (xPyD): the compiled event loop and its Python entry point.

Two pools of instances run the colocated engine's per-instance machinery -- the same
scheduler policies (:func:`serveplan.sim.scheduler.schedule`), KV block pools, step
completion (:func:`serveplan.sim.engine.complete_step`) -- joined by a KV transfer
(:mod:`serveplan.sim.transfer`) and a decode router (:mod:`serveplan.sim.pd_router`).

Life of a request
-----------------
1. *Dispatch* (arrival): a prefill router picks a prefill instance (round-robin, or the one
   with the fewest outstanding prefill tokens). With *early* assignment the decode router
   also binds a decode instance now, for an expected handoff ``tau = now + estimated
   prefill time`` (the prefill instance's queued tokens and the request's prompt, priced
   by the prefill cost model as full chunks plus a remainder, plus the rest of the running
   step).
2. *Prefill* on the prefill instance as in a colocated engine whose requests all have one
   output token. The step that completes the prompt emits the first token: TTFT ends here,
   as in vLLM's disaggregated serving. The KV stays on the prefill instance (its blocks and
   a slot held) until it has been transferred: its KV blocks bound how much it can hold,
   and so does ``prefill_hold`` (finished requests held beyond which it admits fewer new
   ones) -- prefill-side backpressure.
   With *late* assignment the decode router runs now (``tau = now``).
3. *Pull* (decode-side backpressure, as vLLM's NixlConnector / Frontier's pull-based
   transfer): the request waits in its decode instance's FIFO pull queue until that
   instance allocates KV blocks for the whole prompt (keeping its ``watermark`` free) and
   has a free sequence slot; only then does the transfer start. Pulls happen where vLLM's
   scheduler admits waiting requests: when the decode instance schedules a step, after its
   running requests got their blocks (or when it is idle); requests preempted on the
   decode instance (recomputed locally) go first. A transfer that takes no time delivers at
   once and the request joins the step being scheduled (as a synchronous KV load). With layer-wise transfer
   (early assignment only) the request enters the pull queue when its prefill is first
   scheduled and the transfer streams while the prefill runs.
4. *Transfer* of ``prompt`` tokens of KV over the link between the two instances
   (:mod:`serveplan.sim.transfer`: fair sharing, latency, layer-wise floor). When it ends,
   the prefill instance frees the request's blocks (they stay in its prefix cache) and
   the request joins the decode instance's running list with its prompt computed and one
   token generated.
5. *Decode* of the remaining ``output_len - 1`` tokens by the decode instance's scheduler;
   the request finishes with its last token.

Requests with a one-token output finish at their prefill and never reach a decode
instance (as if the proxy knew ``max_tokens == 1``).

Events are the next arrival, the earliest prefill step end (or, with the ``delay`` prefill
stage, the next precomputed prefill completion), the next transfer event and the earliest
decode step end; on equal times they are handled in that order. After each event idle
instances with work start a step.

Prefill stages
--------------
``engine`` (default): prefill instances as above. ``delay``: SIBYL's simulator (Appendix I)
-- no prefill instances, every prefill takes its cost-model time alone from its arrival
(an infinite-server stage), and ``tau`` is exact. Open-loop workloads only.

Decode cost models
------------------
Each pool prices steps with a :class:`~serveplan.estimator.oracle.CostOracle`, an
:class:`~serveplan.sim.engine.AffineStepCost`, or (decode) a :class:`FittedThroughputCost`:
SIBYL's processor-sharing fit, where a step of ``N`` requests gives each one token and takes
``N / TPS(N)`` seconds, ``TPS(N) = a N^2 + b N + c`` the instance's total tokens/s (the
iteration-level form of Algorithm 3's equal split ``v = TPS(N) / N``).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from serveplan.kernels.roofline import step_time

from . import _jitcache
from ._jitcache import sim_jit
from .engine import (
    AffineStepCost,
    EngineParams,
    Rec,
    _check_capacity,
    _cost_arrays,
    _drop_finished,
    _record,
    clip_lengths,
    complete_step,
    make_rec,
)
from .kvcache import KVPool, make_pool, num_used
from .pd_router import (
    RouterState,
    is_least_loaded,
    make_router_state,
    on_assign,
    on_decode_step,
    on_finish,
    on_join,
    on_token,
    route_decode,
)
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
    G_HASH_BLOCK,
    G_STEPS,
    I_BATCH,
    I_BUSY,
    I_NRUN,
    I_NSLOT,
    I_STEPS,
    I_WLEN,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_POLICY,
    K_PREFIX,
    K_WATERMARK,
    N_GLOB,
    POLICY_VLLM_V1,
    RUNNING,
    WAITING,
    Inst,
    Reqs,
    add_to_batch,
    allocate_running,
    allocate_waiting,
    free_request,
    make_inst,
    make_reqs,
    num_tokens,
    wq_push_back,
)
from .transfer import (
    KIND_SCALEOUT,
    KIND_SCALEUP,
    make_xfer,
    xfer_begin,
    xfer_event,
    xfer_next_time,
    xfer_prefill_done,
)

# int parameters and counters: pd.gi[Q_*]
(Q_LATE, Q_LAYERWISE, Q_DELAY, Q_PROUTER, Q_CONC, Q_DONE, Q_NEXT, Q_NOPEN, Q_DPTR, Q_NDELAY,
 Q_RR, Q_ERROR, Q_MAX_STEPS, Q_PMNS, Q_PSLOTS, Q_CHUNK) = range(16)
N_GI = 16
# float parameters: pd.gf[W_*]
(W_LAYER_FRAC,) = range(1)
N_GF = 1
# per-request flags: pd.flag[r] bits
FL_PREFILLED, FL_QUEUED, FL_ASSIGNED = 1, 2, 4
# optimal-assignment outcome: -1 not checked
PREFILL_ROUTERS = {"round-robin": 0, "least-loaded": 1}

PD = namedtuple("PD", [
    "p_of", "d_of", "t_assign", "tau", "t_kvready", "t_xstart", "t_join", "t_dec1", "t_finish",
    "opt_tok", "opt_req", "flag", "pq_next", "t_delay_end", "dorder",
    "pq_head", "pq_tail", "pq_len", "held", "d_tstart", "p_node", "d_node", "link",
    "t_pre", "gi", "gf",
])
Cost = namedtuple("Cost", ["flags", "ops", "mods", "prm", "graph_sizes", "agg", "comp", "comm"])


# ---------------------------------------------------------------------------- cost models
@dataclass(frozen=True)
class FittedThroughputCost:
    """SIBYL's fitted decode throughput (``papers/sibyl.txt`` Appendix I, Eq. 15).

    An instance running ``N`` requests produces ``TPS(N) = alpha N^2 + beta N + gamma``
    tokens/s in total, split equally among them (Algorithm 3: ``v = TPS(N) / N``); as an
    engine step every request gains one token and the step takes ``N / TPS(N)`` seconds.
    ``TPS`` is floored at ``min_tps`` (the H20 quadratic turns negative beyond ``N`` ~ 106).
    With ``plateau`` it stays at its peak beyond the peak's batch size instead (the paper
    describes the curve as "plateauing due to memory bandwidth saturation"; its simulator
    uses the quadratic). Defaults: the paper's H20 / Qwen3-32B fit. Prices decode pools only.
    """

    alpha: float = -0.423
    beta: float = 44.766
    gamma: float = -7.753
    min_tps: float = 1.0
    plateau: bool = False

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)!r}")
        if not (np.isfinite(self.min_tps) and self.min_tps > 0):
            raise ValueError(f"min_tps must be a finite number > 0, got {self.min_tps!r}")

    @property
    def peak_n(self) -> float:
        """Batch size at which the quadratic peaks (inf if it never does)."""
        return -self.beta / (2 * self.alpha) if self.alpha < 0 else np.inf

    def tps(self, n):
        """Total tokens/s of an instance running ``n`` requests (floored)."""
        n = np.asarray(n, dtype=np.float64)
        if self.plateau:
            n = np.minimum(n, self.peak_n)
        return np.maximum(self.alpha * n * n + self.beta * n + self.gamma, self.min_tps)

    def step_time(self, n):
        """Seconds of a step of ``n`` requests (one token each)."""
        n = np.asarray(n, dtype=np.float64)
        return n / self.tps(n)


def _pool_cost(cost) -> Cost:
    if isinstance(cost, FittedThroughputCost):
        z1, z2 = np.zeros(1), np.zeros((1, 1))
        flags = np.array([2.0, cost.alpha, cost.beta, cost.gamma, cost.min_tps,
                          cost.peak_n if cost.plateau else np.inf])
        return Cost(flags, z2, z2.copy(), z1, z1.copy(), z2.copy(), z1.copy(), z1.copy())
    return Cost(*_cost_arrays(cost))


@sim_jit
def _step_seconds(c, inst, i, bn, tokens):
    f = c.flags
    if f[0] == 2.0:
        m = bn if bn < f[5] else f[5]
        tps = f[1] * m * m + f[2] * m + f[3]
        return bn / (tps if tps > f[4] else f[4])
    if f[0] > 0.0:
        return f[1] + f[2] * tokens + f[3] * bn
    return step_time(inst.b_new[i], inst.b_ctx[i], bn, c.ops, c.mods, c.prm, c.graph_sizes,
                     c.agg, c.comp, c.comm)


@sim_jit
def _launch(pool, inst, reqs, glob, rec, c, i, now):
    """Cost instance ``i``'s scheduled batch, mark it busy and record the step (the
    colocated engine's step start, with the fitted-throughput cost added)."""
    bn = inst.ist[i, I_BATCH]
    tokens = 0
    decode_tokens = 0
    for j in range(bn):
        r = inst.b_req[i, j]
        tokens += inst.b_new[i, j]
        if inst.b_new[i, j] == 1 and reqs.n_out[r] > 0 and reqs.computed[r] == num_tokens(reqs, r):
            decode_tokens += 1
    dt = _step_seconds(c, inst, i, bn, tokens)
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


# ---------------------------------------------------------------------------- helpers
@sim_jit
def _est_prefill(pd, p_inst, p, prompt, now):
    """Expected time until ``prompt`` more tokens queued on prefill instance ``p`` finish."""
    chunk = pd.gi[Q_CHUNK]
    q = p_inst.load[p] + prompt
    t = (q // chunk) * pd.t_pre[chunk] + pd.t_pre[q % chunk]
    if p_inst.ist[p, I_BUSY] != 0 and p_inst.acc[p, A_BUSY_UNTIL] > now:
        t += p_inst.acc[p, A_BUSY_UNTIL] - now
    return t


@sim_jit
def _route_prefill(pd, p_inst):
    n = p_inst.ist.shape[0]
    if pd.gi[Q_PROUTER] == 0:
        p = pd.gi[Q_RR] % n
        pd.gi[Q_RR] += 1
        return p
    best = 0
    for i in range(1, n):
        if p_inst.load[i] < p_inst.load[best]:
            best = i
    return best


@sim_jit
def _enqueue_pull(pd, r, now):
    d = pd.d_of[r]
    pd.flag[r] |= FL_QUEUED
    pd.t_kvready[r] = now
    pd.pq_next[r] = -1
    if pd.pq_len[d] == 0:
        pd.pq_head[d] = r
    else:
        pd.pq_next[pd.pq_tail[d]] = r
    pd.pq_tail[d] = r
    pd.pq_len[d] += 1


@sim_jit
def _assign(pd, rt, d_reqs, r, now, tau):
    d = route_decode(rt, now, tau)
    pd.d_of[r] = d
    d_reqs.inst[r] = d
    pd.t_assign[r] = now
    pd.tau[r] = tau
    pd.flag[r] |= FL_ASSIGNED
    on_assign(rt, r, d, d_reqs.prompt[r], tau)


@sim_jit
def _admit(pd, rt, p_inst, p_reqs, d_reqs, r, now):
    """Dispatch arrived request ``r``: prefill instance, and decode instance if early."""
    prompt = p_reqs.prompt[r]
    if pd.gi[Q_DELAY] != 0:
        p = -1
        tau = pd.t_delay_end[r]
        p_reqs.t_sched[r] = now
        p_reqs.status[r] = RUNNING
    else:
        p = _route_prefill(pd, p_inst)
        tau = now + _est_prefill(pd, p_inst, p, prompt, now)
        p_reqs.inst[r] = p
        p_reqs.status[r] = WAITING
        wq_push_back(p_inst, p, r)
        p_inst.load[p] += prompt
    pd.p_of[r] = p
    if pd.gi[Q_LATE] == 0 and d_reqs.output[r] > 1:
        _assign(pd, rt, d_reqs, r, now, tau)
        if pd.gi[Q_DELAY] != 0 and pd.gi[Q_LAYERWISE] != 0:
            _enqueue_pull(pd, r, now)


@sim_jit
def _release_next(pd, rt, p_inst, p_reqs, d_reqs, r, now):
    """Closed loop: the client of ``r`` sends its next request at ``now``."""
    conc = pd.gi[Q_CONC]
    n = p_reqs.prompt.shape[0]
    k = r + conc
    while conc > 0 and k < n:
        p_reqs.arrival[k] = now
        d_reqs.arrival[k] = now
        if p_reqs.status[k] != FINISHED_IGNORED:
            _admit(pd, rt, p_inst, p_reqs, d_reqs, k, now)
            return
        pd.t_finish[k] = now
        pd.gi[Q_DONE] += 1
        k += conc


@sim_jit
def _finish_req(pd, rt, p_inst, p_reqs, d_reqs, r, now):
    pd.t_finish[r] = now
    pd.gi[Q_DONE] += 1
    _release_next(pd, rt, p_inst, p_reqs, d_reqs, r, now)


@sim_jit
def _free_prefill_kv(pd, p_pool, p_inst, p_reqs, r):
    """Release the KV the prefill instance held for ``r`` (content stays cached)."""
    p = pd.p_of[r]
    if p >= 0 and p_reqs.slot[r] >= 0:
        free_request(p_pool, p_inst, p_reqs, p, r)
        pd.held[p] -= 1


@sim_jit
def _handoff(pd, rt, x, p_pool, p_inst, p_reqs, d_reqs, r, now):
    """Prefill of ``r`` finished at ``now`` (its first token)."""
    pd.flag[r] |= FL_PREFILLED
    if d_reqs.output[r] <= 1:
        _free_prefill_kv(pd, p_pool, p_inst, p_reqs, r)
        d_reqs.n_out[r] = 1
        d_reqs.t_first[r] = now
        d_reqs.t_last[r] = now
        d_reqs.status[r] = FINISHED_STOPPED
        _finish_req(pd, rt, p_inst, p_reqs, d_reqs, r, now)
        return
    if pd.flag[r] & FL_ASSIGNED:
        ok_t, ok_r = is_least_loaded(rt, pd.d_of[r])
        pd.opt_tok[r] = 1 if ok_t else 0
        pd.opt_req[r] = 1 if ok_r else 0
    else:
        _assign(pd, rt, d_reqs, r, now, now)
    if pd.flag[r] & FL_QUEUED:
        xfer_prefill_done(x, r, now)
    else:
        _enqueue_pull(pd, r, now)


@sim_jit
def _complete_prefill(pd, rt, x, p_pool, p_inst, p_reqs, d_reqs, i, now):
    """End of prefill instance ``i``'s step: prompts that completed emit their first token;
    their KV stays held until transferred."""
    fin = False
    for j in range(p_inst.ist[i, I_BATCH]):
        r = p_inst.b_req[i, j]
        if p_reqs.computed[r] < num_tokens(p_reqs, r):
            continue  # a chunk
        p_reqs.n_out[r] = 1
        p_reqs.t_first[r] = now
        p_reqs.t_last[r] = now
        p_reqs.status[r] = FINISHED_STOPPED
        p_inst.load[i] -= p_reqs.prompt[r]
        pd.held[i] += 1
        fin = True
        _handoff(pd, rt, x, p_pool, p_inst, p_reqs, d_reqs, r, now)
    if fin:
        _drop_finished(p_inst, p_reqs, i)
    p_inst.ist[i, I_BATCH] = 0
    p_inst.ist[i, I_BUSY] = 0


@sim_jit
def _deliver(pd, rt, p_pool, p_inst, p_reqs, d_inst, d_reqs, r, now):
    """``r``'s KV arrived on its decode instance: it joins the running requests."""
    d = pd.d_of[r]
    pd.t_join[r] = now
    _free_prefill_kv(pd, p_pool, p_inst, p_reqs, r)
    d_reqs.computed[r] = d_reqs.prompt[r]
    d_reqs.n_out[r] = 1
    d_reqs.t_first[r] = p_reqs.t_first[r]
    d_reqs.t_last[r] = p_reqs.t_first[r]
    d_reqs.t_sched[r] = now
    d_reqs.status[r] = RUNNING
    n = d_inst.ist[d, I_NRUN]
    d_inst.run[d, n] = r
    d_inst.ist[d, I_NRUN] = n + 1
    d_inst.load[d] += d_reqs.output[r] - 1
    on_join(rt, r, d, d_reqs.prompt[r], 1, now)


@sim_jit
def _try_pull(pd, rt, x, p_pool, p_inst, p_reqs, d_pool, d_inst, d_reqs, d_knobs, d_glob, d,
              now, join):
    """Admit the head of decode instance ``d``'s pull queue while KV room and a slot allow,
    starting each admitted request's transfer. A transfer that completes at once (no link
    cost) delivers the request, which joins the batch being scheduled if ``join`` and the
    policy and token budget allow (vLLM schedules a request whose KV is loaded in the same
    step, after the running ones)."""
    while pd.pq_len[d] > 0 and d_inst.ist[d, I_WLEN] == 0 and d_inst.ist[d, I_NSLOT] > 0:
        r = pd.pq_head[d]
        wm = d_knobs[d, K_WATERMARK] if num_used(d_pool, d) > 0 else 0
        if not allocate_waiting(d_pool, d_inst, d_reqs, d_knobs, d_glob, d, r, 0,
                                d_reqs.prompt[r], wm, 0):
            break
        pd.pq_head[d] = pd.pq_next[r]
        pd.pq_len[d] -= 1
        pd.t_xstart[r] = now
        p = pd.p_of[r]
        kind = KIND_SCALEOUT
        if p >= 0 and pd.p_node[p] == pd.d_node[d]:
            kind = KIND_SCALEUP
        work = d_reqs.prompt[r] * pd.link[kind, 0]
        floor = 0.0
        if pd.flag[r] & FL_PREFILLED == 0:
            floor = work * pd.gf[W_LAYER_FRAC]
        if not xfer_begin(x, r, now, work, floor, pd.link[kind, 1], p, d, kind):
            continue
        _deliver(pd, rt, p_pool, p_inst, p_reqs, d_inst, d_reqs, r, now)
        if not join:
            continue
        bn = d_inst.ist[d, I_BATCH]
        used = 0
        decode_only = True
        for j in range(bn):
            used += d_inst.b_new[d, j]
            if d_inst.b_new[d, j] != 1:
                decode_only = False
        if used >= d_knobs[d, K_MAX_TOKENS]:
            continue
        if d_knobs[d, K_POLICY] != POLICY_VLLM_V1 and not decode_only:
            continue
        if allocate_running(d_pool, d_inst, d_reqs, d_knobs, d_glob, d, r, 1):
            add_to_batch(d_inst, d_reqs, d, r, 1)


@sim_jit
def _start_decode(pd, rt, x, p_pool, p_inst, p_reqs, d_pool, d_inst, d_reqs, d_knobs,
                  d_glob, d_rec, dc, d, now):
    """Decode instance ``d`` schedules a step: its running (and preempted) requests by its
    policy, then pulls from its queue; False if the step is empty."""
    schedule(d_pool, d_inst, d_reqs, d_knobs, d_glob, d, now)
    if pd.pq_len[d] > 0:
        _try_pull(pd, rt, x, p_pool, p_inst, p_reqs, d_pool, d_inst, d_reqs, d_knobs, d_glob,
                  d, now, True)
    bn = d_inst.ist[d, I_BATCH]
    if bn == 0:
        return False
    for j in range(bn):
        r = d_inst.b_req[d, j]
        if pd.t_dec1[r] != pd.t_dec1[r]:  # NaN: its first decode step
            pd.t_dec1[r] = now
    _launch(d_pool, d_inst, d_reqs, d_glob, d_rec, dc, d, now)
    pd.d_tstart[d] = now
    return True


@sim_jit
def _complete_decode(pd, rt, p_inst, p_reqs, d_pool, d_inst, d_reqs, d_knobs, d_glob, d, now):
    """End of decode instance ``d``'s step: tokens, finishes, router bookkeeping."""
    bn = d_inst.ist[d, I_BATCH]
    complete_step(d_pool, d_inst, d_reqs, d_knobs, d_glob, d, now)
    on_decode_step(rt, bn, now - pd.d_tstart[d])
    for j in range(bn):
        r = d_inst.b_req[d, j]
        if d_reqs.status[r] == FINISHED_STOPPED:
            on_finish(rt, r, d, d_reqs.prompt[r], d_reqs.n_out[r] - 1)
            _finish_req(pd, rt, p_inst, p_reqs, d_reqs, r, now)
        elif d_reqs.t_last[r] == now:
            on_token(rt, r, d, d_reqs.n_out[r], d_reqs.n_out[r] - 1, now)


# ---------------------------------------------------------------------------- the loop
@sim_jit
def run_pd_loop(pd, rt, x, p_pool, p_inst, p_reqs, p_knobs, p_glob, p_rec, pc,
                d_pool, d_inst, d_reqs, d_knobs, d_glob, d_rec, dc):
    """Advance until every request has finished (or an error code is set in ``pd.gi``)."""
    n = p_reqs.prompt.shape[0]
    n_p = p_inst.ist.shape[0]
    n_d = d_inst.ist.shape[0]
    inf = np.inf
    delay = pd.gi[Q_DELAY] != 0
    layerwise = pd.gi[Q_LAYERWISE] != 0 and pd.gi[Q_LATE] == 0
    while pd.gi[Q_DONE] < n:
        t_arr = inf
        if pd.gi[Q_NEXT] < pd.gi[Q_NOPEN]:
            t_arr = p_reqs.arrival[pd.gi[Q_NEXT]]
        t_pf = inf
        kp = -1
        if delay:
            if pd.gi[Q_DPTR] < pd.gi[Q_NDELAY]:
                kp = pd.dorder[pd.gi[Q_DPTR]]
                t_pf = pd.t_delay_end[kp]
        else:
            for i in range(n_p):
                if p_inst.ist[i, I_BUSY] != 0 and p_inst.acc[i, A_BUSY_UNTIL] < t_pf:
                    t_pf = p_inst.acc[i, A_BUSY_UNTIL]
                    kp = i
        t_x = xfer_next_time(x)
        t_dec = inf
        kd = -1
        for i in range(n_d):
            if d_inst.ist[i, I_BUSY] != 0 and d_inst.acc[i, A_BUSY_UNTIL] < t_dec:
                t_dec = d_inst.acc[i, A_BUSY_UNTIL]
                kd = i
        if t_arr == inf and kp < 0 and t_x == inf and kd < 0:
            pd.gi[Q_ERROR] = ERR_STALL
            return
        if t_arr <= t_pf and t_arr <= t_x and t_arr <= t_dec:
            now = t_arr
            r = pd.gi[Q_NEXT]
            pd.gi[Q_NEXT] = r + 1
            if p_reqs.status[r] == FINISHED_IGNORED:
                _finish_req(pd, rt, p_inst, p_reqs, d_reqs, r, now)
            else:
                _admit(pd, rt, p_inst, p_reqs, d_reqs, r, now)
        elif t_pf <= t_x and t_pf <= t_dec:
            now = t_pf
            if delay:
                pd.gi[Q_DPTR] += 1
                p_reqs.n_out[kp] = 1
                p_reqs.t_first[kp] = now
                p_reqs.t_last[kp] = now
                p_reqs.status[kp] = FINISHED_STOPPED
                _handoff(pd, rt, x, p_pool, p_inst, p_reqs, d_reqs, kp, now)
            else:
                _complete_prefill(pd, rt, x, p_pool, p_inst, p_reqs, d_reqs, kp, now)
        elif t_x <= t_dec:
            now = t_x
            r = xfer_event(x, now)
            if r >= 0:
                _deliver(pd, rt, p_pool, p_inst, p_reqs, d_inst, d_reqs, r, now)
        else:
            now = t_dec
            _complete_decode(pd, rt, p_inst, p_reqs, d_pool, d_inst, d_reqs, d_knobs, d_glob,
                             kd, now)
        if not delay:
            for i in range(n_p):
                if p_inst.ist[i, I_BUSY] == 0 and (p_inst.ist[i, I_WLEN] > 0
                                                   or p_inst.ist[i, I_NRUN] > 0):
                    cap = pd.gi[Q_PSLOTS] - pd.held[i]
                    p_knobs[i, K_MAX_SEQS] = cap if cap < pd.gi[Q_PMNS] else pd.gi[Q_PMNS]
                    if schedule(p_pool, p_inst, p_reqs, p_knobs, p_glob, i, now) == 0:
                        continue
                    _launch(p_pool, p_inst, p_reqs, p_glob, p_rec, pc, i, now)
                    if layerwise:
                        for j in range(p_inst.ist[i, I_BATCH]):
                            r = p_inst.b_req[i, j]
                            if pd.flag[r] & (FL_QUEUED | FL_ASSIGNED) == FL_ASSIGNED:
                                _enqueue_pull(pd, r, now)
        for d in range(n_d):
            if d_inst.ist[d, I_BUSY] == 0 and (d_inst.ist[d, I_WLEN] > 0
                                               or d_inst.ist[d, I_NRUN] > 0
                                               or pd.pq_len[d] > 0):
                _start_decode(pd, rt, x, p_pool, p_inst, p_reqs, d_pool, d_inst, d_reqs,
                              d_knobs, d_glob, d_rec, dc, d, now)
        if p_glob[G_STEPS] + d_glob[G_STEPS] >= pd.gi[Q_MAX_STEPS]:
            pd.gi[Q_ERROR] = ERR_MAX_STEPS
            return


# ---------------------------------------------------------------------------- Python API
@dataclass(frozen=True)
class PoolSpec:
    """One pool of identical instances: engine knobs, step cost, instance count."""

    params: EngineParams
    cost: object  # CostOracle, AffineStepCost or FittedThroughputCost
    num_instances: int = 1

    def __post_init__(self) -> None:
        if int(self.num_instances) != self.num_instances or self.num_instances < 1:
            raise ValueError(f"num_instances must be an integer >= 1, got {self.num_instances!r}")


@dataclass(frozen=True)
class KVLink:
    """How KV moves from prefill to decode instances.

    Parameters
    ----------
    seconds_per_token : (float, float)
        Link time of one prompt token's KV alone on the link, over (scale-up, scale-out):
        the per-rank KV bytes of a token divided by the per-GPU bandwidth.
    latency_s : (float, float)
        Latency added to every transfer, per link kind.
    bytes_per_token : float
        KV bytes moved per prompt token, all ranks together (for reporting).
    num_layers : int
        Layers of the model: a layer-wise transfer cannot end before its prefill plus one
        layer's share.
    prefill_nodes, decode_nodes : int arrays, optional
        Node of each instance; a pair on the same node uses the scale-up link. Default:
        every transfer crosses nodes (scale-out).

    The default link is free (no time, no latency): KV arrives as the prefill ends.
    """

    seconds_per_token: tuple[float, float] = (0.0, 0.0)
    latency_s: tuple[float, float] = (0.0, 0.0)
    bytes_per_token: float = 0.0
    num_layers: int = 1
    prefill_nodes: tuple[int, ...] | None = None
    decode_nodes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("seconds_per_token", "latency_s"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if v.shape != (2,) or not np.all(np.isfinite(v)) or np.any(v < 0):
                raise ValueError(f"{name} must be two finite numbers >= 0 (scale-up, "
                                 f"scale-out), got {getattr(self, name)!r}")
        if int(self.num_layers) != self.num_layers or self.num_layers < 1:
            raise ValueError(f"num_layers must be an integer >= 1, got {self.num_layers!r}")

    @classmethod
    def uniform(cls, seconds_per_token: float, latency_s: float = 0.0, *,
                bytes_per_token: float = 0.0, num_layers: int = 1) -> KVLink:
        """The same link between every pair (all transfers over the scale-out kind)."""
        return cls((seconds_per_token, seconds_per_token), (latency_s, latency_s),
                   bytes_per_token, num_layers)

    @classmethod
    def from_specs(cls, prefill_oracle, decode_oracle, n_prefill: int, n_decode: int, *,
                   placement: str = "packed", bandwidth: float | None = None,
                   latency_s: float | None = None) -> KVLink:
        """The link of a deployment, from its two cost oracles (model, GPU, parallelism).

        KV per token and rank is :func:`~serveplan.estimator.memory.kv_bytes_per_token_layer`
        times the layers of the rank's pipeline stage (the first stage is the largest);
        ranks transfer in parallel, so the side with more bytes per rank sets the time.
        ``bytes_per_token`` is what the decode ranks receive in all.

        Placement: instances take ``tp * pp * dp`` consecutive GPUs, prefill instances
        first; ``packed`` lets decode instances share the prefill pool's last node (when
        both pools use the same GPU type), ``separate`` starts them on a fresh node. A pair
        of instances whose first GPUs share a node uses the scale-up link (NVLink), else
        the scale-out one. ``bandwidth`` (bytes/s per GPU) and ``latency_s`` override both
        kinds.
        """
        from serveplan.estimator.memory import kv_bytes_per_token_layer

        if placement not in ("packed", "separate"):
            raise ValueError(f"placement given an invalid value: {placement!r} "
                             "(valid: packed, separate)")

        def per_rank(o) -> float:
            layers = -(-o.model.num_layers // o.parallel.pp)
            return kv_bytes_per_token_layer(o.model, o.parallel.tp, o.kv_dtype) * layers

        po, do = prefill_oracle, decode_oracle
        rank_bytes = max(per_rank(po), per_rank(do))
        total = (kv_bytes_per_token_layer(do.model, do.parallel.tp, do.kv_dtype)
                 * do.model.num_layers * do.parallel.tp)
        gp, gd = po.gpu, do.gpu
        up_bw = min(gp.scaleup_bw, gd.scaleup_bw)
        out_bw = min(gp.scaleout_bw, gd.scaleout_bw)
        up_lat = max(gp.scaleup_latency_s, gd.scaleup_latency_s)
        out_lat = max(gp.scaleout_latency_s, gd.scaleout_latency_s)
        if bandwidth is not None:
            if not bandwidth > 0:
                raise ValueError(f"bandwidth must be > 0 bytes/s, got {bandwidth!r}")
            up_bw = out_bw = float(bandwidth)
        if latency_s is not None:
            if not (np.isfinite(latency_s) and latency_s >= 0):
                raise ValueError(f"latency_s must be a finite number >= 0, got {latency_s!r}")
            up_lat = out_lat = float(latency_s)
        g_p = po.parallel.tp * po.parallel.pp * po.parallel.dp
        g_d = do.parallel.tp * do.parallel.pp * do.parallel.dp
        gpn = int(gp.gpus_per_node)
        p_off = np.arange(n_prefill) * g_p
        start = n_prefill * g_p
        if placement == "separate" or gp.name != gd.name:
            start = -(-start // gpn) * gpn
        d_off = start + np.arange(n_decode) * g_d
        return cls((rank_bytes / up_bw, rank_bytes / out_bw), (up_lat, out_lat), float(total),
                   int(do.model.num_layers), tuple(int(v) for v in p_off // gpn),
                   tuple(int(v) for v in d_off // int(gd.gpus_per_node)))

    def table(self) -> np.ndarray:
        return np.array([[self.seconds_per_token[0], self.latency_s[0]],
                         [self.seconds_per_token[1], self.latency_s[1]]], dtype=np.float64)

    def nodes(self, n_prefill: int, n_decode: int) -> tuple[np.ndarray, np.ndarray]:
        if self.prefill_nodes is None or self.decode_nodes is None:
            return (np.arange(n_prefill, dtype=np.int64),
                    np.arange(n_prefill, n_prefill + n_decode, dtype=np.int64))
        pn = np.asarray(self.prefill_nodes, dtype=np.int64)
        dn = np.asarray(self.decode_nodes, dtype=np.int64)
        if pn.shape != (n_prefill,) or dn.shape != (n_decode,):
            raise ValueError(f"prefill_nodes / decode_nodes must have {n_prefill} / {n_decode} "
                             f"entries, got {pn.shape} / {dn.shape}")
        return pn, dn


@dataclass(frozen=True, eq=False)
class PDResult:
    """Raw arrays of one disaggregated run (see :mod:`serveplan.sim.pd_results`)."""

    pd: PD
    rt: RouterState
    p_reqs: Reqs
    d_reqs: Reqs
    p_inst: Inst
    d_inst: Inst
    p_pool: KVPool
    d_pool: KVPool
    p_rec: Rec
    d_rec: Rec
    prefill: PoolSpec
    decode: PoolSpec
    link: KVLink
    router: str
    assignment: str
    layerwise: bool
    prefill_stage: str
    output_requested: np.ndarray
    ignored: np.ndarray

    @property
    def num_steps(self) -> int:
        return int(self.p_rec.meta[2] + self.d_rec.meta[2])


def _prefill_chunks(prompt: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunks of each prompt: ``(owner, tokens, context)`` arrays."""
    n_chunks = -(-prompt // chunk)
    owner = np.repeat(np.arange(len(prompt)), n_chunks)
    first = np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
    k = np.arange(len(owner)) - first
    ctx = k * chunk
    tokens = np.minimum(prompt[owner] - ctx, chunk)
    return owner, tokens, ctx


def prefill_seconds(cost, prompt: np.ndarray, chunk: int) -> np.ndarray:
    """Time to prefill each prompt alone, in chunks of ``chunk`` tokens (each chunk one step
    over the cached context of the chunks before it)."""
    prompt = np.asarray(prompt, dtype=np.int64)
    out = np.zeros(len(prompt))
    if len(prompt) == 0:
        return out
    owner, tokens, ctx = _prefill_chunks(np.maximum(prompt, 1), int(chunk))
    if isinstance(cost, AffineStepCost):
        t = cost.base_s + cost.per_token_s * tokens + cost.per_request_s
    elif isinstance(cost, FittedThroughputCost):
        raise ValueError("the fitted-throughput cost prices decode steps only; give the "
                         "prefill pool a cost oracle or an affine step cost")
    else:
        t = np.asarray(cost.prefill_time(1, tokens, ctx), dtype=np.float64)
    np.add.at(out, owner, t)
    return out


def _decode_rate(cost, prompt_mean: float) -> float:
    """Tokens/s of one request decoding alone (the initial system decode rate)."""
    if isinstance(cost, FittedThroughputCost):
        return float(cost.tps(1.0))
    if isinstance(cost, AffineStepCost):
        return 1.0 / (cost.base_s + cost.per_token_s + cost.per_request_s)
    return 1.0 / float(cost.decode_time(1, max(prompt_mean, 1.0)))


ASSIGNMENTS = ("early", "late")
PREFILL_STAGES = ("engine", "delay")


def run_pd(requests, prefill: PoolSpec, decode: PoolSpec, *, link: KVLink | None = None,
           router: str = "round-robin", prefill_router: str = "least-loaded",
           assignment: str = "early", layerwise: bool = False, prefill_stage: str = "engine",
           sibyl_delta: float = 128.0, sibyl_alpha: float = 0.99,
           sibyl_max_length: int | None = None, pending_capacity: int | None = None,
           prefill_hold: int | None = None, record_steps: int = 1 << 16,
           max_steps: int | None = None) -> PDResult:
    """Simulate ``requests`` on a disaggregated deployment (module docstring).

    Parameters
    ----------
    requests : serveplan.sim.workload.Requests
        Arrivals (NaN for a closed loop), prompt and output lengths, prefix hash ids.
    prefill, decode : PoolSpec
        The two pools. A decode pool may use a :class:`FittedThroughputCost`.
    link : KVLink, optional
        The KV transfer model (default: free).
    router : str
        Decode router: ``round-robin``, ``least-loaded``, ``least-requests``, ``sibyl`` or a
        SIBYL variant (:data:`serveplan.sim.pd_router.DECODE_ROUTERS`; aliases ``rr``,
        ``ils``).
    prefill_router : {"least-loaded", "round-robin"}
        Prefill-pool router (least-loaded: fewest outstanding prefill tokens).
    assignment : {"early", "late"}
        Bind the decode instance at dispatch (early) or at prefill end (late).
    layerwise : bool
        Stream KV while the prefill runs (early assignment only).
    prefill_stage : {"engine", "delay"}
        Prefill instances, or SIBYL's infinite-server delay (open loop only).
    sibyl_delta, sibyl_alpha : float
        SIBYL's survival bucket step (tokens) and EMA factor.
    sibyl_max_length : int, optional
        Longest output the survival estimator resolves (default: the decode
        ``max_model_len``).
    pending_capacity : int, optional
        SIBYL pending slots per decode instance (default ``max(256, 8 n / n_decode)``,
        at most ``n``).
    prefill_hold : int, optional
        Finished prefills whose KV a prefill instance may hold (waiting for their transfer)
        before it admits fewer new ones (default 256; the instance's KV blocks limit it too).
    record_steps : int
        Capacity of each pool's per-step time series.
    max_steps : int, optional
        Stop with an error after this many engine steps (both pools).

    Returns
    -------
    PDResult

    Raises
    ------
    ValueError
        On invalid options, a request that can never fit an instance, or a stall.
    """
    _jitcache.refresh()
    link = link if link is not None else KVLink()
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"assignment given an invalid value: {assignment!r} "
                         f"(valid: {', '.join(ASSIGNMENTS)})")
    if prefill_stage not in PREFILL_STAGES:
        raise ValueError(f"prefill_stage given an invalid value: {prefill_stage!r} "
                         f"(valid: {', '.join(PREFILL_STAGES)})")
    if prefill_router not in PREFILL_ROUTERS:
        raise ValueError(f"prefill_router given an invalid value: {prefill_router!r} "
                         f"(valid: {', '.join(PREFILL_ROUTERS)})")
    if layerwise and assignment != "early":
        raise ValueError("layer-wise transfer needs early assignment (the decode instance "
                         "must be known when the prefill starts)")
    delay = prefill_stage == "delay"
    conc = requests.concurrency or 0
    if delay and conc:
        raise ValueError("the delay prefill stage needs an open-loop workload (arrival "
                         "times), not a closed loop")
    if isinstance(prefill.cost, FittedThroughputCost):
        raise ValueError("the fitted-throughput cost prices decode steps only; give the "
                         "prefill pool a cost oracle or an affine step cost")
    pp_, dp_ = prefill.params, decode.params
    n = len(requests)
    n_p, n_d = int(prefill.num_instances), int(decode.num_instances)
    prompt = np.asarray(requests.prompt_len, dtype=np.int64)
    output_req = np.asarray(requests.output_len, dtype=np.int64)
    max_len = min(pp_.max_model_len, dp_.max_model_len)
    output, ignored = clip_lengths(prompt, output_req, max_len)
    ones = np.ones(n, dtype=np.int64)
    p_blocks = 1 if delay else _check_capacity(prompt, ones, ignored, pp_)
    d_blocks = _check_capacity(prompt, output, ignored, dp_)
    arrival = np.array(requests.arrival_s, dtype=np.float64)
    if conc:
        arrival[: min(conc, n)] = 0.0
    hashed = requests.hash_ids is not None
    p_reqs = make_reqs(arrival, prompt, ones, requests.hash_ids if hashed else None,
                       requests.hash_offsets if hashed else None)
    p_reqs.status[ignored] = FINISHED_IGNORED
    d_reqs = make_reqs(arrival, prompt, output)
    d_reqs.status[ignored] = FINISHED_IGNORED
    hold = int(256 if prefill_hold is None else prefill_hold)
    if hold < 0:
        raise ValueError(f"prefill_hold must be >= 0, got {prefill_hold!r}")
    p_slots = pp_.max_num_seqs + hold
    n_pi = 1 if delay else n_p
    p_inst = make_inst(n_pi, p_slots, p_blocks, (n + 1) if not delay else 1)
    p_pool = make_pool([1 if delay else pp_.num_gpu_blocks] * n_pi)
    p_knobs = np.tile(pp_.knob_row(), (n_pi, 1))
    p_glob = np.zeros(N_GLOB, dtype=np.int64)
    p_glob[G_HASH_BLOCK] = requests.hash_block_size if hashed else 0
    d_inst = make_inst(n_d, dp_.max_num_seqs, d_blocks, dp_.max_num_seqs + 1)
    d_pool = make_pool([dp_.num_gpu_blocks] * n_d)
    d_knobs = np.tile(dp_.knob_row(), (n_d, 1))
    d_knobs[:, K_PREFIX] = 0
    d_glob = np.zeros(N_GLOB, dtype=np.int64)
    chunk = int(pp_.max_num_batched_tokens)
    t_pre = np.zeros(chunk + 1)
    t_pre[1:] = prefill_seconds(prefill.cost, np.arange(1, chunk + 1), chunk)
    t_delay_end = np.full(max(n, 1), np.inf)
    dorder = np.zeros(max(n, 1), dtype=np.int64)
    n_delay = 0
    if delay and n:
        live = np.flatnonzero(~ignored)
        t_delay_end[live] = arrival[live] + prefill_seconds(prefill.cost, prompt[live], chunk)
        order = live[np.argsort(t_delay_end[live], kind="stable")]
        dorder[: len(order)] = order
        n_delay = len(order)
    p_node, d_node = link.nodes(n_pi, n_d)
    gi = np.zeros(N_GI, dtype=np.int64)
    gi[Q_LATE] = int(assignment == "late")
    gi[Q_LAYERWISE] = int(bool(layerwise))
    gi[Q_DELAY] = int(delay)
    gi[Q_PROUTER] = PREFILL_ROUTERS[prefill_router]
    gi[Q_CONC] = conc
    gi[Q_NOPEN] = min(conc, n) if conc else n
    gi[Q_MAX_STEPS] = np.iinfo(np.int64).max if max_steps is None else int(max_steps)
    gi[Q_PMNS] = pp_.max_num_seqs
    gi[Q_PSLOTS] = p_slots
    gi[Q_CHUNK] = chunk
    gf = np.zeros(N_GF)
    gf[W_LAYER_FRAC] = 1.0 / link.num_layers
    m = max(n, 1)
    nan = np.full(m, np.nan)
    pd = PD(
        p_of=np.full(m, -1, dtype=np.int64), d_of=np.full(m, -1, dtype=np.int64),
        t_assign=nan.copy(), tau=nan.copy(), t_kvready=nan.copy(), t_xstart=nan.copy(),
        t_join=nan.copy(), t_dec1=nan.copy(), t_finish=nan.copy(),
        opt_tok=np.full(m, -1, dtype=np.int8), opt_req=np.full(m, -1, dtype=np.int8),
        flag=np.zeros(m, dtype=np.int64), pq_next=np.full(m, -1, dtype=np.int64),
        t_delay_end=t_delay_end, dorder=dorder,
        pq_head=np.full(n_d, -1, dtype=np.int64), pq_tail=np.full(n_d, -1, dtype=np.int64),
        pq_len=np.zeros(n_d, dtype=np.int64), held=np.zeros(n_pi, dtype=np.int64),
        d_tstart=np.zeros(n_d), p_node=p_node, d_node=d_node, link=link.table(),
        t_pre=t_pre, gi=gi, gf=gf,
    )
    gi[Q_NDELAY] = n_delay
    live_prompt = prompt[~ignored]
    cap_p = pending_capacity if pending_capacity is not None else \
        min(max(n, 1), max(256, 8 * -(-n // n_d)))
    rt = make_router_state(router, n, n_d, active_capacity=dp_.max_num_seqs,
                           pending_capacity=cap_p,
                           max_length=sibyl_max_length or dp_.max_model_len,
                           delta=sibyl_delta, alpha=sibyl_alpha,
                           v_sys_init=_decode_rate(decode.cost, float(live_prompt.mean())
                                                   if live_prompt.size else 1.0))
    x = make_xfer(n, n_pi, n_d)
    p_rec, d_rec = make_rec(record_steps), make_rec(record_steps)
    if n:
        run_pd_loop(pd, rt, x, p_pool, p_inst, p_reqs, p_knobs, p_glob, p_rec,
                    _pool_cost(prefill.cost), d_pool, d_inst, d_reqs, d_knobs, d_glob, d_rec,
                    _pool_cost(decode.cost))
    if gi[Q_ERROR] == ERR_STALL:
        raise ValueError("the simulation stalled: requests wait but no instance can schedule "
                         "them (check num_gpu_blocks and max_num_batched_tokens)")
    if gi[Q_ERROR] == ERR_MAX_STEPS:
        raise ValueError(f"stopped after max_steps={max_steps} engine steps with "
                         f"{n - gi[Q_DONE]} of {n} requests unfinished")
    capped = (d_reqs.status == FINISHED_STOPPED) & (output < output_req)
    d_reqs.status[capped] = FINISHED_LENGTH_CAPPED
    return PDResult(pd=pd, rt=rt, p_reqs=p_reqs, d_reqs=d_reqs, p_inst=p_inst, d_inst=d_inst,
                    p_pool=p_pool, d_pool=d_pool, p_rec=p_rec, d_rec=d_rec, prefill=prefill,
                    decode=decode, link=link,
                    router=router, assignment=assignment, layerwise=bool(layerwise),
                    prefill_stage=prefill_stage, output_requested=output_req,
                    ignored=ignored)


__all__ = ["FittedThroughputCost", "KVLink", "PDResult", "PoolSpec", "prefill_seconds",
           "run_pd", "run_pd_loop"]
