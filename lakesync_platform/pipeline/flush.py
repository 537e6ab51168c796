"""The flush stage: WAL entries after the lake watermark → the gateway's Iceberg change log.

:func:`run_flush` is the entry point over :func:`lakesync_platform.spark.flush.flush_gateway`
(exactly once: the lake records the WAL range of each commit and reads it back first);
:func:`check_log_exactly_once` verifies what the latest flush committed against the WAL,
:func:`audit_log_exactly_once` the whole log (both count in Spark and in the WAL's database:
:mod:`lakesync_platform.spark.checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..spark.checks import (
    SAMPLE,
    CursorRange,
    count_log,
    duplicate_cursors,
    latest_flush_range,
    log_gaps,
    whole_log_range,
)
from ..spark.flush import FlushResult, flush_gateway
from ..spark.wal_source import jdbc_source
from .context import CheckOutcome, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["audit_log_exactly_once", "check_log_exactly_once", "run_flush"]


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
    """Every WAL entry the latest flush committed is in ``lakesync_deltas`` exactly once, and
    nothing lies past it (above the hot WAL's floor: entries below were trimmed, the lake holds
    them alone). Costs what the flush wrote: counts over its cursor range."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("check of the change log", gw):
        return _check_log(ctx, spark, gw, latest_flush_range(spark, gw))


def audit_log_exactly_once(ctx: PipelineContext, gw: str) -> CheckOutcome:
    """:func:`check_log_exactly_once` over every cursor up to the lake watermark (the audit
    job; Spark aggregates over the whole log, nothing collected)."""
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("audit of the change log", gw):
        return _check_log(ctx, spark, gw, whole_log_range(spark, gw))


def _check_log(
    ctx: PipelineContext, spark: SparkSession, gw: str, rng: CursorRange
) -> CheckOutcome:
    """The lake's rows of ``rng`` against the WAL's entries of it: both counted, cursors summed
    (a lost entry, a duplicate, or an entry in one and not the other changes a figure)."""
    wal = ctx.wal
    floor = wal.log_floor(gw)
    wal_first = max(rng.first, floor + 1)
    lake = count_log(spark, gw, rng, wal_first)
    span = wal.cursor_span(gw, wal_first, rng.last)
    duplicates = lake.rows - lake.distinct
    missing = max(span.entries - lake.in_wal_range, 0)
    same = (span.entries, span.cursor_sum) == (lake.in_wal_range, lake.cursor_sum)
    passed = duplicates == 0 and lake.above == 0 and same and rng.last >= floor
    sample: list[int] = duplicate_cursors(spark, gw, rng) if duplicates else []
    if not same:
        for gap in log_gaps(spark, gw, CursorRange(wal_first, rng.last)):
            sample += wal.cursors_between(gw, gap.first, gap.last, SAMPLE - len(sample))
            if len(sample) >= SAMPLE:
                break
    return CheckOutcome(
        passed,
        f"{span.entries} WAL entries {wal_first}..{rng.last}: {missing} missing, "
        f"{duplicates} duplicated, {lake.above} past the range",
        {
            "range": str(rng),
            "lake_rows": lake.rows,
            "wal_entries": span.entries,
            "missing": missing,
            "duplicates": duplicates,
            "past_range": lake.above,
            "fingerprint_matches": same,
            "sample": sample[:SAMPLE],
            "watermark": rng.last,
            "wal_floor": floor,
        },
    )
