"""The ``serveplan`` command line (typer). Commands declare options; work lives elsewhere.

The app object lives in ``serveplan.commands.app``; importing the command modules here
registers their commands on it. ``serveplan.cli:app`` and ``serveplan.cli:main`` are the
public entry points.
"""

from __future__ import annotations

# each command module adds itself to ``app``; one line per command module
# isort: off
from serveplan.commands import estimate, simulate  # noqa: F401
from serveplan.commands import goodput  # noqa: F401
from serveplan.commands import search  # noqa: F401
from serveplan.commands import sweep  # noqa: F401
from serveplan.commands import results  # noqa: F401
from serveplan.commands import calibrate  # noqa: F401
from serveplan.commands import compare_routers  # noqa: F401
from serveplan.commands import compare  # noqa: F401
from serveplan.commands import warmup  # noqa: F401
from serveplan.commands import rollout  # noqa: F401
# isort: on
from serveplan.commands.app import app

__all__ = ["app", "main"]


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
