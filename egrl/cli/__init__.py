"""Console entry points (``egrl-info``, ``egrl-train``, ...)."""
