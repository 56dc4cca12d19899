"""The engine flags of the rows InferenceX's recipes served, read off its launch scripts
(``benchmarks/single_node/fixed_seq_len/*.sh``), and the generator rule for the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from serveplan.e2e import E2ERow, deployment
from serveplan.e2e_recipes import AUTO_KV, RECIPES, model_family, recipe_for, recipe_knobs
from serveplan.resolution import resolve


def _row(**kw) -> E2ERow:
    base = dict(id="x", engine="vllm", version="0.19.0", model="MiniMaxAI/MiniMax-M2.5",
                system="b200_sxm", precision="fp8", mode="agg", isl=8192, osl=1024,
                concurrency=64, tp=4, pp=1, dp=1, ep=1, ttft_ms=1.0, tpot_ms=1.0,
                gemm_quant="fp8_block", moe_quant="fp8_block", batch_size=64,
                source="db-dump/2026-04-27; config_id=733")
    return E2ERow(**{**base, **kw})


VLLM_GRAPHS_2048 = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 2049, 16))
"""``--max-cudagraph-capture-size 2048``: vLLM's sizes 1, 2, 4, 8..248 step 8, then 256..2048
step 16 (``VllmConfig._set_cudagraph_sizes``), instead of its default ceiling ``min(2 x
max_num_seqs, 512)``."""


def test_families_by_hf_id():
    assert model_family("deepseek-ai/DeepSeek-R1") == "dsr1"
    assert model_family("nvidia/DeepSeek-V3.1-NVFP4") == "dsr1"
    assert model_family("moonshotai/Kimi-K2.5") == "kimik2.5"
    assert model_family("openai/gpt-oss-120b") == "gptoss"
    assert model_family("Qwen/Qwen3-32B") is None


def test_minimax_fp8_vllm_script():
    """minimaxm2.5_fp8_b200.sh: --max-num-batched-tokens $((ISL * 2)),
    --gpu-memory-utilization 0.90, --block-size=32, --max-cudagraph-capture-size 2048,
    --no-enable-prefix-caching, no --max-num-seqs; max_model_len from the sweep, ISL + OSL +
    256."""
    assert recipe_knobs(_row()) == {
        "enable_prefix_caching": False, "max_model_len": 8192 + 1024 + 256,
        "max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.9, "block_size": 32,
        "cuda_graph_sizes": VLLM_GRAPHS_2048}
    assert len(VLLM_GRAPHS_2048) == 3 + 31 + 113


@pytest.mark.parametrize("model, precision, system", [
    ("openai/gpt-oss-120b", "fp4", "b200_sxm"), ("moonshotai/Kimi-K2.5", "fp4", "b200_sxm"),
    ("MiniMaxAI/MiniMax-M2.5", "fp4", "b300_sxm")])
def test_vllm_scripts_that_capture_graphs_up_to_2048_tokens(model, precision, system):
    """gptoss_fp4_b200.sh (``max-cudagraph-capture-size: 2048`` in its config), the Kimi-K2.5
    and MiniMax-M2.5 fp4 scripts (``--max-cudagraph-capture-size 2048``; the MiniMax B300
    rows reuse them); the Kimi int4 script passes no such flag, so vLLM's default stands
    there."""
    row = _row(model=model, precision=precision, system=system, concurrency=4)
    assert recipe_knobs(row)["cuda_graph_sizes"] == VLLM_GRAPHS_2048
    int4 = _row(model="moonshotai/Kimi-K2.5", precision="int4", concurrency=4)
    assert "cuda_graph_sizes" not in recipe_knobs(int4)


KIMI_PR862 = {"enable_prefix_caching": False, "max_model_len": 1024 + 1024 + 256,
              "max_num_seqs": 16, "gpu_memory_utilization": 0.9, "kv_dtype": AUTO_KV}
"""kimik2.5_fp4_b200.sh as PR 862 wrote it: ``--max-num-seqs $CONC
--gpu-memory-utilization 0.90``, no KV dtype, token budget or capture size."""


KIMI_PR1047 = {"enable_prefix_caching": False, "max_model_len": 1024 + 1024 + 256,
               "max_num_seqs": 16, "max_num_batched_tokens": 2048,
               "gpu_memory_utilization": 0.9, "cuda_graph_sizes": VLLM_GRAPHS_2048}
"""The same script after PR 1047: ``--kv-cache-dtype fp8`` (the precision profile's KV),
``--max-cudagraph-capture-size 2048 --max-num-batched-tokens $((ISL * 2))``."""


@pytest.mark.parametrize("system, measured, want", [
    ("b200_sxm", "2026-03-11", KIMI_PR862), ("b200_sxm", "2026-03-27", KIMI_PR862),
    ("b200_sxm", "2026-04-20", KIMI_PR1047),
    ("b300_sxm", "2026-04-03", KIMI_PR862), ("b300_sxm", "2026-04-20", KIMI_PR862)])
def test_kimi_fp4_vllm_flags_by_date(system, measured, want):
    """PR 1047 changed the B200 script between 2026-03-26 and 2026-04-21 (the rows: 03-11,
    03-27, 04-20); kimik2.5_fp4_b300.sh kept PR 862's flags until PR 1698 (June 2026)."""
    row = _row(model="moonshotai/Kimi-K2.5", precision="fp4", system=system, isl=1024,
               concurrency=16, measured=measured)
    assert recipe_knobs(row) == want


def test_minimax_fp8_vllm_before_pr_947_by_its_image(aic):
    """minimaxm2.5_fp8_b200.sh on the v0.17.0 image (PR 757's script): 0.95 of memory,
    ``--block-size=32``, no KV dtype, budget or capture size, and ``--enable-expert-parallel``
    at ``EP_SIZE -ge 1`` -- experts over the TP ranks even where the export records EP 1.
    PR 947 moved the image to v0.19.0 with the flags of :func:`test_minimax_fp8_vllm_script`."""
    old = _row(version="0.17.0", tp=2, ep=1, isl=1024)
    assert recipe_knobs(old) == {"enable_prefix_caching": False, "max_model_len": 2304,
                                 "gpu_memory_utilization": 0.95, "block_size": 32,
                                 "kv_dtype": AUTO_KV}
    from serveplan.e2e_recipes import layout

    assert layout(old) == (2, 1, 2)
    assert layout(_row(version="0.19.0", tp=2, ep=1)) == (2, 1, 1)
    pool = deployment(old, aic)["pools"][0]
    assert "kv_dtype" not in pool and pool["ep"] == 2  # the checkpoint's own KV: bf16


@pytest.mark.parametrize("tp,conc,want", [
    (4, 32, dict(max_num_seqs=32, max_num_batched_tokens=8192, gpu_memory_utilization=0.95,
                 scheduler_recv_interval=10)),
    (8, 8, dict(max_num_seqs=128, max_num_batched_tokens=32768, gpu_memory_utilization=0.82,
                scheduler_recv_interval=10)),
    (8, 16, dict(max_num_seqs=128, max_num_batched_tokens=32768, gpu_memory_utilization=0.82,
                 scheduler_recv_interval=30)),
])
def test_deepseek_fp8_sglang_script_follows_tp_and_concurrency(tp, conc, want):
    """dsr1_fp8_b200.sh: TP8 -> 128 running, 32k chunks, mem 0.82, recv interval 30 from 16
    clients (10 below); TP4 -> 32, 8k, 0.95, recv 10. No mixed chunks."""
    row = _row(engine="sglang", model="deepseek-ai/DeepSeek-R1", tp=tp, concurrency=conc)
    knobs = recipe_knobs(row)
    assert {k: knobs[k] for k in want} == want
    assert knobs["enable_mixed_chunk"] is False


def test_allreduce_fusion_where_the_scripts_pass_it():
    """Both DeepSeek SGLang scripts pass ``--enable-flashinfer-allreduce-fusion``; the
    Qwen3.5 fp8 script only ``--flashinfer-allreduce-fusion-backend auto`` (a backend
    without the enabling flag, read as off); TensorRT-LLM's recipes leave it to the
    engine's default (on)."""
    def knobs(**kw):
        return recipe_knobs(_row(**{"engine": "sglang", "model": "deepseek-ai/DeepSeek-R1",
                                    "tp": 8, "concurrency": 8, **kw}))
    assert knobs()["allreduce_fusion"] and knobs(precision="fp4")["allreduce_fusion"]
    assert "allreduce_fusion" not in knobs(model="Qwen/Qwen3.5-397B-A17B")
    assert "allreduce_fusion" not in recipe_knobs(_row(engine="trtllm",
                                                       model="deepseek-ai/DeepSeek-R1"))


def test_rows_above_a_pinned_cap_keep_the_engines_limit():
    """dsr1_fp8_b200.sh pins TP8 to 128 running requests "so KV memory is not reserved for
    requests that never run" (its sweep's top concurrency): a row measured with 256 or 512
    clients ran the script before the pin and keeps SGLang's own limit; 128 clients keep
    the pin."""
    def knobs(conc):
        return recipe_knobs(_row(engine="sglang", model="deepseek-ai/DeepSeek-R1", tp=8,
                                 concurrency=conc))
    assert knobs(128)["max_num_seqs"] == 128
    assert "max_num_seqs" not in knobs(256) and "max_num_seqs" not in knobs(512)
    assert knobs(512)["max_num_batched_tokens"] == 32768


def test_deepseek_trtllm_budget():
    """dsr1_fp8_b200_trt.sh: max_num_tokens = max(8192, roundup64(CONC + ISL + 64)):
    64 + 8192 + 64 = 8320 (a multiple of 64); 4 + 1024 + 64 = 1092 -> 8192. KV fraction
    0.75 for fp8 8k/1k at TP4, else 0.8."""
    row = _row(engine="trtllm", model="deepseek-ai/DeepSeek-R1")
    assert recipe_knobs(row)["max_num_batched_tokens"] == 8320
    assert recipe_knobs(row)["gpu_memory_utilization"] == 0.75
    small = _row(engine="trtllm", model="deepseek-ai/DeepSeek-R1", isl=1024, concurrency=4)
    assert recipe_knobs(small)["max_num_batched_tokens"] == 8192
    assert recipe_knobs(small)["gpu_memory_utilization"] == 0.8


def test_rows_without_a_recipe():
    assert recipe_for(_row(system="gb200")) is None  # multi-node launches
    assert recipe_for(_row(engine="trtllm", model="Qwen/Qwen3-32B")) is None


@pytest.fixture(scope="module")
def aic(blackwell_e2e) -> Path:
    return blackwell_e2e


def test_deployment_takes_the_recipe_or_the_generator_rule(aic):
    """An InferenceX row runs its recipe; a gap-analysis row (aiperf, a Dynamo image) and a
    row without a recipe run the generator's rule: max_num_seqs = batch_size, budget
    batch_size + isl + 1500."""
    pool = deployment(_row(), aic)["pools"][0]
    assert pool["max_num_batched_tokens"] == 16384 and "max_num_seqs" not in pool
    assert pool["block_size"] == 32 and pool["max_model_len"] == 9472
    gap = _row(source="source_file=/x.csv; gtl_job_id=1; dynamo_version=0.9.0")
    rule = deployment(gap, aic)["pools"][0]
    assert rule["max_num_seqs"] == 64 and rule["max_num_batched_tokens"] == 64 + 8192 + 1500


def test_gpu_steps_alone_leave_the_runtime_knobs_out(aic):
    row = _row(engine="sglang", model="deepseek-ai/DeepSeek-R1", tp=8, precision="fp8")
    assert deployment(row, aic)["pools"][0]["scheduler_recv_interval"] == 30  # 64 clients
    bare = deployment(row, aic, engine=False)["pools"][0]
    assert "scheduler_recv_interval" not in bare and "enable_mixed_chunk" not in bare


def test_sglang_chunk_default_follows_gpu_memory():
    """server_args.py: chunked_prefill_size 8192 below 160 GiB (H200, 141 GB), 16384 from
    160 GiB (B200, 180 GB)."""
    def chunk(gpu):
        dep = {"pools": [{"role": "colocated", "model": "llama-3.1-8b", "gpu": gpu,
                          "engine": "sglang"}]}
        return resolve(dep).pools[0].instance.params.max_num_batched_tokens
    assert chunk("h200") == 8192
    assert chunk("b200") == 16384


def test_dp_attention_workers_count_their_gpus_in_tp():
    """minimaxm2.5_fp4_b200.sh launches ``tp: 4, dp-attn: true`` as ``-tp 1 -dp 4
    --enable-expert-parallel`` (4 GPUs); the export records tp 4, attention_dp 4, moe_ep 16
    (16 GPUs, two B200 nodes). With a recipe and moe_ep = tp x dp the worker is 4 ranks of
    1 GPU with the experts over 4; rows without a recipe stay as recorded."""
    from serveplan.e2e_recipes import layout

    row = _row(precision="fp4", tp=4, dp=4, ep=16, concurrency=16, batch_size=4)
    assert layout(row) == (1, 4, 4)
    assert layout(_row(precision="fp4", tp=2, dp=2, ep=4)) == (1, 2, 2)
    assert layout(_row(precision="fp4", tp=4, dp=1, ep=4)) == (4, 1, 4)  # no DP: as recorded
    trt = _row(engine="trtllm", model="deepseek-ai/DeepSeek-R1", tp=1, dp=8, ep=8)
    assert layout(trt) == (1, 8, 8)  # already one GPU per rank
    assert layout(_row(system="gb200", tp=4, dp=4, ep=16)) == (4, 4, 16)  # no recipe


def test_workers_counted_as_tp_times_ep_are_one_node():
    """InferenceX-app stores a worker without a GPU count as ``tp x ep`` GPUs, so
    dsr1_fp8_b200_trt.sh's ``--tp_size 8 --ep_size 8`` (8 GPUs) is exported as tp 64,
    moe_tp 8, moe_ep 8 -- or attention_dp 64 with ``enable_attention_dp``; ``tp 4, ep 4`` as
    16. More GPUs than the B200 node's 8 with tp x dp = moe_tp x moe_ep: ``moe_tp`` GPUs."""
    from serveplan.e2e_recipes import layout

    dsr1 = dict(engine="trtllm", model="deepseek-ai/DeepSeek-R1", precision="fp4")
    assert layout(_row(**dsr1, tp=64, dp=1, moe_tp=8, ep=8)) == (8, 1, 8)
    assert layout(_row(**dsr1, tp=1, dp=64, moe_tp=8, ep=8)) == (1, 8, 8)
    assert layout(_row(**dsr1, tp=16, dp=1, moe_tp=4, ep=4)) == (4, 1, 4)
    # eight GPUs recorded as such: as recorded (experts 2-way TP inside 4-way EP)
    assert layout(_row(**dsr1, tp=8, dp=1, moe_tp=2, ep=4)) == (8, 1, 4)
    assert layout(_row(**dsr1, tp=8, dp=1, moe_tp=8, ep=1)) == (8, 1, 1)


@pytest.mark.parametrize("image, measured, dp, depth", [
    ("image=nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3", "2026-03-20", 1, 3),
    ("image=nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post3", "", 8, 1),
    ("image=nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post2", "2026-03-20", 1, 0),
    ("image=nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2", "2025-12-15", 1, 0),
    ("image=nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2", "2026-01-14", 1, 3),
    ("image=nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2", "2026-01-14", 8, 1),
    ("image=nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post2", "2026-01-14", 1, 0)])
def test_mtp_runs_known_by_their_image_or_sweep(image, measured, dp, depth, aic):
    """nvidia-master.yaml runs release:1.2.0rc6.post3 only for dsr1-fp{4,8}-b200-trt-mtp,
    whose scripts set num_nextn_predict_layers 3 (1 with attention DP); on 1.1.0rc2.post2,
    which both variants shared, the 2026-01-14 sweep was PR 392's, whose changelog entry
    named only the -mtp keys. Such rows are not expressible (speculative decoding is
    modelled under vLLM's scheduler only)."""
    from serveplan.e2e import MTP_REASON, expressible
    from serveplan.e2e_recipes import mtp_depth

    source = f"db-dump/2026-04-27; config_id=1; measured={measured}T00:00:00Z; {image}"
    row = _row(engine="trtllm", model="deepseek-ai/DeepSeek-R1", tp=8 // dp, dp=dp, ep=dp,
               moe_tp=8 // dp, source=source, measured=measured)
    assert mtp_depth(row) == depth
    assert (expressible(row, aic) == MTP_REASON) == (depth > 0)


def test_trtllm_scripts_that_wait_for_batches():
    """dsr1_fp8_b200_trt.sh, 1k/1k from 64 clients: batch_wait_timeout_iters 40, ratio 0.8
    (not below 64 clients, not fp4, not 8k/1k); 70b_*_trt_slurm.sh, 1k/1k below TP 8: 20,
    0.9."""
    def knobs(**kw):
        return recipe_knobs(_row(engine="trtllm", isl=1024, osl=1024, **kw))
    ds = dict(model="deepseek-ai/DeepSeek-R1", tp=8)
    assert knobs(concurrency=64, **ds)["batch_wait_timeout_iters"] == 40
    assert knobs(concurrency=64, **ds)["batch_wait_max_tokens_ratio"] == 0.8
    assert "batch_wait_timeout_iters" not in knobs(concurrency=32, **ds)
    assert "batch_wait_timeout_iters" not in knobs(concurrency=64, precision="fp4", **ds)
    llama = dict(model="meta-llama/Llama-3.1-70B", concurrency=8)
    assert knobs(tp=4, **llama)["batch_wait_timeout_iters"] == 20
    assert "batch_wait_timeout_iters" not in knobs(tp=8, **llama)


def test_trtllm_scripts_pad_their_cuda_graphs():
    """Every TensorRT-LLM script sets ``cuda_graph_config: enable_padding: true`` with
    ``max_batch_size`` $CONC (DeepSeek, gpt-oss), 1024 (70b_*_trt_slurm.sh) or 128
    (dsr1_fp8_h200_trt.sh): the padded list, 1, 2, 4, 8..128 step 8, then 256, 512 below
    the max and the max itself (TensorRT-LLM's ``_generate_cuda_graph_batch_sizes``)."""
    def knobs(**kw):
        return recipe_knobs(_row(engine="trtllm", isl=1024, osl=1024, **kw))
    eight = [8 * i for i in range(1, 17)]
    ds = knobs(model="deepseek-ai/DeepSeek-R1", tp=8, concurrency=64)
    assert ds["cuda_graph_padding"] and ds["cuda_graph_sizes"] == [1, 2, 4, *eight[:8]]
    oss = knobs(model="openai/gpt-oss-120b", precision="fp4", tp=2, concurrency=256)
    assert oss["cuda_graph_sizes"] == [1, 2, 4, *eight, 256]
    llama = knobs(model="meta-llama/Llama-3.1-70B", tp=4, concurrency=8)
    assert llama["cuda_graph_sizes"] == [1, 2, 4, *eight, 256, 512, 1024]
    h200 = knobs(model="deepseek-ai/DeepSeek-R1", tp=8, concurrency=4, system="h200_sxm")
    assert h200["cuda_graph_sizes"] == [1, 2, 4, *eight]


def test_the_generator_rule_captures_every_batch_size(aic):
    """methodology/*.rule: ``cuda_graph_batch_sizes = range(1, max_batch_size + 1)`` for
    every engine and role; a TensorRT-LLM worker then replays a graph at every batch size
    up to its max_batch_size, padding or not."""
    gap = _row(engine="trtllm", version="1.2.0rc6.post1", model="Qwen/Qwen3-32B",
               system="gb200", precision="fp4", gemm_quant="nvfp4", moe_quant="nvfp4", tp=2,
               batch_size=48, concurrency=48,
               source="source_file=/x.csv; gtl_job_id=1; dynamo_version=0.8.0")
    pool = deployment(gap, aic)["pools"][0]
    assert pool["cuda_graph_sizes"] == list(range(1, 49))
    oracle = resolve(deployment(gap, aic)).pools[0].instance.oracle
    assert oracle.graph_sizes.tolist() == list(range(1, 49)) and not oracle.graph_padding


def test_trtllm_scripts_balance_attention_dp():
    """With DP_ATTENTION the DeepSeek scripts append ``attention_dp_config: {batching_wait_iters:
    0, enable_balance: true, timeout_iters: 60}``, gptoss_fp4_b200_trt.sh ``{enable_balance:
    true}`` (TensorRT-LLM's defaults for the rest); without attention DP nothing."""
    def knobs(**kw):
        return recipe_knobs(_row(engine="trtllm", isl=1024, osl=1024, concurrency=256, **kw))
    ds = knobs(model="deepseek-ai/DeepSeek-R1", tp=1, dp=8, ep=8)
    assert ds["attention_dp_config"] == {"enable_balance": True, "batching_wait_iters": 0,
                                         "timeout_iters": 60}
    oss = knobs(model="openai/gpt-oss-120b", precision="fp4", tp=1, dp=4, ep=4)
    assert oss["attention_dp_config"] == {"enable_balance": True}
    assert "attention_dp_config" not in knobs(model="deepseek-ai/DeepSeek-R1", tp=8)


def test_gpu_steps_alone_leave_attention_dp_balance_out(aic):
    """The balance is the engine's runtime: the GPU-steps-only setting runs without it
    (and without an engine it would be refused)."""
    row = _row(engine="trtllm", model="deepseek-ai/DeepSeek-R1", isl=1024, osl=1024,
               concurrency=256, tp=1, dp=8, ep=8, batch_size=32)
    full = deployment(row, aic)
    assert resolve(full).pools[0].instance.params.attention_dp_timeout_iters == 60
    bare = deployment(row, aic, engine=False)
    assert "attention_dp_config" not in bare["pools"][0]
    resolve(bare)


def test_hopper_scripts_without_a_kv_flag_run_the_checkpoints_kv(aic):
    """gptoss_fp4_h200.sh, minimaxm2.5_fp8_h1/200.sh, dsr1_fp8_h200.sh and glm5_fp8_h200.sh
    pass no KV dtype, gptoss_fp4_h200_trt.sh ``kv_cache_config: dtype: auto``: these
    checkpoints carry no KV quantisation, so the cache is 16-bit, not the fp8 of the
    precision profile; dsr1_fp8_h200_trt.sh and the B200 scripts ask for fp8."""
    def kv(**kw):
        row = _row(**{"system": "h200_sxm", "isl": 1024, "osl": 1024, **kw})
        return deployment(row, aic)["pools"][0].get("kv_dtype")
    assert kv() is None  # MiniMax-M2.5 fp8, vLLM
    assert kv(model="openai/gpt-oss-120b", precision="fp4") is None
    assert kv(engine="trtllm", model="openai/gpt-oss-120b", precision="fp4") is None
    assert kv(engine="sglang", model="deepseek-ai/DeepSeek-R1", tp=8) is None
    assert kv(engine="trtllm", model="deepseek-ai/DeepSeek-R1", tp=8) == "fp8"
    assert kv(system="b200_sxm") == "fp8"
    oracle = resolve(deployment(_row(system="h200_sxm"), aic)).pools[0].instance.oracle
    assert oracle.kv_dtype == "bf16"


def test_hopper_script_lengths_caps_and_expert_switches():
    """gptoss_fp4_h100.sh: ``max-model-len: 10240``; gptoss_fp4_h200.sh: ISL + OSL + 20 for
    1k/1k; minimaxm2.5_fp8_h200.sh turns on expert parallelism at ``EP_SIZE -ge 1`` (the
    experts over all TP ranks), the H100 script only above 1; no TensorRT-LLM gpt-oss or
    Llama script exists for H100; qwen3.5_fp8_h100.sh (f89cdfe): 64 running, 8192-token
    chunks, memory fraction 0.75."""
    from serveplan.e2e_recipes import layout

    oss = dict(model="openai/gpt-oss-120b", precision="fp4", isl=1024, osl=1024)
    assert recipe_knobs(_row(system="h100_sxm", **oss))["max_model_len"] == 10240
    assert recipe_knobs(_row(system="h200_sxm", **oss))["max_model_len"] == 2068
    assert layout(_row(system="h200_sxm", tp=4, ep=1)) == (4, 1, 4)
    assert layout(_row(system="h100_sxm", tp=4, ep=1)) == (4, 1, 1)
    assert recipe_for(_row(engine="trtllm", system="h100_sxm", **oss)) is None
    assert recipe_for(_row(engine="trtllm", system="h100_sxm",
                           model="meta-llama/Llama-3.1-70B")) is None
    qwen = recipe_knobs(_row(engine="sglang", system="h100_sxm", concurrency=32,
                             model="Qwen/Qwen3.5-397B-A17B"))
    assert {k: qwen[k] for k in ("max_num_seqs", "max_num_batched_tokens",
                                 "gpu_memory_utilization")} == {
        "max_num_seqs": 64, "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.75}


def test_qwen35_scripts_keep_a_bf16_recurrent_state():
    """qwen3.5_fp8_b200.sh: ``--mamba-ssm-dtype bfloat16 --chunked-prefill-size 16384``
    (and ``--scheduler-recv-interval`` 30 above 4 clients); the fp4 / B300 / Hopper fp8
    scripts pass the same state dtype, the bf16 scripts none (the checkpoint's fp32)."""
    def knobs(**kw):
        return recipe_knobs(_row(**{"engine": "sglang", "model": "Qwen/Qwen3.5-397B-A17B",
                                    "concurrency": 8, **kw}))
    fp8 = knobs()
    assert fp8["mamba_ssm_dtype"] == "bf16" and fp8["max_num_batched_tokens"] == 16384
    assert fp8["scheduler_recv_interval"] == 30 and knobs(concurrency=4)[
        "scheduler_recv_interval"] == 10
    for kw in (dict(precision="fp4"), dict(system="b300_sxm"), dict(system="h200_sxm")):
        assert knobs(**kw)["mamba_ssm_dtype"] == "bf16"
    assert "mamba_ssm_dtype" not in knobs(precision="bf16")


def test_llama_trtllm_budget_is_the_scripts_16384():
    """70b_fp8_b200_trt_slurm.sh (a267b4b) and 70b_fp4_b200_trt_docker.sh (c2faa3d) launch
    ``--max_num_tokens 16384`` at every sequence length (the fp4 slurm copy's
    ``$MAX_MODEL_LEN`` is ruled out by the rows, ``_llama_trtllm``); 1k/1k below TP 8 adds
    ``batch_wait_timeout_iters: 20`` and ``batch_wait_max_tokens_ratio: 0.9``."""
    def knobs(precision, isl=1024, osl=1024, tp=4):
        return recipe_knobs(_row(engine="trtllm", model="meta-llama/Llama-3.1-70B", isl=isl,
                                 osl=osl, tp=tp, precision=precision))
    for precision in ("fp8", "fp4"):
        assert knobs(precision)["max_num_batched_tokens"] == 16384
        assert knobs(precision, isl=8192)["max_num_batched_tokens"] == 16384
    assert knobs("fp4")["batch_wait_timeout_iters"] == 20
    assert knobs("fp4")["batch_wait_max_tokens_ratio"] == 0.9
    assert "batch_wait_timeout_iters" not in knobs("fp4", tp=8)
    assert "batch_wait_timeout_iters" not in knobs("fp4", osl=8192)


HOPPER_MODELS = {"dsr1": "deepseek-ai/DeepSeek-R1", "gptoss": "openai/gpt-oss-120b",
                 "kimik2.5": "moonshotai/Kimi-K2.5", "minimaxm2.5": "MiniMaxAI/MiniMax-M2.5",
                 "qwen3.5": "Qwen/Qwen3.5-397B-A17B", "glm5": "zhipuai/GLM-5",
                 "70b": "meta-llama/Llama-3.1-70B"}
HOPPER_RECIPES = [(rc.engine, rc.family, rc.precisions[0], gpu) for rc in RECIPES
                  for gpu in rc.gpus if gpu in ("h100", "h200")]


@pytest.mark.parametrize("engine, family, precision, gpu", HOPPER_RECIPES)
def test_every_hopper_recipe_resolves_on_eight_gpus(engine, family, precision, gpu, aic):
    """A row of each Hopper recipe (eight GPUs, 1k/1k, 16 clients) is expressible and its
    deployment resolves with the script's running cap and KV dtype."""
    from serveplan.e2e import expressible, resolve_row

    quant = {"fp8": "fp8_block", "fp4": "nvfp4", "int4": "w4a16"}.get(precision, "")
    row = _row(engine=engine, model=HOPPER_MODELS[family], precision=precision,
               system=f"{gpu}_sxm", isl=1024, osl=1024, concurrency=16, batch_size=16, tp=8,
               gemm_quant="" if precision == "int4" else quant, moe_quant=quant)
    assert expressible(row, aic) is None
    pool = resolve_row(row, aic).pools[0]
    knobs = recipe_knobs(row)
    if "max_num_seqs" in knobs:
        assert pool.instance.params.max_num_seqs == knobs["max_num_seqs"]
    want_kv = {"auto": None}.get(knobs.get("kv_dtype", "fp8"), "fp8")
    if precision in ("fp8", "fp4") and want_kv == "fp8":
        assert pool.instance.oracle.kv_dtype == "fp8"
    elif precision in ("fp8", "fp4"):
        assert pool.instance.oracle.kv_dtype == "bf16"


def test_scripts_without_a_dp_switch_ignore_attention_dp(aic):
    """minimaxm2.5_fp8_b200.sh and kimik2.5_fp4_b200.sh launch ``--tensor-parallel-size=$TP``
    (plus ``--enable-expert-parallel`` when ``EP_SIZE > 1``) and read no DP_ATTENTION; only
    minimaxm2.5_fp4_b200.sh turns it into ``--tensor-parallel-size=1
    --data-parallel-size=$TP``. A dp-attn row of the former is one TP worker with its
    experts over its GPUs."""
    from serveplan.e2e_recipes import layout

    fp8 = _row(precision="fp8", tp=2, dp=2, ep=4, concurrency=8, batch_size=4)
    assert layout(fp8) == (2, 1, 2)
    kimi = _row(model="moonshotai/Kimi-K2.5", precision="fp4", version="0.17.0", tp=4, dp=4,
                ep=16, concurrency=4, batch_size=1, gemm_quant="nvfp4", moe_quant="nvfp4")
    assert layout(kimi) == (4, 1, 4)
    pool = deployment(kimi, aic)["pools"][0]
    assert pool["tp"] == 4 and pool["ep"] == 4 and pool["dp"] == 1 and pool["count"] == 1
    assert layout(_row(precision="fp4", tp=4, dp=4, ep=16)) == (1, 4, 4)  # the fp4 switch


@pytest.mark.parametrize("system, version, tp, ep, depth", [
    ("b200_sxm", "0.5.9", 4, 1, 3),     # qwen3.5-fp8-b200-sglang-mtp's only layout
    ("b300_sxm", "0.5.9", 4, 1, 3),     # its recipe, reused on B300 with its image
    ("b200_sxm", "0.5.9", 4, 4, 0),     # the plain key's TP 4 entry runs EP 4
    ("b200_sxm", "0.5.9", 8, 1, 0),     # the plain key's TP 8 entry
    ("b300_sxm", "0.5.10.post1", 4, 1, 0)])  # both B300 keys swept TP 4 / EP 1 on this image
def test_qwen_sglang_mtp_runs_known_by_their_layout(system, version, tp, ep, depth, aic):
    """nvidia-master.yaml, March-April 2026: qwen3.5-fp8-b200-sglang-mtp swept {tp: 4, ep: 1}
    on lmsysorg/sglang:v0.5.9-cu130 (three EAGLE steps), the plain key TP 8 / EP 1 and
    TP 4 / EP 4 on the -amd64 images; on 0.5.10.post1 the B300 variants share image and
    layout, so nothing marks their MTP rows."""
    from serveplan.e2e import MTP_REASON, expressible
    from serveplan.e2e_recipes import mtp_depth

    row = _row(engine="sglang", version=version, model="Qwen/Qwen3.5-397B-A17B",
               system=system, precision="fp8", tp=tp, ep=ep, gemm_quant="fp8",
               moe_quant="fp8", source="db-dump/2026-04-27; config_id=2")
    assert mtp_depth(row) == depth
    assert (expressible(row, aic) == MTP_REASON) == (depth > 0)


def test_dsr1_trtllm_rows_before_the_budget_floor_run_the_2025_scripts():
    """dsr1_fp{4,8}_b200_trt_slurm.sh to 2026-01-08: MAX_NUM_TOKENS = ((CONC + ISL + 64 + 63)
    / 64) * 64 with no 8192 floor (1k prompts, 32 clients: 1120 -> 1152), KV fraction 0.8,
    cuda_graph_config max_batch_size 256 (fp8) / 512 (fp4), no batch waiting."""
    ds = dict(engine="trtllm", model="deepseek-ai/DeepSeek-R1", tp=8, ep=8, isl=1024, osl=1024)
    old = recipe_knobs(_row(concurrency=32, measured="2025-12-15", **ds))
    assert old["max_num_batched_tokens"] == 1152
    assert old["gpu_memory_utilization"] == 0.8
    assert max(old["cuda_graph_sizes"]) == 256
    old64 = recipe_knobs(_row(concurrency=64, measured="2025-12-15", **ds))
    assert "batch_wait_timeout_iters" not in old64
    fp4 = recipe_knobs(_row(concurrency=4, measured="2025-11-02", precision="fp4", **ds))
    assert max(fp4["cuda_graph_sizes"]) == 512 and fp4["max_num_batched_tokens"] == 1152
    new = recipe_knobs(_row(concurrency=32, measured="2026-01-29", **ds))
    assert new["max_num_batched_tokens"] == 8192 and max(new["cuda_graph_sizes"]) == 32
    assert recipe_knobs(_row(concurrency=32, **ds))["max_num_batched_tokens"] == 8192


def test_2025_deepseek_fp8_sweeps_send_more_prompts_per_client():
    """runners/launch_b200-nvd.sh (2025): NUM_PROMPTS = CONC * 20 at OSL 8192, else CONC * 50,
    for deepseek-ai/DeepSeek-R1-0528 (the fp8 sweeps); every other sweep, and 2026's, CONC *
    10 (the client's default)."""
    from serveplan.e2e import BENCH_CLIENT
    from serveplan.e2e_recipes import prompts_per_client

    ds = dict(engine="sglang", model="deepseek-ai/DeepSeek-R1", concurrency=16, tp=8)
    assert prompts_per_client(_row(measured="2025-11-18", osl=1024, **ds)) == 50
    assert prompts_per_client(_row(measured="2025-11-18", osl=8192, **ds)) == 20
    assert prompts_per_client(_row(measured="2026-03-25", **ds)) is None
    assert prompts_per_client(_row(measured="2025-11-10", precision="fp4", **ds)) is None
    assert prompts_per_client(_row(measured="2025-11-18", engine="vllm")) is None
    assert len(BENCH_CLIENT.requests(_row(measured="2025-11-18", osl=1024, **ds)).prompt_len) == 800
    assert len(BENCH_CLIENT.requests(_row(measured="2026-03-25", **ds)).prompt_len) == 160


def test_gptoss_vllm_kv_is_the_checkpoints_before_the_fp8_flag():
    """gptoss_fp4_b200_docker.sh set no kv-cache-dtype until PR 273 (vLLM 0.11.2, about
    2025-12-05), then fp8."""
    gpt = dict(model="openai/gpt-oss-120b", precision="fp4", tp=2)
    assert recipe_knobs(_row(measured="2025-11-02", **gpt))["kv_dtype"] == AUTO_KV
    assert "kv_dtype" not in recipe_knobs(_row(measured="2026-02-25", **gpt))
