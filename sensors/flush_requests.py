"""Serve flush requests made through the gateway's ``POST /v1/admin/flush/{gw}``.

The sensor takes the gateway's pending requests, marks them ``running`` and launches the sync
job tagged with their ids; the change-log asset marks them ``succeeded`` (with the WAL range) or
``failed``; a run-failure sensor marks the requests of a run that failed before that.
"""

import time
from collections.abc import Callable

import dagster as dg

from resources.lakesync import LakeSyncResource
from resources.sync_runs import FLUSH_REQUESTS_TAG, GATEWAY_TAG, active_run_count

__all__ = ["build_flush_request_sensor", "build_request_failure_sensor"]

_RUNNING_LIMIT = 10_000
"""How many of a gateway's running requests the failure sensor reads: far above the at most
100 one run serves (the request sensor takes 100 pending ones per run) plus any left running
by cancelled runs."""


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
    """Mark the flush requests of a failed run as ``failed`` (any gateway).

    Only requests still ``running`` are marked: the change-log asset may already have marked
    them ``succeeded`` (a later asset failed) or ``failed``. They are looked up among the run's
    gateway's running requests, however many requests the WAL holds.
    """

    @dg.run_failure_sensor(
        name="lakesync_flush_request_failures",
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def request_failures(context: dg.RunFailureSensorContext, lakesync: LakeSyncResource) -> None:
        tags = context.dagster_run.tags
        ids = set(filter(None, tags.get(FLUSH_REQUESTS_TAG, "").split(",")))
        if not ids:
            return
        message = context.failure_event.message or "run failed"
        wal = lakesync.wal()
        running = wal.flush_requests(tags.get(GATEWAY_TAG), "running", limit=_RUNNING_LIMIT)
        now = int(clock() * 1000)
        for request in running:
            if request.request_id in ids:
                wal.update_flush_request(request.request_id, "failed", message[:2000], now)

    return request_failures
