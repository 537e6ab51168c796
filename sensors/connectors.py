"""The connector sensor: registered connectors become partitions and run on their cron.

Each tick reads the registered connectors of every gateway from the config store (declared
ones are applied first), adds a partition for each new one and deletes the partitions of
unregistered ones — so a connector registered through the admin route runs without restarting
the gateway or Dagster, and one deleted stops — and requests a run of each connector whose
``schedule`` ticked since the previous evaluation (the sensor's cursor, epoch seconds). The
run key is the partition and the tick, so one tick launches at most one run per connector.
Connectors of types that are not polled (``bigquery``, a pull source) get a partition but no
scheduled run.
"""

import time
from collections.abc import Callable

import dagster as dg

from lakesync_platform.core.connectors import POLLED_TYPES
from lakesync_platform.pipeline.connectors import due_tick, registered_connectors
from resources.connector_runs import CONNECTOR_JOB, CONNECTOR_PARTITIONS, connector_key
from resources.lakesync import LakeSyncResource

__all__ = ["build_connector_sensor"]


def build_connector_sensor(clock: Callable[[], float] = time.time) -> dg.SensorDefinition:
    """The sensor that schedules every registered connector."""

    @dg.sensor(
        name="lakesync_connectors_schedule",
        job_name=CONNECTOR_JOB,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Poll each registered connector on its cron; follow registrations.",
    )
    def connector_sensor(
        context: dg.SensorEvaluationContext, lakesync: LakeSyncResource
    ) -> dg.SensorResult:
        now = clock()
        since = float(context.cursor) if context.cursor else now - 60
        wanted = {
            connector_key(gw, cfg.name): cfg
            for gw, cfg in registered_connectors(lakesync.context())
        }
        existing = set(context.instance.get_dynamic_partitions(CONNECTOR_PARTITIONS.name or ""))
        added = sorted(set(wanted) - existing)
        removed = sorted(existing - set(wanted))
        requests = []
        for key, cfg in sorted(wanted.items()):
            tick = due_tick(cfg.schedule, since, now)
            if tick is not None and cfg.type in POLLED_TYPES:
                requests.append(
                    dg.RunRequest(
                        run_key=f"{key}@{tick}",
                        partition_key=key,
                        tags={"lakesync/trigger": "schedule", "lakesync/connector": key},
                    )
                )
        partition_requests: list[
            dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest
        ] = []
        if added:
            partition_requests.append(CONNECTOR_PARTITIONS.build_add_request(added))
        if removed:
            partition_requests.append(CONNECTOR_PARTITIONS.build_delete_request(removed))
        context.update_cursor(str(now))
        return dg.SensorResult(
            run_requests=requests, dynamic_partitions_requests=partition_requests
        )

    return connector_sensor
