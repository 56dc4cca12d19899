"""Hugging Face ``config.json`` -> the fields of a :class:`~.specs.ModelSpec`.

One small reader per part of the architecture (common fields, OPT, GQA decoders, sliding
windows, MoE layouts, DeepSeek's MLA) and the checkpoint's quantization
(:func:`~.quant_config.parse_quantization`). A multimodal wrapper whose ``text_config`` is
a supported decoder (Kimi-K2.5) is read as that decoder.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import SpecError
from .hf_hybrid import QWEN_HYBRID_TYPES, hybrid_fields
from .quant_config import LayerCounts, parse_quantization

__all__ = ["SUPPORTED_TYPES", "model_fields"]

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "opt", "mixtral",
                   "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "minimax_m2",
                   "gpt_oss", "qwen3_next", "qwen3_5_moe_text", "deepseek_v32", "glm_moe_dsa")
"""``model_type`` values read with their own layout (others with Llama-like field names are
read as dense GQA decoders)."""

_TORCH_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}
_TIED_BY_DEFAULT = ("opt", "gemma", "gemma2")
_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")


class _Config:
    """The config dict with its model type, name and a reader of required fields."""

    def __init__(self, cfg: Mapping, name: str | None):
        self.cfg = cfg
        self.mt = str(cfg.get("model_type", "")).lower()
        self.name = name or cfg.get("_name_or_path") or self.mt or "model"

    def need(self, key: str):
        if key not in self.cfg:
            raise SpecError(f"{self.name}: config.json has no field {key!r} "
                            f"(model_type {self.mt!r})")
        return self.cfg[key]

    def get(self, key: str, default=None):
        return self.cfg.get(key, default)


def language_config(cfg: Mapping) -> Mapping:
    """The decoder's config: ``cfg`` itself, or the ``text_config`` of a multimodal wrapper
    whose text model is a supported type (with the wrapper's ``quantization_config``, dtype
    and ``tie_word_embeddings`` where the text config lacks them)."""
    text = cfg.get("text_config")
    if "hidden_size" in cfg or not isinstance(text, dict):
        return cfg
    if str(text.get("model_type", "")).lower() not in SUPPORTED_TYPES:
        return cfg
    merged = dict(text)
    for key in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
        if key in cfg and merged.get(key) is None:
            merged[key] = cfg[key]
    return merged


def model_fields(cfg: Mapping, name: str | None = None, *, hf_quant: Mapping | None = None,
                 source: str | None = None) -> dict:
    """Keyword arguments of :class:`~.specs.ModelSpec` for the HF config ``cfg``.

    ``hf_quant``: ModelOpt's ``hf_quant_config.json`` beside the config, if any;
    ``source``: how errors name the file (default: the model name).
    """
    c = _Config(language_config(cfg), name)
    spec = _common(c)
    if c.mt == "opt":
        spec.update(_opt(c))
    else:
        spec.update(_decoder(c))
        spec.update(_windows(c, spec["max_position_embeddings"]))
        spec.update(_moe(c, spec["num_layers"]))
        spec.update(hybrid_fields(c, spec["num_layers"]))
    moe = spec.get("num_moe_layers", 0)
    layers = LayerCounts.of_decoder(spec["num_layers"], moe, spec.get("num_shared_experts", 0))
    spec["quantization"] = parse_quantization(c.cfg, act=spec["dtype"], layers=layers,
                                              source=source or c.name, hf_quant=hf_quant)
    return spec


def _common(c: _Config) -> dict:
    torch_dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    dtype = _TORCH_DTYPES.get(torch_dtype.replace("torch.", ""), "bf16")
    if dtype == "fp32":  # checkpoints saved in fp32 (gemma-2) are served in bf16
        dtype = "bf16"
    return dict(
        name=c.name,
        model_type=c.mt,
        vocab_size=c.need("vocab_size"),
        # transformers' default is True, overridden to False by most decoder configs
        tie_word_embeddings=bool(c.get("tie_word_embeddings", c.mt in _TIED_BY_DEFAULT)),
        dtype=dtype,
    )


def _opt(c: _Config) -> dict:
    """OPT: a plain decoder with LayerNorm, a ReLU MLP of ``ffn_dim``, biases and learned
    positions."""
    return {**_decoder(c),
            "intermediate_size": c.need("ffn_dim"),
            "max_position_embeddings": c.need("max_position_embeddings"),
            "norm": "layer", "mlp": "plain", "learned_positions": True,
            "qkv_bias": bool(c.get("enable_bias", True)),
            "linear_bias": bool(c.get("enable_bias", True))}


def _decoder(c: _Config) -> dict:
    hidden = c.need("hidden_size")
    heads = c.need("num_attention_heads")
    return dict(
        num_layers=c.need("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=c.get("num_key_value_heads") or heads,
        head_dim=c.get("head_dim") or hidden // heads,
        intermediate_size=c.get("intermediate_size", 0) or 0,
        max_position_embeddings=c.get("max_position_embeddings", 4096),
        qkv_bias=bool(c.get("attention_bias", c.mt == "qwen2")),
        qk_norm=c.mt in ("qwen3", "qwen3_moe", *QWEN_HYBRID_TYPES) or bool(c.get("use_qk_norm")),
        qk_norm_scope="layer" if c.get("qk_norm_type") == "per_layer" else "head",
    )


def _windows(c: _Config, max_positions: int) -> dict:
    """Sliding-window attention: Gemma-2 on half the layers; Mistral / Qwen2 / Phi-3 on all
    when the window is on and shorter than the positions."""
    if c.mt == "gemma2":
        window = int(c.get("sliding_window") or 0)
        return dict(norms_per_layer=4, sliding_window=window,
                    sliding_fraction=0.5 if window else 0.0)
    if c.mt in ("mistral", "qwen2", "phi3") and c.get("sliding_window"):
        use = c.get("use_sliding_window", c.mt != "qwen2")
        window = int(c.get("sliding_window"))
        if use and window < max_positions:
            return dict(sliding_window=window, sliding_fraction=1.0)
    return {}


def _moe(c: _Config, layers: int) -> dict:
    """Experts, top-k and which layers are MoE, by family."""
    if c.mt in ("mixtral", "minimax_m2", "gpt_oss"):  # every layer MoE, intermediate_size
        return dict(num_experts=c.need("num_local_experts"),  # per expert
                    experts_per_token=c.need("num_experts_per_tok"),
                    moe_intermediate_size=c.need("intermediate_size"), num_moe_layers=layers)
    if c.mt in ("qwen3_moe", *QWEN_HYBRID_TYPES):
        step = int(c.get("decoder_sparse_step", 1) or 1)
        skip = set(c.get("mlp_only_layers") or [])
        moe_layers = sum(1 for i in range(layers) if i not in skip and (i + 1) % step == 0)
        return dict(num_experts=c.need("num_experts"),
                    experts_per_token=c.need("num_experts_per_tok"),
                    moe_intermediate_size=c.need("moe_intermediate_size"),
                    num_moe_layers=moe_layers, **_qwen_shared_expert(c, moe_layers))
    if c.mt in _MLA_TYPES:
        return _deepseek(c, layers)
    return {}


def _qwen_shared_expert(c: _Config, moe_layers: int) -> dict:
    """Qwen3-Next / Qwen3.5: one shared expert of ``shared_expert_intermediate_size`` beside
    the routed ones (its sigmoid gate, a 1-wide projection, is not priced)."""
    width = int(c.get("shared_expert_intermediate_size") or 0)
    if c.mt not in QWEN_HYBRID_TYPES or not width or not moe_layers:
        return {}
    return dict(num_shared_experts=1, shared_intermediate_size=width)


def _deepseek(c: _Config, layers: int) -> dict:
    """DeepSeek-V2/V3 (and Kimi-K2): MLA attention, shared plus routed experts after the
    first ``first_k_dense_replace`` dense layers. DeepSeek-V3.2 and GLM-5 add sparse
    attention: a lightning indexer (``index_n_heads`` x ``index_head_dim``) picks the
    ``index_topk`` cached tokens each query attends to."""
    first_dense = int(c.get("first_k_dense_replace", 0))
    freq = int(c.get("moe_layer_freq", 1) or 1)
    moe_inter = c.need("moe_intermediate_size")
    n_shared = int(c.get("n_shared_experts") or 0)
    return dict(
        attention="mla",
        num_kv_heads=1,
        head_dim=c.get("qk_nope_head_dim", 128) + c.get("qk_rope_head_dim", 64),
        num_experts=c.need("n_routed_experts"),
        experts_per_token=c.need("num_experts_per_tok"),
        moe_intermediate_size=moe_inter,
        num_shared_experts=n_shared,
        shared_intermediate_size=moe_inter * n_shared,
        num_moe_layers=sum(1 for i in range(first_dense, layers) if i % freq == 0),
        q_lora_rank=int(c.get("q_lora_rank") or 0),
        kv_lora_rank=c.need("kv_lora_rank"),
        qk_nope_head_dim=c.need("qk_nope_head_dim"),
        qk_rope_head_dim=c.need("qk_rope_head_dim"),
        v_head_dim=c.need("v_head_dim"),
        num_nextn_predict_layers=int(c.get("num_nextn_predict_layers") or 0),
        index_topk=int(c.get("index_topk") or 0),
        index_n_heads=int(c.get("index_n_heads") or 0),
        index_head_dim=int(c.get("index_head_dim") or 0),
    )
