"""CLI command modules; each registers its commands on serveplan.cli.app."""
