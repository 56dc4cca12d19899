"""gpt-oss and Qwen3.5 (hybrid layer layouts) and vLLM's hybrid KV-cache allocator.

The expected values are written out from the models' config.json (the catalog ships them
verbatim) and from vLLM's rules (``vllm/v1/core/kv_cache_utils.py``: groups of equal page
size, ``num_blocks = available // page // group_size``; ``model_executor/models/config.py``:
the attention block size raised to hold one layer's linear-attention state); the planner's
KV budget (``available_kv_bytes``) is the input of each hand computation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.engine_memory import plan_engine_memory
from serveplan.estimator.memory import plan_memory
from serveplan.estimator.ops import build_ops
from serveplan.estimator.specs import ModelSpec, Parallelism, SpecError
from serveplan.kernels import roofline as K

E2E = Path(__file__).resolve().parents[2] / "shared" / "data" / "e2e" / "aic_silicon_blackwell"


# ------------------------------------------------------------------------------ parsing
def test_gpt_oss_layout_from_its_config():
    """config.json: 36 layers alternating sliding (even) / full, window 128, 64 query and
    8 KV heads of 64, 128 experts top-4 of width 2880, MXFP4 experts, the rest bf16."""
    m = resolve_model("openai/gpt-oss-120b")
    assert m.layer_types[:2] == ("sliding_attention", "full_attention")
    assert m.layer_types.count("sliding_attention") == 18 and m.sliding_fraction == 0.5
    assert (m.sliding_window, m.head_dim, m.num_heads, m.num_kv_heads) == (128, 64, 64, 8)
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (128, 4, 2880)
    assert m.num_moe_layers == 36 and m.attention_sinks and m.qkv_bias
    assert m.quantization.experts.kind == "mxfp4"
    assert {m.quantization.qkv.kind, m.quantization.o_proj.kind, m.quantization.lm_head.kind,
            m.quantization.kv_cache} == {"bf16"}


def test_qwen35_layout_from_its_config():
    """text_config: 60 layers, every 4th full attention (15), 45 gated DeltaNet layers with
    16 key / 64 value heads of 128, conv kernel 4, fp32 recurrent state; 512 experts top-10
    of 1024 plus one shared expert of 1024; the NVFP4 checkpoint: NVFP4 experts, fp8 KV."""
    m = resolve_model("Qwen/Qwen3.5-397B-A17B")
    assert m.num_linear_layers == 45 and m.layer_types[3] == "full_attention"
    assert (m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim,
            m.linear_value_head_dim, m.linear_conv_kernel_dim) == (16, 64, 128, 128, 4)
    assert m.linear_state_dtype == "fp32" and m.attn_output_gate and m.qk_norm
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (32, 2, 256)
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (512, 10, 1024)
    assert (m.num_shared_experts, m.shared_intermediate_size) == (1, 1024)
    q = resolve_model("nvidia/Qwen3.5-397B-A17B-NVFP4").quantization
    assert (q.experts.kind, q.qkv.kind, q.shared_experts.kind, q.kv_cache) == (
        "nvfp4", "bf16", "bf16", "fp8")


def test_existing_models_have_no_layer_types():
    """Gemma-2 and Mistral keep their windowed fraction and no per-layer layout: their op
    tables and memory plans are the ones the golden tests hold."""
    for name in ("gemma-2-9b", "llama-3.1-8b", "qwen3-30b-a3b"):
        m = resolve_model(name)
        assert m.layer_types == () and not m.is_hybrid and m.num_linear_layers == 0


def test_bad_layer_types_name_the_field(tmp_path):
    cfg = json.loads(Path(resolve_model.__code__.co_filename).parent.joinpath(
        "data", "models", "openai--gpt-oss-120b.json").read_text())
    with pytest.raises(SpecError, match="layer_types must list 36"):
        ModelSpec.from_hf_config({**cfg, "layer_types": ["full_attention"] * 3})
    with pytest.raises(SpecError, match="layer_types has \\['global'\\]"):
        ModelSpec.from_hf_config({**cfg, "layer_types": ["global"] * 36})
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "layer_types": ["sliding_attention"] * 5}))
    res = CliRunner().invoke(app, ["memory", "-m", str(path), "-g", "b200"])
    assert res.exit_code == 1 and "layer_types must list 36" in res.output
    assert "Traceback" not in res.output


# ------------------------------------------------------------------------------ op rows
def _rows(table, name):
    return table.ops[[i for i, n in enumerate(table.names) if n == name]]


def test_qwen35_op_rows_by_hand():
    """tp=8: a full-attention layer's QKV GEMM has (32/8 x 2 (output gate) + 2 x 1) x 256 =
    2560 columns on 1/4 of the layers; a DeltaNet layer (3/4 of them) reads and writes per
    request its conv state (2x16x128 + 64x128)/8 x 3 x 2 B = 9216 B and its recurrent
    state 64/8 x 128 x 128 x 4 B = 524288 B, and its in_proj_qkvz has
    (2 x 2x128 + 2 x 8x128) = 2560 columns."""
    t = build_ops(resolve_model("qwen3.5-397b-a17b"), Parallelism(tp=8))
    qkv = _rows(t, "qkv_proj")[0]
    assert qkv[K.C_X1] == 2560 and qkv[K.C_X2] == 4096 and qkv[K.C_FRAC] == 0.25
    state = _rows(t, "gdn.state")[0]
    assert state[K.C_BASIS] == K.B_ROWS and state[K.C_FRAC] == 0.75
    assert state[K.C_B] == 2 * (9216 + 524288)
    inproj = _rows(t, "gdn.in_proj_qkvz")[0]
    assert inproj[K.C_X1] == 2560 and inproj[K.C_FRAC] == 0.75
    attn = _rows(t, "attn_decode")[0]
    assert attn[K.C_FRAC] == 0.25 and not _rows(t, "attn_decode_swa").size


def test_gpt_oss_op_rows_split_windows():
    """Half the layers attend over 128 tokens, half over the whole context; no linear rows."""
    t = build_ops(resolve_model("gpt-oss-120b"), Parallelism(tp=2))
    full, swa = _rows(t, "attn_decode")[0], _rows(t, "attn_decode_swa")[0]
    assert (full[K.C_FRAC], full[K.C_WINDOW]) == (0.5, 0.0)
    assert (swa[K.C_FRAC], swa[K.C_WINDOW]) == (0.5, 128.0)
    assert _rows(t, "qkv_proj")[0][K.C_FRAC] == 1.0 and not _rows(t, "gdn.state").size


def test_decode_state_traffic_grows_with_the_batch():
    """A decode step of B requests moves B x 2 x (conv + recurrent) bytes per DeltaNet layer
    for the state (the B_ROWS basis: one state per request in the step)."""
    t = build_ops(resolve_model("qwen3.5-397b-a17b"), Parallelism(tp=8))
    r = [i for i, n in enumerate(t.names) if n == "gdn.state"][0]
    agg = np.zeros((t.ops.shape[0], K.N_AGG))
    prm = np.zeros(K.N_PARAMS)
    for batch in (1, 64):
        _, q, busy = K._work_traffic(K.B_ROWS, r, float(batch), float(batch), agg, t.ops, prm)
        assert busy and q == batch * 2 * (9216 + 524288)


# --------------------------------------------------------------------- vLLM's allocator
def test_vllm_sliding_window_blocks_by_hand():
    """gpt-oss, tp=8, b200: K+V of one token in one layer = 2 x (8/8) x 64 x 2 B = 256 B;
    a block of 16 tokens = 4096 B. 18 sliding + 18 full layers: equal counts, so one group
    of each, 18 layers per group, and num_blocks = available // 4096 // 18 (twice what all
    36 layers as full attention would get). A request of n tokens holds ceil(n/16) blocks
    in the full group and min(ceil(n/16), ceil(127/16) + 1 = 9) in the sliding one."""
    max_len, seqs = 16384, 256
    plan = plan_memory("gpt-oss-120b", "b200", Parallelism(tp=8), max_model_len=max_len,
                       max_num_seqs=seqs)
    n = math.floor(plan.available_kv_bytes / 4096 / 18)
    assert plan.block_size == 16 and plan.num_gpu_blocks == n
    per_request = math.ceil(max_len / 16) + 9
    assert plan.max_concurrent_requests == (n - 1) // per_request
    reserve = min(seqs, (n - 1) // per_request)
    assert plan.kv_tokens == (n - 1 - reserve * 9) * 16
    uniform = math.floor(plan.available_kv_bytes / 4096 / 36)
    assert plan.num_gpu_blocks in (2 * uniform, 2 * uniform + 1)


def test_vllm_linear_attention_blocks_by_hand():
    """Qwen3.5 bf16, tp=8, b200: one token of one full-attention layer = 2 x max(1, 2/8) x
    256 x 2 B = 1024 B; one request's state in one DeltaNet layer = 9216 + 524288 =
    533504 B, so the block size becomes 16 x ceil(533504 / (16 x 1024)) = 528 tokens (page
    540672 B). 15 full / 45 linear layers: 45 >= 1.25 x 15, so groups of 15 layers: 1 full
    + 3 linear; num_blocks = available // 540672 // 15; a request holds ceil(n/528) + 3."""
    max_len, seqs = 16384, 64
    plan = plan_memory("qwen3.5-397b-a17b", "b200", Parallelism(tp=8), max_model_len=max_len,
                       max_num_seqs=seqs)
    n = math.floor(plan.available_kv_bytes / 540672 / 15)
    assert plan.block_size == 528 and plan.num_gpu_blocks == n
    per_request = math.ceil(max_len / 528) + 3
    assert plan.max_concurrent_requests == (n - 1) // per_request
    assert plan.kv_tokens == (n - 1 - min(seqs, (n - 1) // per_request) * 3) * 528
    assert plan.state_bytes_per_request == 45 * 533504


def test_sglang_linear_states_by_hand():
    """SGLang without the radix cache: max_running_requests = 32 state slots of 45 x 533504
    B each come out of the KV budget (budget - weights); the full-attention layers share the
    rest at 15 x 1024 B per token."""
    plan = plan_engine_memory("sglang", "qwen3.5-397b-a17b", "b200", Parallelism(tp=8),
                              max_model_len=16384, max_running_requests=32,
                              disable_radix_cache=True)
    rest = plan.budget_bytes - plan.weights_bytes
    assert plan.kv_tokens == math.floor((rest - 32 * 45 * 533504) / (15 * 1024))
    assert plan.max_concurrent_requests == min(32, plan.kv_tokens // 16384)


def test_sglang_state_pool_without_a_cap_and_the_cap_it_sets():
    """SGLang 0.5 (``handle_max_mamba_cache``, ``init_memory_pool``): without the radix
    cache and without --max-running-requests the state pool holds 512 requests (512 // dp
    per attention-DP rank), and ``max_num_reqs = min(max_num_reqs, slots // 1)``; with the
    radix cache the pool takes 0.9 / 1.9 of the KV budget and runs slots // 3 requests."""
    kw = dict(max_model_len=16384)
    off = plan_engine_memory("sglang", "qwen3.5-397b-a17b", "b200", Parallelism(tp=8),
                             disable_radix_cache=True, **kw)
    rest = off.budget_bytes - off.weights_bytes
    assert off.kv_tokens == math.floor((rest - 512 * 45 * 533504) / (15 * 1024))
    assert off.state_request_cap == 512
    on = plan_engine_memory("sglang", "qwen3.5-397b-a17b", "b200", Parallelism(tp=8),
                            disable_radix_cache=False, **kw)
    slots = int(rest * 0.9 / 1.9 // (45 * 533504))
    assert on.state_request_cap == slots // 3
    dense = plan_engine_memory("sglang", "llama-3.1-8b", "b200", Parallelism(tp=1), **kw)
    assert dense.state_request_cap == 0


def test_sglang_hybrid_instance_runs_at_most_its_state_slots():
    """An SGLang pool of Qwen3.5 without a running-request cap: the planner sizes the state
    pool for SGLang's 512 (not the simulator's default 1024) and the instance runs at most
    512 requests; a given cap sizes the pool and stays the limit."""
    from serveplan.resolution import resolve

    pool = {"role": "colocated", "model": "qwen3.5-397b-a17b", "gpu": "b200", "tp": 8,
            "engine": "sglang", "max_model_len": 16384, "enable_prefix_caching": False}
    inst = resolve({"pools": [pool]}).pools[0].instance
    plan = plan_engine_memory("sglang", "qwen3.5-397b-a17b", "b200", Parallelism(tp=8),
                              max_model_len=16384, disable_radix_cache=True,
                              chunked_prefill_size=inst.params.max_num_batched_tokens)
    assert inst.params.max_num_seqs == 512
    assert inst.memory["kv_tokens"] == plan.kv_tokens
    capped = resolve({"pools": [{**pool, "max_num_seqs": 64}]}).pools[0].instance
    assert capped.params.max_num_seqs == 64 and capped.memory["state_request_cap"] == 64


def test_simulator_gets_the_full_attention_tokens():
    """The loop counts one full-attention group in blocks of its own size (16): it gets the
    planner's full-attention token capacity in those blocks."""
    from serveplan.resolution import resolve

    pool = {"role": "colocated", "model": "qwen3.5-397b-a17b", "gpu": "b200", "tp": 8,
            "max_model_len": 16384, "max_num_seqs": 64, "enable_prefix_caching": False}
    p = resolve({"pools": [pool]}).pools[0].instance
    plan = p.memory
    assert plan["block_size"] == 528 and p.params.block_size == 16
    assert p.params.num_gpu_blocks == plan["kv_tokens"] // 16


# ------------------------------------------------------------------------------ e2e rows
@pytest.mark.skipif(not E2E.is_dir(), reason="shared e2e data not present")
def test_measured_rows_are_no_longer_refused_for_their_architecture():
    from serveplan import e2e

    rows = [r for r in e2e.load_rows(E2E / "silicon_blackwell.csv")
            if r.model in ("openai/gpt-oss-120b", "Qwen/Qwen3.5-397B-A17B")]
    reasons = {e2e.expressible(r, E2E) for r in rows}
    assert not any(x and ("hybrid" in x or "sliding" in x) for x in reasons)
    bf16 = [r for r in rows if r.precision == "bf16" and r.mode == "agg" and r.dp == r.ep == 1
            and r.system == "b200_sxm"]
    assert bf16 and e2e.expressible(bf16[0], E2E) is None


def test_a_bf16_recurrent_state_halves_the_state_pool():
    """``--mamba-ssm-dtype bfloat16`` (the fp8 / fp4 Qwen3.5 launch scripts): one rank's
    recurrent state of a linear layer is hv dv dk = 8 x 128 x 128 elements at 2 B instead of
    4 (262,144 B), its conv state (2 x 256 + 1024 channels x 3 taps x 2 B = 9,216 B) stays:
    271,360 B a layer, so 32 slots of 45 layers leave the full layers that much more."""
    from serveplan.resolution import resolve

    pool = {"role": "colocated", "model": "qwen3.5-397b-a17b", "gpu": "b200", "tp": 8,
            "engine": "sglang", "max_model_len": 16384, "enable_prefix_caching": False,
            "max_num_seqs": 32}
    fp32 = resolve({"pools": [pool]}).pools[0].instance
    bf16 = resolve({"pools": [{**pool, "mamba_ssm_dtype": "bfloat16"}]}).pools[0].instance
    assert fp32.memory["state_bytes_per_request"] == 45 * 533504
    assert bf16.memory["state_bytes_per_request"] == 45 * 271360
    assert bf16.oracle.model.linear_state_dtype == "bf16"
    rest = fp32.memory["available_kv_bytes"] + 32 * 45 * 533504  # the budget before states
    assert bf16.memory["kv_tokens"] == math.floor((rest - 32 * 45 * 271360) / (15 * 1024))
    assert bf16.memory["kv_tokens"] > fp32.memory["kv_tokens"]


def test_the_state_dtype_of_a_model_without_linear_layers_is_refused():
    from serveplan.resolution import resolve

    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100",
            "mamba_ssm_dtype": "bf16"}
    with pytest.raises(SpecError, match="mamba_ssm_dtype: .*no linear-attention"):
        resolve({"pools": [pool]})
