"""Lake upkeep of one gateway as Dagster assets: compaction, then expiry, and their check.

Asset keys (group ``<gw>_upkeep``, apart from the sync job's group so a sync never compacts):

* ``<gw>/upkeep/compaction`` — small data files rewritten (bin-pack; state tables sorted by
  ``row_id`` with their deletes applied), position delete files and manifests rewritten, in
  every table of the gateway's namespace. Metadata: data files, delete files and bytes before and
  after (totals and per table), the snapshot id of every commit it made (read the lake as it
  left it with ``lakesync query --snapshot ID``);
* ``<gw>/upkeep/expiry`` — snapshots outside the time-travel window expired (never one a
  watermark, a tag or a branch needs) and orphan files removed. Metadata: snapshots before and
  expired, files deleted, orphans removed, each table's cut-off.

Check ``small_files`` (on compaction): no partition holds more than ``max_small_files`` small
data files. The job ``upkeep_<gw>`` runs all three; a schedule launches it by name
(``LAKESYNC_UPKEEP_CRON``, daily at 03:00 UTC by default).
"""

from collections.abc import Iterable
from typing import Any

import dagster as dg

from lakesync_platform.pipeline.upkeep import check_small_files, run_compaction, run_expiry
from lakesync_platform.spark.timetravel import format_ms
from resources.lakesync import LakeSyncResource
from resources.sync_runs import GATEWAY_TAG
from resources.upkeep_runs import upkeep_job_name

from .gateway_assets import lake_asset_keys

__all__ = ["build_upkeep_defs"]


def build_upkeep_defs(gw: str, tables: Iterable[str]) -> dg.Definitions:
    """The upkeep assets, check and job of ``gw`` (its lake assets as their upstream)."""
    lake_keys = lake_asset_keys(gw, tables)
    part = lake_keys[0].path[0]
    group = f"{part}_upkeep"
    compaction_key = dg.AssetKey([part, "upkeep", "compaction"])
    expiry_key = dg.AssetKey([part, "upkeep", "expiry"])

    @dg.asset(
        key=compaction_key,
        deps=lake_keys,
        group_name=group,
        kinds={"iceberg", "spark"},
        description=(
            f"Compaction of gateway {gw!r}'s lake tables: small data files (bin-pack; state "
            "tables sorted by row_id, deletes applied), position deletes and manifests rewritten."
        ),
    )
    def compaction(lakesync: LakeSyncResource) -> dg.MaterializeResult:
        results = run_compaction(lakesync.context(), gw)
        tables_meta: dict[str, Any] = {
            r.table: {
                "data_files": [r.before.data_files, r.after.data_files],
                "delete_files": [r.before.delete_files, r.after.delete_files],
                "bytes": [r.before.bytes, r.after.bytes],
                "snapshot_ids": [str(i) for i in r.snapshot_ids],
            }
            for r in results
        }
        return dg.MaterializeResult(
            metadata={
                "data_files_before": sum(r.before.data_files for r in results),
                "data_files_after": sum(r.after.data_files for r in results),
                "delete_files_before": sum(r.before.delete_files for r in results),
                "delete_files_after": sum(r.after.delete_files for r in results),
                "bytes_before": sum(r.before.bytes for r in results),
                "bytes_after": sum(r.after.bytes for r in results),
                "snapshot_ids": dg.MetadataValue.json(
                    {r.table: [str(i) for i in r.snapshot_ids] for r in results}
                ),
                "tables": dg.MetadataValue.json(tables_meta),
                "seconds": round(sum(r.seconds for r in results), 3),
            }
        )

    @dg.asset(
        key=expiry_key,
        deps=[compaction_key],
        group_name=group,
        kinds={"iceberg", "spark"},
        description=(
            f"Snapshot expiry and orphan-file removal in gateway {gw!r}'s lake tables: "
            "snapshots outside the time-travel window go, unless a watermark, tag or branch "
            "needs them."
        ),
    )
    def expiry(lakesync: LakeSyncResource) -> dg.MaterializeResult:
        results = run_expiry(lakesync.context(), gw)
        return dg.MaterializeResult(
            metadata={
                "snapshots_before": sum(r.snapshots_before for r in results),
                "snapshots_expired": sum(r.snapshots_expired for r in results),
                "files_deleted": sum(r.files_deleted for r in results),
                "orphans_removed": sum(r.orphans_removed for r in results),
                "tables": dg.MetadataValue.json(
                    {
                        r.table: {
                            "snapshots_before": r.snapshots_before,
                            "snapshots_expired": r.snapshots_expired,
                            "expired_before": format_ms(r.cutoff_ms),
                            "files_deleted": r.files_deleted,
                            "orphans_removed": r.orphans_removed,
                        }
                        for r in results
                    }
                ),
                "seconds": round(sum(r.seconds for r in results), 3),
            }
        )

    @dg.asset_check(
        asset=compaction_key,
        name="small_files",
        description="No partition of a lake table holds more than the allowed small files.",
    )
    def small_files(lakesync: LakeSyncResource) -> dg.AssetCheckResult:
        outcome = check_small_files(lakesync.context(), gw)
        return dg.AssetCheckResult(
            passed=outcome.passed, description=outcome.description, metadata=outcome.metadata
        )

    job = dg.define_asset_job(
        upkeep_job_name(gw),
        selection=dg.AssetSelection.groups(group),
        description=f"Compact gateway {gw!r}'s lake, expire old snapshots, remove orphans.",
        tags={GATEWAY_TAG: gw},
    )
    return dg.Definitions(assets=[compaction, expiry], asset_checks=[small_files], jobs=[job])
