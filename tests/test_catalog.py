"""Catalog names, paths and errors; op tables against independent parameter counts."""

import json

import numpy as np
import pytest

from serveplan.estimator.catalog import (
    CatalogError,
    list_gpus,
    list_models,
    resolve_gpu,
    resolve_model,
)
from serveplan.estimator.ops import build_ops
from serveplan.estimator.specs import Parallelism, SpecError
from serveplan.kernels import roofline as K


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-2-70b", "qwen3-30b-a3b", "deepseek-v3",
                                  "codellama-34b-instruct", "opt-66b", "gemma-2-9b",
                                  "mixtral-8x7b-v0.1", "phi-3-mini-4k-instruct",
                                  "meta-llama/Llama-2-70b-hf", "Qwen/Qwen3-30B-A3B",
                                  "LLAMA-2-70B-HF"])
def test_models_by_short_and_full_name(name):
    assert resolve_model(name).num_layers > 0


def test_model_from_config_path(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 1024,
           "vocab_size": 1000, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    m = resolve_model(str(path))
    assert (m.head_dim, m.num_kv_heads, m.name) == (64, 2, "tiny")
    assert resolve_model(str(path.parent)).num_layers == 4


def test_unknown_model_lists_close_matches():
    with pytest.raises(CatalogError, match="did you mean.*llama-3.1-8b"):
        resolve_model("llama-3.1-7b")


def test_bad_config_names_the_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "vocab_size": 10}))
    with pytest.raises(SpecError, match="num_attention_heads"):
        resolve_model(str(path))
    path.write_text("{not json")
    with pytest.raises(CatalogError, match="line 1"):
        resolve_model(str(path))


@pytest.mark.parametrize("name,canonical", [("h100", "h100"), ("H100-SXM", "h100"),
                                            ("a100", "a100-80gb"), ("h20", "h20"),
                                            ("h800", "h800"), ("b200", "b200"),
                                            ("l40s", "l40s"), ("mi300x", "mi300x"),
                                            ("ascend-910b3", "ascend-910b3")])
def test_gpus_by_name_and_alias(name, canonical):
    assert resolve_gpu(name).name == canonical


def test_gpu_from_yaml_and_errors(tmp_path):
    path = tmp_path / "mygpu.yaml"
    path.write_text("memory_bytes: 8.0e10\nmem_bw: 2.0e12\nflops: {bf16: 5.0e14}\n"
                    "scaleup_bw: 1.0e11\nscaleout_bw: 2.5e10\n")
    g = resolve_gpu(str(path))
    assert g.name == "mygpu" and g.peak_flops("fp8") == 5e14
    with pytest.raises(CatalogError, match="did you mean"):
        resolve_gpu("h10")
    assert "h100" in list_gpus() and "llama-3.1-8b" in list_models()


def test_a_bad_gpu_yaml_names_each_field_and_its_line(tmp_path):
    """Line 2 holds a negative memory size, line 4 flops without a 16-bit peak, line 6 an
    unknown phase of lender_speed; scaleout_bw is missing (on no line: the file alone)."""
    path = tmp_path / "bad.yaml"
    path.write_text("profile_from: b200\nmemory_bytes: -3\nmem_bw: 2.0e12\n"
                    "flops: {fp8: 5.0e14}\nscaleup_bw: 1.0e11\nlender_speed: {prefil: 1.1}\n")
    with pytest.raises(CatalogError) as err:
        resolve_gpu(str(path))
    assert str(err.value).splitlines() == [
        f"memory_bytes: Input should be greater than 0 (got -3) ({path} line 2)",
        f"flops: needs a bf16 or fp16 entry ({path} line 4)",
        f"scaleout_bw: Field required ({path})",
        f"lender_speed: unknown phase(s) ['prefil']; valid: ['prefill', 'decode'] ({path} line 6)",
    ]


@pytest.mark.parametrize("name,params", [
    ("llama-3.1-8b", 8.03e9), ("llama-3.1-70b", 70.55e9), ("llama-2-7b", 6.74e9),
    ("mixtral-8x7b-v0.1", 46.7e9), ("qwen3-30b-a3b", 30.5e9), ("deepseek-v3", 671e9),
    ("opt-66b", 65.7e9), ("gemma-2-9b", 9.24e9), ("phi-3-mini-4k-instruct", 3.82e9),
])
def test_weights_match_published_parameter_counts(name, params):
    """Sum of resident weight bytes / dtype size = the model card's parameter count (±2%)."""
    _check_parameter_count(resolve_model(name), params)


def test_minimax_m2_is_read_as_a_moe_model(shared_data):
    """MiniMax-M2.5's config (model_type minimax_m2): 256 experts of intermediate_size, top 8,
    in all 62 layers -- 230B parameters on its model card (10B active)."""
    m = resolve_model(shared_data / "e2e" / "aic_silicon_blackwell" / "model_configs" /
                      "MiniMaxAI--MiniMax-M2.5_config.json")
    assert (m.num_experts, m.experts_per_token, m.num_moe_layers) == (256, 8, 62)
    _check_parameter_count(m, 230e9)


def _check_parameter_count(m, params: float) -> None:
    t = build_ops(m, Parallelism())
    ops = t.ops
    # each row's resident bytes over its class's bytes per weight (norms: 16-bit)
    wbytes = np.array([t.quant.bytes_per_element(c) if c else 2.0 for c in t.wclass])
    count = ops[:, K.C_PARAM] / wbytes
    per_layer = np.sum(count * ops[:, K.C_FRAC] *
                       (ops[:, K.C_MODULE] >= 1) * (ops[:, K.C_MODULE] <= 4))
    other = np.sum(count * ((ops[:, K.C_MODULE] < 1) | (ops[:, K.C_MODULE] > 4)))
    total = per_layer * m.num_layers + other
    if m.tie_word_embeddings:
        assert "lm_head" in t.names
    assert total == pytest.approx(params, rel=0.02)


def test_decode_flops_per_token_about_twice_active_params():
    # dense decoder: forward FLOPs per token ≈ 2 × (non-embedding) parameters + attention
    m = resolve_model("llama-3.1-8b")
    ops = build_ops(m, Parallelism()).ops
    tok = ops[:, K.C_BASIS] == K.B_TOKENS
    gemm = tok & (ops[:, K.C_FAMILY] == K.F_GEMM)
    flops = np.sum(ops[gemm, K.C_A]) * m.num_layers
    assert flops == pytest.approx(2 * (8.03e9 - 2 * 525_336_576), rel=0.01)


def test_parallelism_validation():
    m = resolve_model("llama-3.1-8b")
    with pytest.raises(SpecError, match="tp=3"):
        Parallelism(tp=3).check_model(m)
    with pytest.raises(SpecError, match="no experts"):
        Parallelism(tp=2, ep=2).check_model(m)
    with pytest.raises(ValueError, match="ep"):
        Parallelism(tp=2, ep=4)


# ------------------------------------------------------------------ aliases and variants
@pytest.mark.parametrize("name,base", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("llama-3.1-70b-instruct", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),   # the repository's old name
    ("mixtral-8x7b", "mixtral-8x7b-v0.1"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-v0.1"),
    ("Qwen/Qwen2.5-72B", "qwen2.5-72b-instruct"),                  # base -> the shipped instruct
    ("google/gemma-2-9b-it", "gemma-2-9b"),
])
def test_instruct_and_base_variants_share_the_architecture(name, base):
    """A variant is read from its shipped sibling's config.json: same architecture, weights
    and quantization (bf16)."""
    got, want = resolve_model(name), resolve_model(base)
    assert got.model_dump(exclude={"name"}) == want.model_dump(exclude={"name"})


@pytest.mark.parametrize("name,base,label,kv", [
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", "fp8_block", "bf16"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", "fp8", "bf16"),
    ("llama-3.1-70b-instruct-fp8", "llama-3.1-70b", "fp8", "bf16"),
    ("nvidia/Qwen3-32B-NVFP4", "qwen3-32b", "nvfp4", "fp8"),
])
def test_quantized_checkpoints_resolve_to_their_quantization(name, base, label, kv):
    got, want = resolve_model(name), resolve_model(base)
    assert got.model_dump(exclude={"name", "quantization"}) == \
        want.model_dump(exclude={"name", "quantization"})
    assert (got.quantization.label, got.quantization.kv_cache) == (label, kv)
    assert got.quantization.lm_head.kind == "bf16"  # every one of them keeps the LM head


@pytest.mark.parametrize("repo,layers,experts,label", [
    ("deepseek-ai/DeepSeek-R1", 61, 256, "fp8_block"),
    ("nvidia/DeepSeek-V3.1-NVFP4", 61, 256, "nvfp4"),
    ("MiniMaxAI/MiniMax-M2.5", 62, 256, "fp8_block"),
    ("nvidia/MiniMax-M2.5-NVFP4", 62, 256, "nvfp4"),
    ("moonshotai/Kimi-K2.5", 61, 384, "int4"),
    ("nvidia/Kimi-K2.5-NVFP4", 61, 384, "nvfp4"),
    ("meta-llama/Llama-3.1-70B", 80, 0, "bf16"),
    ("Qwen/Qwen3-32B", 64, 0, "bf16"),
])
def test_e2e_models_by_hf_id_and_short_name(repo, layers, experts, label):
    """The measured end-to-end deployments' models, with the configs they were run from
    (provenance: estimator/data/models/SOURCE.md)."""
    m = resolve_model(repo)
    assert (m.num_layers, m.num_experts, m.quantization.label) == (layers, experts, label)
    assert resolve_model(repo.split("/")[1]).model_dump() == m.model_dump()


def test_every_alias_names_a_shipped_config_and_a_source():
    from serveplan.estimator.catalog import _aliases

    for alias, fields in _aliases().items():
        assert fields.get("source"), alias
        assert resolve_model(alias).num_layers == resolve_model(fields["config"]).num_layers


def test_an_unknown_quantized_name_is_not_read_as_its_16bit_base():
    with pytest.raises(CatalogError, match="unknown model 'qwen3-8b-awq'"):
        resolve_model("qwen3-8b-awq")


@pytest.mark.parametrize("name,repo", [
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
    ("qwen3-235b-a22b-fp8", "Qwen/Qwen3-235B-A22B-FP8"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("llama-3.1-8b-instruct", None),    # a variant without its org: the repo is not known
    ("no-such-model", None),
])
def test_model_repo(name, repo):
    from serveplan.estimator.catalog import model_repo

    assert model_repo(name) == repo
