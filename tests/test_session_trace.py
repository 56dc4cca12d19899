"""Session workloads: the JSON Lines trace reader, the generators, the config and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import TypeAdapter, ValidationError
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import Workload
from serveplan.sim.session_trace import read_session_trace, write_session_trace
from serveplan.sim.session_workloads import (
    FRONTIER_TEMPLATES,
    agentic_sessions,
    chat_sessions,
    frontier_sessions,
    session_is_heavy,
)
from serveplan.sim.sessions import session_requests
from serveplan.sim.traces import TraceError

DATA = Path(__file__).parent / "data" / "sessions"
WORKLOAD = TypeAdapter(Workload)
runner = CliRunner()


def test_reader_groups_interleaved_rounds():
    r = read_session_trace(DATA / "good.jsonl")
    assert r.names == ("a", "7")
    np.testing.assert_array_equal(r.session, [0, 0, 1, 1])
    np.testing.assert_array_equal(r.new_tokens, [100, 50, 200, 30])
    np.testing.assert_array_equal(r.kind, [0, 1, 0, 1])  # session 7: last round answers
    np.testing.assert_array_equal(r.delay_s, [0.0, 1.5, 0.0, 0.0])
    np.testing.assert_array_equal(r.arrival_s, [0.5, 0.0])
    req = session_requests(r, hash_block=16)
    # session "7" arrived first: rows 7/r0, a/r0, 7/r1 (200 + 5 + 30), a/r1 (100 + 10 + 50)
    np.testing.assert_array_equal(req.prompt_len, [200, 100, 235, 160])
    assert req.sessions.names == ("7", "a")


@pytest.mark.parametrize("name, line, field", [
    ("bad_json.jsonl", 2, "not valid JSON"),
    ("bad_round.jsonl", 3, "round: 2 but session 'a' is at round 1"),
    ("missing_delay.jsonl", 2, "tool_delay_s: missing"),
    ("bad_kind.jsonl", 1, "kind: 'final' is not one of thinking, answer"),
    ("bad_tokens.jsonl", 2, "prompt_tokens: 0 is not an integer >= 1"),
    ("negative_arrival.jsonl", 1, "arrival_s: -2 is not a finite number of seconds >= 0"),
])
def test_reader_names_file_line_and_field(name, line, field):
    with pytest.raises(TraceError) as err:
        read_session_trace(DATA / name)
    assert str(err.value).startswith(f"{DATA / name} line {line}: {field}")


def test_cli_reports_a_bad_trace_line_as_one_error(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "deployment": {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 2000},
        "workload": {"kind": "poisson", "rate": 1.0, "num_requests": 5}}))
    r = runner.invoke(app, ["simulate", str(cfg), "--sessions", str(DATA / "bad_round.jsonl")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines == [f"error: {DATA / 'bad_round.jsonl'} line 3: round: 2 but session 'a' is "
                     "at round 1 here (rounds go 0, 1, 2, ... in file order)"]


def test_config_needs_one_source_and_a_rate():
    with pytest.raises(ValidationError, match="either a generator or a session trace path"):
        WORKLOAD.validate_python({"kind": "sessions", "rate": 1.0})
    with pytest.raises(ValidationError, match="a generator needs rate"):
        WORKLOAD.validate_python({"kind": "sessions", "generator": {"type": "chat"}})
    with pytest.raises(ValidationError, match="heavy_fraction"):
        WORKLOAD.validate_python({"kind": "sessions", "rate": 1.0,
                                  "generator": {"type": "frontier", "heavy_fraction": 1.5}})


def test_frontier_templates_are_table_7():
    r = frontier_sessions(4000, 1.0, seed=1, heavy_fraction=0.1, tool_delay_s=0.7)
    heavy = session_is_heavy(r)
    # binomial(4000, 0.1): sd = sqrt(4000 * 0.09) = 19; 5 sd = 95 sessions
    assert abs(heavy.sum() - 400) < 95
    new = r.new_tokens.reshape(4000, 5)
    np.testing.assert_array_equal(new[heavy][0], FRONTIER_TEMPLATES["heavy"][0])
    np.testing.assert_array_equal(new[~heavy][0], [4096, 1024, 512, 512, 256])
    np.testing.assert_array_equal(r.output_tokens.reshape(4000, 5)[0], [96, 64, 64, 64, 192])
    np.testing.assert_array_equal(r.kind.reshape(4000, 5)[0], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(r.delay_s.reshape(4000, 5)[0], [0, 0.7, 0.7, 0.7, 0.7])


def test_chat_grows_context_and_thinks_exponentially():
    r = chat_sessions(2000, 2.0, seed=2, turns=4, think_time_s=8.0)
    req = session_requests(r, hash_block=1024)
    plan = req.sessions
    # round k's prompt = sum of earlier (new + out) + its new tokens
    s0 = np.flatnonzero(r.session == 0)
    expected = np.cumsum(r.new_tokens[s0] + r.output_tokens[s0]) - r.output_tokens[s0]
    np.testing.assert_array_equal(req.prompt_len[plan.session == 0], expected)
    # exponential think time, mean 8 s: the mean of 6000 draws is within 5 sd (8/sqrt(6000))
    later = plan.round > 0
    assert abs(plan.delay_s[later].mean() - 8.0) < 5 * 8.0 / np.sqrt(later.sum())
    assert (plan.kind == 1).all()  # every chat turn is visible


def test_agentic_rounds_are_long_tailed_and_bounded():
    r = agentic_sessions(3000, 1.0, seed=4, max_context=200_000)
    assert r.new_tokens.min() >= 4096 and r.new_tokens.max() <= 32768
    assert set(r.output_tokens) == {200}
    counts = np.bincount(r.session)
    # 1 + lognormal(median 3, sigma 0.8), rounded: median 4 rounds; the tail reaches far
    # beyond it (P(> 12 rounds) = P(z > ln(11/3)/0.8 = 1.62) ~ 5 %, before the context cap)
    assert np.median(counts) == 4 and counts.max() > 12
    kinds = r.kind[np.cumsum(counts) - 1]
    assert (kinds == 1).all() and r.kind.sum() == 3000
    req = session_requests(r, hash_block=1024)
    assert (req.prompt_len + req.output_len <= 200_000).all()


def test_written_trace_reads_back(tmp_path):
    r = frontier_sessions(6, 1.0, seed=0, heavy_fraction=0.5)
    write_session_trace(tmp_path / "s.jsonl", r)
    back = read_session_trace(tmp_path / "s.jsonl")
    for field in ("session", "new_tokens", "output_tokens", "kind", "delay_s", "arrival_s"):
        np.testing.assert_array_equal(getattr(back, field), getattr(r, field), err_msg=field)
    first = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert set(first) == {"session_id", "round", "arrival_s", "prompt_tokens",
                          "output_tokens", "kind"}


def test_cli_prints_session_tables(tmp_path, sim_compiled):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "deployment": {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 3000,
                       "scheduler": "h2q-br"},
        "workload": {"kind": "sessions", "path": str(DATA / "good.jsonl")}}))
    r = runner.invoke(app, ["simulate", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["sessions"] == 2 and s["sessions_completed"] == 2
    # history of the later rounds: (200 + 5) + (100 + 10) tokens
    assert s["followup_history_tokens"] == 315
