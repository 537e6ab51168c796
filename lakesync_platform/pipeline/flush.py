"""The flush stage: WAL entries after the lake watermark → the gateway's Iceberg change log.

:func:`run_flush` is the entry point over :func:`lakesync_platform.spark.flush.flush_gateway`
(exactly once: the lake records the WAL range of each commit and reads it back first);
:func:`check_log_exactly_once` verifies the result against the WAL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..spark.flush import FlushResult, flush_gateway, lake_watermark
from ..spark.layout import deltas_table
from ..spark.wal_source import jdbc_source
from .context import CheckOutcome, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_log_exactly_once", "run_flush"]

_PAGE = 10_000


def run_flush(
    ctx: PipelineContext,
    gw: str,
    *,
    max_entries: int | None = None,
    after_commit: Callable[[FlushResult], None] | None = None,
) -> FlushResult:
    """Flush ``gw``'s WAL to its Iceberg change log (exactly once), holding the lake's lock."""
    source = jdbc_source(ctx.wal.url)
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("flush", gw):
        return flush_gateway(
            spark,
            ctx.lake_catalog,
            ctx.wal,
            source,
            gw,
            max_entries=max_entries,
            after_commit=after_commit,
        )


def check_log_exactly_once(ctx: PipelineContext, gw: str) -> CheckOutcome:
    """Every WAL entry up to the lake watermark is in ``lakesync_deltas`` exactly once (the
    entries above the hot WAL's floor: those below were trimmed, the lake holds them alone)."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("check of the change log", gw):
        return _check_log(ctx, spark, gw)


def _check_log(ctx: PipelineContext, spark: SparkSession, gw: str) -> CheckOutcome:
    from pyspark.sql import functions as F

    wal = ctx.wal
    mark = lake_watermark(spark, gw).cursor
    lake = spark.table(deltas_table(gw))
    stats = lake.agg(
        F.count("*").alias("rows"), F.countDistinct("cursor").alias("distinct")
    ).collect()[0]
    duplicates = int(stats["rows"]) - int(stats["distinct"])
    lake_cursors = {
        int(r["cursor"]) for r in lake.filter(F.col("cursor") <= mark).select("cursor").collect()
    }
    wal_cursors: set[int] = set()
    floor = wal.log_floor(gw)
    after = floor
    while True:
        page = [e for e in wal.read_entries(gw, after, _PAGE) if e.cursor <= mark]
        if not page:
            break
        wal_cursors.update(e.cursor for e in page)
        after = page[-1].cursor
    missing = len(wal_cursors - lake_cursors)
    passed = duplicates == 0 and missing == 0 and mark >= floor
    return CheckOutcome(
        passed,
        f"{len(wal_cursors)} WAL entries {floor + 1}..{mark}: {missing} missing, "
        f"{duplicates} duplicated",
        {
            "lake_rows": int(stats["rows"]),
            "missing": missing,
            "duplicates": duplicates,
            "watermark": mark,
            "wal_floor": floor,
        },
    )
