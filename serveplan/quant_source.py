"""A deployment's weight quantization: the ``dtype`` shorthand, or a checkpoint's
quantization applied to a model given by its architecture (``quantization:``).

A quantized checkpoint is often published beside its base model with the same architecture
(``nvidia/DeepSeek-R1-NVFP4`` of ``deepseek-ai/DeepSeek-R1``): ``quantization`` takes the
quantized checkpoint's description -- ModelOpt's ``hf_quant_config.json``, a ``config.json``
with a ``quantization_config``, or either block inline in the YAML -- and reads it with the
one parser (:func:`~serveplan.estimator.quant_config.parse_quantization`) against the base
model's layers, so exclusion lists that name layers (``model.layers.3.self_attn.q_a_proj``)
resolve as they do for the checkpoint itself. What is modelled is the storage format of each
weight class, the KV cache dtype and the GEMM compute dtype (:mod:`~.estimator.quantization`);
the quantized checkpoint's numerics (accuracy) are not. A hybrid model's recurrent state
takes the instance's ``mamba_ssm_dtype`` when it sets one (:func:`instance_model`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.errors import SpecError
from serveplan.estimator.quant_config import LayerCounts, parse_quantization
from serveplan.estimator.quantization import Quantization
from serveplan.estimator.specs import ModelSpec

__all__ = ["instance_dtype", "instance_model", "load_quantization"]

FIELD = "quantization"


def _read(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{FIELD}: {path}: no such file (expected ModelOpt's "
                        "hf_quant_config.json or a config.json with a quantization_config)")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{FIELD}: {path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{FIELD}: {path}: expected a JSON object")
    return data


def _as_files(block: Mapping, source: str) -> tuple[dict, dict | None]:
    """``(config, hf_quant)`` for :func:`parse_quantization` from any accepted form."""
    if "quantization_config" in block:          # a config.json
        return {"quantization_config": block["quantization_config"]}, None
    if "quantization" in block:                 # ModelOpt's hf_quant_config.json
        return {}, dict(block)
    if "quant_method" in block:                 # a quantization_config block
        return {"quantization_config": dict(block)}, None
    if "quant_algo" in block:                   # a ModelOpt quantization block
        return {}, {"quantization": dict(block)}
    raise SpecError(f"{FIELD}: {source}: expected quantization_config, quantization, "
                    f"quant_method or quant_algo; got keys {sorted(block)}")


def load_quantization(spec: str | Mapping, model: ModelSpec | str) -> Quantization:
    """The :class:`Quantization` that ``spec`` (a file path or an inline block) gives the
    layers of ``model``; unquantized classes stay in the model's 16-bit dtype."""
    model = model if isinstance(model, ModelSpec) else resolve_model(model)
    source = spec if isinstance(spec, str) else "inline block"
    block = _read(spec) if isinstance(spec, str) else spec
    cfg, hf_quant = _as_files(block, source)
    layers = LayerCounts.of_decoder(model.num_layers, model.num_moe_layers,
                                    model.num_shared_experts)
    return parse_quantization(cfg, act=model.dtype, layers=layers,
                              source=f"{FIELD} ({source})", hf_quant=hf_quant)


def instance_dtype(config) -> str | Quantization | None:
    """What a :class:`~serveplan.pools_config.InstanceConfig` gives the cost oracle as
    ``dtype``: its ``quantization`` resolved against its model, else its ``dtype``
    shorthand, else None (the checkpoint's own)."""
    if config.quantization is None:
        return config.dtype
    return load_quantization(config.quantization, config.model)


def instance_model(config) -> ModelSpec | str:
    """What a :class:`~serveplan.pools_config.InstanceConfig` gives the cost oracle as its
    model: the name, or the spec with the recurrent state in ``mamba_ssm_dtype`` when the
    pool sets one (a hybrid model only)."""
    if config.mamba_ssm_dtype is None:
        return config.model
    model = resolve_model(config.model)
    if not model.num_linear_layers:
        raise SpecError(f"mamba_ssm_dtype: {model.name} has no linear-attention (SSM) layers "
                        f"whose recurrent state it would set; leave it unset")
    return model.model_copy(update={"linear_state_dtype": config.mamba_ssm_dtype})
