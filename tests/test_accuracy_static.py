"""TensorRT-LLM's 2023 tables as read by ``bench/accuracy_static.py``: which rows, which
units, and what is compared."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

HEAD = "source_doc,trtllm_version,gpu,precision,model,batch_size,tp,isl,osl,throughput," \
       "throughput_unit\n"
FIRST = "source_doc,trtllm_version,gpu,precision,model,batch_size,tp,isl," \
        "first_token_latency_ms\n"


@pytest.fixture
def static(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    return importlib.import_module("accuracy_static")


def test_per_gpu_tables_count_every_gpu_and_unknown_models_are_left_out(static, tmp_path):
    """A stand-in prices every batch at 2 s: 64 x 128 tokens / 2 s = 4,096 tok/s predicted.
    H100's 1,000 tok/s/GPU at TP 2 is 2,000 for the run (error +104.8 %); A100's 1,000
    tok/s is the run's (+309.6 %); GPT-J is not in the catalog."""
    (tmp_path / static.STATIC).write_text(
        HEAD + "d,v0.6,H100,FP8,LLaMA 7B,64,2,128,128,1000,out_tok_s_per_gpu\n"
        "d,v0.6,A100,FP16,LLaMA 7B,64,2,128,128,1000,out_tok_s\n"
        "d,v0.6,H100,FP8,GPT-J 6B,64,1,128,128,1000,out_tok_s_per_gpu\n")
    (tmp_path / static.FIRST_TOKEN).write_text(FIRST)
    res = static.static_level(tmp_path, lambda oracle, b, i, o: 2.0)
    rows = res["rows"]
    assert [(r["gpu"], r["measured"]) for r in rows] == [("H100", 2000.0), ("A100", 1000.0)]
    assert [r["predicted"] for r in rows] == [4096.0, 4096.0]
    assert [round(100 * r["rel_err"], 1) for r in rows] == [104.8, 309.6]
    assert {(s["gpu"], s["tp"], s["n"]) for s in res["summary"]} == {("H100", ">1", 1),
                                                                    ("A100", ">1", 1)}


def test_a_first_token_is_one_prefill_step(static, tmp_path):
    from serveplan.estimator.oracle import CostOracle
    from serveplan.estimator.profile import load_profile

    (tmp_path / static.STATIC).write_text(HEAD)
    (tmp_path / static.FIRST_TOKEN).write_text(FIRST + "d,v0.5,A100,FP16,LLaMA 7B,1,1,2048,133\n")
    row, = static.static_level(tmp_path, None)["rows"]
    oracle = CostOracle("meta-llama/Llama-2-7b-hf", "a100-80gb", dtype="fp16", kv_dtype="fp16",
                        profile=load_profile("a100-80gb", "trtllm"))
    assert row["predicted"] == pytest.approx(1e3 * float(oracle.prefill_time(1, 2048)))
    assert row["rel_err"] == pytest.approx(row["predicted"] / 133 - 1)
