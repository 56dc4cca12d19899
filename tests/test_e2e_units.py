"""Which measured models a leave-one-model-out check holds out together
(``serveplan.e2e_served.held_out_units``): configs written by hand in a temporary data
folder, and the Blackwell sample's where it is present."""

from __future__ import annotations

import json
from pathlib import Path

from serveplan.e2e_served import held_out_units

DEEPSEEK = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
            "hidden_size": 7168, "n_routed_experts": 256, "kv_lora_rank": 512}


def _write(folder: Path, name: str, config: dict) -> None:
    (folder / "model_configs").mkdir(exist_ok=True)
    (folder / "model_configs" / name).write_text(json.dumps(config))


def test_configs_that_differ_only_in_packaging_are_one_model(tmp_path):
    """V3 and V3.1-NVFP4 differ in quantization and transformers version only: one unit.
    Kimi-K2.5 differs in its layer count: its own. Llama-3.1-70B (a catalog model) and a
    model whose config is missing stay themselves."""
    _write(tmp_path, "deepseek-ai--DeepSeek-V3_config.json",
           {**DEEPSEEK, "transformers_version": "4.33.1",
            "quantization_config": {"quant_method": "fp8"}})
    _write(tmp_path, "nvidia--DeepSeek-V3.1-NVFP4_config.json",
           {**DEEPSEEK, "transformers_version": "4.44.2", "torch_dtype": "bfloat16"})
    _write(tmp_path, "moonshotai--Kimi-K2.5_config.json", {**DEEPSEEK, "num_hidden_layers": 60})
    models = ["nvidia/DeepSeek-V3.1-NVFP4", "deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K2.5",
              "meta-llama/Llama-3.1-70B", "openai/gpt-oss-120b"]
    units = held_out_units(models + ["deepseek-ai/DeepSeek-V3"], tmp_path)
    pair = "deepseek-ai/DeepSeek-V3 + nvidia/DeepSeek-V3.1-NVFP4"
    assert units == {"deepseek-ai/DeepSeek-V3": pair, "nvidia/DeepSeek-V3.1-NVFP4": pair,
                     "moonshotai/Kimi-K2.5": "moonshotai/Kimi-K2.5",
                     "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
                     "openai/gpt-oss-120b": "openai/gpt-oss-120b"}


def test_one_config_file_is_one_model(tmp_path):
    """Qwen3-32B and NVIDIA's NVFP4 build read the same shipped config file."""
    _write(tmp_path, "Qwen--Qwen3-32B_config.json", {"num_hidden_layers": 64})
    units = held_out_units(["Qwen/Qwen3-32B", "nvidia/Qwen3-32B-NVFP4"], tmp_path)
    assert set(units.values()) == {"Qwen/Qwen3-32B + nvidia/Qwen3-32B-NVFP4"}


def test_the_sample_s_deepseek_checkpoints_are_one_model(blackwell_e2e):
    """R1, V3, and NVIDIA's NVFP4 R1 and V3.1 share DeepSeek-V3's architecture; Kimi-K2.5
    and GLM-5, built on it with other sizes, do not."""
    deepseek = ["deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3",
                "nvidia/DeepSeek-R1-NVFP4", "nvidia/DeepSeek-V3.1-NVFP4"]
    units = held_out_units(deepseek + ["moonshotai/Kimi-K2.5", "zhipuai/GLM-5"], blackwell_e2e)
    assert {units[m] for m in deepseek} == {" + ".join(deepseek)}
    assert units["moonshotai/Kimi-K2.5"] == "moonshotai/Kimi-K2.5"
    assert units["zhipuai/GLM-5"] == "zhipuai/GLM-5"
