"""Strategies for ``tests/test_fuzz.py``: a new user's arguments and YAML files, fuzzed
through the CLI in-process; :mod:`fuzz_oracles` runs and judges each case.
"""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path

import yaml
from fuzz_oracles import (  # noqa: F401  (KNOWN_BUGS, Finding, ... re-exported)
    BINARY,
    EXAMPLES,
    KNOWN_BUGS,
    TRACES,
    Case,
    Finding,
    Outcome,
    check_outcome,
    expected_requests,
    invoke,
    is_known,
    known_bug,
    materialize,
)
from hypothesis import strategies as st

# ============================================================================ values
NUMBER_WORDS = ["0", "-1", "1", "2", "3", "4", "8", "16", "0.5", "1.5", "1e3", "1e-300",
                "1e308", "inf", "-inf", "nan", "NaN", "abc", "", " ", "0x10", "1_000",
                "99999999999999999999", "-99999999999999999999", "2**3", "1,2", "--1",
                "१२", "1e", "+5"]
"""Option values a user might type (non-numbers, ranges' edges, overflow, IEEE specials)."""
HUGE = ["100000", "100000000", "2147483648", "10000000000", "4611686018427387904",
        "18446744073709551616", "99999999999999999999", "1e30", "1e308"]
"""Large counts: a typo with extra zeros, int32 / int64 overflow."""


def weighted(*pairs: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, picked with the given integer weights."""
    table = [strategy for weight, strategy in pairs for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def number_text(small: tuple[int, int] = (-3, 64)) -> st.SearchStrategy[str]:
    """Text for a numeric CLI option: half the time a small number, else anything."""
    return weighted(
        (9, st.integers(*small).map(str)),
        (2, st.sampled_from(NUMBER_WORDS)),
        (2, st.sampled_from(HUGE)),
        (1, st.integers(-(2 ** 70), 2 ** 70).map(str)),
        (1, st.floats(allow_nan=True, allow_infinity=True).map(repr)),
        (1, st.floats(1e-6, 1e6).map(lambda x: f"{x:.6g}")),
    )


def small_count(lo: int = 1, hi: int = 30) -> st.SearchStrategy[str]:
    """A request / seed count: mostly small and valid, sometimes not a count at all."""
    return weighted((9, st.integers(lo, hi).map(str)),
                    (1, st.sampled_from(["0", "-1", "abc", "1e3", "nan", ""])))


SCALARS = st.one_of(
    st.sampled_from([0, -1, 1, 2, -0.5, 0.0, 1e-300, 1e308, 2 ** 63, 2 ** 64, 10 ** 20,
                     -(10 ** 20), float("inf"), float("-inf"), float("nan"), True, False,
                     None, "", "abc", "1", "0", "nan", "inf", "fixed", "poisson", "pd",
                     "colocated", "prefill", "decode", "h100", "llama-3.1-8b", "\x00",
                     "é", "../x", "[1", "{"]),
    st.integers(-5, 300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
"""Replacement values for config fields (wrong types, edges, huge, specials)."""

YAML_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)

SET_VALUE_TEXT = st.one_of(
    st.sampled_from(["0", "-1", "1", "8", "1e9", "1e309", ".nan", ".inf", "-.inf", "null",
                     "~", "", "[1,", "{a: 1}", "[]", "{}", "true", "'x'", "!!binary aGk=",
                     "&a [*a]", "!!python/object:os.system ls", "{dist: fixed, value: 0}",
                     "{dist: uniform, low: 5, high: 1}", "{dist: lognormal, sigma: 0}",
                     "{dist: trace, path: nope.csv, column: prompt}", "sharegpt",
                     "{dist: sharegpt}", "{kind: poisson}", "{kind: closed-loop}",
                     "[{role: colocated}]", "h100", "llama-3.1-8b", "sibyl", "late",
                     "99999999999999999999", "0.0", "-0.0", "2048", "\x00"]),
    number_text(),
    st.text(max_size=12),
)
"""``--set key=VALUE`` texts (YAML, broken YAML, tags, recursive anchors)."""

SEGMENTS = ["deployment", "workload", "slo", "seed", "pools", "0", "1", "2", "-1", "99",
            "count", "num_instances", "model", "gpu", "tp", "rate", "num_requests", "isl",
            "osl", "max", "dist", "kind", "router", "decode_router", "sibyl", "prefill",
            "decode", "architecture", "ttft_ms", "percentile", "goodput", "record_steps",
            "", "foo", "__class__", "max_num_seqs", "num_gpu_blocks", "block_size"]
BOUNDED_PATHS = ["workload.cv", "workload.burstiness", "workload.time_scale",
                 "workload.think_time_s", "workload.concurrency", "workload.isl.mean",
                 "workload.isl.median", "workload.osl.sigma", "workload.osl.max", "record_steps",
                 "deployment.kv_link_bw", "deployment.kv_link_latency_s",
                 "deployment.prefill_hold", "deployment.sibyl.delta",
                 "deployment.sibyl.max_length", "workload.prefix.prefix_len",
                 "workload.prefix.num_groups", "workload.warmup_request_count",
                 "workload.num_requests", "workload.rate"]
"""Fields whose values drive the simulator's allocations or its time span (each bounded)."""


# ============================================================================ configs
def _load(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _without(data: dict, key: str) -> dict:
    return {k: v for k, v in data.items() if k != key}


def simulate_bases() -> dict[str, dict]:
    """Simulation configs the mutations start from: the pool forms of the examples, the
    older flat and ``architecture: pd`` forms, and a Mooncake trace replay."""
    trace = {"deployment": {"model": "llama-3.1-8b", "gpu": "h100", "num_instances": 1,
                            "max_model_len": 8192},
             "workload": {"kind": "trace", "path": str(TRACES / "mooncake_conv_head.jsonl"),
                          "arrival": "poisson", "rate": 5.0, "num_requests": 10,
                          "repeat": True},
             "slo": {"ttft_ms": 1000, "tpot_ms": 100}}
    return {
        "colocated": _load("llama8b-h100.yaml"),
        "pd": _load("pd-sibyl.yaml"),
        "pd-pools": _load("pd-pools.yaml"),
        "flat": _without(_load("goodput-llama8b.yaml"), "goodput") | {
            "workload": {**_load("goodput-llama8b.yaml")["workload"], "rate": 4.0}},
        "pd-legacy": _without(_load("goodput-pd.yaml"), "goodput") | {
            "workload": {**_load("goodput-pd.yaml")["workload"], "rate": 4.0}},
        "trace": trace,
    }


def goodput_bases() -> dict[str, dict]:
    return {"colocated": _load("goodput-llama8b.yaml"), "pd": _load("goodput-pd.yaml")}


def paths_of(data, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a YAML tree (inner nodes and leaves), list items by index."""
    out = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = list(enumerate(data))
    else:
        return out
    for k, v in items:
        out.append((*prefix, k))
        out.extend(paths_of(v, (*prefix, k)))
    return out


def _get_parent(data, path: tuple):
    node = data
    for part in path[:-1]:
        node = node[part]
    return node


NAMES = ["llama-3.1-8b", "qwen3-8b", "mixtral-8x7b", "deepseek-v2-lite", "h100", "h200", "l4",
         "a100-40gb", "mi300x", "round-robin", "least-loaded", "least-requests",
         "least-outstanding-tokens", "sibyl", "sibyl-p1", "sibyl-reqlevel", "rr", "vllm-v1",
         "sglang", "prefill-priority", "trtllm-no-evict", "trtllm-max-utilization", "early",
         "late", "packed", "separate", "poisson", "gamma", "constant", "closed-loop",
         "vllm-bench-serve", "inference-perf", "fixed", "uniform", "lognormal", "sharegpt",
         "bf16", "fp16", "fp8", "colocated", "prefill", "decode", "engine", "delay", "vllm",
         "trtllm", "auto", "analytic", "request", "iteration"]
"""Valid words of some config field: swapped between fields, they make odd but valid
configs (a decode router as a scheduler is an error; a GPU for another GPU is not)."""


def plausible(old) -> st.SearchStrategy:
    """A value of the same type as ``old``, often still valid (edges included)."""
    if isinstance(old, bool):
        return st.booleans()
    if isinstance(old, int) and abs(old) < 2 ** 62:
        return st.one_of(st.integers(0, 2 * abs(old) + 2), st.sampled_from([1, 2, 3, 16]),
                         st.just(old * 10), st.integers(-2, 0))
    if isinstance(old, float) and math.isfinite(old) and abs(old) < 1e300:
        return st.one_of(st.floats(0, 2 * abs(old) + 1), st.just(old * 100),
                         st.floats(1e-6, 1e-2), st.just(old / 1000))
    if isinstance(old, str):
        return st.sampled_from(NAMES)
    return YAML_VALUES


_POS = st.integers(1, 64)
OPTIONAL = {  # optional fields a user adds, by where they go, with values of their type
    "instance": {"watermark": st.floats(0, 0.99), "num_gpu_blocks": st.integers(2, 3000),
                 "block_size": st.sampled_from([1, 8, 16, 32, 64, 128, 256, 7]),
                 "enable_prefix_caching": st.booleans(), "enable_chunked_prefill": st.booleans(),
                 "long_prefill_token_threshold": st.integers(0, 4096),
                 "async_scheduling": st.booleans(), "num_scheduler_steps": st.integers(1, 16),
                 "engine": st.sampled_from(["vllm", "sglang", "trtllm"]),
                 "engine_version": st.sampled_from(["0.19.0", "0.6.0", "1.0", "x"]),
                 "new_token_ratio": st.floats(0, 1), "enable_mixed_chunk": st.booleans(),
                 "kv_dtype": st.sampled_from(["fp8", "bf16"]),
                 "dtype": st.sampled_from(["fp8", "fp16"]), "pp": st.integers(1, 4),
                 "tp": st.sampled_from([1, 2, 4, 8]), "cuda_graph": st.booleans(),
                 "max_num_seqs": st.integers(1, 300), "max_num_batched_tokens":
                 st.integers(1, 20000), "max_model_len": st.integers(2, 20000),
                 "gpu_memory_utilization": st.floats(0.05, 1.0),
                 "scheduler": st.sampled_from(["vllm-v1", "sglang", "prefill-priority",
                                               "trtllm-no-evict", "trtllm-max-utilization"])},
    "workload": {"warmup_request_count": st.integers(0, 12),
                 "request_timeout_s": st.floats(1e-3, 30),
                 "prefix": st.fixed_dictionaries({"num_groups": _POS,
                                                  "prefix_len": st.integers(0, 3000)}),
                 "num_dataset_entries": st.integers(1, 20),
                 "dataset_sampling_strategy": st.sampled_from(["sequential", "random",
                                                               "shuffle"]),
                 "isl": st.one_of(st.integers(1, 5000), st.fixed_dictionaries(
                     {"dist": st.just("uniform"), "low": _POS, "high": st.integers(1, 3000)}),
                     st.just({"dist": "sharegpt"})),
                 "osl": st.one_of(st.integers(1, 600), st.fixed_dictionaries(
                     {"dist": st.just("fixed"), "value": st.integers(1, 600)})),
                 "kind": st.sampled_from(["poisson", "gamma", "constant", "closed-loop",
                                          "vllm-bench-serve"]),
                 "concurrency": st.integers(1, 20), "cv": st.floats(0.01, 10),
                 "burstiness": st.floats(0.01, 10), "max_concurrency": st.integers(1, 20),
                 "think_time_s": st.floats(0, 2)},
    "slo": {"attainment": st.floats(0.01, 1), "percentile": st.floats(0.1, 100),
            "ttft_ms": st.floats(0.01, 5000), "tpot_ms": st.floats(0.01, 200)},
    "boundary": {"assignment": st.sampled_from(["early", "late"]),
                 "layerwise_transfer": st.booleans(),
                 "placement": st.sampled_from(["packed", "separate"]),
                 "kv_link_bw": st.floats(1e6, 1e12), "kv_link_latency_s": st.floats(0, 0.1),
                 "prefill_stage": st.sampled_from(["engine", "delay"]),
                 "prefill_hold": st.integers(0, 300),
                 "decode_cost": st.sampled_from(["oracle", {"kind": "fitted-throughput"}]),
                 "sibyl": st.fixed_dictionaries({"delta": st.floats(1, 512),
                                                 "alpha": st.floats(0.01, 0.99)}),
                 "decode_router": st.sampled_from(["round-robin", "least-loaded",
                                                   "least-requests", "sibyl", "sibyl-p1",
                                                   "sibyl-no-type1", "sibyl-reqlevel"])},
}


def _where(data: dict) -> list[tuple[str, dict]]:
    """The mappings of ``data`` that take :data:`OPTIONAL` fields."""
    out = []
    for path in [(), *paths_of(data)]:
        node = data
        for part in path:
            node = node[part]
        if not isinstance(node, dict):
            continue
        if "model" in node or "gpu" in node:
            out.append(("instance", node))
        elif path == ("workload",):
            out.append(("workload", node))
        elif path == ("slo",):
            out.append(("slo", node))
        elif path == ("deployment",) and ("pools" in node or node.get("architecture") == "pd"):
            out.append(("boundary", node))
    return out


@st.composite
def mutated_data(draw, base: dict, max_mutations: int = 3):
    """``base`` with 0..``max_mutations`` edits: a value replaced (same type, or wrong
    type, edge, huge, NaN), an optional field added, a key deleted, an unknown key added,
    a subtree copied elsewhere."""
    data = copy.deepcopy(base)
    n = draw(st.sampled_from([0, 1, 1, 2, 2, 3]))
    for _ in range(min(n, max_mutations)):
        paths = paths_of(data)
        op = draw(st.sampled_from(["plausible", "plausible", "optional", "optional", "set",
                                   "delete", "unknown", "move"]))
        if not paths or not isinstance(data, dict):
            break
        path = draw(st.sampled_from(paths))
        parent = _get_parent(data, path)
        key = path[-1]
        if op == "plausible":
            parent[key] = draw(plausible(parent[key]))
        elif op == "optional":
            where = _where(data)
            if where:
                kind, node = draw(st.sampled_from(where))
                name = draw(st.sampled_from(sorted(OPTIONAL[kind])))
                node[name] = draw(OPTIONAL[kind][name])
        elif op == "set":
            parent[key] = draw(YAML_VALUES)
        elif op == "delete":
            del parent[key]
        elif op == "unknown":
            target = parent[key] if isinstance(parent[key], dict) else parent
            if isinstance(target, dict):
                target[draw(st.sampled_from(["foo", "Model", "num_request", "tp ", "rate_",
                                             "count", "role", "kind"]))] = draw(SCALARS)
        else:
            other = draw(st.sampled_from(paths))
            parent[key] = copy.deepcopy(_get_parent(data, other)[other[-1]])
    return data


@st.composite
def config_bytes(draw, base: dict, max_mutations: int = 3) -> bytes:
    """A YAML file: ``base`` mutated, sometimes damaged as text or replaced by junk."""
    data = draw(mutated_data(base, max_mutations))
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()
    damage = draw(st.sampled_from(["none"] * 30 + ["binary", "truncate", "insert", "empty",
                                                   "text", "tabs", "list", "scalar"]))
    if damage == "binary":
        return draw(st.sampled_from([BINARY, BINARY[128:], b"\x00" * 10,
                                     "é".encode("latin-1") * 20]))
    if damage == "truncate":
        return text[:draw(st.integers(0, len(text)))]
    if damage == "insert":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.binary(min_size=1, max_size=8)) + text[at:]
    if damage == "empty":
        return b""
    if damage == "text":
        return draw(st.text(max_size=60)).encode("utf-8", "surrogatepass")
    if damage == "tabs":
        return text.replace(b"  ", b"\t")
    if damage == "list":
        return b"- " + text.replace(b"\n", b"\n  ")
    if damage == "scalar":
        return b"42\n"
    return text


set_paths = st.one_of(
    st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4).map(".".join),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.-0123456789 ", max_size=16),
)


def set_items(known_paths: list[str]) -> st.SearchStrategy[list[str]]:
    """``--set`` arguments: known or random dotted paths, YAML or broken values, and a few
    malformed items (no ``=``, empty key)."""
    known = st.sampled_from(known_paths) if known_paths else set_paths
    sensible = st.one_of(st.integers(0, 300).map(str), st.sampled_from(NAMES),
                         st.sampled_from(["true", "false", "0.5", "1e-3", "null"]))
    item = weighted(
        (4, st.tuples(known, sensible).map(lambda kv: f"{kv[0]}={kv[1]}")),
        (3, st.tuples(st.one_of(known, set_paths), SET_VALUE_TEXT).map(
            lambda kv: f"{kv[0]}={kv[1]}")),
        (1, st.sampled_from(["garbage", "=1", " =1", "seed", "a=b=c", "deployment.=1",
                             ".=1"])),
        (1, st.tuples(st.sampled_from(BOUNDED_PATHS), st.one_of(
            SET_VALUE_TEXT, st.sampled_from(["1e-310", "1e-9", "1e5", "1e7"]))).map(
            lambda kv: f"{kv[0]}={kv[1]}")),
    )
    return st.one_of(st.just([]), st.lists(item, max_size=3))


def dotted_paths(data: dict) -> list[str]:
    return [".".join(str(p) for p in path) for path in paths_of(data)]


# ============================================================================ cases
MODELS = weighted(
    (5, st.sampled_from(["llama-3.1-8b", "llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b",
                         "deepseek-v3", "deepseek-v2-lite", "opt-13b", "gemma-2-9b",
                         "phi-3-mini-4k-instruct", "llama-3.1-70b", "meta-llama/Llama-3.1-8B",
                         "Llama-3.1-8B"])),
    (1, st.sampled_from(["llama", "", "no-such-model", "{binary}", "{missing}", "{dir}"])))
GPUS = weighted(
    (5, st.sampled_from(["h100", "h100", "h200", "h20", "a100-40gb", "l4", "mi300x",
                         "ascend-910b3", "gaudi3", "H100"])),
    (1, st.sampled_from(["h1000", "", "{binary}", "{missing}", "{dir}"])))
PLACEHOLDERS = ("{cfg}", "{binary}", "{missing}", "{dir}")


def _options(draw, table: dict[str, st.SearchStrategy], max_size: int) -> list[str]:
    names = draw(st.lists(st.sampled_from(sorted(table)), max_size=max_size, unique=True))
    out = []
    for name in names:
        value = draw(table[name])
        out += [name] if value is None else [name, value]
    return out


_DTYPE = st.sampled_from(["bf16", "fp16", "fp8", "int4", ""])
_FLAG = st.none()


@st.composite
def estimate_cases(draw) -> Case:
    opts = {"--tp": number_text((0, 9)), "--pp": number_text((0, 5)),
            "--ep": number_text((0, 9)), "--dp": number_text((0, 9)),
            "--batch": number_text((0, 512)), "--input-len": number_text((0, 9000)),
            "--context-len": number_text((0, 140000)),
            "--phase": st.sampled_from(["prefill", "decode", "mixed", ""]),
            "--dtype": _DTYPE, "--kv-dtype": _DTYPE, "--no-cuda-graph": _FLAG,
            "--profile": st.sampled_from(["{binary}", "{missing}", "{dir}", "{cfg}"])}
    args = ["estimate", "--model", draw(MODELS),
            "--gpu", draw(GPUS), *_options(draw, opts, 4)]
    as_json = draw(st.booleans()) or draw(st.booleans())
    ctx = {}
    try:
        vals = dict(itertools.pairwise(args))
        phase = vals.get("--phase", "decode")
        batch = int(vals.get("--batch", "1"))
        new = int(vals.get("--input-len", "1")) if phase == "prefill" else 1
        ctx["tokens"] = batch * new
    except ValueError:
        pass
    files = {"{cfg}": b'{"not": "a profile"}'}
    return Case("estimate", args + (["--json"] if as_json else []), files, as_json, ctx)


ENGINE_KNOBS = {
    "vllm": ("--gpu-memory-utilization", "--max-num-batched-tokens", "--max-num-seqs",
             "--block-size", "--kv-cache-memory-bytes", "--num-gpu-blocks-override"),
    "sglang": ("--mem-fraction-static", "--page-size", "--max-total-tokens",
               "--chunked-prefill-size"),
    "trtllm": ("--free-gpu-memory-fraction", "--tokens-per-block", "--max-num-tokens",
               "--max-tokens"),
}
"""The knobs of each engine's memory rule (``serveplan memory``), so most cases pass them to
the engine that takes them; a knob of another engine is an error worth a few cases."""


@st.composite
def memory_cases(draw) -> Case:
    fraction = weighted((2, number_text((0, 1))),
                        (3, st.floats(0, 1.2).map(lambda x: f"{x:.3g}")))
    knobs = {"--gpu-memory-utilization": fraction, "--max-num-batched-tokens": number_text(),
             "--max-num-seqs": number_text(), "--block-size": weighted(
                 (3, st.sampled_from(["1", "8", "16", "32", "64", "128", "256"])),
                 (1, number_text((0, 256)))),
             "--kv-cache-memory-bytes": weighted(
                 (2, st.floats(1e6, 9e10).map(lambda x: f"{x:.4g}")), (1, number_text())),
             "--num-gpu-blocks-override": number_text((0, 100000)),
             "--mem-fraction-static": fraction, "--page-size": number_text((0, 64)),
             "--max-total-tokens": number_text((0, 10 ** 6)),
             "--chunked-prefill-size": number_text((0, 16384)),
             "--free-gpu-memory-fraction": fraction, "--tokens-per-block": number_text((0, 64)),
             "--max-num-tokens": number_text((0, 16384)),
             "--max-tokens": number_text((0, 10 ** 6))}
    other = {"--tp": number_text((0, 9)), "--pp": number_text((0, 5)),
             "--ep": number_text((0, 9)), "--dp": number_text((0, 9)),
             "--max-model-len": number_text((0, 300000)),
             "--pp-layer-partition": st.one_of(
                 st.sampled_from(["16,16", "5,6,5,6", "", "a,b", "-1,33", "0,32", "32", ",",
                                  "1,1,1", "99999999999999999999,1"]),
                 st.lists(st.integers(-2, 40), max_size=4).map(
                     lambda v: ",".join(map(str, v)))),
             "--dtype": _DTYPE, "--kv-dtype": _DTYPE,
             "--profile": st.sampled_from(["{binary}", "{missing}", "{dir}", "{cfg}"])}
    engine = draw(weighted((8, st.sampled_from(sorted(ENGINE_KNOBS))),
                           (1, st.sampled_from(["tgi", ""]))))
    own = {k: knobs[k] for k in ENGINE_KNOBS.get(engine, ())}
    table = weighted((4, st.just(own or knobs)), (1, st.just(knobs)))
    args = ["memory", "--model", draw(MODELS),
            "--gpu", draw(GPUS), "--engine", engine,
            *_options(draw, draw(table), 3), *_options(draw, other, 2)]
    as_json = draw(st.booleans()) or draw(st.booleans())
    files = {"{cfg}": b'{"not": "a profile"}'}
    return Case("memory", args + (["--json"] if as_json else []), files, as_json)


SIM_BASES = simulate_bases()
GOODPUT_BASES = goodput_bases()


@st.composite
def simulate_cases(draw) -> Case:
    name = draw(st.sampled_from(sorted(SIM_BASES)))
    base = SIM_BASES[name]
    cfg = draw(config_bytes(base))
    flags_table = {
        "--rate": number_text((0, 50)), "--seed": number_text((0, 10)),
        "--isl": number_text((0, 4000)), "--osl": number_text((0, 600)),
        "--num-instances": number_text((0, 6)), "--num-gpu-blocks": number_text((0, 5000)),
        "--max-num-seqs": number_text((0, 300)),
        "--max-num-batched-tokens": number_text((0, 10000)),
        "--concurrency": number_text((0, 20)), "--time-scale": number_text((0, 4)),
        "--scheduler": st.sampled_from(["vllm-v1", "sglang", "prefill-priority", "fcfs"]),
        "--router": st.sampled_from(["round-robin", "least-outstanding-tokens",
                                     "least-requests", "sibyl"]),
        "--trace": st.sampled_from([str(TRACES / "mooncake_conv_head.jsonl"),
                                    str(TRACES / "azure_conv_head.csv"),
                                    str(TRACES / "azure_conv_bad_line.csv"),
                                    str(TRACES / "vidur_sharegpt_head.csv"),
                                    "{binary}", "{missing}", "{dir}"]),
    }
    names = draw(st.one_of(st.just([]), st.lists(st.sampled_from(sorted(flags_table)),
                                                 max_size=2, unique=True)))
    flags = {n: draw(flags_table[n]) for n in names}
    flags["-n"] = draw(small_count())
    sets = draw(set_items(dotted_paths(base)))
    as_json = draw(st.integers(0, 3)) > 0
    args = ["simulate", "{cfg}", *[x for kv in flags.items() for x in kv]]
    for item in sets:
        args += ["--set", item]
    return Case("simulate", args + (["--json"] if as_json else []), {"{cfg}": cfg},
                as_json, {"base": name, "flags": flags, "sets": sets})


@st.composite
def goodput_cases(draw) -> Case:
    name = draw(st.sampled_from(sorted(GOODPUT_BASES)))
    cfg = draw(config_bytes(GOODPUT_BASES[name], max_mutations=draw(st.sampled_from([0, 0, 1,
                                                                                     2]))))
    unit = st.one_of(number_text((0, 1)), st.floats(0, 1).map(lambda x: f"{x:.3g}"))
    secs = st.one_of(number_text((0, 2)), st.floats(1e-4, 3).map(lambda x: f"{x:.3g}"))
    table = {"--fidelity": st.sampled_from(["auto", "analytic", "request", "iteration",
                                            "exact", ""]),
             "--confidence": unit, "--rtol": st.one_of(unit, number_text()),
             "--ttft": secs, "--tpot": secs, "--percentile": number_text((0, 101)),
             "--attainment": unit}
    args = ["goodput", "{cfg}", "-n", draw(small_count(10, 30)),
            "--seeds", draw(weighted((8, st.sampled_from(["1", "1", "2"])),
                                     (1, st.sampled_from(["0", "-1", "x"])))),
            *_options(draw, table, 3)]
    for item in draw(set_items(dotted_paths(GOODPUT_BASES[name]))):
        args += ["--set", item]
    as_json = draw(st.integers(0, 3)) > 0
    return Case("goodput", args + (["--json"] if as_json else []), {"{cfg}": cfg}, as_json)


@st.composite
def search_cases(draw) -> Case:
    secs = st.one_of(number_text((0, 2)), st.floats(1e-3, 3).map(lambda x: f"{x:.3g}"))
    tps = st.one_of(st.sampled_from(["1", "1,2", "2", "1,2,4", "0", "-1", "3", "abc", "",
                                     "1,,2", "1;2", "99999999999999999999"]),
                    st.lists(st.sampled_from([1, 1, 2, 4, 8, 0, -2]), min_size=1,
                             max_size=3).map(lambda v: ",".join(map(str, v))))
    table = {"--model": st.sampled_from(["llama-3.1-8b", "llama-3.1-8b", "qwen3-8b",
                                         "no-such-model", "{binary}"]),
             "--gpu": st.sampled_from(["h100", "h100", "l4", "a100-40gb", "h1000"]),
             "--isl": number_text((0, 4096)), "--osl": number_text((0, 512)),
             "--ttft": secs, "--tpot": secs, "--percentile": number_text((0, 101)),
             "--attainment": st.one_of(number_text((0, 1)),
                                       st.floats(0, 1).map(lambda x: f"{x:.3g}")),
             "--arch": st.sampled_from(["colocated", "pd", "colocated,pd", "pd,pd", "",
                                        "moe", "colocated,"]),
             "--same-tp": _FLAG,
             "--fidelity": st.sampled_from(["analytic", "analytic", "auto", "request",
                                            "iteration", "best"]),
             "--rtol": number_text(), "--top": st.sampled_from(["1", "2", "0", "-1"]),
             "--max-num-seqs": number_text((0, 300)),
             "--max-model-len": number_text((0, 9000)), "--limit": number_text((0, 20))}
    # large budgets are refused before any strategy is built (search.MAX_STRATEGIES: the
    # pd space grows as gpus**2); those that pass with large --tp sizes only stay quick
    gpus = draw(weighted((8, st.sampled_from(["1", "2", "2", "3", "4"])),
                         (2, st.sampled_from(["0", "-1", "abc", "", "1.5", "nan", "1e3"])),
                         (1, st.sampled_from(["200", "1024", "1025", *HUGE]))))
    args = ["search", "--gpus", gpus, "--tp", draw(tps), "-n", draw(small_count(10, 30)),
            "--seeds", draw(weighted((8, st.sampled_from(["1", "1", "2"])),
                                     (1, st.sampled_from(["0", "-1", "x"])))),
            "--max-decide", draw(weighted((8, st.sampled_from(["1", "2", "3"])),
                                          (1, st.sampled_from(["0", "-1"])))),
            *_options(draw, table, 3)]
    ctx = {}
    try:
        ctx["gpus"] = int(gpus)
    except ValueError:
        pass
    if "--arch" in args:
        ctx["archs"] = {a.strip() for a in args[args.index("--arch") + 1].split(",")}
    as_json = draw(st.integers(0, 3)) > 0
    return Case("search", args + (["--json"] if as_json else []), {}, as_json, ctx)


CASES = {"estimate": estimate_cases(), "memory": memory_cases(),
         "simulate": simulate_cases(), "goodput": goodput_cases(), "search": search_cases()}


last_outcome: Outcome | None = None
"""The outcome of the latest :func:`run_case` (for exploration scripts)."""


def run_case(case: Case, folder: Path) -> dict | list | None:
    """Run one case and check it; raises :class:`Finding`."""
    global last_outcome
    last_outcome = None
    args = materialize(case, folder)
    context = dict(case.context, binary=str(folder / "blob.bin"))
    if case.command == "simulate" and "base" in context:
        flags = {k: args[args.index(k) + 1] for k in context["flags"]}  # files written
        context["requests"] = expected_requests(Path(args[1]), flags, context["sets"])
    outcome = last_outcome = invoke(args)
    return check_outcome(outcome, case.command, json_out=case.json_out, context=context)
