"""The README and the example files, run as a new user would, so they cannot drift.

* every ``serveplan`` line of the README's command blocks, in order, in one temporary
  folder (later lines read what earlier ones wrote: ``sweep.nc``, ``search.nc``, ...);
* the README's Python block, executed; its YAML block, validated as a deployment;
* every file in ``examples/`` through the command(s) its first comment lines name, from a
  temporary working directory (paths inside a YAML file are relative to that file).

Runs are shortened with the flags in :data:`SHORT` (fewer requests and seeds; a flag given
twice takes its last value). ``make`` lines are not run: they create the virtualenv and
run this suite.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import xarray as xr
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.results_io import missing_units

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

SHORT = {
    "simulate": ["-n", "100"],
    "compare-routers": ["-n", "100"],
    "goodput": ["-n", "200", "--seeds", "1"],
    "search": ["-n", "200", "--seeds", "1", "--max-decide", "2"],
    "rollout": ["-n", "200"],
}
"""Flags appended to a documented command to keep the run short."""

WRITERS = {"goodput": "goodput", "search": "search", "sweep": "sweep", "pareto": "pareto",
           "compare-routers": "compare-routers"}
"""Commands whose ``--out`` file must carry its kind and units."""


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)


def command_lines(body: str) -> list[list[str]]:
    """The ``serveplan`` commands of a shell block (continuations joined, trailing comments
    and optional ``[...]`` parts dropped), as argument lists without ``serveplan``."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#.*$", "", line)
        line = re.sub(r"\s\[[^\]]*\]", "", line).strip()
        if line.startswith("serveplan "):
            out.append(shlex.split(line)[1:])
    return out


def run_documented(args: list[str], where: Path, shorten: bool = True) -> None:
    """Run one documented command (shortened unless told not to, example paths made
    absolute) and check it succeeded and that a result it wrote carries its kind and
    units."""
    args = [str(REPO / a) if a.startswith("examples/") else a for a in args]
    args = args + (SHORT.get(args[0], []) if shorten else [])
    r = CliRunner().invoke(app, args)
    shown = "serveplan " + " ".join(args)
    assert r.exit_code == 0, f"{shown}\n{r.output}"
    assert "Traceback" not in r.output, shown
    if args[0] in WRITERS and ("--out" in args or "-o" in args):
        target = args[(args.index("--out") if "--out" in args else args.index("-o")) + 1]
        with xr.open_dataset(where / target) as ds:
            assert ds.attrs.get("kind") == WRITERS[args[0]], shown
            assert missing_units(ds) == [], shown


@pytest.fixture()
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _readme_inputs(folder: Path) -> None:
    """The files the README's commands name as the user's own: a config.json and a
    measurements CSV."""
    from test_calibrate_cli import _gemm_csv

    (folder / "my").mkdir()
    shutil.copy(REPO / "estimator" / "data" / "models" / "meta-llama--Llama-3.1-8B.json",
                folder / "my" / "config.json")
    _gemm_csv(folder / "measurements.csv")


def test_readme_commands(in_tmp):
    _readme_inputs(in_tmp)
    blocks = [body for lang, body in fenced_blocks(README.read_text()) if lang == ""]
    commands = [c for body in blocks for c in command_lines(body)]
    names = [c[0] for c in commands]
    for needed in ("estimate", "memory", "simulate", "compare-routers", "goodput", "search",
                   "sweep", "pareto", "plot", "export", "calibrate", "compare"):
        assert needed in names, f"the README no longer shows `serveplan {needed}`"
    for args in commands:
        run_documented(args, in_tmp)
    for written in ("run.nc", "goodput.nc", "search.nc", "sweep.nc", "pareto.png",
                    "goodput.png", "my-gpu.json", "cdf.png", "my-vllm.json"):
        assert (in_tmp / written).is_file(), written


def test_readme_python_block(in_tmp):
    code = [body for lang, body in fenced_blocks(README.read_text()) if lang == "python"]
    assert code
    for body in code:
        exec(compile(body, str(README), "exec"), {})  # noqa: S102 - the documented snippet


def test_readme_yaml_block_is_a_valid_deployment():
    from serveplan.pools_config import to_pools

    blocks = [yaml.safe_load(body) for lang, body in fenced_blocks(README.read_text())
              if lang == "yaml"]
    assert blocks
    for data in blocks:
        d = to_pools(data["deployment"])
        assert d.architecture in ("colocated", "pd")


def header_commands(path: Path) -> list[list[str]]:
    """The ``serveplan`` commands in the comment lines that open an example file."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return command_lines("\n".join(lines))


PENDING: dict[str, str] = {}
"""Examples that fail for a reason owned elsewhere: strict xfail, so the mark must go once
the fix lands."""


@pytest.mark.parametrize("example", [
    pytest.param(p, id=p.stem, marks=[pytest.mark.xfail(strict=True, reason=PENDING[p.stem])]
                 if p.stem in PENDING else []) for p in EXAMPLES])
def test_example(example, in_tmp):
    commands = header_commands(example)
    assert commands, f"{example.name}: the first lines must name the command that runs it"
    data = yaml.safe_load(example.read_text())
    trace = (data.get("workload") or {}).get("path")
    if trace and not (example.parent / trace).is_file():
        pytest.skip(f"{example.name}: trace {trace} not present")
    staged = (data.get("workload") or {}).get("kind") == "inference-perf"  # stages set -n
    for args in commands:
        assert f"examples/{example.name}" in args, f"{example.name}: {args}"
        run_documented(args, in_tmp, shorten=not staged)
