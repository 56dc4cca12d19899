"""The package version (a module of its own, so any module may import it)."""

__version__ = "0.1.0"
