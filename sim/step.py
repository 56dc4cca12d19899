"""An engine step, the same for every role (compiled).

A step is schedule -> batch arrays -> cost -> update, as in vLLM: the instance's policy
fills the batch (:func:`serveplan.sim.scheduler.schedule`, or a session-aware ranking of
:mod:`serveplan.sim.session_policies` before the same rules), :func:`launch` prices it with
the instance's cost row (:func:`serveplan.sim.costs.step_seconds`), marks the instance busy
until its end and records it, and at the end :func:`complete_step` lets every request whose
computed tokens caught up with its tokens emit one output token (the step that completes a
prefill emits the first token). A step also lasts the host-link time of the KV blocks its
newly admitted requests load from the CPU tier (:mod:`serveplan.sim.kvcache`). A request
finishes when it has emitted ``output_len`` tokens; its blocks return to the pool (still
cached). On a colocated instance that is the end of the request
(:func:`serveplan.sim.lifecycle.request_done`); a decode instance's handler adds the
router's bookkeeping first (:mod:`serveplan.sim.disagg`).

On an instance that speculates (knob ``K_SPEC_TOKENS``), a decode's batch entry carries its
last token and the drafts to verify: :func:`launch` prices the verify step and the drafter
and :func:`complete_step` lets it emit its accepted drafts plus one
(:mod:`serveplan.sim.specdecode`).
"""

from __future__ import annotations

import numpy as np

from ._jitcache import sim_jit, sim_jit_inline
from .colocated_sibyl import on_colocated_finish
from .costs import moe_tokens_slot, step_seconds
from .engine_policies import burst_steps, tokens_emitted
from .kvcache import num_used, take_pending_load
from .lifecycle import ROLE_COLOCATED, request_done, stage_of
from .recorder import record_step
from .runtime import output_delay, step_runtime
from .session_policies import schedule_any
from .session_state import cache_for_next_round
from .specdecode import settle_verify, spec_step_seconds
from .state import (
    A_BATCH_TIME,
    A_BUSY_TIME,
    A_BUSY_UNTIL,
    A_CUTOFF,
    A_KV_TIME,
    A_LAST_POLL,
    A_LAST_START,
    A_PREFILL_TOKENS,
    A_TOKENS,
    DP_TOKENS_SGLANG,
    DP_TOKENS_SUM,
    FINISHED_STOPPED,
    G_DEFER,
    G_STEPS,
    I_BATCH,
    I_BUSY,
    I_LAST_EXTEND,
    I_NRUN,
    I_RECV,
    I_STEPS,
    I_WLEN,
    K_ASYNC,
    K_COST,
    K_DP_TOKENS,
    K_RECV_INTERVAL,
    K_ROLE,
    K_SPEC_TOKENS,
    PREEMPTED,
    free_request,
    num_tokens,
)


@sim_jit_inline
def launch(w, i, now):
    """Cost instance ``i``'s scheduled batch, mark it busy and record the step -- or, while
    its lockstep group is being scheduled (``G_DEFER``), only mark it busy: the group then
    prices its members together (:func:`price_step`)."""
    if w.glob[G_DEFER] != 0:
        w.inst.ist[i, I_BUSY] = 1
        w.inst.acc[i, A_BUSY_UNTIL] = now
        return
    price_step(w, i, now, 0.0)


@sim_jit_inline
def batch_tokens(w, i):
    """``(passes, tokens, decode_tokens)`` of instance ``i``'s scheduled batch: forward
    passes (> 1: a multi-step decode burst), new tokens, and those of them that decode."""
    inst, reqs = w.inst, w.views[stage_of(w.knobs[i, K_ROLE])]
    passes = burst_steps(inst, reqs, w.knobs, i)
    spec = w.knobs[i, K_SPEC_TOKENS] > 0  # decodes verify drafts (specdecode)
    tokens = 0
    decode_tokens = 0
    for j in range(inst.ist[i, I_BATCH]):
        r = inst.b_req[i, j]
        k = inst.b_new[i, j] if passes == 1 else reqs.computed[r] - inst.b_ctx[i, j]
        tokens += k
        if (inst.b_new[i, j] == 1 or spec) and reqs.n_out[r] > 0 and \
                inst.b_ctx[i, j] == num_tokens(reqs, r) - 1:
            decode_tokens += k
    return passes, tokens, decode_tokens


@sim_jit_inline
def group_moe_tokens(w, g, n):
    """Tokens the MoE layers of lockstep group ``g`` (``n`` ranks) see in the step its busy
    members were just scheduled for, by the group's rule
    (:class:`~serveplan.sim.pools.DPTokens`)."""
    total = 0
    most = 0
    extend = False
    for j in range(g, g + n):
        if w.inst.ist[j, I_BUSY] != 0:
            _, tokens, decode_tokens = batch_tokens(w, j)
            total += tokens
            most = tokens if tokens > most else most
            extend = extend or tokens > decode_tokens
    return dp_moe_tokens(w.knobs[g, K_DP_TOKENS], n, total, most, extend)


@sim_jit
def dp_moe_tokens(rule, n, total, most, extend):
    """Tokens the MoE layers of ``n`` lockstep ranks see when they hold ``total`` tokens in
    all, ``most`` on the busiest, and ``extend``: some rank prefills
    (:class:`~serveplan.sim.pools.DPTokens`)."""
    if rule == DP_TOKENS_SUM or (rule == DP_TOKENS_SGLANG and (extend or 2 * total < n * most)):
        return float(total)
    return float(n * most)


@sim_jit_inline
def price_step(w, i, now, moe_tokens):
    """Price instance ``i``'s scheduled batch from ``now``, mark it busy and record it.
    ``moe_tokens`` > 0: the tokens its MoE layers see (its lockstep group's,
    :func:`serveplan.sim.costs.moe_tokens_slot`); 0: its own tokens times its ``dp``."""
    inst, reqs = w.inst, w.views[stage_of(w.knobs[i, K_ROLE])]
    bn = inst.ist[i, I_BATCH]
    passes, tokens, decode_tokens = batch_tokens(w, i)
    inst.ist[i, I_LAST_EXTEND] = 1 if tokens > decode_tokens else 0
    c = w.knobs[i, K_COST]
    slot = moe_tokens_slot(w.costs, c) if moe_tokens > 0.0 and passes == 1 and tokens > 0 \
        else -1
    if slot >= 0:  # the MoE rows see moe_tokens / tokens times this rank's tokens
        own = w.costs.prm[slot]
        w.costs.prm[slot] = moe_tokens / tokens
    if w.knobs[i, K_SPEC_TOKENS] > 0:
        gpu = spec_step_seconds(w.costs, inst, reqs, w.knobs, i, bn, tokens)
    else:
        gpu = passes * step_seconds(w.costs, c, inst, i, bn, tokens if passes == 1 else bn)
    if slot >= 0:
        w.costs.prm[slot] = own
    gpu += take_pending_load(w.pool, i)  # CPU-tier loads of the requests it admitted
    dt = step_runtime(w.costs.rt[c], gpu, bn, tokens, tokens - decode_tokens,
                      w.knobs[i, K_ASYNC] != 0)
    used = num_used(w.pool, i)
    inst.acc[i, A_LAST_START] = now
    inst.acc[i, A_BUSY_UNTIL] = now + dt
    inst.acc[i, A_BUSY_TIME] += dt
    inst.acc[i, A_KV_TIME] += used * dt
    inst.acc[i, A_BATCH_TIME] += bn * dt
    inst.acc[i, A_TOKENS] += tokens
    inst.acc[i, A_PREFILL_TOKENS] += tokens - decode_tokens
    inst.ist[i, I_BUSY] = 1
    inst.ist[i, I_STEPS] += 1
    w.glob[G_STEPS] += 1
    record_step(w.rec, now, dt, i, bn, tokens, tokens - decode_tokens, used,
                inst.ist[i, I_WLEN], inst.ist[i, I_NRUN])


@sim_jit_inline
def read_requests(w, i, now):
    """SGLang's ``--scheduler-recv-interval N`` (``scheduler_recv_skipper.py``): the
    scheduler reads its socket before forming a batch only when a counter reaches ``N``; the
    last batch adds 1 if it decoded, ``N`` if it held prompt tokens (a prefill or mixed
    batch), and an idle engine spins and reads at once. Requests that arrived after the
    last read stay unseen (``A_CUTOFF``). The batch is formed at ``min(now, A_CUTOFF)``
    (the previous step's start under the overlap scheduler)."""
    n = w.knobs[i, K_RECV_INTERVAL]
    if n <= 1:
        return
    inst = w.inst
    formed = min(now, inst.acc[i, A_CUTOFF])
    if inst.ist[i, I_STEPS] == 0 or inst.acc[i, A_BUSY_UNTIL] < now:
        inst.ist[i, I_RECV] = n  # idle
    else:
        inst.ist[i, I_RECV] += n if inst.ist[i, I_LAST_EXTEND] != 0 else 1
    if inst.ist[i, I_RECV] >= n:
        inst.ist[i, I_RECV] = 0
        inst.acc[i, A_LAST_POLL] = formed
    inst.acc[i, A_CUTOFF] = min(inst.acc[i, A_CUTOFF], inst.acc[i, A_LAST_POLL])


@sim_jit_inline
def schedule_step(w, i, now):
    """Fill instance ``i``'s batch at ``now``; returns its size.

    With async scheduling, a step that starts right as the previous one ends was formed
    while that one ran: requests that reached the engine after the previous step started
    wait for the step after (``A_CUTOFF``). If that leaves the batch empty the engine finds
    no work in flight and schedules again with what has arrived.
    """
    inst = w.inst
    reqs = w.views[stage_of(w.knobs[i, K_ROLE])]
    if w.knobs[i, K_ASYNC] != 0 and inst.acc[i, A_BUSY_UNTIL] == now:
        inst.acc[i, A_CUTOFF] = inst.acc[i, A_LAST_START]
    read_requests(w, i, now)
    bn = schedule_any(w, reqs, i, now)
    if bn == 0 and inst.acc[i, A_CUTOFF] < now:
        inst.acc[i, A_CUTOFF] = np.inf
        bn = schedule_any(w, reqs, i, now)
    inst.acc[i, A_CUTOFF] = np.inf
    return bn


@sim_jit_inline
def start_step(w, i, now):
    """Schedule and launch instance ``i``'s next step at ``now``; False if it is empty."""
    if schedule_step(w, i, now) == 0:
        return False
    launch(w, i, now)
    return True


@sim_jit
def drop_finished(inst, reqs, i):
    """Remove finished requests from the running list, keeping admission order."""
    k = 0
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        if reqs.status[r] <= PREEMPTED:
            inst.run[i, k] = r
            k += 1
    inst.ist[i, I_NRUN] = k


@sim_jit_inline
def complete_step(w, i, now):
    """End of instance ``i``'s step at ``now``: emit tokens, finish requests (a colocated
    request ends here; a decode instance's handler ends its requests)."""
    inst = w.inst
    role = w.knobs[i, K_ROLE]
    reqs = w.views[stage_of(role)]
    finished = False
    bn = inst.ist[i, I_BATCH]
    delay = output_delay(w.fe, bn)
    for j in range(bn):
        r = inst.b_req[i, j]
        if w.knobs[i, K_SPEC_TOKENS] > 0:
            settle_verify(w.pool, inst, reqs, w.knobs, w.costs.spec, i, j, r)
        k = tokens_emitted(reqs, r)  # 0: a prefill chunk; > 1: a multi-step burst or verify
        if k == 0:
            continue
        reqs.n_out[r] += k
        if reqs.n_out[r] == 1:
            reqs.t_first[r] = now
            w.fe.d_first[r] = delay
            inst.load[i] -= reqs.prompt[r]
        else:
            gap = now - reqs.t_last[r]
            if not gap <= reqs.itl_max[r]:  # also replaces the initial NaN
                reqs.itl_max[r] = gap
        reqs.t_last[r] = now
        inst.load[i] -= k
        if reqs.n_out[r] >= reqs.output[r]:
            reqs.status[r] = FINISHED_STOPPED
            reqs.t_finish[r] = now
            w.fe.d_last[r] = delay
            if role == ROLE_COLOCATED:
                cache_for_next_round(w.pool, inst, reqs, w.knobs, w.glob, w.ss, i, r)
            free_request(w.pool, inst, reqs, i, r)
            if role == ROLE_COLOCATED:
                on_colocated_finish(w.rt, reqs.n_out[r])
                request_done(w, r, now)
            finished = True
    if finished:
        drop_finished(inst, reqs, i)
    inst.ist[i, I_BATCH] = 0
    inst.ist[i, I_BUSY] = 0


__all__ = ["complete_step", "drop_finished", "launch", "schedule_step", "start_step"]
