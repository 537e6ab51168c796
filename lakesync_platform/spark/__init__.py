"""Spark session factory and the pipeline jobs (flush, state, materialise) as pure transforms
plus thin entry points."""
