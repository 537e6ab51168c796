"""The connectors asset: one partition per registered connector, one poll per run.

Materialising partition ``<gw>/<name>`` polls that connector once
(:func:`lakesync_platform.pipeline.connectors.run_connector`) and records what the run did
as metadata: records fetched, WAL entries by operation, pages and API calls, each stream's
cursor before and after, duration, and for HTTP sources the API quota used, why the run
stopped early (``quota reached``) and the delete census. A failed poll fails the run (its
cursors stay at the last committed page). The asset check ``census_consistent`` says whether
the last census ran when due and found the ids consistent
(:func:`~lakesync_platform.pipeline.connectors.check_census`).
"""

from typing import Any

import dagster as dg

from lakesync_platform.pipeline.connectors import check_census, connector_config, run_connector
from resources.connector_runs import CONNECTOR_JOB, CONNECTOR_PARTITIONS, split_connector_key
from resources.lakesync import LakeSyncResource

__all__ = ["build_connector_defs"]


def build_connector_defs() -> dg.Definitions:
    """The connectors asset, its census check and its job."""
    key = dg.AssetKey(["lakesync_connectors"])

    @dg.asset(
        key=key,
        partitions_def=CONNECTOR_PARTITIONS,
        group_name="connectors",
        kinds={"python", "spark"},
        description="Source connectors polled into the WAL (one partition per connector).",
        check_specs=[
            dg.AssetCheckSpec(
                "census_consistent",
                asset=key,
                description="The last delete census ran when due and found the ids consistent.",
            )
        ],
    )
    def lakesync_connectors(
        context: dg.AssetExecutionContext, lakesync: LakeSyncResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]  # Dagster wants it bare with checks
        gw, name = split_connector_key(context.partition_key)
        ctx = lakesync.context()
        report = run_connector(ctx, gw, name)
        outcome = check_census(connector_config(ctx, gw, name), report)
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
        if report.quota is not None:
            metadata["quota"] = dg.MetadataValue.json(dict(report.quota))
        if report.stopped is not None:
            metadata["stopped"] = report.stopped
        if report.census is not None:
            metadata["census"] = dg.MetadataValue.json(dict(report.census))
        check = dg.AssetCheckResult(
            check_name="census_consistent",
            passed=outcome.passed,
            description=outcome.description,
            metadata=outcome.metadata,
        )
        return dg.MaterializeResult(metadata=metadata, check_results=[check])

    job = dg.define_asset_job(
        CONNECTOR_JOB,
        selection=[lakesync_connectors],
        description="Poll one connector (one partition) into the WAL.",
    )
    return dg.Definitions(assets=[lakesync_connectors], jobs=[job])
