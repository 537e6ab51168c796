"""Periodic runs: a safety-net sync per gateway (sensors do the prompt work), lifecycle, lake
upkeep, checkpoints and the whole-lake audit."""

import dagster as dg

__all__ = [
    "build_audit_schedule",
    "build_checkpoint_schedule",
    "build_lifecycle_schedule",
    "build_sync_schedule",
    "build_upkeep_schedule",
]


def _running_schedule(job_name: str, cron: str, description: str) -> dg.ScheduleDefinition:
    """``job_name`` on ``cron``, running from the start (named ``<job>_schedule``)."""
    return dg.ScheduleDefinition(
        name=f"{job_name}_schedule",
        job_name=job_name,
        cron_schedule=cron,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=description,
    )


def build_sync_schedule(job_name: str, cron: str = "*/15 * * * *") -> dg.ScheduleDefinition:
    """Run ``job_name`` on ``cron`` (default every 15 minutes) even without backlog pressure."""
    return _running_schedule(
        job_name, cron, "Periodic flush + state + materialise (catches small, old backlogs)."
    )


def build_lifecycle_schedule(job_name: str, cron: str = "17 * * * *") -> dg.ScheduleDefinition:
    """Run the lifecycle job ``job_name`` on ``cron`` (default hourly, off the quarter hours of
    the sync schedule)."""
    return _running_schedule(
        job_name,
        cron,
        "Trim the hot WAL of what the lake holds; move old destination rows to cold.",
    )


def build_upkeep_schedule(job_name: str, cron: str) -> dg.ScheduleDefinition:
    """Run the upkeep job ``job_name`` (compaction, expiry, orphan removal) on ``cron``
    (``LAKESYNC_UPKEEP_CRON``, default daily at 03:00 UTC)."""
    return _running_schedule(
        job_name, cron, "Lake upkeep: compact small files, expire old snapshots, remove orphans."
    )


def build_checkpoint_schedule(job_name: str, cron: str = "0 * * * *") -> dg.ScheduleDefinition:
    """Run the checkpoint job ``job_name`` on ``cron`` (default hourly); a run with nothing new
    in the lake since the last checkpoint writes nothing and starts no Spark session."""
    return _running_schedule(
        job_name, cron, "Periodic checkpoint (the growth sensor writes one sooner under load)."
    )


def build_audit_schedule(job_name: str, cron: str = "30 4 * * *") -> dg.ScheduleDefinition:
    """Run the audit job ``job_name`` on ``cron`` (default daily at 04:30 UTC, after the upkeep
    job's default 03:00)."""
    return _running_schedule(
        job_name,
        cron,
        "Whole-lake audit: the sync checks (exactly once, replay, destinations) over everything.",
    )
