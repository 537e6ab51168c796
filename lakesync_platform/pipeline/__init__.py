"""The pipeline without Dagster: one module per stage (flush, state, materialise) and the run
context they share (:mod:`.context`)."""
