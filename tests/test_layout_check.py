"""The end-to-end report's layout check (``bench/accuracy_e2e_layouts.py``: ``best_layout``): a
layout is the whole parallel layout, and layouts are compared within one precision."""

from __future__ import annotations

import numpy as np

from serveplan.e2e import E2ERow


def _row(k: int, precision: str, tp: int, dp: int, ep: int, ttft: float, tpot: float,
         version: str = "0.5.9") -> E2ERow:
    return E2ERow(id=f"r{k}", engine="sglang", version=version, model="m", system="b200_sxm",
                  precision=precision, mode="agg", isl=1024, osl=1024, concurrency=8,
                  tp=tp, pp=1, dp=dp, ep=ep, ttft_ms=ttft, tpot_ms=tpot)


def test_labels_name_the_whole_parallel_layout(accuracy_e2e):
    tp8 = _row(0, "fp8", 8, 1, 1, 100.0, 10.0)
    ep8 = _row(1, "fp8", 8, 1, 8, 100.0, 10.0)
    assert accuracy_e2e.agg_layout(tp8) == ("tp 8", 8)
    assert accuracy_e2e.agg_layout(ep8) == ("tp 8 ep 8", 8)


def test_labels_read_inferencex_exports_as_they_ran(accuracy_e2e):
    # TensorRT-LLM --tp_size 8 --ep_size 8 with attention DP, exported as attention DP 64,
    # moe_tp 8, moe_ep 8 (docs/validate.md): eight attention-DP ranks of one GPU, experts
    # split eight ways -- eight GPUs, not 64
    row = E2ERow(id="x", engine="trtllm", version="1.2.0rc6.post2",
                 model="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp8",
                 mode="agg", isl=1024, osl=1024, concurrency=64, tp=1, pp=1, dp=64, ep=8,
                 ttft_ms=1.0, tpot_ms=1.0, batch_size=1, moe_tp=8)
    assert accuracy_e2e.agg_layout(row) == ("dp 8 ep 8", 8)


def test_layouts_are_compared_within_one_precision_and_version(accuracy_e2e):
    # fp8 on 0.5.9: TP 8 measured faster (request 100 + 1023 x 10 ms) than TP 8 + EP 8
    # (x 11 ms); fp4, and fp8 on another version: one layout each, so not a group --
    # although their TP 4 rows are faster than both.
    rows = [_row(0, "fp8", 8, 1, 1, 100.0, 10.0), _row(1, "fp8", 8, 1, 8, 100.0, 11.0),
            _row(2, "fp4", 4, 1, 1, 100.0, 5.0), _row(3, "fp8", 4, 1, 1, 100.0, 6.0, "0.5.6")]
    right = np.array([[100.0, 10.0], [100.0, 11.0], [100.0, 5.0], [100.0, 6.0]])
    wrong = np.array([[100.0, 12.0], [100.0, 11.0], [100.0, 5.0], [100.0, 6.0]])
    result = accuracy_e2e.best_layout(rows, {"right": right, "wrong": wrong}, "agg",
                                      accuracy_e2e.agg_layout)
    # one group of two layouts: a random pick is right half the time
    assert result["right"] == {"agree": 1, "fastest": 1, "groups": 1, "chance": 0.5}
    assert result["wrong"] == {"agree": 0, "fastest": 0, "groups": 1, "chance": 0.5}
