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
* the first ``serveplan simulate examples/llama8b-h100.yaml`` (colocated) and
  ``examples/pd-pools.yaml`` (prefill/decode), from that fresh install;
* the same colocated command again on the now warm cache.

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

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
ANNOUNCED = "compiling the simulator, once"
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


def _timed(cmd, cwd: Path, cache: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    notice = [ln for ln in proc.stderr.splitlines() if ANNOUNCED in ln]
    return {"seconds": round(seconds, 2), "lines": len(lines),
            "announced": notice[0] if notice else None}


def _round(source: str, work: Path) -> dict:
    tree = work / "tree"
    tree.mkdir()
    _lay_out(source, tree)
    caches = [work / f"numba{i}" for i in range(3)]
    for c in caches:
        c.mkdir()
    out = {"load_avg_1min": os.getloadavg()[0]}
    out["install"] = _timed(["make", ".venv/.installed"], tree, caches[0])
    out["make_run"] = _timed(["make", "run"], tree, caches[0])
    serveplan = str(tree / ".venv" / "bin" / "serveplan")
    out["simulate_cold"] = _timed([serveplan, "simulate", COLOCATED], tree, caches[1])
    out["simulate_warm"] = _timed([serveplan, "simulate", COLOCATED], tree, caches[1])
    out["pd_cold"] = _timed([serveplan, "simulate", PD], tree, caches[2])
    return out


def _medians(rounds: list[dict]) -> dict:
    keys = ["install", "make_run", "simulate_cold", "simulate_warm", "pd_cold"]
    med = {k: float(np.median([r[k]["seconds"] for r in rounds])) for k in keys}
    med["fresh_clone_make_run_total"] = float(np.median(
        [r["install"]["seconds"] + r["make_run"]["seconds"] for r in rounds]))
    med["install_lines"] = float(np.median([r["install"]["lines"] for r in rounds]))
    return med


def _markdown(report: dict, before: dict | None) -> str:
    m = report["median_seconds"]
    b = before["median_seconds"] if before else None
    rows = [
        ("fresh clone: `make run` incl. install", m["fresh_clone_make_run_total"]),
        ("  of which the install (venv + `pip install -e .[dev]`)", m["install"]),
        ("  of which `serveplan search` (cold numba cache)", m["make_run"]),
        (f"first `serveplan simulate {COLOCATED}` (cold cache)", m["simulate_cold"]),
        ("the same, second time (warm cache)", m["simulate_warm"]),
        (f"first `serveplan simulate {PD}` (cold cache)", m["pd_cold"]),
    ]
    keys = ["fresh_clone_make_run_total", "install", "make_run", "simulate_cold",
            "simulate_warm", "pd_cold"]
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
                  *[f"| {name} | {value:.1f} |" for name, value in rows]]
    else:
        lines += [f"Before: `{before['command']}` ({before['source']}: {before['commit']}).",
                  "", "| step | before (s) | after (s) |", "|---|---|---|",
                  *[f"| {name} | {b[k]:.1f} | {value:.1f} |"
                    for (name, value), k in zip(rows, keys, strict=True)]]
    lines += [
        "",
        f"Lines printed by the install: {m['install_lines']:.0f}. Compile notice on the first "
        f"cold run: {report['rounds'][0]['simulate_cold']['announced']!r}; on the warm run: "
        f"{report['rounds'][0]['simulate_warm']['announced']!r}.",
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
