"""Skip-join MLFQ and H2Q-BR (serveplan.sim.session_policies) on hand-built queues.

Expected orders come from the rules as the papers state them: FastServe's skip-join
(join the highest queue whose quantum holds the first iteration; demote per quantum used)
and Frontier's Eq. 3 / Eq. 4 with Algorithm 2 (bounded release, liveness)."""

from __future__ import annotations

import numpy as np

from serveplan.sim.engine import AffineStepCost, EngineParams, Router, run_engine
from serveplan.sim.kvcache import make_pool
from serveplan.sim.session_policies import (
    account_last_batch,
    build_ranked,
    mlfq_level,
    rank_queues,
)
from serveplan.sim.session_state import Q_LONG, Q_SHORT, make_sessions
from serveplan.sim.sessions import SchedulerKnobs
from serveplan.sim.state import (
    FINISHED_STOPPED,
    I_BATCH,
    I_NRUN,
    I_NSLOT,
    I_WHEAD,
    I_WLEN,
    N_GLOB,
    POLICY_H2Q_BR,
    POLICY_SKIP_JOIN_MLFQ,
    RUNNING,
    WAITING,
    Policy,
    make_inst,
    make_reqs,
    reserve_blocks,
    wq_push_back,
)
from serveplan.sim.workload import Requests

KNOBS = SchedulerKnobs()  # Q0 = 256, K = 8; C = 8192, L = 4096, B = 64


def queues(new, arrival, *, sid=None, history=None, running=()):
    """One instance; request ``r`` has ``new[r]`` new prompt tokens after ``history[r]``
    tokens of its session (prompt = both), session ``sid[r]``; ``running`` are running (in
    that order), the rest wait in index order."""
    n = len(new)
    history = np.zeros(n, dtype=np.int64) if history is None else np.asarray(history)
    prompt = np.asarray(new) + history
    reqs = make_reqs(arrival, prompt, np.full(n, 64))
    inst = make_inst(1, 16, 4096, n + 1)
    ss = make_sessions(n, 1, prompt, par=KNOBS.row(), slots=16)
    ss.new[:] = new
    ss.sid[:] = np.arange(n) if sid is None else sid
    for j, r in enumerate(running):
        inst.run[0, j] = r
        reqs.status[r] = RUNNING
    inst.ist[0, I_NRUN] = len(running)
    for r in range(n):
        if r not in running:
            reqs.status[r] = WAITING
            wq_push_back(inst, 0, r)
    return reqs, inst, ss


def waiting(inst):
    head, n = inst.ist[0, I_WHEAD], inst.ist[0, I_WLEN]
    return [int(inst.wq[0, (head + k) % inst.wq.shape[1]]) for k in range(n)]


def running(inst):
    return [int(r) for r in inst.run[0, : inst.ist[0, I_NRUN]]]


# Four waiting rounds (FCFS order would be by arrival: C, B, D, A):
#   A: a Short session's answer, l = 256, arrival 3
#   B: a Short session's hidden round, l = 4096, arrival 1
#   C: a Heavy session's first hidden round, l = 32768, arrival 0
#   D: a Heavy session's answer, l = 256, arrival 2, its session served H = 61,184 > C
A, B, C, D = range(4)
NEW = [256, 4096, 32768, 256]
ARRIVAL = [3.0, 1.0, 0.0, 2.0]


def test_mlfq_skip_join_by_current_round_only():
    # Queue = smallest j with l <= 256 * 2**j: A, D -> 0; B (4096 = 256 * 2**4) -> 4;
    # C (32768 = 256 * 2**7) -> 7. Within a queue FCFS: D (2.0) before A (3.0). The heavy
    # session's small answer D goes first: MLFQ cannot tell it from a short session's.
    reqs, inst, ss = queues(NEW, ARRIVAL)
    assert [mlfq_level(ss, r) for r in range(4)] == [0, 4, 7, 0]
    rank_queues(inst, reqs, ss, 0, POLICY_SKIP_JOIN_MLFQ)
    assert waiting(inst) == [D, A, B, C]


def test_mlfq_demotes_per_quantum_used():
    # A joins queue 0 (quantum 256); after 256 tokens of service it moves to queue 1
    # (quantum 512), after 256 + 512 = 768 to queue 2, after 768 + 1024 = 1792 to queue 3.
    reqs, inst, ss = queues([256], [0.0])
    for att, level in ((0, 0), (255, 0), (256, 1), (767, 1), (768, 2), (1792, 3)):
        ss.att[0] = att
        assert mlfq_level(ss, 0) == level


def test_h2q_eq3_eq4_order():
    # Eq. 3 with C = 8192, L = 4096: A (256) and B (4096, not > L) are QS; C (32768 > L) is
    # QL; D is QL because its session's H = 61,184 > C. Eq. 4: QS first by l (A 256, then B
    # 4096), then QL by (prefill/decode, arrival): C (0.0), D (2.0).
    reqs, inst, ss = queues(NEW, ARRIVAL, sid=[0, 1, 2, 3])
    ss.served[3] = 61184
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    assert [int(ss.q[r]) for r in range(4)] == [Q_SHORT, Q_SHORT, Q_LONG, Q_LONG]
    assert waiting(inst) == [A, B, C, D]


def test_h2q_sticky_flag_keeps_a_small_round_long():
    # A session marked long (z = 1, after a spilled prefill) keeps a 256-token round in QL.
    reqs, inst, ss = queues([256, 512], [0.0, 1.0], sid=[0, 1])
    ss.z[0] = 1
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    assert waiting(inst) == [1, 0]


def test_h2q_qs_decode_after_qs_prefill_and_ql_decode_before_prefill():
    # Running: r0 QS decoding, r1 QL decoding; waiting: r2 QS prefill (l = 300), r3 QL
    # prefill. QS ties by (l, prefill before decode): r2 (300) vs r0 (l = 100, decode): l
    # first, so r0, then r2. QL: decode (r1) before prefill (r3).
    reqs, inst, ss = queues([100, 5000, 300, 5000], [0.0, 0.5, 1.0, 0.2], running=(1, 0))
    reqs.n_out[0] = reqs.n_out[1] = 3
    reqs.computed[0], reqs.computed[1] = reqs.prompt[0] + 2, reqs.prompt[1] + 2
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    order = sorted(range(4), key=lambda r: ss.pos[r])
    assert order == [0, 2, 1, 3]
    assert running(inst) == [0, 1] and waiting(inst) == [2, 3]


def test_h2q_liveness_forces_the_oldest_long_request():
    # After B = 64 short slices in a row, the oldest QL request (C, arrival 0.0) ranks -1,
    # ahead of every QS request.
    reqs, inst, ss = queues(NEW, ARRIVAL)
    ss.served[D] = 61184
    ss.streak[0] = KNOBS.h2q_liveness
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    assert waiting(inst) == [C, A, B, D]
    ss.streak[0] = KNOBS.h2q_liveness - 1  # one short of B: the normal order
    ss.q[:] = -1
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    assert waiting(inst) == [A, B, C, D]


def test_h2q_bounded_release_only_if_no_older_short_request_waits():
    # C has a carryover credit (its prefill spilled) and arrived at 0.0: no waiting QS
    # request is older (A 3.0, B 1.0), so C is released (rank -2) and goes first. With a QS
    # request waiting since before C, C stays behind the QS queue.
    for arrival, order, rel in ((ARRIVAL, [C, A, B, D], C),
                                ([3.0, -1.0, 0.0, 2.0], [A, B, C, D], -1)):
        reqs, inst, ss = queues(NEW, arrival)
        ss.served[D] = 61184
        ss.carry[C] = 1
        rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
        assert waiting(inst) == order and int(ss.rel[0]) == rel


def test_h2q_batch_completion_marks_a_carryover():
    # Algorithm 2, OnBatchCompletion: a prefill chunk of 8192 of C's 32768 tokens ran and C
    # is unfinished -> its session becomes sticky-long with a carryover credit, C moves to
    # QL, H grows by the 8192 executed tokens; a QL slice ran, so the streak resets. A QS
    # slice alone (A, finishing its prompt) adds one to the streak instead.
    reqs, inst, ss = queues(NEW, ARRIVAL, running=(C,))
    inst.b_req[0, 0], inst.b_new[0, 0] = C, 8192
    reqs.computed[C] = 8192
    ss.last_bn[0], ss.streak[0], ss.q[C] = 1, 5, Q_SHORT
    account_last_batch(inst, reqs, ss, 0)
    assert (ss.z[C], ss.carry[C], ss.q[C], ss.served[C], ss.streak[0]) == (1, 1, Q_LONG, 8192, 0)
    inst.b_req[0, 0], inst.b_new[0, 0] = A, 256
    reqs.computed[A], reqs.n_out[A] = 256, 1
    ss.last_bn[0], ss.q[A] = 1, Q_SHORT
    account_last_batch(inst, reqs, ss, 0)
    assert (ss.z[A], ss.streak[0], ss.served[A]) == (0, 1, 256)


def _builder(policy):
    """C runs a chunked prefill (8192 of 32768 done); A (256 new tokens) waits."""
    reqs, inst, ss = queues(NEW, ARRIVAL, running=(C,))
    knobs = EngineParams(num_gpu_blocks=4096, policy=policy).knob_row()[None, :]
    pool = make_pool([4096])
    glob = np.zeros(N_GLOB, dtype=np.int64)
    # give C a slot and the blocks of its 8192 computed tokens
    slot = inst.free_slots[0, inst.ist[0, I_NSLOT] - 1]
    inst.ist[0, I_NSLOT] -= 1
    reqs.slot[C] = slot
    reserve_blocks(pool, inst, reqs, knobs, 0, C, 8192)
    reqs.computed[C] = 8192
    inst.wq[0, :] = -1
    inst.ist[0, I_WHEAD], inst.ist[0, I_WLEN] = 0, 0
    reqs.status[[B, D]] = FINISHED_STOPPED  # out of the way
    wq_push_back(inst, 0, A)
    return reqs, inst, ss, knobs, pool, glob


def test_ranked_builder_puts_a_short_answer_before_a_running_long_prefill():
    # Budget 8192 tokens. H2Q-BR ranks A (QS) before C (QL): A's 256 prompt tokens are
    # scheduled first and C continues with the 8192 - 256 = 7936 left. vLLM v1 order (running
    # first) would give C all 8192 and A nothing this step.
    reqs, inst, ss, knobs, pool, glob = _builder(Policy.H2Q_BR)
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    build_ranked(pool, inst, reqs, knobs, glob, ss, 0, 4.0, POLICY_H2Q_BR)
    n = inst.ist[0, I_BATCH]
    assert [(int(inst.b_req[0, j]), int(inst.b_new[0, j])) for j in range(n)] == \
        [(A, 256), (C, 7936)]


def _give_blocks(pool, inst, reqs, knobs, r, tokens):
    slot = inst.free_slots[0, inst.ist[0, I_NSLOT] - 1]
    inst.ist[0, I_NSLOT] -= 1
    reqs.slot[r] = slot
    assert reserve_blocks(pool, inst, reqs, knobs, 0, r, tokens)
    reqs.computed[r] = tokens


def test_h2q_preempts_by_queue_and_arrival_taking_back_a_scheduled_decode():
    # Two QL requests run: C (arrival 0.0) has 8192 of 32768 prompt tokens done (512 blocks
    # of 16); E (arrival 5.0, a sticky-long session) decodes after a 64-token prompt (4
    # blocks). Eq. 4 serves E first (QL: decode before prefill): its token takes the 5th
    # block, leaving 511 free of 1028. C's chunk is 8192 - 1 = 8191 tokens: blocks for
    # 16383 tokens = 1024, 512 more -- short by one. vLLM's priority policy preempts the
    # largest (priority, arrival): both are QL, E arrived later, so E is preempted although
    # it was scheduled first -- its token is taken back and its 5 blocks freed (516 free) --
    # and C runs its chunk. (Preempting the lowest-ranked unscheduled request would preempt
    # C, the older one, losing its 8192 computed tokens to a later decode.)
    E = 1
    reqs, inst, ss = queues([32768, 64], [0.0, 5.0], running=(E, 0))
    knobs = EngineParams(num_gpu_blocks=1028, policy=Policy.H2Q_BR).knob_row()[None, :]
    pool = make_pool([1028])
    glob = np.zeros(N_GLOB, dtype=np.int64)
    _give_blocks(pool, inst, reqs, knobs, 0, 8192)
    _give_blocks(pool, inst, reqs, knobs, E, 64)
    reqs.n_out[E] = 1
    ss.z[ss.sid[E]] = 1
    inst.wq[0, :] = -1
    inst.ist[0, I_WHEAD], inst.ist[0, I_WLEN] = 0, 0
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    assert running(inst) == [E, 0] and (ss.q[0], ss.q[E]) == (Q_LONG, Q_LONG)
    build_ranked(pool, inst, reqs, knobs, glob, ss, 0, 6.0, POLICY_H2Q_BR)
    n = inst.ist[0, I_BATCH]
    assert [(int(inst.b_req[0, j]), int(inst.b_new[0, j])) for j in range(n)] == [(0, 8191)]
    assert running(inst) == [0] and waiting(inst) == [E]
    assert (reqs.computed[E], reqs.n_preempt[E], reqs.computed[0]) == (0, 1, 8192 + 8191)


def test_h2q_preempts_a_long_request_before_an_older_short_one():
    # C (QL, 8192 of 32768 done) runs; A (QS, 256 tokens) waits and is ranked first. A takes
    # 16 blocks, leaving 484 of 1012 - 512 = 500 free; C's next chunk (8192 - 256 = 7936
    # tokens: blocks for 16128 tokens = 1008, 496 more) is short. The largest (queue,
    # arrival) running is C itself (QL > QS, though C is older): C is preempted, A runs.
    reqs, inst, ss, knobs, pool, glob = _builder(Policy.H2Q_BR)
    knobs = EngineParams(num_gpu_blocks=1012, policy=Policy.H2Q_BR).knob_row()[None, :]
    pool = make_pool([1012])
    inst.nblk[0, reqs.slot[C]] = 0
    assert reserve_blocks(pool, inst, reqs, knobs, 0, C, 8192)
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    build_ranked(pool, inst, reqs, knobs, glob, ss, 0, 4.0, POLICY_H2Q_BR)
    n = inst.ist[0, I_BATCH]
    assert [(int(inst.b_req[0, j]), int(inst.b_new[0, j])) for j in range(n)] == [(A, 256)]
    assert running(inst) == [A] and waiting(inst) == [C] and reqs.computed[C] == 0


def test_h2q_finishes_the_scenario_whose_ranks_used_to_swap_forever():
    # Found by a random search of tests/test_sim_invariants.py's scenarios: on instance 2,
    # requests 2 (73 prompt tokens) and 6 (65 + 11) cannot both hold their blocks (90 of one
    # token); under the old rule (preempt the lowest-ranked unscheduled request) each
    # preempted the other whenever their ranks swapped, and the run never ended. With the
    # (queue, arrival) order the older request keeps its blocks: every request finishes.
    prompt = np.array([63, 27, 73, 69, 63, 48, 65, 16, 43, 80, 11])
    output = np.array([8, 1, 5, 8, 5, 2, 11, 11, 12, 6, 6])
    req = Requests(np.full(11, np.nan), prompt, output, concurrency=5)
    params = EngineParams(num_gpu_blocks=90, policy=Policy.H2Q_BR, max_num_seqs=4,
                          max_num_batched_tokens=585, block_size=1,
                          enable_prefix_caching=False, enable_chunked_prefill=True,
                          long_prefill_token_threshold=7, watermark=0.0, max_model_len=4096)
    res = run_engine(req, AffineStepCost(5e-4, 1e-5, 1e-4), params, num_instances=3,
                     router=Router.LEAST_REQUESTS, max_steps=100_000)
    r = res.reqs
    assert np.all(r.status == FINISHED_STOPPED)
    np.testing.assert_array_equal(r.n_out, output)
    assert r.n_preempt.sum() > 0  # the blocks were contended


def test_a_request_walked_first_that_preempts_itself_lets_the_others_run():
    # X (arrival 5.0, a sticky-long session with a carryover credit: the bounded-release
    # pick, walked first) has 512 of 1,000 prompt tokens done (32 blocks); Y (arrival 1.0,
    # QS) decodes after a 64-token prompt (4 blocks). 10 of 46 blocks are free and X's
    # chunk (488 tokens) needs 31 more: X is the largest (queue, arrival) running -- QL
    # after QS -- so it preempts itself, freeing its 32 blocks, and the walk goes on: Y
    # decodes (its 5th block). An empty step here would leave the instance idle with work.
    X, Y = 0, 1
    reqs, inst, ss = queues([1000, 64], [5.0, 1.0], running=(Y, X))
    knobs = EngineParams(num_gpu_blocks=46, policy=Policy.H2Q_BR).knob_row()[None, :]
    pool = make_pool([46])
    glob = np.zeros(N_GLOB, dtype=np.int64)
    _give_blocks(pool, inst, reqs, knobs, X, 512)
    _give_blocks(pool, inst, reqs, knobs, Y, 64)
    reqs.n_out[Y] = 1
    ss.z[ss.sid[X]], ss.carry[ss.sid[X]] = 1, 1
    inst.wq[0, :] = -1
    inst.ist[0, I_WHEAD], inst.ist[0, I_WLEN] = 0, 0
    rank_queues(inst, reqs, ss, 0, POLICY_H2Q_BR)
    assert running(inst) == [X, Y] and int(ss.rel[0]) == X
    build_ranked(pool, inst, reqs, knobs, glob, ss, 0, 6.0, POLICY_H2Q_BR)
    n = inst.ist[0, I_BATCH]
    assert [(int(inst.b_req[0, j]), int(inst.b_new[0, j])) for j in range(n)] == [(Y, 1)]
    assert running(inst) == [Y] and waiting(inst) == [X] and reqs.computed[X] == 0
