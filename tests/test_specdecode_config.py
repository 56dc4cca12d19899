"""Speculative decoding's pricing kernel, CUDA-graph sizes, config, CLI and the MTP drafter.

The kernel is held to the plain NumPy reference (:mod:`serveplan.kernels.reference`); the
capture sizes to vLLM's rule worked by hand; the config to one ``error:`` line per mistake.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.oracle import cuda_graph_sizes
from serveplan.kernels import roofline as K
from serveplan.kernels.reference import step_time_ref
from serveplan.resolution import resolve
from serveplan.sim.costs import AffineStepCost
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import Handoff, PoolSpec, Role
from serveplan.sim.speculative import ST_EMITTED, ST_VERIFIES, SpecDecode
from serveplan.sim.workload import Requests
from serveplan.speculative import apply_spec_flags

runner = CliRunner()


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


# ------------------------------------------------------------------------- kernel
def test_capture_sizes_round_up_to_the_verify_length():
    # vLLM, max_num_seqs 20 and k = 2 (decode_query_len 3): the largest size is
    # min(2 * 20 * 3, 512) = 120; sizes 1, 2, 4, 8, 16, 24, ..., 120 round up to multiples
    # of 3 (1, 2 -> 3; 4 -> 6; 8 -> 9; 16 -> 18; 32 -> 33; 40 -> 42; 56 -> 57; 64 -> 66;
    # 80 -> 81; 88 -> 90; 104 -> 105; 112 -> 114).
    want = [3, 6, 9, 18, 24, 33, 42, 48, 57, 66, 72, 81, 90, 96, 105, 114, 120]
    np.testing.assert_array_equal(cuda_graph_sizes(20, decode_query_len=3), want)
    # without speculation the sizes are vLLM's defaults: 1, 2, 4, 8..248 step 8, 256..512
    # step 16
    default = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    np.testing.assert_array_equal(cuda_graph_sizes(256), default)


def test_verify_step_pads_to_the_capture_size(oracle_8b):
    # five requests verifying 2 drafts each: 15 tokens, all decodes (q <= 3) -> a graph
    # step padded to 18; one of them trimmed to 1 token: 13 tokens -> 18 as well; a 4-token
    # chunk among them makes it a prefill-phase step without a graph.
    o = oracle_8b
    gs = cuda_graph_sizes(20, decode_query_len=3)
    agg, comp, comm = o.scratch()
    ctx = np.full(5, 100, dtype=np.int64)
    for q, want in (([3, 3, 3, 3, 3], (18.0, 18.0, True)), ([3, 3, 3, 3, 1], (18.0, 18.0, True)),
                    ([3, 3, 3, 3, 4], (16.0, 13.0, False))):
        q = np.asarray(q, dtype=np.int64)
        got = K.step_costs_q(q, ctx, 5, o.table.ops, o.mods, o.prm, gs, agg, comp, comm, 3.0)
        assert got == want  # (T, logit rows, graph): a 4-token chunk has one logit row


def test_verify_step_kernel_matches_the_reference(oracle_8b):
    o = oracle_8b
    gs = cuda_graph_sizes(256, decode_query_len=4)
    rng = np.random.default_rng(5)
    agg, comp, comm = o.scratch()
    for trial in range(25):
        n = int(rng.integers(1, 48))
        q = rng.integers(1, 5, n).astype(np.int64)
        if trial % 3 == 0:
            q[0] = int(rng.integers(5, 700))  # a prefill chunk among the verifies
        c = rng.integers(0, 4000, n).astype(np.int64)
        t = K.step_time_q(q, c, n, o.table.ops, o.mods, o.prm, gs, agg, comp, comm, 4.0)
        ref = step_time_ref(q, c, o.table.ops, o.mods, o.prm, gs, q_decode=4)
        assert t == pytest.approx(ref, rel=1e-9)


# ------------------------------------------------------------------------- config
def _dep(**spec):
    return {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 4000,
            "max_model_len": 4096, "speculative": spec}


def test_model_catalog_keeps_the_nextn_layers():
    # deepseek-ai--DeepSeek-V3.json: "num_nextn_predict_layers": 1; Llama has none
    assert resolve_model("deepseek-v3").num_nextn_predict_layers == 1
    assert resolve_model("llama-3.1-8b").num_nextn_predict_layers == 0


def test_mtp_drafter_is_one_moe_layer_of_the_target():
    dep = {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "num_gpu_blocks": 4000,
           "max_model_len": 8192, "max_num_seqs": 64,
           "speculative": {"method": "mtp", "num_speculative_tokens": 1, "acceptance": 0.8}}
    pool = resolve(dep).pool_specs()[0]
    sd = pool.speculative
    draft = sd.draft_cost.model
    assert (draft.num_layers, draft.num_moe_layers) == (1, 1)
    assert sd.lookahead_tokens == 1  # vLLM reserves k lookahead slots for MTP
    # the target's capture sizes hold a full verify batch: 64 requests x 2 tokens
    assert pool.cost.graph_sizes.max() == 256 and np.all(pool.cost.graph_sizes % 2 == 0)
    # one MTP pass is far cheaper than the 61-layer target's decode step
    assert sd.draft_cost.decode_time(32, 1000) < 0.2 * pool.cost.decode_time(32, 1000)


@pytest.mark.parametrize("spec, field, needle", [
    ({"num_speculative_tokens": 0}, "num_speculative_tokens", "greater than or equal to 1"),
    ({"num_speculative_tokens": 2, "acceptance": 1.2}, "acceptance", "in [0, 1]"),
    ({"num_speculative_tokens": 3, "acceptance": [0.5, 0.5]}, "speculative", "give one rate or 3"),
    ({"num_speculative_tokens": 2, "method": "medusa"}, "method", "ngram"),
    ({"num_speculative_tokens": 2, "method": "draft_model"}, "speculative", "needs the draft"),
])
def test_bad_speculative_block_is_one_error_line(tmp_path, spec, field, needle):
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump({"deployment": _dep(**spec), "workload": {
        "kind": "poisson", "rate": 1, "num_requests": 2, "isl": 8, "osl": 4}}))
    r = runner.invoke(app, ["simulate", str(path)])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert field in lines[0] and needle in lines[0], lines[0]


def test_mtp_without_nextn_layers_is_refused(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump({"deployment": _dep(num_speculative_tokens=1), "workload": {
        "kind": "poisson", "rate": 1, "num_requests": 2, "isl": 8, "osl": 4}}))
    r = runner.invoke(app, ["simulate", str(path), "--spec-method", "mtp"])
    assert r.exit_code == 1
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "speculative.method: mtp needs" in lines[0], r.output
    assert "num_nextn_predict_layers" in lines[0]


def test_cli_flags_turn_speculation_on(tmp_path):
    path = tmp_path / "sim.yaml"
    dep = {k: v for k, v in _dep().items() if k != "speculative"}
    path.write_text(yaml.safe_dump({"deployment": dep, "workload": {
        "kind": "poisson", "rate": 4, "num_requests": 30, "isl": 64, "osl": 40}, "seed": 0}))
    r = runner.invoke(app, ["simulate", str(path), "--json", "--spec-method", "ngram",
                            "--num-speculative-tokens", "2", "--spec-acceptance", "0.8,0.5"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["total_output_tokens"] == 30 * 40
    assert 1.0 < s["spec_acceptance_length"] <= 3.0
    assert s["spec_draft_time_fraction"] == 0.0  # ngram drafts take no GPU time
    bad = runner.invoke(app, ["simulate", str(path), "--spec-method", "ngram",
                              "--num-speculative-tokens", "2", "--spec-acceptance", "high"])
    assert bad.exit_code == 1 and "error: --spec-acceptance" in bad.output


def test_flags_reach_the_pools_that_decode():
    flags = {"method": "ngram", "num_speculative_tokens": 2}
    pools = {"deployment": {"pools": [{"role": "prefill"}, {"role": "decode"}]}}
    out = apply_spec_flags(pools, flags)["deployment"]["pools"]
    assert "speculative" not in out[0] and out[1]["speculative"] == flags
    pd = apply_spec_flags({"deployment": {"architecture": "pd", "decode": {"x": 1}}}, flags)
    assert pd["deployment"]["decode"] == {"x": 1, "speculative": flags}
    assert apply_spec_flags({"deployment": {}}, {"method": None}) == {"deployment": {}}


# ------------------------------------------------------------------------- disaggregated
def test_decode_pool_speculates_and_prefill_pool_may_not():
    # prefill/decode with a free link; the decode pool verifies k = 3 drafts, all
    # accepted. A request's first step on the decode instance has no drafts (its drafter
    # has not seen it): 1 token; its other 10 come from ceil(10 / 4) = 3 verify steps.
    reqs = Requests(arrival_s=np.arange(20) * 0.05, prompt_len=np.full(20, 32),
                    output_len=np.full(20, 12))
    prm = EngineParams(num_gpu_blocks=400, block_size=16, max_model_len=4096)
    cost = AffineStepCost(0.01, 0.0001)
    sd = SpecDecode(3, 1.0)
    res = run_pools(reqs, [PoolSpec(prm, cost, 1, Role.PREFILL),
                           PoolSpec(prm, cost, 1, Role.DECODE, speculative=sd)],
                    handoff=Handoff())
    assert np.all(res.d_reqs.n_out == 12)
    st = res.costs.spec.stats[1]
    assert st[ST_VERIFIES] == 20 * 3 and st[ST_EMITTED] == 20 * 10
    with pytest.raises(ValueError, match="not to a prefill pool"):
        run_pools(reqs, [PoolSpec(prm, cost, 1, Role.PREFILL, speculative=sd),
                         PoolSpec(prm, cost, 1, Role.DECODE)], handoff=Handoff())


# ------------------------------------------------------------------------- memory
def test_drafter_memory_shrinks_the_kv_blocks():
    # Llama-3.1-8B on an H100: KV is 32 layers x 2 (K, V) x 8 heads x 128 x 2 bytes =
    # 131,072 B per token, 4,096 B per layer; vLLM's blocks = available // (16 x that).
    # An EAGLE head adds one layer's KV and one mean layer's weights (weights / 32):
    # blocks = (available - weights / 32) // (16 x (131,072 + 4,096)). ngram adds nothing.
    base = {"model": "llama-3.1-8b", "gpu": "h100", "max_model_len": 8192}
    plain = resolve(base).pools[0].instance
    plan = plain.memory
    assert plan["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    assert plan["num_gpu_blocks"] == int(plan["available_kv_bytes"] // (16 * 131_072))
    eagle = resolve({**base, "speculative": {"method": "eagle", "num_speculative_tokens": 3}})
    want = int((plan["available_kv_bytes"] - plan["weights_bytes"] / 32)
               // (16 * (131_072 + 4_096)))
    assert eagle.params.num_gpu_blocks == want - 1  # the engine gets one (null) block fewer
    ngram = resolve({**base, "speculative": {"method": "ngram", "num_speculative_tokens": 3}})
    assert ngram.params.num_gpu_blocks == plain.params.num_gpu_blocks
