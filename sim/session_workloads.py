"""Session workload generators: multi-turn chat, agentic coding, Frontier's Table 7 templates.

Each returns :class:`~serveplan.sim.sessions.SessionRounds` (per round: new prompt tokens,
output tokens, kind, tool delay; per session: its arrival), drawn from an explicit seed;
:func:`~serveplan.sim.sessions.session_requests` turns them into request rows. Sessions
arrive as a Poisson process of ``rate`` sessions per second.

* :func:`chat_sessions` -- ``turns`` user turns per session; each turn adds a lognormal
  user message (median ``prompt_tokens``) to the growing context and gets a lognormal reply
  (median ``output_tokens``), every turn visible (kind ``answer``); the user thinks an
  exponential time (mean ``think_time_s``) between turns.
* :func:`agentic_sessions` -- a coding agent: a long-tailed number of rounds (1 + a
  lognormal of median ``rounds_median - 1`` and sigma ``rounds_sigma``, rounded, at most
  ``rounds_max``), each with log-uniform new prefill in ``[prefill_min, prefill_max]``
  (tool observations, files read) and ``decode_tokens`` output; tool delays exponential of
  mean ``tool_delay_s``; the last round answers, the others think. A session stops adding
  rounds before its context would pass ``max_context`` tokens.
* :func:`frontier_sessions` -- Frontier Table 7 (Appendix B.1): five rounds, four hidden
  planning rounds and one answer round, the Short or the Heavy-tail template, Heavy tail
  with probability ``heavy_fraction``; tool delays fixed at ``tool_delay_s`` (the paper
  gives none).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._checks import SeedLike, make_rng
from .arrivals import PoissonArrivals
from .requests import Requests
from .session_state import KIND_ANSWER, KIND_THINKING
from .session_trace import read_session_trace
from .sessions import HASH_BLOCKS_PER_ENGINE_BLOCK, SessionRounds, session_requests

FRONTIER_TEMPLATES = {
    "short": ((4096, 1024, 512, 512, 256), (96, 64, 64, 64, 192)),
    "heavy": ((32768, 16384, 8192, 4096, 256), (96, 64, 64, 64, 192)),
}
"""Frontier Table 7: per round (new prompt tokens, decode tokens); round 5 answers."""


def _arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    return PoissonArrivals(rate).sample(n, rng)


def _kinds(counts: np.ndarray) -> np.ndarray:
    """Thinking rounds, each session's last round an answer."""
    kind = np.full(int(counts.sum()), KIND_THINKING, dtype=np.int8)
    kind[np.cumsum(counts) - 1] = KIND_ANSWER
    return kind


def _no_first_delay(session: np.ndarray, delay: np.ndarray) -> np.ndarray:
    """``delay`` with each session's first round at 0 (nothing precedes it)."""
    out = np.asarray(delay, dtype=np.float64).copy()
    out[np.r_[0, np.flatnonzero(np.diff(session)) + 1][: len(out)]] = 0.0
    return out


def _lognormal_tokens(rng, median: float, sigma: float, size: int) -> np.ndarray:
    return np.maximum(np.rint(median * np.exp(sigma * rng.standard_normal(size))), 1).astype(
        np.int64)


def chat_sessions(num_sessions: int, rate: float, seed: SeedLike = None, *, turns: int = 5,
                  prompt_tokens: float = 256, output_tokens: float = 256, sigma: float = 0.5,
                  think_time_s: float = 10.0) -> SessionRounds:
    """Multi-turn chat (module docstring)."""
    rng_arr, rng_in, rng_out, rng_think = make_rng(seed).spawn(4)
    m = num_sessions * turns
    session = np.repeat(np.arange(num_sessions), turns)
    delay = rng_think.exponential(think_time_s, m) if think_time_s > 0 else np.zeros(m)
    return SessionRounds(session=session,
                         new_tokens=_lognormal_tokens(rng_in, prompt_tokens, sigma, m),
                         output_tokens=_lognormal_tokens(rng_out, output_tokens, sigma, m),
                         kind=np.full(m, KIND_ANSWER, dtype=np.int8),
                         delay_s=_no_first_delay(session, delay),
                         arrival_s=_arrivals(num_sessions, rate, rng_arr))


def _agentic_rounds(rng, n: int, rounds_median: float, rounds_sigma: float,
                    rounds_max: int) -> np.ndarray:
    extra = np.rint((rounds_median - 1) * np.exp(rounds_sigma * rng.standard_normal(n)))
    return np.minimum(1 + extra.astype(np.int64), rounds_max)


def _cap_context(session, new, out, max_context: int) -> np.ndarray:
    """Rounds to keep: a session's rounds up to the last whose prompt fits ``max_context``."""
    step = new + out
    csum = np.cumsum(step)
    start = np.r_[0, np.flatnonzero(session[1:] != session[:-1]) + 1]
    before = np.repeat(np.r_[0, csum][start], np.diff(np.r_[start, len(session)]))
    prompt = csum - step - before + new
    first = np.zeros(len(session), dtype=bool)
    first[start] = True
    return first | (prompt + out <= max_context)


def agentic_sessions(num_sessions: int, rate: float, seed: SeedLike = None, *,
                     rounds_median: float = 4, rounds_sigma: float = 0.8, rounds_max: int = 32,
                     prefill_min: int = 4096, prefill_max: int = 32768,
                     decode_tokens: int = 200, tool_delay_s: float = 2.0,
                     max_context: int = 131072) -> SessionRounds:
    """Agentic coding sessions (module docstring)."""
    rng_arr, rng_rounds, rng_in, rng_tool = make_rng(seed).spawn(4)
    counts = _agentic_rounds(rng_rounds, num_sessions, rounds_median, rounds_sigma, rounds_max)
    m = int(counts.sum())
    session = np.repeat(np.arange(num_sessions), counts)
    lo, hi = np.log(prefill_min), np.log(prefill_max)
    new = np.rint(np.exp(rng_in.uniform(lo, hi, m))).astype(np.int64)
    out = np.full(m, decode_tokens, dtype=np.int64)
    delay = rng_tool.exponential(tool_delay_s, m) if tool_delay_s > 0 else np.zeros(m)
    keep = _cap_context(session, new, out, max_context)
    session, new, out, delay = session[keep], new[keep], out[keep], delay[keep]
    return SessionRounds(session=session, new_tokens=new, output_tokens=out,
                         kind=_kinds(np.bincount(session, minlength=num_sessions)),
                         delay_s=_no_first_delay(session, delay),
                         arrival_s=_arrivals(num_sessions, rate, rng_arr))


def frontier_sessions(num_sessions: int, rate: float, seed: SeedLike = None, *,
                      heavy_fraction: float = 0.1, tool_delay_s: float = 1.0) -> SessionRounds:
    """Frontier Table 7 sessions (module docstring)."""
    if not 0.0 <= heavy_fraction <= 1.0:
        raise ValueError(f"heavy_fraction must be in [0, 1], got {heavy_fraction!r}")
    rng_arr, rng_kind = make_rng(seed).spawn(2)
    heavy = rng_kind.random(num_sessions) < heavy_fraction
    tables = {k: np.array(v, dtype=np.int64) for k, v in FRONTIER_TEMPLATES.items()}
    new = np.where(heavy[:, None], tables["heavy"][0], tables["short"][0]).ravel()
    out = np.where(heavy[:, None], tables["heavy"][1], tables["short"][1]).ravel()
    rounds = tables["short"].shape[1]
    session = np.repeat(np.arange(num_sessions), rounds)
    return SessionRounds(session=session, new_tokens=new,
                         output_tokens=out, kind=_kinds(np.full(num_sessions, rounds)),
                         delay_s=_no_first_delay(session, np.full(len(session), tool_delay_s)),
                         arrival_s=_arrivals(num_sessions, rate, rng_arr))


def session_is_heavy(rounds: SessionRounds) -> np.ndarray:
    """Per session of :func:`frontier_sessions`: whether it drew the Heavy-tail template."""
    first = np.r_[0, np.flatnonzero(np.diff(rounds.session)) + 1]
    return rounds.new_tokens[first] == FRONTIER_TEMPLATES["heavy"][0][0]


_GENERATORS = {"chat": chat_sessions, "agentic": agentic_sessions,
               "frontier": frontier_sessions}


def session_rounds(spec, seed: SeedLike = 0) -> SessionRounds:
    """The rounds of a ``kind: sessions`` workload config (:mod:`serveplan.sessions_config`):
    generated, or read from its trace (session arrivals redrawn at ``rate`` if given)."""
    if spec.generator is not None:
        params = spec.generator.model_dump(exclude={"type"})
        return _GENERATORS[spec.generator.type](spec.num_sessions or 100, spec.rate, seed,
                                                **params)
    rounds = read_session_trace(spec.path, limit=spec.num_sessions)
    if spec.rate is None:
        return rounds
    arrival = _arrivals(len(rounds.arrival_s), spec.rate, make_rng(seed))
    return replace(rounds, arrival_s=arrival)


def build_session_requests(spec, seed: SeedLike = 0, *, block_size: int = 16) -> Requests:
    """Request rows of a ``kind: sessions`` workload config, hashed for the engine's
    ``block_size`` (:data:`~serveplan.sim.sessions.HASH_BLOCKS_PER_ENGINE_BLOCK`)."""
    return session_requests(session_rounds(spec, seed),
                            hash_block=HASH_BLOCKS_PER_ENGINE_BLOCK * block_size)


__all__ = ["FRONTIER_TEMPLATES", "agentic_sessions", "build_session_requests", "chat_sessions",
           "frontier_sessions", "session_is_heavy", "session_rounds"]
