"""Synthetic shared prefixes: :class:`PrefixSharing` and the hash ids it implies
(:func:`synthetic_prefix_hashes`), as Mooncake traces carry them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_array, check_int, first_bad


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
    prompt_len = as_array("prompt_len", prompt_len, np.int64)
    group = as_array("group", group, np.int64)
    if len(group) != len(prompt_len):
        raise ValueError(f"group has {len(group)} entries but prompt_len has {len(prompt_len)}")
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
    its sampled prompt (as ``vllm bench serve --random-prefix-len``), so its prompt length is
    ``prefix_len + sampled``. ``block_size`` is the hash granularity written to
    ``Requests.hash_block_size`` (vLLM's default KV block is 16 tokens).
    """

    num_groups: int
    prefix_len: int
    block_size: int = 16

    def __post_init__(self) -> None:
        check_int("num_groups", self.num_groups, 1)
        check_int("prefix_len", self.prefix_len, 0)
        check_int("block_size", self.block_size, 1)
