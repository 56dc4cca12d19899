"""Request arrays and the synthetic workloads that fill them.

The simulator consumes one :class:`Requests` object: a frozen structure of arrays (no per-request
Python objects) holding arrival times, prompt and output lengths and, optionally, the prefix-block
hash ids that the KV block manager uses for prefix caching.

Building blocks, all seeded explicitly (an ``int``, a :class:`numpy.random.SeedSequence` or a
:class:`numpy.random.Generator`; never global random state):

* arrival processes (:mod:`.arrivals`) -- :class:`PoissonArrivals`, :class:`GammaArrivals`,
  :class:`ConstantArrivals`, :class:`TraceArrivals` and the closed-loop marker :class:`ClosedLoop`;
* length distributions that carry their moments (:mod:`.lengths`) -- :class:`Fixed`,
  :class:`Uniform`, :class:`LogNormal`, :class:`Empirical`;
* synthetic shared prefixes (:mod:`.shared_prefixes`) -- :class:`PrefixSharing`,
  :func:`synthetic_prefix_hashes`;
* the container :class:`Requests` and :func:`tile_requests`, which repeats a trace
  (:mod:`.requests`);
* :func:`generate_requests` (here) ties them together.

This module re-exports the public names of all of them: import from here.

Common random numbers: every renewal process draws a *unit-rate* pattern (mean inter-arrival 1 s)
that does not depend on the rate, and ``sample(n, seed) == unit_pattern(n, seed) / rate`` bit for
bit. :func:`generate_requests` draws arrivals, prompt lengths, output lengths and prefix groups from
four independent child streams of the seed, so calling it with the same seed at another rate gives
the same lengths and the same arrival pattern, only scaled -- what a goodput bisection needs.
"""

from __future__ import annotations

from ._checks import SeedLike, check_int, make_rng
from .arrivals import (
    ArrivalProcess,
    ClosedLoop,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    TraceArrivals,
    scale_pattern,
)
from .lengths import Empirical, Fixed, LengthDist, LogNormal, Uniform
from .requests import MOONCAKE_BLOCK_SIZE, Requests, closed_loop_predecessor, tile_requests
from .shared_prefixes import PrefixSharing, synthetic_prefix_hashes

__all__ = [
    "MOONCAKE_BLOCK_SIZE", "ArrivalProcess", "ClosedLoop", "ConstantArrivals", "Empirical", "Fixed",
    "GammaArrivals", "LengthDist", "LogNormal", "PoissonArrivals", "PrefixSharing", "Requests",
    "SeedLike", "TraceArrivals", "Uniform", "closed_loop_predecessor", "generate_requests",
    "scale_pattern", "synthetic_prefix_hashes", "tile_requests",
]


def generate_requests(n: int, arrivals: ArrivalProcess, prompt_len: LengthDist,
                      output_len: LengthDist, seed: SeedLike = None, *,
                      prefix: PrefixSharing | None = None) -> Requests:
    """Draw ``n`` synthetic requests.

    Parameters
    ----------
    n : int
        Number of requests.
    arrivals : PoissonArrivals, GammaArrivals, ConstantArrivals, TraceArrivals or ClosedLoop
        Arrival process; :class:`ClosedLoop` gives NaN arrivals and sets ``concurrency``.
    prompt_len, output_len : LengthDist
        Length distributions (``prefix.prefix_len`` is added to the prompt when given).
    seed : int, SeedSequence or Generator
        Randomness. Arrivals, prompt lengths, output lengths and prefix groups come from four
        independent child streams (``Generator.spawn``), so changing one component (e.g. the rate
        or the arrival process) leaves the others unchanged for the same seed.
    prefix : PrefixSharing, optional
        Synthetic shared prefixes; without it the requests carry no hash ids.

    Examples
    --------
    >>> import numpy as np
    >>> a = generate_requests(4, PoissonArrivals(2.0), Fixed(8), Uniform(1, 4), seed=0)
    >>> b = generate_requests(4, PoissonArrivals(8.0), Fixed(8), Uniform(1, 4), seed=0)
    >>> bool(np.allclose(a.arrival_s, 4 * b.arrival_s)), bool((a.output_len == b.output_len).all())
    (True, True)
    """
    n = check_int("n", n, 0)
    rng_arr, rng_in, rng_out, rng_grp = make_rng(seed).spawn(4)
    prompt = prompt_len.sample(n, rng_in)
    hashes: dict = {}
    if prefix is not None:
        prompt = prompt + prefix.prefix_len
        group = rng_grp.integers(0, prefix.num_groups, n)
        ids, off = synthetic_prefix_hashes(prompt, group, prefix.prefix_len, prefix.block_size)
        hashes = dict(hash_ids=ids, hash_offsets=off, hash_block_size=prefix.block_size)
    closed = isinstance(arrivals, ClosedLoop)
    return Requests(arrival_s=arrivals.sample(n, rng_arr), prompt_len=prompt,
                    output_len=output_len.sample(n, rng_out),
                    concurrency=arrivals.concurrency if closed else None, **hashes)
