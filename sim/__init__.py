"""serveplan.sim."""
