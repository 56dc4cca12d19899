"""Disaggregated rows of the Blackwell sample as prefill/decode pools.

A ``disagg`` row gives each role's worker count, per-worker ``max_batch_size`` and
parallelism (``prefill_*`` / ``decode_*``). It becomes two pools of the same served
checkpoint: ``prefill_num_workers`` prefill instances and ``decode_num_workers`` decode
instances, with the generator's per-role flags (``methodology/*.rule``):

* prefill: ``max_num_seqs = prefill_batch_size``, token budget ``isl + 1500``;
* decode: ``max_num_seqs = decode_batch_size``, token budget ``decode_batch_size`` under
  vLLM (chunked prefill on); SGLang sets ``max_prefill_tokens = isl + 1500`` on every role,
  and under TensorRT-LLM (no chunked prefill) serveplan's decode instance admits a handed-off
  request in a step over its prompt, so its budget is the prefill's ``isl + 1500`` rather
  than the rule's ``decode_batch_size`` (an approximation: the real decode engine only
  loads the transferred KV);
* CUDA graphs captured for every batch size up to the role's batch (both roles);
* TensorRT-LLM rounds every budget up to its 32-token blocks, and its prefill workers run
  without the overlap scheduler (``prefill disable_overlap_scheduler = true``): the prefill
  pool schedules synchronously, so a request arriving during a step joins the next one.

The KV cache moves from the prefill to the decode instance over serveplan's default link
for the pair (NVLink inside a node or NVL72 rack, else the scale-out NIC; nixl in the
generator), the handoff router's defaults (``round-robin`` decode routing, early
assignment) stand for Dynamo's. A role with attention data parallelism runs ``dp`` ranks
of ``batch_size`` requests each (experts laid out by :func:`layout_reason`), and rows that
do not record the worker counts and batch sizes (the ``2026_03_25`` / ``2026_04_06``
dumps) are refused: their deployment cannot be rebuilt.
"""

from __future__ import annotations

from serveplan.estimator.runtime import DP_SHARED_LIMITS

__all__ = ["DP_DISPATCH", "TRTLLM_BLOCK", "disagg_pools", "disagg_reason", "layout_reason",
           "moe_fields", "server_wide", "token_budget"]

TRTLLM_BLOCK = 32
"""TensorRT-LLM's ``tokens_per_block`` in the generator's rule (budgets are multiples)."""
MOE_EP_SPLIT = "moe_ep does not divide the worker's tp x attention_dp GPUs"
UNRECORDED = "disaggregated: worker counts and batch sizes not recorded"


DEFAULT_BLOCK = 16
"""The simulator's KV block when the pool sets none (SGLang's default page of 1 token is
modelled as 16-token blocks, so its budget is truncated to whole blocks)."""


def token_budget(engine: str, tokens: int, page: int = 1) -> int:
    """A step's token budget under ``engine``: TensorRT-LLM rounds up to 32-token blocks;
    SGLang truncates a prefill chunk to whole pages of ``page`` tokens."""
    if engine == "trtllm":
        return -(-tokens // TRTLLM_BLOCK) * TRTLLM_BLOCK
    if engine == "sglang":
        return max(page, tokens // page * page)
    return tokens


def layout_reason(tp: int, dp: int, ep: int) -> str | None:
    """Why a worker of ``tp`` x ``dp`` (attention) ranks with ``moe_ep = ep`` cannot be
    laid out, or None: ``ep`` groups of ``moe_tp = tp * dp / ep`` ranks each hold their
    experts sharded that many ways
    (:attr:`~serveplan.estimator.specs.Parallelism.moe_tp`); under attention DP sharded
    experts see every rank's tokens (all-gather, reduce-scatter), whole ones get their own
    by all-to-all."""
    if (tp * max(dp, 1)) % max(ep, 1):  # 0: not recorded (one)
        return MOE_EP_SPLIT
    return None


def moe_fields(tp: int, dp: int, ep: int) -> dict:
    """A pool's ``dp`` / ``ep`` fields (none for a plain tensor-parallel worker)."""
    return {"dp": dp, "ep": ep} if dp > 1 or ep > 1 else {}


DP_DISPATCH = {"vllm": "least-requests", "sglang": "round-robin",
               "trtllm": "least-outstanding-tokens"}
"""How each engine spreads requests over its attention-DP ranks, as a colocated router:
vLLM's DP coordinator scores ``4 x waiting + running``; SGLang's data-parallel controller
goes round robin (its default ``load_balance_method``); TensorRT-LLM's request queue gives
each new request to the rank with the fewest active tokens."""


def disagg_reason(row) -> str | None:
    """Why the disaggregated ``row`` cannot be laid out as PD pools, or None."""
    roles = (row.prefill, row.decode)
    for r in roles:
        reason = layout_reason(r.tp, r.dp, r.ep)
        if reason:
            return "disaggregated: " + reason
    if any(r.workers is None or r.batch is None for r in roles):
        return UNRECORDED
    return None


def server_wide(engine: str, per_rank: int, dp: int) -> int:
    """The server flag that gives each of ``dp`` attention-DP ranks ``per_rank`` (the
    generator records batch sizes and budgets per rank; the engines that divide a flag
    among their ranks: :data:`~serveplan.estimator.runtime.DP_SHARED_LIMITS`)."""
    return per_rank * max(dp, 1) if engine in DP_SHARED_LIMITS else per_rank


def every_batch_size(max_batch_size: int) -> list[int]:
    """The rules' CUDA-graph batch sizes: ``range(1, max_batch_size + 1)``, every batch a
    worker (an attention-DP rank) can run."""
    return list(range(1, max_batch_size + 1))


def disagg_pools(row, base: dict) -> dict:
    """The pools config of the disaggregated ``row``; ``base`` holds the fields both roles
    share (model, GPU, precision, engine, KV block)."""
    p, d = row.prefill, row.decode
    page = base.get("block_size", DEFAULT_BLOCK)
    prefill_budget = token_budget(row.engine, row.isl + 1500, page)
    decode_budget = (token_budget(row.engine, d.batch) if row.engine == "vllm"
                     else prefill_budget)
    e = row.engine
    prefill = {**base, "role": "prefill", "tp": p.tp, "pp": p.pp, "count": p.workers,
               "max_num_seqs": server_wide(e, p.batch, p.dp),
               "max_num_batched_tokens": server_wide(e, prefill_budget, p.dp),
               "cuda_graph_sizes": every_batch_size(p.batch), **moe_fields(p.tp, p.dp, p.ep)}
    if e == "trtllm" and "engine" in base:  # the rule's prefill disable_overlap_scheduler
        prefill["async_scheduling"] = False
    decode = {**base, "role": "decode", "tp": d.tp, "pp": d.pp, "count": d.workers,
              "max_num_seqs": server_wide(e, d.batch, d.dp),
              "max_num_batched_tokens": server_wide(e, decode_budget, d.dp),
              "cuda_graph_sizes": every_batch_size(d.batch), **moe_fields(d.tp, d.dp, d.ep)}
    return {"pools": [prefill, decode]}
