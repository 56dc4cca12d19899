"""How serveplan compiles: where numba's cache lives, the one-line compile notice, one
compiled variant per argument type, Python calls of wrapperless simulator functions.

The subprocess tests compile two tiny functions through :func:`sim_jit` (the simulator's
own decorator), not the simulator, so they take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from serveplan import __version__
from serveplan.kernels import ANNOUNCEMENT, default_cache_dir, jit

NOTICE = ANNOUNCEMENT.split("~")[0]  # "compiling the simulator, once: "

PROBE = '''
from serveplan.sim._jitcache import sim_jit


@sim_jit
def _inc(x):
    return x + 1


@sim_jit
def entry(x):
    return _inc(x) * 2
'''

SHOW_CACHE_DIR = ("import os, numba, serveplan.kernels; "
                  "print(os.environ.get('NUMBA_CACHE_DIR', '')); print(numba.config.CACHE_DIR)")


def _run(code: str, env_updates: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")}
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_numba_cache_dir_respects_the_users_choice(tmp_path):
    mine = tmp_path / "mine"
    out = _run(SHOW_CACHE_DIR, {"NUMBA_CACHE_DIR": str(mine)}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(mine), str(mine)]


def test_default_numba_cache_dir_is_per_user_and_per_version(tmp_path):
    xdg = tmp_path / "xdg"
    out = _run(SHOW_CACHE_DIR, {"XDG_CACHE_HOME": str(xdg)}, tmp_path)
    assert out.returncode == 0, out.stderr
    expected = str(xdg / "serveplan" / f"numba-{__version__}")
    assert out.stdout.split() == [expected, expected]


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if sys.platform not in ("win32", "darwin"):
        assert default_cache_dir() == tmp_path / "serveplan" / f"numba-{__version__}"
    assert default_cache_dir().name == f"numba-{__version__}"


def test_unusable_default_leaves_numba_its_own_defaults(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = _run(SHOW_CACHE_DIR, {"XDG_CACHE_HOME": str(blocker / "cache")}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""  # neither the variable nor numba's setting was touched


def test_compile_is_announced_on_a_cold_cache_only(tmp_path):
    (tmp_path / "jitprobe.py").write_text(PROBE)
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    code = "import jitprobe; print(jitprobe.entry(3))"  # a Python call of a sim_jit function

    cold = _run(code, env, tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout.split() == ["8"]
    assert cold.stderr.count(NOTICE) == 1, cold.stderr

    warm = _run(code, env, tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["8"]
    assert NOTICE not in warm.stderr, warm.stderr

    timings = json.loads((tmp_path / "numba" / "serveplan-compile-seconds.json").read_text())
    assert any(name.startswith("jitprobe.entry") for name in timings)


def test_refresh_looks_where_numba_caches():
    from serveplan.sim._jitcache import _cache_dir

    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        assert _cache_dir().is_relative_to(Path(chosen).resolve())
    else:
        assert _cache_dir().name == "__pycache__" or _cache_dir().is_dir()


def test_refresh_sweeps_again_only_after_a_source_changes(monkeypatch):
    """The cache sweep reads every simulator source and lists the cache folder; a process
    does it before its first run and again only once a source is newer than at its last
    sweep (a run of a search would otherwise pay it every time)."""
    from serveplan.sim import _jitcache

    times, sweeps = iter([100.0, 100.0, 100.0, 101.5, 101.5]), []
    monkeypatch.setattr(_jitcache, "_SWEPT_AT", [])
    monkeypatch.setattr(_jitcache, "_newest_source", lambda: next(times))
    monkeypatch.setattr(_jitcache, "_sweep", lambda: sweeps.append(1) or 3)
    assert [_jitcache.refresh() for _ in range(5)] == [3, 0, 0, 3, 0]
    assert len(sweeps) == 2


@jit(cache=False)
def _pick(x, flag):
    return x + 1 if flag else x - 1


@jit(cache=False)
def _calls_with_constants(x):
    return _pick(x, True) + _pick(x, False) + _pick(np.int32(x), True)


def test_one_compiled_variant_per_argument_type():
    """Constants and a narrower integer passed by a compiled caller reuse one variant."""
    assert _calls_with_constants(10) == 11 + 9 + 11
    assert len(_pick.signatures) == 1


CALLER = '''
import sys
from numba import njit

from serveplan.kernels.cache_guard import drop_stale
from consts import SCALE


def _probe():
    pass


if "--guard" in sys.argv:
    drop_stale(_probe, [sys.modules["consts"].__file__])


@njit(cache=True)
def scaled(x):
    return x * SCALE


print(scaled(2.0))
'''


def test_a_kernel_drops_entries_compiled_with_an_older_dependency(tmp_path):
    """numba keys ``scaled``'s cache entry on caller.py alone: after consts.py changes
    SCALE from 3 to 5, a new process still gets 6.0 from the cache -- unless the module
    drops its entries older than consts.py on import, as the cost kernels do."""
    (tmp_path / "caller.py").write_text(CALLER, encoding="utf-8")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}

    def run(*flags) -> str:
        out = subprocess.run([sys.executable, str(tmp_path / "caller.py"), *flags],
                             env=env, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    (tmp_path / "consts.py").write_text("SCALE = 3.0\n", encoding="utf-8")
    assert run() == "6.0"
    (tmp_path / "consts.py").write_text("SCALE = 5.0\n", encoding="utf-8")
    assert run() == "6.0"  # numba's own check: stale
    assert run("--guard") == "10.0"
