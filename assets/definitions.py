"""The Dagster code location of LakeSync (``dagster dev -w workspace.yaml``).

Definitions are built when the code location loads, not at import: the YAML declarations
(``LAKESYNC_DEFS_DIR``, default ``./defs``) and the gateway's config store (the WAL at
``LAKESYNC_WAL_URL``, default ``<LAKESYNC_DATA_DIR>/wal.db``) decide which gateways, tables and
destinations get assets. Declared tables are applied to the config store here, so the gateway
enforces them too. Tables registered later through the admin route are already processed by
the jobs; their assets appear on the next reload of the code location.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import dagster as dg

from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.pipeline.jobs import Pipeline
from lakesync_platform.settings import PipelineSettings
from sensors.backlog import build_backlog_sensor
from sensors.flush_requests import build_flush_request_sensor, build_request_failure_sensor
from sensors.schedules import build_sync_schedule

from .gateway_assets import UnresolvedAssetJobDefinition, build_gateway_defs
from .resources import LakeSyncResource

__all__ = ["build_definitions", "defs", "lakesync_resource"]

log = logging.getLogger(__name__)

_ENV_FIELDS = {
    "data_dir": "LAKESYNC_DATA_DIR",
    "wal_url": "LAKESYNC_WAL_URL",
    "defs_dir": "LAKESYNC_DEFS_DIR",
    "spark_master": "LAKESYNC_SPARK_MASTER",
    "jar_dir": "LAKESYNC_JAR_DIR",
    "catalog_uri": "LAKESYNC_CATALOG_URI",
    "warehouse": "LAKESYNC_WAREHOUSE",
}


def lakesync_resource(env: Mapping[str, str]) -> LakeSyncResource:
    """The resource, each setting bound to its ``EnvVar`` when that variable is set."""
    config: dict[str, object] = {
        field: dg.EnvVar(var) for field, var in _ENV_FIELDS.items() if env.get(var)
    }
    if env.get("LAKESYNC_BACKLOG_BYTES"):
        config["backlog_bytes"] = dg.EnvVar.int("LAKESYNC_BACKLOG_BYTES")
    if env.get("LAKESYNC_BACKLOG_AGE_SECONDS"):
        config["backlog_age_seconds"] = dg.EnvVar.int("LAKESYNC_BACKLOG_AGE_SECONDS")
    return LakeSyncResource(**config)


def _known_tables(pipeline: Pipeline) -> dict[str, dict[str, TableSchema]]:
    """Tables per gateway: declarations applied to the config store, then read back from it."""
    try:
        pipeline.apply_declarations()
        return {gw: pipeline.tables(gw) for gw in pipeline.gateways()}
    except LakeSyncError as exc:
        log.warning("config store unavailable (%s); using declared tables only", exc)
        return {gw: dict(d.tables) for gw, d in pipeline.declarations.gateways.items()}


def build_definitions(env: Mapping[str, str]) -> dg.Definitions:
    """All assets, checks, jobs, sensors and schedules for the settings in ``env``."""
    resource = lakesync_resource(env)
    pipeline = Pipeline(PipelineSettings.from_env(env))
    try:
        tables = _known_tables(pipeline)
        destinations = {gw: pipeline.destinations(gw) for gw in tables}
    finally:
        pipeline.close()
    assets: list[dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    jobs: list[UnresolvedAssetJobDefinition] = []
    sensors: list[dg.SensorDefinition] = [build_request_failure_sensor()]
    schedules: list[dg.ScheduleDefinition] = []
    for gw in sorted(tables):
        gdefs = build_gateway_defs(gw, tables[gw], destinations[gw])
        assets += gdefs.assets
        checks += gdefs.checks
        jobs.append(gdefs.job)
        sensors += [
            build_backlog_sensor(gw, gdefs.job.name),
            build_flush_request_sensor(gw, gdefs.job.name),
        ]
        schedules.append(build_sync_schedule(gdefs.job.name))
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        sensors=sensors,
        schedules=schedules,
        resources={"lakesync": resource},
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Entry point of the code location: settings are read now, at load, never at import."""
    return build_definitions(dict(os.environ))
