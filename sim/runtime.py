"""The serving runtime around the GPU step: front end and per-step CPU work (compiled).

Measured end to end, a request's time is more than its GPU steps. serveplan models the rest
in two places:

* :class:`StepRuntime` (per pool) -- what an engine step costs besides the forward pass
  the cost oracle prices: CPU work per step (``cpu_base_s + cpu_per_request_s * requests +
  cpu_per_token_s * tokens``: scheduling, input preparation, output processing) and GPU
  terms per step (``gpu_extra_s``: e.g. the per-layer synchronisation of tensor-parallel
  ranks; ``gpu_per_prefill_token_s`` per prompt token in the step: the engine's prefill
  work beyond the forward pass the oracle prices; ``gpu_per_prefill_step_s`` once per step
  that carries prompt tokens: such steps run outside CUDA graphs, and their per-step work
  the graphs of decode steps hide is paid in full). Without async scheduling the CPU work
  runs between GPU steps (``step = gpu + cpu``); with it the next step's CPU work overlaps
  this step's GPU work (``step = max(gpu, cpu)``).
* :class:`FrontEnd` (per deployment) -- the API servers: a request is tokenized and set up
  (``request_s + prompt_token_s * prompt`` seconds by the first of ``servers`` API servers
  to be free, first come first served) before the engine sees it; each step's tokens are
  detokenized and streamed (``output_s + output_per_token_s * tokens_in_step``) before the
  client sees them. Requests reach the engine in the order they were sent: with one server
  that is how it serves them; with several, one set up sooner than the request before it
  waits for that one (the loop takes arrivals in order) -- at most the difference of their
  set-up times, and only while the servers are busy.

Times inside the loop are engine times (a request's ``arrival`` is when the engine got
it); the front end keeps each request's client send time (``t_sent``) and the output
delays of its first and last tokens, and the run's results report client times
(:func:`to_client_times`): arrival = send, first/last token = engine time + that delay.
(The largest inter-token gap stays the engine's.)
A closed-loop client sends its next request when it has received the last token of the
previous one, after its think time if it has one (``Requests.client_delay_s``: a send with a
think time is an event of its own, from a heap of pending sends ordered by send time); that
request reaches the engine after the front end has processed it, so it becomes an event of
its own too (a FIFO of pending releases, in send order).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from ._jitcache import sim_jit
from .timeheap import heap_next_time, heap_pop, heap_push

# front-end terms: fe.terms[F_*]; F_TIMEOUT > 0: a closed-loop client gives up on a request
# that long after sending it and sends its next one
F_REQUEST, F_PROMPT_TOKEN, F_OUTPUT, F_OUTPUT_PER_TOKEN, F_ON, F_RELEASED, F_TIMEOUT = range(7)
N_F = 7
# ring of pending closed-loop releases, heap of pending sends: fe.gi[R_*]
R_HEAD, R_LEN, S_LEN = range(3)
# per-step runtime terms: costs.rt[c, T_*]
(T_CPU_BASE, T_CPU_PER_REQUEST, T_CPU_PER_TOKEN, T_GPU_EXTRA, T_GPU_PER_PREFILL_TOKEN,
 T_GPU_PER_PREFILL_STEP) = range(6)
N_T = 6

Front = namedtuple("Front", ["terms", "free_at", "gi", "ring_r", "ring_t", "t_sent", "d_first",
                             "d_last", "think", "heap_r", "heap_t", "st_of", "st_offset",
                             "st_first", "st_left", "st_end", "moved_on"])
"""Front-end state: terms (and when it last released a request to the engine), the time
each API server is next free, the ring of pending closed-loop releases, each request's
client send time and the output delays of its first and last tokens; the clients' think
time before each request and the heap of pending sends; a staged load's stages
(:class:`~serveplan.sim.arrivals.StagePlan`: each request's stage and offset, each stage's
first request, requests left and last response so far; empty without stages); which
requests' clients have moved on (timed out, or finished).
A pending send with a negative id ``-(r + 1)`` is request ``r``'s client timeout."""


def _check_nonneg(obj) -> None:
    for name, value in vars(obj).items():
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{type(obj).__name__}.{name} must be a finite number >= 0, "
                             f"got {value!r}")


@dataclass(frozen=True)
class StepRuntime:
    """Per-step work besides the forward pass (seconds); see the module docstring."""

    cpu_base_s: float = 0.0
    cpu_per_request_s: float = 0.0
    cpu_per_token_s: float = 0.0
    gpu_extra_s: float = 0.0
    gpu_per_prefill_token_s: float = 0.0
    gpu_per_prefill_step_s: float = 0.0

    def __post_init__(self) -> None:
        _check_nonneg(self)

    def row(self) -> np.ndarray:
        return np.array([self.cpu_base_s, self.cpu_per_request_s, self.cpu_per_token_s,
                         self.gpu_extra_s, self.gpu_per_prefill_token_s,
                         self.gpu_per_prefill_step_s])


@dataclass(frozen=True)
class FrontEnd:
    """The API servers' per-request and per-token work (seconds) and how many serve the
    deployment; see the module docstring."""

    request_s: float = 0.0
    prompt_token_s: float = 0.0
    output_s: float = 0.0
    output_per_token_s: float = 0.0
    servers: int = 1

    def __post_init__(self) -> None:
        _check_nonneg(self)
        if int(self.servers) != self.servers or self.servers < 1:
            raise ValueError(f"FrontEnd.servers must be a whole number >= 1, "
                             f"got {self.servers!r}")

    @property
    def active(self) -> bool:
        return any(v > 0 for v in (self.request_s, self.prompt_token_s, self.output_s,
                                   self.output_per_token_s))

    def engine_arrivals(self, sent: np.ndarray, prompt: np.ndarray) -> np.ndarray:
        """When the engine gets requests sent at ``sent`` (sorted) (:meth:`serve`)."""
        return self.serve(sent, prompt)[0]

    def serve(self, sent: np.ndarray, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """When the engine gets requests sent at ``sent`` (sorted), and when each API server
        is free after them: each request is set up (``request_s + prompt_token_s * prompt``)
        by the first server free, and reaches the engine once it and every request sent
        before it are set up (:func:`set_up`, the rule the loop applies to each closed-loop
        send)."""
        terms = np.zeros(N_F)
        terms[F_REQUEST], terms[F_PROMPT_TOKEN] = self.request_s, self.prompt_token_s
        terms[F_RELEASED] = -np.inf
        free = np.zeros(int(self.servers))
        sent = np.asarray(sent, dtype=np.float64)
        at = np.empty(len(sent))
        set_up_all(terms, free, sent, np.asarray(prompt, dtype=np.float64), at)
        return at, free


def make_front(front: FrontEnd | None, n_requests: int, concurrency: int,
               think: np.ndarray | None = None, stages=None,
               timeout_s: float | None = None) -> Front:
    """Front-end state for a run (inactive when ``front`` is None or all zero); ``think``:
    each request's client think time (closed loop; None: none); ``stages``: a staged load's
    :class:`~serveplan.sim.arrivals.StagePlan` (None: none); ``timeout_s``: a closed-loop
    client's timeout (None: none)."""
    terms, servers = np.zeros(N_F), 1
    if front is not None and front.active:
        terms[:4] = [front.request_s, front.prompt_token_s, front.output_s,
                     front.output_per_token_s]
        terms[F_ON], servers = 1.0, int(front.servers)
    cap = max(int(concurrency), 1)
    if timeout_s is not None:  # each sent request's timeout waits among the pending sends
        terms[F_TIMEOUT] = timeout_s
        cap += n_requests
    think = np.zeros(n_requests) if think is None else np.array(think, dtype=np.float64)
    if stages is None:
        st_of, st_offset, st_first = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(1,
                                                                                     np.int64)
    else:
        st_of, st_offset, st_first = stages.stage, stages.offset_s, stages.first_index
    return Front(terms=terms, free_at=np.zeros(servers), gi=np.zeros(3, dtype=np.int64),
                 ring_r=np.zeros(cap, dtype=np.int64), ring_t=np.zeros(cap),
                 t_sent=np.full(n_requests, np.nan), d_first=np.zeros(n_requests),
                 d_last=np.zeros(n_requests), think=think,
                 heap_r=np.zeros(cap, dtype=np.int64), heap_t=np.zeros(cap),
                 st_of=st_of, st_offset=st_offset, st_first=st_first,
                 st_left=np.diff(st_first), st_end=np.zeros(len(st_first) - 1),
                 moved_on=np.zeros(n_requests, dtype=np.int8))


@sim_jit
def output_delay(fe, tokens_in_step):
    """Seconds from a step's end until its tokens reach the client."""
    if fe.terms[F_ON] == 0.0:
        return 0.0
    return fe.terms[F_OUTPUT] + fe.terms[F_OUTPUT_PER_TOKEN] * tokens_in_step


@sim_jit
def set_up(terms, free, sent, prompt):
    """A request sent at ``sent`` with ``prompt`` tokens is set up by the first API server
    free (``free``: when each is next free) and reaches the engine once it and every
    request sent before it are set up (``terms[F_RELEASED]``: when the last one did);
    returns that time. One server is a first-come first-served queue,
    ``e_i = max(sent_i, e_{i-1}) + s_i``."""
    server = 0
    for j in range(1, free.shape[0]):
        if free[j] < free[server]:
            server = j
    start = sent if sent > free[server] else free[server]
    free[server] = start + terms[F_REQUEST] + terms[F_PROMPT_TOKEN] * prompt
    at = free[server] if free[server] > terms[F_RELEASED] else terms[F_RELEASED]
    terms[F_RELEASED] = at
    return at


@sim_jit
def set_up_all(terms, free, sent, prompt, at):
    """:func:`set_up` for each request sent at ``sent`` (sorted), in order, into ``at``."""
    for i in range(sent.shape[0]):
        at[i] = set_up(terms, free, sent[i], prompt[i])


@sim_jit
def push_release(fe, r, sent, prompt):
    """The client sends request ``r`` at ``sent``; returns when the engine gets it
    (:func:`set_up`), and the release waits in the ring until then."""
    at = set_up(fe.terms, fe.free_at, sent, prompt)
    cap = fe.ring_r.shape[0]
    k = (fe.gi[R_HEAD] + fe.gi[R_LEN]) % cap
    fe.ring_r[k] = r
    fe.ring_t[k] = at
    fe.gi[R_LEN] += 1
    fe.t_sent[r] = sent
    return at


@sim_jit
def next_release_time(fe):
    if fe.gi[R_LEN] == 0:
        return np.inf
    return fe.ring_t[fe.gi[R_HEAD]]


@sim_jit
def pop_release(fe):
    """The request whose release is due first (remove it from the ring)."""
    h = fe.gi[R_HEAD]
    r = fe.ring_r[h]
    fe.gi[R_HEAD] = (h + 1) % fe.ring_r.shape[0]
    fe.gi[R_LEN] -= 1
    return r


@sim_jit
def push_send(fe, r, at):
    """Request ``r``'s client will send it at ``at`` (after its think time)."""
    heap_push(fe.heap_t, fe.heap_r, fe.gi, S_LEN, at, r)


@sim_jit
def stage_done(fe, r, t_client):
    """A staged load's request ``r`` got its last token at client time ``t_client``: when
    it is the last of its stage, the next stage's requests are sent at their offsets from
    the stage's last response (pending sends)."""
    if fe.st_of.shape[0] == 0:
        return
    s = fe.st_of[r]
    if t_client > fe.st_end[s]:
        fe.st_end[s] = t_client
    fe.st_left[s] -= 1
    if fe.st_left[s] != 0 or s + 1 >= fe.st_left.shape[0]:
        return
    for k in range(fe.st_first[s + 1], fe.st_first[s + 2]):
        push_send(fe, k, fe.st_end[s] + fe.st_offset[k])


@sim_jit
def next_send_time(fe):
    return heap_next_time(fe.heap_t, fe.gi, S_LEN)


@sim_jit
def pop_send(fe):
    """The request whose send is due first (removed from the heap)."""
    return heap_pop(fe.heap_t, fe.heap_r, fe.gi, S_LEN)


def to_client_times(fe: Front, views, t_finish: np.ndarray) -> None:
    """Turn a finished run's engine times into the client's (in place)."""
    if fe.terms[F_ON] == 0.0:
        return
    sent = fe.t_sent
    for reqs in views:
        if reqs.arrival.shape[0] != sent.shape[0]:
            continue
        reqs.arrival[:] = sent
        reqs.t_first[:] += fe.d_first
        reqs.t_last[:] += fe.d_last
        reqs.t_finish[:] += fe.d_last
    t_finish[:] += fe.d_last


@sim_jit
def step_runtime(rt_row, gpu_s, requests, tokens, prefill_tokens, overlap):
    """Wall seconds of a step whose forward pass takes ``gpu_s`` (``prefill_tokens`` of its
    ``tokens`` are prompt tokens)."""
    gpu = gpu_s + rt_row[T_GPU_EXTRA] + rt_row[T_GPU_PER_PREFILL_TOKEN] * prefill_tokens
    if prefill_tokens > 0:
        gpu += rt_row[T_GPU_PER_PREFILL_STEP]
    cpu = rt_row[T_CPU_BASE] + rt_row[T_CPU_PER_REQUEST] * requests + \
        rt_row[T_CPU_PER_TOKEN] * tokens
    if overlap:
        return gpu if gpu > cpu else cpu
    return gpu + cpu


__all__ = ["Front", "FrontEnd", "StepRuntime", "make_front", "next_release_time",
           "next_send_time", "output_delay", "pop_release", "pop_send", "push_release",
           "push_send", "step_runtime", "to_client_times"]
