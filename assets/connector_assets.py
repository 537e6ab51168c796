"""The connectors asset: one partition per registered connector, one poll per run.

Materialising partition ``<gw>/<name>`` polls that connector once
(:func:`lakesync_platform.pipeline.connectors.run_connector`) and records what the run did
as metadata: records fetched, WAL entries by operation, pages and API calls, each stream's
cursor before and after, duration. A failed poll fails the run (its cursors stay at the last
committed page).
"""

from typing import Any

import dagster as dg

from lakesync_platform.pipeline.connectors import run_connector
from resources.connector_runs import CONNECTOR_JOB, CONNECTOR_PARTITIONS, split_connector_key
from resources.lakesync import LakeSyncResource

__all__ = ["build_connector_defs"]


def build_connector_defs() -> dg.Definitions:
    """The connectors asset and its job."""

    @dg.asset(
        key=dg.AssetKey(["lakesync_connectors"]),
        partitions_def=CONNECTOR_PARTITIONS,
        group_name="connectors",
        kinds={"python", "spark"},
        description="Source connectors polled into the WAL (one partition per connector).",
    )
    def lakesync_connectors(
        context: dg.AssetExecutionContext, lakesync: LakeSyncResource
    ) -> dg.MaterializeResult[None]:
        gw, name = split_connector_key(context.partition_key)
        report = run_connector(lakesync.context(), gw, name)
        metadata: dict[str, Any] = {
            "records_fetched": report.records,
            "deltas": dg.MetadataValue.json(report.deltas),
            "pages": sum(s.pages for s in report.streams),
            "api_calls": sum(s.api_calls for s in report.streams),
            "cursor_before": dg.MetadataValue.json(
                {s.stream: dict(s.state_before) for s in report.streams}
            ),
            "cursor_after": dg.MetadataValue.json(
                {s.stream: dict(s.state_after) for s in report.streams}
            ),
            "duration_s": round(report.seconds, 3),
        }
        return dg.MaterializeResult(metadata=metadata)

    job = dg.define_asset_job(
        CONNECTOR_JOB,
        selection=[lakesync_connectors],
        description="Poll one connector (one partition) into the WAL.",
    )
    return dg.Definitions(assets=[lakesync_connectors], jobs=[job])
