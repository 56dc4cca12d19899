"""Length distributions of prompts and outputs that carry their own moments.

:class:`Fixed`, :class:`Uniform`, :class:`LogNormal`, :class:`Empirical` and
:class:`ShareGPTLength`, all subclasses of :class:`LengthDist`: one object feeds both the sampler
and the analytic formulas. :class:`ShareGPTPairs` samples ShareGPT (prompt, output) pairs as
``vllm bench serve --dataset-name sharegpt`` or ``sglang.bench_serving`` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import numpy as np
from scipy import special

from ._checks import SeedLike, as_array, as_pair, check_int, check_positive, first_bad, make_rng

_MAX_LEN = 1 << 62  # cap for unclipped samples so that the int64 cast is defined


class LengthDist:
    """Integer length distribution on ``{1, 2, ...}`` that carries its own moments.

    Subclasses define ``sample(n, seed) -> int64[n]``, ``mean``, ``var`` and ``sf(x) = P(L > x)``;
    the moments are those of the sampled integers, so one object feeds both the sampler and the
    analytic formulas (e.g. ``E[S^2] = var + mean**2`` in Pollaczek-Khinchine).
    """

    mean: float
    var: float

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        raise NotImplementedError

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        raise NotImplementedError

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        """``P(L <= x)``."""
        return 1.0 - self.sf(x)

    @property
    def std(self) -> float:
        return float(np.sqrt(self.var))

    @property
    def second_moment(self) -> float:
        """``E[L^2] = var + mean^2``."""
        return self.var + self.mean**2


@dataclass(frozen=True)
class Fixed(LengthDist):
    """Every request has ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        check_int("value", self.value, 1)

    @property
    def mean(self) -> float:
        return float(self.value)

    @property
    def var(self) -> float:
        return 0.0

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        return np.full(check_int("n", n, 0), self.value, dtype=np.int64)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) < self.value).astype(np.float64)


@dataclass(frozen=True)
class Uniform(LengthDist):
    """Integers uniform on ``low .. high`` inclusive.

    Notes
    -----
    ``mean = (low + high) / 2`` and ``var = ((high - low + 1)**2 - 1) / 12``.
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        check_int("low", self.low, 1)
        check_int("high", self.high, self.low)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def var(self) -> float:
        return ((self.high - self.low + 1) ** 2 - 1) / 12

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        return make_rng(seed).integers(self.low, self.high + 1, check_int("n", n, 0), dtype=np.int64)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        k = np.floor(np.asarray(x, dtype=np.float64))
        return np.clip((self.high - k) / (self.high - self.low + 1), 0.0, 1.0)


@dataclass(frozen=True)
class LogNormal(LengthDist):
    """Lognormal lengths, rounded up to integers and clipped to ``[1, clip_max]``.

    Parameters
    ----------
    median : float
        Median ``exp(mu)`` of the underlying continuous lognormal ``X``.
    sigma : float
        Standard deviation of ``log X`` (> 0).
    clip_max : int, optional
        Largest length (e.g. the model's context limit); no cap if ``None``.

    Notes
    -----
    Samples are ``L = min(max(ceil(X), 1), clip_max)``. ``mean``, ``var`` and ``sf`` are exact for
    ``L`` (not for ``X``): with ``S(k) = P(X > k)``, ``P(L > k) = S(k)`` for ``1 <= k < clip_max``,
    ``E[L] = 1 + sum_{k=1}^{M-1} S(k)`` and ``E[L^2] = 1 + sum_{k=1}^{M-1} (2k + 1) S(k)``. The sums
    run term by term up to ``k = 2**16`` and continue with the midpoint rule in closed form, using
    the lognormal partial moments ``E[X^j; a < X < b] = exp(j mu + j^2 sigma^2 / 2)
    (Phi((mu + j sigma^2 - ln a) / sigma) - Phi((mu + j sigma^2 - ln b) / sigma))``.
    Use :meth:`from_mean` to give the mean of ``X`` instead of its median.
    """

    median: float
    sigma: float
    clip_max: int | None = None

    _TERMS = 1 << 16

    def __post_init__(self) -> None:
        check_positive("median", self.median)
        check_positive("sigma", self.sigma)
        if self.clip_max is not None:
            check_int("clip_max", self.clip_max, 1)

    @classmethod
    def from_mean(cls, mean: float, sigma: float, clip_max: int | None = None) -> LogNormal:
        """Lognormal whose continuous ``X`` has mean ``mean``: ``median = mean exp(-sigma^2/2)``."""
        mean = check_positive("mean", mean)
        return cls(mean * np.exp(-check_positive("sigma", sigma) ** 2 / 2), sigma, clip_max)

    def _sf_x(self, x: np.ndarray) -> np.ndarray:
        return special.ndtr((np.log(self.median) - np.log(x)) / self.sigma)

    @cached_property
    def _moments(self) -> tuple[float, float]:
        m = np.inf if self.clip_max is None else float(self.clip_max)
        k = np.arange(1, int(min(m, self._TERMS)), dtype=np.float64)
        s = self._sf_x(k)
        m1, m2 = 1.0 + s.sum(), 1.0 + ((2 * k + 1) * s).sum()
        if m > self._TERMS:  # tail: sum_{k=K}^{M-1} g(k) S(k) ~ integral over [K - 1/2, M - 1/2]
            a, b = self._TERMS - 0.5, m - 0.5
            mu, s2 = np.log(self.median), self.sigma**2

            def partial(j: int) -> float:
                z = [(mu + j * s2 - np.log(v)) / self.sigma for v in (a, b)]
                return np.exp(j * mu + j * j * s2 / 2) * (special.ndtr(z[0]) - special.ndtr(z[1]))

            sa = float(self._sf_x(np.array(a)))
            sb = 0.0 if np.isinf(b) else float(self._sf_x(np.array(b)))
            bsb, b2sb = (0.0, 0.0) if np.isinf(b) else (b * sb, (b * b + b) * sb)
            m1 += bsb - a * sa + partial(1)
            m2 += b2sb - (a * a + a) * sa + partial(2) + partial(1)
        return float(m1), float(m2 - m1 * m1)

    @property
    def mean(self) -> float:
        return self._moments[0]

    @property
    def var(self) -> float:
        return self._moments[1]

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        z = make_rng(seed).standard_normal(check_int("n", n, 0))
        x = np.ceil(self.median * np.exp(self.sigma * z))
        return np.clip(x, 1, self.clip_max or _MAX_LEN).astype(np.int64)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        k = np.floor(np.asarray(x, dtype=np.float64))
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(k < 1, 1.0, self._sf_x(np.maximum(k, 1.0)))
        if self.clip_max is not None:
            out = np.where(k >= self.clip_max, 0.0, out)
        return out


@dataclass(frozen=True, eq=False)
class Empirical(LengthDist):
    """Resampling with replacement from observed lengths (e.g. a trace column).

    Notes
    -----
    ``mean`` and ``var`` are the moments of the observed values with ``ddof = 0``, which are the
    exact moments of resampling.
    """

    values: np.ndarray

    def __post_init__(self) -> None:
        v = as_array("values", self.values, np.int64)
        if len(v) == 0:
            raise ValueError("values must not be empty")
        first_bad("values", v, v < 1, "lengths must be >= 1")
        object.__setattr__(self, "values", v)

    @cached_property
    def _sorted(self) -> np.ndarray:
        return np.sort(self.values)

    @cached_property
    def mean(self) -> float:
        return float(self.values.mean())

    @cached_property
    def var(self) -> float:
        return float(self.values.var())

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        return self.values[make_rng(seed).integers(0, len(self.values), check_int("n", n, 0))]

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        below = np.searchsorted(self._sorted, np.asarray(x, dtype=np.float64), side="right")
        return 1.0 - below / len(self.values)


# --------------------------------------------------------------------------------------------------
# ShareGPT as ``vllm bench serve --dataset-name sharegpt`` samples it
# --------------------------------------------------------------------------------------------------

SHAREGPT_FILE = Path(__file__).parent / "data" / "sharegpt_vllm_bench.npz"
"""(prompt, output) token counts of the ShareGPT V3 conversations (built by
``sim/data/build_sharegpt.py``; provenance in ``sharegpt_vllm_bench.provenance.json``)."""

VLLM_MIN_LEN, VLLM_MAX_PROMPT_LEN, VLLM_MAX_TOTAL_LEN = 4, 1024, 2048
"""The defaults of ``is_valid_sequence`` in ``vllm/benchmarks/datasets.py``."""


def vllm_valid(prompt_len: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """Which (prompt, output) pairs ``vllm bench serve`` keeps (``is_valid_sequence``).

    A pair is dropped if ``prompt_len < 4``, ``output_len < 4``, ``prompt_len > 1024`` or
    ``prompt_len + output_len > 2048``.
    """
    p, o = np.asarray(prompt_len), np.asarray(output_len)
    return ((p >= VLLM_MIN_LEN) & (o >= VLLM_MIN_LEN) & (p <= VLLM_MAX_PROMPT_LEN)
            & (p + o <= VLLM_MAX_TOTAL_LEN))


SGLANG_MIN_LEN = 2
"""``sglang.bench_serving`` drops pairs with fewer prompt or output tokens than this."""
SAMPLERS = ("vllm", "sglang")
"""The benchmark clients whose ShareGPT sampling serveplan reproduces."""


def sglang_valid(prompt_len: np.ndarray, output_len: np.ndarray,
                 context_len: int | None = None) -> np.ndarray:
    """Which (prompt, output) pairs ``sglang.bench_serving`` keeps
    (``sample_sharegpt_requests``): a pair is dropped if ``prompt_len < 2`` or
    ``output_len < 2``, and, given a context length (``--sharegpt-context-len``), if
    ``prompt_len + output_len > context_len``. No 1024 / 2048 caps."""
    p, o = np.asarray(prompt_len), np.asarray(output_len)
    keep = (p >= SGLANG_MIN_LEN) & (o >= SGLANG_MIN_LEN)
    if context_len:
        keep &= p + o <= context_len
    return keep


def _int_seed(seed: SeedLike) -> int:
    """An ``int`` seed for Python's :mod:`random` (``None`` is vLLM's default ``--seed 0``)."""
    if seed is None:
        return 0
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return int(seed)
    return int(make_rng(seed).integers(0, 2**32))


@dataclass(frozen=True, eq=False)
class ShareGPTPairs:
    """Token counts of the first two turns of every ShareGPT conversation with >= 2 turns.

    Parameters
    ----------
    prompt_len, output_len : int[m]
        Tokens of turn 0 and turn 1 (the tokenizer's BOS included, as ``tokenizer(text)``
        counts them), in file order, valid or not: the order vLLM shuffles.
    """

    prompt_len: np.ndarray
    output_len: np.ndarray

    def __post_init__(self) -> None:
        p, o = as_pair(("prompt_len", self.prompt_len, np.int64),
                       ("output_len", self.output_len, np.int64))
        object.__setattr__(self, "prompt_len", p)
        object.__setattr__(self, "output_len", o)

    @classmethod
    def load(cls, path: str | Path = SHAREGPT_FILE) -> ShareGPTPairs:
        """The shipped pairs (or another ``.npz`` with ``prompt_len`` and ``output_len``)."""
        with np.load(path) as data:
            return cls(data["prompt_len"], data["output_len"])

    @cached_property
    def valid(self) -> np.ndarray:
        """The pairs vLLM keeps (:func:`vllm_valid`)."""
        return vllm_valid(self.prompt_len, self.output_len)

    def vllm_sample(self, n: int, seed: SeedLike = 0, *,
                    oversample: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(prompt_len, output_len)`` of ``n`` requests, chosen as vLLM chooses them.

        Notes
        -----
        ``ShareGPTDataset``: ``random.seed(seed); random.shuffle(data)``, then walk the shuffled
        conversations and keep the first ``n`` valid ones; if fewer than ``n`` are valid,
        ``maybe_oversample_requests`` reseeds and appends ``random.choice(kept)`` until there
        are ``n`` (``--no-oversample``: ``oversample=False`` returns the shorter sample). Python's
        :class:`random.Random` reproduces the same permutation and choices for an ``int``
        seed; another seed kind is turned into an ``int`` first.
        """
        n = check_int("n", n, 0)
        seed = _int_seed(seed)
        kept = self._first_valid(n, seed, self.valid)
        if len(kept) < n and oversample:
            if len(kept) == 0:
                raise ValueError("no ShareGPT pair passes vLLM's length filters")
            chooser = random.Random(seed)
            extra = [kept[chooser.randrange(len(kept))] for _ in range(n - len(kept))]
            kept = np.concatenate([kept, np.asarray(extra, dtype=np.int64)])
        return self.prompt_len[kept], self.output_len[kept]

    def sglang_sample(self, n: int, seed: SeedLike = 1, *,
                      context_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(prompt_len, output_len)`` of ``n`` requests, chosen as ``sglang.bench_serving
        --dataset-name sharegpt`` chooses them.

        Notes
        -----
        ``sample_sharegpt_requests``: the conversations with >= 2 turns, ``random.shuffle``
        after the benchmark's ``random.seed(--seed)`` (default 1), then the first ``n``
        that :func:`sglang_valid` keeps. It does not oversample: with fewer valid pairs
        than ``n`` it runs fewer requests, which serveplan refuses rather than run a
        different number than asked.
        """
        n = check_int("n", n, 0)
        kept = self._first_valid(n, _int_seed(seed),
                                 sglang_valid(self.prompt_len, self.output_len, context_len))
        if len(kept) < n:
            raise ValueError(f"sglang.bench_serving's ShareGPT sample has {len(kept)} "
                             f"requests (it does not oversample); asked for {n}")
        return self.prompt_len[kept], self.output_len[kept]

    def _first_valid(self, n: int, seed: int, valid: np.ndarray) -> np.ndarray:
        """Indices of the first ``n`` pairs ``valid`` keeps, in the order Python's
        ``random.Random(seed).shuffle`` puts the pairs (both clients' walk)."""
        order = list(range(len(self.prompt_len)))
        random.Random(seed).shuffle(order)
        order_arr = np.asarray(order, dtype=np.int64)
        return order_arr[valid[order_arr]][:n]

    def valid_for(self, sampler: str = "vllm", context_len: int | None = None) -> np.ndarray:
        """The pairs the benchmark client ``sampler`` (:data:`SAMPLERS`) keeps;
        ``context_len`` is SGLang's ``--sharegpt-context-len``."""
        if sampler == "sglang":
            return sglang_valid(self.prompt_len, self.output_len, context_len)
        if sampler != "vllm":
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
        if context_len is not None:
            raise ValueError("context_len is sglang.bench_serving's filter; vLLM's sample "
                             "has fixed 1024 / 2048 caps")
        return self.valid

    def sample(self, n: int, seed: SeedLike, sampler: str = "vllm",
               context_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``n`` pairs as the benchmark client ``sampler`` draws them (:meth:`valid_for`)."""
        if sampler == "sglang":
            return self.sglang_sample(n, seed, context_len=context_len)
        self.valid_for(sampler, context_len)  # refuses an unknown sampler, a misplaced filter
        return self.vllm_sample(n, seed)


@cache
def sharegpt_pairs() -> ShareGPTPairs:
    """The shipped ShareGPT pairs, read once."""
    return ShareGPTPairs.load()


@dataclass(frozen=True, eq=False)
class ShareGPTLength(LengthDist):
    """Prompt or output lengths of ShareGPT as ``vllm bench serve --dataset-name sharegpt``
    or ``sglang.bench_serving --dataset-name sharegpt`` sample it.

    Parameters
    ----------
    column : {"prompt", "output"}
        Which turn's token count.
    pairs : ShareGPTPairs, optional
        Default: the shipped data (:data:`SHAREGPT_FILE`).
    sampler : {"vllm", "sglang"}
        Whose filters and order (:meth:`ShareGPTPairs.sample`).
    context_len : int, optional
        SGLang's ``--sharegpt-context-len``.

    Notes
    -----
    ``sample(n, seed)`` is one column of :meth:`ShareGPTPairs.sample`: without replacement
    from the valid pairs while there are enough of them, so its marginal law is the
    empirical law of the valid pairs, whose moments ``mean``, ``var`` and ``sf`` are.
    Sample both columns with one :meth:`ShareGPTPairs.sample` call to keep the pairs.
    """

    column: str
    pairs: ShareGPTPairs | None = None
    sampler: str = "vllm"
    context_len: int | None = None

    def __post_init__(self) -> None:
        if self.column not in ("prompt", "output"):
            raise ValueError(f"column must be 'prompt' or 'output', got {self.column!r}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, "
                             f"got {self.sampler!r}")

    @cached_property
    def _pairs(self) -> ShareGPTPairs:
        return self.pairs if self.pairs is not None else sharegpt_pairs()

    @cached_property
    def _values(self) -> Empirical:
        p = self._pairs
        col = p.prompt_len if self.column == "prompt" else p.output_len
        return Empirical(col[p.valid_for(self.sampler, self.context_len)])

    @property
    def mean(self) -> float:
        return self._values.mean

    @property
    def var(self) -> float:
        return self._values.var

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        return self._values.sf(x)

    def sample(self, n: int, seed: SeedLike = 0) -> np.ndarray:
        prompt, output = self._pairs.sample(n, seed, self.sampler, self.context_len)
        return prompt if self.column == "prompt" else output
