"""Tests for serveplan.sim.traces on small fixtures and, when present, the real trace files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from serveplan.sim.traces import (
    Trace,
    TraceError,
    read_azure,
    read_mooncake,
    read_trace,
    read_vidur,
)
from serveplan.sim.workload import PoissonArrivals, tile_requests

FIXTURES = Path(__file__).parent / "data" / "traces"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _shared(rel: str) -> Path:
    path = SHARED / rel
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path


def test_azure_fixture_matches_an_independent_parse():
    path = FIXTURES / "azure_conv_head.csv"
    rows = _csv_rows(path)
    tr = read_azure(path)
    assert len(tr) == len(rows) == 30 and tr.skipped_lines == 0
    np.testing.assert_array_equal(tr.prompt_len, [int(r["ContextTokens"]) for r in rows])
    np.testing.assert_array_equal(tr.output_len, [int(r["GeneratedTokens"]) for r in rows])
    # 18:15:46.6805900 -> 18:15:50.9951690 (lines 2, 3); also splitwise_conv.csv's arrived_at
    assert tr.arrival_s[0] == 0.0 and tr.arrival_s[1] == pytest.approx(4.314579, abs=1e-9)
    r = tr.to_requests()
    assert r.mean_rate == pytest.approx(29 / tr.arrival_s[-1]) and not r.has_hashes


def test_azure_bad_line_raises_with_file_and_line():
    path = FIXTURES / "azure_conv_bad_line.csv"
    with pytest.raises(TraceError) as err:
        read_azure(path)
    msg = str(err.value)
    assert "azure_conv_bad_line.csv line 17: GeneratedTokens 'abc' is not an integer" in msg
    tr = read_azure(path, skip_bad_lines=True)
    assert tr.skipped_lines == 1 and "line 17" in tr.skipped_examples[0]
    head = read_azure(FIXTURES / "azure_conv_head.csv", limit=20)
    keep = np.r_[0:15, 16:20]  # data row 16 is file line 17
    np.testing.assert_array_equal(tr.prompt_len, head.prompt_len[keep])
    np.testing.assert_array_equal(tr.output_len, head.output_len[keep])
    np.testing.assert_allclose(tr.arrival_s, head.arrival_s[keep])
    assert len(read_azure(path, limit=15)) == 15  # the bad line is after the limit


def test_azure_truncated_last_line():
    path = FIXTURES / "azure_conv_truncated.csv"
    with pytest.raises(TraceError, match=r"azure_conv_truncated.csv line 12: expected 3 "
                                         r"comma-separated fields, found 2"):
        read_azure(path)
    tr = read_azure(path, skip_bad_lines=True)
    assert len(tr) == 10 and tr.skipped_lines == 1


def test_missing_column_and_missing_file():
    path = FIXTURES / "azure_missing_column.csv"
    for skip in (False, True):
        with pytest.raises(TraceError, match=r"azure_missing_column.csv: missing column "
                                             r"'GeneratedTokens'"):
            read_azure(path, skip_bad_lines=skip)
    with pytest.raises(TraceError, match="missing column 'num_prefill_tokens'"):
        read_vidur(path)
    with pytest.raises(FileNotFoundError, match="no_such_trace.csv does not exist"):
        read_azure(FIXTURES / "no_such_trace.csv")
    with pytest.raises(ValueError, match="limit must be"):
        read_azure(FIXTURES / "azure_conv_head.csv", limit=-1)


def test_limit_reads_a_prefix():
    full = read_azure(FIXTURES / "azure_conv_head.csv")
    for k in (0, 1, 7):
        part = read_azure(FIXTURES / "azure_conv_head.csv", limit=k)
        np.testing.assert_array_equal(part.prompt_len, full.prompt_len[:k])
        np.testing.assert_allclose(part.arrival_s, full.arrival_s[:k])


def test_mooncake_fixture_matches_json():
    path = FIXTURES / "mooncake_conv_head.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    tr = read_mooncake(path)
    assert len(tr) == 20 and tr.hash_block_size == 512
    np.testing.assert_allclose(tr.arrival_s, [r["timestamp"] / 1000 for r in recs])
    np.testing.assert_array_equal(tr.prompt_len, [r["input_length"] for r in recs])
    np.testing.assert_array_equal(tr.output_len, [r["output_length"] for r in recs])
    r = tr.to_requests()
    for i, rec in enumerate(recs):
        np.testing.assert_array_equal(r.hashes(i), rec["hash_ids"])
    assert len(read_mooncake(path, limit=3)) == 3


def test_mooncake_bad_and_truncated_lines():
    path = FIXTURES / "mooncake_conv_bad.jsonl"
    with pytest.raises(TraceError, match=r"mooncake_conv_bad.jsonl line 5: hash_ids has 13 ids but "
                                         r"input_length 6760 needs ceil\(6760 / 512\) = 14"):
        read_mooncake(path)
    tr = read_mooncake(path, skip_bad_lines=True)
    assert len(tr) == 11 and tr.skipped_lines == 2
    assert "line 13: not valid JSON" in tr.skipped_examples[1]
    head = read_mooncake(FIXTURES / "mooncake_conv_head.jsonl", limit=12)
    keep = np.r_[0:4, 5:12]
    np.testing.assert_array_equal(tr.prompt_len, head.prompt_len[keep])
    np.testing.assert_array_equal(tr.hash_ids, np.concatenate([head.to_requests().hashes(i)
                                                               for i in keep]))


def test_mooncake_missing_field_in_first_record(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    with pytest.raises(TraceError, match=r"t.jsonl: missing field 'hash_ids'"):
        read_mooncake(path, skip_bad_lines=True)
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 0, "hash_ids": [1]}\n')
    with pytest.raises(TraceError, match=r"line 1: output_length 0 must be >= 1"):
        read_mooncake(path)


def test_vidur_length_files():
    tr = read_vidur(FIXTURES / "vidur_sharegpt_head.csv")
    rows = _csv_rows(FIXTURES / "vidur_sharegpt_head.csv")
    assert tr.arrival_s is None and len(tr) == 20
    np.testing.assert_array_equal(tr.output_len, [int(r["num_decode_tokens"]) for r in rows])
    assert tr.prompt_dist().mean == pytest.approx(np.mean([int(r["num_prefill_tokens"])
                                                           for r in rows]))
    with pytest.raises(ValueError, match="has no timestamps"):
        tr.to_requests()
    r = tr.to_requests(PoissonArrivals(2.0).sample(len(tr), 0))
    np.testing.assert_array_equal(r.prompt_len, tr.prompt_len)
    split = read_vidur(FIXTURES / "vidur_splitwise_conv_head.csv")
    azure = read_azure(FIXTURES / "azure_conv_head.csv", limit=20)
    np.testing.assert_allclose(split.arrival_s, azure.arrival_s, atol=1e-6)
    np.testing.assert_array_equal(split.prompt_len, azure.prompt_len)


def test_read_trace_dispatch_and_unknown_format(tmp_path):
    assert read_trace(FIXTURES / "mooncake_conv_head.jsonl").hash_ids is not None
    assert read_trace(FIXTURES / "azure_conv_head.csv").arrival_s is not None
    assert read_trace(FIXTURES / "vidur_sharegpt_head.csv").arrival_s is None
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(path)


def test_to_requests_sorts_and_retimes():
    tr = Trace(Path("x"), np.array([3, 4, 5]), np.array([1, 2, 3]), np.array([2.0, 0.0, 1.0]),
               hash_ids=np.arange(3), hash_offsets=np.arange(4), hash_block_size=8)
    r = tr.to_requests()
    np.testing.assert_array_equal(r.prompt_len, [4, 5, 3])
    np.testing.assert_array_equal(r.hash_ids, [1, 2, 0])
    np.testing.assert_allclose(tr.to_requests(time_scale=2.0).arrival_s, [0.0, 0.5, 1.0])
    assert tr.to_requests(rate=8.0).mean_rate == pytest.approx(8.0)


# --- the real files ---------------------------------------------------------------------------


@pytest.mark.parametrize("rel, n, prompt_mean, output_mean, span", [
    ("traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv", 8819, 2048, 28, 3436),
    ("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", 19366, 1155, 211, 3502),
    ("traces/mooncake_fast25/conversation_trace.jsonl", 12031, 12035, 343, 3537),
    ("traces/mooncake_fast25/synthetic_trace.jsonl", 3993, 15325, 149, 1022),
    ("vidur/processed_traces/splitwise_code.csv", 8819, 2048, 28, 3436),
    ("vidur/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", 30731, 2340, 439,
     None),
    ("vidur/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", 28257,
     2588, 291, None),
])
def test_real_files_match_their_source_notes(rel, n, prompt_mean, output_mean, span):
    tr = read_trace(_shared(rel))
    assert len(tr) == n and tr.skipped_lines == 0
    assert tr.prompt_len.mean() == pytest.approx(prompt_mean, abs=1)
    assert tr.output_len.mean() == pytest.approx(output_mean, abs=1)
    if span is None:
        assert tr.arrival_s is None
    else:
        r = tr.to_requests()
        assert r.arrival_s[0] == 0.0 and r.arrival_s[-1] == pytest.approx(span, abs=1)


def test_real_azure_conv_equals_splitwise_conv():
    azure = read_azure(_shared("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    split = read_vidur(_shared("vidur/processed_traces/splitwise_conv.csv"))
    np.testing.assert_array_equal(azure.prompt_len, split.prompt_len)
    np.testing.assert_array_equal(azure.output_len, split.output_len)
    np.testing.assert_allclose(azure.arrival_s, split.arrival_s, atol=1e-6)


def test_real_mooncake_fast_and_line_paths_agree(tmp_path):
    src = _shared("traces/mooncake_fast25/conversation_trace.jsonl")
    lines = src.read_text().splitlines()[:2000]
    bad = tmp_path / "with_bad_line.jsonl"  # one bad line forces the line-by-line path
    bad.write_text("\n".join(lines[:1000] + ["{oops"] + lines[1000:]) + "\n")
    fast = read_mooncake(src, limit=2000)
    slow = read_mooncake(bad, skip_bad_lines=True)
    assert slow.skipped_lines == 1 and "line 1001" in slow.skipped_examples[0]
    for name in ("arrival_s", "prompt_len", "output_len", "hash_ids", "hash_offsets"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))


def test_real_trace_tiles_to_many_requests():
    r = read_mooncake(_shared("traces/mooncake_fast25/synthetic_trace.jsonl")).to_requests()
    big = tile_requests(r, 3 * len(r) + 5)
    assert len(big) == 3 * len(r) + 5 and np.all(np.diff(big.arrival_s) >= 0)
    assert big.hash_ids[big.hash_offsets[len(r)]] == r.hash_ids[0] + r.hash_ids.max() + 1


# --- negative counts and time order --------------------------------------------------------------


def _azure_lines() -> list[str]:
    return (FIXTURES / "azure_conv_head.csv").read_text().splitlines()


def test_negative_token_count_is_named_with_field_file_and_line(tmp_path):
    lines = _azure_lines()
    lines[3] = lines[3].replace(",879,", ",-879,")  # file line 4
    path = tmp_path / "azure_negative.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        read_azure(path)
    assert str(err.value) == f"{path} line 4: ContextTokens '-879' must be >= 1 (a token count)"


@pytest.mark.parametrize("blank_after, bad_line", [(None, None), (2, None), (None, 2)])
def test_unsorted_azure_names_the_line(tmp_path, blank_after, bad_line):
    lines = _azure_lines()
    lines[2], lines[3] = lines[3], lines[2]  # line 4 (18:15:50.99) now follows 18:15:51.22
    expect = 4
    if bad_line is not None:  # a skipped bad line forces the line-by-line reader
        lines[bad_line - 1] = lines[bad_line - 1].rsplit(",", 1)[0] + ",abc"
    if blank_after is not None:  # a blank line shifts the rows the fast reader returns
        lines.insert(blank_after, "")
        expect += 1
    path = tmp_path / "azure_unsorted.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        read_azure(path, skip_bad_lines=bad_line is not None)
    assert str(err.value) == (
        f"{path} line {expect}: TIMESTAMP '2023-11-16T18:15:50.995169000' is earlier than "
        f"'2023-11-16T18:15:51.222467000' on line {expect - 1}; the trace must be sorted by time")


@pytest.mark.parametrize("bad_first", [False, True])
def test_unsorted_mooncake_names_the_line(tmp_path, bad_first):
    records = [json.loads(x) for x in (FIXTURES / "mooncake_conv_head.jsonl").read_text()
               .splitlines()[:4]]
    for rec, t in zip(records, (0, 5000, 9000, 7000), strict=True):
        rec["timestamp"] = t
    lines = [json.dumps(r) for r in records]
    if bad_first:  # a skipped bad line forces the line-by-line reader
        lines.insert(1, "{oops")
    path = tmp_path / "mooncake_unsorted.jsonl"
    path.write_text("\n".join(lines) + "\n")
    line = 5 if bad_first else 4
    with pytest.raises(TraceError, match=rf"line {line}: timestamp 7000.0 is earlier than "
                                         rf"9000.0 on line {line - 1}"):
        read_mooncake(path, skip_bad_lines=bad_first)
