"""Fuzz the command line the way a new user's first hour does: mistyped numbers, zero,
negative, huge, ``inf`` and ``nan`` options, example YAML files with values of the wrong
type, missing or unknown fields, binary junk, and ``--set`` overrides with random dotted
paths; and benchmark results damaged inside (:mod:`fuzz_compare_cases`) for ``compare``
and ``calibrate --runs``, and mutated manifests for ``calibrate --batch-runs``.
Every case ends with exit 0 and sane output, or exit 1 with a few ``error:`` lines
(or click's usage message, exit 2) -- never a traceback (:mod:`fuzz_oracles` says what
"sane" means and how a case is run).

``make test`` runs a small derandomized sample (the ``serveplan-fuzz-ci`` profile, ~88
cases). ``make fuzz`` sets ``SERVEPLAN_FUZZ_EXAMPLES`` (the total number of cases, split
over the commands by :data:`WEIGHTS`) and runs the randomized ``serveplan-fuzz`` profile;
``SERVEPLAN_FUZZ_LOG=FILE`` also appends every finding to FILE as JSON lines.

Each finding has a signature (the exception and the project function it escaped from, or
the broken oracle). New signatures fail; those in ``KNOWN_BUGS`` pass in the property tests
and are pinned by a strict xfail example below, so a fix shows up as an XPASS.
"""

from __future__ import annotations

import itertools
import json
import os

import fuzz_cases
import pytest
from fuzz_cases import (
    CASES,
    EXAMPLES,
    KNOWN_BUGS,
    Case,
    Finding,
    is_known,
    known_bug,
    run_case,
)
from fuzz_compare_cases import (
    batch_cases,
    calibrate_cases,
    compare_cases,
    run_batch_case,
    run_result_case,
)
from hypothesis import HealthCheck, Phase, event, given, settings

FUZZ_TOTAL = int(os.environ.get("SERVEPLAN_FUZZ_EXAMPLES") or 0)
FUZZ_LOG = os.environ.get("SERVEPLAN_FUZZ_LOG")
WEIGHTS = {"estimate": 0.2, "memory": 0.15, "simulate": 0.3, "goodput": 0.1, "search": 0.15,
           "compare": 0.1, "calibrate": 0.05, "calibrate-batch": 0.05}
CI_EXAMPLES = {"estimate": 12, "memory": 12, "simulate": 20, "goodput": 8, "search": 8,
               "compare": 16, "calibrate": 6, "calibrate-batch": 6}

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("serveplan-fuzz-ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("serveplan-fuzz", derandomize=False, report_multiple_bugs=True,
                          phases=list(Phase), **_COMMON)
PROFILE = settings.get_profile("serveplan-fuzz" if FUZZ_TOTAL else "serveplan-fuzz-ci")


def examples(command: str) -> int:
    if FUZZ_TOTAL:
        return max(1, round(FUZZ_TOTAL * WEIGHTS[command]))
    return CI_EXAMPLES[command]


_counter = itertools.count()
_types: dict[str, type] = {}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _check(case: Case, workdir) -> None:
    """Run ``case``; a known finding passes, a new one fails as its own exception type
    (so hypothesis shrinks and reports each distinct bug)."""
    run = {"compare": run_result_case, "calibrate": run_result_case,
           "calibrate-batch": run_batch_case}.get(case.command, run_case)
    try:
        run(case, workdir / f"case{next(_counter)}")
    except Finding as f:
        event(f"finding: {known_bug(f.signature) or f.signature}")
        if FUZZ_LOG:
            with open(FUZZ_LOG, "a") as log:
                log.write(json.dumps({"signature": f.signature, "known": is_known(f),
                                      "args": case.args, "files": {
                                          k: v.decode("utf-8", "backslashreplace")
                                          for k, v in case.files.items()}}) + "\n")
        if is_known(f):
            return
        kind = _types.setdefault(f.signature, type("Finding", (Finding,), {}))
        raise kind(f.signature, str(f)) from None
    finally:
        if fuzz_cases.last_outcome is not None:
            event(f"exit {fuzz_cases.last_outcome.exit_code}")


@settings(PROFILE, max_examples=examples("estimate"))
@given(case=CASES["estimate"])
def test_fuzz_estimate(case, workdir, oracle_8b):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("memory"))
@given(case=CASES["memory"])
def test_fuzz_memory(case, workdir):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("simulate"))
@given(case=CASES["simulate"])
def test_fuzz_simulate(case, workdir, sim_compiled):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("goodput"))
@given(case=CASES["goodput"])
def test_fuzz_goodput(case, workdir, sim_compiled):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("search"))
@given(case=CASES["search"])
def test_fuzz_search(case, workdir, sim_compiled):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("compare"))
@given(case=compare_cases())
def test_fuzz_compare(case, workdir, sim_compiled):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("calibrate"))
@given(case=calibrate_cases())
def test_fuzz_calibrate_runs(case, workdir, sim_compiled):
    _check(case, workdir)


@settings(PROFILE, max_examples=examples("calibrate-batch"))
@given(case=batch_cases())
def test_fuzz_calibrate_batch_runs(case, workdir):
    _check(case, workdir)


# ----------------------------------------------------------------------------- known bugs
def _sim(cfg: bytes, *args: str) -> Case:
    return Case("simulate", ["simulate", "{cfg}", *args], {"{cfg}": cfg}, "--json" in args)


LLAMA = str(EXAMPLES / "llama8b-h100.yaml")
KNOWN_EXAMPLES: list[tuple[str, Case]] = [  # (KNOWN_BUGS pattern, minimal case found)
]


# ----------------------------------------------------------------------------- fixed bugs
def _est(*args: str) -> Case:
    return Case("estimate", ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", *args],
                json_out=False)


def _run(*args: str) -> Case:
    return Case("simulate", ["simulate", LLAMA, *args], json_out="--json" in args)


FIXED: list[tuple[str, Case, tuple[str, ...], tuple[str, ...]]] = [
    # (the KNOWN_BUGS entry it was, the minimal case, the fields its error: lines name in
    #  order, text the lines must hold: a placeholder is the case's file)
    ("deployment not a mapping (resolve_overrides)", _sim(b"deployment: 1\n"),
     ("deployment",), ("{cfg} line 1", "expected a mapping")),
    ("workload a list (resolve_overrides)", _sim(b"workload: [0]\n"),
     ("workload",), ("{cfg} line 1", "got list [0]")),
    ("workload a string (resolve_overrides)", _sim(b"workload: ab\n"),
     ("workload",), ("{cfg} line 1",)),
    ("estimate --batch 1e10: MemoryError (CostOracle.breakdown)", _est("--batch", "10000000000"),
     ("--batch",), ("at most 1,048,576",)),
    ("estimate --batch 2**64: NumPy's message", _est("--batch", "18446744073709551616"),
     ("--batch",), ("at most 1,048,576",)),
    ("simulate --concurrency 1e20: NumPy's message (make_front)",
     _run("-n", "1", "--concurrency", "99999999999999999999"), ("workload.concurrency",), ()),
    ("simulate --concurrency 1e10: MemoryError (make_front)",
     _run("-n", "1", "--concurrency", "10000000000"), ("workload.concurrency",), ()),
    ("simulate --num-instances 1e6: MemoryError (make_pool)",
     _run("-n", "1", "--num-instances", "1000000"), ("deployment.pools[0].count",),
     ("at most 1,024",)),
    ("simulate --max-num-seqs 1e8: MemoryError (make_inst)",
     _run("-n", "1", "--max-num-seqs", "100000000", "--max-num-batched-tokens", "100000000",
          "--num-gpu-blocks", "1000"),
     ("deployment.pools[0].max_num_seqs", "deployment.pools[0].max_num_batched_tokens"), ()),
    ("simulate --isl 2**64: OverflowError (lengths.py:sample)",
     _run("-n", "1", "--isl", "18446744073709551616"), ("workload.isl",), ()),
    ("uniform high 1e20: NumPy's 'out of bounds for int64'",
     _run("-n", "1", "--set", "workload.osl={dist: uniform, low: 1, high: "
          "99999999999999999999}"), ("workload.osl.high",), ()),
    ("simulate --rate 1e-310: RuntimeWarning, then an internal array named",
     _run("-n", "3", "--rate", "1e-310"), ("workload.rate",), ("3 years",)),
    ("search --max-num-seqs 2**64: OverflowError (loop_api.py:_layout)",
     Case("search", ["search", "--gpus", "1", "--tp", "1", "-n", "10", "--seeds", "1",
                     "--max-decide", "1", "--arch", "colocated", "--max-num-seqs",
                     "18446744073709551616"], json_out=False), ("--max-num-seqs",), ()),
    ("estimate --model BINARY: the file not named (catalog._read_json)",
     Case("estimate", ["estimate", "--model", "{binary}", "--gpu", "h100"], json_out=False),
     (), ("{binary} is not a text file", "config.json")),
    ("simulate --rate 1e-300: 0 ms latencies", _run("-n", "3", "--rate", "1e-300", "--json"),
     ("workload.rate",), ("3e+300 s",)),
]


@pytest.mark.parametrize("what, case, fields, needles",
                         [pytest.param(*f, id=f[1].command + "-" + str(i))
                          for i, f in enumerate(FIXED)])
def test_fixed_bug_is_one_error_naming_the_field(what, case, fields, needles, workdir,
                                                 sim_compiled):
    """A bug the fuzzer found is now exit 1 and ``error: FIELD: ...`` lines."""
    folder = workdir / f"fixed{next(_counter)}"
    run_case(case, folder)  # the contract (a Finding if broken)
    o = fuzz_cases.last_outcome
    errors = [ln.removeprefix("error: ") for ln in o.stderr.splitlines()
              if ln.startswith("error: ")]
    assert o.exit_code == 1 and len(errors) == max(len(fields), 1), o.describe()
    for line, name in zip(errors, fields, strict=False):
        assert line.split(": ", 1)[0] == name, (name, line)
    places = {"{cfg}": str(folder / "cfg.yaml"), "{binary}": str(folder / "blob.bin")}
    text = "\n".join(errors)
    for needle in needles:
        for key, path in places.items():
            needle = needle.replace(key, path)
        assert needle in text, (needle, text)


def test_goodput_json_writes_null_with_a_reason(workdir, sim_compiled):
    """Was: ``goodput --json`` printed ``Infinity`` for an unbounded interval end."""
    case = Case("goodput", ["goodput", str(EXAMPLES / "goodput-llama8b.yaml"), "-n", "10",
                            "--seeds", "1", "--json"])
    g = run_case(case, workdir / f"fixed{next(_counter)}")  # strict JSON, sane numbers
    nulls = {k for k, v in g.items() if v is None or isinstance(v, list) and None in v}
    assert nulls and nulls == set(g["null_reasons"])
    assert all("unbounded" in g["null_reasons"][k] for k in nulls if k.endswith("_ms"))


class KnownBugPresent(Finding):
    """The known bug a strict-xfail example pins is still there."""


@pytest.mark.parametrize("pattern, case", [
    pytest.param(pattern, case, id=case.command + "-" + str(i),
                 marks=pytest.mark.xfail(strict=True, raises=KnownBugPresent,
                                         reason=KNOWN_BUGS[pattern]))
    for i, (pattern, case) in enumerate(KNOWN_EXAMPLES)])
def test_known_bug_still_there(pattern, case, workdir, sim_compiled):
    """XPASS (a failure: strict) the day the bug is fixed; then drop its KNOWN_BUGS entry
    and this example."""
    try:
        run_case(case, workdir / f"known{next(_counter)}")
    except Finding as f:
        if known_bug(f.signature) == pattern:
            raise KnownBugPresent(f.signature, str(f)) from None
        raise


def test_every_known_bug_has_an_example():
    assert sorted(KNOWN_BUGS) == sorted(p for p, _ in KNOWN_EXAMPLES)


def test_oracles_accept_the_examples(workdir, sim_compiled):
    """The oracles themselves: the documented commands pass them."""
    ok = [Case("estimate", ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100",
                            "--batch", "8", "--context-len", "100", "--json"],
               context={"tokens": 8}),
          Case("memory", ["memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]),
          Case("simulate", ["simulate", str(EXAMPLES / "llama8b-h100.yaml"), "-n", "12", "--json"],
               context={"requests": 12}),
          Case("simulate", ["simulate", str(EXAMPLES / "pd-sibyl.yaml"), "-n", "12", "--json"],
               context={"requests": 12})]
    for case in ok:
        assert run_case(case, workdir / f"ok{next(_counter)}") is not None
    with pytest.raises(Finding, match="completed \\+ failed != requests"):
        run_case(Case("simulate", ["simulate", str(EXAMPLES / "llama8b-h100.yaml"), "-n", "12",
                                   "--json"], context={"requests": 13}), workdir / "bad")
