"""Cost-oracle speed: vectorized decode evaluations/s, scalar mixed-step latency, compile
and import time. Writes bench/results/oracle.{json,md}.

    .venv/bin/python bench/bench_oracle.py [--repeats 7]

Import and first-call compile time are measured in fresh subprocesses with an empty numba
cache directory (cold) and with the package's cache (warm).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _subprocess_seconds(code: str, env_extra: dict) -> float:
    # compiled code: a cold cache compiles here instead of running as Python
    env = {**os.environ, "SERVEPLAN_JIT": "compile", **env_extra}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


IMPORT_CODE = """
import time; t = time.perf_counter(); import serveplan; print(time.perf_counter() - t)
"""
FIRST_CALL_CODE = """
import time
from serveplan import CostOracle
o = CostOracle("llama-3.1-8b", "h100")
t = time.perf_counter()
o.decode_time(64, 2048); o.step_time([512, 1], [0, 100])
print(time.perf_counter() - t)
"""


def _speed(oracle, batch, ctx, q, c, repeats: int, n_calls: int = 20000):
    """(decode evaluations/s, step_time µs via the API, µs calling the kernel directly)."""
    from serveplan.kernels.roofline import step_time

    oracle.decode_time(batch[:10], ctx[:10])
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        oracle.decode_time(batch, ctx)
        times.append(time.perf_counter() - t)
    oracle.step_time(q, c)
    api, kern = [], []
    ops, mods, prm, sizes = oracle.kernel_args
    agg, comp, comm = oracle.scratch()
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n_calls):
            oracle.step_time(q, c)
        api.append((time.perf_counter() - t) / n_calls)
        t = time.perf_counter()
        for _ in range(n_calls):
            step_time(q, c, 64, ops, mods, prm, sizes, agg, comp, comm)
        kern.append((time.perf_counter() - t) / n_calls)
    return (len(batch) / float(np.median(times)), float(np.median(api)) * 1e6,
            float(np.median(kern)) * 1e6)


def _markdown(results: dict, repeats: int) -> list[str]:
    """The report's lines."""
    lines = [
        "# Cost oracle speed",
        "",
        f"Command: `{results['command']}` (median of {repeats} runs; "
        f"{results['machine']}, Python {results['python']}; profile "
        f"`{results['profile']}`).",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| decode evaluations/s, 10^6 (batch, context) pairs, Llama-3.1-8B/H100, one core, "
        f"correctors on (default) | {results['decode_evals_per_s'] / 1e6:.2f} M/s | >= 5 M/s |",
        f"| same, correctors off | "
        f"{results['decode_evals_per_s_correctors_off'] / 1e6:.2f} M/s | >= 5 M/s |",
        f"| scalar `step_time`, 64-request mixed batch, Python API, correctors on "
        f"| {results['step_time_64_mixed_us_python_api']:.2f} µs | <= 10 µs |",
        f"| same, correctors off "
        f"| {results['step_time_64_mixed_us_python_api_correctors_off']:.2f} µs | <= 10 µs |",
        f"| same, kernel called from Python (as a scheduler loop would), correctors on / off "
        f"| {results['step_time_64_mixed_us_kernel_from_python']:.2f} / "
        f"{results['step_time_64_mixed_us_kernel_from_python_correctors_off']:.2f} µs | |",
        f"| `import serveplan` | {results['import_s'] * 1e3:.0f} ms | |",
        f"| first call, cold numba cache (compile) | {results['first_call_compile_cold_s']:.2f} s "
        "| |",
        f"| first call, warm cache | {results['first_call_cached_s']:.2f} s | |",
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    args = ap.parse_args()

    from serveplan import CostOracle

    results: dict = {"command": "python bench/bench_oracle.py", "repeats": args.repeats,
                     "machine": f"{platform.machine()} {os.cpu_count()} cpu(s)",
                     "python": platform.python_version()}

    with tempfile.TemporaryDirectory() as cold:
        results["import_s"] = float(np.median(
            [_subprocess_seconds(IMPORT_CODE, {}) for _ in range(3)]))
        results["first_call_compile_cold_s"] = _subprocess_seconds(
            FIRST_CALL_CODE, {"NUMBA_CACHE_DIR": cold})
        results["first_call_cached_s"] = float(np.median(
            [_subprocess_seconds(FIRST_CALL_CODE, {"NUMBA_CACHE_DIR": cold})
             for _ in range(3)]))

    rng = np.random.default_rng(0)
    batch = rng.integers(1, 257, args.pairs)
    ctx = rng.integers(1, 8192, args.pairs)
    q = np.ones(64, dtype=np.int64)
    q[:2] = (512, 300)
    c = rng.integers(0, 4000, 64).astype(np.int64)
    c[0] = 0
    # the default oracle applies the shipped profile's learned correctors; the "_off"
    # figures price the same profile's fitted roofline without them
    for suffix, correctors in (("", True), ("_correctors_off", False)):
        oracle = CostOracle("llama-3.1-8b", "h100", tp=1, correctors=correctors)
        decode, api, kern = _speed(oracle, batch, ctx, q, c, args.repeats)
        results["decode_evals_per_s" + suffix] = decode
        results["step_time_64_mixed_us_python_api" + suffix] = api
        results["step_time_64_mixed_us_kernel_from_python" + suffix] = kern
    results["profile"] = oracle.profile.name

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "oracle.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = _markdown(results, args.repeats)
    (RESULTS / "oracle.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
