"""The simulator run as Python while its compiled code is missing (serveplan.kernels.jit_mode,
serveplan.kernels.interpret): the same results as compiled runs, and the auto mode's
decisions -- interpret while a background compile runs, switch when it is done, wait for it
for a long run, compile here when it died.

The background compile of the auto-mode tests is a stand-in process (it takes the lock,
sleeps, writes the marker), so these tests do not compile the simulator twice.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.kernels import jit_mode
from serveplan.simulation import simulate

INSTANCE = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "max_model_len": 4096}
WORKLOAD = {"kind": "poisson", "rate": 30.0, "num_requests": 150,
            "isl": {"dist": "lognormal", "mean": 500, "sigma": 0.8, "max": 3000},
            "osl": {"dist": "lognormal", "mean": 60, "sigma": 0.8, "max": 400},
            "prefix": {"num_groups": 3, "prefix_len": 128}}
DEPLOYMENTS = {
    "colocated": {"pools": [{"role": "colocated", **INSTANCE, "count": 2,
                             "max_num_batched_tokens": 512}]},
    "sglang": {"pools": [{"role": "colocated", **INSTANCE, "scheduler": "sglang",
                          "num_gpu_blocks": 400}]},
    "pd": {"pools": [{"role": "prefill", **INSTANCE}, {"role": "decode", **INSTANCE,
                                                        "count": 2}],
           "decode_router": "sibyl"},
}


@pytest.fixture
def compiled_afterwards():
    """Leave the process compiled, as the test session runs, whatever a test set."""
    yield
    jit_mode.force("compile")


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_python_runs_equal_compiled_runs(name, sim_compiled, compiled_afterwards):
    jit_mode.force("compile")
    compiled = simulate(DEPLOYMENTS[name], WORKLOAD, seed=3)
    jit_mode.force("interpret")
    interpreted = simulate(DEPLOYMENTS[name], WORKLOAD, seed=3)
    assert set(compiled.data_vars) == set(interpreted.data_vars)
    for var in compiled.data_vars:  # bit for bit: same code, same float operations
        np.testing.assert_array_equal(interpreted[var].values, compiled[var].values,
                                      err_msg=var)
    summary = json.loads(compiled.attrs["summary"])
    assert summary["completed"] == WORKLOAD["num_requests"]
    assert json.loads(interpreted.attrs["summary"]) == summary


# ------------------------------------------------------------------------------ auto mode
STAND_IN = """
import sys, time
from serveplan.kernels import jit_mode
lock = jit_mode.WarmupLock()
assert lock.acquired
time.sleep(float(sys.argv[1]))
if sys.argv[2] == "finish":
    jit_mode.mark_warm(0.1)
"""


@pytest.fixture
def auto(tmp_path, monkeypatch, compiled_afterwards):
    """A fresh auto-mode state on an empty cache directory; ``auto(seconds, outcome)`` sets
    what the stand-in background compile does."""
    if jit_mode.fcntl is None:
        pytest.skip("no POSIX file locks: the auto mode compiles in the foreground")
    monkeypatch.setattr(jit_mode, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(jit_mode, "STATE", jit_mode._State())
    monkeypatch.setenv(jit_mode.ENV, "auto")

    def configure(seconds: float, outcome: str = "finish"):
        monkeypatch.setattr(jit_mode, "background_command",
                            lambda: [sys.executable, "-c", STAND_IN, str(seconds), outcome])
        return jit_mode.STATE

    return configure


def test_auto_interprets_while_compiling_then_switches(auto, capfd):
    state = auto(1.0)
    assert jit_mode.interpret_now() is True
    assert "running it as Python" in capfd.readouterr().err
    first = state.background
    assert first is not None
    assert jit_mode.interpret_now() is True        # no second background compile
    assert state.background is first
    first.wait(timeout=60)
    assert jit_mode.warm()
    state.next_check = 0.0                         # the next once-a-second check
    assert jit_mode.interpret_now() is False
    assert state.settled


def test_auto_compiles_here_when_the_background_compile_died(auto):
    state = auto(0.0, "die")
    assert jit_mode.interpret_now() is True
    state.background.wait(timeout=60)
    state.next_check = 0.0
    assert jit_mode.interpret_now() is False
    assert not jit_mode.warm()


def test_a_long_run_waits_for_the_compile_instead(auto, capfd):
    state = auto(1.0)
    assert jit_mode.interpret_now() is True
    jit_mode.prefer_compiled(1.0)                  # short: stays Python
    assert state.interpret and not state.settled
    jit_mode.prefer_compiled(1e6)                  # longer than any compile: waits
    assert state.settled and jit_mode.warm()
    assert "waiting for the compile" in capfd.readouterr().err


def test_partial_compile_timings_do_not_shorten_the_wait(auto, tmp_path):
    """The background compile records each function's compile time as it goes; the time it
    has left is judged by the estimate made when it started, not by those partial sums."""
    state = auto(2.0)
    assert jit_mode.interpret_now() is True
    (tmp_path / "serveplan-compile-seconds.json").write_text('{"serveplan.sim.x": 1.0}')
    assert jit_mode.compile_estimate() == 1.0
    jit_mode.prefer_compiled(10.0)  # 10 s of Python, far less than the ~85 s compile
    assert state.interpret and not state.settled
    state.background.wait(timeout=60)


def test_a_warm_cache_runs_compiled_and_an_edit_makes_it_stale(auto, monkeypatch):
    state = auto(0.0)
    jit_mode.mark_warm(1.0)
    assert jit_mode.interpret_now() is False and state.background is None
    monkeypatch.setattr(jit_mode, "sources_stamp", lambda: "an edited source")
    assert not jit_mode.warm()


def test_checkouts_sharing_a_cache_keep_their_own_marker(auto, monkeypatch, tmp_path):
    """A clone elsewhere that compiles into the same cache folder marks its own sources
    warm; this checkout stays warm (a single marker made the one compiled last the only
    warm one, and the other interpreted again beside a needless background compile)."""
    auto(0.0)
    jit_mode.mark_warm(1.0)
    here = (jit_mode._source_dirs, jit_mode.sources_stamp)
    monkeypatch.setattr(jit_mode, "_source_dirs", lambda: [tmp_path / "clone" / "kernels"])
    monkeypatch.setattr(jit_mode, "sources_stamp", lambda: "the clone's sources")
    assert not jit_mode.warm()
    jit_mode.mark_warm(1.0)
    assert jit_mode.warm()
    monkeypatch.setattr(jit_mode, "_source_dirs", here[0])  # back in this checkout
    monkeypatch.setattr(jit_mode, "sources_stamp", here[1])
    assert jit_mode.warm()
    assert len(list(tmp_path.glob(jit_mode.MARKER_GLOB))) == 2


def test_invalid_mode_is_one_error(monkeypatch):
    monkeypatch.setenv(jit_mode.ENV, "fast")
    out = CliRunner().invoke(app, ["warmup"])
    assert out.exit_code == 1
    assert "SERVEPLAN_JIT given an invalid value: 'fast'" in out.output
    assert "Traceback" not in out.output


def test_warmup_command_marks_the_cache_warm(sim_compiled, tmp_path, monkeypatch,
                                             compiled_afterwards):
    # its own lock and marker: a background compile of the user's cache may be running
    monkeypatch.setattr(jit_mode, "cache_dir", lambda: tmp_path)
    assert not jit_mode.warm()
    out = CliRunner().invoke(app, ["warmup"])
    assert out.exit_code == 0, out.output
    assert "compiled code ready" in out.output
    assert jit_mode.warm()


def test_every_compiled_function_runs_as_python_while_compiling():
    """Each numba function of the kernels and the simulator is serveplan's dispatcher, so a
    call from Python follows the jit mode; a plain ``numba.njit`` one (as ``kernels/afd.py``
    had) would compile in the foreground, unannounced, when called from Python."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import serveplan.kernels
    import serveplan.sim
    from serveplan.kernels import Dispatcher

    plain = []
    for package in (serveplan.kernels, serveplan.sim):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            plain += [f"{module.__name__}.{name}" for name, obj in vars(module).items()
                      if isinstance(obj, CPUDispatcher) and not isinstance(obj, Dispatcher)]
    assert plain == []
