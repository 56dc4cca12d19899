"""serveplan.kernels: numba kernels over flat arrays, and the rules all compiled code follows.

Every serveplan module that compiles is imported after this package (``import serveplan``
imports it first), so what it sets up holds for the kernels and for the simulator:

Where compiled code is cached
    numba's on-disk cache (``cache=True``) goes to ``NUMBA_CACHE_DIR`` if it is set, else
    to :func:`default_cache_dir`, ``$XDG_CACHE_HOME/serveplan/numba-<version>``
    (``~/.cache/...``; ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows). That
    directory is per user, per serveplan version, and writable for a non-editable install,
    whose ``__pycache__`` (numba's default) may not be. The variable is set in the
    environment before numba is imported, so worker processes share the cache. If the
    directory cannot be created, numba's own defaults apply.

A compile is announced
    The first time a process compiles (rather than loads from the cache) one of serveplan's
    functions, one line on stderr says so before the compile starts:
    ``compiling the simulator, once: ~N s``, where N is what the compiles into this cache
    directory took last time (:func:`compile_estimate`), or, for a new cache directory,
    the cold compile measured on a shared 2-core machine. numba reports a compile only on
    a cache miss (its ``numba:compile`` event), so a warm cache prints nothing. The line goes to the
    process's own stderr (``sys.__stderr__``), not to a stream a caller swapped in, so
    the JSON a command prints on stdout stays parseable when the two are captured together.

A first run does not wait for the compile
    While the compiled code of the current sources is not in the cache, calls from Python
    run the functions as Python (:mod:`.interpret`) and one background process compiles
    them (:mod:`.jit_mode`, ``SERVEPLAN_JIT``); the :class:`Dispatcher` asks which on each
    call from Python until the process is settled on compiled code.

One compiled variant per argument type
    :func:`jit` is ``numba.njit`` whose compiled callers do not specialise it on constants:
    numba compiles a function called from compiled code once per *literal* argument
    (``f(x, True)`` and ``f(x, False)`` are two compiles), and once more for an ``int32``
    where another caller passes an ``int64``. A :class:`Dispatcher` compiles for the
    argument types with literals dropped and narrow integers widened to ``int64``, and
    falls back to the literal types for a function that cannot be typed without them.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from serveplan._version import __version__

ANNOUNCEMENT = "compiling the simulator, once: ~{seconds} s"



def _user_cache_base() -> Path:
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def default_cache_dir() -> Path:
    """The per-user, per-version numba cache used when ``NUMBA_CACHE_DIR`` is not set."""
    return _user_cache_base() / "serveplan" / f"numba-{__version__}"


def _can_create(path: Path) -> bool:
    """Whether ``path`` exists writable or could be created (nothing is created here)."""
    while not path.exists():
        if path.parent == path:
            return False
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _use_cache_dir() -> None:
    """Point numba's cache at :func:`default_cache_dir` unless the user chose one."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    path = default_cache_dir()
    if not _can_create(path):
        return
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    config = sys.modules.get("numba.core.config")
    if config is not None and not config.CACHE_DIR:  # numba was imported before serveplan
        config.CACHE_DIR = str(path)


_use_cache_dir()

# numba is imported only now that its cache directory is decided.
from numba.core import config as _nb_config  # noqa: E402
from numba.core import event as _nb_event  # noqa: E402
from numba.core import types as _nb_types  # noqa: E402
from numba.core.errors import ForceLiteralArg, TypingError  # noqa: E402
from numba.core.registry import CPUDispatcher  # noqa: E402

from serveplan.kernels import jit_mode  # noqa: E402
from serveplan.kernels.interpret import call_as_python  # noqa: E402
from serveplan.kernels.jit_mode import (  # noqa: E402
    DEFAULT_COMPILE_S,
    _record,
    _rounded,
    compile_estimate,
)


def _is_ours(dispatcher) -> bool:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    return isinstance(dispatcher, Dispatcher) or module.startswith("serveplan.")


class _CompileNotice(_nb_event.Listener):
    """Announces the first compile of a process and times every outermost one."""

    def __init__(self):
        self.announced = False
        self.depth = 0
        self.started = 0.0

    def on_start(self, event):
        if not _is_ours(event.data["dispatcher"]):
            return
        if self.depth == 0:
            self.started = time.perf_counter()
        self.depth += 1
        if not self.announced:
            self.announced = True
            stream = sys.__stderr__ or sys.stderr
            print(ANNOUNCEMENT.format(seconds=_rounded(compile_estimate())), file=stream,
                  flush=True)

    def on_end(self, event):
        dispatcher = event.data["dispatcher"]
        if not _is_ours(dispatcher):
            return
        self.depth -= 1
        compiled = tuple(event.data["args"]) in dispatcher.overloads  # (numba's is_failed
        if self.depth == 0 and compiled:                             # is inverted in 0.68)
            func = dispatcher.py_func
            _record(f"{func.__module__}.{func.__qualname__}", time.perf_counter() - self.started)


_nb_event.register("numba:compile", _CompileNotice())


# ----------------------------------------------------------------------------- dispatcher
def _plain(t):
    t = _nb_types.unliteral(t)
    if isinstance(t, _nb_types.Integer) and t.signed and t.bitwidth < 64:
        return _nb_types.int64
    return t


class Dispatcher(CPUDispatcher):
    """numba's CPU dispatcher, compiled once per argument type for compiled callers (no
    literal or narrow-integer variants; module doc). A call from Python runs the function
    as Python while :mod:`.jit_mode` says so."""

    def __call__(self, *args, **kwargs):
        if not jit_mode.STATE.settled and jit_mode.interpret_now():
            return call_as_python(self, args, kwargs)
        return super().__call__(*args, **kwargs)

    def get_call_template(self, args, kws):
        plain = tuple(_plain(a) for a in args)
        plain_kws = {k: _plain(v) for k, v in kws.items()}
        if plain != tuple(args) or plain_kws != kws:
            try:
                return super().get_call_template(plain, plain_kws)
            except (TypingError, ForceLiteralArg):
                pass  # needs its literal arguments (numba.literally, a constant index)
        return super().get_call_template(args, kws)


def jit(fn=None, *, cache: bool = True, dispatcher: type[Dispatcher] = Dispatcher,
        **options):
    """``numba.njit(cache=cache, **options)`` compiled by ``dispatcher`` (a
    :class:`Dispatcher` by default). Use as ``@jit`` or ``@jit(option=...)``."""

    def wrap(func):
        if _nb_config.DISABLE_JIT:
            return func
        disp = dispatcher(py_func=func, locals={},
                          targetoptions={"nopython": True, **options})
        if cache:
            disp.enable_caching()
        return disp

    return wrap if fn is None else wrap(fn)


__all__ = ["ANNOUNCEMENT", "DEFAULT_COMPILE_S", "Dispatcher", "compile_estimate",
           "default_cache_dir", "jit"]
