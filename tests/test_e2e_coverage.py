"""Coverage of the measured Blackwell deployments: the GPU catalog's Blackwell Ultra entries,
the precision each row served, MLA rows, disaggregated rows, and the user-facing dtype /
quantization fields they rest on."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from serveplan.e2e import E2ERow, Role, deployment, expressible, load_rows, resolve_row
from serveplan.e2e_disagg import UNRECORDED
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.errors import SpecError
from serveplan.pools_config import InstanceConfig
from serveplan.quant_source import load_quantization

MIB = 2**20
GAP = "source_file=/x.csv; gtl_job_id=1; dynamo_version=0.9.0"
"""A row of the generator's own gap analysis: it ran the generator's rule (not a recipe)."""


@pytest.fixture(scope="module")
def aic(blackwell_e2e) -> Path:
    return blackwell_e2e


def _row(**kw) -> E2ERow:
    base = dict(id="x", engine="trtllm", version="1.2.0rc6", model="deepseek-ai/DeepSeek-R1",
                system="b200_sxm", precision="fp4", mode="agg", isl=1024, osl=1024,
                concurrency=16, tp=8, pp=1, dp=1, ep=1, ttft_ms=1.0, tpot_ms=1.0,
                gemm_quant="nvfp4", moe_quant="nvfp4", batch_size=16)
    return E2ERow(**{**base, **kw})


# ------------------------------------------------------------------------ GPU catalog
def test_b300_and_gb300_follow_the_datasheets():
    """HGX B300 (8 GPUs): 36 / 72 PFLOP/s bf16 / fp8 with sparsity -> 36e15 / 8 / 2 =
    2.25e15 and 72e15 / 8 / 2 = 4.5e15 dense; 14 PF dense fp4; 62 TB/s / 8 = 7.75 TB/s;
    275,040 MiB reported. GB300 NVL72 (72 GPUs): 360 / 720 PFLOP/s sparse -> 2.5e15 / 5e15
    dense; 1,080 PFLOP/s dense fp4 / 72 = 15e15; 576 TB/s / 72 = 8 TB/s; 284,208 MiB."""
    b300 = resolve_gpu("b300")
    assert b300.memory_bytes == 275040 * MIB
    assert b300.mem_bw == pytest.approx(62e12 / 8)
    assert b300.flops["bf16"] == pytest.approx(36e15 / 8 / 2)
    assert b300.flops["fp8"] == pytest.approx(72e15 / 8 / 2)
    assert b300.flops["fp4"] == pytest.approx(14e15)
    assert b300.scaleup_bw == 900e9 and b300.gpus_per_node == 8
    gb300 = resolve_gpu("gb300")
    assert gb300.memory_bytes == 284208 * MIB
    assert gb300.mem_bw == pytest.approx(576e12 / 72)
    assert gb300.flops["bf16"] == pytest.approx(360e15 / 72 / 2)
    assert gb300.flops["fp8"] == pytest.approx(720e15 / 72 / 2)
    assert gb300.flops["fp4"] == pytest.approx(1080e15 / 72)
    assert gb300.gpus_per_node == 72 and gb300.host_bw == resolve_gpu("gb200").host_bw
    # Blackwell Ultra raises dense FP4 by ~1.5x over Blackwell and lists no int8 peak
    assert b300.flops["fp4"] / resolve_gpu("b200").flops["fp4"] == pytest.approx(14 / 9)
    assert "int8" not in b300.flops and "int8" not in gb300.flops
    for alias in ("b300-sxm", "b300_sxm"):
        assert resolve_gpu(alias).name == "b300"


# ---------------------------------------------------------------------- served precision
def _quant(row, aic):
    return resolve_row(row, aic).pools[0].instance.oracle.quantization


def test_nvfp4_deepseek_row_takes_the_deepseek_recipe(aic):
    """nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json excludes lm_head and the four MLA
    input projections of every layer: qkv and lm_head bf16, o_proj / MLPs / experts NVFP4
    (group 16), KV cache FP8 (kv_cache_quant_algo)."""
    q = _quant(_row(), aic)
    assert (q.experts.kind, q.experts.group, q.experts.weight_only) == ("nvfp4", 16, False)
    assert q.qkv.kind == "bf16" and q.lm_head.kind == "bf16"
    assert {q.o_proj.kind, q.mlp.kind, q.shared_experts.kind} == {"nvfp4"}
    assert q.router.kind == "bf16" and q.kv_cache == "fp8"


def test_fp8_deepseek_row_is_the_block_fp8_checkpoint(aic):
    """DeepSeek-R1's quantization_config: fp8 with weight_block_size [128, 128] (one fp32
    scale per 16,384 weights), whichever MoE mode the row names; KV fp8 (the profile)."""
    for moe in ("fp8", "fp8_block"):
        q = _quant(_row(precision="fp8", gemm_quant="fp8", moe_quant=moe), aic)
        assert (q.experts.kind, q.experts.group) == ("fp8_block", 128 * 128)
        assert q.qkv.kind == "fp8_block" and q.lm_head.kind == "bf16"
        assert q.kv_cache == "fp8"


def test_kimi_int4_row_is_its_compressed_tensors_experts(aic):
    """Kimi-K2.5's config: int4 weights, group 32, no input activations (w4a16) on Linear,
    ignoring lm_head, self_attn, shared experts and dense MLPs; no kv_cache_scheme."""
    row = _row(engine="vllm", model="moonshotai/Kimi-K2.5", precision="int4",
               gemm_quant="int4_wo", moe_quant="int4_wo")
    q = _quant(row, aic)
    assert (q.experts.kind, q.experts.group, q.experts.weight_only) == ("int4", 32, True)
    assert {q.qkv.kind, q.o_proj.kind, q.shared_experts.kind, q.lm_head.kind} == {"bf16"}
    assert q.kv_cache == "bf16"


def test_base_model_fp4_rows_get_modelopts_recipe_and_empty_precision_is_bf16(aic):
    llama = _quant(_row(model="meta-llama/Llama-3.1-70B", tp=2), aic)
    assert {llama.qkv.kind, llama.o_proj.kind, llama.mlp.kind} == {"nvfp4"}
    assert (llama.lm_head.kind, llama.embedding.kind, llama.kv_cache) == ("bf16", "bf16", "fp8")
    qwen = _quant(_row(model="Qwen/Qwen3-32B", system="gb200", tp=2, precision="",
                       gemm_quant="", moe_quant=""), aic)
    assert qwen.label == "bf16" and qwen.kv_cache == "bf16"


def test_minimax_fp4_reads_nvidias_checkpoint(aic):
    """nvidia--MiniMax-M2.5-NVFP4: self_attn* and block_sparse_moe.gate of every layer and
    lm_head excluded -> attention and router bf16, experts NVFP4, KV fp8."""
    row = _row(engine="vllm", model="MiniMaxAI/MiniMax-M2.5", tp=4)
    q = _quant(row, aic)
    assert q.experts.kind == "nvfp4" and {q.qkv.kind, q.o_proj.kind, q.router.kind} == {"bf16"}
    assert q.kv_cache == "fp8"


# ------------------------------------------------------------------ rows and their reasons
@pytest.mark.parametrize("kw,reason", [
    (dict(model="openai/gpt-oss-120b", precision="fp8"), "fp8 checkpoint of openai/gpt-oss"),
    (dict(system="gb200", tp=36), "does not divide the attention heads"),
    (dict(concurrency=24, batch_size=16), "agg worker count unknown"),
])
def test_rows_still_refused_say_why(aic, kw, reason):
    assert reason in expressible(_row(**kw), aic)


@pytest.mark.parametrize("kw", [
    dict(),                                                    # NVFP4 MLA, pure TP 8
    dict(precision="fp8", gemm_quant="fp8", moe_quant="fp8_block", engine="sglang"),
    dict(system="b300_sxm", engine="sglang", precision="fp8", gemm_quant="fp8",
         moe_quant="fp8", model="deepseek-ai/DeepSeek-V3"),
    dict(engine="vllm", model="moonshotai/Kimi-K2.5", precision="int4"),
    dict(engine="vllm", model="MiniMaxAI/MiniMax-M2.5", system="b300_sxm", tp=2),
    dict(engine="sglang", model="Qwen/Qwen3.5-397B-A17B", precision="fp8", gemm_quant="fp8",
         moe_quant="fp8"),
    dict(engine="vllm", model="openai/gpt-oss-120b", precision="fp4", gemm_quant="",
         moe_quant="mxfp4", tp=2),
    dict(tp=4, ep=4),                                          # TP 4 attention, EP 4 experts
    dict(tp=1, dp=8, ep=8, concurrency=128),                   # wide EP: attention DP 8
    dict(tp=8, ep=4),                                          # moe_tp 2 x moe_ep 4
    dict(tp=1, dp=4, ep=1, concurrency=64),                    # experts over the DP ranks
    dict(tp=2, dp=4, ep=4, concurrency=64),                    # moe_tp 2 under DP
    dict(model="zhipuai/GLM-5", engine="sglang", precision="fp8", gemm_quant="fp8",
         moe_quant="fp8_block"),                               # MLA + sparse attention
    dict(model="zhipuai/GLM-5", engine="sglang"),              # its NVFP4 checkpoint
])
def test_newly_expressible_rows(aic, kw):
    assert expressible(_row(**kw), aic) is None


def test_mla_kv_block_follows_the_engine(aic):
    """vLLM 64, SGLang 64 (trtllm_mla on SM100 forces page_size 64), TensorRT-LLM 32; SGLang
    truncates its chunk to whole pages: 16 + 1024 + 1500 = 2540 -> 39 * 64 = 2496."""
    blocks = {e: deployment(_row(engine=e, source=GAP), aic)["pools"][0]
              for e in ("vllm", "sglang", "trtllm")}
    assert {e: p["block_size"] for e, p in blocks.items()} == {"vllm": 64, "sglang": 64,
                                                               "trtllm": 32}
    assert blocks["sglang"]["max_num_batched_tokens"] == 2496
    assert blocks["vllm"]["max_num_batched_tokens"] == 2540


def test_agg_workers_from_concurrency_over_batch(aic):
    """The generator's estimated_concurrency = agg_workers x max_batch_size: 288 clients
    over max_batch_size 144 are 2 workers of 144 sequences each."""
    row = _row(model="Qwen/Qwen3-32B", system="gb200", tp=2, precision="", gemm_quant="",
               moe_quant="", concurrency=288, batch_size=144)
    pool = deployment(row, aic)["pools"][0]
    assert (pool["count"], pool["max_num_seqs"]) == (2, 144)


def test_an_unrecorded_attention_dp_of_zero_is_one_rank(aic):
    """The generator's own Qwen3-32B campaign writes attention_dp_size 0.0 on its dense rows.
    8 clients at max_batch_size 4 are 8 / (4 x 1) = 2 workers; reading dp as 0 ran one worker
    of 4 sequences, so half the clients queued for a whole reply."""
    rows = {r.id: r for r in load_rows(aic / "silicon_blackwell.csv")}
    row = rows["qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c8_tp2_epnone_4"]
    assert (row.concurrency, row.batch_size, row.dp) == (8, 4, 1)
    pool = deployment(row, aic)["pools"][0]
    assert (pool["count"], pool["max_num_seqs"], pool["tp"]) == (2, 4, 2)


def test_attention_dp_rows_are_one_worker_of_dp_ranks(aic):
    """The generator's concurrency is agg_workers x max_batch_size x attention DP (vLLM
    MiniMax-M2.5, tp 2 x dp 2, ep 4: batch 64 and 128 clients in the CSV): one worker of two
    ranks, each with max_num_seqs 64, behind vLLM's DP balancer (4 x waiting + running)."""
    row = _row(engine="vllm", model="MiniMaxAI/MiniMax-M2.5", precision="fp8", tp=2, dp=2,
               ep=4, concurrency=128, batch_size=64, source=GAP)
    assert expressible(row, aic) is None
    config = deployment(row, aic)
    pool = config["pools"][0]
    assert (pool["count"], pool["max_num_seqs"], pool["dp"], pool["ep"]) == (1, 64, 2, 4)
    assert config["router"] == "least-requests"
    spec = resolve_row(row, aic).pools[0].spec()
    assert (spec.num_instances, spec.lockstep, spec.params.max_num_seqs) == (2, 2, 64)
    two = deployment(replace(row, concurrency=256), aic)["pools"][0]
    assert two["count"] == 2


def _disagg(prefill: Role, decode: Role, **kw) -> E2ERow:
    return _row(mode="disagg", tp=1, batch_size=None, prefill=prefill, decode=decode, **kw)


def test_disaggregated_rows_become_pd_pools(aic):
    """trtllm.rule: prefill max_num_tokens = ceil((isl + 1500) / 32) * 32 = ceil(2524 / 32)
    * 32 = 2528; the decode pool keeps that budget (it admits the handed-off prompt);
    vllm.rule: decode max_num_tokens = max_batch_size = 21. trtllm.rule: prefill
    disable_overlap_scheduler = true, decode false (the engine's overlap scheduler)."""
    row = _disagg(Role(1, 1, 8, 1, 1, 1), Role(3, 21, 8, 1, 1, 1),
                  model="deepseek-ai/DeepSeek-V3", concurrency=63)
    assert expressible(row, aic) is None
    prefill, decode = deployment(row, aic)["pools"]
    assert (prefill["role"], prefill["count"], prefill["tp"]) == ("prefill", 1, 8)
    assert (decode["role"], decode["count"], decode["max_num_seqs"]) == ("decode", 3, 21)
    assert (prefill["max_num_batched_tokens"], decode["max_num_batched_tokens"]) == (2528, 2528)
    resolved = resolve_row(row, aic)
    assert resolved.architecture == "pd"
    assert [p.params.async_scheduling for p in resolved.pools] == [False, True]
    vllm = deployment(replace(row, engine="vllm"), aic)["pools"]
    assert [p["max_num_batched_tokens"] for p in vllm] == [1024 + 1500, 21]
    assert "async_scheduling" not in vllm[0]
    assert "async_scheduling" not in deployment(row, aic, engine=False)["pools"][0]


def test_sglang_dp_ranks_get_the_recorded_per_rank_batch(aic):
    """The generator records batch sizes per attention-DP rank (a GB200 wide-EP decode
    worker of 32 ranks, batch 128, serves 4096 clients); SGLang divides
    --max-running-requests and --chunked-prefill-size by dp_size, so the flags are 32 x 128
    = 4096 and 32 x 2496 (sglang.rule: isl + 1500 = 2524 in whole 64-token pages, 2496) and
    each rank resolves to 128 and 2496 again. vLLM gives each rank the whole flag."""
    row = _disagg(Role(4, 1, 1, 1, 4, 4), Role(1, 128, 1, 1, 32, 32), engine="sglang",
                  model="deepseek-ai/DeepSeek-V3", system="gb200", concurrency=4096)
    prefill, decode = deployment(row, aic)["pools"]
    assert (decode["max_num_seqs"], decode["max_num_batched_tokens"]) == (4096, 32 * 2496)
    assert (prefill["max_num_seqs"], prefill["max_num_batched_tokens"]) == (4, 4 * 2496)
    ranks = [p.params for p in resolve_row(row, aic).pools]
    assert [(k.max_num_seqs, k.max_num_batched_tokens) for k in ranks] == [(1, 2496),
                                                                            (128, 2496)]
    vllm = deployment(replace(row, engine="vllm"), aic)["pools"][1]
    assert vllm["max_num_seqs"] == 128


def test_disaggregated_refusals(aic):
    sharded = _disagg(Role(1, 1, 2, 1, 4, 4), Role(1, 8, 8, 1, 1, 1))  # moe_tp 2 under DP
    assert expressible(sharded, aic) is None
    mixed = _disagg(Role(1, 1, 8, 1, 1, 4), Role(1, 8, 8, 1, 1, 1))  # attention TP, ep 4
    assert expressible(mixed, aic) is None
    wide = _disagg(Role(1, 1, 4, 1, 1, 4), Role(1, 8, 1, 1, 8, 8))
    assert expressible(wide, aic) is None
    assert deployment(wide, aic)["pools"][1]["dp"] == 8
    unrecorded = _disagg(Role(None, None, 8, 1, 1, 1), Role(None, None, 8, 1, 1, 1))
    assert expressible(unrecorded, aic) == UNRECORDED


def test_disagg_sharded_experts_under_dp_are_expressed(aic):
    """Independently of the code's row model: disagg rows of a modelled architecture whose
    prefill or decode columns show attention DP over tensor-parallel experts (attention DP
    with moe_tp > 1, or with moe_ep 1) are laid out; those still refused are refused only
    for their unrecorded worker counts or for weights that do not fit (DeepSeek-V3 fp8 on
    4 GB200s, as at tp 4 without DP)."""
    modelled = {"deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K2.5",
                "nvidia/Qwen3-32B-NVFP4"}

    def mixed(r, role):
        tp, dp, mtp, mep = (float(r[f"{role}_{c}"] or 1) for c in (
            "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"))
        return dp > 1 and (mtp > 1 or mep == 1)

    with open(aic / "silicon_blackwell.csv", newline="") as fh:
        expected = {r["id"] for r in csv.DictReader(fh) if r["mode"] == "disagg"
                    and r["model_path"] in modelled
                    and (mixed(r, "prefill") or mixed(r, "decode"))}
    reasons = {r.id: expressible(r, aic) for r in load_rows(aic / "silicon_blackwell.csv")
               if r.id in expected}
    assert len(reasons) == len(expected) > 0
    no_fit = "weights do not fit the engine's default memory fraction (flags not recorded)"
    assert set(reasons.values()) <= {None, UNRECORDED, no_fit}
    assert sum(v is None for v in reasons.values()) > 0


# ------------------------------------------------------------- the user-facing fields
def test_yaml_dtype_accepts_every_format_and_fp4_means_nvfp4():
    for name in ("bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4"):
        assert InstanceConfig(model="llama-3.1-8b", gpu="b200", dtype=name).dtype == name
    assert InstanceConfig(model="llama-3.1-8b", gpu="b200", dtype="fp4").dtype == "nvfp4"
    with pytest.raises(ValidationError, match="dtype"):
        InstanceConfig(model="llama-3.1-8b", gpu="b200", dtype="fp5")
    with pytest.raises(ValidationError, match="not both"):
        InstanceConfig(model="llama-3.1-8b", gpu="b200", dtype="fp8",
                       quantization={"quant_algo": "FP8"})


def test_quantization_field_inline_and_errors(tmp_path):
    q = load_quantization({"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                           "exclude_modules": ["lm_head"]}, "llama-3.1-8b")
    assert (q.mlp.kind, q.lm_head.kind, q.kv_cache) == ("nvfp4", "bf16", "fp8")
    with pytest.raises(SpecError, match="quantization: .*no such file"):
        load_quantization(str(tmp_path / "missing.json"), "llama-3.1-8b")
    with pytest.raises(SpecError, match="quant_algo"):
        load_quantization({"quant_algo": "INT3"}, "llama-3.1-8b")
    with pytest.raises(SpecError, match="expected quantization_config"):
        load_quantization({"bits": 4}, "llama-3.1-8b")
