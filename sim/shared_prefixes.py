"""Synthetic shared prefixes: :class:`PrefixSharing` and the hash ids it implies
(:func:`synthetic_prefix_hashes`), as Mooncake traces carry them; fixed prompt pools cycled
request by request (:class:`PromptPool`, :func:`pooled_hashes`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_pair, check_int, first_bad
from .requests import ragged_take


def synthetic_prefix_hashes(prompt_len: np.ndarray, group: np.ndarray, prefix_len: int,
                            block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash ids for prompts whose first ``prefix_len`` tokens are shared within a group.

    Parameters
    ----------
    prompt_len : int64[n]
        Prompt lengths (>= 1).
    group : int64[n]
        Prefix group of each request, ``0 .. G - 1``; a negative group shares nothing.
    prefix_len : int
        Tokens shared by all requests of a group (>= 0).
    block_size : int
        Tokens per hash block.

    Returns
    -------
    hash_ids, hash_offsets : int64 arrays
        As in :class:`Requests`. Block ``j`` of request ``i`` (tokens ``[j B, (j+1) B)``) is
        shared iff it lies entirely in the shared prefix, ``(j + 1) B <= min(prefix_len,
        prompt_len[i])``; its id is ``group * (prefix_len // B) + j``. Every other block (the one
        straddling the prefix end, the rest of the prompt) gets a fresh id, counting up from
        ``G * (prefix_len // B)``. So equal prefixes give equal leading ids, as in vLLM and Mooncake,
        where a block's hash covers all tokens up to its end.
    """
    group, prompt_len = as_pair(("group", group, np.int64), ("prompt_len", prompt_len, np.int64))
    first_bad("prompt_len", prompt_len, prompt_len < 1, "lengths must be >= 1")
    prefix_len = check_int("prefix_len", prefix_len, 0)
    block_size = check_int("block_size", block_size, 1)
    counts = -(-prompt_len // block_size)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    req = np.repeat(np.arange(len(counts)), counts)
    pos = np.arange(offsets[-1], dtype=np.int64) - offsets[:-1][req]
    per_group = prefix_len // block_size
    shared_blocks = np.where(group >= 0, np.minimum(prefix_len, prompt_len) // block_size, 0)
    shared = pos < shared_blocks[req]
    ids = np.empty(offsets[-1], dtype=np.int64)
    ids[shared] = group[req[shared]] * per_group + pos[shared]
    first_fresh = (int(group.max()) + 1 if len(group) else 0) * per_group
    ids[~shared] = first_fresh + np.arange(np.count_nonzero(~shared), dtype=np.int64)
    return ids, offsets


@dataclass(frozen=True)
class PrefixSharing:
    """Synthetic prefix sharing: ``num_groups`` shared prefixes of ``prefix_len`` tokens each.

    Each request picks a group uniformly at random and gets ``prefix_len`` shared tokens in front of
    its sampled prompt, so its prompt length is ``prefix_len + sampled``: ``vllm bench serve
    --random-prefix-len L`` is one group (one prefix for every request), aiperf
    ``--num-prefix-prompts G --prefix-prompt-length L`` is ``G`` groups picked at random. ``block_size`` is the hash granularity written to
    ``Requests.hash_block_size`` (vLLM's default KV block is 16 tokens).
    """

    num_groups: int
    prefix_len: int
    block_size: int = 16

    def __post_init__(self) -> None:
        check_int("num_groups", self.num_groups, 1)
        check_int("prefix_len", self.prefix_len, 0)
        check_int("block_size", self.block_size, 1)


POOL_STRATEGIES = ("sequential", "random", "shuffle")
"""aiperf ``--dataset-sampling-strategy`` values."""


@dataclass(frozen=True)
class PromptPool:
    """A fixed pool of ``num_dataset_entries`` prompts that the requests cycle through.

    Benchmark clients draw a dataset of a few distinct entries once and send them over and
    over (aiperf ``--num-dataset-entries``; genai-perf the same), so a prompt sent again hits
    the prefix cache in full. Each entry is a (prompt, output length) pair; request ``i``
    sends entry ``pool_indices(n)[i]``:

    * ``sequential``: ``i mod N``;
    * ``random``: uniform with replacement;
    * ``shuffle``: a fresh permutation of the entries for every pass over them;

    (aiperf ``--dataset-sampling-strategy``). ``block_size`` is the hash granularity.
    """

    num_dataset_entries: int
    dataset_sampling_strategy: str = "sequential"
    block_size: int = 16

    def __post_init__(self) -> None:
        check_int("num_dataset_entries", self.num_dataset_entries, 1)
        check_int("block_size", self.block_size, 1)
        if self.dataset_sampling_strategy not in POOL_STRATEGIES:
            raise ValueError(f"dataset_sampling_strategy must be one of {POOL_STRATEGIES}, "
                             f"got {self.dataset_sampling_strategy!r}")

    def pool_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The entry each of ``n`` requests sends."""
        n, m = check_int("n", n, 0), self.num_dataset_entries
        if self.dataset_sampling_strategy == "sequential":
            return np.arange(n, dtype=np.int64) % m
        if self.dataset_sampling_strategy == "random":
            return rng.integers(0, m, n).astype(np.int64)
        passes = -(-n // m)
        return np.concatenate([rng.permutation(m) for _ in range(passes)] or
                              [np.zeros(0, dtype=np.int64)])[:n].astype(np.int64)


def pooled_hashes(prompt_len: np.ndarray, group: np.ndarray, prefix_len: int, block_size: int,
                  index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hash ids of requests that send pool entries ``index``: the entries' own hash ids
    (:func:`synthetic_prefix_hashes` of the entries), repeated wherever an entry is sent
    again, so a repeated prompt shares every block with its earlier copies."""
    ids, offsets = synthetic_prefix_hashes(prompt_len, group, prefix_len, block_size)
    return ragged_take(ids, offsets, np.asarray(index, dtype=np.int64))
