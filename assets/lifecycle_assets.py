"""The lifecycle job of one gateway: the hot WAL trimmed, destination rows tiered.

Asset keys (group ``<gw>_lifecycle``, apart from the sync job's group so the sync job never
runs them):

* ``<gw>/hot_wal`` — the gateway's hot WAL: each run trims what the lake holds by the retention
  (metadata: entries and delta ids trimmed, the WAL's floor, entries left, bytes on disk); its
  check ``retention_holds`` fails when the lake lags the floor or trimming stopped;
* ``<gw>/<cold>/<table>`` — the cold tier of each table of a destination with a ``lifecycle``
  block (metadata: rows moved, kept hot, released), downstream of the hot destination table.

The job ``lifecycle_<gw>`` runs them on the hourly schedule (``sensors.schedules``).
"""

from collections.abc import Iterator, Mapping

import dagster as dg

from lakesync_platform.declarations import DestinationDecl
from lakesync_platform.pipeline.lifecycle import check_wal_retention, run_trim
from lakesync_platform.pipeline.tiering import run_tiering
from resources.lakesync import LakeSyncResource
from resources.sync_runs import lifecycle_job_name

from .gateway_assets import LAYER_TAG

__all__ = ["build_lifecycle_defs"]


def build_lifecycle_defs(
    gw: str, tables: list[str], destinations: Mapping[str, DestinationDecl]
) -> dg.Definitions:
    """The lifecycle assets, check and job of ``gw`` (``destinations``: all its declared ones,
    cold tiers included)."""
    part = gw.replace("-", "_")
    group = f"{part}_lifecycle"
    wal_key = dg.AssetKey([part, "hot_wal"])
    after_s = {n: d.lifecycle.after_s for n, d in destinations.items() if d.lifecycle is not None}
    cold_keys = {
        (name, dest.lifecycle.to, t): dg.AssetKey([part, dest.lifecycle.to, t])
        for name, dest in destinations.items()
        if dest.lifecycle is not None
        for t in tables
        if dest.covers(t)
    }
    specs = [
        dg.AssetSpec(
            wal_key,
            group_name=group,
            kinds={"sql"},
            description=(
                f"The hot WAL of gateway {gw!r}: log entries the lake holds are trimmed by the "
                "retention (LAKESYNC_WAL_RETENTION_SECONDS / _ENTRIES), old delta ids forgotten "
                "(LAKESYNC_DEDUP_RETENTION_SECONDS)."
            ),
        ),
        *(
            dg.AssetSpec(
                key,
                deps=[dg.AssetKey([part, hot, t])],
                group_name=group,
                kinds={destinations[cold].kind},
                tags={LAYER_TAG: "destination"},
                description=(
                    f"{t!r} in cold destination {cold!r}: rows of {hot!r} no run wrote for "
                    f"{after_s[hot]:.0f} s (a row that changes again goes back to the hot tier)."
                ),
                skippable=True,
            )
            for (hot, cold, t), key in cold_keys.items()
        ),
    ]

    @dg.multi_asset(
        name=f"{part}__lifecycle",
        specs=specs,
        check_specs=[dg.AssetCheckSpec("retention_holds", asset=wal_key)],
    )
    def lifecycle(
        context: dg.AssetExecutionContext, lakesync: LakeSyncResource
    ) -> Iterator[dg.MaterializeResult[None] | dg.AssetCheckResult]:
        ctx = lakesync.context()
        trimmed = run_trim(ctx, gw)
        yield dg.MaterializeResult(
            asset_key=wal_key,
            metadata={
                "entries_trimmed": trimmed.entries_trimmed,
                "ids_trimmed": trimmed.ids_trimmed,
                "wal_floor": trimmed.log_floor,
                "wal_entries": trimmed.log_entries,
                "wal_bytes": dg.MetadataValue.int(trimmed.wal_bytes),
                "wal_free_bytes": dg.MetadataValue.int(trimmed.wal_free_bytes or 0),
                "lake_watermark": trimmed.lake_watermark,
                "dedup_horizon_hlc": str(trimmed.dedup_horizon),
                "seconds": round(trimmed.seconds, 3),
            },
        )
        outcome = check_wal_retention(ctx, gw)
        yield dg.AssetCheckResult(
            asset_key=wal_key,
            check_name="retention_holds",
            passed=outcome.passed,
            description=outcome.description,
            metadata={k: str(v) for k, v in outcome.metadata.items()},
        )
        for r in run_tiering(ctx, gw):
            key = cold_keys.get((r.destination, r.cold, r.table))
            if key is None:
                context.log.info(f"tiered a table registered at runtime: {r}")
                continue
            yield dg.MaterializeResult(
                asset_key=key,
                metadata={
                    "rows_moved": r.moved,
                    "kept_hot": r.kept,
                    "released": r.released,
                    "seconds": round(r.seconds, 3),
                },
            )

    job = dg.define_asset_job(
        lifecycle_job_name(gw),
        selection=dg.AssetSelection.groups(group),
        description=f"Trim gateway {gw!r}'s hot WAL; move old destination rows to cold tiers.",
        tags={"lakesync/lifecycle": gw},
    )
    return dg.Definitions(assets=[lifecycle], jobs=[job])
