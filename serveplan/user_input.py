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

__all__ = ["UserError", "check_text_file", "decode_problem", "not_text_message",
           "yaml_mapping"]


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


def yaml_mapping(path, expected: str, error: type[Exception] = UserError,
                 loader=None) -> dict:
    """The mapping in a YAML file (an empty file is ``{}``); a file that is not text, not
    YAML (with its line) or not a mapping raises ``error`` naming the file. ``loader``: a
    ``yaml.SafeLoader`` subclass (default ``SafeLoader``)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader or yaml.SafeLoader)
    except UnicodeDecodeError as exc:
        raise error(not_text_message(path, decode_problem(exc), expected)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data
