"""TensorRT-LLM's CUDA graphs: its own batch sizes, and no padding by default.

TensorRT-LLM's ``CudaGraphConfig`` (PyTorch backend, 1.x) captures, when no
``batch_sizes`` are given, ``_generate_cuda_graph_batch_sizes(max_batch_size or 128,
enable_padding)``: with padding 1, 2, 4, 8..128 step 8, without 1..31, 32, 64, 128; then
the powers of two from 256 below ``2**ceil(log2(max_batch_size))``, cut at
``max_batch_size``, which is appended when missing. ``enable_padding`` defaults to False:
a generation batch whose size is not captured runs eagerly (``maybe_get_cuda_graph``
looks the batch size up; only with padding is it rounded up to the next captured size).
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.oracle import CostOracle, trtllm_cuda_graph_sizes
from serveplan.estimator.profile import load_profile
from serveplan.kernels.reference import step_time_ref
from serveplan.kernels.uniform import uniform_step_times

DISPATCH = {"embedding": 1e-3, "norm": 1e-3, "attention": 2e-3, "mlp": 1e-3, "moe": 1e-3,
            "final_norm": 1e-3, "lm_head": 1e-3, "sampler": 1e-3}


def test_trtllm_capture_sizes_by_hand():
    # defaults: max_batch_size 128, no padding -> 1..32, 64, 128 (34 sizes)
    assert trtllm_cuda_graph_sizes() == [*range(1, 33), 64, 128]
    # padding, max 128 -> 1, 2, 4 and the 16 multiples of 8 up to 128 (19 sizes)
    padded = trtllm_cuda_graph_sizes(padding=True)
    assert padded[:5] == [1, 2, 4, 8, 16] and padded[-1] == 128 and len(padded) == 19
    # max 1024 (InferenceX's Llama script): ceil(log2 1024) = 10 adds 2**8, 2**9, then 1024
    assert trtllm_cuda_graph_sizes(1024, padding=True)[-5:] == [120, 128, 256, 512, 1024]
    # max 300: 2**8 only (ceil(log2 300) = 9), then 300 itself
    assert trtllm_cuda_graph_sizes(300)[-4:] == [64, 128, 256, 300]
    # max 48 with padding: the list cut at 48, which is captured
    assert trtllm_cuda_graph_sizes(48, padding=True) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    # a maximum that is not captured is appended: 1, 2, 4, 8 then 12
    assert trtllm_cuda_graph_sizes(12, padding=True) == [1, 2, 4, 8, 12]
    with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
        trtllm_cuda_graph_sizes(0)


@pytest.fixture(scope="module")
def slow_cpu_oracles():
    """Llama-3.1-8B on an H100 with ms-per-module dispatch, so an eager step is CPU-bound:
    unpadded and padded TensorRT-LLM graphs, and eager."""
    prof = load_profile("h100").model_copy(update={"dispatch_s": DISPATCH,
                                                   "correctors": {}})
    sizes = trtllm_cuda_graph_sizes()
    exact = CostOracle("llama-3.1-8b", "h100", profile=prof, graph_sizes=sizes,
                       graph_padding=False)
    padded = CostOracle("llama-3.1-8b", "h100", profile=prof, graph_sizes=sizes)
    eager = CostOracle("llama-3.1-8b", "h100", profile=prof, cuda_graph=False)
    return exact, padded, eager


def _decode(oracle, n):
    return oracle.breakdown(np.ones(n, dtype=np.int64), np.full(n, 500, dtype=np.int64))


def test_unpadded_graphs_replay_captured_sizes_only(slow_cpu_oracles):
    """Without padding, 32 and 64 requests replay their graphs and 33 runs eager: the
    eager step dispatches 32 layers x (2 norms + attention + mlp = 5 ms) = 160 ms at
    least, the graph one a launch plus GPU work, well under 20 ms. With padding 33 replays
    the graph of 64."""
    exact, padded, eager = slow_cpu_oracles
    assert [_decode(exact, n).graph_mode for n in (31, 32, 33, 63, 64)] == \
        ["full", "full", "eager", "eager", "full"]
    assert _decode(exact, 33).time_s == pytest.approx(_decode(eager, 33).time_s, rel=1e-12)
    assert _decode(exact, 33).time_s > 32 * 5e-3 > 20e-3 > _decode(exact, 32).time_s
    assert _decode(exact, 32).time_s == pytest.approx(_decode(padded, 32).time_s, rel=1e-12)
    assert _decode(padded, 33).graph_mode == "full"
    assert _decode(exact, 129).graph_mode == _decode(padded, 129).graph_mode == "eager"


@pytest.mark.parametrize("n", [5, 32, 33, 100, 128])
def test_unpadded_steps_match_the_reference(slow_cpu_oracles, n):
    exact = slow_cpu_oracles[0]
    q, c = np.ones(n, dtype=np.int64), np.arange(n, dtype=np.int64) * 37 + 100
    want = step_time_ref(q, c, exact.table.ops, exact.mods, exact.prm, exact.graph_sizes)
    assert exact.step_time(q, c) == pytest.approx(want, rel=1e-9)


def test_uniform_path_honours_exact_sizes(slow_cpu_oracles):
    """The vectorized table path prices 32, 33 and 64 uniform decodes as the step kernel."""
    exact = slow_cpu_oracles[0]
    batch = np.array([32, 33, 64])
    out = np.zeros(3)
    uniform_step_times(batch, np.ones(3), np.full(3, 500.0), exact.table.ops, exact.mods,
                       exact.prm, exact.graph_sizes, out)
    for k, n in enumerate(batch):
        assert out[k] == pytest.approx(_decode(exact, int(n)).time_s, rel=1e-9)


def _oracle(**kw):
    from serveplan.resolution import resolve

    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100",
            "max_model_len": 8192, **kw}
    return resolve({"pools": [pool]}).pools[0].instance.oracle


def test_trtllm_pools_capture_trtllms_sizes_unpadded():
    o = _oracle(engine="trtllm")
    assert o.graph_sizes.tolist() == trtllm_cuda_graph_sizes() and not o.graph_padding
    assert o.describe()["graph_padding"] is False
    padded = _oracle(engine="trtllm", cuda_graph_padding=True)
    assert padded.graph_sizes.tolist() == trtllm_cuda_graph_sizes(padding=True)
    assert padded.graph_padding and "graph_padding" not in padded.describe()
    given = _oracle(engine="trtllm", cuda_graph_sizes=[1, 8, 16], cuda_graph_padding=True)
    assert given.graph_sizes.tolist() == [1, 8, 16] and given.graph_padding
    assert _oracle(engine="vllm").graph_padding and _oracle().graph_padding


def test_unpadded_graphs_are_refused_for_engines_that_always_pad():
    from pydantic import ValidationError

    from serveplan.pools_config import to_pools

    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100",
            "cuda_graph_padding": False}
    for engine in ("vllm", "sglang"):
        with pytest.raises(ValidationError, match=r"pools.0.cuda_graph_padding\n  "
                           + engine + " always pads"):
            to_pools({"pools": [{**pool, "engine": engine}]})
    assert to_pools({"pools": [{**pool, "engine": "trtllm"}]}).pools[0].cuda_graph_padding \
        is False
