"""Spark session factory, offline set-up and the pipeline jobs (flush, state, materialise)."""
