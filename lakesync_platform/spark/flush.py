"""Flush: WAL entries after the lake watermark → Iceberg ``lakesync_deltas`` (exactly once).

Protocol of one run for gateway ``gw``:

1. read the lake watermark ``W`` back from Iceberg: the highest ``lakesync.wal.to`` in the
   snapshot summaries of the current lineage (or ``max(cursor)`` if none carries it);
2. take the WAL's head ``M`` (optionally capped by ``max_entries``) and read ``(W, M]`` over JDBC;
3. commit those rows in **one** Iceberg commit whose summary records ``(W, M]``. The commit is
   an overwrite of ``cursor > W`` validated (serializable) from the snapshot ``W`` was read at:
   if another flush committed in between, this one fails instead of duplicating rows;
4. move the WAL's flush watermark to ``M`` (monotonic; only backlog accounting and trimming
   depend on it).

A crash before 3 changes nothing; a crash between 3 and 4 leaves the WAL watermark behind the
lake, and the next run starts from the lake's ``W`` (step 1), appends nothing twice and repairs
the WAL watermark. Hence every WAL entry lands in the lake exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from ..core.errors import CommitConflictError, FlushError
from .history import history_from_spark
from .layout import DELTAS_TABLE, WAL_FROM_PROP, WAL_TO_PROP, ensure_deltas_table
from .snapshots import SnapshotInfo, ancestors, current_snapshot
from .wal_source import JdbcSource, read_wal_entries

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FlushPlan",
    "FlushResult",
    "FlushWal",
    "LakeWatermark",
    "commit_flush",
    "flush_gateway",
    "lake_watermark",
    "plan_flush",
    "wal_to_log",
]

log = logging.getLogger(__name__)


class FlushWal(Protocol):
    """The part of :class:`~lakesync_platform.wal.store.WriteAheadLog` a flush uses."""

    def max_cursor(self, gw: str) -> int:
        """Last cursor handed out."""
        ...

    def set_flush_watermark(self, gw: str, cursor: int) -> None:
        """Record that the lake holds every entry up to ``cursor``."""
        ...

    def log_floor(self, gw: str) -> int:
        """The cursor up to which the WAL's log was trimmed (0: never)."""
        ...


@dataclass(frozen=True, slots=True)
class LakeWatermark:
    """The last WAL cursor the lake holds and the snapshot it was read at (``None``: empty)."""

    cursor: int
    snapshot_id: int | None


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one flush did: WAL range ``[from_cursor, to_cursor]``, rows and lake bytes written."""

    gateway_id: str
    from_cursor: int
    to_cursor: int
    entries: int
    lake_bytes: int
    snapshot_id: int | None
    seconds: float

    @property
    def empty(self) -> bool:
        """Whether there was nothing to flush."""
        return self.entries == 0


def wal_to_log(entries: DataFrame) -> DataFrame:
    """Pure transform: WAL rows (as read by ``read_wal_entries``) → change-log rows."""
    # SQL text: one call, where Column objects cost one per column and function.
    return entries.selectExpr(
        "`cursor`",
        "delta_id",
        "tbl AS `table`",
        "row_id",
        "op",
        "client_id",
        "hlc",
        "`columns`",
        "ingest_ms",
        "timestamp_millis(ingest_ms) AS ingest_ts",
        "size",
    )


def lake_watermark(spark: SparkSession, gw: str, catalog: Catalog | None = None) -> LakeWatermark:
    """Read back the last WAL cursor committed to ``gw``'s change log (0 when none).

    Flush commits carry their WAL range in the snapshot summary, and each one extends the
    previous (a flush validates that nothing was committed since the mark it read), so the
    newest ancestor that carries a mark holds the highest one. Snapshots without a mark
    (compaction, maintenance) are skipped; a lineage with no mark at all falls back to
    ``max(cursor)``.

    The snapshots are read by pyiceberg from ``catalog`` (the session's own catalog: a metadata
    read); without one, from the table's metadata tables by Spark SQL (Spark jobs).
    """
    name = ensure_deltas_table(spark, gw)
    current: int | None = None
    for snapshot in _lineage(spark, catalog, name):
        if current is None:
            current = snapshot.snapshot_id
        if WAL_TO_PROP in snapshot.summary:
            return LakeWatermark(snapshot.int_prop(WAL_TO_PROP), current)
    if current is None:
        return LakeWatermark(0, None)
    top = spark.sql(f"SELECT max(`cursor`) AS m FROM {name}").collect()[0]["m"]
    return LakeWatermark(int(top or 0), current)


def _lineage(spark: SparkSession, catalog: Catalog | None, name: str) -> Iterator[SnapshotInfo]:
    """The current snapshot of ``name`` and its ancestors, newest first."""
    if catalog is not None:
        yield from ancestors(catalog, name)
        return
    for entry in history_from_spark(spark, name).ancestors():
        yield SnapshotInfo(entry.snapshot_id, dict(entry.summary))


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """The WAL range one flush will commit: ``(mark.cursor, head]``."""

    gateway_id: str
    mark: LakeWatermark
    head: int


def plan_flush(
    spark: SparkSession,
    catalog: Catalog,
    wal: FlushWal,
    gw: str,
    *,
    max_entries: int | None = None,
) -> FlushPlan:
    """Read the lake watermark back and the WAL head: the range the next flush covers.

    Raises :class:`FlushError` when the WAL was trimmed past the lake's watermark (the lake was
    restored from an older state): the entries in between are gone from the WAL, and a flush
    must not skip them silently.
    """
    mark = lake_watermark(spark, gw, catalog)
    floor = wal.log_floor(gw)
    if mark.cursor < floor:
        raise FlushError(
            f"The lake holds {gw!r}'s log up to cursor {mark.cursor}, but the WAL was trimmed "
            f"up to {floor}: entries {mark.cursor + 1}..{floor} are in neither. Restore the "
            "change log (lakesync_deltas) from a backup that reaches the WAL's floor"
        )
    head = wal.max_cursor(gw)
    if max_entries is not None:
        head = min(head, mark.cursor + max_entries)
    return FlushPlan(gw, mark, max(head, mark.cursor))


def commit_flush(
    spark: SparkSession,
    catalog: Catalog,
    wal: FlushWal,
    source: JdbcSource,
    plan: FlushPlan,
    *,
    after_commit: Callable[[FlushResult], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FlushResult:
    """Commit ``plan``'s WAL range in one Iceberg commit, then move the WAL watermark.

    The commit fails with :class:`FlushError` when the change log moved since the plan's
    watermark was read (a concurrent flush), so a range is never committed twice.
    ``after_commit`` runs between the Iceberg commit and the WAL watermark update (crash tests
    inject a failure there).
    """
    from pyspark.sql import functions as F

    started = clock()
    gw, mark, head = plan.gateway_id, plan.mark, plan.head
    if head <= mark.cursor:
        wal.set_flush_watermark(gw, mark.cursor)
        return FlushResult(gw, mark.cursor + 1, mark.cursor, 0, 0, mark.snapshot_id, 0.0)
    rows = wal_to_log(read_wal_entries(spark, source, gw, mark.cursor, head))
    name = ensure_deltas_table(spark, gw)
    writer = rows.writeTo(name)
    writer = writer.option(f"snapshot-property.{WAL_FROM_PROP}", str(mark.cursor + 1))
    writer = writer.option(f"snapshot-property.{WAL_TO_PROP}", str(head))
    if mark.snapshot_id is not None:
        writer = writer.option("validate-from-snapshot-id", str(mark.snapshot_id))
    writer = writer.option("isolation-level", "serializable")
    try:
        writer.overwrite(F.col("cursor") > F.lit(mark.cursor))
    except Exception as exc:  # Spark's errors (classic or Connect): translate at the edge
        error = CommitConflictError if _conflict(exc) else FlushError
        raise error(f"Flush of {gw!r} to {DELTAS_TABLE} failed: {exc}") from exc
    after = current_snapshot(catalog, name)
    committed = None if after is None else after.summary.get(WAL_TO_PROP)
    if after is None or committed != str(head):
        raise FlushError(f"Flush of {gw!r}: lake watermark is {committed}, expected {head}")
    count = after.int_prop("added-records")
    size = after.int_prop("added-files-size")
    result = FlushResult(gw, mark.cursor + 1, head, count, size, after.snapshot_id, 0.0)
    if after_commit is not None:
        after_commit(result)
    wal.set_flush_watermark(gw, head)
    seconds = clock() - started
    log.info(
        "flushed %s entries of %s (%s..%s) in %.2fs", count, gw, mark.cursor + 1, head, seconds
    )
    return FlushResult(gw, mark.cursor + 1, head, count, size, after.snapshot_id, seconds)


_ATTEMPTS = 4
_CONFLICTS = ("ValidationException", "CommitFailedException", "Found conflicting files")


def _conflict(exc: BaseException) -> bool:
    """Whether Spark's error is an Iceberg commit that lost to another one."""
    return any(marker in str(exc) for marker in _CONFLICTS)


def flush_gateway(
    spark: SparkSession,
    catalog: Catalog,
    wal: FlushWal,
    source: JdbcSource,
    gw: str,
    *,
    max_entries: int | None = None,
    after_commit: Callable[[FlushResult], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FlushResult:
    """Flush ``gw``'s WAL entries after the lake watermark into ``lakesync_deltas``
    (``catalog``: pyiceberg over the session's catalog, for the snapshot summaries)."""
    started = clock()
    # A flush that lost to another commit of the same range (a run killed while its commit was
    # under way on the Spark Connect server, which went on) plans again from the watermark that
    # commit left: it flushes the rest, or finds nothing to do. Nothing is ever doubled.
    retrying = Retrying(
        retry=retry_if_exception_type(CommitConflictError),
        stop=stop_after_attempt(_ATTEMPTS),
        wait=wait_exponential(multiplier=0.5, max=4),
        reraise=True,
    )
    for attempt in retrying:
        with attempt:
            plan = plan_flush(spark, catalog, wal, gw, max_entries=max_entries)
            result = commit_flush(
                spark, catalog, wal, source, plan, after_commit=after_commit, clock=clock
            )
    return FlushResult(
        result.gateway_id,
        result.from_cursor,
        result.to_cursor,
        result.entries,
        result.lake_bytes,
        result.snapshot_id,
        clock() - started,
    )
