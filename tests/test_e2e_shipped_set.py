"""The held-out check of the shipped term sets (``bench/accuracy_e2e_shipped_set.py``):
which engines it checks, the set it refits, and the overall figure it rebuilds, by hand."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from serveplan.e2e import E2ERow


@pytest.fixture
def shipped(accuracy_e2e):  # the fixture puts bench/ on the path
    return importlib.import_module("accuracy_e2e_shipped_set")


def _report():
    """vLLM: folds and profile on ``all``; SGLang: folds on ``all`` (too few models for the
    inner choice), profile ``latency``; TensorRT-LLM: one fold disagrees."""
    folds = [{"engine": "vllm", "term_set": "all"}, {"engine": "vllm", "term_set": "all"},
             {"engine": "sglang", "term_set": "all"}, {"engine": "sglang", "term_set": "all"},
             {"engine": "trtllm", "term_set": "latency+experts+step"},
             {"engine": "trtllm", "term_set": "latency+experts"}]
    profiles = {"vllm": {"term_set": "all"}, "sglang": {"term_set": "latency"},
                "trtllm": {"term_set": "latency+experts+step"}}
    return {"folds": folds, "profiles": profiles}


def test_checks_the_engines_whose_folds_fitted_another_set(shipped):
    assert shipped.engines_to_check(_report()) == ["sglang", "trtllm"]


def test_the_refitted_set_is_the_shipped_label_s_terms(shipped):
    assert shipped.CANDIDATES["latency"] == ("frontend_output_s", "disagg_handoff_s")
    assert shipped.CANDIDATES["latency+experts+step"] == (
        "frontend_output_s", "disagg_handoff_s", "prefill_step_expert_layer_s",
        "step_overhead_s")


def _row(k, ttft, tpot):
    return E2ERow(id=f"r{k}", engine="sglang", version="1", model="m", system="b200_sxm",
                  precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=4, tp=4,
                  pp=1, dp=1, ep=1, ttft_ms=ttft, tpot_ms=tpot)


def test_overall_replaces_only_the_checked_rows(shipped):
    rows = [_row(0, 100.0, 10.0), _row(1, 200.0, 20.0), _row(2, 400.0, 40.0)]
    meas = np.array([[100.0, 10.0], [200.0, 20.0], [400.0, 40.0]])
    # the report's held-out predictions: TTFT errors +50, -10, +20 %; TPOT 0, +10, -30 %
    folds = np.array([[150.0, 10.0], [180.0, 22.0], [480.0, 28.0]])
    checks = {"sglang": {"row_ids": ["r2"], "pred": [[404.0, 40.0]]}}  # r2: +1 %, 0 %
    # TTFT |errors| 50, 10, 1 -> median 10; TPOT 0, 10, 0 -> median 0
    assert shipped.overall_with(rows, meas, {"engine_fitted_lomo": folds}, checks) == [10.0, 0.0]
    assert folds[2, 0] == 480.0  # the report's column itself is left alone


def test_an_engine_whose_folds_could_not_choose_ships_the_default_set(accuracy_e2e):
    """SGLang's case: three held-out units, so every fold trained on two and kept the
    first candidate; the profile fits that set, not one of its own choice."""
    candidates = {"all": ("a", "b"), "latency": ("a",)}
    folds = [{"scores": None}, {"scores": None}, {"scores": None}]
    chosen, choice = accuracy_e2e._shipped_set([], [], None, [], [], candidates, None, [],
                                               folds)
    assert chosen == ("a", "b") and choice["term_set"] == "all" and choice["scores"] is None
    assert "no fold" in choice["why"]


def test_an_engine_whose_folds_chose_makes_its_own_choice(accuracy_e2e, monkeypatch):
    calls = []
    monkeypatch.setattr(accuracy_e2e, "_select",
                        lambda *args: calls.append(args) or (("a",), {"term_set": "latency"}))
    folds = [{"scores": {"all": 0.3, "latency": 0.2}}, {"scores": None}]
    chosen, _ = accuracy_e2e._shipped_set([0], [], None, [], [], {"all": ("a", "b")}, None,
                                          [], folds)
    assert chosen == ("a",) and len(calls) == 1
