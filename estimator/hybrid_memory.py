"""KV memory of hybrid models: sliding-window and linear-attention layers beside full ones.

A model whose ``layer_types`` mix kinds (gpt-oss: sliding and full attention; Qwen3.5:
gated DeltaNet linear attention and full attention) keeps per layer kind:

* full attention: K and V of every token (blocks grow with the request);
* sliding window of ``W`` tokens: only the blocks that cover the window;
* linear attention: one fixed state per request (conv + recurrent,
  :func:`~.linear_attention.linear_state_bytes`), whatever its length.

**vLLM V1** (hybrid KV-cache allocator, ``vllm/v1/core/kv_cache_utils.py``,
``single_type_kv_cache_manager.py``, ``model_executor/models/config.py``):

1. Layers are grouped by spec, with ``group_size`` layers per group: the smallest kind's
   layer count, or the largest's when it is less than 1.25 times the smallest; a kind of
   ``n`` layers makes ``ceil(n / group_size)`` groups (the last one padded).
2. Every group has the same page (one block of one layer). With linear layers the
   attention block size is raised to ``16 ceil(state / (16 · bytes per token))`` so that an
   attention page holds one request's state of one layer, and the state page is padded to
   it (``HybridAttentionMambaModelConfig``).
3. One pool of ``num_blocks = floor(available / page / group_size)`` blocks serves every
   group (``get_num_blocks``; ``group_size`` tensors, each shared by one layer of every
   group); the minimum over ranks.
4. A request of ``n`` tokens holds ``ceil(n / bs)`` blocks in each full-attention group,
   ``min(ceil(n / bs), ceil((W - 1) / bs) + 1)`` in each sliding-window group (the window
   plus one: ``SlidingWindowManager`` frees the blocks that fall out of it) and one block in
   each linear-attention group (``MambaManager``).

The simulator's loop counts ``ceil(n / bs)`` blocks per request for one full-attention
group. What it is given for a hybrid model (:meth:`VLLMHybrid.sim_tokens`) is the pool less
the fixed part (window and state blocks) of ``max_num_seqs`` requests -- or of as many
requests of ``max_model_len`` as fit, if fewer -- divided by the number of full-attention
groups: exact when every sequence slot is taken by a request longer than the window, and
an under-estimate of the room of fewer, shorter requests. Prefix caching, which vLLM turns
off for these models (0.10 – 0.11), is not modelled for their window and state blocks.

**SGLang** (``model_runner``: ``handle_max_mamba_cache``, ``set_num_tokens_hybrid_swa``):
linear layers take ``max_running_requests`` states when the radix cache is off (512
without a cap; both split among attention-DP ranks), else ``mamba_full_memory_ratio /
(1 + ratio)`` of the KV budget; the full layers share the rest. The state pool also caps
the requests that run at once (``init_memory_pool``: ``max_num_reqs = min(max_num_reqs,
max_mamba_cache_size // ratio)``, ratio 1 without the radix cache, 3 with it:
:func:`sglang_state_request_cap`). Sliding-window layers get ``swa_full_tokens_ratio``
(0.8) as many tokens as full ones from the budget of all attention layers; the window
pool is taken as never the binding one.

**TensorRT-LLM**: the recurrent states of ``max_batch_size`` requests are set aside
(``MambaHybridCacheManager``) and the KV pool serves the full-attention layers; sliding
layers keep full-length KV (its default ``max_attention_window`` is the sequence length
on every layer; a per-layer window is not modelled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .linear_attention import linear_state_bytes
from .specs import ModelSpec

__all__ = ["StageLayers", "VLLMHybrid", "stage_layers", "vllm_hybrid", "vllm_hybrid_plan",
           "state_bytes", "sglang_linear_reserve", "sglang_state_request_cap",
           "sglang_swa_tokens", "HYBRID_GROUP_SPREAD"]

HYBRID_GROUP_SPREAD = 1.25
"""vLLM groups all layers of a kind together when the kinds' counts differ by less."""
MAMBA_FULL_MEMORY_RATIO = 0.9
"""SGLang's default ``mamba_full_memory_ratio`` (state memory over full-attention KV)."""
SWA_FULL_TOKENS_RATIO = 0.8
"""SGLang's default ``swa_full_tokens_ratio`` (window-pool tokens over full-pool tokens)."""
SGLANG_MAMBA_DEFAULT = 512
"""SGLang's state slots without the radix cache and without ``max_running_requests``."""
SGLANG_STATES_PER_REQUEST_RADIX = 3
"""SGLang's ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``: state slots per running request
with the radix cache on (one without it)."""


@dataclass(frozen=True)
class StageLayers:
    """Layers of each kind on one pipeline stage."""

    full: int
    sliding: int
    linear: int

    @property
    def attention(self) -> int:
        """Layers with a per-token KV cache (full and sliding)."""
        return self.full + self.sliding


def stage_layers(model: ModelSpec, layers: Sequence[int]) -> list[StageLayers]:
    """The kinds of the layers on each stage (``layers``: layers per stage, in order). A
    model without ``layer_types`` has only full attention (its windowed fraction, Gemma-2 /
    Mistral, is planned as full attention: see ``docs/memory.md``)."""
    kinds = model.layer_types or ("full_attention",) * model.num_layers
    out, start = [], 0
    for n in layers:
        part = kinds[start:start + n]
        out.append(StageLayers(part.count("full_attention"), part.count("sliding_attention"),
                               part.count("linear_attention")))
        start += n
    return out


def state_bytes(model: ModelSpec, tp: int) -> float:
    """One request's state in one linear-attention layer on one rank (conv + recurrent;
    0 for a model without linear layers)."""
    return sum(linear_state_bytes(model, tp)) if model.num_linear_layers else 0.0


# ----------------------------------------------------------------------------------- vLLM
@dataclass(frozen=True)
class VLLMHybrid:
    """vLLM's hybrid allocation of one instance (module docstring)."""

    block_size: int
    page_bytes: float  # one block of one layer
    group_size: int
    full_groups: int
    sliding_groups: int
    linear_groups: int
    window: int
    num_blocks: int  # the shared pool, null block included
    state_bytes: float  # one request's state in one linear layer
    stage: int = 0  # the pipeline stage with the fewest blocks

    @property
    def window_blocks(self) -> int:
        """Blocks a sliding-window group keeps for a long request (the window plus one)."""
        return math.ceil((self.window - 1) / self.block_size) + 1 if self.window else 0

    @property
    def fixed_blocks(self) -> int:
        """Blocks of a long request outside its full-attention groups."""
        return self.sliding_groups * self.window_blocks + self.linear_groups

    def blocks_per_request(self, tokens: int) -> int:
        n = math.ceil(tokens / self.block_size)
        return (self.full_groups * n + self.sliding_groups * min(n, self.window_blocks)
                + self.linear_groups)

    def max_requests(self, tokens: int) -> int:
        """Requests of ``tokens`` tokens the pool holds at once (the null block excluded)."""
        return max(self.num_blocks - 1, 0) // self.blocks_per_request(tokens)

    def sim_tokens(self, max_num_seqs: int, max_model_len: int) -> int:
        """Full-attention tokens the simulator's one-group block count may place: the pool
        less the fixed blocks of ``min(max_num_seqs, max_requests(max_model_len))``
        requests, over the full-attention groups."""
        reserve = min(max_num_seqs, max(self.max_requests(max_model_len), 1))
        free = max(self.num_blocks - 1 - reserve * self.fixed_blocks, 0)
        return free // max(self.full_groups, 1) * self.block_size

    def describe(self) -> str:
        parts = [f"{n} {kind}" for n, kind in ((self.full_groups, "full"),
                                              (self.sliding_groups,
                                               f"sliding (window {self.window})"),
                                              (self.linear_groups, "linear-state"))
                 if n]
        return (f"vLLM hybrid allocator: {' + '.join(parts)} groups of {self.group_size} "
                f"layers sharing {self.num_blocks:,} blocks of {self.block_size} tokens")


def vllm_block_size(model: ModelSpec, tp: int, per_tok_layer: float, block_size: int) -> int:
    """The attention block size vLLM uses: ``block_size``, raised for linear layers to the
    smallest multiple of 16 whose page holds one layer's state."""
    state = state_bytes(model, tp)
    if not state:
        return block_size
    return max(block_size, 16 * math.ceil(state / (16 * per_tok_layer)))


def _group_size(counts: Sequence[int]) -> int:
    present = [n for n in counts if n]
    small, large = min(present), max(present)
    return large if large < small * HYBRID_GROUP_SPREAD else small


def vllm_hybrid(model: ModelSpec, tp: int, stages: Sequence[StageLayers],
                available: Sequence[float], per_tok_layer: float, block_size: int) -> VLLMHybrid:
    """vLLM's allocation (module docstring) from each stage's layers and KV bytes."""
    bs = vllm_block_size(model, tp, per_tok_layer, block_size)
    page = bs * per_tok_layer
    counts = []
    for st in stages:
        g = _group_size((st.full, st.sliding, st.linear))
        blocks = math.floor(max(available[len(counts)], 0.0) / page / g)
        counts.append((blocks, g, st))
    stage = min(range(len(counts)), key=lambda s: counts[s][0])  # every rank keeps the min
    blocks, g, st = counts[stage]
    return VLLMHybrid(block_size=bs, page_bytes=page, group_size=g,
                      full_groups=math.ceil(st.full / g), sliding_groups=math.ceil(st.sliding / g),
                      linear_groups=math.ceil(st.linear / g), window=model.sliding_window,
                      num_blocks=blocks, state_bytes=state_bytes(model, tp), stage=stage)


def vllm_hybrid_plan(setup, budget, block_size: int, max_num_seqs: int,
                     override: int | None) -> tuple[int, int, int, int, dict]:
    """vLLM's hybrid allocation of a :class:`~.memory.Setup` under a
    :class:`~.memory.KVBudget`: the block size, the shared pool's blocks
    (``num_gpu_blocks_override`` replaces the count), the full-attention tokens the
    simulator may place, the worst stage and the plan's hybrid fields (with
    ``group_layers``, the layers one block spans, for the override check)."""
    alloc = vllm_hybrid(setup.model, setup.par.tp, setup.kinds,
                        [budget.available(s) for s in range(setup.par.pp)],
                        setup.per_tok_layer, block_size)
    if override is not None:
        alloc = replace(alloc, num_blocks=override)
    hybrid = dict(kv_groups=alloc.describe(),
                  state_bytes_per_request=alloc.state_bytes * setup.kinds[alloc.stage].linear,
                  max_concurrent_requests=alloc.max_requests(setup.max_len),
                  group_layers=alloc.group_size)
    return (alloc.block_size, alloc.num_blocks, alloc.sim_tokens(max_num_seqs, setup.max_len),
            alloc.stage, hybrid)


# --------------------------------------------------------------------------------- SGLang
def sglang_linear_reserve(model: ModelSpec, tp: int, st: StageLayers, available: float,
                          max_running_requests: int | None, radix_cache: bool,
                          ratio: float = MAMBA_FULL_MEMORY_RATIO, dp: int = 1
                          ) -> tuple[float, int]:
    """``(bytes, requests)``: the memory SGLang gives the linear layers' states on one stage
    and the request slots that makes (``max_running_requests``: one attention-DP rank's
    share, None when not given: SGLang's 512 split among the ``dp`` ranks)."""
    per_request = state_bytes(model, tp) * st.linear
    if not per_request:
        return 0.0, 0
    if radix_cache:
        slots = int(max(available, 0.0) * ratio / (1 + ratio) // per_request)
    else:
        slots = max_running_requests or max(SGLANG_MAMBA_DEFAULT // max(dp, 1), 1)
    return slots * per_request, slots


def sglang_state_request_cap(slots: int, radix_cache: bool) -> int:
    """Requests SGLang lets run at once with ``slots`` linear-attention states (0: no state
    pool, no cap)."""
    return slots // (SGLANG_STATES_PER_REQUEST_RADIX if radix_cache else 1)


def sglang_swa_tokens(tokens_all_layers: int, st: StageLayers,
                      ratio: float = SWA_FULL_TOKENS_RATIO) -> int:
    """Full-attention tokens when sliding layers get ``ratio`` as many: the budget of
    ``tokens_all_layers`` tokens on every attention layer, split so that
    ``swa · sliding + full · full_layers = tokens · layers`` with ``swa = ratio · full``."""
    if not st.sliding:
        return tokens_all_layers
    return int(tokens_all_layers * st.attention / (ratio * st.sliding + st.full))
