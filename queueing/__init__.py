"""serveplan.queueing."""
