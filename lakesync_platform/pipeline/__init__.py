"""Pipeline orchestration without Dagster: declarations, run-once jobs, the dev stack."""
