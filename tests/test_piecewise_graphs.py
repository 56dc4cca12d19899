"""Piecewise CUDA graphs for mixed steps (vLLM V1's torch.compile default).

vLLM V1 compiles the model and captures CUDA graphs split at the attention op
(``CompilationConfig.splitting_ops``): a mixed batch of up to the largest capture size is
padded to a capture size and replays one graph piece before the first attention and one
after every attention, which runs eagerly between them. So a mixed step's CPU side is
``launch + L x (attention dispatch + launch)`` instead of every module's dispatch, and a
pure-decode batch stays one full graph. Expected values follow Algorithm 1 (BestServe):
the pass ends after its last dispatch plus at most all of its GPU work.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.estimator.oracle import CostOracle
from serveplan.estimator.profile import load_profile
from serveplan.kernels import roofline as K
from serveplan.kernels.reference import step_time_ref
from serveplan.kernels.uniform import uniform_step_times

DISPATCH = {"embedding": 1e-3, "norm": 1e-3, "attention": 2e-3, "mlp": 1e-3, "moe": 1e-3,
            "final_norm": 1e-3, "lm_head": 1e-3, "sampler": 1e-3}
LAUNCH = 50e-6


@pytest.fixture(scope="module")
def slow_cpu():
    """Llama-3.1-8B on an H100 whose dispatch is slow (ms per module) so the CPU side
    decides the step: eager and piecewise oracles of the same profile."""
    prof = load_profile("h100").model_copy(update={"dispatch_s": DISPATCH,
                                                   "graph_launch_s": LAUNCH,
                                                   "correctors": {}})
    eager = CostOracle("llama-3.1-8b", "h100", profile=prof, max_num_seqs=256)
    piece = CostOracle("llama-3.1-8b", "h100", profile=prof, max_num_seqs=256,
                       piecewise_cuda_graph=True)
    return eager, piece


def _mixed(decodes: int, chunk: int):
    q = np.array([1] * decodes + [chunk], dtype=np.int64)
    return q, np.full(q.shape[0], 300, dtype=np.int64)


def _gpu(b) -> float:
    return sum(m["compute_s"] + m["comm_s"] for m in b.modules)


def test_mixed_step_cpu_path_by_hand(slow_cpu):
    """32 layers. Eager: embedding 1 + 32 x (norm 1 + attention 2 + norm 1 + mlp 1) +
    final norm 1 + lm_head 1 + sampler 1 = 164 ms of dispatch. Piecewise: one launch, then
    per layer attention 2 ms + a launch: 0.05 + 32 x 2.05 = 65.65 ms. Each pass ends
    after its last dispatch and at most all its GPU work later (plus the step overhead)."""
    eager, piece = slow_cpu
    q, c = _mixed(20, 100)
    overhead = eager.profile.step_overhead_s
    for oracle, cpu, mode in ((eager, 164e-3, "eager"), (piece, 65.65e-3, "piecewise")):
        b = oracle.breakdown(q, c)
        assert b.graph_mode == mode
        assert cpu + overhead <= b.time_s <= cpu + overhead + _gpu(b) + 1e-12
    b = piece.breakdown(q, c)  # per module: attention and the launch of the piece after it
    assert sum(m["dispatch_s"] for m in b.modules) == pytest.approx(32 * (2e-3 + LAUNCH))


def test_which_steps_run_piecewise(slow_cpu):
    """Capture sizes of max_num_seqs 256 end at 512 tokens: a mixed step of up to 512
    tokens is piecewise, a larger one eager; decodes alone are one full graph."""
    _, piece = slow_cpu
    assert piece.graph_sizes[-1] == 512
    assert piece.breakdown(*_mixed(12, 500)).graph_mode == "piecewise"
    assert piece.breakdown(*_mixed(12, 501)).graph_mode == "eager"
    q = np.ones(40, dtype=np.int64)
    assert piece.breakdown(q, np.full(40, 300, dtype=np.int64)).graph_mode == "full"


def test_piecewise_pads_tokens_to_a_capture_size(slow_cpu):
    """A 20 + 100 = 120-token mixed step is padded to the 120 capture size (no change);
    121 tokens run as 128: the token-linear ops see the padded count."""
    _, piece = slow_cpu
    agg, comp, comm = piece.scratch()
    for chunk, want in ((100, 120.0), (101, 128.0)):
        q, c = _mixed(20, chunk)
        T, R, mode = K.step_costs(q, c, q.shape[0], piece.table.ops, piece.mods, piece.prm,
                                  piece.graph_sizes, agg, comp, comm)
        assert (T, R, mode) == (want, 21.0, K.GRAPH_PIECEWISE)


def test_kernel_matches_the_reference_with_piecewise_graphs(slow_cpu):
    """The compiled step and the op-by-op reference agree on random mixed steps."""
    _, o = slow_cpu
    rng = np.random.default_rng(11)
    agg, comp, comm = o.scratch()
    for _ in range(30):
        n = int(rng.integers(1, 40))
        q = np.ones(n, dtype=np.int64)
        q[0] = int(rng.integers(2, 900))
        c = rng.integers(0, 3000, n).astype(np.int64)
        t = K.step_time(q, c, n, o.table.ops, o.mods, o.prm, o.graph_sizes, agg, comp, comm)
        assert t == pytest.approx(step_time_ref(q, c, o.table.ops, o.mods, o.prm,
                                                o.graph_sizes), rel=1e-9)


def test_uniform_path_prices_piecewise_steps_alike(slow_cpu):
    """The vectorized path agrees with the step kernel on uniform mixed batches (4 x 64
    tokens: piecewise; 4 x 200: eager)."""
    _, o = slow_cpu
    agg, comp, comm = o.scratch()
    for tokens in (64, 200):
        out = np.zeros(1)
        uniform_step_times(np.array([4]), np.array([tokens]), np.array([500]),
                             o.table.ops, o.mods, o.prm, o.graph_sizes, out)
        q = np.full(4, tokens, dtype=np.int64)
        c = np.full(4, 500, dtype=np.int64)
        t = K.step_time(q, c, 4, o.table.ops, o.mods, o.prm, o.graph_sizes, agg, comp, comm)
        assert out[0] == pytest.approx(t, rel=1e-9)


def test_engines_that_run_piecewise_graphs():
    """vLLM V1 pools run piecewise graphs, eager mode (cuda_graph false) none; SGLang and
    TensorRT-LLM run mixed steps eagerly by default; no engine: as before, eager."""
    from serveplan.resolution import resolve

    def piecewise(**kw) -> bool:
        pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100", **kw}
        return resolve({"pools": [pool]}).pools[0].instance.oracle.piecewise_cuda_graph

    assert piecewise(engine="vllm", engine_version="0.11.0")
    assert not piecewise(engine="vllm", engine_version="0.11.0", cuda_graph=False)
    assert not piecewise(engine="vllm", engine_version="0.6.3")  # V0
    assert not piecewise(engine="sglang") and not piecewise(engine="trtllm")
    assert not piecewise()


def test_given_capture_sizes_replace_vllms(slow_cpu):
    """An engine's own capture sizes (SGLang --cuda-graph-bs, TensorRT-LLM batch_sizes):
    with [1..16] a 12-request decode replays an exact graph of 12 and a 17-request one runs
    eager; vLLM's sizes (1, 2, 4, 8, 16, 24, ...) pad 12 to 16 and graph 17 as 24. Padding
    costs: 12 exact is cheaper than 12 padded to 16 (16 tokens through the linear layers),
    which is cheaper than 16 requests (4 more attend over their contexts)."""
    prof = slow_cpu[0].profile
    mine = CostOracle("llama-3.1-8b", "h100", profile=prof, graph_sizes=list(range(16, 0, -1)))
    assert mine.graph_sizes.tolist() == list(range(1, 17))

    def decode(oracle, n):
        return oracle.breakdown(np.ones(n, dtype=np.int64), np.full(n, 300, dtype=np.int64))

    vllm = slow_cpu[0]
    assert decode(mine, 12).graph_mode == "full" and decode(mine, 17).graph_mode == "eager"
    assert decode(vllm, 17).graph_mode == "full"
    assert decode(mine, 12).time_s < decode(vllm, 12).time_s < decode(vllm, 16).time_s
    with pytest.raises(ValueError, match="graph_sizes must be a non-empty list"):
        CostOracle("llama-3.1-8b", "h100", profile=prof, graph_sizes=[])


def test_sglang_pools_capture_sglangs_default_sizes():
    """SGLang's ServerArgs: cuda_graph_max_bs 256 below TP 4 and 512 from TP 4 on an H100
    (80 GiB: the "< 90 GiB" tier), 512 on a B200 (>= 160 GiB), 32 on an A100-40GB below TP
    4; the list 1, 2, 4, 8, 12, 16..256 step 8 (36 sizes to 256), then 272..496 step 16
    (15 more) and 512. So on an H100 at TP 1 a 300-request decode runs eager where vLLM's
    list (up to min(2 x max_num_seqs, 512)) graphs it; a given list still wins."""
    from serveplan.resolution import resolve

    def sizes(**kw):
        pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100",
                "max_model_len": 8192, **kw}
        return resolve({"pools": [pool]}).pools[0].instance.oracle.graph_sizes.tolist()

    tp1 = sizes(engine="sglang")
    assert tp1[:6] == [1, 2, 4, 8, 12, 16] and tp1[-2:] == [248, 256] and len(tp1) == 36
    tp4 = sizes(engine="sglang", tp=4)
    assert tp4[36:38] == [272, 288] and tp4[-2:] == [496, 512] and len(tp4) == 52
    assert sizes(engine="sglang", gpu="b200")[-1] == 512
    assert sizes(engine="sglang", gpu="a100-40gb")[-1] == 32
    assert sizes(engine="sglang", cuda_graph_sizes=[1, 2, 3]) == [1, 2, 3]
    assert sizes(engine="vllm", engine_version="0.11.0", max_num_seqs=512)[-1] == 512
    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100", "engine": "sglang"}
    oracle = resolve({"pools": [pool]}).pools[0].instance.oracle
    batch = (np.ones(300, dtype=np.int64), np.full(300, 300, dtype=np.int64))
    assert oracle.breakdown(*batch).graph_mode == "eager"
