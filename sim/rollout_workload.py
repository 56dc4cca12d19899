"""An RL rollout batch: ``n`` trajectories released together, a heavy tail of long ones.

A trainer launches a rollout batch at once (``papers/frontier.txt`` §6.4): every
trajectory arrives at ``t = 0``. Prompt lengths come from one distribution; output lengths
from ``output`` for most trajectories and from ``heavy_output`` for a fraction
``heavy_fraction`` of them -- exactly ``round(heavy_fraction * n)`` trajectories, chosen
at random, so the tail's size does not vary between seeds. Prompts, ordinary outputs,
heavy outputs and the choice of the heavy trajectories use independent child streams of
the seed.

Modelled as one decode per trajectory (a single-turn rollout); multi-turn agentic
trajectories with tool calls between turns are not.
"""

from __future__ import annotations

import numpy as np

from .lengths import LengthDist
from .requests import Requests


def rollout_burst(n: int, prompt: LengthDist, output: LengthDist, *,
                  heavy_fraction: float = 0.0, heavy_output: LengthDist | None = None,
                  seed: int = 0) -> Requests:
    """``n`` trajectories arriving at 0 (module docstring). The heavy ones are
    ``heavy_mask(n, heavy_fraction, seed)``."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not 0.0 <= heavy_fraction <= 1.0:
        raise ValueError(f"heavy_fraction must be in [0, 1], got {heavy_fraction!r}")
    if heavy_fraction > 0 and heavy_output is None:
        raise ValueError("heavy_fraction > 0 needs a heavy_output distribution")
    s_prompt, s_out, s_heavy = np.random.SeedSequence(int(seed)).spawn(3)
    prompt_len = prompt.sample(n, np.random.default_rng(s_prompt))
    output_len = output.sample(n, np.random.default_rng(s_out))
    heavy = heavy_mask(n, heavy_fraction, seed)
    if heavy.any():
        output_len[heavy] = heavy_output.sample(int(heavy.sum()), np.random.default_rng(s_heavy))
    return Requests(np.zeros(n), prompt_len, output_len)


def heavy_mask(n: int, heavy_fraction: float, seed: int) -> np.ndarray:
    """Which of ``n`` trajectories are heavy: ``round(heavy_fraction * n)`` of them (the
    seed's fourth child stream)."""
    k = int(round(heavy_fraction * n))
    mask = np.zeros(n, dtype=bool)
    pick = np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(4)[3])
    mask[pick.choice(n, size=k, replace=False)] = True
    return mask


__all__ = ["heavy_mask", "rollout_burst"]
