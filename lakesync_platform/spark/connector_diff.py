"""The SQL ``diff`` strategy as a Spark job: a source table against its previous snapshot.

One run of :class:`SnapshotDiff` reads the source (a table, or a query) over JDBC once into a
*staging* Iceberg table — ``_ls_row_id`` and ``_ls_row``, the row as JSON — full-outer-joins
it on the row id with the connector's *snapshot* table (both in the gateway's namespace,
``_ls_snapshot__<connector>__<table>`` and ``…__staging``), and streams the rows whose JSON
differs to the driver, partition by partition: a row only in staging is an insert, only in the
snapshot a delete, in both but different an update. Only after the caller has committed every
change to the WAL does :meth:`SnapshotDiff.promote` make the staging table the snapshot — by
catalog operations, no row copied (:mod:`.staged`: a mark, a drop with its files, a rename).

**The snapshot is what the WAL holds of the source**, row by row — or, where a run died
midway, ``_ls_row`` null: *unknown*. A run that dies before promoting may have committed part
of its changes; the next run finds its staging table not ready and, before anything else,
marks unknown every row that run may have sent (those where its staging and the snapshot
differ: ``MERGE``) and promotes it. A row marked unknown differs from every source row, so the
next comparison sends it again as it is at the source now — an insert or update that appends
only what the WAL lacks, or a delete that appends nothing if the row is gone — and a change
that run sent and the source undid since (a row inserted then deleted, a value changed back)
still reaches the WAL. A run that died after its mark finishes the swap; one that died while
staging (no rows written) is discarded. See :mod:`.staged` for the other crash points.

**Reading the source.** A table whose row id is an integer is read in ranges of the id
(Spark's ``partitionColumn``: one query per range, run in parallel, bounds from ``MIN`` and
``MAX`` of the id, at most as many ranges as Spark's default parallelism) when it spans at
least two ranges of ``rows_per_read`` ids (default 100 000); a query, or a
row id of another type, is read by one query. Ranges are separate queries, so a row whose id
changes during the read may be missed or seen twice under its two ids for one poll; the next
poll corrects it.

Why Spark: the comparison touches every row of both sides (a million rows in a poll); Spark
spills the join to disk and keeps the driver's memory to one partition of *changes*.

The delete census of the HTTP sources (:mod:`.connector_census`) compares id lists the same
way: a staging table, a comparison, and the staging table kept only once the WAL committed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.connectors import SqlTable
from ..core.delta import check_identifier
from .layout import SNAPSHOT_PREFIX, namespace, q, table_exists
from .staged import StagedSwap
from .wal_source import JdbcSource, default_parallelism

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession

__all__ = ["SnapshotDiff", "snapshot_table"]

log = logging.getLogger(__name__)

_ROWS_PER_PARTITION = 50_000
_ROWS_PER_READ = 100_000
_ROW_ID = "_ls_row_id"
_ROW = "_ls_row"
_COLUMNS = f"{_ROW_ID} STRING, {_ROW} STRING"
_INTEGRAL = frozenset({"ByteType", "ShortType", "IntegerType", "LongType"})


def snapshot_table(gw: str, connector: str, table: str, suffix: str = "") -> str:
    """The quoted, qualified name of a connector's snapshot of ``table`` (or its staging)."""
    return f"{namespace(gw)}.{q(_snapshot_name(connector, table) + suffix)}"


def _snapshot_name(connector: str, table: str) -> str:
    check_identifier(connector, "connector")
    check_identifier(table, "table")
    return f"{SNAPSHOT_PREFIX}{connector}__{table}"


@dataclass
class SnapshotDiff:
    """The diff of one SQL table of one connector (see the module docstring). ``seconds``
    holds the time each step of this run took (also logged)."""

    spark: SparkSession
    catalog: Catalog
    source: JdbcSource
    spec: SqlTable
    gw: str
    connector: str
    fetch_size: int = 10_000
    rows_per_read: int = _ROWS_PER_READ
    seconds: dict[str, float] = field(default_factory=dict)
    _swap: StagedSwap | None = field(default=None, repr=False)

    @property
    def tables(self) -> StagedSwap:
        """The snapshot and its staging table."""
        if self._swap is None:
            name = _snapshot_name(self.connector, self.spec.table)
            self._swap = StagedSwap(self.spark, self.catalog, self.gw, name)
        return self._swap

    @property
    def snapshot(self) -> str:
        """The snapshot table (what the WAL holds of the source since the last run)."""
        return self.tables.target

    @property
    def staging(self) -> str:
        """The staging table (the source as read by this run)."""
        return self.tables.staging

    def _timed(self, step: str, started: float) -> None:
        seconds = time.monotonic() - started
        self.seconds[step] = self.seconds.get(step, 0.0) + seconds
        log.info(
            "diff %s/%s.%s: %s took %.2f s",
            self.gw,
            self.connector,
            self.spec.table,
            step,
            seconds,
            extra={"diff_step": step, "seconds": seconds},
        )

    def recover(self) -> None:
        """Finish what an earlier run of this table left half done (module docstring)."""
        started = time.monotonic()
        staged = self.tables.staged()
        if staged is None:
            return
        if not staged.ready:
            if staged.records is None:  # died while staging: nothing was compared or sent
                self.tables.discard()
                self._timed("recover", started)
                return
            self._mark_sent_rows_unknown()
            self.tables.mark_ready()
        self.tables.swap()
        self._timed("recover", started)

    def _mark_sent_rows_unknown(self) -> None:
        """In the staging table of a run that died before promoting: ``_ls_row`` null for
        every row it may have sent (where it differs from the snapshot, or is missing)."""
        spark, staging, rid, row = self.spark, self.staging, _ROW_ID, _ROW
        if not spark.table(staging).schema[row].nullable:  # staged by an earlier release
            spark.sql(f"ALTER TABLE {staging} ALTER COLUMN {row} DROP NOT NULL")
        if not table_exists(spark, self.snapshot):
            spark.sql(f"UPDATE {staging} SET {row} = NULL")
            return
        spark.sql(
            f"MERGE INTO {staging} t USING ("
            f"SELECT coalesce(s.{rid}, p.{rid}) AS {rid} FROM {staging} s "
            f"FULL OUTER JOIN {self.snapshot} p ON s.{rid} = p.{rid} "
            f"WHERE NOT coalesce(s.{row} = p.{row}, false)) d ON t.{rid} = d.{rid} "
            f"WHEN MATCHED THEN UPDATE SET t.{row} = NULL "
            f"WHEN NOT MATCHED THEN INSERT ({rid}, {row}) VALUES (d.{rid}, NULL)"
        )

    def _reader(self) -> DataFrameReader:
        dbtable = (
            f"({self.spec.query}) _src" if self.spec.query is not None else self.spec.source_sql
        )
        return (
            self.spark.read.format("jdbc")
            .options(**self.source.options())
            .option("dbtable", dbtable)
            .option("fetchsize", str(self.fetch_size))
        )

    def _read_source(self) -> DataFrame:
        from pyspark.sql import functions as F

        df = self._reader().load()
        rid = self.spec.row_id_column
        ranges = self._id_ranges(type(df.schema[rid].dataType).__name__)
        if ranges is not None:
            low, high, parts = ranges
            df = (
                self._reader()
                .option("partitionColumn", rid)
                .option("lowerBound", str(low))
                .option("upperBound", str(high + 1))
                .option("numPartitions", str(parts))
                .load()
            )
        others = [c for c in df.columns if c != rid]
        return df.select(
            F.col(rid).cast("string").alias(_ROW_ID),
            F.to_json(F.struct(*[F.col(c) for c in others]), {"ignoreNullFields": "false"}).alias(
                _ROW
            ),
        )

    def _id_ranges(self, id_type: str) -> tuple[int, int, int] | None:
        """``(lowest id, highest id, ranges)`` to read a table in parallel, or ``None``."""
        if self.spec.query is not None or id_type not in _INTEGRAL:
            return None
        col = self.source.quote_identifier(self.spec.row_id_column)
        query = f"SELECT MIN({col}) AS lo, MAX({col}) AS hi FROM {self.spec.source_sql}"
        reader = self.spark.read.format("jdbc").options(**self.source.options())
        bounds = reader.option("query", query).load().collect()[0]
        if bounds["lo"] is None:
            return None
        low, high = int(bounds["lo"]), int(bounds["hi"])
        parts = min(default_parallelism(self.spark), (high - low + 1) // self.rows_per_read)
        return (low, high, parts) if parts >= 2 else None

    def stage(self) -> int:
        """Recover an earlier run's leftovers, then read the source once into a new staging
        table; return its row count (from the commit's summary: no second read)."""
        self.recover()
        started = time.monotonic()
        self.tables.create_staging(_COLUMNS)
        self._read_source().writeTo(self.staging).append()
        staged = self.tables.staged()
        rows = staged.records if staged is not None and staged.records is not None else 0
        self._timed("stage", started)
        return rows

    def changes(self, staged_rows: int) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """``(row_id, row or None for a delete)`` of every row that differs from the snapshot,
        streamed to the driver one partition at a time (at most about ``_ROWS_PER_PARTITION``
        rows each, however many of the ``staged_rows`` changed: the join runs once, its
        shuffle output is read back partition by partition). The first run (no snapshot)
        sends every staged row, without a join."""
        from pyspark.sql import functions as F

        started, waiting = time.monotonic(), 0.0
        cur = self.spark.table(self.staging).alias("cur")
        diff = cur
        if table_exists(self.spark, self.snapshot):
            prev = self.spark.table(self.snapshot).select(_ROW_ID, _ROW).alias("prev")
            joined = cur.join(
                prev, F.col(f"cur.{_ROW_ID}") == F.col(f"prev.{_ROW_ID}"), "full_outer"
            )
            # equal only when both hold the row and the same JSON (an unknown row is null)
            same = F.coalesce(F.col(f"cur.{_ROW}") == F.col(f"prev.{_ROW}"), F.lit(False))
            diff = joined.where(~same).select(
                F.coalesce(F.col(f"cur.{_ROW_ID}"), F.col(f"prev.{_ROW_ID}")).alias(_ROW_ID),
                F.col(f"cur.{_ROW}").alias(_ROW),
            )
        parts = max(1, -(-staged_rows // _ROWS_PER_PARTITION))
        for row in diff.repartition(parts, _ROW_ID).toLocalIterator(prefetchPartitions=False):
            body = row[_ROW]
            handed = time.monotonic()
            yield row[_ROW_ID], None if body is None else json.loads(body)
            waiting += time.monotonic() - handed
        self._timed("compare", started + waiting)

    def promote(self) -> None:
        """Make the staging table the snapshot (call once the WAL committed every change)."""
        started = time.monotonic()
        self.tables.mark_ready()
        self.tables.swap()
        self._timed("promote", started)
