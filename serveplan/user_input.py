"""Input problems the user must fix, and the check that an input file is text.

Kept apart from :mod:`serveplan.errors` (the CLI's error reporting, which reads the
config's schema) so that the config can raise these without an import circle.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["UserError", "check_text_file", "decode_problem", "not_text_message"]


class UserError(Exception):
    """A problem with the user's input, reported as its message alone."""


def not_text_message(path, problem: str, expected: str) -> str:
    """``PATH is not a text file (problem); expected ...``: one wording for binary input."""
    return f"{path} is not a text file ({problem}); expected {expected}"


def decode_problem(exc: UnicodeDecodeError) -> str:
    return f"byte {exc.start} is not UTF-8"


def check_text_file(path, expected: str, *, field: str | None = None) -> None:
    """Raise :class:`UserError` naming ``path`` (and ``field``) unless its first 64 KiB are
    UTF-8 text without NUL bytes. Missing files pass: their readers say so."""
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    problem, nul = None, head.find(b"\x00")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3 or len(head) < 1 << 16:  # not a cut character
            problem = decode_problem(exc)
            nul = nul if 0 <= nul < exc.start else -1
    if nul >= 0:
        problem = f"byte {nul} is NUL"
    if problem is not None:
        prefix = f"{field}: " if field else ""
        raise UserError(prefix + not_text_message(path, problem, expected))
