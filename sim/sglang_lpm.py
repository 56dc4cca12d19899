"""SGLang's ``lpm`` schedule policy: the waiting queue by longest cached prefix (compiled).

Followed: ``SchedulePolicy.calc_priority`` in SGLang's ``schedule_policy.py`` (v0.4.x -
v0.5.x), called as ``get_new_batch_prefill`` starts building a prefill batch:

* with more than 128 waiting requests ``lpm`` falls back to ``fcfs`` (the matching is too
  expensive, ``_determine_active_policy``);
* each waiting request, in queue order, is matched against the radix cache; a request whose
  match is at most 32 tokens (``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD``) is also matched
  against the prefixes of the waiting requests before it that were put in a temporary tree:
  if it shares at least 32 tokens with one of them
  (``IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD``) it is deprioritised -- the earlier
  one computes the shared prefix and this one will hit the cache --, else its prefix joins
  the tree (``_compute_prefix_matches``);
* the queue is sorted, stably, by longest match first, deprioritised requests last
  (``_sort_by_longest_prefix``), and stays in that order.

The radix cache is the simulator's block-hash cache, so matches count whole blocks of the
instance's block size (SGLang's radix tree matches token by token with ``page_size`` 1); the
in-batch test compares the first ``ceil(32 / block_size)`` blocks.
"""

from __future__ import annotations

from ._jitcache import sim_jit
from .state import (
    G_HASH_BLOCK,
    I_WHEAD,
    I_WLEN,
    K_BLOCK,
    K_PREFIX,
    block_key,
    cdiv,
    find_cached_blocks,
)

LPM_MAX_WAITING = 128  # SchedulePolicy._determine_active_policy
IN_BATCH_CHECK_TOKENS = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
IN_BATCH_DEPRIORITIZE_TOKENS = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD
DEPRIORITIZED = 1 << 62  # sort key of a deprioritised request (after every match)


@sim_jit
def _shares_blocks(reqs, r, q, nblk, bs, hash_block):
    """Whether the first ``nblk`` blocks of ``r`` and ``q`` hold the same tokens."""
    for k in range(nblk):
        if block_key(reqs, r, k, bs, hash_block) != block_key(reqs, q, k, bs, hash_block):
            return False
    return True


@sim_jit
def _in_tree(reqs, q, nblk, bs):
    """Whether waiting request ``q`` (its key already set) put its prefix in the temporary
    tree: a short match, not deprioritised, and ``nblk`` full blocks to share."""
    return (reqs.prio[q] != DEPRIORITIZED and -reqs.prio[q] <= IN_BATCH_CHECK_TOKENS
            and reqs.prompt[q] // bs >= nblk)


@sim_jit
def lpm_sort(pool, inst, reqs, knobs, glob, i):
    """Sort instance ``i``'s waiting queue as SGLang's ``lpm`` does (module docstring)."""
    n = inst.ist[i, I_WLEN]
    if n < 2 or n > LPM_MAX_WAITING or knobs[i, K_PREFIX] == 0:
        return
    bs, hb = knobs[i, K_BLOCK], glob[G_HASH_BLOCK]
    nblk = cdiv(IN_BATCH_DEPRIORITIZE_TOKENS, bs)
    cap, head = inst.wq.shape[1], inst.ist[i, I_WHEAD]
    for a in range(n):
        r = inst.wq[i, (head + a) % cap]
        match = find_cached_blocks(pool, inst, reqs, knobs, glob, i, r) * bs
        reqs.prio[r] = -match
        if match > IN_BATCH_CHECK_TOKENS or reqs.prompt[r] // bs < nblk:
            continue
        for b in range(a):
            q = inst.wq[i, (head + b) % cap]
            if _in_tree(reqs, q, nblk, bs) and _shares_blocks(reqs, r, q, nblk, bs, hb):
                reqs.prio[r] = DEPRIORITIZED
                break
    for a in range(1, n):  # stable insertion sort by key
        r = inst.wq[i, (head + a) % cap]
        b = a
        while b > 0 and reqs.prio[inst.wq[i, (head + b - 1) % cap]] > reqs.prio[r]:
            inst.wq[i, (head + b) % cap] = inst.wq[i, (head + b - 1) % cap]
            b -= 1
        inst.wq[i, (head + b) % cap] = r


__all__ = ["DEPRIORITIZED", "IN_BATCH_CHECK_TOKENS", "IN_BATCH_DEPRIORITIZE_TOKENS",
           "LPM_MAX_WAITING", "lpm_sort"]
