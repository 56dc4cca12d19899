"""The shipped ShareGPT sample (sim/data/sharegpt_vllm_bench.*) against the benchmark clients'
own rules, written out here: vLLM's ``is_valid_sequence`` and ``ShareGPTDataset`` order
(``vllm/benchmarks/datasets.py``), and ``sample_sharegpt_requests`` of
``sglang/bench_serving.py``."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from pydantic import TypeAdapter

from serveplan.config import Workload
from serveplan.sim import clients
from serveplan.sim.lengths import SHAREGPT_FILE, ShareGPTLength, ShareGPTPairs, sharegpt_pairs
from serveplan.sim.traces import read_vidur

PROVENANCE = json.loads(SHAREGPT_FILE.with_suffix(".provenance.json").read_text())


def is_valid_sequence(prompt_len, output_len, min_len=4, max_prompt_len=1024,
                      max_total_len=2048):
    """vLLM's filter, copied as a rule (vllm/benchmarks/datasets.py)."""
    return not (prompt_len < min_len or output_len < min_len or prompt_len > max_prompt_len
                or prompt_len + output_len > max_total_len)


def vllm_sample(pairs, num_requests, seed):
    """ShareGPTDataset.load_data + sample + maybe_oversample_requests on (prompt, output)."""
    data = list(zip(pairs.prompt_len.tolist(), pairs.output_len.tolist(), strict=True))
    random.seed(seed)
    random.shuffle(data)
    samples = []
    for prompt_len, output_len in data:
        if len(samples) >= num_requests:
            break
        if is_valid_sequence(prompt_len, output_len):
            samples.append((prompt_len, output_len))
    if len(samples) < num_requests:
        random.seed(seed)
        samples += [random.choice(samples) for _ in range(num_requests - len(samples))]
    return np.array(samples).reshape(-1, 2)


def sglang_sample(pairs, num_requests, seed, context_len=None):
    """sglang.bench_serving: random.seed(--seed), then sample_sharegpt_requests on
    (prompt, output): shuffle, keep the first ``num_requests`` not pruned."""
    dataset = list(zip(pairs.prompt_len.tolist(), pairs.output_len.tolist(), strict=True))
    random.seed(seed)
    random.shuffle(dataset)
    filtered = []
    for prompt_len, output_len in dataset:
        if len(filtered) == num_requests:
            break
        if prompt_len < 2 or output_len < 2:
            continue
        if context_len and prompt_len + output_len > context_len:
            continue
        filtered.append((prompt_len, output_len))
    return np.array(filtered).reshape(-1, 2)


def test_counts_and_moments_match_the_provenance():
    pairs = sharegpt_pairs()
    counts = PROVENANCE["counts"]
    assert len(pairs.prompt_len) == counts["with_two_turns"] == 17400
    assert int(pairs.valid.sum()) == counts["valid"]
    for column, values in (("prompt", pairs.prompt_len), ("output", pairs.output_len)):
        stats = PROVENANCE[f"valid_{column}_len"]
        assert values[pairs.valid].mean() == pytest.approx(stats["mean"], abs=1e-3)
        assert np.median(values[pairs.valid]) == stats["median"]
        assert ShareGPTLength(column).mean == pytest.approx(stats["mean"], abs=1e-3)
    assert PROVENANCE["filters"] == {"min_len": 4, "max_prompt_len": 1024,
                                     "max_total_len": 2048,
                                     "source": "vllm/benchmarks/datasets.py is_valid_sequence"}


def test_the_valid_pairs_pass_vllms_filters_and_the_rest_do_not():
    pairs = sharegpt_pairs()
    rule = np.array([is_valid_sequence(p, o) for p, o in
                     zip(pairs.prompt_len.tolist(), pairs.output_len.tolist(), strict=True)])
    np.testing.assert_array_equal(pairs.valid, rule)
    p, o = pairs.prompt_len[pairs.valid], pairs.output_len[pairs.valid]
    assert p.min() >= 4 and o.min() >= 4 and p.max() <= 1024 and (p + o).max() <= 2048


@pytest.mark.parametrize("n, seed", [(1000, 0), (7, 3)])
def test_sample_follows_vllms_order(n, seed):
    pairs = sharegpt_pairs()
    prompt, output = pairs.vllm_sample(n, seed)
    np.testing.assert_array_equal(np.c_[prompt, output], vllm_sample(pairs, n, seed))
    if (n, seed) == (1000, 0):
        default = PROVENANCE["vllm_default_sample"]
        assert prompt.mean() == pytest.approx(default["mean_prompt_len"], abs=1e-3)
        assert output.mean() == pytest.approx(default["mean_output_len"], abs=1e-3)


def test_oversampling_when_too_few_pairs_pass():
    # pairs 1 and 3 pass; vLLM reseeds and draws random.choice from the kept ones
    small = ShareGPTPairs(np.array([2, 10, 2000, 50, 9]), np.array([9, 20, 9, 60, 1]))
    prompt, output = small.vllm_sample(6, seed=5)
    np.testing.assert_array_equal(np.c_[prompt, output], vllm_sample(small, 6, 5))
    assert set(prompt.tolist()) == {10, 50}
    assert len(small.vllm_sample(6, seed=5, oversample=False)[0]) == 2


def test_config_gives_whole_pairs_in_vllm_order():
    w = TypeAdapter(Workload).validate_python({
        "kind": "vllm-bench-serve", "request_rate": 2, "num_prompts": 50,
        "isl": {"dist": "sharegpt"}, "osl": {"dist": "sharegpt"}})
    assert (w.isl.column, w.osl.column) == ("prompt", "output")
    r = clients.build_requests(w, seed=4)
    expected = vllm_sample(sharegpt_pairs(), 50, 4)
    np.testing.assert_array_equal(np.c_[r.prompt_len, r.output_len], expected)


@pytest.mark.parametrize("n, seed, context_len", [(1000, 1, None), (50, 7, 1024)])
def test_sglang_sample_follows_sglangs_rules(n, seed, context_len):
    pairs = sharegpt_pairs()
    prompt, output = pairs.sglang_sample(n, seed, context_len=context_len)
    np.testing.assert_array_equal(np.c_[prompt, output],
                                  sglang_sample(pairs, n, seed, context_len))
    assert prompt.min() >= 2 and output.min() >= 2
    if context_len is None:  # no 1024 / 2048 caps: longer than vLLM's sample
        v_prompt, v_output = pairs.vllm_sample(n, seed)
        assert prompt.max() > 1024 and prompt.mean() > v_prompt.mean()
    else:
        assert (prompt + output).max() <= context_len


def test_sglang_sample_refuses_to_run_fewer_requests_than_asked():
    # SGLang does not oversample: 2 of these pairs pass (2 >= 2 tokens each), 3 are asked
    small = ShareGPTPairs(np.array([2, 1, 5000, 3]), np.array([2, 9, 7, 1]))
    prompt, output = small.sglang_sample(2, seed=0)
    assert sorted(prompt.tolist()) == [2, 5000]
    with pytest.raises(ValueError, match="has 2 requests .* asked for 3"):
        small.sglang_sample(3, seed=0)


def test_config_gives_whole_pairs_in_sglang_order():
    w = TypeAdapter(Workload).validate_python({
        "kind": "poisson", "rate": 2, "num_requests": 40,
        "isl": {"dist": "sharegpt", "sampler": "sglang", "sharegpt_context_len": 4096},
        "osl": {"dist": "sharegpt", "sampler": "sglang", "sharegpt_context_len": 4096}})
    r = clients.build_requests(w, seed=1)
    np.testing.assert_array_equal(np.c_[r.prompt_len, r.output_len],
                                  sglang_sample(sharegpt_pairs(), 40, 1, 4096))
    d = clients.length_dist(w.isl)
    p = sharegpt_pairs()
    keep = (p.prompt_len >= 2) & (p.output_len >= 2) & (p.prompt_len + p.output_len <= 4096)
    assert d.mean == pytest.approx(p.prompt_len[keep].mean())


@pytest.mark.parametrize("isl, osl, message", [
    ({"dist": "sharegpt", "sharegpt_context_len": 2048}, {"dist": "sharegpt"},
     "sharegpt_context_len is sglang.bench_serving's option"),
])
def test_sglang_options_are_checked(isl, osl, message):
    with pytest.raises(ValueError, match=message):
        TypeAdapter(Workload).validate_python({"kind": "poisson", "rate": 2,
                                               "isl": isl, "osl": osl})


def test_mixed_samplers_are_refused():
    w = TypeAdapter(Workload).validate_python({
        "kind": "poisson", "rate": 2, "num_requests": 10,
        "isl": {"dist": "sharegpt", "sampler": "sglang"}, "osl": {"dist": "sharegpt"}})
    with pytest.raises(ValueError, match="the same sampler"):
        clients.build_requests(w, seed=0)


def test_compare_with_vidurs_sharegpt(shared_data):
    """Figures for the record (printed with ``-s``); asserted: only what the files say."""
    path = shared_data / "vidur" / "processed_traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    vidur = read_vidur(path)
    ours = sharegpt_pairs()
    p, o = ours.prompt_len[ours.valid], ours.output_len[ours.valid]
    print(f"\nvLLM-bench ShareGPT ({len(p)} valid pairs): mean prompt {p.mean():.1f}, "
          f"mean output {o.mean():.1f}, median output {np.median(o):.0f}")
    print(f"Vidur sharegpt_8k ({len(vidur)} rows): mean prompt {vidur.prompt_len.mean():.1f}, "
          f"mean output {vidur.output_len.mean():.1f}, median output "
          f"{np.median(vidur.output_len):.0f}")
    # Vidur's file is filtered at 8k tokens, not at vLLM's 1024 / 2048: some rows fail vLLM's rule
    assert not ShareGPTPairs(vidur.prompt_len, vidur.output_len).valid.all()
