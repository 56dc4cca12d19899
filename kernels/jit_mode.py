"""Whether serveplan's compiled functions run compiled, or as Python while they compile.

The simulator's cold compile takes over a minute (bench/results/first_run.md), and a first
run should not wait for it: the same code runs as plain Python (:mod:`.interpret`) fast
enough for a first simulation or a small search, while a background process compiles it
into numba's cache. Later calls -- in this process too -- use the compiled code as soon
as it is there. ``SERVEPLAN_JIT`` chooses:

``auto`` (the default)
    Compiled code when the background compile of this cache directory has finished for the
    current sources (:func:`warm`); otherwise Python, with one background compile started
    (``python -m serveplan.warmup``, its output in ``serveplan-warmup.log`` beside the
    cache). A run estimated to take longer as Python than the compile has left waits for
    the compile instead (:func:`prefer_compiled`). Where no background compile can run (no
    writable cache directory, no POSIX file locks) everything compiles in the foreground.
``compile``
    Always compiled; a missing cache entry compiles in the foreground, announced on stderr.
``interpret``
    Always Python, no background compile (slow; for debugging, and the tests that hold
    Python runs equal to compiled ones).

The background compile holds an exclusive lock on ``serveplan-warmup.lock`` while it runs,
so processes started meanwhile (a sweep's workers, a second command) neither start another
nor mistake it for dead, and writes ``serveplan-warm-<tree>.json`` when done (``<tree>``: a
digest of the source folders' paths, so checkouts that share a cache keep their own
marker instead of overwriting each other's, :func:`marker_path`): a stamp of the
compiled sources (path, modification time and size of every file, as numba's own cache
index keys them), numba's and Python's versions. An edited source makes the stamp stale
and the next run interprets again while the background recompiles.

What compiles took is kept beside the cache too (``serveplan-compile-seconds.json``):
:func:`compile_estimate` turns it into the "~N s" of the notices.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from numba.core import config as _nb_config

from serveplan._version import __version__

try:
    import fcntl
except ImportError:  # no POSIX file locks: no background compile
    fcntl = None

ENV = "SERVEPLAN_JIT"
MODES = ("auto", "compile", "interpret")
WARMUP_MODULE = "serveplan.warmup"
MARKER_GLOB, LOCK, LOG = "serveplan-warm-*.json", "serveplan-warmup.lock", "serveplan-warmup.log"
CHECK_EVERY_S = 1.0

NOTICE = ("the simulator is not compiled on this machine yet: running it as Python (same "
          "results, slower) while it compiles in the background, once (~{seconds} s; log: "
          "{log}). {env}=compile waits for the compile instead.")


class _State:
    """The process's mode; ``settled`` means compiled from now on (the dispatchers' fast
    path checks only that)."""

    def __init__(self):
        self.settled = False
        self.decided = False
        self.interpret = False
        self.mode = "auto"
        self.next_check = 0.0
        self.background = None  # the Popen of a background compile this process started
        self.started = 0.0
        self.expected = 0.0  # its duration, estimated before it records partial timings


STATE = _State()


def mode_from_env() -> str:
    """``SERVEPLAN_JIT`` (lower-cased), ``auto`` when unset; an invalid value raises."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{ENV} given an invalid value: {os.environ[ENV]!r} "
                         f"(valid: {', '.join(MODES)})")
    return value


def cache_dir() -> Path | None:
    where = _nb_config.CACHE_DIR or os.environ.get("NUMBA_CACHE_DIR")
    return Path(where) if where else None


def _source_dirs() -> list[Path]:
    dirs = [Path(__file__).parent]
    spec = importlib.util.find_spec("serveplan.sim")
    if spec is not None and spec.submodule_search_locations:
        dirs.extend(Path(p) for p in spec.submodule_search_locations)
    return dirs


def sources_stamp() -> str:
    """A digest of the compiled sources' paths, modification times and sizes, and of the
    numba, Python and serveplan versions (module doc)."""
    digest = hashlib.sha256(f"{__version__}|{sys.version}|{_numba_version()}".encode())
    for folder in _source_dirs():
        for path in sorted(folder.glob("*.py")):
            st = path.stat()
            digest.update(f"{path}|{st.st_mtime_ns}|{st.st_size}\n".encode())
    return digest.hexdigest()


def _numba_version() -> str:
    import numba

    return numba.__version__


def marker_path(where: Path) -> Path:
    """This source tree's marker in the cache folder ``where``."""
    tree = hashlib.sha256("|".join(map(str, _source_dirs())).encode()).hexdigest()[:12]
    return where / MARKER_GLOB.replace("*", tree)


def warm() -> bool:
    """Whether the background compile finished for the current sources in this cache."""
    where = cache_dir()
    if where is None:
        return False
    try:
        data = json.loads(marker_path(where).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("stamp") == sources_stamp()


def mark_warm(seconds: float) -> None:
    """Record that the compiled code of the current sources is in the cache."""
    where = cache_dir()
    if where is None:
        return
    where.mkdir(parents=True, exist_ok=True)
    marker = marker_path(where)
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"stamp": sources_stamp(), "seconds": round(seconds, 1)}),
                   encoding="utf-8")
    os.replace(tmp, marker)


DEFAULT_COMPILE_S = 85.0
"""The estimate for an empty cache directory: the cold compile of the simulator measured on
a shared 2-core machine (bench/results/first_run.md)."""


# ---------------------------------------------------------------------------- compile times
def _timings_file() -> Path | None:
    """Compile times are kept in numba's cache directory, next to what they produced."""
    where = cache_dir()
    return where / "serveplan-compile-seconds.json" if where else None


def _read_timings() -> dict[str, float]:
    path = _timings_file()
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def compile_estimate() -> float:
    """Seconds a cold compile should take: the sum of the last measured compile of every
    function a process compiled first into this cache directory (a conservative figure: a
    command may compile only some of them), else :data:`DEFAULT_COMPILE_S`."""
    total = sum(_read_timings().values())
    return total if total > 0 else DEFAULT_COMPILE_S


def _record(name: str, seconds: float) -> None:
    timings = _read_timings()
    timings[name] = round(seconds, 2)
    path = _timings_file()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(timings, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def _rounded(seconds: float) -> int:
    return max(1, round(seconds)) if seconds < 20 else 5 * round(seconds / 5)


# ------------------------------------------------------------------------ background compile
class WarmupLock:
    """The background compile's exclusive lock (module doc); ``acquired`` says whether this
    process holds it. Released when the process ends, however it ends."""

    def __init__(self, blocking: bool = False):
        self.acquired, self._file = False, None
        where = cache_dir()
        if fcntl is None or where is None:
            return
        where.mkdir(parents=True, exist_ok=True)
        self._file = open(where / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 (held)
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError:
            self._file.close()
            self._file = None
            return
        self.acquired = True

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        self.acquired = False


def _background_running() -> bool:
    if STATE.background is not None and STATE.background.poll() is None:
        return True  # ours, perhaps not holding its lock yet
    probe = WarmupLock()
    held = not probe.acquired and fcntl is not None and cache_dir() is not None
    probe.release()
    return held


def background_command() -> list[str]:
    """The background compile's command line."""
    return [sys.executable, "-m", WARMUP_MODULE]


def _start_background() -> bool:
    """Start the background compile unless one runs; False where none can run."""
    where = cache_dir()
    if fcntl is None or where is None:
        return False
    STATE.started = time.monotonic()
    STATE.expected = compile_estimate()
    if _background_running():
        return True
    try:
        where.mkdir(parents=True, exist_ok=True)
        with open(where / LOG, "w", encoding="utf-8") as log:
            STATE.background = subprocess.Popen(
                background_command(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, ENV: "compile", "NUMBA_CACHE_DIR": str(where)})
    except OSError:
        return False
    return True


def _announce() -> None:
    stream = sys.__stderr__ or sys.stderr
    print(NOTICE.format(seconds=_rounded(STATE.expected), log=cache_dir() / LOG, env=ENV),
          file=stream, flush=True)


# ----------------------------------------------------------------------------- the decision
def _decide() -> None:
    STATE.decided = True
    try:
        STATE.mode = mode_from_env()
    except ValueError:
        STATE.mode = "auto"  # the CLI refuses the value before anything runs
    if STATE.mode == "interpret":
        STATE.interpret = True
    elif STATE.mode == "compile" or warm() or not _start_background():
        settle()
    else:
        STATE.interpret = True
        STATE.next_check = time.monotonic() + CHECK_EVERY_S
        _announce()


def settle() -> None:
    """Compiled from now on (loaded from the cache, or compiled here)."""
    STATE.decided = STATE.settled = True
    STATE.interpret = False


def interpret_now() -> bool:
    """Whether a call from Python runs as Python now (the dispatchers ask while unsettled)."""
    if not STATE.decided:
        _decide()
    if STATE.interpret and STATE.mode == "auto" and time.monotonic() >= STATE.next_check:
        STATE.next_check = time.monotonic() + CHECK_EVERY_S
        if warm() or not _background_running():
            settle()  # ready; or the background compile died: compile here, announced
    return STATE.interpret


def prefer_compiled(python_seconds: float) -> None:
    """Before a call estimated to take ``python_seconds`` as Python: wait for the
    background compile instead when it should finish sooner."""
    if STATE.settled or not interpret_now() or STATE.mode != "auto":
        return
    left = max(STATE.expected - (time.monotonic() - STATE.started), 5.0)
    if python_seconds <= left:
        return
    print(f"this run would take ~{_rounded(python_seconds)} s as Python: waiting for the "
          f"compile instead (~{_rounded(left)} s left)", file=sys.__stderr__ or sys.stderr,
          flush=True)
    while not warm() and _background_running():
        time.sleep(0.5)
    settle()


def force(mode: str) -> None:
    """Set the mode for the rest of the process (``compile`` or ``interpret``)."""
    if mode not in ("compile", "interpret"):
        raise ValueError(f"mode given an invalid value: {mode!r} (valid: compile, interpret)")
    STATE.decided, STATE.mode = True, mode
    STATE.interpret = mode == "interpret"
    STATE.settled = mode == "compile"


__all__ = ["ENV", "MODES", "STATE", "WarmupLock", "force", "interpret_now", "mark_warm",
           "mode_from_env", "prefer_compiled", "settle", "sources_stamp", "warm"]
