"""How the simulator compiles: :func:`sim_jit`, and a guard for numba's on-disk cache.

:func:`sim_jit` is ``numba.njit(cache=True)`` without numba's reference counting (NRT) of
arrays. Every array the compiled simulator touches is allocated in Python and owned by
the caller for the whole call, and no compiled simulator function allocates, so reference
counting buys nothing there; it cost about 8x on the step loop (atomic increments and
decrements on every array pulled out of the state tuples, which LLVM cannot prune across
the loops). ``_nrt`` is numba's own (underscored) target option; where a numba version
lacks it the decorator falls back to plain ``njit(cache=True)`` -- slower, same results.

numba (``cache=True``) keys a cached function on the source file that defines it only, so a
compiled caller keeps a stale inlined copy of a callee from another file after that file
changes (numba docs, "Cache invalidation"). The simulator's compiled functions span several
files (and the cost kernels), so before a run :func:`refresh` deletes the cache entries of
the simulator modules that are older than the newest source of the group; numba then
recompiles them once. This costs a few ``stat`` calls.
"""

from __future__ import annotations

import re
from pathlib import Path

from numba import njit
from numba.core.cpu import CPUTargetOptions

_NO_NRT = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


def sim_jit(fn):
    """Compile ``fn`` lazily (at first call), cached on disk, without NRT (module doc)."""
    return njit(cache=True, **_NO_NRT)(fn)


def sim_jit_inline(fn):
    """:func:`sim_jit`, inlined into its callers (numba IR inlining) -- for the small
    functions of the loop's hot path that take the whole run state: a call would pass the
    state's hundreds of array fields by value."""
    return njit(cache=True, inline="always", **_NO_NRT)(fn)


_SIM_DIR = Path(__file__).resolve().parent
_LOCAL_IMPORT = re.compile(r"^\s*from\s+(?:serveplan\.sim)?\.(\w*)\s+import\s+([\w, ()]+)",
                           re.MULTILINE)


def _roofline() -> Path:
    from serveplan.kernels import roofline

    return Path(roofline.__file__)


def _direct_deps(source: Path) -> set[Path]:
    """Sibling modules (and the cost kernels) that ``source`` imports."""
    text = source.read_text(encoding="utf-8")
    deps: set[Path] = set()
    for module, names in _LOCAL_IMPORT.findall(text):
        candidates = [module] if module else [n.strip() for n in names.strip("()").split(",")]
        deps.update(_SIM_DIR / f"{c}.py" for c in candidates if (_SIM_DIR / f"{c}.py").is_file())
    if "serveplan.kernels" in text:
        deps.add(_roofline())
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


def refresh() -> int:
    """Delete stale cache files of the simulator modules; returns how many were removed.

    A module's cache entries are stale when they are older than the module or anything it
    imports from the simulator package or the cost kernels, transitively.
    """
    cache_dir = _SIM_DIR / "__pycache__"
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
        for path in entries:
            try:
                if path.stat().st_mtime < newest:
                    path.unlink()
                    removed += 1
            except OSError:
                continue
    return removed
