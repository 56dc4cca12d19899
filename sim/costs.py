"""Step costs: the models that price an instance's step, and their compiled tables.

Every instance names a row of the run's :data:`CostTables` (knob ``K_COST``), so the
instances of one deployment may be priced by different models -- different GPU types,
parallelism or stand-ins. A row is one of

* a :class:`~serveplan.estimator.oracle.CostOracle`: its roofline kernel prices the actual
  batch (:func:`serveplan.kernels.roofline.step_time`); the oracles' arrays are stacked
  along their first axis and each row slices out its own;
* an :class:`AffineStepCost`: ``base + per_token * tokens + per_request * requests``, a
  transparent stand-in where a test or a queueing comparison needs known service times;
* a :class:`FittedThroughputCost` (decode pools): SIBYL's processor-sharing fit, where a
  step of ``N`` requests gives each one token and takes ``N / TPS(N)`` seconds;
* an :class:`~serveplan.sim.afd_cost.AFDStepCost` (attention pools): the attention
  instance's oracle is the row's own, the FFN pool's oracle a further row after the
  deployment's (``flags[c, 1]``), and ``afd[c]`` the ping-pong's parameters
  (:func:`serveplan.kernels.afd.afd_step_time`); the FFN load counts the running requests
  of the pool's other instances (``flags[c, 2:4]``, their index range).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from serveplan.kernels.afd import AFD_WIDTH, afd_step_time
from serveplan.kernels.roofline import P_MOE_TOKENS, step_time_q

from ._jitcache import sim_jit
from .afd_cost import AFDStepCost
from .runtime import N_T
from .speculative import spec_tables
from .state import I_NRUN

CostTables = namedtuple("CostTables", ["flags", "off", "ops", "mods", "prm", "graph_sizes",
                                       "agg", "comp", "comm", "rt", "afd", "spec"])
"""Stacked cost models: ``flags[c]`` (kind and coefficients), ``off[c]`` (the row's
slices of the stacked oracle arrays) and ``rt[c]`` (the runtime terms around the step,
:class:`~serveplan.sim.runtime.StepRuntime`) per cost row ``c``; ``afd[c]`` an attention
pool's ping-pong parameters; ``spec`` the pools' speculative decoding
(:data:`~serveplan.sim.speculative.SpecTables`)."""
KIND_ORACLE, KIND_AFFINE, KIND_FITTED, KIND_AFD = 0.0, 1.0, 2.0, 3.0
N_FLAGS = 6


@dataclass(frozen=True)
class AffineStepCost:
    """Step seconds ``base_s + per_token_s * tokens + per_request_s * requests``.

    A transparent stand-in for the cost oracle where a test or a queueing comparison needs
    known service times (e.g. M/D/1 with a constant step).
    """

    base_s: float
    per_token_s: float = 0.0
    per_request_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base_s", "per_token_s", "per_request_s"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.base_s + self.per_token_s + self.per_request_s <= 0:
            raise ValueError("an affine step cost must be positive for a non-empty step")


@dataclass(frozen=True)
class FittedThroughputCost:
    """SIBYL's fitted decode throughput (``papers/sibyl.txt`` Appendix I, Eq. 15).

    An instance running ``N`` requests produces ``TPS(N) = alpha N^2 + beta N + gamma``
    tokens/s in total, split equally among them (Algorithm 3: ``v = TPS(N) / N``); as an
    engine step every request gains one token and the step takes ``N / TPS(N)`` seconds.
    ``TPS`` is floored at ``min_tps`` (the H20 quadratic turns negative beyond ``N`` ~ 106).
    With ``plateau`` it stays at its peak beyond the peak's batch size instead (the paper
    describes the curve as "plateauing due to memory bandwidth saturation"; its simulator
    uses the quadratic). Defaults: the paper's H20 / Qwen3-32B fit. Prices decode pools only.
    """

    alpha: float = -0.423
    beta: float = 44.766
    gamma: float = -7.753
    min_tps: float = 1.0
    plateau: bool = False

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)!r}")
        if not (np.isfinite(self.min_tps) and self.min_tps > 0):
            raise ValueError(f"min_tps must be a finite number > 0, got {self.min_tps!r}")

    @property
    def peak_n(self) -> float:
        """Batch size at which the quadratic peaks (inf if it never does)."""
        return -self.beta / (2 * self.alpha) if self.alpha < 0 else np.inf

    def tps(self, n):
        """Total tokens/s of an instance running ``n`` requests (floored)."""
        n = np.asarray(n, dtype=np.float64)
        if self.plateau:
            n = np.minimum(n, self.peak_n)
        return np.maximum(self.alpha * n * n + self.beta * n + self.gamma, self.min_tps)

    def step_time(self, n):
        """Seconds of a step of ``n`` requests (one token each)."""
        n = np.asarray(n, dtype=np.float64)
        return n / self.tps(n)


def _flags(cost) -> np.ndarray:
    if isinstance(cost, FittedThroughputCost):
        return np.array([KIND_FITTED, cost.alpha, cost.beta, cost.gamma, cost.min_tps,
                         cost.peak_n if cost.plateau else np.inf])
    if isinstance(cost, AffineStepCost):
        return np.array([KIND_AFFINE, cost.base_s, cost.per_token_s, cost.per_request_s,
                         0.0, 0.0])
    if isinstance(cost, AFDStepCost):
        return np.array([KIND_AFD, 0.0, 0.0, 0.0, 0.0, 0.0])
    return np.zeros(N_FLAGS)


def _oracle_rows(costs: list, ranges) -> tuple[list, np.ndarray, np.ndarray]:
    """One oracle per row (an AFD row's attention oracle; its FFN oracle appended as a
    row of its own), the rows' flags and their AFD parameters."""
    oracles, flags, afd = [], [_flags(c) for c in costs], [np.zeros(AFD_WIDTH) for _ in costs]
    extra = []
    for c, cost in enumerate(costs):
        if isinstance(cost, AFDStepCost):
            lo, hi = ranges[c] if ranges is not None else (0, 0)
            flags[c][1:4] = (len(costs) + len(extra), lo, hi)
            afd[c] = cost.afd_row()
            extra.append(cost.ffn)
            oracles.append(cost.attention)
        else:
            oracles.append(cost if flags[c][0] == KIND_ORACLE else None)
    oracles += extra
    flags += [np.zeros(N_FLAGS) for _ in extra]
    afd += [np.zeros(AFD_WIDTH) for _ in extra]
    return oracles, np.stack(flags), np.stack(afd)


def make_cost_tables(costs: list, runtimes: list | None = None, spec=None,
                     ranges: list | None = None) -> CostTables:
    """Stack the cost models ``costs`` (one row each, with its optional
    :class:`~serveplan.sim.runtime.StepRuntime` in ``runtimes``) into compiled tables;
    ``spec``: the speculative-decoding tables (default: none); ``ranges[c]`` = ``(lo, hi)``,
    the instances priced by row ``c`` (AFD rows need them)."""
    spec = spec if spec is not None else spec_tables(n_rows=len(costs))
    oracles, flags, afd = _oracle_rows(costs, ranges)
    rt = np.zeros((len(oracles), N_T))
    for c, runtime in enumerate(runtimes or ()):
        if runtime is not None:
            rt[c] = runtime.row()
    off = np.zeros((len(oracles), 8), dtype=np.int64)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("ops", "mods", "prm", "gs", "agg")}
    ends = np.zeros(4, dtype=np.int64)  # rows of ops, mods, prm, graph_sizes so far
    for c, cost in enumerate(oracles):
        if cost is None:
            continue
        ops, mods, prm, gs = cost.kernel_args
        agg = cost.scratch()[0]
        for k, a in (("ops", ops), ("mods", mods), ("prm", prm), ("gs", gs), ("agg", agg)):
            parts[k].append(np.ascontiguousarray(a, dtype=np.float64))
        sizes = np.array([ops.shape[0], mods.shape[0], prm.shape[0], gs.shape[0]])
        off[c, 0::2] = ends
        off[c, 1::2] = ends + sizes
        ends = ends + sizes
    if not parts["ops"]:
        z1, z2 = np.zeros(1), np.zeros((1, 1))
        return CostTables(flags, off, z2, z2.copy(), z1, z1.copy(), z2.copy(), z1.copy(),
                          z1.copy(), rt, afd, spec)
    cat = {k: np.ascontiguousarray(np.concatenate(v)) for k, v in parts.items()}
    n_mod = cat["mods"].shape[0]
    return CostTables(flags, off, cat["ops"], cat["mods"], cat["prm"], cat["gs"], cat["agg"],
                      np.zeros(n_mod), np.zeros(n_mod), rt, afd, spec)


@sim_jit
def moe_tokens_slot(costs, c):
    """Index in ``costs.prm`` of cost row ``c``'s MoE token multiplier
    (:data:`serveplan.kernels.roofline.P_MOE_TOKENS`: the MoE rows see this times the
    step's tokens), or -1 where the row is not an oracle's."""
    if costs.flags[c, 0] != KIND_ORACLE:
        return -1
    return costs.off[c, 4] + P_MOE_TOKENS


@sim_jit
def _afd_seconds(costs, c, inst, i, bn):
    """An attention instance's step: its row's oracle and the FFN row's (module doc)."""
    f = costs.flags[c]
    pool_tokens = 0.0
    for k in range(int(f[2]), int(f[3])):
        if k != i:
            pool_tokens += inst.ist[k, I_NRUN]
    o = costs.off[c]
    g = costs.off[int(f[1])]
    a_tab = (costs.ops[o[0]:o[1]], costs.mods[o[2]:o[3]], costs.prm[o[4]:o[5]],
             costs.graph_sizes[o[6]:o[7]], costs.agg[o[0]:o[1]], costs.comp[o[2]:o[3]],
             costs.comm[o[2]:o[3]])
    f_tab = (costs.ops[g[0]:g[1]], costs.mods[g[2]:g[3]], costs.prm[g[4]:g[5]],
             costs.agg[g[0]:g[1]], costs.comp[g[2]:g[3]], costs.comm[g[2]:g[3]])
    return afd_step_time(inst.b_new[i], inst.b_ctx[i], bn, a_tab, f_tab, costs.afd[c],
                         pool_tokens)


@sim_jit
def step_seconds(costs, c, inst, i, bn, tokens):
    """Seconds of instance ``i``'s scheduled batch (``bn`` requests, ``tokens`` new tokens)
    under cost row ``c``."""
    if costs.flags[c, 0] == KIND_AFD:
        return _afd_seconds(costs, c, inst, i, bn)
    return batch_seconds(costs, c, inst.b_new[i], inst.b_ctx[i], bn, tokens, 1.0)


@sim_jit
def batch_seconds(costs, c, new_tokens, context_len, bn, tokens, q_decode):
    """Seconds of a batch of ``bn`` requests (``new_tokens``, ``context_len``; ``tokens``
    in all) under cost row ``c``; requests with at most ``q_decode`` new tokens decode
    (:func:`serveplan.kernels.roofline.step_time_q`)."""
    f = costs.flags[c]
    if f[0] == KIND_FITTED:
        m = bn if bn < f[5] else f[5]
        tps = f[1] * m * m + f[2] * m + f[3]
        return bn / (tps if tps > f[4] else f[4])
    if f[0] == KIND_AFFINE:
        return f[1] + f[2] * tokens + f[3] * bn
    o = costs.off[c]
    return step_time_q(new_tokens, context_len, bn, costs.ops[o[0]:o[1]],
                       costs.mods[o[2]:o[3]], costs.prm[o[4]:o[5]],
                       costs.graph_sizes[o[6]:o[7]], costs.agg[o[0]:o[1]],
                       costs.comp[o[2]:o[3]], costs.comm[o[2]:o[3]], q_decode)


def _prefill_chunks(prompt: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunks of each prompt: ``(owner, tokens, context)`` arrays."""
    n_chunks = -(-prompt // chunk)
    owner = np.repeat(np.arange(len(prompt)), n_chunks)
    first = np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
    k = np.arange(len(owner)) - first
    ctx = k * chunk
    tokens = np.minimum(prompt[owner] - ctx, chunk)
    return owner, tokens, ctx


def prefill_seconds(cost, prompt: np.ndarray, chunk: int) -> np.ndarray:
    """Time to prefill each prompt alone, in chunks of ``chunk`` tokens (each chunk one step
    over the cached context of the chunks before it)."""
    prompt = np.asarray(prompt, dtype=np.int64)
    out = np.zeros(len(prompt))
    if len(prompt) == 0:
        return out
    owner, tokens, ctx = _prefill_chunks(np.maximum(prompt, 1), int(chunk))
    if isinstance(cost, AffineStepCost):
        t = cost.base_s + cost.per_token_s * tokens + cost.per_request_s
    elif isinstance(cost, FittedThroughputCost):
        raise ValueError("the fitted-throughput cost prices decode steps only; give the "
                         "prefill pool a cost oracle or an affine step cost")
    else:
        t = np.asarray(cost.prefill_time(1, tokens, ctx), dtype=np.float64)
    np.add.at(out, owner, t)
    return out


def decode_rate(cost, prompt_mean: float) -> float:
    """Tokens/s of one request decoding alone (the initial system decode rate)."""
    if isinstance(cost, FittedThroughputCost):
        return float(cost.tps(1.0))
    if isinstance(cost, AffineStepCost):
        return 1.0 / (cost.base_s + cost.per_token_s + cost.per_request_s)
    return 1.0 / float(cost.decode_time(1, max(prompt_mean, 1.0)))


__all__ = ["AffineStepCost", "CostTables", "batch_seconds", "FittedThroughputCost", "decode_rate",
           "make_cost_tables", "prefill_seconds", "step_seconds"]
