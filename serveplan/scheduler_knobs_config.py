"""Config of the session-aware schedulers' knobs (``scheduler_knobs`` of an instance or pool).

Read with ``scheduler: skip-join-mlfq`` or ``scheduler: h2q-br``
(:mod:`serveplan.sim.session_policies`); defaults and their sources:
:class:`serveplan.sim.sessions.SchedulerKnobs`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from serveplan.sim.sessions import SchedulerKnobs

_DEFAULT = SchedulerKnobs()
_MAX = 1 << 24


def _at_most(value: int) -> int:
    if value > _MAX:
        raise ValueError(f"must be at most {_MAX:,} (tokens or slices; above any context)")
    return value


Knob = Annotated[int, Field(ge=1), AfterValidator(_at_most)]


class SchedulerKnobsConfig(BaseModel):
    """Skip-join MLFQ's queues and H2Q-BR's Eq. 3 / bounded-release constants."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mlfq_quantum_tokens: Knob = Field(_DEFAULT.mlfq_quantum_tokens, description=(
        "Skip-join MLFQ: quantum of the highest queue, tokens (doubling per queue)."))
    mlfq_levels: Annotated[int, Field(ge=1, le=40)] = Field(
        _DEFAULT.mlfq_levels, description="Skip-join MLFQ: number of queues.")
    h2q_service_cap: Knob = Field(_DEFAULT.h2q_service_cap, description=(
        "H2Q-BR C: a session served more new tokens goes to the long queue."))
    h2q_long_round: Knob = Field(_DEFAULT.h2q_long_round, description=(
        "H2Q-BR L: a round with more new prompt tokens goes to the long queue."))
    h2q_liveness: Knob = Field(_DEFAULT.h2q_liveness, description=(
        "H2Q-BR B: short-queue slices in a row before the oldest long one is forced."))

    def knobs(self) -> SchedulerKnobs:
        return SchedulerKnobs(**self.model_dump())


__all__ = ["SchedulerKnobsConfig"]
