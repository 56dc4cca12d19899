"""Held-out rows inside and outside their fold's fit domain (``bench/accuracy_e2e_domains.py``
and :func:`serveplan.e2e_domain.row_outside`), worked by hand on a few rows."""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest

from serveplan.e2e import E2ERow
from serveplan.e2e_domain import RowFacts, domain_of, row_outside
from serveplan.estimator.catalog import resolve_model

MOE, DENSE = resolve_model("deepseek-v3"), resolve_model("llama-3.1-70b")


@pytest.fixture
def domains(accuracy_e2e):  # the fixture puts bench/ on the path
    return importlib.import_module("accuracy_e2e_domains")


def _facts(model="a", gpu="b200", sizes=(8,), disagg=False, spec=MOE, version="0.5.9"):
    return RowFacts(gpu, model, spec, version, sizes, disagg)


def test_each_instance_of_a_row_is_checked():
    domain = domain_of([_facts(sizes=(8,)), _facts(sizes=(4,))])  # 4 to 8 GPUs an instance
    assert row_outside(domain, _facts(sizes=(4, 8))) == {}
    how = row_outside(domain, _facts(sizes=(8, 16), disagg=True, gpu="gb200"))
    assert list(how) == ["gpu", "mode", "instance"]  # in DOMAIN_ASPECTS' order
    assert how["instance"] == "an instance runs on 16 GPU(s); theirs on 4 to 8"
    assert how["mode"] == "it runs disaggregated; theirs ran colocated only"


def _row(k, model, engine="sglang", ttft=100.0):
    return E2ERow(id=f"r{k}", engine=engine, version="1", model=model, system="b200_sxm",
                  precision="fp8", mode="agg", isl=1024, osl=1024, concurrency=4 + k,
                  tp=8, pp=1, dp=1, ep=1, ttft_ms=ttft, tpot_ms=10.0)


def test_a_fold_domain_is_its_other_units_counted_rows(domains, monkeypatch):
    """Units a and c ran on b200, b on b200 and b300; c's second row is a copy of b's b300
    run (same engine, system, load and measurement), which the fits count once, as b's.
    Holding out b, the fold's rows are a's and c's first: b's b300 row is outside. Holding
    out a or c, b's rows put b300 inside."""
    rows = [_row(0, "a"), _row(1, "b"), _row(2, "b"), _row(3, "c"), _row(4, "c")]
    rows[4] = replace(rows[4], concurrency=rows[2].concurrency)
    facts = {"r0": _facts("a"), "r1": _facts("b"), "r2": _facts("b", gpu="b300"),
             "r3": _facts("c"), "r4": _facts("c", gpu="b300")}
    monkeypatch.setattr(domains, "row_facts", lambda r, data_dir: facts[r.id])
    got = domains.held_out_outside(rows, [r.model for r in rows], data_dir=None)
    assert got == [(), (), ("gpu",), (), ()]


def test_an_engine_with_one_unit_has_no_fold(domains, monkeypatch):
    rows = [_row(0, "a", "vllm"), _row(1, "a", "vllm")]
    monkeypatch.setattr(domains, "row_facts", lambda r, data_dir: _facts("a"))
    assert domains.held_out_outside(rows, ["a", "a"], data_dir=None) == [(), ()]


def test_the_table_by_hand(domains):
    rows = [_row(k, "m") for k in range(4)] + [_row(4, "n", "vllm")]
    meas = np.tile([100.0, 10.0], (5, 1))
    held_out = np.array([[110.0, 10.0], [130.0, 10.0], [150.0, 12.0], [60.0, 9.0],
                         [120.0, 11.0]])
    aspects = [(), (), ("gpu",), ("gpu", "mode"), ()]
    table = {(t["engine"], t["rows"]): t
             for t in domains.fold_domain_table(rows, meas, held_out, aspects)}
    inside = table["sglang", "inside"]
    assert inside["n"] == 2 and inside["ttft_med_abs"] == pytest.approx(0.20)  # 10, 30 %
    gpu = table["sglang", "outside: GPU"]
    assert gpu["n"] == 2 and gpu["ttft_med_abs"] == pytest.approx(0.45)  # 50, 40 %
    assert gpu["ttft_bias"] == pytest.approx(0.05)  # +50, -40 %; TPOT +20, -10 %
    assert table["sglang", "outside: colocated / disaggregated"]["n"] == 1
    assert ("sglang", "outside: engine release") not in table  # no row: no line
    assert table["all", "inside"]["n"] == 3
    assert table["all", "inside"]["ttft_med_abs"] == pytest.approx(0.20)  # 10, 30, 20 %
    section = domains.fold_domain_section(list(table.values()))
    assert "| sglang | outside: GPU | 2 | 45.0 | +5.0 | 15.0 | +5.0 |" in section
    assert domains.fold_domain_section([]) == ""
