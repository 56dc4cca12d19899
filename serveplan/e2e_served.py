"""Which checkpoint a measured deployment served, in which precision.

A row of the Blackwell sample names a model (``model_path``) and a precision profile
(``precision``, ``gemm_quant_mode``, ``moe_quant_mode``) but not the checkpoint loaded.
The generator serves the quantized checkpoint of the profile; this module maps each
(model, precision) to the architecture config shipped beside the data and the
quantization the engines then run (:class:`Served`), or says why it cannot.

The mapping, and what it assumes:

* ``fp8`` -- DeepSeek-R1 / V3 and MiniMax-M2.5 are published in block-scaled fp8
  (``quantization_config``: ``quant_method fp8``, ``weight_block_size [128, 128]``;
  MiniMax keeps the router and ``lm_head`` 16-bit): their own configs are read, whether
  the row says ``fp8`` or ``fp8_block`` for the experts (the loaded checkpoint is the same).
  Llama-3.1-70B ``fp8`` is ModelOpt's FP8 recipe (NVIDIA's ``*-Instruct-FP8``): every
  linear layer per-tensor fp8 but ``lm_head``. KV cache fp8 (the profile's).
* ``fp4`` -- NVIDIA's NVFP4 checkpoints as their files say: MiniMax-M2.5 and Kimi-K2.5 read
  ``nvidia--*-NVFP4_config.json`` (attention and router 16-bit, experts NVFP4, fp8 KV);
  DeepSeek-R1 / V3 / V3.1 (and ``nvidia/DeepSeek-R1-NVFP4``, whose files are not shipped)
  take the DeepSeek recipe of the shipped ``nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json``
  on their own architecture (MLA projections q_a/q_b/kv_a/kv_b and ``lm_head`` bf16;
  o_proj, dense MLPs, shared and routed experts NVFP4; fp8 KV) -- an assumption for R1 and
  V3, which share the architecture and layer count. Llama-3.1-70B and Qwen3-32B have no
  shipped NVFP4 file: ModelOpt's NVFP4 recipe for dense decoders is used (every linear
  layer NVFP4 with group 16, ``lm_head`` bf16, fp8 KV, as in NVIDIA's dense ``*-FP4``
  checkpoints) -- an assumption, said here.
* ``int4`` -- Kimi-K2.5 as published: compressed-tensors int4 (w4a16, group 32) routed
  experts, attention, shared experts, dense MLPs and ``lm_head`` bf16; 16-bit KV.
* Qwen3.5-397B-A17B: ``bf16`` its own checkpoint; ``fp8`` the published block-scaled FP8
  checkpoint (:data:`BLOCK_FP8`, its file not shipped: an assumption); ``fp4`` NVIDIA's
  NVFP4 checkpoint as its shipped files say. gpt-oss-120b ``fp4``: the published
  checkpoint itself (MXFP4 experts, the rest bf16), fp8 KV as the profile says. GLM-5
  (MLA with DeepSeek sparse attention): ``fp8`` the published block-scaled FP8 checkpoint
  (its file not shipped: :data:`BLOCK_FP8` assumed, as for Qwen3.5), ``fp4`` NVIDIA's NVFP4
  checkpoint as its shipped files say (attention and indexer 16-bit).
* ``bf16`` and an empty precision with empty quant modes (TensorRT-LLM Qwen3-32B on GB200:
  the published bf16 checkpoint served as is) -- the checkpoint's own dtype.

The generator's MTP (``nextn``) is not recorded per row and is not modelled: rows run
without speculative decoding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from serveplan.estimator.catalog import resolve_model

__all__ = ["ARCHITECTURE", "MODELOPT_FP8", "MODELOPT_NVFP4", "Served",
           "held_out_units", "is_mla", "precision", "served"]

CATALOG = "catalog:"
ARCHITECTURE = {  # model -> its architecture: a catalog name or a model_configs file
    "meta-llama/Llama-3.1-70B": CATALOG + "llama-3.1-70b",
    "Qwen/Qwen3-32B": "Qwen--Qwen3-32B_config.json",
    "nvidia/Qwen3-32B-NVFP4": "Qwen--Qwen3-32B_config.json",
    "MiniMaxAI/MiniMax-M2.5": "MiniMaxAI--MiniMax-M2.5_config.json",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai--DeepSeek-R1_config.json",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai--DeepSeek-V3_config.json",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai--DeepSeek-R1_config.json",
    "nvidia/DeepSeek-V3.1-NVFP4": "nvidia--DeepSeek-V3.1-NVFP4_config.json",
    "moonshotai/Kimi-K2.5": "moonshotai--Kimi-K2.5_config.json",
    "Qwen/Qwen3.5-397B-A17B": "Qwen--Qwen3.5-397B-A17B_config.json",
    "openai/gpt-oss-120b": "openai--gpt-oss-120b_config.json",
    "zhipuai/GLM-5": "zai-org--GLM-5_config.json",
}
MODELOPT_NVFP4 = {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": "FP8",
                  "exclude_modules": ["lm_head"]}
"""ModelOpt's NVFP4 recipe for a dense decoder without a shipped file."""
MODELOPT_FP8 = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}
"""ModelOpt's FP8 recipe (per-tensor fp8 weights and KV, ``lm_head`` 16-bit)."""
BLOCK_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128]}
"""The block-scaled fp8 of the published ``*-FP8`` checkpoints (DeepSeek's own config reads
the same), for a model whose fp8 config is not shipped."""
DEEPSEEK_NVFP4 = "nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json"
_OWN = None  # the config's own quantization_config (or the hf_quant_config beside it)
CHECKPOINT = {  # (model, precision) -> (config to read, quantization to apply)
    ("meta-llama/Llama-3.1-70B", "fp8"): (None, MODELOPT_FP8),
    ("meta-llama/Llama-3.1-70B", "fp4"): (None, MODELOPT_NVFP4),
    ("Qwen/Qwen3-32B", "bf16"): (None, _OWN),
    ("Qwen/Qwen3-32B", "fp4"): (None, MODELOPT_NVFP4),
    ("nvidia/Qwen3-32B-NVFP4", "fp4"): (None, MODELOPT_NVFP4),
    ("MiniMaxAI/MiniMax-M2.5", "fp8"): (None, _OWN),
    ("MiniMaxAI/MiniMax-M2.5", "fp4"): ("nvidia--MiniMax-M2.5-NVFP4_config.json", _OWN),
    ("deepseek-ai/DeepSeek-R1", "fp8"): (None, _OWN),
    ("deepseek-ai/DeepSeek-V3", "fp8"): (None, _OWN),
    ("deepseek-ai/DeepSeek-R1", "fp4"): (None, DEEPSEEK_NVFP4),
    ("deepseek-ai/DeepSeek-V3", "fp4"): (None, DEEPSEEK_NVFP4),
    ("nvidia/DeepSeek-R1-NVFP4", "fp4"): (None, DEEPSEEK_NVFP4),
    ("nvidia/DeepSeek-V3.1-NVFP4", "fp4"): (None, _OWN),
    ("moonshotai/Kimi-K2.5", "fp4"): ("nvidia--Kimi-K2.5-NVFP4_config.json", _OWN),
    ("moonshotai/Kimi-K2.5", "int4"): (None, _OWN),
    ("Qwen/Qwen3.5-397B-A17B", "bf16"): (None, _OWN),
    ("Qwen/Qwen3.5-397B-A17B", "fp8"): (None, BLOCK_FP8),
    ("Qwen/Qwen3.5-397B-A17B", "fp4"): ("nvidia--Qwen3.5-397B-A17B-NVFP4_config.json", _OWN),
    ("openai/gpt-oss-120b", "fp4"): (None, _OWN),
    ("zhipuai/GLM-5", "fp8"): (None, BLOCK_FP8),
    ("zhipuai/GLM-5", "fp4"): ("nvidia--GLM-5-NVFP4_config.json", _OWN),
}
KV_DTYPE = {"fp8": "fp8", "fp4": "fp8"}  # the profile's KV cache; others: the checkpoint's


@dataclass(frozen=True)
class Served:
    """The deployment's model reference, quantization and KV dtype (pools YAML fields)."""

    model: str
    quantization: str | dict | None
    kv_dtype: str | None
    precision: str


def precision(row) -> str:
    """The row's precision profile; an empty one with empty quant modes is the
    checkpoint's own 16-bit dtype (``bf16``)."""
    if row.precision:
        return row.precision
    return "bf16" if not (row.gemm_quant or row.moe_quant) else row.gemm_quant


def _ref(name: str, data_dir: Path) -> str:
    if name.startswith(CATALOG):
        return name.removeprefix(CATALOG)
    return str(data_dir / "model_configs" / name)


def served(row, data_dir: Path) -> Served | str:
    """What the row served (:class:`Served`), or the reason serveplan cannot say."""
    if row.model not in ARCHITECTURE:
        return "model config not shipped"
    prec = precision(row)
    if (row.model, prec) not in CHECKPOINT:
        return f"{prec} checkpoint of {row.model} not known"
    config, quant = CHECKPOINT[(row.model, prec)]
    name = config or ARCHITECTURE[row.model]
    model = _ref(name, data_dir)
    if isinstance(quant, str):
        quant = str(data_dir / "model_configs" / quant)
    if not name.startswith(CATALOG) and not Path(model).exists():
        return "model config not shipped"
    return Served(model, quant, KV_DTYPE.get(prec), prec)


@lru_cache(maxsize=64)
def is_mla(model: str) -> bool:
    """Whether the model (catalog name or config path) has MLA attention."""
    return resolve_model(model).attention == "mla"


NOT_ARCHITECTURE = ("quantization_config", "transformers_version", "torch_dtype",
                    "_name_or_path")
"""Config fields that name a checkpoint's packaging, not its architecture."""


def _architecture(model: str, data_dir: Path) -> str:
    """The model's architecture config, packaging fields dropped, as canonical JSON (a
    catalog model: its catalog name; a model without a shipped config: its own name)."""
    name = ARCHITECTURE.get(model)
    if name is None or name.startswith(CATALOG):
        return name or model
    path = Path(_ref(name, data_dir))
    if not path.exists():
        return model
    config = json.loads(path.read_text())
    return json.dumps({k: v for k, v in config.items() if k not in NOT_ARCHITECTURE},
                      sort_keys=True)


def held_out_units(models, data_dir: Path) -> dict[str, str]:
    """Each model's unit in a leave-one-model-out check: the models among ``models`` whose
    architecture configs agree but for packaging (:data:`NOT_ARCHITECTURE`: DeepSeek-R1,
    DeepSeek-V3 and NVIDIA's NVFP4 DeepSeek-R1 and V3.1; Qwen3-32B and its NVFP4 build) are
    one model, held out together and named ``"a + b"`` (sorted), so that no fold trains
    on a held-out model's twin."""
    by_arch: dict[str, list[str]] = {}
    for m in sorted(set(models)):
        by_arch.setdefault(_architecture(m, Path(data_dir)), []).append(m)
    return {m: " + ".join(group) for group in by_arch.values() for m in group}
