"""The per-gateway audit job as the schedule and the checks both know it: its name.

The job ``audit_<gw>`` (built in :mod:`assets.audit_assets`) runs the sync job's checks over the
whole lake instead of the latest run's range; the schedule of :mod:`sensors.schedules` launches
it by name. Its runs carry the gateway tag (:data:`resources.sync_runs.GATEWAY_TAG`), so a tag
concurrency limit queues them behind the gateway's sync runs (the lake's lock orders their
work anyway).
"""

__all__ = ["audit_job_name"]


def audit_job_name(gw: str) -> str:
    """Name of the job that audits gateway ``gw``'s whole lake and destinations."""
    return f"audit_{gw.replace('-', '_')}"
