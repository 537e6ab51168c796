"""Serve flush requests made through the gateway's ``POST /v1/admin/flush/{gw}``.

The sensor takes the gateway's pending requests, marks them ``running`` and launches the sync
job tagged with their ids; the change-log asset marks them ``succeeded`` (with the WAL range) or
``failed``; a run-failure sensor marks the requests of a run that failed before that.
"""

import time
from collections.abc import Callable

import dagster as dg

from assets.gateway_assets import FLUSH_REQUESTS_TAG, active_run_count
from assets.resources import LakeSyncResource

__all__ = ["build_flush_request_sensor", "build_request_failure_sensor"]


def build_flush_request_sensor(
    gw: str, job_name: str, clock: Callable[[], float] = time.time
) -> dg.SensorDefinition:
    """The sensor that turns ``gw``'s pending flush requests into one run of ``job_name``."""

    @dg.sensor(
        name=f"{job_name}_flush_requests",
        job_name=job_name,
        minimum_interval_seconds=5,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Serve flush requests of gateway {gw!r} (POST /v1/admin/flush/{gw}).",
    )
    def flush_request_sensor(
        context: dg.SensorEvaluationContext, lakesync: LakeSyncResource
    ) -> dg.RunRequest | dg.SkipReason:
        wal = lakesync.wal()
        pending = wal.flush_requests(gw, "pending")
        if not pending:
            return dg.SkipReason(f"{gw}: no pending flush request")
        if active_run_count(context.instance, job_name):
            return dg.SkipReason(f"{job_name} is running; requests wait for the next tick")
        ids = [r.request_id for r in pending]
        now = int(clock() * 1000)
        for request_id in ids:
            wal.update_flush_request(request_id, "running", "sync run requested", now)
        return dg.RunRequest(
            run_key=f"flush-request:{ids[-1]}",
            tags={FLUSH_REQUESTS_TAG: ",".join(ids), "lakesync/trigger": "flush_request"},
        )

    return flush_request_sensor


def build_request_failure_sensor(
    clock: Callable[[], float] = time.time,
) -> dg.SensorDefinition:
    """Mark the flush requests of a failed run as ``failed`` (any gateway)."""

    @dg.run_failure_sensor(
        name="lakesync_flush_request_failures",
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def request_failures(context: dg.RunFailureSensorContext, lakesync: LakeSyncResource) -> None:
        ids = context.dagster_run.tags.get(FLUSH_REQUESTS_TAG, "")
        message = context.failure_event.message or "run failed"
        wal = lakesync.wal()
        now = int(clock() * 1000)
        for request_id in filter(None, ids.split(",")):
            current = [r for r in wal.flush_requests(None, None) if r.request_id == request_id]
            if current and current[0].status == "running":
                wal.update_flush_request(request_id, "failed", message[:2000], now)

    return request_failures
