"""The offline-throughput check against TensorRT-LLM's performance overview
(``bench/accuracy_offline.py``): how its published runs become serveplan deployments."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture
def offline(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    return importlib.import_module("accuracy_offline")


def test_both_docs_spellings_name_one_model(offline):
    assert {offline.model_key(n) for n in ("Llama 3.3 70B", "LLaMA v3.3 70B")} == {
        "llama-3.3-70b"}
    assert {offline.model_key(n) for n in ("Qwen3-235B-A22B", "Qwen3 235B A22B")} == {
        "qwen3-235b-a22b"}
    assert offline.model_key("Deepseek R1 0528") == "deepseek-r1"


def test_stored_elements_count_packed_fp4_bytes_as_the_checkpoint_does(offline):
    """Llama-3.1-8B in NVFP4 with the LM head left out. In 16 bits stay the embedding and the
    LM head (2 x 128,256 x 4,096 = 1,050,673,152) and the norms (2 x 32 x 4,096 + 4,096 =
    266,240): 1,050,939,392. The other 8,030,261,248 - 1,050,939,392 = 6,979,321,856 weights
    are stored as half a byte each plus an FP8 scale per 16 (0.5625 bytes, one element a
    byte): 3,925,868,544 elements. In all 4,976,807,936; FP8 per tensor keeps one a weight."""
    from serveplan.estimator.catalog import resolve_model
    from serveplan.quant_source import load_quantization

    model = resolve_model("meta-llama/Llama-3.1-8B")
    fp4 = load_quantization(offline._FP4, model)
    assert offline.stored_elements(model, fp4) == pytest.approx(4_976_807_936, rel=1e-9)
    fp8 = load_quantization(offline._FP8, model)
    assert offline.stored_elements(model, fp8) == pytest.approx(8_030_261_248, rel=1e-9)


def test_moe_runs_are_laid_out_as_the_docs_run_them(offline):
    """``DEPn`` and the v1.0 table's MoE ``TPn``: n attention-DP ranks, experts over all n,
    requests to the rank with the fewest tokens; a dense ``TPn`` stays tensor parallel."""
    row = offline.PerfRow("v1.0", "qwen3-235b-a22b", "H200", "TP8", 8, 1, 0, "FP8", 1000, 1000,
                          1.0)
    deploy, limits = offline.deployment(row)
    pool = deploy["pools"][0]
    assert (pool["tp"], pool["dp"], pool["ep"]) == (1, 8, 8)
    assert deploy["router"] == "least-outstanding-tokens"
    assert pool["max_num_seqs"] == limits["max_batch_size"]
    dense = offline.PerfRow("v1.0", "llama-3.3-70b", "H100", "TP2", 2, 1, 0, "FP8", 1000,
                            1000, 1.0)
    deploy, _ = offline.deployment(dense)
    assert deploy["pools"][0]["tp"] == 2 and "dp" not in deploy["pools"][0]


def test_the_published_tables_load_whole(offline, shared_data):
    """SOURCE.md: 328 rows in the v1.0 table, 150 in the dev guide's."""
    rows = offline.load_rows(shared_data / "ground_truth" / "tensorrt_llm_perf_overview")
    assert sum(r.table == "v1.0" for r in rows) == 328
    assert sum(r.table == "dev-guide" for r in rows) == 150
    assert all(r.measured > 0 for r in rows)
