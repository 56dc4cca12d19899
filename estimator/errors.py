"""The estimator's one error type for descriptions it cannot use (re-exported by ``specs``)."""

from __future__ import annotations


class SpecError(ValueError):
    """A model / GPU / parallelism / quantization description that cannot be used."""
