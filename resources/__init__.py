"""What the Dagster assets and sensors share, so that neither imports the other.

* :mod:`resources.lakesync` — the ``lakesync`` resource: settings, and the pipeline's run
  context (WAL, Spark, declarations) opened lazily;
* :mod:`resources.sync_runs` — the per-gateway sync job's name, its run tags and the query for
  its active runs (sensors target the job by name, ARCHITECTURE.md §2).
"""
