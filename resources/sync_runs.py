"""The per-gateway sync job as sensors and assets both know it: its name, run tags, active runs.

The job ``sync_<gw>`` (built in :mod:`assets.gateway_assets`) materialises a gateway's change
log, state and destination tables in order. Its runs carry :data:`GATEWAY_TAG`; runs launched
for flush requests also carry :data:`FLUSH_REQUESTS_TAG` with the requests' ids.
"""

import dagster as dg

__all__ = [
    "FLUSH_REQUESTS_TAG",
    "GATEWAY_TAG",
    "active_run_count",
    "checkpoint_job_name",
    "lifecycle_job_name",
    "sync_job_name",
]

GATEWAY_TAG = "lakesync/gateway"
"""Run tag naming the gateway a sync run works on (the key of its concurrency limit)."""
FLUSH_REQUESTS_TAG = "lakesync/flush_requests"
"""Run tag listing the gateway flush-request ids a run serves (comma-separated)."""

_ACTIVE = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def sync_job_name(gw: str) -> str:
    """Name of the job that flushes, merges and materialises gateway ``gw``."""
    return f"sync_{gw.replace('-', '_')}"


def checkpoint_job_name(gw: str) -> str:
    """Name of the job that writes gateway ``gw``'s initial-sync checkpoint."""
    return f"checkpoint_{gw.replace('-', '_')}"


def lifecycle_job_name(gw: str) -> str:
    """Name of the job that trims gateway ``gw``'s hot WAL and moves its destinations' old rows
    to their cold tiers."""
    return f"lifecycle_{gw.replace('-', '_')}"


def active_run_count(instance: dg.DagsterInstance, job_name: str) -> int:
    """How many runs of ``job_name`` are queued or running."""
    return len(
        instance.get_run_records(
            filters=dg.RunsFilter(job_name=job_name, statuses=_ACTIVE), limit=5
        )
    )
