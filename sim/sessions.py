"""Stateful sessions as request rows: :class:`SessionPlan`, :func:`session_requests`, knobs.

A session (an agent's task, a chat) is a chain of rounds. Round ``k`` brings ``new_k`` new
prompt tokens (a tool's observation, the user's next message) and produces ``out_k``
tokens; it is a ``thinking`` round (hidden planning) or an ``answer`` round (visible to the
user; a session's last round is its final answer). Its prompt is the whole history plus its
new tokens (Frontier §3.2, "Agentic Reasoning")::

    prompt_k = sum_{j<k} (new_j + out_j) + new_k

Round ``k >= 1`` is sent ``delay_k`` seconds (the tool call's latency, or a user's think
time) after the client received round ``k - 1``'s last token, and goes to the instance that
served round ``k - 1`` (:mod:`serveplan.sim.session_state`).

Each round is one row of :class:`~serveplan.sim.workload.Requests` (so every per-request
metric applies to it), linked to its session by a :class:`SessionPlan`. Rows
``0 .. S-1`` are the sessions' first rounds sorted by arrival (the loop's open arrivals);
the later rounds follow, by session and round, with NaN arrivals the simulator fills in.

Prefix hashes: all rounds of session ``s`` take their prompt's hash ids from one stream,
``base_s + h`` for hash block ``h`` -- the tokens at a position are the same in every round
of a session --, so the history of round ``k + 1`` hashes exactly as round ``k``'s prompt
and output blocks did and is a prefix-cache hit while it stays cached. Streams of
different sessions never share an id. Any hash block size works (the history is shared
block for block); a coarse one keeps the id arrays small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .requests import Requests
from .session_state import KIND_ANSWER, KIND_THINKING, N_PAR

KINDS = {"thinking": KIND_THINKING, "answer": KIND_ANSWER}
HASH_BLOCKS_PER_ENGINE_BLOCK = 64
"""Session prompts are hashed every ``64 * block_size`` tokens (1,024 for 16-token blocks)."""


@dataclass(frozen=True)
class SchedulerKnobs:
    """Knobs of the session-aware schedulers (:mod:`serveplan.sim.session_policies`).

    ``mlfq_quantum_tokens`` / ``mlfq_levels``: skip-join MLFQ's first quantum (tokens) and
    number of queues; quanta double per queue as in FastServe. 256 is Frontier Table 7's
    answer-round prompt; 8 queues reach 32,768 tokens, its largest round.
    ``h2q_service_cap`` (C), ``h2q_long_round`` (L), ``h2q_liveness`` (B): H2Q-BR's Eq. 3
    service cap and long-round threshold, and the short streak that forces the oldest
    long-queue request. Frontier gives no values; L = 4096 is the smallest that keeps "a
    4096-token short round in QS" (its strict ``l > L``); C = 8192 lies above a Short
    session's total new tokens (6,400) and below a Heavy-tail session's first round; B = 64
    is our choice.
    """

    mlfq_quantum_tokens: int = 256
    mlfq_levels: int = 8
    h2q_service_cap: int = 8192
    h2q_long_round: int = 4096
    h2q_liveness: int = 64

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    def row(self) -> np.ndarray:
        out = np.array([self.mlfq_quantum_tokens, self.mlfq_levels, self.h2q_service_cap,
                        self.h2q_long_round, self.h2q_liveness], dtype=np.int64)
        assert out.size == N_PAR
        return out


@dataclass(frozen=True, eq=False)
class SessionPlan:
    """How request rows form sessions (all arrays per row; see the module docstring).

    Attributes
    ----------
    session, round : int64[n]
        Session index (0 .. ``num_sessions - 1``, by first arrival) and round within it.
    kind : int8[n]
        0 thinking, 1 answer (:data:`KINDS`).
    new_tokens : int64[n]
        The round's new prompt tokens (its prompt minus the history).
    delay_s : float64[n]
        Seconds from the previous round's last token to this round's send (0 for first
        rounds).
    prev, next : int64[n]
        Row of the previous / next round of the session (-1: none).
    names : tuple of str, optional
        Session ids as a trace gave them, by session index.
    """

    session: np.ndarray
    round: np.ndarray
    kind: np.ndarray
    new_tokens: np.ndarray
    delay_s: np.ndarray
    prev: np.ndarray
    next: np.ndarray
    names: tuple | None = None

    @property
    def num_sessions(self) -> int:
        return int(self.session.max()) + 1 if self.session.size else 0

    @property
    def num_first(self) -> int:
        """Rows that are first rounds (the leading ones)."""
        return self.num_sessions

    def check_arrivals(self, arrival_s: np.ndarray) -> None:
        """First rounds: finite, >= 0, sorted; later rounds: NaN (the simulator sends them)."""
        s = self.num_first
        head, tail = arrival_s[:s], arrival_s[s:]
        if not (np.all(np.isfinite(head)) and np.all(head >= 0)):
            raise ValueError("arrival_s of first rounds must be finite and >= 0")
        if s > 1 and np.any(head[1:] < head[:-1]):
            raise ValueError("arrival_s of first rounds must be sorted")
        if not np.all(np.isnan(tail)):
            raise ValueError("arrival_s of later rounds must be NaN; the simulator sends them "
                             "after their tool delay")


@dataclass(frozen=True, eq=False)
class SessionRounds:
    """Rounds as generators and readers produce them: one entry per round, grouped by
    session with rounds in order; ``arrival_s`` per session (any order)."""

    session: np.ndarray
    new_tokens: np.ndarray
    output_tokens: np.ndarray
    kind: np.ndarray
    delay_s: np.ndarray
    arrival_s: np.ndarray
    names: tuple | None = None


def _order(rounds: SessionRounds):
    """``(rank of each session by arrival, round index of each entry, row of each entry)``."""
    sess = np.asarray(rounds.session, dtype=np.int64)
    n_s = len(rounds.arrival_s)
    rank = np.empty(n_s, dtype=np.int64)
    rank[np.argsort(rounds.arrival_s, kind="stable")] = np.arange(n_s)
    m = len(sess)
    start = np.r_[0, np.flatnonzero(sess[1:] != sess[:-1]) + 1]
    rnd = np.arange(m) - np.repeat(start, np.diff(np.r_[start, m]))
    later = np.flatnonzero(rnd > 0)
    row = np.empty(m, dtype=np.int64)
    first = rnd == 0
    row[first] = rank[sess[first]]
    by = later[np.lexsort((rnd[later], rank[sess[later]]))]
    row[by] = n_s + np.arange(len(by))
    return rank, rnd, row


def session_requests(rounds: SessionRounds, *, hash_block: int, warmup: int = 0,
                     timeout_s: float | None = None) -> Requests:
    """The rows of a set of sessions (module docstring), hashed every ``hash_block`` tokens."""
    sess = np.asarray(rounds.session, dtype=np.int64)
    new = np.asarray(rounds.new_tokens, dtype=np.int64)
    out = np.asarray(rounds.output_tokens, dtype=np.int64)
    rank, rnd, row = _order(rounds)
    m = len(sess)
    n_s = len(rounds.arrival_s)
    step = new + out
    csum = np.cumsum(step) - step  # exclusive running sum, restarted per session below
    start = np.flatnonzero(rnd == 0)
    hist = csum - np.repeat(csum[start], np.diff(np.r_[start, m]))
    prompt = np.empty(m, dtype=np.int64)
    prompt[row] = hist + new
    arrival = np.full(m, np.nan)
    first = rnd == 0
    arrival[row[first]] = np.asarray(rounds.arrival_s, dtype=np.float64)[sess[first]]
    s_row = np.empty(m, dtype=np.int64)
    s_row[row] = rank[sess]
    r_row = np.empty(m, dtype=np.int64)
    r_row[row] = rnd
    prev = np.full(m, -1, dtype=np.int64)
    nxt = np.full(m, -1, dtype=np.int64)
    cont = np.flatnonzero(rnd[1:] > 0) + 1  # entries whose predecessor is the entry before
    prev[row[cont]] = row[cont - 1]
    nxt[row[cont - 1]] = row[cont]
    plan = SessionPlan(
        session=s_row, round=r_row, kind=_rows(rounds.kind, row, np.int8),
        new_tokens=_rows(new, row, np.int64),
        delay_s=np.where(r_row > 0, _rows(rounds.delay_s, row, np.float64), 0.0),
        prev=prev, next=nxt, names=_ranked_names(rounds.names, rank))
    ids, off = _stream_hashes(prompt, s_row, n_s, hash_block)
    return Requests(arrival_s=arrival, prompt_len=prompt, output_len=_rows(out, row, np.int64),
                    hash_ids=ids, hash_offsets=off, hash_block_size=hash_block,
                    warmup=warmup, timeout_s=timeout_s, sessions=plan)


def _rows(values, row, dtype) -> np.ndarray:
    out = np.empty(len(row), dtype=dtype)
    out[row] = np.asarray(values, dtype=dtype)
    return out


def _ranked_names(names, rank) -> tuple | None:
    if names is None:
        return None
    out = [""] * len(rank)
    for s, k in enumerate(rank):
        out[k] = names[s]
    return tuple(out)


def _stream_hashes(prompt, session, n_sessions: int, hash_block: int):
    """Hash ids ``base_s + h`` of each row's prompt blocks (module docstring)."""
    blocks = -(-prompt // hash_block)
    longest = np.zeros(max(n_sessions, 1), dtype=np.int64)
    np.maximum.at(longest, session, blocks)
    base = np.cumsum(longest) - longest
    off = np.zeros(len(prompt) + 1, dtype=np.int64)
    np.cumsum(blocks, out=off[1:])
    ids = np.arange(off[-1], dtype=np.int64) - np.repeat(off[:-1] - base[session], blocks)
    return ids, off


def one_round_sessions(requests: Requests, hash_block: int) -> Requests:
    """``requests`` (open loop) as one-round sessions, each an answer round of its own."""
    n = len(requests)
    rounds = SessionRounds(session=np.arange(n), new_tokens=requests.prompt_len,
                           output_tokens=requests.output_len,
                           kind=np.full(n, KIND_ANSWER, dtype=np.int8), delay_s=np.zeros(n),
                           arrival_s=requests.arrival_s)
    return session_requests(rounds, hash_block=hash_block)


__all__ = ["HASH_BLOCKS_PER_ENGINE_BLOCK", "KINDS", "SchedulerKnobs", "SessionPlan",
           "SessionRounds", "one_round_sessions", "session_requests"]
