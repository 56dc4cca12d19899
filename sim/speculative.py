"""Speculative decoding of a pool: its settings, and the tables the compiled loop reads.

vLLM V1's ``speculative_config`` (``method``, ``num_speculative_tokens`` = ``k``): a
drafter proposes ``k`` tokens per decoding request, the target verifies them in one step
of ``k + 1`` query tokens per request, and the request keeps the accepted prefix of the
drafts plus one token sampled by the target (the bonus token). :class:`SpecDecode` holds a
pool's settings; :func:`spec_tables` turns the pools' settings into
:data:`SpecTables`, which ride in the run's cost tables (``costs.spec``); the compiled
steps are in :mod:`serveplan.sim.specdecode`.

Acceptance is a per-position profile ``a_i = P(draft i accepted | drafts 1..i-1 accepted)``
(one rate repeats over every position); the expected accepted drafts of a step verifying
``k`` drafts is ``sum_{i=1..k} prod_{j<=i} a_j`` (:meth:`SpecDecode.expected_accepted`).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

MAX_SPEC_TOKENS = 32
"""Largest ``num_speculative_tokens`` (vLLM's drafters use 1 to ~10)."""
METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model")
"""vLLM's ``speculative_config.method`` values serveplan prices."""
LOOKAHEAD_METHODS = ("eagle", "eagle3", "mtp", "draft_model")
"""Methods whose drafter writes KV: vLLM reserves ``k`` lookahead slots for them
(``Scheduler.num_lookahead_tokens``); ngram reserves none."""

SpecTables = namedtuple("SpecTables", ["rate", "irow", "q", "c", "stats"])
"""Per cost row ``c``: ``rate[c, :k]`` the acceptance profile, ``irow[c]`` = (draft cost
row or -1 for a free drafter, seed); ``q``/``c`` scratch batch arrays for the draft
passes; ``stats[i, ST_*]`` per instance."""
SI_DRAFT_ROW, SI_SEED = range(2)
# per-instance statistics: stats[i, ST_*] -- request-steps verified, drafts verified,
# drafts accepted, tokens emitted by verify steps, GPU seconds of draft and verify passes
ST_VERIFIES, ST_DRAFTED, ST_ACCEPTED, ST_EMITTED, ST_DRAFT_S, ST_VERIFY_S = range(6)
N_ST = 6


@dataclass(frozen=True)
class SpecDecode:
    """A pool's speculative decoding (module docstring).

    Parameters
    ----------
    num_speculative_tokens : int
        Drafts proposed per decoding request and step (``k``, 1..32).
    acceptance : float or sequence of float
        ``a_1..a_k`` in [0, 1] (conditional acceptance per position), or one rate for all.
    draft_cost : CostOracle or AffineStepCost, optional
        Prices the drafter's forward passes (a draft model, an EAGLE head, DeepSeek's MTP
        layer); None: drafting takes no GPU time (ngram).
    method : str
        One of :data:`METHODS` (labels results; sets the default lookahead).
    lookahead : int, optional
        KV slots reserved past a verify step for the drafter; default ``k`` for methods
        in :data:`LOOKAHEAD_METHODS`, else 0.
    seed : int
        Seed of the acceptance draws (each request's draws depend on the seed, the request
        and its output position only, so runs are reproducible).
    """

    num_speculative_tokens: int
    acceptance: float | tuple = 0.7
    draft_cost: object = None
    method: str = "ngram"
    lookahead: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        k = self.num_speculative_tokens
        if int(k) != k or not 1 <= k <= MAX_SPEC_TOKENS:
            raise ValueError(f"num_speculative_tokens must be an integer in "
                             f"[1, {MAX_SPEC_TOKENS}], got {k!r}")
        if self.method not in METHODS:
            raise ValueError(f"method given an invalid value: {self.method!r} "
                             f"(valid: {', '.join(METHODS)})")
        rates = np.atleast_1d(np.asarray(self.acceptance, dtype=np.float64))
        if rates.ndim != 1 or rates.size not in (1, k):
            raise ValueError(f"acceptance must be one rate or {k} rates (one per draft "
                             f"position), got {rates.size}")
        if not np.all((rates >= 0.0) & (rates <= 1.0)):
            raise ValueError(f"acceptance rates must be in [0, 1], got {rates.tolist()}")
        if self.lookahead is not None and (int(self.lookahead) != self.lookahead
                                           or self.lookahead < 0):
            raise ValueError(f"lookahead must be an integer >= 0, got {self.lookahead!r}")
        if int(self.seed) != self.seed or not 0 <= self.seed < 2**62:
            raise ValueError(f"seed must be an integer in [0, 2**62), got {self.seed!r}")

    @property
    def rates(self) -> np.ndarray:
        """``a_1..a_k``."""
        r = np.atleast_1d(np.asarray(self.acceptance, dtype=np.float64))
        return np.broadcast_to(r, (self.num_speculative_tokens,)).copy()

    @property
    def lookahead_tokens(self) -> int:
        if self.lookahead is not None:
            return int(self.lookahead)
        return self.num_speculative_tokens if self.method in LOOKAHEAD_METHODS else 0

    def expected_accepted(self, drafts: int | None = None) -> float:
        """Expected accepted drafts of a step verifying ``drafts`` (default ``k``):
        ``sum_{i<=drafts} prod_{j<=i} a_j``."""
        n = self.num_speculative_tokens if drafts is None else int(drafts)
        return float(np.cumprod(self.rates[:n]).sum())

    def acceptance_length(self) -> float:
        """Expected tokens per verify step: accepted drafts + the bonus token (vLLM's
        "mean acceptance length")."""
        return 1.0 + self.expected_accepted()

    def describe(self) -> dict:
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "acceptance": self.rates.tolist(), "lookahead": self.lookahead_tokens,
                "seed": int(self.seed), "acceptance_length": self.acceptance_length()}


def draft_costs(pools) -> list:
    """The drafters' cost models, in pool order (they become cost rows after the pools')."""
    return [p.speculative.draft_cost for p in pools
            if getattr(p, "speculative", None) is not None
            and p.speculative.draft_cost is not None]


def spec_tables(pools=(), n_rows: int = 1, n_inst: int = 1, max_slots: int = 1) -> SpecTables:
    """Tables of the pools' speculative decoding: pool ``k`` is cost row ``k``; the
    drafters' rows follow the pools' (:func:`draft_costs` order). Without any, a disabled
    table (every instance's ``K_SPEC_TOKENS`` is 0 and nothing reads it)."""
    rate = np.zeros((max(n_rows, 1), MAX_SPEC_TOKENS))
    irow = np.full((max(n_rows, 1), 2), -1, dtype=np.int64)
    next_row = len(pools)
    for k, p in enumerate(pools):
        sd = getattr(p, "speculative", None)
        if sd is None:
            continue
        rate[k, : sd.num_speculative_tokens] = sd.rates
        irow[k, SI_SEED] = int(sd.seed)
        if sd.draft_cost is not None:
            irow[k, SI_DRAFT_ROW] = next_row
            next_row += 1
    return SpecTables(rate=rate, irow=irow, q=np.ones(max(max_slots, 1), dtype=np.int64),
                      c=np.zeros(max(max_slots, 1), dtype=np.int64),
                      stats=np.zeros((max(n_inst, 1), N_ST)))


def spec_knobs(pools, pool_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per instance: ``num_speculative_tokens`` and lookahead slots (0 without)."""
    k = np.array([getattr(p, "speculative", None) and p.speculative.num_speculative_tokens
                  or 0 for p in pools], dtype=np.int64)
    la = np.array([p.speculative.lookahead_tokens if getattr(p, "speculative", None)
                   else 0 for p in pools], dtype=np.int64)
    return k[pool_of], la[pool_of]


def spec_blocks_needed(sd: SpecDecode, params, prompt, output, ignored) -> int:
    """Blocks one request may hold at most with speculative decoding: its last verify
    step reserves ``k + 1`` query tokens and the lookahead slots past ``prompt + output -
    2`` computed ones (capped at ``max_model_len``). Raises ValueError if an instance
    could never hold them."""
    live = ~np.asarray(ignored)
    if not live.any():
        return 1
    peak = np.minimum(prompt + output - 1 + sd.num_speculative_tokens + sd.lookahead_tokens,
                      params.max_model_len)
    blocks = -(-peak // params.block_size)
    worst = int(np.argmax(np.where(live, blocks, 0)))
    if blocks[worst] > params.num_gpu_blocks:
        raise ValueError(
            f"request {worst} needs {blocks[worst]} KV blocks with speculative decoding "
            f"({prompt[worst]} prompt + {output[worst]} output tokens, "
            f"{sd.num_speculative_tokens} draft and {sd.lookahead_tokens} lookahead slots, "
            f"block_size={params.block_size}) but the instance has "
            f"num_gpu_blocks={params.num_gpu_blocks}; lower max_model_len or add KV memory")
    return int(max(blocks[live].max(), 1))


SPEC_VARS = ("spec_verifies", "spec_draft_tokens", "spec_accepted_tokens",
             "spec_emitted_tokens", "spec_draft_s", "spec_verify_s")
"""Per-instance result variables, in :data:`ST_VERIFIES`.. order."""
_SPEC_DOCS = ("decoding request-steps that verified drafts", "draft tokens verified",
              "draft tokens accepted", "tokens emitted by verify steps (accepted + bonus, cut "
              "at max_tokens)", "GPU seconds of the drafter's passes",
              "GPU seconds of the target's steps on this instance")


def spec_instance_vars(pools, pool_of, stats) -> dict:
    """The per-instance variables of a run with speculative decoding (none without)."""
    if all(getattr(p, "speculative", None) is None for p in pools):
        return {}
    dim = ("instance",)
    out = {}
    for c, (name, doc) in enumerate(zip(SPEC_VARS, _SPEC_DOCS, strict=True)):
        attrs = {"description": doc, **({"units": "s"} if name.endswith("_s") else {})}
        out[name] = (dim, stats[: len(pool_of), c].copy(), attrs)
    k = [p.speculative.num_speculative_tokens if getattr(p, "speculative", None) else 0
         for p in pools]
    out["num_speculative_tokens"] = (dim, np.asarray(k, dtype=np.int64)[pool_of])
    return out


def spec_summary(ds) -> dict:
    """Summary figures of a run with speculative decoding ({} without): vLLM's mean
    acceptance length (1 + accepted drafts per verifying request-step) and draft acceptance
    rate, tokens per verify after the ``max_tokens`` cut, and the drafter's share of the
    GPU time of the instances that speculate."""
    if "spec_verifies" not in ds:
        return {}
    v, d, a, e, t_d, t_v = (float(ds[name].values.sum()) for name in SPEC_VARS)
    nan = float("nan")
    return {"spec_acceptance_length": 1.0 + a / v if v else nan,
            "spec_draft_acceptance_rate": a / d if d else nan,
            "spec_tokens_per_verify": e / v if v else nan,
            "spec_draft_time_fraction": t_d / (t_d + t_v) if t_d + t_v > 0 else nan}


__all__ = ["LOOKAHEAD_METHODS", "MAX_SPEC_TOKENS", "METHODS", "SpecDecode", "SpecTables",
           "SPEC_VARS", "draft_costs", "spec_blocks_needed", "spec_instance_vars",
           "spec_summary", "spec_knobs", "spec_tables"]
