"""serveplan.estimator."""
