"""Session-aware schedulers: skip-join MLFQ and H2Q-BR order the work, vLLM v1 builds the batch.

Both policies only decide the *order* of an instance's running and waiting requests; the
batch is then built with vLLM v1's per-request rules (:mod:`serveplan.sim.scheduler`):
chunks capped by ``long_prefill_token_threshold`` and the token budget, ``max_num_seqs``,
block allocation with the watermark, admission stopping at the first waiting request that
does not fit, no admission after a preemption. The order is one ranking of running and
waiting requests together (Frontier, Appendix B.3: "Rank Running ∪ Waiting"), walked
front to back: a waiting request ranked above a running one is admitted before that one
continues, so a short answer prefill can take the budget ahead of a long running prefill.
On block shortage a running request is preempted as vLLM's priority policy preempts one
(the largest ``(priority, arrival)``, taking back its tokens if it was already scheduled in
this pass): the largest (class, arrival), where the class is H2Q-BR's queue or MLFQ's
level. The order of service (ties broken by size, decode before prefill, the release and
liveness picks) is not the order of preemption: were it, two requests whose ranks swap
from step to step could preempt each other forever, each losing its prefill to the other.
Within a class the older request always keeps its blocks, so it progresses.

Skip-join MLFQ (FastServe, Wu et al. 2023, §4.1; ``skip-join-mlfq``)
    ``K`` queues with quanta ``Q0 * 2**j`` tokens (FastServe doubles the quantum per
    level). A request skip-joins the highest queue whose quantum holds its current round's
    new prompt tokens ``l`` (FastServe: its first iteration's time), and moves down a queue
    each time its attained service (tokens it has had scheduled) uses up its queue's
    quantum. Order: queue, then arrival (FCFS within a queue). Service is counted in
    tokens, not seconds: a decode token weighs one prompt token (an approximation of the
    paper's time quanta).
H2Q-BR (Frontier, Appendix B.3, Algorithm 2; ``h2q-br``)
    A request is classified when first seen (Eq. 3): long queue ``QL`` if its session is
    sticky-long (``z``), has been served more than ``C`` new tokens, or this round's new
    prompt ``l > L``; else short queue ``QS``. Rank (Eq. 4): the bounded-release request
    (-2), the liveness request (-1), ``QS`` (0), ``QL`` (1); ties: in ``QS`` smaller ``l``,
    prefill before decode, earlier arrival; in ``QL`` decode before prefill, earlier
    arrival. Bounded release: the oldest request of a session with a carryover credit
    (``c``; an unfinished prefill), if it arrived no later than the oldest waiting ``QS``
    request (or none waits). Liveness: after ``B`` consecutive ``QS`` slices, the oldest
    ``QL`` request. After each step (accounted when the instance next schedules, which is
    the same state as no other decision on it comes between): ``H += executed new tokens``;
    an unfinished prefill marks its session sticky-long with a carryover credit and moves
    to ``QL``; a released request that ran spends the credit; the streak resets when a
    ``QL`` slice ran, else grows by the ``QS`` slices.

Knobs (``Sessions.par``): MLFQ's ``Q0`` and ``K``; H2Q-BR's ``C``, ``L`` and ``B``
(:class:`serveplan.sim.sessions.SchedulerKnobs` gives their defaults and sources).
"""

from __future__ import annotations

from ._jitcache import sim_jit, sim_jit_inline
from .scheduler import _cap_new_tokens, admit_head, schedule
from .session_state import (
    P_H2Q_CAP,
    P_H2Q_LONG,
    P_H2Q_STREAK,
    P_MLFQ_LEVELS,
    P_MLFQ_QUANTUM,
    Q_LONG,
    Q_SHORT,
    Q_UNSET,
)
from .state import (
    I_BATCH,
    I_NRUN,
    I_WHEAD,
    I_WLEN,
    K_CHUNKED,
    K_MAX_TOKENS,
    K_POLICY,
    POLICY_H2Q_BR,
    POLICY_SKIP_JOIN_MLFQ,
    RUNNING,
    add_to_batch,
    allocate_running,
    num_tokens,
    preempt_at,
    waiting_visible,
    wq_peek,
)

NEW_BITS = 26  # key layout: rank, then l (< 2**25 tokens), then the prefill/decode bit


# ------------------------------------------------------------------------ ranking keys
@sim_jit
def mlfq_level(ss, r):
    """Skip-join MLFQ queue of ``r``: join by its new prompt tokens, demote per quantum used."""
    q0, levels = ss.par[P_MLFQ_QUANTUM], ss.par[P_MLFQ_LEVELS]
    j = 0
    while j < levels - 1 and ss.new[r] > q0 << j:
        j += 1
    used = q0 << j  # service that ends the quantum of queue j
    while j < levels - 1 and ss.att[r] >= used:
        j += 1
        used += q0 << j
    return j


@sim_jit
def h2q_class(ss, r):
    """Eq. 3, once per request (a carryover later moves it to ``QL``)."""
    if ss.q[r] == Q_UNSET:
        s = ss.sid[r]
        long = ss.z[s] != 0 or ss.served[s] > ss.par[P_H2Q_CAP] or ss.new[r] > ss.par[P_H2Q_LONG]
        ss.q[r] = Q_LONG if long else Q_SHORT
    return ss.q[r]


@sim_jit
def h2q_key(ss, reqs, r, rel, live):
    """Eq. 4 and its tie-breakers as one integer (arrival and id break remaining ties)."""
    decode = 1 if reqs.n_out[r] > 0 else 0
    if r == rel or r == live:
        rank, size, d = (0 if r == rel else 1), 0, 1 - decode
    elif h2q_class(ss, r) == Q_SHORT:
        rank, size, d = 2, ss.new[r], decode
    else:
        rank, size, d = 3, 0, 1 - decode
    return ((rank << NEW_BITS) + min(size, (1 << (NEW_BITS - 1)) - 1)) * 2 + d


@sim_jit
def _candidates(inst, i, ss):
    """Running then waiting requests of instance ``i`` into ``ss.cand``; returns the count."""
    n = 0
    for j in range(inst.ist[i, I_NRUN]):
        ss.cand[n] = inst.run[i, j]
        n += 1
    cap = inst.wq.shape[1]
    head = inst.ist[i, I_WHEAD]
    for k in range(inst.ist[i, I_WLEN]):
        ss.cand[n] = inst.wq[i, (head + k) % cap]
        n += 1
    return n


@sim_jit
def _h2q_special(ss, reqs, i, n):
    """``(i_rel, i_live)`` of Algorithm 2's BeforeSchedulingPass (-1: none)."""
    oldest_qs = 1e300
    for k in range(n):
        r = ss.cand[k]
        if reqs.status[r] != RUNNING and h2q_class(ss, r) == Q_SHORT:
            oldest_qs = min(oldest_qs, reqs.arrival[r])
    rel, live = -1, -1
    for k in range(n):
        r = ss.cand[k]
        a = reqs.arrival[r]
        if ss.carry[ss.sid[r]] != 0 and reqs.n_out[r] == 0 and a <= oldest_qs and \
                (rel < 0 or a < reqs.arrival[rel]):
            rel = r
        if ss.streak[i] >= ss.par[P_H2Q_STREAK] and h2q_class(ss, r) == Q_LONG and \
                (live < 0 or a < reqs.arrival[live]):
            live = r
    return rel, live


@sim_jit
def _before(ss, reqs, a, b):
    ka, kb = ss.key[a], ss.key[b]
    if ka != kb:
        return ka < kb
    if reqs.arrival[a] != reqs.arrival[b]:
        return reqs.arrival[a] < reqs.arrival[b]
    return a < b


@sim_jit
def _sift(ss, reqs, lo, k, n):
    while True:
        c = 2 * k + 1
        if c >= n:
            return
        if c + 1 < n and _before(ss, reqs, ss.cand[lo + c], ss.cand[lo + c + 1]):
            c += 1
        if not _before(ss, reqs, ss.cand[lo + k], ss.cand[lo + c]):
            return
        ss.cand[lo + k], ss.cand[lo + c] = ss.cand[lo + c], ss.cand[lo + k]
        k = c


@sim_jit
def sort_candidates(ss, reqs, n):
    """Heapsort ``ss.cand[:n]`` by (key, arrival, id) in place (no allocation)."""
    for k in range(n // 2 - 1, -1, -1):
        _sift(ss, reqs, 0, k, n)
    for end in range(n - 1, 0, -1):
        ss.cand[0], ss.cand[end] = ss.cand[end], ss.cand[0]
        _sift(ss, reqs, 0, 0, end)


@sim_jit
def rank_queues(inst, reqs, ss, i, policy):
    """Rank running and waiting requests of instance ``i`` together; rewrite the running
    list and the waiting ring in that order and set each one's position ``ss.pos``."""
    n = _candidates(inst, i, ss)
    rel, live = -1, -1
    if policy == POLICY_H2Q_BR:
        rel, live = _h2q_special(ss, reqs, i, n)
    for k in range(n):
        r = ss.cand[k]
        ss.key[r] = mlfq_level(ss, r) if policy == POLICY_SKIP_JOIN_MLFQ else \
            h2q_key(ss, reqs, r, rel, live)
    ss.rel[i] = rel
    sort_candidates(ss, reqs, n)
    nr, nw = 0, 0
    cap = inst.wq.shape[1]
    head = inst.ist[i, I_WHEAD]
    for k in range(n):
        r = ss.cand[k]
        ss.pos[r] = k
        if reqs.status[r] == RUNNING:
            inst.run[i, nr] = r
            nr += 1
        else:
            inst.wq[i, (head + nw) % cap] = r
            nw += 1


# ------------------------------------------------------------------------ accounting
@sim_jit
def account_last_batch(inst, reqs, ss, i):
    """Algorithm 2's OnBatchCompletion for instance ``i``'s previous step (and MLFQ's
    attained service); runs once per step, at the instance's next scheduling pass."""
    nb = ss.last_bn[i]
    ss.last_bn[i] = 0
    ql_ran, qs_ran = False, 0
    for j in range(nb):
        r = inst.b_req[i, j]
        s = ss.sid[r]
        ss.att[r] += inst.b_new[i, j]
        ss.served[s] += inst.b_new[i, j]
        if reqs.n_out[r] == 0 and reqs.computed[r] < num_tokens(reqs, r):
            ss.z[s], ss.carry[s], ss.q[r] = 1, 1, Q_LONG  # a carryover
        if r == ss.rel[i]:
            ss.carry[s] = 0
        if ss.q[r] == Q_LONG:
            ql_ran = True
        else:
            qs_ran += 1
    if nb > 0:
        ss.streak[i] = 0 if ql_ran else ss.streak[i] + qs_ran


# ------------------------------------------------------------------------ batch builder
@sim_jit
def _preempt_class(ss, r, policy):
    """``r``'s class in the preemption order: H2Q-BR's queue (``QS`` before ``QL``; the
    bounded-release and liveness picks keep their queue), skip-join MLFQ's level."""
    if policy == POLICY_H2Q_BR:
        return h2q_class(ss, r)  # (the release and liveness picks skip it in the ranking)
    return mlfq_level(ss, r)


@sim_jit
def _victim(inst, reqs, ss, i, policy):
    """Position of the running request preempted on block shortage: the largest (class,
    arrival, id), as vLLM's priority policy takes the largest (priority, arrival)."""
    best, best_c, best_a, best_r = -1, 0, 0.0, -1
    for j in range(inst.ist[i, I_NRUN]):
        r = inst.run[i, j]
        c, a = _preempt_class(ss, r, policy), reqs.arrival[r]
        if best < 0 or c > best_c or (c == best_c and (a > best_a or (a == best_a and r > best_r))):
            best, best_c, best_a, best_r = j, c, a, r
    return best


@sim_jit
def _unschedule(inst, reqs, i, r):
    """Take ``r``'s tokens out of the step being built; returns how many there were."""
    bn = inst.ist[i, I_BATCH]
    for j in range(bn):
        if inst.b_req[i, j] == r:
            n = inst.b_new[i, j]
            for k in range(j, bn - 1):
                inst.b_req[i, k] = inst.b_req[i, k + 1]
                inst.b_new[i, k] = inst.b_new[i, k + 1]
                inst.b_ctx[i, k] = inst.b_ctx[i, k + 1]
            inst.ist[i, I_BATCH] = bn - 1
            reqs.computed[r] -= n
            return n
    return 0


@sim_jit
def _run_one(pool, inst, reqs, knobs, glob, ss, i, idx, nr, budget, policy):
    """vLLM v1's rule for running request ``inst.run[i, idx]``; on block shortage the
    running request last in the preemption order (:func:`_victim`) is preempted, even one
    scheduled earlier in this pass (its tokens are taken back, as vLLM's priority policy
    does), possibly the request itself. Returns ``(budget left, next position, original
    running requests left, preempted any)``.

    A request that preempts itself leaves the pass, which goes on with the next one: vLLM
    stops scheduling running requests there, but the walk's order is not the preemption
    order, so the first one walked may be the one preempted, and an empty step would leave
    the instance idle with work (vLLM's engine loop would schedule again at once)."""
    r = inst.run[i, idx]
    num_new = _cap_new_tokens(knobs, i, num_tokens(reqs, r) - reqs.computed[r], budget)
    if num_new <= 0:
        return budget, idx + 1, nr, False
    preempted = False
    while not allocate_running(pool, inst, reqs, knobs, glob, i, r, num_new):
        v = _victim(inst, reqs, ss, i, policy)
        victim = inst.run[i, v]
        budget += _unschedule(inst, reqs, i, victim)
        preempt_at(pool, inst, reqs, knobs, glob, i, v, reqs.computed[victim], True)
        preempted = True
        if v < nr:
            nr -= 1
        if victim == r:
            return budget, idx, nr, True
        if v < idx:
            idx -= 1
    add_to_batch(inst, reqs, i, r, num_new)
    return budget - num_new, idx + 1, nr, preempted


@sim_jit
def build_ranked(pool, inst, reqs, knobs, glob, ss, i, now, policy):
    """Walk the ranked running and waiting requests front to back with vLLM v1's rules."""
    budget = knobs[i, K_MAX_TOKENS]
    chunked = knobs[i, K_CHUNKED] != 0
    idx, nr = 0, inst.ist[i, I_NRUN]
    admitting = True
    while budget > 0:
        head = wq_peek(inst, i) if admitting and inst.ist[i, I_WLEN] > 0 else -1
        if head >= 0 and not waiting_visible(inst, reqs, i, head):
            head = -1
        if idx < nr and (head < 0 or ss.pos[inst.run[i, idx]] < ss.pos[head]):
            budget, idx, nr, pre = _run_one(pool, inst, reqs, knobs, glob, ss, i, idx, nr,
                                            budget, policy)
            if pre:
                admitting = False  # vLLM v1 admits nothing in a step that preempted
        elif head >= 0:
            left = admit_head(pool, inst, reqs, knobs, glob, i, budget, now, chunked, False)
            if left < 0:
                admitting = False
            else:
                budget = left
        else:
            break


@sim_jit_inline
def schedule_any(w, reqs, i, now):
    """Fill instance ``i``'s batch: a session-aware order then vLLM v1's rules, or the
    instance's built-in policy (:func:`serveplan.sim.scheduler.schedule`)."""
    policy = w.knobs[i, K_POLICY]
    if policy != POLICY_SKIP_JOIN_MLFQ and policy != POLICY_H2Q_BR:
        return schedule(w.pool, w.inst, reqs, w.knobs, w.glob, i, now)
    inst, ss = w.inst, w.ss
    inst.ist[i, I_BATCH] = 0
    account_last_batch(inst, reqs, ss, i)
    rank_queues(inst, reqs, ss, i, policy)
    build_ranked(w.pool, inst, reqs, w.knobs, w.glob, ss, i, now, policy)
    ss.last_bn[i] = inst.ist[i, I_BATCH]
    return inst.ist[i, I_BATCH]


__all__ = ["account_last_batch", "build_ranked", "h2q_class", "h2q_key", "mlfq_level",
           "rank_queues", "schedule_any", "sort_candidates"]
