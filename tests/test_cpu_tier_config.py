"""The CPU KV tier from a config: sizes in blocks and host-link times by hand, the aliases,
and bad values reported as one ``error:`` line naming the field."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.resolution import resolve

runner = CliRunner()
MIB = 1 << 20
# Llama-3.1-8B (bf16): 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 4 KiB per token and
# layer; 32 layers -> 128 KiB per token; a block of 16 tokens is 2 MiB on one GPU.
BLOCK_TP1 = 16 * 2 * 8 * 128 * 2 * 32
assert BLOCK_TP1 == 2 * MIB


def tier(**fields):
    base = {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 2000,
            "max_model_len": 4096}
    return resolve({**base, **fields}).pools[0].instance.cpu_tier


def test_size_and_host_link_by_hand():
    t = tier(kv_offload={"cpu_gb": 1})
    assert t.num_blocks == (1 << 30) // BLOCK_TP1 == 512
    assert t.block_bytes == BLOCK_TP1
    assert t.seconds_per_block == pytest.approx(BLOCK_TP1 / 55e9)  # PCIe Gen5, effective
    assert t.latency_s == 1e-5
    # tp=2: each rank holds 4 of the 8 KV heads (1 MiB per block) and moves it over its own
    # link; the instance's block is still 2 MiB, so 1 GiB still holds 512 blocks
    t2 = tier(kv_offload={"cpu_gb": 1}, tp=2)
    assert (t2.num_blocks, t2.block_bytes) == (512, BLOCK_TP1)
    assert t2.seconds_per_block == pytest.approx(MIB / 55e9)


def test_vllm_and_lmcache_names():
    assert tier(kv_offload={"kv_offloading_size": 1}) == tier(kv_offload={"cpu_gb": 1})
    assert tier(kv_offload={"cpu_bytes": 1 << 30}) == tier(kv_offload={"cpu_gb": 1})
    # LMCache's size is per worker (rank): 1 GiB x tp 2 = 2 GiB = 1024 blocks of 2 MiB
    assert tier(kv_offload={"max_local_cpu_size": 1}, tp=2).num_blocks == 1024


def test_host_links_of_the_catalog():
    assert tier(kv_offload={"cpu_gb": 1}, gpu="a100").seconds_per_block == \
        pytest.approx(BLOCK_TP1 / 27.5e9)  # PCIe Gen4
    assert tier(kv_offload={"cpu_gb": 1}, gpu="gb200").seconds_per_block == \
        pytest.approx(BLOCK_TP1 / 225e9)  # NVLink-C2C, shared by two GPUs
    override = tier(kv_offload={"cpu_gb": 1, "host_bw": 20e9, "latency_s": 0.0})
    assert override.seconds_per_block == pytest.approx(BLOCK_TP1 / 20e9)
    assert override.latency_s == 0.0


def test_zero_size_is_no_tier_and_pipeline_stages_split_it():
    assert tier(kv_offload={"cpu_gb": 0}) is None
    assert tier() is None
    # pp=2: 16 layers per stage, 1 MiB per rank and block, 2 MiB per instance: 512 blocks
    # shared by the 2 virtual engines
    r = resolve({"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 2000,
                 "max_model_len": 4096, "pp": 2, "kv_offload": {"cpu_gb": 1}})
    assert r.pools[0].instance.cpu_tier.num_blocks == 512
    assert r.pools[0].spec().cpu_tier.num_blocks == 256


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump({
        "deployment": {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 600,
                       "max_model_len": 4096},
        "workload": {"kind": "poisson", "rate": 20.0, "num_requests": 60, "isl": 1100,
                     "osl": 4, "prefix": {"num_groups": 12, "prefix_len": 1024}},
        "seed": 0}))
    return path


def test_cli_flag_adds_the_tier_and_its_figures(cfg_file, sim_compiled):
    off = runner.invoke(app, ["simulate", str(cfg_file), "--json"])
    on = runner.invoke(app, ["simulate", str(cfg_file), "--json", "--kv-offload-gb", "4"])
    assert off.exit_code == 0 and on.exit_code == 0, on.output
    s_off, s_on = json.loads(off.output), json.loads(on.output)
    assert "cpu_prefix_hit_rate" not in s_off
    # 12 prefixes x 64 blocks = 768 > 600 GPU blocks: the tier serves some hits
    assert s_on["cpu_prefix_hit_rate"] > 0
    assert s_on["gpu_prefix_hit_rate"] + s_on["cpu_prefix_hit_rate"] == \
        pytest.approx(s_on["prefix_hit_rate"])
    assert s_on["prefix_hit_rate"] > s_off["prefix_hit_rate"]
    assert s_on["cpu_bytes_loaded"] > 0 and s_on["cpu_load_time_s"] > 0


@pytest.mark.parametrize("args, message", [
    (["--set", "deployment.kv_offload.cpu_gb=9000"],
     "error: deployment.kv_offload.cpu_gb: 9,000 GiB of host memory per instance is more "
     "than 512 GiB"),
    (["--set", "deployment.kv_offload={cpu_gb: 1, cpu_bytes: 5}"],
     "error: deployment.kv_offload: give the tier's size as exactly one of"),
    (["--set", "deployment.kv_offload.cpu_bytes=1000"],
     "error: kv_offload.cpu_bytes: 1,000 bytes hold no KV block (2,097,152 bytes"),
    (["--kv-offload-gb", "-1"], "error: deployment.kv_offload.cpu_gb: Input should be greater"),
    (["--set", "deployment.kv_offload={cpu_gb: 1, store_on: later}"],
     "error: deployment.kv_offload.store_on:"),
])
def test_bad_values_name_their_field(cfg_file, args, message):
    res = runner.invoke(app, ["simulate", str(cfg_file), *args])
    assert res.exit_code != 0
    assert message in res.output
    assert "Traceback" not in res.output


def test_prefill_pool_tier_and_no_decode_tier(sim_compiled):
    from serveplan.simulation import simulate

    pool = {"model": "llama-3.1-8b", "gpu": "h100", "max_model_len": 4096,
            "kv_offload": {"cpu_gb": 4}}
    dep = {"pools": [{"role": "prefill", "num_gpu_blocks": 500, **pool},
                     {"role": "decode", "num_gpu_blocks": 3000, **pool}]}
    wl = {"kind": "poisson", "rate": 10, "num_requests": 60, "isl": 100, "osl": 8,
          "prefix": {"num_groups": 12, "prefix_len": 1024}}
    ds = simulate(dep, wl, seed=0)
    # 4 GiB / 2 MiB = 2048 blocks on the prefill instance; a decode instance has none
    assert list(ds["cpu_kv_blocks"].values) == [2048, 0]
    # 12 prefixes x 64 blocks = 768 > 500 GPU blocks: some hits come from the CPU tier
    assert int(ds["cpu_hit_tokens"].sum()) > 0
    assert float(ds["cpu_bytes_loaded"].sel(instance=1)) == 0.0
