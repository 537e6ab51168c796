"""The backlog sensor: launch a gateway's sync job when its WAL backlog passes a threshold.

Thresholds (bytes not yet in the lake, age of the oldest unflushed entry) come from the
``lakesync`` resource. The run key is the WAL head, so one backlog launches one run.
"""

import time
from collections.abc import Callable

import dagster as dg

from lakesync_platform.settings import DEFAULT_BACKLOG_SENSOR_SECONDS
from resources.lakesync import LakeSyncResource
from resources.sync_runs import active_run_count

__all__ = ["backlog_decision", "build_backlog_sensor"]


def backlog_decision(
    backlog_bytes: int,
    oldest_ms: int | None,
    now_ms: int,
    max_bytes: int,
    max_age_s: int,
) -> str | None:
    """Why a flush is due (``None`` when it is not): the pure rule of the sensor."""
    if backlog_bytes >= max_bytes:
        return f"backlog {backlog_bytes} B ≥ {max_bytes} B"
    if oldest_ms is not None and now_ms - oldest_ms >= max_age_s * 1000:
        return f"oldest unflushed entry {(now_ms - oldest_ms) // 1000}s old ≥ {max_age_s}s"
    return None


def build_backlog_sensor(
    gw: str,
    job_name: str,
    clock: Callable[[], float] = time.time,
    interval_s: int = DEFAULT_BACKLOG_SENSOR_SECONDS,
) -> dg.SensorDefinition:
    """The backlog sensor of gateway ``gw`` targeting the job ``job_name``, ticking at most
    every ``interval_s`` seconds (``LAKESYNC_BACKLOG_SENSOR_SECONDS``)."""

    @dg.sensor(
        name=f"{job_name}_backlog",
        job_name=job_name,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Flush gateway {gw!r} when its WAL backlog passes the size or age limit.",
    )
    def backlog_sensor(
        context: dg.SensorEvaluationContext, lakesync: LakeSyncResource
    ) -> dg.RunRequest | dg.SkipReason:
        if active_run_count(context.instance, job_name):
            return dg.SkipReason(f"{job_name} is already queued or running")
        wal = lakesync.wal()
        stats = wal.stats(gw)
        if stats.backlog_entries == 0:
            return dg.SkipReason(f"{gw}: nothing to flush")
        reason = backlog_decision(
            stats.backlog_bytes,
            wal.oldest_unflushed_ms(gw),
            int(clock() * 1000),
            lakesync.backlog_bytes,
            lakesync.backlog_age_seconds,
        )
        if reason is None:
            return dg.SkipReason(
                f"{gw}: {stats.backlog_entries} entries / {stats.backlog_bytes} B below limits"
            )
        return dg.RunRequest(
            run_key=f"backlog:{gw}:{stats.max_cursor}",
            tags={"lakesync/trigger": "backlog", "lakesync/reason": reason},
        )

    return backlog_sensor
