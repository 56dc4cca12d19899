"""Cases of the ``serveplan compare`` and ``calibrate --runs`` fuzz (:mod:`test_fuzz`): a
real benchmark result of each tool the comparator reads, one of its files damaged the way
files get damaged -- a key deleted, a value of the wrong type, huge, negative, NaN or
infinite, a list cut short, the file truncated mid-way -- then compared against a small
deployment, or the runtime terms fitted to it on that deployment. And ``calibrate
--batch-runs`` on the example manifest of fixed-batch runs, mutated as the config fuzz
mutates YAML files (:func:`fuzz_cases.config_bytes`).

The fixtures are the readers' own test files (``tests/data/runs``, the example vLLM
result) and an ``sglang.bench_serving`` line and genai-perf export written from the
constants of their reader tests. A case is a fixture, the file damaged and a seed: the
damage is drawn from the seed (so a finding replays from the case alone) and the damaged
bytes travel in the case (``Case.files``: path in the fixture -> bytes).
"""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
from pathlib import Path

import fuzz_cases
import test_runs_genai_perf as genai
import test_runs_sglang as sglang
import yaml
from fuzz_oracles import EXAMPLES, Case, check_outcome, invoke
from hypothesis import strategies as st

RUNS = Path(__file__).resolve().parent / "data" / "runs"
FIXTURES = (RUNS / "vllm_detailed.json", RUNS / "vllm_summary.json", RUNS / "vllm_v08.json",
            RUNS / "aiperf", RUNS / "aiperf_v0", RUNS / "inference_perf",
            *sorted((RUNS / "guidellm").glob("*.json")), EXAMPLES / "vllm-bench-result.json",
            "sglang.jsonl", "genai_perf")
"""Paths, or the names of the fixtures written from the reader tests' constants."""
JUNK = (None, "x", "", -1, 0, 1e308, -1e-9, 2**63, 10**12, 10**400, math.nan, math.inf,
        -math.inf, True, [], {}, [1, "a"], "1e3")
FLAGS = ("--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "vllm", "--json")
BATCH_MANIFEST = EXAMPLES / "batch-runs-h100-vllm.yaml"
FIT_FLAGS = ("--max-evals", "4", "--out", "{out}")
"""``calibrate --runs``: a few simulations per fit (the readers are under test, not the fit)."""


def written(name: str, folder: Path) -> Path:
    """Write the fixture ``name`` (not a path in the repository) under ``folder``."""
    if name == "sglang.jsonl":  # one run with --output-details, one without
        path = folder / name
        path.write_text(json.dumps(sglang.RESULT | sglang.DETAILS) + "\n"
                        + json.dumps(sglang.RESULT) + "\n")
        return path
    path = folder / name
    path.mkdir()
    (path / "profile_export.json").write_text(json.dumps(genai.EXPORT))
    (path / "profile_export_genai_perf.json").write_text(json.dumps(genai.STATS | genai.NESTED))
    return path


def _copy(fixture: Path | str, folder: Path) -> Path:
    if isinstance(fixture, str):
        return written(fixture, folder)
    target = folder / fixture.name
    (shutil.copytree if fixture.is_dir() else shutil.copy)(fixture, target)
    return target


def _junk(rng: random.Random):
    """A copy of one :data:`JUNK` value (a shared list put in two places could be damaged
    into containing itself)."""
    return copy.deepcopy(rng.choice(JUNK))


def _damage_value(obj, rng: random.Random, depth: int = 0) -> None:
    """Delete, replace or cut one entry somewhere inside ``obj`` (in place)."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(list(obj))
        roll = rng.random()
        if roll < 0.3:
            del obj[key]
        elif roll < 0.7 or depth > 4:
            obj[key] = _junk(rng)
        else:
            _damage_value(obj[key], rng, depth + 1)
    elif isinstance(obj, list) and obj:
        i, roll = rng.randrange(len(obj)), rng.random()
        if roll < 0.3:
            del obj[i:]
        elif roll < 0.6:
            obj[i] = _junk(rng)
        else:
            _damage_value(obj[i], rng, depth + 1)


def damaged(text: str, suffix: str, rng: random.Random) -> str:
    """``text`` (a file's content) damaged once or a few times."""
    if rng.random() < 0.1:
        return text[:rng.randrange(len(text) + 1)]
    if suffix in (".yaml", ".yml") and rng.random() < 0.5:  # broken syntax
        lines = text.splitlines()
        lines[rng.randrange(len(lines))] += rng.choice((": [", " {", ": *x", "\t- -"))
        return "\n".join(lines) + "\n"
    if suffix in (".yaml", ".yml"):  # values of the wrong kind
        data = yaml.safe_load(text)
        for _ in range(rng.randint(1, 3)):
            _damage_value(data, rng)
        return yaml.safe_dump(data)
    if suffix == ".jsonl":
        lines = text.splitlines()
        i = rng.randrange(len(lines))
        record = json.loads(lines[i])
        _damage_value(record, rng)
        lines[i] = json.dumps(record)
        return "\n".join(lines) + "\n"
    data = json.loads(text)
    for _ in range(rng.randint(1, 3)):
        _damage_value(data, rng)
    return json.dumps(data)


@st.composite
def compare_cases(draw) -> Case:
    fixture = draw(st.sampled_from(FIXTURES))
    seed = draw(st.integers(0, 2**32 - 1))
    extra = draw(st.sampled_from(((), ("--max-model-len", "300"), ("--num-instances", "2"),
                                  ("--all-runs",))))
    return Case("compare", ["compare", "{run}", *FLAGS, *extra], context={
        "fixture": str(fixture), "seed": seed})


@st.composite
def calibrate_cases(draw) -> Case:
    fixture = draw(st.sampled_from(FIXTURES))
    seed = draw(st.integers(0, 2**32 - 1))
    return Case("calibrate", ["calibrate", "--runs", "{run}", *FLAGS, *FIT_FLAGS], context={
        "fixture": str(fixture), "seed": seed})


@st.composite
def batch_cases(draw) -> Case:
    base = yaml.safe_load(BATCH_MANIFEST.read_text())
    manifest = draw(fuzz_cases.config_bytes(base, max_mutations=draw(st.sampled_from(
        [0, 1, 1, 2, 3]))))
    return Case("calibrate-batch", ["calibrate", "--batch-runs", "{cfg}", "--out", "{out}",
                                    "--json"], {"{cfg}": manifest})


def run_batch_case(case: Case, folder: Path) -> dict | None:
    """Write the case's manifest under ``folder``, fit it and check the outcome."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "node.yaml").write_bytes(case.files["{cfg}"])
    paths = {"{cfg}": str(folder / "node.yaml"), "{out}": str(folder / "node-vllm.json")}
    outcome = fuzz_cases.last_outcome = invoke([paths.get(a, a) for a in case.args])
    return check_outcome(outcome, case.command, json_out=True)


def run_result_case(case: Case, folder: Path) -> dict | None:
    """Copy the case's fixture under ``folder``, damage one of its files (recording the
    bytes in ``case.files``), run the case's command on it and check the outcome (raises
    ``Finding``)."""
    folder.mkdir(parents=True, exist_ok=True)
    fixture = case.context["fixture"]
    target = _copy(Path(fixture) if "/" in fixture else fixture, folder)
    files = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
    rng = random.Random(case.context["seed"])
    victim = rng.choice(files)
    victim.write_text(damaged(victim.read_text(), victim.suffix, rng))
    case.files = {str(victim.relative_to(folder)): victim.read_bytes()}
    paths = {"{run}": str(target), "{out}": str(folder / "fitted-runtime.json")}
    outcome = fuzz_cases.last_outcome = invoke([paths.get(a, a) for a in case.args])
    return check_outcome(outcome, case.command, json_out=True)
