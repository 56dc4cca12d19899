"""Notes for the user on stderr, each said once per process.

A note says how an answer was reached where that limits it (runtime terms carried outside
the runs they were fitted on, a GPU priced without a calibration profile); repeating it
for every deployment of a search would bury the results.
"""

from __future__ import annotations

import sys

__all__ = ["announce_once"]

_ANNOUNCED: set[str] = set()


def announce_once(note: str) -> None:
    """Print ``note: <note>`` on stderr unless this process has printed it already."""
    if note not in _ANNOUNCED:
        _ANNOUNCED.add(note)
        print(f"note: {note}", file=sys.stderr)
