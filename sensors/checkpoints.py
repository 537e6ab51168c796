"""The checkpoint sensor: a new checkpoint once the lake has moved on by enough log entries.

The threshold is the pipeline settings' ``checkpoint_every_entries``
(``LAKESYNC_CHECKPOINT_EVERY_ENTRIES``, default 100 000): the WAL's flush watermark (what the lake
holds) minus the current checkpoint's cursor. The run key is that watermark, so one growth
launches one run. A schedule (:mod:`sensors.schedules`) writes one periodically as well.
"""

import dagster as dg

from lakesync_platform.pipeline.checkpoint import checkpoint_store, current_manifest
from resources.lakesync import LakeSyncResource
from resources.sync_runs import active_run_count

__all__ = ["build_checkpoint_sensor", "checkpoint_due"]


def checkpoint_due(lake_cursor: int, checkpoint_cursor: int | None, every: int) -> str | None:
    """Why a new checkpoint is due (``None`` when it is not): the pure rule of the sensor."""
    if lake_cursor <= 0:
        return None
    if checkpoint_cursor is None:
        return f"no checkpoint yet; the lake holds the log up to {lake_cursor}"
    grown = lake_cursor - checkpoint_cursor
    if grown >= every:
        return f"the lake holds {grown} log entries past the checkpoint (≥ {every})"
    return None


def build_checkpoint_sensor(gw: str, job_name: str) -> dg.SensorDefinition:
    """The checkpoint sensor of gateway ``gw`` targeting the job ``job_name``."""

    @dg.sensor(
        name=f"{job_name}_growth",
        job_name=job_name,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Write a checkpoint of gateway {gw!r} once the lake holds enough log entries past "
            "the current one (LAKESYNC_CHECKPOINT_EVERY_ENTRIES)."
        ),
    )
    def checkpoint_sensor(
        context: dg.SensorEvaluationContext, lakesync: LakeSyncResource
    ) -> dg.RunRequest | dg.SkipReason:
        if active_run_count(context.instance, job_name):
            return dg.SkipReason(f"{job_name} is already queued or running")
        settings = lakesync.context().settings
        lake = lakesync.wal().flush_watermark(gw)
        manifest = current_manifest(checkpoint_store(settings), gw)
        cursor = None if manifest is None else manifest.cursor
        reason = checkpoint_due(lake, cursor, settings.checkpoint_every_entries)
        if reason is None:
            return dg.SkipReason(
                f"{gw}: lake at {lake}, checkpoint at {cursor} "
                f"(every {settings.checkpoint_every_entries} entries)"
            )
        return dg.RunRequest(
            run_key=f"checkpoint:{gw}:{lake}",
            tags={"lakesync/trigger": "growth", "lakesync/reason": reason},
        )

    return checkpoint_sensor
