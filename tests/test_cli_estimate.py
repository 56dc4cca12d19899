"""`serveplan estimate` and `serveplan memory` through typer's CliRunner."""

import json

import pytest
from typer.testing import CliRunner

from serveplan.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_estimate_decode_table(oracle_8b):
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "1", "--phase",
            "decode", "--batch", "64", "--context-len", "2048")
    assert r.exit_code == 0, r.output
    assert "attention" in r.output and "step time" in r.output and "CUDA graph" in r.output


def test_estimate_says_which_profile_a_gpu_borrows(oracle_8b):
    """GB200 has no per-op data: the step is priced with B200's profile, and the output
    says so; H100's own profile needs no such line."""
    args = ("--model", "llama-3.1-8b", "--batch", "8", "--context-len", "512")
    r = run("estimate", "--gpu", "gb200", *args)
    assert r.exit_code == 0, r.output
    assert "profile: b200's (no per-op data for gb200)" in r.output
    assert "profile:" not in run("estimate", "--gpu", "h100", *args).output
    b300 = " ".join(run("estimate", "--gpu", "b300", *args).output.split())
    assert ("profile: b200's (no per-op data for b300; at its measured speed, prefill "
            "1.135x, decode 1.035x)") in b300


def test_estimate_json_matches_python_api(oracle_8b):
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--phase", "prefill",
            "--batch", "2", "--input-len", "1024", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert set(out) >= {"time_s", "bound", "modules"}
    assert {"name", "dispatch_s", "compute_s", "comm_s"} <= set(out["modules"][0])
    assert out["time_s"] == pytest.approx(oracle_8b.prefill_time(2, 1024))
    assert out["bound"] == "compute"


def test_memory_json_keys_and_values():
    r = run("memory", "--model", "qwen3-30b-a3b", "--gpu", "h20", "--tp", "2",
            "--gpu-memory-utilization", "0.85", "--max-num-batched-tokens", "32768",
            "--max-num-seqs", "64", "--max-model-len", "32768", "--block-size", "16", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    for key in ("weights_bytes", "activation_bytes", "non_torch_bytes", "kv_bytes_per_token",
                "num_gpu_blocks", "kv_tokens", "fits"):
        assert key in out
    assert out["fits"] is True
    assert out["kv_bytes_per_token"] == 2 * 2 * 128 * 2 * 48  # 2 KV heads/rank, 48 layers
    assert out["kv_tokens"] == (out["num_gpu_blocks"] - 1) * 16


def test_memory_table():
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100")
    assert r.exit_code == 0 and "blocks" in r.output and "weights" in r.output


@pytest.mark.parametrize("args,needle", [
    (("memory", "--model", "llama-3.1-70b", "--gpu", "h100"), "tp ≥ 4 fits"),
    (("estimate", "--model", "llama-3.1-7b", "--gpu", "h100"), "did you mean"),
    (("estimate", "--model", "llama-3.1-8b", "--gpu", "a100", "--dtype", "fp8"), "fp8"),
    (("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "3"), "tp=3"),
    (("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--profile", "nope.json"),
     "nope.json"),
])
def test_bad_input_is_one_error_line_and_exit_1(args, needle):
    r = run(*args)
    assert r.exit_code == 1
    assert needle in r.output
    assert "Traceback" not in r.output


def test_bad_flag_value_exits_nonzero():
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "0")
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_profile_file_errors_name_the_field(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"kernel_fixed_s": -1}))
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--profile", str(bad))
    assert r.exit_code == 1 and "kernel_fixed_s" in r.output


# ------------------------------------------------------------ the new-user issue, one by one
def one_error_line(r, needle):
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert needle in lines[0] and "Traceback" not in r.output


@pytest.mark.parametrize("value,needle", [
    ("inf", "kv_cache_memory_bytes must be a finite number of bytes > 0, got inf"),
    ("nan", "kv_cache_memory_bytes must be a finite number"),
    ("0", "kv_cache_memory_bytes must be a finite number of bytes > 0, got 0.0"),
    ("1e30", "more than h100 has"),
])
def test_memory_kv_cache_memory_values(value, needle):
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", value)
    one_error_line(r, needle)
    assert "short by -" not in r.output


def test_memory_block_size_not_in_vllms_set():
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--block-size", "7")
    one_error_line(r, "block_size must be one of vLLM's (1, 8, 16, 32, 64, 128, 256), got 7")


def test_memory_num_gpu_blocks_override_is_reported_as_given():
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100",
            "--num-gpu-blocks-override", "2", "--max-model-len", "16", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["num_gpu_blocks"] == 2 and out["kv_tokens"] == 16
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100",
            "--num-gpu-blocks-override", "2", "--max-model-len", "16")
    assert "2 blocks = 16 usable tokens" in " ".join(r.output.split())
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100",
            "--num-gpu-blocks-override", "2")
    one_error_line(r, "num_gpu_blocks=2 leaves 1 usable (one is vLLM's null block)")


def test_estimate_refuses_a_prompt_beyond_the_models_positions(oracle_8b):
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--phase", "prefill",
            "--input-len", "1000000")
    one_error_line(r, "exceeds llama-3.1-8b's max_position_embeddings=131,072")
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--context-len", "131072")
    one_error_line(r, "131,073 tokens per request exceeds")


def test_estimate_warns_and_flags_a_batch_beyond_the_kv_cache(oracle_8b):
    # 4096 requests × ceil((8192 + 1) / 16) = 513 blocks = 2,101,248 blocks; vLLM's plan on
    # one H100 holds 28,514 usable blocks (test_engine_memory.test_vllm_budget_by_hand)
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "4096",
            "--context-len", "8192", "--json")
    assert r.exit_code == 0, r.output
    assert "warning: this step does not fit in memory" in r.stderr
    out = json.loads(r.stdout)
    assert out["fits_in_memory"] is False
    assert out["kv_cache"]["blocks_needed"] == 4096 * 513
    assert out["kv_cache"]["blocks_available"] == 28_514
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "64",
            "--context-len", "2048", "--json")
    assert json.loads(r.stdout)["fits_in_memory"] is True and not r.stderr


def test_memory_engine_option_follows_each_engines_rule():
    # hand arithmetic in tests/test_engine_memory.py: SGLang 445,938 tokens, TensorRT-LLM
    # 14,667 blocks of 32
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
            "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["kv_tokens"] == 445_938
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm",
            "--free-gpu-memory-fraction", "0.9", "--json")
    out = json.loads(r.stdout)
    assert out["num_gpu_blocks"] == 14_667 and out["block_size"] == 32
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang")
    assert r.exit_code == 0 and "mem_fraction_static 0.874" in r.output
    r = run("memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
            "--gpu-memory-utilization", "0.8")
    one_error_line(r, "gpu_memory_utilization is a vllm setting")


def test_dtype_fp4_is_the_nvfp4_shorthand_on_the_command_line_too():
    """The pools YAML reads ``dtype: fp4`` as NVFP4 (the engines' fp4); ``--dtype fp4`` does
    the same, so both spellings give one step time and one weight footprint, below fp8's
    (4.5 vs 8 bits per weight on a memory-bound batch-1 decode)."""
    def est(dtype):
        r = run("estimate", "--model", "llama-3.1-70b", "--gpu", "b200", "--batch", "1",
                "--dtype", dtype, "--json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["time_s"]

    assert est("fp4") == est("nvfp4") < est("fp8")
