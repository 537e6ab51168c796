"""The upkeep stage: compaction, snapshot expiry and orphan removal of a gateway's lake tables.

:func:`run_compaction` and :func:`run_expiry` go through every table in the gateway's namespace
(the change log, the state tables, anything else there) but the connectors' own
(:func:`~lakesync_platform.spark.layout.connector_table`: ``diff`` snapshots and census
known ids, which their connector replaces whole every run, files included — see
:mod:`lakesync_platform.spark.staged`), one table at a time, each holding the
lake's lock (:mod:`.lock`) — so flushes and state runs interleave with a long upkeep instead of
waiting for all of it, and no stage writes a table while upkeep rewrites it or lists its folder.
The Spark work is :mod:`lakesync_platform.spark.upkeep`; :func:`check_small_files` is the asset
check that compaction keeps up.

**The watermarks survive.** Each stage finds where it left off in the lake itself:

* flush — the lake watermark, ``lakesync.wal.to`` in the summary of the newest snapshot of the
  change log that carries it. Iceberg's procedures cannot stamp their commits, so compaction's
  rewrites are skipped on the way back to it, and when compaction committed to the change log
  it ends with one empty commit carrying the value read (under the lock) just before: after
  compaction the current snapshot holds it again. Expiry keeps the newest snapshot that
  carries it whatever its age, and the flush's fallback (``max(cursor)`` of the log,
  contiguous by construction) stays correct regardless. Compaction fails with
  :class:`FlushError` should the watermark read after it differ.
* state — ``max(_ls$cursor)`` of the state table's rows, which compaction rewrites unchanged;
  a state run reads the log at the snapshot the lake watermark was read at (the current one).
* materialise — the destination's own watermark table; it reads the current state snapshot.

So no stage needs a snapshot older than the current one, and expiry's cut-off is set by the
time-travel window, the tags and branches (checkpoints being generated pin their snapshots with
tags ``lakesync-checkpoint-<cursor>``) and the newest watermark-carrying snapshot of the log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..core.errors import FlushError
from ..spark.flush import lake_watermark
from ..spark.history import TableHistory
from ..spark.layout import CURSOR_COL, DELTAS_TABLE, WAL_TO_PROP, connector_table, namespace, q
from ..spark.upkeep import (
    CompactionResult,
    ExpiryResult,
    UpkeepPolicy,
    compact_table,
    expire_table,
)
from .context import CheckOutcome, PipelineContext, spark_settings
from .progress import Step, quiet_step

__all__ = [
    "LakeTable",
    "check_small_files",
    "lake_tables",
    "run_compaction",
    "run_expiry",
    "upkeep_policy",
]


@dataclass(frozen=True, slots=True)
class LakeTable:
    """One table of a gateway's namespace: its name, quoted full name and kind (``log``, the
    change log; ``state``, a state table; ``other``)."""

    name: str
    qualified: str
    kind: str


def upkeep_policy(ctx: PipelineContext) -> UpkeepPolicy:
    """The run's upkeep settings as the Spark jobs take them."""
    upkeep = ctx.settings.upkeep
    return UpkeepPolicy(
        min_input_files=upkeep.min_input_files,
        target_file_bytes=upkeep.target_file_bytes,
        delete_file_threshold=upkeep.delete_file_threshold,
        retention_ms=round(upkeep.snapshot_retention_s * 1000),
        orphan_age_ms=round(upkeep.orphan_age_s * 1000),
        # Object stores are listed through Iceberg's FileIO (Hadoop knows no s3:// scheme here).
        prefix_listing=spark_settings(ctx.settings).warehouse_on_s3,
    )


def lake_tables(ctx: PipelineContext, gw: str) -> list[LakeTable]:
    """Every table in ``gw``'s namespace but the connectors' own, the change log first (none
    before its first flush)."""
    from pyspark.errors import AnalysisException

    spark = ctx.spark
    ns = namespace(gw)
    try:
        rows = spark.sql(f"SHOW TABLES IN {ns}").collect()
    except AnalysisException:  # no namespace yet: nothing flushed
        return []
    out = []
    for row in rows:
        name = str(row["tableName"])
        if row["isTemporary"] or connector_table(name):
            continue
        qualified = f"{ns}.{q(name)}"
        if name == DELTAS_TABLE:
            kind = "log"
        elif {"row_id", CURSOR_COL} <= set(spark.table(qualified).columns):
            kind = "state"
        else:
            kind = "other"
        out.append(LakeTable(name, qualified, kind))
    return sorted(out, key=lambda t: (t.kind != "log", t.name))


def run_compaction(
    ctx: PipelineContext, gw: str, *, step: Step = quiet_step
) -> list[CompactionResult]:
    """Compact every lake table of ``gw``, each under the lake's lock (see the module
    docstring for the change log's watermark)."""
    policy = upkeep_policy(ctx)
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    catalog = ctx.lake_catalog
    results = []
    for table in lake_tables(ctx, gw):
        with step(f"compact {gw}.{table.name}"), ctx.exclusive("compaction", gw):
            properties: dict[str, str] = {}
            mark = None
            if table.kind == "log":
                mark = lake_watermark(spark, gw, catalog).cursor
                properties[WAL_TO_PROP] = str(mark)
            result = compact_table(
                spark,
                catalog,
                gw,
                table.name,
                table.qualified,
                policy,
                sort_by_row_id=table.kind == "state",
                properties=properties,
            )
            if mark is not None and (after := lake_watermark(spark, gw, catalog).cursor) != mark:
                raise FlushError(
                    f"compaction of {gw!r} moved the lake watermark from {mark} to {after}"
                )
        results.append(result)
    return results


def _newest_marked(history: TableHistory) -> Iterable[int]:
    """The newest snapshot of the change log's lineage that carries the lake watermark."""
    for snapshot in history.ancestors():
        if WAL_TO_PROP in snapshot.summary:
            return (snapshot.snapshot_id,)
    return ()


def run_expiry(
    ctx: PipelineContext,
    gw: str,
    *,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    step: Step = quiet_step,
) -> list[ExpiryResult]:
    """Expire old snapshots and remove orphan files in every lake table of ``gw``, each under
    the lake's lock: no pipeline stage has files in flight while a table's folder is listed."""
    policy = upkeep_policy(ctx)
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    catalog = ctx.lake_catalog
    results = []
    for table in lake_tables(ctx, gw):
        with step(f"expire {gw}.{table.name}"), ctx.exclusive("expiry", gw):
            results.append(
                expire_table(
                    spark,
                    catalog,
                    gw,
                    table.name,
                    table.qualified,
                    policy,
                    now_ms=now_ms(),
                    keep=_newest_marked if table.kind == "log" else lambda _: (),
                )
            )
    return results


def check_small_files(ctx: PipelineContext, gw: str) -> CheckOutcome:
    """No partition of any lake table of ``gw`` holds more than ``max_small_files`` data files
    under the small-file size (75 % of compaction's target)."""
    limit = ctx.settings.upkeep.max_small_files
    small = upkeep_policy(ctx).small_file_bytes
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    worst: dict[str, int] = {}
    where: dict[str, str] = {}
    with ctx.exclusive("check of small files", gw):
        for table in lake_tables(ctx, gw):
            files = f"{table.qualified}.files"
            partitioned = "partition" in spark.table(files).columns
            key = "CAST(`partition` AS string)" if partitioned else "''"
            rows = spark.sql(
                f"SELECT {key} AS p, count_if(file_size_in_bytes < {small}) AS n "
                f"FROM {files} WHERE content = 0 GROUP BY 1 ORDER BY n DESC LIMIT 1"
            ).collect()
            worst[table.name] = int(rows[0]["n"]) if rows else 0
            where[table.name] = str(rows[0]["p"]) if rows else ""
    top = max(worst, key=lambda t: worst[t], default=None)
    most = worst[top] if top is not None else 0
    passed = most <= limit
    place = f" ({top} {where[top]})".replace(" )", ")") if top is not None and most else ""
    return CheckOutcome(
        passed,
        f"at most {most} small files in a partition{place}; limit {limit}",
        {
            "max_small_files": most,
            "limit": limit,
            "small_file_bytes": small,
            "worst_table": top or "",
            "worst_partition": where.get(top, "") if top else "",
            **{f"small_files.{t}": n for t, n in sorted(worst.items())},
        },
    )
