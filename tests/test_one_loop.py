"""The one loop's shape: per-pool costs and GPUs, role results, no import circles."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.sim.costs import AffineStepCost
from serveplan.sim.loop_api import run_pools
from serveplan.sim.params import EngineParams
from serveplan.sim.pools import Handoff, PoolSpec, Role
from serveplan.sim.results import summarize, to_dataset
from serveplan.sim.workload import Requests

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"serveplan": "serveplan", "serveplan.commands": "serveplan/commands",
            "serveplan.sim": "sim", "serveplan.estimator": "estimator",
            "serveplan.kernels": "kernels", "serveplan.queueing": "queueing"}


@pytest.fixture(autouse=True)
def _compiled(sim_compiled):
    return sim_compiled


def _one_request(prompt: int, output: int) -> Requests:
    return Requests(arrival_s=np.zeros(1), prompt_len=np.array([prompt]),
                    output_len=np.array([output]))


def test_each_pool_prices_its_steps_with_its_own_cost():
    """One request, prompt 100, output 3, free KV link. Prefill pool: 10 ms + 0.1 ms per
    token, so its one step takes 10 + 100 * 0.1 = 20 ms and emits the first token at 20 ms.
    The KV arrives at once, the decode instance schedules it at 20 ms, and each decode step
    costs its own pool's 2 ms: tokens 2 and 3 at 22 and 24 ms."""
    params = EngineParams(num_gpu_blocks=64, max_model_len=1024)
    pools = [PoolSpec(params, AffineStepCost(0.010, 1e-4), 1, Role.PREFILL, "h100"),
             PoolSpec(params, AffineStepCost(0.002), 1, Role.DECODE, "h200")]
    ds = to_dataset(run_pools(_one_request(100, 3), pools, router="round-robin",
                              handoff=Handoff()))
    assert ds["ttft_s"].item() == pytest.approx(0.020)
    assert ds["finish_s"].item() == pytest.approx(0.024)
    assert ds["tpot_s"].item() == pytest.approx(0.002)
    assert list(ds["role"].values) == ["prefill", "decode"]
    assert list(ds["gpu"].values) == ["h100", "h200"]
    steps = ds["step_time_s"].values
    assert steps.tolist() == pytest.approx([0.020, 0.002, 0.002])
    assert ds["step_instance"].values.tolist() == [0, 1, 1]


def test_colocated_dataset_has_roles_and_no_role_breakdown():
    params = EngineParams(num_gpu_blocks=64, max_model_len=1024)
    res = run_pools(_one_request(50, 4), [PoolSpec(params, AffineStepCost(0.01), 2)])
    ds = to_dataset(res)
    assert list(ds["role"].values) == ["colocated", "colocated"]
    assert ds["requests_served"].values.tolist() == [1, 0]  # round-robin starts at 0
    s = summarize(ds)
    assert s["completed"] == 1 and not any(k.startswith("colocated_") for k in s)
    # 4 tokens: the prefill step (first token) and three decode steps of 10 ms each
    assert s["mean_e2el_ms"] == pytest.approx(40.0)


def test_pool_roles_that_cannot_run_are_refused():
    params = EngineParams(num_gpu_blocks=64)
    decode_only = [PoolSpec(params, AffineStepCost(0.01), 1, Role.DECODE)]
    with pytest.raises(ValueError, match=r"roles \[decode\]"):
        run_pools(_one_request(10, 2), decode_only)


def _imports(path: Path, package: str) -> set[str]:
    """Modules of the project that ``path`` imports (module level or in functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _module_graph() -> dict[str, set[str]]:
    files = {}
    for pkg, folder in PACKAGES.items():
        for f in (REPO / folder).glob("*.py"):
            name = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            files[name] = (f, pkg)
    graph = {}
    for name, (f, pkg) in files.items():
        graph[name] = {m for m in _imports(f, pkg) if m in files and m != name}
    return graph


def _cycle_from(graph, start) -> list[str] | None:
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph[node]:
            if nxt == start:
                return path
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_circles():
    """No module imports, directly or through others, a module that imports it back
    (imports inside functions count: they are circles a reader has to hold in mind)."""
    graph = _module_graph()
    assert "serveplan.sim.loop" in graph and graph["serveplan.cli"]
    cycles = {m: c for m in graph if (c := _cycle_from(graph, m))}
    assert not cycles, "import circle: " + " -> ".join(next(iter(cycles.values())))


def test_pool_form_takes_the_instance_flags(tmp_path):
    """``--num-instances`` and engine-knob flags apply to the pool form too."""
    from serveplan.cli import app

    res = CliRunner().invoke(app, ["simulate", str(REPO / "examples" / "llama8b-h100.yaml"),
                                   "-n", "40", "--num-instances", "2", "--max-num-seqs", "32",
                                   "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["completed"] == 40
