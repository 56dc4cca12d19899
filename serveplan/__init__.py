"""serveplan: plan LLM serving deployments on one CPU."""

__version__ = "0.1.0"
