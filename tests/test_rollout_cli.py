"""``serveplan rollout``: the switch's price written out by hand, the config's refusals,
and the command end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.catalog import resolve_gpu
from serveplan.rollout import layout_bytes, resolve_layout
from serveplan.rollout_config import ReconfigPolicy, RolloutConfig
from serveplan.rollout_cost import LayoutBytes, choose_link, pause_cost
from serveplan.sim.reconfig import Migration, Snapshot
from serveplan.sim.rollout_workload import heavy_mask, rollout_burst
from serveplan.sim.workload import Fixed

runner = CliRunner()
BASE = {"model": "llama-3.1-8b", "gpu": "h100", "layout_a": {"dp": 4},
        "layout_b": {"dp": 1, "tp": 4}}


def test_weight_reshard_is_shard_bytes_over_the_link():
    """Llama-3.1-8B (hidden 4096, 32 layers, MLP 14336, vocab 128256, 8 KV heads of 128)
    at TP 4 in bf16. One rank holds a quarter of each layer's q, k, v, o and MLP matrices,
    (2*4096^2 + 2*4096*1024 + 3*4096*14336) / 4 = 54,525,952 parameters, plus its two
    4096-wide norms; a quarter of the embedding and of the LM head (128256*4096/4 each);
    and the final norm: (32*(54,525,952 + 8,192) + 2*131,334,144 + 4,096) * 2 bytes
    = 4,015,529,984 bytes. Four 1-GPU replicas and one TP-4 replica fit in a node, so the
    shard moves over NVLink at 450 GB/s: 4,015,529,984 / 450e9 = 8.9234 ms. With 2 s of
    setup the pause is 2.0089234 s."""
    cfg = RolloutConfig.model_validate(BASE)
    size = layout_bytes(resolve_layout(cfg, "layout_b"), cfg.layout_b)
    assert size.weight_bytes == (32 * (54_525_952 + 8_192) + 2 * 131_334_144 + 4_096) * 2
    # KV of one token on one rank: K and V, 8 / 4 = 2 heads of 128, bf16, 32 layers
    assert size.kv_bytes_per_token == 2 * 2 * 128 * 2 * 32
    link = choose_link(resolve_gpu("h100"), 1, 4)
    assert link == ("scale-up", 450e9)
    snap = Snapshot(10.0, np.array([7]), np.array([5]), np.array([104]), np.array([True]))
    mig = Migration(snap, np.array([100]), np.array([0]), np.array([0]), 1)
    cost = pause_cost(mig, size, link, setup_s=2.0)
    assert cost.weights_s == pytest.approx(4_015_529_984 / 450e9)
    assert cost.total_s == pytest.approx(2.0 + 4_015_529_984 / 450e9)
    assert pause_cost(mig, size, link, override_s=7.5).total_s == 7.5


def test_kv_transfer_is_the_busiest_instance_bytes_over_the_link():
    """Three requests keep 100, 300 and 50 tokens of KV; they go to B instances 0, 1, 0.
    At 1,000 bytes per token per rank, instance 0 receives 150,000 bytes per rank and
    instance 1 300,000: over a 1e6 B/s link the slowest takes 0.3 s; weights of 2e6 bytes
    add 2 s."""
    snap = Snapshot(0.0, np.arange(3), np.ones(3, int), np.array([100, 300, 50]),
                    np.ones(3, bool))
    mig = Migration(snap, np.full(3, 10), np.array([0, 1, 0]), np.array([100, 300, 50]), 2)
    cost = pause_cost(mig, LayoutBytes(2e6, 1000.0, 4), ("scale-out", 1e6))
    assert cost.kv_transfer_s == pytest.approx(0.3)
    assert cost.total_s == pytest.approx(2.3)


def test_links_by_placement():
    """TP 16 spans two 8-GPU nodes: the reshard leaves the node (50 GB/s per GPU)."""
    h100 = resolve_gpu("h100")
    assert choose_link(h100, 2, 16) == ("scale-out", 50e9)
    assert choose_link(h100, 2, 8, "scale-out") == ("scale-out", 50e9)
    assert choose_link(h100, 2, 8, link_bw=1e9) == ("scale-up", 1e9)


def test_threshold_counts():
    """Fewer than 10 % of 4,000 active means at most 399: the count is 400."""
    assert ReconfigPolicy().count(4000) == 400
    assert ReconfigPolicy(threshold_fraction=0.05).count(10) == 1
    assert ReconfigPolicy(threshold=7).count(10) == 7


def test_burst_has_exactly_the_heavy_fraction():
    """5 % of 200 is 10 heavy trajectories, every seed; they take the heavy lengths."""
    for seed in range(3):
        req = rollout_burst(200, Fixed(64), Fixed(100), heavy_fraction=0.05,
                            heavy_output=Fixed(5000), seed=seed)
        heavy = heavy_mask(200, 0.05, seed)
        assert heavy.sum() == 10
        assert np.all(req.output_len[heavy] == 5000) and np.all(req.output_len[~heavy] == 100)
        assert np.all(req.arrival_s == 0)


def _write(tmp_path, data):
    import yaml

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("change, field", [
    ({"layout_b": {"dp": 2, "tp": 4}}, "layout_b"),
    ({"reconfig": {"threshold": 500}, "workload": {"num_trajectories": 100}},
     "reconfig.threshold"),
    ({"reconfig": {"threshold": 5, "threshold_fraction": 0.1}}, "reconfig.threshold_fraction"),
    ({"reconfig": {"threshold_fraction": 1.5}}, "reconfig.threshold_fraction"),
    ({"reconfig": {"kv": "teleport"}}, "reconfig.kv"),
    ({"workload": {"heavy_fraction": -0.1}}, "workload.heavy_fraction"),
])
def test_bad_config_names_its_field(tmp_path, change, field):
    res = runner.invoke(app, ["rollout", str(_write(tmp_path, {**BASE, **change}))])
    assert res.exit_code == 1
    assert res.output.startswith("error: ") and field in res.output
    assert "Traceback" not in res.output


def test_layout_that_does_not_fit_is_named(tmp_path):
    """Llama-3.1-70B in bf16 (~141 GB) does not fit one 80 GB H100."""
    data = {**BASE, "model": "llama-3.1-70b", "layout_a": {"dp": 8}, "layout_b": {"tp": 8}}
    res = runner.invoke(app, ["rollout", str(_write(tmp_path, data))])
    assert res.exit_code == 1 and "error: layout_a (DP8 x TP1 x PP1)" in res.output


def test_rollout_command_end_to_end(tmp_path):
    """A small burst: both runs produce every output token, the switch happens below the
    threshold, and the with-switch run's series passes through the switch's active count."""
    data = {**BASE, "engine": {"enable_prefix_caching": False, "max_model_len": 8192},
            "workload": {"num_trajectories": 80, "output": 64, "heavy_fraction": 0.1,
                         "heavy_output": 1500, "prompt": 128},
            "reconfig": {"threshold": 10, "setup_s": 0.5}}
    res = runner.invoke(app, ["rollout", str(_write(tmp_path, data)), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    tokens = 72 * 64 + 8 * 1500
    assert s["without_switch"]["output_tokens"] == s["with_switch"]["output_tokens"] == tokens
    sw = s["switch"]
    assert sw["active_at_switch"] < 10
    assert sw["pause"]["total_s"] == pytest.approx(0.5 + 4_015_529_984 / 450e9)
    assert sw["t_resume_s"] == pytest.approx(sw["t_switch_s"] + sw["pause"]["total_s"])
    series = s["with_switch"]["active_series"]
    assert series["active"][0] == 80 and series["active"][-1] == 0
    assert s["speedup"] == pytest.approx(s["without_switch"]["makespan_s"]
                                         / s["with_switch"]["makespan_s"])
    human = runner.invoke(app, ["rollout", str(_write(tmp_path, data)), "--kv", "transfer"])
    assert human.exit_code == 0 and "switch at" in human.output
