"""A new user's first hour: ``make run`` on a fresh clone, then the first simulations.

    .venv/bin/python bench/bench_first_run.py --rounds 3 [--source worktree|clone]
        [--before OLD.json] [--results-dir DIR]

``--before`` adds the medians of an earlier report (e.g. ``--source clone`` of the previous
commit, written with ``--results-dir /tmp``) as a column; ``--render-only`` rewrites the
Markdown from the existing JSON without running anything.

Each round lays the project out anew in a temporary folder (``clone``: ``git clone`` of the
repository, what a new user gets; ``worktree``: the tracked and untracked files of the
working tree as they are now, to measure uncommitted changes), then times, each with an
empty numba cache (``NUMBA_CACHE_DIR`` pointed at a new empty folder):

* ``make`` of the virtualenv (venv, ``pip install -e .[dev]``; pip's own download cache
  is warm on a machine that installed the project before) and ``make run`` (the strategy
  search), with the lines they print;
* how long after ``make run`` started the background compile it began had the compiled
  code ready (its ``serveplan-warm-*.json`` written);
* the first ``serveplan simulate examples/llama8b-h100.yaml`` (colocated) and
  ``examples/pd-pools.yaml`` (prefill/decode), from that fresh install, each on its own
  empty cache (they run as Python beside their background compile; the next measurement
  waits for that compile to finish so the two do not share the CPU);
* the colocated command again once its cache is warm;
* the colocated command on an empty cache with ``SERVEPLAN_JIT=compile``: the compile a
  first run no longer waits for.

Writes ``bench/results/first_run.{json,md}``: medians over rounds (and every round). The
machine may be shared: the load average is recorded with each round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from serveplan.kernels.jit_mode import MARKER_GLOB  # one marker per source tree

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
ANNOUNCED = ("compiling the simulator, once", "not compiled on this machine yet")
COLOCATED = "examples/llama8b-h100.yaml"
PD = "examples/pd-pools.yaml"


def _lay_out(source: str, dest: Path) -> None:
    if source == "clone":
        subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _wait_warm(cache: Path, since: float) -> float:
    """Seconds from ``since`` until the background compile into ``cache`` has finished."""
    deadline = time.perf_counter() + 900
    while not any(cache.glob(MARKER_GLOB)):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"no compiled code in {cache} after 900 s")
        time.sleep(0.25)
    return round(time.perf_counter() - since, 2)


def _timed(cmd, cwd: Path, cache: Path, mode: str = "auto") -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "SERVEPLAN_JIT": mode}
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    notice = [ln for ln in proc.stderr.splitlines() if any(a in ln for a in ANNOUNCED)]
    return {"seconds": round(seconds, 2), "lines": len(lines),
            "announced": notice[0] if notice else None}


def _round(source: str, work: Path) -> dict:
    tree = work / "tree"
    tree.mkdir()
    _lay_out(source, tree)
    caches = [work / f"numba{i}" for i in range(4)]
    for c in caches:
        c.mkdir()
    out = {"load_avg_1min": os.getloadavg()[0]}
    out["install"] = _timed(["make", ".venv/.installed"], tree, caches[0])
    started = time.perf_counter()
    out["make_run"] = _timed(["make", "run"], tree, caches[0])
    out["compiled_ready"] = {"seconds": _wait_warm(caches[0], started)}
    serveplan = str(tree / ".venv" / "bin" / "serveplan")
    started = time.perf_counter()
    out["simulate_cold"] = _timed([serveplan, "simulate", COLOCATED], tree, caches[1])
    _wait_warm(caches[1], started)
    out["simulate_warm"] = _timed([serveplan, "simulate", COLOCATED], tree, caches[1])
    started = time.perf_counter()
    out["pd_cold"] = _timed([serveplan, "simulate", PD], tree, caches[2])
    _wait_warm(caches[2], started)
    out["simulate_compile"] = _timed([serveplan, "simulate", COLOCATED], tree, caches[3],
                                     mode="compile")
    return out


def _medians(rounds: list[dict]) -> dict:
    keys = ["install", "make_run", "simulate_cold", "simulate_warm", "pd_cold",
            "compiled_ready", "simulate_compile"]
    med = {k: float(np.median([r[k]["seconds"] for r in rounds if k in r])) for k in keys
           if any(k in r for r in rounds)}
    med["fresh_clone_make_run_total"] = float(np.median(
        [r["install"]["seconds"] + r["make_run"]["seconds"] for r in rounds]))
    med["install_lines"] = float(np.median([r["install"]["lines"] for r in rounds]))
    return med


def _cell(value: float | None) -> str:
    return "--" if value is None else f"{value:.1f}"


def _markdown(report: dict, before: dict | None) -> str:
    m = report["median_seconds"]
    first = report["rounds"][0]
    b = before["median_seconds"] if before else None
    rows = [
        ("fresh clone: `make run` incl. install", m["fresh_clone_make_run_total"]),
        ("  of which the install (venv + `pip install -e .[dev]`)", m["install"]),
        ("  of which `serveplan search` (cold numba cache)", m["make_run"]),
        ("compiled code ready, from the start of `make run`", m.get("compiled_ready")),
        (f"first `serveplan simulate {COLOCATED}` (cold cache)", m["simulate_cold"]),
        ("the same, once compiled (warm cache)", m["simulate_warm"]),
        (f"first `serveplan simulate {PD}` (cold cache)", m["pd_cold"]),
        ("the colocated one on a cold cache, `SERVEPLAN_JIT=compile` (waits for the compile)",
         m.get("simulate_compile")),
    ]
    keys = ["fresh_clone_make_run_total", "install", "make_run", "compiled_ready",
            "simulate_cold", "simulate_warm", "pd_cold", "simulate_compile"]
    loads = ", ".join(str(round(r["load_avg_1min"], 1)) for r in report["rounds"])
    lines = [
        "# First run: install, compile, first simulations",
        "",
        f"`{report['command']}` ({report['source']}: {report['commit']}). Median of "
        f"{len(report['rounds'])} rounds on a shared 2-core machine (1-minute load averages "
        f"{loads}); each cold figure starts from an empty `NUMBA_CACHE_DIR`.",
        "",
    ]
    if b is None:
        lines += ["| step | median (s) |", "|---|---|",
                  *[f"| {name} | {_cell(value)} |" for name, value in rows]]
    else:
        lines += [f"Before: `{before['command']}` ({before['source']}: {before['commit']}).",
                  "", "| step | before (s) | after (s) |", "|---|---|---|",
                  *[f"| {name} | {_cell(b.get(k))} | {_cell(value)} |"
                    for (name, value), k in zip(rows, keys, strict=True)]]
    lines += [
        "",
        f"Lines printed by the install: {m['install_lines']:.0f}. Notice on the first cold "
        f"run: {first['simulate_cold']['announced']!r}; on the warm run: "
        f"{first['simulate_warm']['announced']!r}; with `SERVEPLAN_JIT=compile`: "
        f"{first.get('simulate_compile', {}).get('announced')!r}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--source", choices=("worktree", "clone"), default="worktree")
    ap.add_argument("--out", default="first_run", help="result file stem")
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    ap.add_argument("--before", type=Path, help="an earlier report (JSON) to compare with")
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    before = json.loads(args.before.read_text()) if args.before else None
    out = args.results_dir / args.out
    if args.render_only:
        report = json.loads(out.with_suffix(".json").read_text())
        out.with_suffix(".md").write_text(_markdown(report, before))
        return
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="serveplan-first-run-") as work:
            rounds.append(_round(args.source, Path(work)))
        print(f"round {i + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    report = {"command": "python bench/bench_first_run.py " + " ".join(sys.argv[1:]),
              "source": args.source, "commit": commit, "rounds": rounds,
              "median_seconds": _medians(rounds)}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(_markdown(report, before))
    print(_markdown(report, before))


if __name__ == "__main__":
    main()
