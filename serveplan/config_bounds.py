"""The bounds and validators every config model shares: frozen models, upper bounds on what
the simulator preallocates, and validators whose errors say why a value is refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ----------------------------------------------------------------------------- upper bounds
# The simulator preallocates its state from these values (per instance, per request slot,
# per KV block, per request), so each has an upper bound far above real use and far below
# an allocation of GiBs; the error says why. (Measured on Llama-3.1-8B / H100: ~1.4 MiB
# per instance, ~300 bytes per request.)
MAX_GPUS = 1024
"""GPUs of one instance (tp, pp, ep, dp) and the budget of ``serveplan search``."""
MAX_INSTANCES = 1024
"""Instances of one pool (``count`` / ``num_instances``)."""
MAX_SEQS = 16384
"""Requests an instance runs at once (``max_num_seqs``, ``prefill_hold``)."""
MAX_TOKENS = 1 << 24
"""Tokens of one request or one step (lengths, ``max_model_len``, token budgets)."""
MAX_BLOCKS = 1 << 22
"""KV blocks of one instance (``num_gpu_blocks``)."""
MAX_REQUESTS = 1 << 20
"""Requests of one run (``num_requests``, clients of a closed loop)."""


def at_most(limit: int, why: str) -> AfterValidator:
    """Validator of an upper bound whose error gives the bound and why (the field comes
    from the error's location, :mod:`serveplan.errors`)."""

    def check(value):
        if value is not None and value > limit:
            raise ValueError(f"must be at most {limit:,} ({why}), got {value:,}")
        return value

    return AfterValidator(check)


def at_least(limit: float, why: str) -> AfterValidator:
    """Validator of a lower bound (above a ``gt=0``) whose error gives the bound and why."""

    def check(value):
        if value is not None and value < limit:
            raise ValueError(f"must be at least {limit:g} ({why}), got {value:g}")
        return value

    return AfterValidator(check)


Gpus = Annotated[int, at_most(MAX_GPUS, "GPUs; serveplan plans up to 1,024")]
Instances = Annotated[int, at_most(MAX_INSTANCES, "the simulator preallocates each "
                                   "instance's KV block tables, ~1.4 MiB for an 8B model on "
                                   "an H100")]
Seqs = Annotated[int, at_most(MAX_SEQS, "each request slot preallocates a block table; no "
                              "engine runs more requests at once")]
Tokens = Annotated[int, at_most(MAX_TOKENS, "tokens, above the longest context of any model, "
                                "10M")]
Blocks = Annotated[int, at_most(MAX_BLOCKS, "blocks are preallocated per instance, ~70 bytes "
                                "each; 4M blocks of 16 tokens outsize any GPU's memory")]
Requests = Annotated[int, at_most(MAX_REQUESTS, "the simulator keeps ~300 bytes per request; "
                                  "runs of up to a million requests")]
SchedulerSteps = Annotated[int, at_most(1024, "decode steps per scheduling round; vLLM's "
                                        "multi-step scheduling used 8 to 16")]


__all__ = ["MAX_BLOCKS", "MAX_GPUS", "MAX_INSTANCES", "MAX_REQUESTS", "MAX_SEQS", "MAX_TOKENS",
           "Blocks", "Gpus", "Instances", "Requests", "SchedulerSteps", "Seqs", "Tokens",
           "_Frozen", "at_least", "at_most"]
