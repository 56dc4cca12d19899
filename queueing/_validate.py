"""Argument checks shared by the closed-form queueing formulas.

Each helper converts an argument to a float64 array and raises ``ValueError`` naming the
argument and the first bad value; see :mod:`serveplan.queueing.formulas` for the conventions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def _arr(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _first_bad(a: np.ndarray, ok: np.ndarray) -> float:
    return float(np.broadcast_to(a, ok.shape)[~ok].flat[0])


def _nonneg(name: str, x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = np.isfinite(a) & (a >= 0)
    if not np.all(ok):
        raise ValueError(f"{name} must be finite and >= 0, got {_first_bad(a, ok)!r}")
    return a


def _positive(name: str, x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = np.isfinite(a) & (a > 0)
    if not np.all(ok):
        raise ValueError(f"{name} must be finite and > 0, got {_first_bad(a, ok)!r}")
    return a


def _servers(x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = np.isfinite(a) & (a >= 1) & (a == np.floor(a))
    if not np.all(ok):
        raise ValueError(f"servers must be an integer >= 1, got {_first_bad(a, ok)!r}")
    return a


def _level(x: ArrayLike) -> np.ndarray:
    a = _arr(x)
    ok = (a >= 0) & (a <= 1)
    if not np.all(ok):
        raise ValueError(f"quantile level q must be in [0, 1], got {_first_bad(a, ok)!r}")
    return a


def _out(x: np.ndarray) -> np.ndarray:
    """Return a NumPy scalar for 0-d results, the array otherwise."""
    return x[()] if x.ndim == 0 else x


def _scv(name: str, x: ArrayLike) -> np.ndarray:
    return _nonneg(name, x)
