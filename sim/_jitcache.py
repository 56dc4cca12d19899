"""How the simulator compiles: :func:`sim_jit`, and a guard for numba's on-disk cache.

:func:`sim_jit` is ``numba.njit(cache=True)`` without numba's reference counting (NRT) of
arrays. Every array the compiled simulator touches is allocated in Python and owned by
the caller for the whole call, and no compiled simulator function allocates, so reference
counting buys nothing there; it cost about 8x on the step loop (atomic increments and
decrements on every array pulled out of the state tuples, which LLVM cannot prune across
the loops). ``_nrt`` is numba's own (underscored) target option; where a numba version
lacks it the decorator falls back to plain ``njit(cache=True)`` -- slower, same results.

The functions are compiled for compiled callers only: without numba's CPython wrapper
(which unboxes Python arguments) and C wrapper (``no_cpython_wrapper``,
``no_cfunc_wrapper``). For a function of the run state, a named tuple of a few hundred
arrays, each wrapper unpacks every array; dropping them (with one compiled variant per
argument type, below) cut the simulator's cold compile by about a third
(bench/results/first_run.md). A call from Python -- the loop's entry, a test --
goes to a twin of the function compiled with the wrappers and cached in files of its own
(``<name>__py``). Like every serveplan kernel they compile once per argument type, not
once per constant a caller passes (:class:`serveplan.kernels.Dispatcher`).

numba (``cache=True``) keys a cached function on the source file that defines it only, so a
compiled caller keeps a stale inlined copy of a callee from another file after that file
changes (numba docs, "Cache invalidation"). The simulator's compiled functions span several
files (and the cost kernels), so before a run :func:`refresh` deletes the cache entries of
the simulator modules that are older than the newest source of the group; numba then
recompiles them once. The sweep reads every simulator source and lists the cache folder
(about 30 ms); a process sweeps again only when a source has changed since its last sweep,
so later runs pay one ``stat`` per source.
"""

from __future__ import annotations

import functools
import re
import types
from pathlib import Path

from numba.core.cpu import CPUTargetOptions

from serveplan.kernels import Dispatcher, jit, jit_mode
from serveplan.kernels.cache_guard import cache_folder, delete_older
from serveplan.kernels.interpret import call_as_python

_NO_NRT = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}
_NO_WRAPPERS = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}


def _python_twin(disp):
    """``disp``'s function compiled with the Python wrappers, cached as ``<name>__py``."""
    fn = disp.py_func
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = f"{fn.__qualname__}__py"
    twin.__module__, twin.__doc__ = fn.__module__, fn.__doc__
    twin.__kwdefaults__ = fn.__kwdefaults__
    options = {k: v for k, v in disp.targetoptions.items() if k not in _NO_WRAPPERS}
    return jit(twin, **options)


class CompiledCallersOnly(Dispatcher):
    """A function compiled without Python wrappers; a call from Python goes to its twin
    (module doc). Compiled callers see it as any numba function."""

    def __call__(self, *args, **kwargs):
        if not jit_mode.STATE.settled and jit_mode.interpret_now():
            return call_as_python(self, args, kwargs)
        twin = self.__dict__.get("_twin")
        if twin is None:
            twin = self._twin = _python_twin(self)
        return twin(*args, **kwargs)


def sim_jit(fn):
    """Compile ``fn`` lazily (at first call), cached on disk, without NRT and without
    Python wrappers (module doc)."""
    return jit(fn, dispatcher=CompiledCallersOnly, **_NO_NRT, **_NO_WRAPPERS)


def sim_jit_inline(fn):
    """:func:`sim_jit`, inlined into its callers (numba IR inlining) -- for the small
    functions of the loop's hot path that take the whole run state: a call would pass the
    state's hundreds of array fields by value."""
    return jit(fn, dispatcher=CompiledCallersOnly, inline="always", **_NO_NRT,
               **_NO_WRAPPERS)


_SIM_DIR = Path(__file__).resolve().parent
_LOCAL_IMPORT = re.compile(r"^\s*from\s+(?:serveplan\.sim)?\.(\w*)\s+import\s+([\w, ()]+)",
                           re.MULTILINE)


def _kernel_sources() -> list[Path]:
    """The cost kernels the simulator compiles in: ``roofline``, ``uniform`` and ``afd``,
    and the scalar formulas they inline from ``primitives`` (each of them drops its own
    stale entries when imported, :mod:`serveplan.kernels.cache_guard`)."""
    from serveplan.kernels import afd, primitives, roofline, uniform

    return [Path(m.__file__) for m in (roofline, uniform, afd, primitives)]


def _direct_deps(source: Path) -> set[Path]:
    """Sibling modules (and the cost kernels) that ``source`` imports."""
    text = source.read_text(encoding="utf-8")
    deps: set[Path] = set()
    for module, names in _LOCAL_IMPORT.findall(text):
        candidates = [module] if module else [n.strip() for n in names.strip("()").split(",")]
        deps.update(_SIM_DIR / f"{c}.py" for c in candidates if (_SIM_DIR / f"{c}.py").is_file())
    if "serveplan.kernels" in text:
        deps.update(_kernel_sources())
    return deps


def _newest_dependency(source: Path, direct: dict[Path, set[Path]]) -> float:
    """Latest modification time over ``source`` and everything it imports, transitively."""
    seen, todo, newest = set(), [source], 0.0
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        newest = max(newest, path.stat().st_mtime)
        todo.extend(direct.get(path, ()))
    return newest


@functools.cache
def _cache_dir() -> Path:
    """Where numba caches the simulator's functions (:func:`cache_folder`)."""
    return cache_folder(refresh)


#: The newest source time the last sweep of this process saw (empty before the first).
_SWEPT_AT: list[float] = []


def _newest_source() -> float:
    """Latest modification time of the simulator's and the cost kernels' sources."""
    return max(p.stat().st_mtime for p in [*_SIM_DIR.glob("*.py"), *_kernel_sources()])


def refresh() -> int:
    """Delete stale cache files of the simulator modules, unless no source has changed
    since this process last did; returns how many were removed.

    A module's cache entries are stale when they are older than the module or anything it
    imports from the simulator package or the cost kernels, transitively.
    """
    try:
        newest = _newest_source()
    except OSError:
        return _sweep()
    if _SWEPT_AT and _SWEPT_AT[0] >= newest:
        return 0
    removed = _sweep()
    _SWEPT_AT[:] = [newest]
    return removed


def _sweep() -> int:
    """:func:`refresh`'s deletion, done whatever the sources' times."""
    cache_dir = _cache_dir()
    if not cache_dir.is_dir():
        return 0
    try:
        sources = sorted(_SIM_DIR.glob("*.py"))
        direct = {src: _direct_deps(src) for src in sources}
    except OSError:
        return 0
    removed = 0
    for source in sources:
        entries = list(cache_dir.glob(f"{source.stem}.*.nb[ic]"))
        if not entries:
            continue
        try:
            newest = _newest_dependency(source, direct)
        except OSError:
            continue
        removed += delete_older(entries, newest)
    return removed
