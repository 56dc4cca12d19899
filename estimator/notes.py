"""Notes for the user on stderr, each said once per process.

A note says how an answer was reached where that limits it (runtime terms carried outside
the runs they were fitted on, a GPU priced without a calibration profile); repeating it
for every deployment of a search would bury the results.

Work that runs in other processes (a sweep's Dask workers) holds its notes
(:func:`held_notes`) and hands them back with its results, so the process the user
watches says each of them once, however many workers met it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["announce_once", "held_notes"]

_SAID: set[str] = set()
_HOLDER = threading.local()


def announce_once(note: str) -> None:
    """Print ``note: <note>`` on stderr unless this process has printed it already; inside
    :func:`held_notes` (in this thread), keep it there instead."""
    held = getattr(_HOLDER, "notes", None)
    if held is not None:
        if note not in held:
            held.append(note)
        return
    if note not in _SAID:
        _SAID.add(note)
        print(f"note: {note}", file=sys.stderr)


@contextmanager
def held_notes() -> Iterator[list[str]]:
    """Collect the notes this thread would say, in order and each once, into the list it
    yields, instead of printing them; the caller passes them on (to :func:`announce_once`
    where the user sees them)."""
    outer = getattr(_HOLDER, "notes", None)
    _HOLDER.notes = []
    try:
        yield _HOLDER.notes
    finally:
        _HOLDER.notes = outer
