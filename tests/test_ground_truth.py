"""Argonne LLM-Inference-Bench loader (validation data; nothing is fitted to it)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from serveplan.estimator.ground_truth import (
    ARGONNE_HARDWARE_TO_GPU,
    GroundTruthError,
    argonne_model_to_hf,
    catalog_model_ids,
    load_argonne,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "measurements" / "argonne_llm_inference_bench"
SHARED = REPO.parent / "shared" / "data"
REAL = SHARED / "ground_truth" / "argonne_llm_inference_bench"
MODELS = SHARED / "models"


def test_model_mapping():
    assert argonne_model_to_hf("LLaMA-3-8B") == ("meta-llama/Meta-Llama-3-8B", True)
    assert argonne_model_to_hf("llama 2 70b") == ("meta-llama/Llama-2-70b-hf", True)
    assert argonne_model_to_hf("Mixtral-8x7B") == ("mistralai/Mixtral-8x7B-v0.1", True)
    assert argonne_model_to_hf("Qwen/Qwen2-7B") == ("Qwen/Qwen2-7B", True)
    assert argonne_model_to_hf("Falcon-40B") == ("Falcon-40B", False)
    # a catalog match is case-insensitive and returns the catalog's spelling
    assert argonne_model_to_hf("META-LLAMA/meta-llama-3-8b", ["meta-llama/Meta-Llama-3-8B"]) \
        == ("meta-llama/Meta-Llama-3-8B", True)


def test_fixture_all_results_row():
    df = load_argonne(FIXTURE)
    row = df[(df.source == "all_results") & (df.gpu == "h100") & (df.num_gpus == 2)]
    assert len(row) == 1
    row = row.iloc[0]
    assert (row.engine, row.tp, row.batch_size, row.input_len, row.output_len) == \
        ("vllm", 2, 16, 1024, 1024)
    assert row.latency_s == pytest.approx(9.667587390266393)
    # published throughput counts input + output tokens: 2 * 1024 * 16 / latency
    assert row.throughput_tok_s == pytest.approx(2 * 1024 * 16 / 9.667587390266393)
    assert bool(row.throughput_consistent)
    assert row.output_throughput_tok_s == pytest.approx(1024 * 16 / 9.667587390266393)
    assert math.isnan(row.ttft_s) and math.isnan(row.tpot_s)


def test_fixture_gpu_engine_tp_mapping():
    df = load_argonne(FIXTURE)
    a100 = df[df.hardware == "Nvidia A100 GPU"]
    assert set(a100.gpu) == {"a100-40gb"}
    assert set(a100.engine) == {"llama.cpp", "trtllm"}
    assert a100.loc[a100.engine == "llama.cpp", "tp"].isna().all()
    assert (a100.loc[a100.engine == "trtllm", "tp"] == 4).all()
    # llama.cpp's throughput column is not (in + out) x batch / latency
    assert not a100.loc[a100.engine == "llama.cpp", "throughput_consistent"].any()
    assert set(df.weight_dtype) == {"fp16"} and set(df.kv_dtype) == {"fp16"}


def test_fixture_ttft_rows():
    df = load_argonne(FIXTURE, sources=["ttft_itl"])
    assert len(df) == 4  # blank lines skipped
    row = df[(df.gpu == "h100") & (df.hf_model == "meta-llama/Meta-Llama-3-8B")].iloc[0]
    assert row.ttft_s == pytest.approx(0.42566500790417194)
    assert row.latency_s == pytest.approx(11.024687729899984)
    assert (row.input_len, row.output_len, row.batch_size) == (1024, 1024, 16)
    assert row.tpot_s == pytest.approx((11.024687729899984 - 0.42566500790417194) / 1023)
    assert pd.isna(row.throughput_consistent)
    gh = df[df.gpu == "gh200"].iloc[0]  # end_latency missing in the file
    assert math.isnan(gh.latency_s) and math.isnan(gh.tpot_s)
    assert gh.ttft_s == pytest.approx(0.3281266689300537)


def test_errors_name_values(tmp_path):
    with pytest.raises(GroundTruthError, match=r"\['bogus'\].*all_results"):
        load_argonne(FIXTURE, sources=["bogus"])
    with pytest.raises(GroundTruthError, match="All_results.csv not found"):
        load_argonne(tmp_path)
    bad = tmp_path / "All_results.csv"
    bad.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,"
                   "Latency,Throughput\nCerebras CS-3,1,vLLM,x/y,128,1,1.0,256.0\n")
    with pytest.raises(GroundTruthError, match=r"'Cerebras CS-3'.*Nvidia H100 GPU"):
        load_argonne(tmp_path)


# ------------------------------------------------------------------------ real data


@pytest.fixture(scope="module")
def real() -> pd.DataFrame:
    if not (REAL / "All_results.csv").is_file():
        pytest.skip(f"{REAL} not present")
    return load_argonne(REAL, models_dir=MODELS if MODELS.is_dir() else None)


def test_real_counts_and_mapping(real):
    counts = real[real.source == "all_results"].groupby(["gpu", "engine"]).size()
    # row counts stated in SOURCE.md
    assert counts[("h100", "vllm")] == 369 and counts[("h100", "trtllm")] == 279
    assert counts[("a100-40gb", "vllm")] == 235 and counts[("a100-40gb", "trtllm")] == 256
    assert (real.source == "all_results").sum() == 4772
    assert set(real.gpu) <= set(ARGONNE_HARDWARE_TO_GPU.values())
    assert real.model_known.all()
    # vLLM / TRT-LLM: throughput = 2 L B / latency (SOURCE.md)
    tp_rows = real[real.engine.isin(["vllm", "trtllm"]) & (real.source == "all_results")]
    assert tp_rows.throughput_consistent.mean() > 0.98


def test_real_hand_checked_row(real):
    row = real[(real.source == "all_results") & (real.gpu == "h100") & (real.engine == "vllm")
               & (real.hf_model == "meta-llama/Meta-Llama-3-8B") & (real.num_gpus == 1)
               & (real.input_len == 1024) & (real.batch_size == 16)]
    assert len(row) == 1
    assert row.latency_s.iloc[0] == pytest.approx(11.024687729899984)
    assert row.throughput_tok_s.iloc[0] == pytest.approx(2972.23838015204)
    ttft = real[(real.source == "ttft_itl") & (real.gpu == "h100") & (real.engine == "vllm")
                & (real.hf_model == "meta-llama/Meta-Llama-3-8B")]
    # end_latency of the TTFT file is the latency of the same 1024/1024 run
    assert ttft.latency_s.iloc[0] == pytest.approx(row.latency_s.iloc[0])
    assert ttft.tpot_s.iloc[0] * 1e3 == pytest.approx(10.3607, abs=1e-3)


def test_real_quant_dtypes(real):
    quant = real[real.source == "quant"]
    assert len(quant) == 116
    pairs = set(zip(quant.weight_dtype, quant.kv_dtype, strict=True))
    assert ("fp8", "fp8") in pairs and ("fp16", "int8") in pairs


def test_real_catalog_flag(real):
    if not MODELS.is_dir():
        pytest.skip(f"{MODELS} not present")
    ids = catalog_model_ids(MODELS)
    assert "meta-llama/Meta-Llama-3-8B" in ids
    l3 = real[real.hf_model == "meta-llama/Meta-Llama-3-8B"]
    assert l3.in_catalog.all()
    q2 = real[real.hf_model == "Qwen/Qwen2-7B"]
    assert len(q2) > 0 and not q2.in_catalog.any()
