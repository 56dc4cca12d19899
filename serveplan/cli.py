"""The ``serveplan`` command line (typer). Commands declare options; work lives elsewhere."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="serveplan",
    help="Plan LLM serving deployments on one CPU: step costs, memory plans, simulations.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # each command module adds itself to ``app``; one line per command module
    # isort: off
    from serveplan.commands import estimate, simulate  # noqa: F401
    from serveplan.commands import goodput  # noqa: F401
    from serveplan.commands import search  # noqa: F401
    from serveplan.commands import sweep  # noqa: F401
    from serveplan.commands import results  # noqa: F401
    from serveplan.commands import calibrate  # noqa: F401
    from serveplan.commands import compare_routers  # noqa: F401
    # isort: on


_register()


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
