"""Prefill/decode disaggregation: the events of the prefill, transfer and decode roles.

Life of a request (:mod:`serveplan.sim.lifecycle` dispatches it, :mod:`.handoff` holds
its handoff state):

1. *Dispatch* (arrival): the entry router picks a prefill instance. With *early*
   assignment the decode router also binds a decode instance now, for an expected handoff
   ``tau = now + estimated prefill time`` (the prefill instance's queued tokens and the
   request's prompt, priced by the prefill cost model as full chunks plus a remainder,
   plus the rest of the running step).
2. *Prefill* on the prefill instance as in a colocated engine whose requests all have one
   output token. The step that completes the prompt emits the first token: TTFT ends here,
   as in vLLM's disaggregated serving. The KV stays on the prefill instance (its blocks and
   a slot held) until it has been transferred: its KV blocks bound how much it can hold,
   and so does ``prefill_hold`` (finished requests held beyond which it admits fewer new
   ones) -- prefill-side backpressure. With *late* assignment the decode router runs now.
3. *Pull* (decode-side backpressure, as vLLM's NixlConnector / Frontier's pull-based
   transfer): the request waits in its decode instance's FIFO pull queue until that
   instance allocates KV blocks for the whole prompt (keeping its ``watermark`` free) and
   has a free sequence slot; only then does the transfer start. Pulls happen where vLLM's
   scheduler admits waiting requests: when the decode instance schedules a step, after its
   running requests got their blocks (or when it is idle); requests preempted on the
   decode instance (recomputed locally) go first. A transfer that takes no time delivers at
   once and the request joins the step being scheduled (as a synchronous KV load). With
   layer-wise transfer (early assignment only) the request enters the pull queue when its
   prefill is first scheduled and the transfer streams while the prefill runs.
4. *Transfer* of ``prompt`` tokens of KV over the link between the two instances
   (:mod:`serveplan.sim.transfer`: fair sharing, latency, layer-wise floor). When it ends,
   the prefill instance frees the request's blocks (they stay in its prefix cache) and
   the request joins the decode instance's running list with its prompt computed and one
   token generated -- or, with ``first_token: recompute`` (vLLM), with its last prompt
   token left to compute: the first step that holds it samples the first token again.
5. *Decode* of the remaining ``output_len - 1`` tokens (``recompute``: all ``output_len``)
   by the decode instance's scheduler; the request finishes with its last token.

Requests with a one-token output finish at their prefill and never reach a decode
instance (as if the proxy knew ``max_tokens == 1``). With the ``delay`` prefill stage
(SIBYL's simulator, Appendix I) there are no prefill instances: every prefill takes its
cost-model time alone from its arrival (an infinite-server stage) and ``tau`` is exact.
"""

from __future__ import annotations

from ._jitcache import sim_jit, sim_jit_inline
from .handoff import (
    FL_ASSIGNED,
    FL_PREFILLED,
    FL_QUEUED,
    Q_DBASE,
    Q_DPTR,
    Q_LATE,
    Q_LAYERWISE,
    Q_RECOMPUTE,
    W_LAYER_FRAC,
    assign_decode,
    enqueue_pull,
)
from .kvcache import num_used
from .lifecycle import request_done
from .pd_router import is_least_loaded, on_decode_step, on_finish, on_join, on_token
from .runtime import output_delay
from .scheduler import schedule
from .state import (
    FINISHED_STOPPED,
    I_BATCH,
    I_BUSY,
    I_NRUN,
    I_NSLOT,
    I_WLEN,
    K_MAX_SEQS,
    K_MAX_TOKENS,
    K_POLICY,
    K_SEQ_CAP,
    K_SLOTS,
    K_WATERMARK,
    POLICY_VLLM_V1,
    RUNNING,
    add_to_batch,
    allocate_running,
    allocate_waiting,
    free_request,
    num_tokens,
)
from .step import complete_step, drop_finished, launch, schedule_step
from .transfer import KIND_SCALEOUT, KIND_SCALEUP, xfer_begin, xfer_event, xfer_prefill_done


@sim_jit
def _free_prefill_kv(w, r):
    """Release the KV the prefill instance held for ``r`` (content stays cached)."""
    p = w.hs.p_of[r]
    p_reqs = w.views[0]
    if p >= 0 and p_reqs.slot[r] >= 0:
        free_request(w.pool, w.inst, p_reqs, p, r)
        w.hs.held[p] -= 1


@sim_jit
def _handoff(w, r, now):
    """Prefill of ``r`` finished at ``now`` (its first token)."""
    hs, d_reqs = w.hs, w.views[1]
    hs.flag[r] |= FL_PREFILLED
    if d_reqs.output[r] <= 1:
        _free_prefill_kv(w, r)
        d_reqs.n_out[r] = 1
        d_reqs.t_first[r] = now
        d_reqs.t_last[r] = now
        d_reqs.status[r] = FINISHED_STOPPED
        request_done(w, r, now)
        return
    if hs.flag[r] & FL_ASSIGNED:
        ok_t, ok_r = is_least_loaded(w.rt, hs.d_of[r])
        hs.opt_tok[r] = 1 if ok_t else 0
        hs.opt_req[r] = 1 if ok_r else 0
    else:
        assign_decode(hs, w.rt, d_reqs, r, now, now)
    if hs.flag[r] & FL_QUEUED:
        xfer_prefill_done(w.x, r, now)
    else:
        enqueue_pull(hs, r, now)


@sim_jit_inline
def complete_prefill(w, i, now):
    """End of prefill instance ``i``'s step: prompts that completed emit their first token;
    their KV stays held until transferred."""
    inst, p_reqs = w.inst, w.views[0]
    fin = False
    bn = inst.ist[i, I_BATCH]
    delay = output_delay(w.fe, bn)
    for j in range(bn):
        r = inst.b_req[i, j]
        if p_reqs.computed[r] < num_tokens(p_reqs, r):
            continue  # a chunk
        p_reqs.n_out[r] = 1
        p_reqs.t_first[r] = now
        w.fe.d_first[r] = delay
        w.fe.d_last[r] = delay
        p_reqs.t_last[r] = now
        p_reqs.status[r] = FINISHED_STOPPED
        inst.load[i] -= p_reqs.prompt[r]
        w.hs.held[i] += 1
        fin = True
        _handoff(w, r, now)
    if fin:
        drop_finished(inst, p_reqs, i)
    inst.ist[i, I_BATCH] = 0
    inst.ist[i, I_BUSY] = 0


@sim_jit_inline
def complete_delay(w, now):
    """SIBYL's delay stage: the next precomputed prefill completes at ``now``."""
    hs, p_reqs = w.hs, w.views[0]
    r = hs.dorder[hs.gi[Q_DPTR]]
    hs.gi[Q_DPTR] += 1
    p_reqs.n_out[r] = 1
    p_reqs.t_first[r] = now
    p_reqs.t_last[r] = now
    p_reqs.status[r] = FINISHED_STOPPED
    _handoff(w, r, now)


@sim_jit_inline
def start_prefill(w, i, now):
    """Prefill instance ``i`` schedules a step (admitting fewer requests while it holds
    finished prefills); with layer-wise transfer, assigned requests start streaming."""
    cap = w.knobs[i, K_SLOTS] - w.hs.held[i]
    seq_cap = w.knobs[i, K_SEQ_CAP]
    w.knobs[i, K_MAX_SEQS] = cap if cap < seq_cap else seq_cap
    if schedule_step(w, i, now) == 0:
        return
    launch(w, i, now)
    hs = w.hs
    if hs.gi[Q_LAYERWISE] != 0 and hs.gi[Q_LATE] == 0:
        for j in range(w.inst.ist[i, I_BATCH]):
            r = w.inst.b_req[i, j]
            if hs.flag[r] & (FL_QUEUED | FL_ASSIGNED) == FL_ASSIGNED:
                enqueue_pull(hs, r, now)


@sim_jit
def _deliver(w, r, now):
    """``r``'s KV arrived on its decode instance: it joins the running requests, with its
    prefill's token, or (``recompute``) with its last prompt token still to compute."""
    hs, inst, d_reqs = w.hs, w.inst, w.views[1]
    d = hs.d_of[r]
    k = hs.gi[Q_DBASE] + d
    hs.t_join[r] = now
    _free_prefill_kv(w, r)
    if hs.gi[Q_RECOMPUTE] != 0:  # its first token comes from its first step here
        d_reqs.computed[r] = d_reqs.prompt[r] - 1
        d_reqs.n_out[r] = 0
        inst.load[k] += d_reqs.prompt[r] + d_reqs.output[r]
    else:
        d_reqs.computed[r] = d_reqs.prompt[r]
        d_reqs.n_out[r] = 1
        d_reqs.t_first[r] = w.views[0].t_first[r]
        d_reqs.t_last[r] = w.views[0].t_first[r]
        inst.load[k] += d_reqs.output[r] - 1
    d_reqs.t_sched[r] = now
    d_reqs.status[r] = RUNNING
    n = inst.ist[k, I_NRUN]
    inst.run[k, n] = r
    inst.ist[k, I_NRUN] = n + 1
    on_join(w.rt, r, d, d_reqs.prompt[r], d_reqs.n_out[r], now)


@sim_jit_inline
def complete_transfer(w, now):
    """The next transfer event at ``now``: a request may be delivered."""
    r = xfer_event(w.x, now)
    if r >= 0:
        _deliver(w, r, now)


@sim_jit
def _join_batch(w, k, r):
    """A request delivered while instance ``k`` schedules joins the step if the policy and
    the token budget allow (vLLM schedules a request whose KV is loaded in the same step,
    after the running ones)."""
    inst, knobs = w.inst, w.knobs
    bn = inst.ist[k, I_BATCH]
    used = 0
    decode_only = True
    for j in range(bn):
        used += inst.b_new[k, j]
        if inst.b_new[k, j] != 1:
            decode_only = False
    if used >= knobs[k, K_MAX_TOKENS]:
        return
    if knobs[k, K_POLICY] != POLICY_VLLM_V1 and not decode_only:
        return
    if allocate_running(w.pool, inst, w.views[1], knobs, w.glob, k, r, 1):
        add_to_batch(inst, w.views[1], k, r, 1)


@sim_jit
def _try_pull(w, d, now):
    """Admit the head of decode instance ``d``'s pull queue while KV room and a slot allow,
    starting each admitted request's transfer; one that completes at once (no link cost)
    is delivered and may join the step being scheduled."""
    hs, inst, d_reqs = w.hs, w.inst, w.views[1]
    k = hs.gi[Q_DBASE] + d
    while hs.pq_len[d] > 0 and inst.ist[k, I_WLEN] == 0 and inst.ist[k, I_NSLOT] > 0:
        r = hs.pq_head[d]
        wm = w.knobs[k, K_WATERMARK] if num_used(w.pool, k) > 0 else 0
        if not allocate_waiting(w.pool, inst, d_reqs, w.knobs, w.glob, k, r, 0,
                                d_reqs.prompt[r], wm, 0):
            break
        hs.pq_head[d] = hs.pq_next[r]
        hs.pq_len[d] -= 1
        hs.t_xstart[r] = now
        p = hs.p_of[r]
        kind = KIND_SCALEOUT
        if p >= 0 and hs.p_node[p] == hs.d_node[d]:
            kind = KIND_SCALEUP
        work = d_reqs.prompt[r] * hs.link[kind, 0]
        floor = 0.0
        if hs.flag[r] & FL_PREFILLED == 0:
            floor = work * hs.gf[W_LAYER_FRAC]
        if not xfer_begin(w.x, r, now, work, floor, hs.link[kind, 1], p, d, kind):
            continue
        _deliver(w, r, now)
        _join_batch(w, k, r)


@sim_jit_inline
def start_decode(w, k, now):
    """Decode instance ``k`` schedules a step: its running (and preempted) requests by its
    policy, then pulls from its queue."""
    hs = w.hs
    d = k - hs.gi[Q_DBASE]
    schedule(w.pool, w.inst, w.views[1], w.knobs, w.glob, k, now)
    if hs.pq_len[d] > 0:
        _try_pull(w, d, now)
    bn = w.inst.ist[k, I_BATCH]
    if bn == 0:
        return
    for j in range(bn):
        r = w.inst.b_req[k, j]
        if hs.t_dec1[r] != hs.t_dec1[r]:  # NaN: its first decode step
            hs.t_dec1[r] = now
    launch(w, k, now)
    hs.d_tstart[d] = now


@sim_jit_inline
def complete_decode(w, k, now):
    """End of decode instance ``k``'s step: tokens, finishes, router bookkeeping."""
    hs, d_reqs = w.hs, w.views[1]
    d = k - hs.gi[Q_DBASE]
    bn = w.inst.ist[k, I_BATCH]
    complete_step(w, k, now)
    on_decode_step(w.rt, bn, now - hs.d_tstart[d])
    for j in range(bn):
        r = w.inst.b_req[k, j]
        if d_reqs.status[r] == FINISHED_STOPPED:
            on_finish(w.rt, r, d, d_reqs.prompt[r], d_reqs.n_out[r] - 1)
            request_done(w, r, now)
        elif d_reqs.t_last[r] == now:
            on_token(w.rt, r, d, d_reqs.n_out[r], d_reqs.n_out[r] - 1, now)


__all__ = ["complete_decode", "complete_delay", "complete_prefill", "complete_transfer",
           "start_decode", "start_prefill"]
