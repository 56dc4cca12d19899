"""Run a deployment given as role pools: build the arrays, run the one loop, return them.

:func:`run_pools` is the Python entry point of every simulation: a colocated deployment is
one pool of role ``COLOCATED``; a disaggregated one a ``PREFILL`` pool followed by a
``DECODE`` pool and a :class:`~serveplan.sim.pools.Handoff`. It validates, lays the pools'
instances out in one structure of arrays (prefill instances first), builds the cost tables,
the request views and the handoff state, runs :func:`serveplan.sim.loop.run_loop` and
returns a :class:`RunResult` of plain arrays (:mod:`serveplan.sim.results` turns it into a
Dataset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serveplan.kernels import jit_mode

from . import _jitcache
from .afd_cost import AFDStepCost
from .colocated_sibyl import SibylOptions, colocated_router_state
from .costs import FittedThroughputCost, decode_rate, make_cost_tables, prefill_seconds
from .cpu_tier import cpu_pool_for
from .handoff import (
    N_GF,
    N_GI,
    Q_CHUNK,
    Q_DBASE,
    Q_DELAY,
    Q_LATE,
    Q_LAYERWISE,
    Q_NDELAY,
    Q_RECOMPUTE,
    W_LAYER_FRAC,
    make_handoff_state,
)
from .kvcache import make_pool
from .kvlink import KVLink
from .lifecycle import World
from .loop import run_loop
from .params import check_capacity, clip_lengths
from .pd_router import make_router_state
from .pools import FIRST_TOKEN_SOURCES, ROLE_NAMES, Handoff, Role, loop_role
from .pyhook import run_with_python_policy
from .recorder import make_rec
from .runtime import F_ON, FrontEnd, make_front, set_up_all, to_client_times
from .session_state import make_sessions
from .sessions import SchedulerKnobs
from .specdecode import check_spec_pools
from .speculative import draft_costs, spec_blocks_needed, spec_knobs, spec_tables
from .state import (
    ERR_MAX_STEPS,
    ERR_STALL,
    FINISHED_IGNORED,
    FINISHED_LENGTH_CAPPED,
    FINISHED_STOPPED,
    G_CAP,
    G_CONCURRENCY,
    G_DONE,
    G_ENTRY_HI,
    G_ENTRY_LO,
    G_ERROR,
    G_HASH_BLOCK,
    G_MAX_STEPS,
    G_NOPEN,
    G_ROUTER,
    K_COST,
    K_DP_TOKENS,
    K_GROUP,
    K_GROUP_SIZE,
    K_POLICY,
    K_PREFIX,
    K_ROLE,
    K_SLOTS,
    K_SPEC_LOOKAHEAD,
    K_SPEC_TOKENS,
    N_GLOB,
    POLICY_PYTHON,
    Policy,
    make_inst,
    make_reqs,
)
from .transfer import make_xfer

ENTRY_ROUTERS = {"round-robin": 0, "least-outstanding-tokens": 1, "least-loaded": 1,
                 "least-requests": 2, "sibyl": 4}
"""Entry router name -> code (``least-loaded`` is a prefill pool's name for the fewest
outstanding tokens)."""
ASSIGNMENTS = ("early", "late")
PREFILL_STAGES = ("engine", "delay")
ARCHITECTURES = {(Role.COLOCATED,): "colocated", (Role.PREFILL, Role.DECODE): "pd",
                 (Role.PREFILL, Role.ATTENTION): "afd"}
SESSION_POLICIES = (Policy.SKIP_JOIN_MLFQ, Policy.H2Q_BR)


@dataclass(frozen=True, eq=False)
class RunResult:
    """Raw arrays of one run (see :mod:`serveplan.sim.results` for the Dataset)."""

    world: World
    pools: tuple
    handoff: Handoff | None
    pool_of: np.ndarray  # pool index of each instance
    output_requested: np.ndarray  # output_len before clipping to max_model_len
    ignored: np.ndarray
    router: str
    sessions: object | None = None  # the SessionPlan of a session workload

    @property
    def architecture(self) -> str:
        return ARCHITECTURES[tuple(p.role for p in self.pools)]

    @property
    def disaggregated(self) -> bool:
        """Requests cross from a prefill pool to a decode (or attention) pool."""
        return self.architecture != "colocated"

    @property
    def roles(self) -> np.ndarray:
        return np.array([ROLE_NAMES[self.pools[k].role] for k in self.pool_of])

    @property
    def gpus(self) -> np.ndarray:
        return np.array([self.pools[k].gpu_name for k in self.pool_of])

    @property
    def num_instances(self) -> int:
        return len(self.pool_of)

    @property
    def num_steps(self) -> int:
        return int(self.world.rec.meta[2])

    def __getattr__(self, name):
        """The world's state (``views``, ``inst``, ``pool``, ``knobs``, ``glob``, ``rec``,
        ``costs``, ``hs``, ``rt``, ``x``) as attributes of the result."""
        world = self.__dict__.get("world")
        if world is not None and name in World._fields:
            return getattr(world, name)
        raise AttributeError(name)

    @property
    def reqs(self):
        """The requests as their entry instances (colocated or prefill) see them."""
        return self.world.views[0]

    p_reqs = reqs  # the prefill view of a disaggregated run

    @property
    def d_reqs(self):
        """The requests as their decode instances see them (a disaggregated run)."""
        return self.world.views[1]

    @property
    def pd(self):
        """The handoff state (:data:`serveplan.sim.handoff.HandoffState`)."""
        return self.world.hs

    @property
    def first_token_times(self) -> np.ndarray:
        """Each request's first token as the client sees it: the entry instance's, or for
        a request that reached a decode instance that instance's (its prefill's token unless
        ``Handoff.first_token`` is ``decode``)."""
        first = self.reqs.t_first
        if not self.disaggregated:
            return first
        n = len(first)
        return np.where(np.isfinite(self.pd.t_join[:n]), self.d_reqs.t_first[:n], first)

    @property
    def params(self):
        """Engine knobs of the first pool."""
        return self.pools[0].params


def _check_roles(pools, handoff: Handoff | None) -> str:
    roles = tuple(p.role for p in pools)
    check_spec_pools(pools)
    if roles not in ARCHITECTURES:
        names = ", ".join(ROLE_NAMES[r] for r in roles) or "none"
        raise ValueError(f"pools with roles [{names}] are not a deployment serveplan can run: "
                         "give one colocated pool, or a prefill pool followed by a decode pool")
    arch = ARCHITECTURES[roles]
    if (roles[-1] == Role.ATTENTION) != isinstance(pools[-1].cost, AFDStepCost):
        raise ValueError("an attention pool is priced by an AFDStepCost (its FFN pool), and "
                         "only an attention pool is")
    if arch != "colocated":
        h = handoff or Handoff()
        if h.assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment given an invalid value: {h.assignment!r} "
                             f"(valid: {', '.join(ASSIGNMENTS)})")
        if h.prefill_stage not in PREFILL_STAGES:
            raise ValueError(f"prefill_stage given an invalid value: {h.prefill_stage!r} "
                             f"(valid: {', '.join(PREFILL_STAGES)})")
        if h.first_token not in FIRST_TOKEN_SOURCES:
            raise ValueError(f"first_token given an invalid value: {h.first_token!r} "
                             f"(valid: {', '.join(FIRST_TOKEN_SOURCES)})")
        if h.layerwise and h.assignment != "early":
            raise ValueError("layer-wise transfer needs early assignment (the decode instance "
                             "must be known when the prefill starts)")
        if isinstance(pools[0].cost, FittedThroughputCost):
            raise ValueError("the fitted-throughput cost prices decode steps only; give the "
                             "prefill pool a cost oracle or an affine step cost")
    elif any(isinstance(p.cost, FittedThroughputCost) for p in pools):
        raise ValueError("the fitted-throughput cost prices decode pools only")
    for p in pools:
        if p.role == Role.DECODE and p.params.policy in SESSION_POLICIES:
            raise ValueError(f"scheduler {p.params.policy.name.lower().replace('_', '-')} "
                             "orders prefills by session history; give it to the colocated "
                             "or prefill pool, not the decode pool")
    return arch


@dataclass
class _Layout:
    """Instances of the run, pool by pool: what each needs before the arrays exist."""

    pool_of: np.ndarray
    slots: np.ndarray
    blocks: np.ndarray
    max_blocks: int
    queue_cap: int


def _layout(pools, n, prompt, output, ignored, delay, hold) -> _Layout:
    pool_of, slots, blocks = [], [], []
    max_blocks, queue_cap = 1, 1
    for k, spec in enumerate(pools):
        prm = spec.params
        if spec.role == Role.PREFILL:
            if delay:
                continue
            need = check_capacity(prompt, np.ones_like(prompt), ignored, prm)
            n_slots, cap = prm.max_num_seqs + hold, n + 1
        elif loop_role(spec.role) == Role.DECODE:
            need = check_capacity(prompt, output, ignored, prm)
            n_slots, cap = prm.max_num_seqs, prm.max_num_seqs + 1
        else:
            need = check_capacity(prompt, output, ignored, prm)
            n_slots, cap = prm.max_num_seqs, n + 1
        if spec.speculative is not None:  # verify and lookahead slots past the last token
            need = max(need, spec_blocks_needed(spec.speculative, prm, prompt, output,
                                                ignored))
        m = int(spec.num_instances)
        pool_of += [k] * m
        slots += [n_slots] * m
        blocks += [prm.num_gpu_blocks] * m
        max_blocks, queue_cap = max(max_blocks, need), max(queue_cap, cap)
    return _Layout(np.array(pool_of, dtype=np.int64), np.array(slots, dtype=np.int64),
                   np.array(blocks, dtype=np.int64), max_blocks, queue_cap)


def _lockstep_groups(pools, pool_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each instance's lockstep group: its first instance and its size
    (:attr:`~serveplan.sim.pools.PoolSpec.lockstep`; consecutive instances of a pool)."""
    index = np.arange(len(pool_of), dtype=np.int64)
    size = np.array([int(pools[k].lockstep) for k in pool_of], dtype=np.int64)
    start = np.searchsorted(pool_of, pool_of)  # the pool's first instance (pools in order)
    return start + (index - start) // size * size, size


def _knob_table(pools, lay: _Layout, policy) -> np.ndarray:
    knobs = np.stack([pools[k].params.knob_row() for k in lay.pool_of])
    knobs[:, K_ROLE] = [int(loop_role(pools[k].role)) for k in lay.pool_of]
    knobs[:, K_COST] = lay.pool_of
    knobs[:, K_SLOTS] = lay.slots
    knobs[:, K_SPEC_TOKENS], knobs[:, K_SPEC_LOOKAHEAD] = spec_knobs(pools, lay.pool_of)
    knobs[:, K_GROUP], knobs[:, K_GROUP_SIZE] = _lockstep_groups(pools, lay.pool_of)
    knobs[:, K_DP_TOKENS] = [int(pools[k].dp_tokens) for k in lay.pool_of]
    decode = knobs[:, K_ROLE] == int(Role.DECODE)
    knobs[decode, K_PREFIX] = 0  # decode instances receive KV; they do not share prefixes
    if policy is not None:
        knobs[:, K_POLICY] = POLICY_PYTHON
    return knobs


def _views(requests, n, prompt, output, ignored, arrival, pd: bool):
    hashed = requests.hash_ids is not None
    entry = make_reqs(arrival, prompt, np.ones(n, dtype=np.int64) if pd else output,
                      requests.hash_ids if hashed else None,
                      requests.hash_offsets if hashed else None)
    entry.status[ignored] = FINISHED_IGNORED
    if not pd:
        empty = np.zeros(0, dtype=np.int64)
        return (entry, make_reqs(np.zeros(0), empty, empty))
    decode = make_reqs(arrival, prompt, output)
    decode.status[ignored] = FINISHED_IGNORED
    return (entry, decode)


def _delay_order(prefill_cost, arrival, prompt, ignored, chunk, n):
    """SIBYL's delay stage: each live request's prefill end, and the order they occur in."""
    t_end = np.full(max(n, 1), np.inf)
    order_out = np.zeros(max(n, 1), dtype=np.int64)
    live = np.flatnonzero(~ignored)
    if not (n and live.size):
        return t_end, order_out, 0
    t_end[live] = arrival[live] + prefill_seconds(prefill_cost, prompt[live], chunk)
    order = live[np.argsort(t_end[live], kind="stable")]
    order_out[: len(order)] = order
    return t_end, order_out, len(order)


def _handoff_state(pools, h: Handoff, n, arrival, prompt, ignored):
    pre, dec = pools
    link = h.link if h.link is not None else KVLink()
    delay = h.prefill_stage == "delay"
    n_pi = 0 if delay else int(pre.num_instances)
    n_d = int(dec.num_instances)
    chunk = int(pre.params.max_num_batched_tokens)
    t_pre = np.zeros(chunk + 1)
    t_pre[1:] = prefill_seconds(pre.cost, np.arange(1, chunk + 1), chunk)
    t_end, order, n_delay = (_delay_order(pre.cost, arrival, prompt, ignored, chunk, n)
                             if delay else (None, None, 0))
    p_node, d_node = link.nodes(1 if delay else n_pi, n_d)  # delay: as one prefill node
    gi = np.zeros(N_GI, dtype=np.int64)
    gi[Q_LATE] = int(h.assignment == "late")
    gi[Q_LAYERWISE] = int(bool(h.layerwise))
    gi[Q_RECOMPUTE] = int(h.first_token == "recompute")
    gi[Q_DELAY] = int(delay)
    gi[Q_NDELAY] = n_delay
    gi[Q_CHUNK] = chunk
    gi[Q_DBASE] = n_pi
    gf = np.zeros(N_GF)
    gf[W_LAYER_FRAC] = 1.0 / link.num_layers
    return make_handoff_state(n, n_pi, n_d, gi=gi, gf=gf, t_delay_end=t_end, dorder=order,
                              p_node=p_node, d_node=d_node, link=link.table(), t_pre=t_pre)


def _router_state(pools, h: Handoff | None, n, prompt, ignored, code=0, entry_sibyl=None):
    if h is None:  # colocated: no decode router; SIBYL's state if it is the entry router
        opts = (entry_sibyl or SibylOptions()) if code == ENTRY_ROUTERS["sibyl"] else None
        return colocated_router_state(pools[0], n, prompt[~ignored], opts)
    dec = pools[1]
    n_d = int(dec.num_instances)
    cap_p = h.pending_capacity if h.pending_capacity is not None else \
        min(max(n, 1), max(256, 8 * -(-n // n_d)))
    live_prompt = prompt[~ignored]
    return make_router_state(h.router, n, n_d, active_capacity=dec.params.max_num_seqs,
                             pending_capacity=cap_p,
                             max_length=h.sibyl_max_length or dec.params.max_model_len,
                             delta=h.sibyl_delta, alpha=h.sibyl_alpha, prior=h.sibyl_prior,
                             tie_break=h.tie_break, seed=h.tie_seed,
                             v_sys_init=decode_rate(dec.cost, float(live_prompt.mean())
                                                    if live_prompt.size else 1.0))


def _glob(requests, router_code, lay: _Layout, conc, cap, max_steps, lay_open) -> np.ndarray:
    glob = np.zeros(N_GLOB, dtype=np.int64)
    glob[G_ROUTER] = router_code
    glob[G_CONCURRENCY] = conc
    glob[G_CAP] = cap
    glob[G_HASH_BLOCK] = requests.hash_block_size if requests.hash_ids is not None else 0
    glob[G_NOPEN] = lay_open
    glob[G_MAX_STEPS] = np.iinfo(np.int64).max if max_steps is None else int(max_steps)
    glob[G_ENTRY_LO] = 0  # the first pool's instances (none with the delay stage)
    glob[G_ENTRY_HI] = int((lay.pool_of == 0).sum())
    return glob


def _entry_router(router, pd: bool = False) -> int:
    if isinstance(router, str):
        if router not in ENTRY_ROUTERS:
            raise ValueError(f"router given an invalid value: {router!r} "
                             f"(valid: {', '.join(ENTRY_ROUTERS)})")
        router = ENTRY_ROUTERS[router]
    if pd and int(router) == ENTRY_ROUTERS["sibyl"]:
        raise ValueError("router 'sibyl' picks among colocated instances; a prefill/decode "
                         "deployment sets it as the decode router (handoff.router)")
    return int(router)


def _raise_on_error(glob, n, max_steps) -> None:
    if glob[G_ERROR] == ERR_STALL:
        raise ValueError("the simulation stalled: requests wait but no instance can schedule "
                         "them (check num_gpu_blocks and max_num_batched_tokens)")
    if glob[G_ERROR] == ERR_MAX_STEPS:
        raise ValueError(f"stopped after max_steps={max_steps} engine steps with "
                         f"{n - glob[G_DONE]} of {n} requests unfinished")


def run_pools(requests, pools, *, router="round-robin", handoff: Handoff | None = None,
              record_steps: int = 1 << 16, max_steps: int | None = None,
              policy=None, frontend: FrontEnd | None = None,
              scheduler_knobs: SchedulerKnobs | None = None,
              entry_sibyl: SibylOptions | None = None) -> RunResult:
    """Simulate ``requests`` on a deployment given as role pools (module docstring).

    Parameters
    ----------
    requests : serveplan.sim.workload.Requests
        Arrival times (NaN for a closed loop), prompt and output lengths, prefix hash ids.
    pools : sequence of PoolSpec
        ``[colocated]``, ``[prefill, decode]`` or ``[prefill, attention]``.
    router : str or int
        Entry router among the colocated or prefill instances (:data:`ENTRY_ROUTERS`).
    handoff : Handoff, optional
        Decode router, assignment and transfer options of a prefill/decode deployment.
    record_steps : int
        Capacity of the per-step time series (decimated beyond).
    max_steps : int, optional
        Stop with an error after this many engine steps.
    policy : callable, optional
        A Python research scheduler for colocated instances (:mod:`serveplan.sim.pyhook`).
    frontend : FrontEnd, optional
        The API server's request and token work (:mod:`serveplan.sim.runtime`); results
        then report the client's times.
    scheduler_knobs : SchedulerKnobs, optional
        Knobs of the session-aware schedulers (``skip-join-mlfq``, ``h2q-br``).
    entry_sibyl : SibylOptions, optional
        Settings of the ``sibyl`` entry router among colocated instances (default ones).

    Raises
    ------
    ValueError
        On invalid options, a request that can never fit an instance, or a stall.
    """
    _jitcache.refresh()
    pools = tuple(pools)
    pd = _check_roles(pools, handoff) != "colocated"
    h = (handoff or Handoff()) if pd else None
    _check_python_policy(policy, pools, pd)
    code = _entry_router(router, pd)
    world, lay, w = _build_world(requests, pools, h, code, policy, record_steps, max_steps,
                                 frontend, scheduler_knobs or SchedulerKnobs(), entry_sibyl)
    n = len(requests)
    if not jit_mode.STATE.settled:  # compiled for good: nothing to weigh
        jit_mode.prefer_compiled(python_seconds(w, len(pools)))
    if n and policy is None:
        run_loop(world, 0.0)
    elif n:
        run_with_python_policy(world, policy)
    _raise_on_error(world.glob, n, max_steps)
    _client_outcome(world, h, w)
    return RunResult(world=world, pools=pools, handoff=h, pool_of=lay.pool_of,
                     output_requested=w.output_req, ignored=w.ignored, router=str(router),
                     sessions=requests.sessions)


def _client_outcome(world, h: Handoff | None, w) -> None:
    """A finished run's times and statuses as the client sees them: the first token's
    source, the front end's delays, outputs cut short by the context."""
    if h is not None and h.first_token == "decode":
        _first_token_from_decode(world.views[1], world.hs)
    to_client_times(world.fe, world.views, world.hs.t_finish)
    last = world.views[1] if h is not None else world.views[0]
    capped = (last.status == FINISHED_STOPPED) & (w.output < w.output_req)
    last.status[capped] = FINISHED_LENGTH_CAPPED


def _first_token_from_decode(d_reqs, hs) -> None:
    """The decode instance streams a request's first token as the request enters its
    first decode step (``Handoff.first_token``); one-token outputs keep their prefill's."""
    n = len(d_reqs.t_first)
    start = hs.t_dec1[:n]
    moved = np.isfinite(start) & (start > d_reqs.t_first)
    d_reqs.t_first[moved] = start[moved]


def _check_python_policy(policy, pools, pd: bool) -> None:
    if policy is None:
        return
    if pd:
        raise ValueError("a Python policy schedules colocated instances only")
    if any(p.lockstep > 1 for p in pools):
        raise ValueError("a Python policy schedules instances one at a time; it cannot drive "
                         "attention-DP ranks in lockstep (give lockstep 1)")


@dataclass
class _Workload:
    """The requests as the run sees them: lengths clipped to the context, arrival times."""

    prompt: np.ndarray
    output_req: np.ndarray
    output: np.ndarray
    ignored: np.ndarray
    arrival: np.ndarray
    conc: int
    n_open: int  # leading requests with arrival times (the rest are released in the run)
    cap: int  # open-loop sends capped at this many in flight (0: none)


PYTHON_S_PER_OUTPUT_TOKEN, PYTHON_S_PER_REQUEST = 1.2e-5, 1e-3
"""The simulator run as Python (:mod:`serveplan.kernels.interpret`), per output token and
per request of each pool (prompt tokens cost little: a chunked prefill step takes thousands):
an upper envelope of colocated Poisson, closed-loop and many-instance runs of Llama-3.1-8B
measured on a shared 2-core machine (3.5-6.7 s for 1,000-5,000 requests), within 10 % of a
prefill/decode run (bench/results/first_run.md)."""


def python_seconds(w: _Workload, n_pools: int) -> float:
    """Rough seconds the run would take as Python (the constants above)."""
    return n_pools * (PYTHON_S_PER_OUTPUT_TOKEN * float(w.output.sum())
                      + PYTHON_S_PER_REQUEST * len(w.output))


def _workload(requests, pools) -> _Workload:
    n = len(requests)
    prompt = np.asarray(requests.prompt_len, dtype=np.int64)
    output_req = np.asarray(requests.output_len, dtype=np.int64)
    output, ignored = clip_lengths(prompt, output_req, min(p.params.max_model_len for p in pools))
    # a cap above the request count is no cap: clamped, so buffers sized by it stay small
    conc = min(int(requests.concurrency or 0), max(n, 1))
    arrival = np.array(requests.arrival_s, dtype=np.float64)
    if conc:
        arrival[: min(conc, n)] = 0.0
    n_open = min(conc, n) if conc else n
    if requests.sessions is not None:
        n_open = requests.sessions.num_first
    if requests.stages is not None:  # later stages are sent as earlier ones drain
        n_open = int(np.count_nonzero(requests.stages.stage == 0))
    cap = min(int(requests.max_concurrency or 0), max(n, 1))
    return _Workload(prompt, output_req, output, ignored, arrival, conc, n_open, cap)


def _front(w: _Workload, frontend: FrontEnd | None, think: np.ndarray | None = None,
           stages=None, timeout_s: float | None = None):
    """Front-end state (with the closed loop's think times and timeout, a staged load's
    stages); open arrivals (a closed loop's first requests) become the times the engine
    gets them."""
    n = len(w.prompt)
    fe = make_front(frontend, n, max(w.conc, n - w.n_open, w.cap), think if w.conc else None,
                    stages, timeout_s if w.conc else None)
    if fe.terms[F_ON] != 0.0 and n and not w.cap:  # (capped sends go through it as sent)
        n_open = w.n_open
        fe.t_sent[:n_open] = w.arrival[:n_open]
        set_up_all(fe.terms, fe.free_at, fe.t_sent[:n_open],
                   w.prompt[:n_open].astype(np.float64), w.arrival[:n_open])
    return fe


def _pool_ranges(pool_of: np.ndarray, n_pools: int) -> list[tuple[int, int]]:
    """``(first, end)`` instance index of each pool (instances are stacked pool by pool)."""
    return [(int(np.searchsorted(pool_of, k)), int(np.searchsorted(pool_of, k, "right")))
            for k in range(n_pools)]


def _cost_tables(pools, lay: _Layout):
    """The pools' cost rows, then their drafters' (speculative decoding)."""
    drafts = draft_costs(pools)
    spec = spec_tables(pools, len(pools) + len(drafts), len(lay.pool_of),
                       int(lay.slots.max()) if lay.slots.size else 1)
    return make_cost_tables([p.cost for p in pools] + drafts, [p.runtime for p in pools],
                            spec, _pool_ranges(lay.pool_of, len(pools)))


def _build_world(requests, pools, h, code, policy, record_steps, max_steps, frontend=None,
                 knobs: SchedulerKnobs | None = None, entry_sibyl=None):
    """The run's arrays: ``(world, layout, workload)``."""
    pd = h is not None
    n = len(requests)
    w = _workload(requests, pools)
    fe = _front(w, frontend, requests.client_delay_s, requests.stages, requests.timeout_s)
    delay = pd and h.prefill_stage == "delay"
    if delay and (w.conc or w.cap or requests.sessions is not None
                  or requests.stages is not None):
        raise ValueError("the delay prefill stage needs an open-loop workload (arrival "
                         "times), not a closed loop, a concurrency cap, sessions or stages "
                         "that drain")
    hold = int(256 if h is None or h.prefill_hold is None else h.prefill_hold)
    if hold < 0:
        raise ValueError(f"prefill_hold must be >= 0, got {hold!r}")
    lay = _layout(pools, n, w.prompt, w.output, w.ignored, delay, hold)
    hs = (_handoff_state(pools, h, n, w.arrival, w.prompt, w.ignored) if pd
          else make_handoff_state(n, 0, 0))
    n_p = 1 if delay else (int(pools[0].num_instances) if pd else 0)
    world = World(
        pool=make_pool(lay.blocks, cpu_pool_for(pools, lay.pool_of)),
        inst=make_inst(len(lay.pool_of), lay.slots, lay.max_blocks, lay.queue_cap),
        views=_views(requests, n, w.prompt, w.output, w.ignored, w.arrival, pd),
        knobs=_knob_table(pools, lay, policy),
        glob=_glob(requests, code, lay, w.conc, w.cap, max_steps, w.n_open), clock=np.zeros(1),
        rec=make_rec(record_steps), hs=hs,
        costs=_cost_tables(pools, lay),
        rt=_router_state(pools, h, n, w.prompt, w.ignored, code, entry_sibyl),
        x=make_xfer(n if pd else 0, n_p, pools[-1].num_instances if pd else 0), fe=fe,
        ss=make_sessions(n, len(lay.pool_of), w.prompt, requests.sessions,
                         (knobs or SchedulerKnobs()).row(), int(lay.slots.max())))
    return world, lay, w


__all__ = ["ENTRY_ROUTERS", "RunResult", "run_pools"]
