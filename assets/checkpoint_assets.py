"""The checkpoint asset, its check and job of one gateway.

``<gw>/checkpoint`` is every live row of the gateway at one cursor, written from the state
tables (:func:`lakesync_platform.pipeline.checkpoint.run_checkpoint`) as chunks plus a manifest
that the gateway serves to new clients. It depends on the state tables but lives in a group of
its own (``<gw>_checkpoints``), so the sync job, which runs the gateway's group, does not write
a checkpoint after every flush: the job ``checkpoint_<gw>`` does, launched by a schedule and by
the checkpoint sensor (:mod:`sensors.checkpoints`). Its runs carry the gateway's run tag, so
they queue behind the gateway's sync run under the per-gateway concurrency limit.
"""

from collections.abc import Mapping

import dagster as dg

from lakesync_platform.core.schema import TableSchema
from lakesync_platform.pipeline.checkpoint import check_checkpoint, run_checkpoint
from resources.lakesync import LakeSyncResource
from resources.sync_runs import GATEWAY_TAG, checkpoint_job_name

from .gateway_assets import lake_asset_keys

__all__ = ["build_checkpoint_defs", "checkpoint_key"]


def checkpoint_key(gw: str) -> dg.AssetKey:
    """The key of ``gw``'s checkpoint asset."""
    return dg.AssetKey([gw.replace("-", "_"), "checkpoint"])


def build_checkpoint_defs(gw: str, tables: Mapping[str, TableSchema]) -> dg.Definitions:
    """The checkpoint asset of ``gw`` (downstream of the state of ``tables``), its check and
    job."""
    key = checkpoint_key(gw)

    @dg.asset(
        key=key,
        deps=lake_asset_keys(gw, tables)[1:],  # the state tables (after the change log)
        group_name=f"{key.path[0]}_checkpoints",
        kinds={"iceberg", "spark"},
        description=(
            f"Initial-sync checkpoint of gateway {gw!r}: every live row at one cursor, read from "
            "one consistent cut of the state tables (tagged lakesync-checkpoint-<cursor>), "
            "written as chunks plus a manifest that the gateway serves to new clients."
        ),
    )
    def checkpoint(lakesync: LakeSyncResource) -> dg.MaterializeResult:
        result = run_checkpoint(lakesync.context(), gw)
        return dg.MaterializeResult(
            metadata={
                "cursor": result.cursor,
                "written": result.written,
                "rows": result.rows,
                "chunks": result.chunks,
                "bytes": result.bytes,
                "removed": result.removed,
                "seconds": round(result.seconds, 3),
                "location": lakesync.context().settings.checkpoint_root,
            }
        )

    @dg.asset_check(
        asset=key,
        name="whole",
        description=(
            "Every chunk of the current checkpoint decodes to rows of the table it names, and "
            "each table's rows are the live rows of its state table at the tagged snapshot."
        ),
    )
    def checkpoint_whole(lakesync: LakeSyncResource) -> dg.AssetCheckResult:
        outcome = check_checkpoint(lakesync.context(), gw)
        metadata = {
            k: ", ".join(map(str, v)) if isinstance(v, list) else v
            for k, v in outcome.metadata.items()
        }
        return dg.AssetCheckResult(
            passed=outcome.passed, description=outcome.description, metadata=metadata
        )

    job = dg.define_asset_job(
        checkpoint_job_name(gw),
        selection=dg.AssetSelection.assets(key),
        description=f"Write the initial-sync checkpoint of gateway {gw!r}.",
        tags={GATEWAY_TAG: gw},
    )
    return dg.Definitions(assets=[checkpoint], asset_checks=[checkpoint_whole], jobs=[job])
