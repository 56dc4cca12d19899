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

from pathlib import Path

from numba import njit
from numba.core.cpu import CPUTargetOptions

_NO_NRT = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


def sim_jit(fn):
    """Compile ``fn`` lazily (at first call), cached on disk, without NRT (module doc)."""
    return njit(cache=True, **_NO_NRT)(fn)


_SIM_DIR = Path(__file__).resolve().parent


def _sources() -> list[Path]:
    """Every module of the simulator package (any may compile with :func:`sim_jit` and call
    the others) and the cost kernels they inline."""
    from serveplan.kernels import roofline

    return sorted(_SIM_DIR.glob("*.py")) + [Path(roofline.__file__)]


def refresh() -> int:
    """Delete stale cache files of the simulator modules; returns how many were removed."""
    try:
        newest = max(p.stat().st_mtime for p in _sources())
    except OSError:
        return 0
    cache_dir = _SIM_DIR / "__pycache__"
    if not cache_dir.is_dir():
        return 0
    removed = 0
    for source in _SIM_DIR.glob("*.py"):
        for path in cache_dir.glob(f"{source.stem}.*.nb[ic]"):
            try:
                if path.stat().st_mtime < newest:
                    path.unlink()
                    removed += 1
            except OSError:
                continue
    return removed
