"""serveplan.kernels."""
