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


def test_estimate_json_matches_python_api(oracle_8b):
    r = run("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--phase", "prefill",
            "--batch", "2", "--input-len", "1024", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out) >= {"time_s", "bound", "modules"}
    assert {"name", "dispatch_s", "compute_s", "comm_s"} <= set(out["modules"][0])
    assert out["time_s"] == pytest.approx(oracle_8b.prefill_time(2, 1024))
    assert out["bound"] == "compute"


def test_memory_json_keys_and_values():
    r = run("memory", "--model", "qwen3-30b-a3b", "--gpu", "h20", "--tp", "2",
            "--gpu-memory-utilization", "0.85", "--max-num-batched-tokens", "32768",
            "--max-num-seqs", "64", "--max-model-len", "32768", "--block-size", "16", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
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
