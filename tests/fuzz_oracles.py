"""The oracles of the CLI fuzz test (:mod:`fuzz_cases` draws the cases): how a case is run
(in-process, under a time limit and an address-space cap) and judged.

Every case must end in one of three ways:

* exit 0 with sane output (:func:`check_outcome` reads ``--json`` output: requests are
  conserved, rates stay under the capacity bound, attainment counts failures and lies in
  [0, 1], headline numbers are finite, percentiles are ordered);
* exit 1 with a few ``error: ...`` lines on stderr that read as the project's own messages
  (not a leaked NumPy / Python message such as ``Maximum allowed dimension exceeded``);
  ``memory --json`` of a plan that does not fit prints the plan instead, as documented;
* exit 2 with click's usage box (a value the option's type or range refuses).

Anything else -- an exception escaping the command, a traceback in the output, a case
slower than :data:`CASE_TIMEOUT_S` -- is a :class:`Finding` with a stable ``signature``
(exception type and the project function it came from, or the broken oracle), so that known
bugs (:data:`KNOWN_BUGS`) are told apart from new ones.

Each case runs under an address-space cap (:func:`guarded`), so a huge count in a config
makes a ``MemoryError`` (a finding) instead of swapping a machine shared with others.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import resource
import signal
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from serveplan.cli import app

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TRACES = REPO / "tests" / "data" / "traces"
BINARY = bytes(range(256)) * 4  # not UTF-8 from byte 128, NUL at byte 0

CASE_TIMEOUT_S = 120.0
"""A case slower than this is a finding (tiny request counts: cases take well under 2 s)."""
MEMORY_HEADROOM = 2 << 30
"""Address space a case may add to the process (bytes) before allocations fail."""
MAX_ERROR_LINES = 12
"""``error:`` lines a failed case may print (one per problem; search lists a few classes)."""

runner = CliRunner()


# ============================================================================ findings
class Finding(AssertionError):
    """A case that broke the contract; ``signature`` identifies the bug, not the input."""

    def __init__(self, signature: str, detail: str = ""):
        super().__init__(f"{signature}\n{detail}".rstrip())
        self.signature = signature


class CaseTimeout(Exception):
    """Raised by the interval timer inside a case that runs too long."""


KNOWN_BUGS: dict[str, str] = {
    # signature (a regular expression) -> the bug: minimal input, the function at fault.
    # tests/test_fuzz.py pins each with a strict xfail example, so a fix shows as XPASS;
    # fixed ones move to its FIXED regression cases.
}
"""Bugs the fuzzer has found and reported; property tests let these signatures pass."""

_KNOWN_RE = [re.compile(p) for p in KNOWN_BUGS]


def known_bug(signature: str) -> str | None:
    """The :data:`KNOWN_BUGS` pattern that ``signature`` matches, or None."""
    for pattern, rx in zip(KNOWN_BUGS, _KNOWN_RE, strict=True):
        if rx.fullmatch(signature):
            return pattern
    return None


def is_known(finding: Finding) -> bool:
    return known_bug(finding.signature) is not None


# ============================================================================ running
@dataclass
class Outcome:
    """What one CLI invocation did."""

    args: list[str]
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None
    exc_info: Any = None
    seconds: float = 0.0
    warnings: list = field(default_factory=list)
    """Warnings a user would see on stderr (Python's default filters), from project code."""

    def describe(self) -> str:
        tb = ""
        if self.exc_info is not None and self.exception is not None \
                and not isinstance(self.exception, SystemExit):
            tb = "".join(traceback.format_exception(*self.exc_info))[-3000:]
        return (f"args: {self.args!r}\nexit {self.exit_code} after {self.seconds:.2f} s\n"
                f"stdout: {self.stdout[-1500:]}\nstderr: {self.stderr[-1500:]}\n{tb}")


def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class guarded:
    """Context manager: cap the address space (current size + :data:`MEMORY_HEADROOM`) and
    raise :class:`CaseTimeout` after ``timeout_s`` (checked whenever Python code runs)."""

    def __init__(self, timeout_s: float = CASE_TIMEOUT_S):
        self.timeout_s = timeout_s

    def __enter__(self):
        self.limits = resource.getrlimit(resource.RLIMIT_AS)
        size = _vm_size()
        if size:
            cap = size + MEMORY_HEADROOM
            hard = self.limits[1]
            if hard == resource.RLIM_INFINITY or cap < hard:
                resource.setrlimit(resource.RLIMIT_AS, (cap, hard))

        def _alarm(signum, frame):
            raise CaseTimeout(f"case took more than {self.timeout_s:g} s")

        self.old_handler = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old_handler)
        resource.setrlimit(resource.RLIMIT_AS, self.limits)
        return False


def invoke(args: list[str], timeout_s: float = CASE_TIMEOUT_S) -> Outcome:
    """Run ``serveplan ARGS`` in-process under :class:`guarded`."""
    import time

    args = [str(a) for a in args]
    t0 = time.perf_counter()
    with guarded(timeout_s), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        r = runner.invoke(app, args)
    shown = [w for w in caught if not issubclass(w.category, _HIDDEN_WARNINGS)
             and _in_project(w.filename)]
    return Outcome(args, r.exit_code, r.stdout, r.stderr, r.exception, r.exc_info,
                   time.perf_counter() - t0, shown)


_HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                    ResourceWarning)
"""Categories Python's default filters do not print (outside ``__main__``)."""


def _in_project(filename: str) -> str | None:
    """``filename`` relative to the repository if it is project code, else None."""
    try:
        rel = Path(filename).resolve().relative_to(REPO)
    except ValueError:
        return None
    return None if rel.parts and rel.parts[0] in ("tests", ".venv") else str(rel)


# ============================================================================ oracles
_LEAKS = [  # messages of Python / NumPy / YAML internals, not of serveplan
    r"Maximum allowed dimension exceeded", r"cannot convert float NaN to integer",
    r"invalid literal for int\(\)", r"could not convert string to float",
    r"index out of range", r"math domain error", r"object has no attribute",
    r"unsupported operand", r"not subscriptable", r"object is not iterable",
    r"positional argument", r"unhashable type", r"must be real number",
    r"array is too big", r"negative dimensions are not allowed", r"could not be broadcast",
    r"setting an array element with a sequence", r"zero-size array",
    r"is out of bounds for", r"values to unpack", r"division or modulo by zero",
    r"Python int too large", r"cannot be safely cast", r"Unable to allocate",
    r"out of bounds nanosecond", r"NoneType", r"got an unexpected keyword",
    r"dictionary update sequence", r"object cannot be interpreted as an integer",
    r"^'[^']*'$", r"^\w+$",  # a bare KeyError key
]
_LEAK_RE = re.compile("|".join(f"(?:{p})" for p in _LEAKS))


def _project_frame(exc_info) -> str:
    """``path:function`` of the innermost traceback frame inside the project."""
    if not exc_info or exc_info[2] is None:
        return "?"
    where = "?"
    for fr in traceback.extract_tb(exc_info[2]):
        rel = _in_project(fr.filename)
        if rel is not None:
            where = f"{rel}:{fr.name}"
    return where


def _strict_json(text: str, what: str):
    def refuse(const):
        raise Finding(f"{what} --json prints {const} (not JSON; simulate writes null)")
    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise Finding(f"{what} --json output is not JSON", f"{exc}: {text[:500]}") from None


def check_outcome(o: Outcome, command: str, *, json_out: bool, context: dict | None = None):
    """Raise :class:`Finding` unless ``o`` is a sane exit 0, a clean exit 1 or a usage
    error. Returns the parsed ``--json`` output of an exit 0 (else None)."""
    context = context or {}
    exc = o.exception
    if isinstance(exc, CaseTimeout):
        raise Finding(f"{command}: slower than {CASE_TIMEOUT_S:g} s", o.describe())
    if exc is not None and not isinstance(exc, SystemExit):
        raise Finding(f"{command}: {type(exc).__name__} escapes from "
                      f"{_project_frame(o.exc_info)}", o.describe())
    if "Traceback" in o.stdout or "Traceback" in o.stderr:
        raise Finding(f"{command}: traceback printed", o.describe())
    for w in o.warnings:  # printed on stderr with the source line: not an error: line
        raise Finding(f"{command}: {w.category.__name__} printed from "
                      f"{_in_project(w.filename)}", f"{w.message}\n{o.describe()}")
    if o.exit_code == 2:
        if "Usage:" not in o.stderr:
            raise Finding(f"{command}: exit 2 without click's usage message", o.describe())
        return None
    if o.exit_code not in (0, 1):
        raise Finding(f"{command}: exit status {o.exit_code}", o.describe())
    lines = [ln for ln in o.stderr.split("\n") if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    other = [ln for ln in lines if not ln.startswith(("error: ", "warning: ", "note: "))]
    if other:
        raise Finding(f"{command}: stderr line that is neither error:, warning: nor note:",
                      o.describe())
    if o.exit_code == 1:
        _check_exit1(o, command, json_out, context, errors)
        return None
    # exit 0
    if errors:
        raise Finding(f"{command}: exit 0 with error: lines", o.describe())
    if not json_out:
        if re.search(r"(?<![\w.])(nan|NaN)(?![\w])", o.stdout):
            raise Finding(f"{command}: NaN in the printed table", o.describe())
        return None
    data = _strict_json(o.stdout, command)
    SANITY[command](data, context, o)
    return data


def _check_exit1(o: Outcome, command: str, json_out: bool, context: dict,
                 errors: list[str]) -> None:
    """An exit 1: a few project error: lines (or, for memory --json, the unfit plan)."""
    if command == "memory" and json_out and not errors:
        plan = _strict_json(o.stdout, "memory")
        if plan.get("fits") is not False or not plan.get("reason"):
            raise Finding("memory --json: exit 1 but the plan fits or gives no reason",
                          o.describe())
        return
    if not errors:
        raise Finding(f"{command}: exit 1 without an error: line", o.describe())
    if len(errors) > MAX_ERROR_LINES:
        raise Finding(f"{command}: more than {MAX_ERROR_LINES} error: lines", o.describe())
    for ln in errors:
        msg = ln.removeprefix("error: ").strip()
        if not msg:
            raise Finding(f"{command}: empty error: line", o.describe())
        binary = context.get("binary")
        if "not a text file" in msg and binary and binary in o.args \
                and binary not in o.stderr:
            raise Finding(f"{command}: a binary input is not named", o.describe())
        m = _LEAK_RE.search(msg)
        if m and not msg.startswith(" "):  # indented lines continue a message
            raise Finding(f"{command}: internal message leaks as an error: "
                          f"{_leak_label(msg)}", o.describe())


def _leak_label(msg: str) -> str:
    for p in _LEAKS:
        if re.search(p, msg):
            return "bare key" if p.startswith(("^'", r"^\w")) else p.replace("\\", "")
    return "?"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _need(cond: bool, signature: str, o: Outcome) -> None:
    if not cond:
        raise Finding(signature, o.describe())


def _close(a: float, b: float, rel: float = 1e-6, abs_: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


HEADLINE = ("completed", "failed", "duration_s", "total_input_tokens", "total_output_tokens",
            "request_throughput", "output_throughput", "total_token_throughput")


def sane_simulate(s: dict, ctx: dict, o: Outcome) -> None:
    """Conservation, finite headline numbers, rates = counts / duration, ordered
    percentiles, attainment in [0, 1] and at most the completed fraction."""
    w = "simulate"
    done, failed = s.get("completed"), s.get("failed")
    for k in HEADLINE:
        if k.endswith("throughput") and done == 0 and s.get(k) is None:
            continue  # nothing completed: no duration, rates undefined (sim/summary.py)
        _need(_finite(s.get(k)), f"{w}: headline {k} missing or not finite", o)
    _need(isinstance(done, int) and isinstance(failed, int) and done >= 0 and failed >= 0,
          f"{w}: completed/failed not non-negative integers", o)
    total = done + failed
    expected = ctx.get("requests")
    if expected is not None:
        _need(total == expected, f"{w}: completed + failed != requests", o)
    _need(total >= 1, f"{w}: no request accounted for", o)
    if failed:
        _need(bool(s.get("failed_reason")), f"{w}: failed requests without a reason", o)
    dur = s["duration_s"]
    _need(dur >= 0, f"{w}: negative duration", o)
    if dur > 0 and done:
        _need(_close(s["request_throughput"], done / dur),
              f"{w}: request_throughput != completed / duration_s", o)
        _need(_close(s["output_throughput"], s["total_output_tokens"] / dur),
              f"{w}: output_throughput != total_output_tokens / duration_s", o)
        _need(_close(s["total_token_throughput"],
                     (s["total_input_tokens"] + s["total_output_tokens"]) / dur),
              f"{w}: total_token_throughput != tokens / duration_s", o)
    if done:
        _sane_latencies(s, done, o)
    for role in ("prefill", "decode"):
        lo, hi = (s.get(f"{role}_requests_per_instance_{m}") for m in ("min", "max"))
        if lo is not None and hi is not None:
            _need(0 <= lo <= hi, f"{w}: {role} requests per instance min > max", o)
    for k in ("num_preemptions", "total_steps", "mean_batch_size", "kv_bytes_transferred"):
        v = s.get(k)
        _need(v is None or (_finite(v) and v >= 0), f"{w}: {k} not a finite number >= 0", o)
    for k in ("mean_kv_usage", "max_kv_usage", "prefix_hit_rate", "optimal_assignment_ratio",
              "optimal_assignment_ratio_requests", "prefill_mean_kv_usage",
              "decode_mean_kv_usage"):
        v = s.get(k)
        if v is not None:
            _need(_finite(v) and -1e-9 <= v <= 1 + 1e-9, f"{w}: {k} outside [0, 1]", o)
    if "slo_attainment" in s:
        a = s["slo_attainment"]
        _need(_finite(a) and 0 <= a <= 1, f"{w}: slo_attainment outside [0, 1]", o)
        if total:
            _need(a <= done / total + 1e-9, f"{w}: slo_attainment does not count failures", o)
        if not done:
            _need(s.get("slo_met") is False, f"{w}: slo_met with no completed request", o)
    if s.get("slo_met") is True and not done:
        raise Finding(f"{w}: slo_met with no completed request", o.describe())


def _sane_latencies(s: dict, done: int, o: Outcome) -> None:
    """With completed requests: TTFT > 0, ordered finite percentiles, E2E >= TTFT."""
    w = "simulate"
    ttft = s.get("mean_ttft_ms")
    _need(_finite(ttft) and ttft > 0, f"{w}: mean TTFT not > 0 with completed requests", o)
    _need(s["total_output_tokens"] >= done, f"{w}: fewer output tokens than completed", o)
    for name in ("ttft", "tpot", "e2el", "queue"):
        vals = [s.get(f"{p}_{name}_ms") for p in ("median", "p90", "p99", "p99_9")]
        vals = [v for v in vals if v is not None]
        _need(all(_finite(v) and v >= 0 for v in vals), f"{w}: {name} percentile not a "
              "finite number >= 0", o)
        _need(all(a <= b * (1 + 1e-9) + 1e-9 for a, b in itertools.pairwise(vals)),
              f"{w}: {name} percentiles not ordered", o)
        if name in ("ttft", "e2el"):  # a first token takes at least one step
            _need(all(v > 0 for v in vals), f"{w}: {name} percentile 0 with completed "
                  "requests", o)
    e2e, ttft = s.get("mean_e2el_ms"), s.get("mean_ttft_ms")
    if _finite(e2e) and _finite(ttft):
        _need(e2e >= ttft * (1 - 1e-9), f"{w}: mean E2E < mean TTFT", o)


def sane_goodput(g: dict, ctx: dict, o: Outcome) -> None:
    """Finite non-negative rates, goodput within its interval and under the capacity
    bound, per GPU = goodput / GPUs."""
    w = "goodput"
    for k in ("goodput", "goodput_low", "goodput_per_gpu", "capacity_bound",
              "analytic_goodput", "verifiable_up_to"):
        _need(_finite(g.get(k)) and g[k] >= 0, f"{w}: {k} not a finite number >= 0", o)
    cap = g["capacity_bound"]
    _need(g["goodput"] <= cap * (1 + 1e-9), f"{w}: goodput above the capacity bound", o)
    _need(g["goodput_low"] <= g["goodput"] * (1 + 1e-9), f"{w}: goodput_low > goodput", o)
    hi = g.get("goodput_high")
    _need(hi is None or (isinstance(hi, (int, float)) and hi >= g["goodput"] * (1 - 1e-9)),
          f"{w}: goodput_high < goodput", o)
    _need(hi is None or hi <= cap * (1 + 1e-9), f"{w}: goodput_high above the capacity "
          "bound", o)
    _need(g["verifiable_up_to"] <= cap * (1 + 1e-9), f"{w}: verifiable_up_to above the "
          "capacity bound", o)
    _need(isinstance(g.get("gpus"), int) and g["gpus"] >= 1, f"{w}: gpus not >= 1", o)
    _need(_close(g["goodput_per_gpu"], g["goodput"] / g["gpus"]),
          f"{w}: goodput_per_gpu != goodput / gpus", o)
    _need(isinstance(g.get("evaluations"), int) and g["evaluations"] >= 1,
          f"{w}: no rate evaluated", o)
    _need(isinstance(g.get("censored"), bool), f"{w}: censored not a bool", o)
    for k, v in g.items():
        if k.endswith("_ms") and isinstance(v, list):
            est, lo, hi_ = v
            _need(all(x is None or (isinstance(x, (int, float)) and x >= 0) for x in v),
                  f"{w}: negative {k}", o)
            if None not in v:
                _need(lo <= est * (1 + 1e-9) <= hi_ * (1 + 1e-9) + 1e-9,
                      f"{w}: {k} estimate outside its interval", o)


def sane_search(rows: list, ctx: dict, o: Outcome) -> None:
    """Ranks 1..k by goodput per GPU, each within the GPU budget and its interval."""
    w = "search"
    _need(isinstance(rows, list) and rows, f"{w}: exit 0 with no decided strategy", o)
    per_gpu = []
    for i, r in enumerate(rows):
        for k in ("goodput", "goodput_low", "goodput_per_gpu", "analytic_goodput"):
            _need(_finite(r.get(k)) and r[k] >= 0, f"{w}: {k} not a finite number >= 0", o)
        _need(r.get("rank") == i + 1, f"{w}: ranks not 1..k in order", o)
        _need(1 <= r["gpus"] <= ctx.get("gpus", r["gpus"]), f"{w}: strategy over the GPU "
              "budget", o)
        _need(r["goodput_low"] <= r["goodput"] * (1 + 1e-9), f"{w}: goodput_low > goodput", o)
        hi = r.get("goodput_high")
        _need(hi is None or hi >= r["goodput"] * (1 - 1e-9), f"{w}: goodput_high < goodput", o)
        _need(_close(r["goodput_per_gpu"], r["goodput"] / r["gpus"]),
              f"{w}: goodput_per_gpu != goodput / gpus", o)
        if ctx.get("archs"):
            _need(r["architecture"] in ctx["archs"], f"{w}: architecture not asked for", o)
        per_gpu.append(r["goodput_per_gpu"])
    _need(all(a >= b * (1 - 1e-9) for a, b in itertools.pairwise(per_gpu)),
          f"{w}: rows not ranked by goodput per GPU", o)


def sane_estimate(e: dict, ctx: dict, o: Outcome) -> None:
    w = "estimate"
    t = e.get("time_s")
    _need(_finite(t) and t > 0, f"{w}: step time not a finite number > 0", o)
    _need(_finite(e.get("tokens_per_s")) and _close(e["tokens_per_s"], e["tokens"] / t),
          f"{w}: tokens_per_s != tokens / time_s", o)
    if "tokens" in ctx:
        _need(e["tokens"] == ctx["tokens"], f"{w}: tokens != batch x new tokens", o)
    for m in e.get("modules", []):
        for k in ("dispatch_s", "compute_s", "comm_s"):
            _need(_finite(m.get(k)) and m[k] >= 0, f"{w}: module {k} not finite >= 0", o)
    _need(isinstance(e.get("fits_in_memory"), bool), f"{w}: fits_in_memory not a bool", o)


def sane_memory(p: dict, ctx: dict, o: Outcome) -> None:
    w = "memory"
    _need(p.get("fits") is True, f"{w} --json: exit 0 for a plan that does not fit", o)
    for k in ("total_bytes", "budget_bytes", "weights_bytes", "activation_bytes",
              "non_torch_bytes", "available_kv_bytes", "kv_bytes_per_token"):
        _need(_finite(p.get(k)) and p[k] >= 0, f"{w}: {k} not a finite number >= 0", o)
    _need(p["budget_bytes"] <= p["total_bytes"] * (1 + 1e-9), f"{w}: budget above the "
          "device memory", o)
    blocks, tokens, bs = p.get("num_gpu_blocks"), p.get("kv_tokens"), p.get("block_size")
    _need(all(isinstance(x, int) and x >= 1 for x in (blocks, tokens, bs)),
          f"{w}: blocks, tokens, block size not positive integers", o)
    _need(tokens <= blocks * bs, f"{w}: kv_tokens > num_gpu_blocks x block_size", o)
    _need(tokens >= p["max_model_len"], f"{w}: fits although one request exceeds the KV", o)


def sane_compare(c: dict | list, ctx: dict, o: Outcome) -> None:
    """Every metric finite or null on each side, and the replay runs the requests the run
    sent: predicted completed + failed = measured completed + failed (``--all-runs``: a
    list of such comparisons, one per run)."""
    w = "compare"
    runs = c if isinstance(c, list) else [c]
    _need(bool(runs) and all(isinstance(r, dict) for r in runs), f"{w}: not comparisons", o)
    for run in runs:
        metrics = run.get("metrics")
        _need(isinstance(metrics, dict) and bool(metrics), f"{w}: exit 0 with no metrics", o)
        for m in metrics.values():
            for side in ("measured", "predicted", "error"):
                _need(m.get(side) is None or _finite(m[side]), f"{w}: {side} not finite or "
                      "null", o)
        _need(all(isinstance(n, str) for n in run.get("notes", [])), f"{w}: a note not text", o)
        if all(k in metrics for k in ("completed", "failed")):
            sent = [sum(metrics[k].get(side) or 0 for k in ("completed", "failed"))
                    for side in ("measured", "predicted")]
            _need(sent[0] == sent[1], f"{w}: replayed requests != the run's", o)


def sane_calibrate(c: dict, ctx: dict, o: Outcome) -> None:
    """Every term finite, >= 0 and within its bound (the step overhead may be null: the GPU
    profile's); every error finite or null; the profile written and loadable."""
    from serveplan.estimator.runtime import load_runtime_profile
    from serveplan.estimator.runtime_fit import TERM_SCALES

    w = "calibrate --runs"
    terms = c.get("terms")
    _need(isinstance(terms, dict) and bool(terms), f"{w}: exit 0 with no terms", o)
    for name, value in terms.items():
        _need(value is None if not _finite(value) else 0 <= value <= TERM_SCALES.get(
            name, (0, math.inf))[1], f"{w}: term {name} not finite, negative or unbounded", o)
    errors = [*c.get("median_abs_err_before", []), *c.get("median_abs_err_after", []),
              *(v for row in c.get("leave_one_run_out", []) for k, v in row.items()
                if k != "run")]
    _need(all(e is None or _finite(e) for e in errors), f"{w}: an error not finite or null", o)
    load_runtime_profile("vllm", c["out"])  # raises if the written profile is unreadable


def sane_batch(c: dict, ctx: dict, o: Outcome) -> None:
    """Both step terms finite, >= 0 and within their bounds; every run's errors finite (the
    held-out one may be null); the profile written and loadable."""
    from serveplan.estimator.runtime import load_runtime_profile
    from serveplan.estimator.runtime_fit import TERM_SCALES

    w = "calibrate --batch-runs"
    terms = c.get("terms") or {}
    _need(set(terms) == {"step_overhead_s", "tp_sync_per_layer_s"}, f"{w}: terms missing", o)
    _need(all(_finite(v) and 0 <= v <= TERM_SCALES[k][1] for k, v in terms.items()),
          f"{w}: a term not finite, negative or beyond its bound", o)
    runs = c.get("runs") or []
    _need(bool(runs), f"{w}: exit 0 with no runs", o)
    _need(all(_finite(r[k]) for r in runs for k in ("measured_s", "err_before", "err_fitted"))
          and all(r["err_held_out"] is None or _finite(r["err_held_out"]) for r in runs),
          f"{w}: an error not finite", o)
    load_runtime_profile(c["engine"], c["out"])  # raises if the written profile is unreadable


SANITY = {"simulate": sane_simulate, "goodput": sane_goodput, "search": sane_search,
          "estimate": sane_estimate, "memory": sane_memory, "compare": sane_compare,
          "calibrate": sane_calibrate, "calibrate-batch": sane_batch}


# ============================================================================ the case record


@dataclass
class Case:
    """One generated CLI case: arguments, files to write first, what to check."""

    command: str
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    json_out: bool = True
    context: dict = field(default_factory=dict)


def materialize(case: Case, folder: Path) -> list[str]:
    """The case's arguments with its files written under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "blob.bin").write_bytes(BINARY)
    (folder / "subdir").mkdir(exist_ok=True)
    paths = {"{binary}": str(folder / "blob.bin"), "{missing}": str(folder / "missing.yaml"),
             "{dir}": str(folder / "subdir"), "{cfg}": str(folder / "cfg.yaml")}
    for key, content in case.files.items():
        Path(paths[key]).write_bytes(content)
    return [paths.get(a, a) for a in case.args]


def expected_requests(config: Path, flags: dict[str, str], sets: list[str]) -> int | None:
    """The requests a simulate run accounts for (num_requests - warm-up), resolved the way
    the command resolves the file, flags and ``--set`` items; None if not decidable."""
    from serveplan.commands.common import parse_set, resolve_overrides
    from serveplan.config import SimulationConfig, read_yaml

    names = {"--rate": ("rate", float), "-n": ("requests", int), "--isl": ("isl", int),
             "--osl": ("osl", int), "--seed": ("seed", int), "--concurrency":
             ("concurrency", int), "--time-scale": ("time_scale", float), "--num-instances":
             ("num_instances", int), "--num-gpu-blocks": ("num_gpu_blocks", int),
             "--max-num-seqs": ("max_num_seqs", int), "--max-num-batched-tokens":
             ("max_num_batched_tokens", int), "--scheduler": ("scheduler", str),
             "--router": ("router", str), "--trace": ("trace", Path)}
    try:
        kwargs = {names[k][0]: names[k][1](v) for k, v in flags.items()}
        data = resolve_overrides(read_yaml(config), sets=parse_set(sets), **kwargs)
        cfg = SimulationConfig.model_validate(data)
    except Exception:  # noqa: BLE001 - undecidable here; the run itself is under test
        return None
    w = cfg.workload
    n = getattr(w, "num_requests", None)
    if w.kind == "inference-perf" or n is None:
        return None
    return n - w.warmup_request_count
