"""Argument checks and seeding shared by the workload modules (:mod:`.workload`)."""

from __future__ import annotations

import numpy as np

SeedLike = int | np.random.SeedSequence | np.random.Generator | None
"""A seed for :func:`numpy.random.default_rng`; a Generator is used (and advanced) as is."""


def make_rng(seed: SeedLike) -> np.random.Generator:
    return np.random.default_rng(seed)


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    value = float(value)
    ok = np.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


def check_int(name: str, value: int, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def as_array(name: str, x: object, dtype: type) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if dtype is np.int64 and a.size and a.dtype.kind not in "iu":
        if a.dtype.kind != "f" or not np.all(np.isfinite(a) & (a == np.round(a))):
            raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def as_pair(first: tuple[str, object, type],
            second: tuple[str, object, type]) -> tuple[np.ndarray, np.ndarray]:
    """Two 1-D arrays (:func:`as_array`, each given as ``(name, values, dtype)``) that must
    have one entry per item: the same length."""
    a, b = (as_array(*spec) for spec in (first, second))
    if len(a) != len(b):
        raise ValueError(f"{first[0]} has {len(a)} entries but {second[0]} has {len(b)}")
    return a, b


def first_bad(name: str, a: np.ndarray, bad: np.ndarray, rule: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {a[i].item()!r}; {rule}")
