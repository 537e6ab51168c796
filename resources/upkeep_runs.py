"""The per-gateway upkeep job as the schedule and the assets both know it: its name.

The job ``upkeep_<gw>`` (built in :mod:`assets.upkeep_assets`) compacts the gateway's lake
tables, then expires old snapshots and removes orphan files; the schedule of
:mod:`sensors.schedules` launches it by name. Its runs carry the same gateway tag as the sync
job's (:data:`resources.sync_runs.GATEWAY_TAG`), so a tag concurrency limit serialises a
gateway's sync and upkeep runs (the lake's lock orders their stages anyway).
"""

__all__ = ["upkeep_job_name"]


def upkeep_job_name(gw: str) -> str:
    """Name of the job that compacts and expires gateway ``gw``'s lake tables."""
    return f"upkeep_{gw.replace('-', '_')}"
