"""Config of a session workload: ``workload: {kind: sessions, ...}``.

Either a generator or a JSON Lines session trace (:mod:`serveplan.sim.session_trace`)::

    workload:
      kind: sessions
      num_sessions: 200
      rate: 0.5                      # sessions per second (Poisson)
      generator: {type: frontier, heavy_fraction: 0.1, tool_delay_s: 1.0}
      # generator: {type: agentic, rounds_median: 4, prefill_min: 4096, prefill_max: 32768}
      # generator: {type: chat, turns: 5, think_time_s: 10}

    workload:
      kind: sessions
      path: sessions.jsonl           # relative to the YAML file
      rate: 0.5                      # optional: redraw session arrivals (else the file's)

Generators and their distributions: :mod:`serveplan.sim.session_workloads`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, Field, model_validator

from serveplan.pools_config import MAX_TOKENS, Requests, Tokens, _Frozen, at_most

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False), at_most(
    1e7, "seconds; a tool call or a think time longer than ~4 months")]
Median = Annotated[float, Field(gt=0, allow_inf_nan=False), at_most(
    MAX_TOKENS, "tokens, above the longest context of any model, 10M")]


class ChatGenerator(_Frozen):
    """Multi-turn chat: users x turns, growing context, exponential think time."""

    type: Literal["chat"]
    turns: Annotated[int, Field(ge=1), at_most(1024, "turns of one conversation")] = 5
    prompt_tokens: Median = Field(256, description="Median new user tokens per turn.")
    output_tokens: Median = Field(256, description="Median reply tokens per turn.")
    sigma: float = Field(0.5, ge=0, le=3, description="Lognormal sigma of both lengths.")
    think_time_s: Seconds = Field(10.0, description="Mean user think time between turns.")


class AgenticGenerator(_Frozen):
    """Agentic coding: long-tailed rounds, 4k-32k new prefill, ~0.2k decode, tool delays."""

    type: Literal["agentic"]
    rounds_median: float = Field(4.0, ge=1, le=1024)
    rounds_sigma: float = Field(0.8, ge=0, le=3)
    rounds_max: Annotated[int, Field(ge=1), at_most(1024, "rounds of one session")] = 32
    prefill_min: Tokens = Field(4096, ge=1)
    prefill_max: Tokens = Field(32768, ge=1)
    decode_tokens: Tokens = Field(200, ge=1)
    tool_delay_s: Seconds = Field(2.0, description="Mean (exponential) tool-call latency.")
    max_context: Tokens = Field(131072, ge=2, description=(
        "A session stops adding rounds before its context would pass this."))

    @model_validator(mode="after")
    def _range(self):
        if self.prefill_max < self.prefill_min:
            raise ValueError(f"prefill_max ({self.prefill_max}) must be >= prefill_min "
                             f"({self.prefill_min})")
        return self


class FrontierGenerator(_Frozen):
    """Frontier Table 7: Short / Heavy-tail templates of 4 thinking rounds and 1 answer."""

    type: Literal["frontier"]
    heavy_fraction: float = Field(0.1, ge=0, le=1)
    tool_delay_s: Seconds = Field(1.0, description="Fixed tool-call latency between rounds.")


Generator = Annotated[ChatGenerator | AgenticGenerator | FrontierGenerator,
                      Field(discriminator="type")]


class SessionsWorkload(_Frozen):
    """Stateful sessions (docs/sessions.md): a generator, or a session trace ``path``."""

    kind: Literal["sessions"]
    generator: Generator | None = None
    path: str | None = Field(None, validation_alias=AliasChoices("path", "sessions"),
                             description="JSON Lines session trace.")
    num_sessions: Requests | None = Field(None, ge=1, description=(
        "Sessions to generate (default 100), or the first sessions of the trace."))
    rate: float | None = Field(None, gt=0, allow_inf_nan=False, description=(
        "Session arrivals per second (Poisson); a trace keeps its own without it."))

    @model_validator(mode="after")
    def _one_source(self):
        if (self.generator is None) == (self.path is None):
            raise ValueError("give either a generator or a session trace path")
        if self.generator is not None and self.rate is None:
            raise ValueError("a generator needs rate (sessions per second)")
        return self


__all__ = ["AgenticGenerator", "ChatGenerator", "FrontierGenerator", "SessionsWorkload"]
