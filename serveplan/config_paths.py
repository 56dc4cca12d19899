"""Dotted paths into a config mapping: ``--set`` overrides and sweep grid keys."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["set_path"]

_LIST_INDEX = re.compile(r"\[(-?\d+)\]")
"""A list index written as the error messages print it (``pools[1]``)."""


def set_path(data: dict | list, dotted: str, value: Any) -> dict | list:
    """Copy of ``data`` with ``value`` at ``a.b.c`` (intermediate mappings created).

    A numeric part indexes a list: ``deployment.pools.1.max_num_seqs``, or as error
    messages print it, ``deployment.pools[1].max_num_seqs``. A path through a value that is
    neither a mapping nor a list (``workload.rate`` under ``workload: 1``) is a
    ``ValueError`` naming it: the value would otherwise be silently replaced.
    """
    path = _LIST_INDEX.sub(r".\1", dotted)
    try:
        return _set_path(data, path, value, "")
    except ValueError as exc:  # name the path as the user wrote it
        if path == dotted:
            raise
        raise ValueError(str(exc).replace(path, dotted, 1)) from None


def _set_path(data, dotted: str, value, done: str):
    head, _, rest = dotted.partition(".")
    if isinstance(data, list):
        if not head.lstrip("-").isdigit() or not -len(data) <= int(head) < len(data):
            raise ValueError(f"{done}{dotted}: {head!r} is not an index of a list of "
                             f"{len(data)}")
        out, key = list(data), int(head)
        inner = out[key]
    else:
        out, key = dict(data), head
        inner = out.get(head)
    if not rest:
        out[key] = value
    elif inner is None or isinstance(inner, (dict, list)):
        out[key] = _set_path(inner if inner is not None else {}, rest, value, f"{done}{head}.")
    else:
        shown = repr(inner) if len(repr(inner)) <= 40 else repr(inner)[:37] + "..."
        raise ValueError(f"{done}{dotted}: {done}{head} is {type(inner).__name__} {shown}, "
                         f"not a mapping of fields, so it has no field {rest.split('.')[0]!r}")
    return out
