"""Input problems the user must fix, and the check that an input file is text.

Kept apart from :mod:`serveplan.errors` (the CLI's error reporting, which reads the
config's schema) so that the config can raise these without an import circle. The test
for text itself lives with the estimator's spec readers
(:func:`serveplan.estimator.specs.file_text_problem`), which name a binary ``--model``,
``--gpu`` or ``--profile`` file the same way.
"""

from __future__ import annotations

from pathlib import Path

from serveplan.estimator.specs import decode_problem, file_text_problem, not_text_message

__all__ = ["UserError", "check_text_file", "decode_problem", "not_text_message"]


class UserError(Exception):
    """A problem with the user's input, reported as its message alone."""


def check_text_file(path, expected: str, *, field: str | None = None) -> None:
    """Raise :class:`UserError` naming ``path`` (and ``field``) unless its first 64 KiB are
    UTF-8 text without NUL bytes. Missing files pass: their readers say so."""
    path = Path(path)
    if not path.is_file():
        return
    problem = file_text_problem(path)
    if problem is not None:
        prefix = f"{field}: " if field else ""
        raise UserError(prefix + not_text_message(path, problem, expected))
