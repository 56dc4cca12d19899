"""Request arrays and the synthetic workloads that fill them.

The simulator consumes one :class:`Requests` object: a frozen structure of arrays (no per-request
Python objects) holding arrival times, prompt and output lengths and, optionally, the prefix-block
hash ids that the KV block manager uses for prefix caching.

Building blocks, all seeded explicitly (an ``int``, a :class:`numpy.random.SeedSequence` or a
:class:`numpy.random.Generator`; never global random state):

* arrival processes (:mod:`.arrivals`) -- :class:`PoissonArrivals`, :class:`GammaArrivals`,
  :class:`ConstantArrivals`, :class:`TraceArrivals`, the benchmark clients' schedules
  :class:`VllmBenchArrivals` and :class:`InferencePerfArrivals`, and the closed-loop marker
  :class:`ClosedLoop`;
* length distributions that carry their moments (:mod:`.lengths`) -- :class:`Fixed`,
  :class:`Uniform`, :class:`LogNormal`, :class:`Empirical`, :class:`ShareGPTLength`;
* synthetic shared prefixes and prompt pools (:mod:`.shared_prefixes`) -- :class:`PrefixSharing`,
  :func:`synthetic_prefix_hashes`, :class:`PromptPool`;
* the container :class:`Requests` and :func:`tile_requests`, which repeats a trace
  (:mod:`.requests`);
* :func:`generate_requests` (here) ties them together.

This module re-exports the public names of all of them: import from here.

Common random numbers: every renewal process draws a *unit-rate* pattern (mean inter-arrival 1 s)
that does not depend on the rate, and ``sample(n, seed) == unit_pattern(n, seed) / rate`` bit for
bit. :func:`generate_requests` draws arrivals, prompt lengths, output lengths, prefix groups, pool
order and think times from independent child streams of the seed, so calling it with the same seed
at another rate gives the same lengths and the same arrival pattern, only scaled -- what a goodput
bisection needs.
"""

from __future__ import annotations

import numpy as np

from ._checks import SeedLike, as_array, check_int, make_rng
from .arrivals import (
    ArrivalProcess,
    ClosedLoop,
    ConstantArrivals,
    GammaArrivals,
    InferencePerfArrivals,
    PoissonArrivals,
    StagePlan,
    TraceArrivals,
    VllmBenchArrivals,
    scale_pattern,
)
from .lengths import (
    Empirical,
    Fixed,
    LengthDist,
    LogNormal,
    ShareGPTLength,
    ShareGPTPairs,
    Uniform,
    sharegpt_pairs,
)
from .requests import MOONCAKE_BLOCK_SIZE, Requests, closed_loop_predecessor, tile_requests
from .shared_prefixes import PrefixSharing, PromptPool, pooled_hashes, synthetic_prefix_hashes

__all__ = [
    "MOONCAKE_BLOCK_SIZE", "ArrivalProcess", "ClosedLoop", "ConstantArrivals", "Empirical", "Fixed",
    "GammaArrivals", "InferencePerfArrivals", "LengthDist", "LogNormal", "PoissonArrivals",
    "PrefixSharing", "PromptPool", "Requests", "SeedLike", "ShareGPTLength", "ShareGPTPairs",
    "StagePlan", "TraceArrivals", "Uniform", "VllmBenchArrivals", "closed_loop_predecessor",
    "generate_requests", "scale_pattern", "sharegpt_pairs", "synthetic_prefix_hashes",
    "tile_requests",
]

Lengths = LengthDist | np.ndarray
"""A length distribution, or the lengths themselves (one per distinct prompt drawn)."""


def _lengths(name: str, spec: Lengths, m: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(spec, LengthDist):
        return spec.sample(m, rng)
    a = as_array(name, spec, np.int64)
    if len(a) != m:
        raise ValueError(f"{name} gives {len(a)} lengths but {m} prompts are drawn")
    return a


def _hashes(prompt: np.ndarray, group: np.ndarray, prefix: PrefixSharing | None,
            pool: PromptPool | None, index: np.ndarray | None) -> dict:
    """Hash-id fields of :class:`Requests` (none without a prefix or a pool)."""
    prefix_len = 0 if prefix is None else prefix.prefix_len
    if pool is not None:
        if prefix is not None and prefix.block_size != pool.block_size:
            raise ValueError(f"prefix.block_size = {prefix.block_size} but pool.block_size = "
                             f"{pool.block_size}; hash both at the engine's block size")
        ids, off = pooled_hashes(prompt, group, prefix_len, pool.block_size, index)
        return dict(hash_ids=ids, hash_offsets=off, hash_block_size=pool.block_size)
    if prefix is None:
        return {}
    ids, off = synthetic_prefix_hashes(prompt, group, prefix_len, prefix.block_size)
    return dict(hash_ids=ids, hash_offsets=off, hash_block_size=prefix.block_size)


def generate_requests(n: int, arrivals: ArrivalProcess, prompt_len: Lengths,
                      output_len: Lengths, seed: SeedLike = None, *,
                      prefix: PrefixSharing | None = None, pool: PromptPool | None = None,
                      warmup: int = 0, timeout_s: float | None = None) -> Requests:
    """Draw ``n`` synthetic requests.

    Parameters
    ----------
    n : int
        Number of requests (warm-up included).
    arrivals : an arrival process
        :class:`ClosedLoop` gives NaN arrivals, sets ``concurrency`` and, with think time,
        ``client_delay_s``.
    prompt_len, output_len : LengthDist or int array
        Length distributions, or the lengths themselves (``n`` of them, or one per pool entry);
        ``prefix.prefix_len`` is added to the prompt when given.
    seed : int, SeedSequence or Generator
        Randomness. Arrivals, prompt lengths, output lengths, prefix groups, pool order and
        think times come from six independent child streams (``Generator.spawn``), so changing
        one component (e.g. the rate or the arrival process) leaves the others unchanged.
    prefix : PrefixSharing, optional
        Synthetic shared prefixes.
    pool : PromptPool, optional
        Draw ``pool.num_dataset_entries`` prompts once and cycle the requests through them.
    warmup, timeout_s
        As in :class:`Requests` (aiperf ``--warmup-request-count``; the client's timeout).

    Without a prefix or a pool the requests carry no hash ids.

    Examples
    --------
    >>> import numpy as np
    >>> a = generate_requests(4, PoissonArrivals(2.0), Fixed(8), Uniform(1, 4), seed=0)
    >>> b = generate_requests(4, PoissonArrivals(8.0), Fixed(8), Uniform(1, 4), seed=0)
    >>> bool(np.allclose(a.arrival_s, 4 * b.arrival_s)), bool((a.output_len == b.output_len).all())
    (True, True)
    """
    n = check_int("n", n, 0)
    rng_arr, rng_in, rng_out, rng_grp, rng_pool, rng_think = make_rng(seed).spawn(6)
    m = n if pool is None else pool.num_dataset_entries
    prompt = _lengths("prompt_len", prompt_len, m, rng_in)
    output = _lengths("output_len", output_len, m, rng_out)
    group = np.full(m, -1, dtype=np.int64)
    if prefix is not None:
        prompt = prompt + prefix.prefix_len
        group = rng_grp.integers(0, prefix.num_groups, m)
    index = None if pool is None else pool.pool_indices(n, rng_pool)
    hashes = _hashes(prompt, group, prefix, pool, index)
    if index is not None:
        prompt, output = prompt[index], output[index]
    return Requests(prompt_len=prompt, output_len=output, warmup=warmup, timeout_s=timeout_s,
                    **_client_fields(arrivals, n, rng_arr, rng_think), **hashes)


def _client_fields(arrivals, n: int, rng_arr, rng_think) -> dict:
    """The :class:`Requests` fields the client sets: send times, and what holds sends back
    (a closed loop and its think times, stages that drain, a concurrency cap)."""
    if isinstance(arrivals, InferencePerfArrivals):  # later stages start as earlier ones drain
        arrival, stages = arrivals.staged(n, rng_arr)
        return {"arrival_s": arrival, "stages": stages}
    fields = {"arrival_s": arrivals.sample(n, rng_arr),
              "max_concurrency": getattr(arrivals, "max_concurrency", None)}
    if isinstance(arrivals, ClosedLoop):
        fields.update(concurrency=arrivals.concurrency,
                      client_delay_s=arrivals.client_delays(n, rng_think))
    return fields
