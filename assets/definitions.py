"""The Dagster code location of LakeSync (``dagster dev -w workspace.yaml``).

Definitions are built when the code location loads, not at import: the YAML declarations
(``LAKESYNC_DEFS_DIR``, default ``./defs``) and the gateway's config store (the WAL at
``LAKESYNC_WAL_URL``, default ``<LAKESYNC_DATA_DIR>/wal.db``) decide which gateways, tables and
destinations get assets. Declared tables are applied to the config store here, so the gateway
enforces them too. Tables registered later through the admin route are already processed by
the jobs; their assets appear on the next reload of the code location. Connectors need no
reload: each is a partition of one asset, kept in step by a sensor (:mod:`sensors.connectors`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import dagster as dg

from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.settings import (
    DEFAULT_BACKLOG_SENSOR_SECONDS,
    ENV_BACKLOG_AGE_SECONDS,
    ENV_BACKLOG_BYTES,
    ENV_BACKLOG_SENSOR_SECONDS,
    ENV_CATALOG_URI,
    ENV_DATA_DIR,
    ENV_DEFS_DIR,
    ENV_JAR_DIR,
    ENV_SPARK_MASTER,
    ENV_SPARK_REMOTE,
    ENV_WAL_URL,
    ENV_WAREHOUSE,
    PipelineSettings,
)
from resources.audit_runs import audit_job_name
from resources.lakesync import LakeSyncResource
from resources.sync_runs import checkpoint_job_name, lifecycle_job_name, sync_job_name
from resources.upkeep_runs import upkeep_job_name
from sensors.backlog import build_backlog_sensor
from sensors.checkpoints import build_checkpoint_sensor
from sensors.connectors import build_connector_sensor
from sensors.flush_requests import build_flush_request_sensor, build_request_failure_sensor
from sensors.schedules import (
    build_audit_schedule,
    build_checkpoint_schedule,
    build_lifecycle_schedule,
    build_sync_schedule,
    build_upkeep_schedule,
)

from .audit_assets import build_audit_defs
from .checkpoint_assets import build_checkpoint_defs
from .connector_assets import build_connector_defs
from .gateway_assets import build_gateway_defs
from .lifecycle_assets import build_lifecycle_defs
from .upkeep_assets import build_upkeep_defs

__all__ = ["build_definitions", "defs", "lakesync_resource"]

log = logging.getLogger(__name__)

_ENV_FIELDS = {
    "data_dir": ENV_DATA_DIR,
    "wal_url": ENV_WAL_URL,
    "defs_dir": ENV_DEFS_DIR,
    "spark_master": ENV_SPARK_MASTER,
    "jar_dir": ENV_JAR_DIR,
    "catalog_uri": ENV_CATALOG_URI,
    "warehouse": ENV_WAREHOUSE,
    "spark_remote": ENV_SPARK_REMOTE,
}


def _interval(raw: str | None) -> int:
    """``LAKESYNC_BACKLOG_SENSOR_SECONDS`` as a whole number of seconds ≥ 1."""
    if not raw:
        return DEFAULT_BACKLOG_SENSOR_SECONDS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV_BACKLOG_SENSOR_SECONDS} must be a whole number ≥ 1, not {raw!r}")
    return value


def lakesync_resource(env: Mapping[str, str]) -> LakeSyncResource:
    """The resource, each setting bound to its ``EnvVar`` when that variable is set."""
    config: dict[str, object] = {
        field: dg.EnvVar(var) for field, var in _ENV_FIELDS.items() if env.get(var)
    }
    if env.get(ENV_BACKLOG_BYTES):
        config["backlog_bytes"] = dg.EnvVar.int(ENV_BACKLOG_BYTES)
    if env.get(ENV_BACKLOG_AGE_SECONDS):
        config["backlog_age_seconds"] = dg.EnvVar.int(ENV_BACKLOG_AGE_SECONDS)
    return LakeSyncResource(**config)


def _known_tables(ctx: PipelineContext) -> dict[str, dict[str, TableSchema]]:
    """Tables per gateway: declarations applied to the config store, then read back from it."""
    try:
        return {gw: ctx.tables(gw) for gw in ctx.gateways()}
    except LakeSyncError as exc:
        log.warning("config store unavailable (%s); using declared tables only", exc)
        return {gw: dict(d.tables) for gw, d in ctx.declarations.gateways.items()}


def build_definitions(env: Mapping[str, str]) -> dg.Definitions:
    """All assets, checks, jobs, sensors and schedules for the settings in ``env``.

    Sensors and schedules target each gateway's sync job by name.
    """
    ctx = PipelineContext(PipelineSettings.from_env(env))
    try:
        tables = _known_tables(ctx)
        destinations = {gw: ctx.destinations(gw) for gw in tables}
        upkeep_cron = ctx.settings.upkeep.cron
    finally:
        ctx.close()
    sensor_interval = _interval(env.get(ENV_BACKLOG_SENSOR_SECONDS))
    per_gateway: list[dg.Definitions] = []
    for gw in sorted(tables):
        job_name = sync_job_name(gw)
        hot = {n: d for n, d in destinations[gw].items() if d.role != "cold"}  # cold: lifecycle's
        per_gateway.append(build_gateway_defs(gw, tables[gw], hot))
        per_gateway.append(build_lifecycle_defs(gw, list(tables[gw]), destinations[gw]))
        per_gateway.append(
            dg.Definitions(
                sensors=[
                    build_backlog_sensor(gw, job_name, interval_s=sensor_interval),
                    build_flush_request_sensor(gw, job_name),
                ],
                schedules=[
                    build_sync_schedule(job_name),
                    build_lifecycle_schedule(lifecycle_job_name(gw)),
                ],
            )
        )
        per_gateway.append(build_audit_defs(gw, tables[gw], hot))
        per_gateway.append(dg.Definitions(schedules=[build_audit_schedule(audit_job_name(gw))]))
        per_gateway.append(build_upkeep_defs(gw, tables[gw]))
        per_gateway.append(
            dg.Definitions(schedules=[build_upkeep_schedule(upkeep_job_name(gw), upkeep_cron)])
        )
        checkpoint_job = checkpoint_job_name(gw)
        per_gateway.append(build_checkpoint_defs(gw, tables[gw]))
        per_gateway.append(
            dg.Definitions(
                sensors=[build_checkpoint_sensor(gw, checkpoint_job)],
                schedules=[build_checkpoint_schedule(checkpoint_job)],
            )
        )
    common = dg.Definitions(
        sensors=[build_request_failure_sensor(), build_connector_sensor()],
        resources={"lakesync": lakesync_resource(env)},
        executor=dg.in_process_executor,
    )
    return dg.Definitions.merge(common, build_connector_defs(), *per_gateway)


@dg.definitions
def defs() -> dg.Definitions:
    """Entry point of the code location: settings are read now, at load, never at import."""
    return build_definitions(dict(os.environ))
