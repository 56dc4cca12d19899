"""Stale cache entries of kernels that compile in code from other kernel files.

numba keys a function's on-disk cache entry on its own source file (path, modification
time, size) alone, so a module whose functions compile in constants or callees from
another file keeps them after that file changes (numba docs, "Cache invalidation"): a
cost kernel would read a parameter vector by the old layout and price steps wrong without
a word. Such a module calls :func:`drop_stale` when it is imported -- before any of its
functions can load from the cache -- with the files it imports from; the simulator's
guard (:mod:`serveplan.sim._jitcache`) uses :func:`delete_older` for its own modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def delete_older(entries: Iterable[Path], newest: float) -> int:
    """Delete the cache files among ``entries`` older than ``newest``; how many went."""
    removed = 0
    for path in entries:
        try:
            if path.stat().st_mtime < newest:
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def cache_folder(probe) -> Path:
    """Where numba caches the functions of ``probe``'s module (a plain function of it), by
    numba's own rule (``NUMBA_CACHE_DIR``, else ``__pycache__`` beside the source, else a
    per-user folder)."""
    try:
        from numba.core.caching import FunctionCache

        return Path(FunctionCache(probe)._cache_path)
    except (ImportError, AttributeError, RuntimeError, OSError):
        return Path(probe.__code__.co_filename).parent / "__pycache__"


def drop_stale(probe, sources: Iterable[str | Path]) -> int:
    """Delete the cache entries of ``probe``'s module older than the newest of
    ``sources`` (the files it compiles in); how many went."""
    try:
        newest = max(Path(s).stat().st_mtime for s in sources)
    except (OSError, ValueError):
        return 0
    stem = Path(probe.__code__.co_filename).stem
    return delete_older(cache_folder(probe).glob(f"{stem}.*.nb[ic]"), newest)


__all__ = ["cache_folder", "delete_older", "drop_stale"]
