"""Strategy search over attention data parallelism (``--dp``): MoE instances of tp x dp GPUs
whose experts run expert-parallel over all of them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import SLO
from serveplan.deployments import gpus
from serveplan.search import SearchSpec, count_strategies, enumerate_strategies, run_search
from serveplan.search_dataset import strategy_label

MOE = dict(model="qwen3-30b-a3b", gpu="h100", isl=1024, osl=256,
           slo=SLO(ttft_ms=1000, tpot_ms=70), fidelity="analytic")


def test_enumeration_with_dp_counts_by_hand():
    """8 GPUs, tp 1 or 2, dp 1 or 4: instance sizes 1, 4, 2 and 8 GPUs.

    Colocated: 8 + 2 + 4 + 1 = 15. PD, prefill of g_p GPUs times y, decode of g_d GPUs in
    what is left: g_p = 1 (y = 1..7 leaves 7..1): 28 at g_d 1, 4 at 4, 12 at 2, 0 at 8;
    g_p = 4 (y = 1 leaves 4): 4 + 1 + 2; g_p = 2 (leaves 6, 4, 2): 12 + 2 + 6; g_p = 8: none.
    71 in all, 86 with the colocated ones."""
    spec = SearchSpec(**MOE, gpus=8, tp=(1, 2), dp=(1, 4))
    rows = enumerate_strategies(spec)
    assert len(rows) == count_strategies(spec) == 86
    assert all(gpus(d) <= 8 for d in rows)
    wide = [d for d in rows if getattr(d, "dp", 1) == 4 and d.tp == 2]
    assert len(wide) == 1 and (wide[0].ep, gpus(wide[0])) == (8, 8)
    assert strategy_label(wide[0]) == "1m-tp2dp4"
    mixed = [d for d in rows if getattr(d, "prefill", None) is not None
             and (d.prefill.dp, d.decode.dp, d.prefill.tp, d.decode.tp) == (1, 4, 1, 1)]
    assert {strategy_label(d) for d in mixed} == {"1p1d-tp1/tp1dp4", "2p1d-tp1/tp1dp4",
                                                   "3p1d-tp1/tp1dp4", "4p1d-tp1/tp1dp4"}


def test_dp_and_dp_free_instances_are_different_families():
    """2m-tp1dp4 dominates 1m-tp1dp4 (the same instance twice), but not 8m-tp1: eight
    tp 1 instances are no integer multiple of a dp 4 one."""
    ds = run_search(SearchSpec(**MOE, gpus=8, tp=(1,), dp=(1, 4), architectures=("colocated",)))
    status = {str(n): str(s) for n, s in zip(ds["name"].values, ds["status"].values, strict=True)}
    assert status["1m-tp1dp4"] == "dominated"
    assert status["8m-tp1"] == "decided" and status["2m-tp1dp4"] == "decided"
    assert set(ds["dp_prefill"].values.tolist()) == {1, 4}


def test_dp_for_a_dense_model_is_refused_by_name():
    with pytest.raises(ValidationError, match=r"(?s)dp.*llama-3.1-8b has no MoE layers"):
        SearchSpec(**{**MOE, "model": "llama-3.1-8b"}, gpus=8, dp=(1, 2))
    out = CliRunner().invoke(app, ["search", "--model", "llama-3.1-8b", "--gpus", "4",
                                   "--dp", "1,2", "--fidelity", "analytic"])
    assert out.exit_code == 1 and "--dp:" in out.output and "Traceback" not in out.output
