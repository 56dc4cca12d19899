"""CLI command modules; each registers its commands on ``serveplan.commands.app.app``
(re-exported as ``serveplan.cli.app``). Shared option handling and summary tables live
in ``serveplan.commands.common``; command modules never import one another."""
