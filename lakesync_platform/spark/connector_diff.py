"""The SQL ``diff`` strategy as a Spark job: a source table against its previous snapshot.

One run of :class:`SnapshotDiff` reads the source (a table, or a query) over JDBC once into a
*staging* Iceberg table, full-outer-joins it on the row id with the connector's *snapshot*
table (both in the gateway's namespace, ``_ls_snapshot__<connector>__<table>`` and
``…__staging``), and streams the rows whose JSON differs to the driver, partition by
partition: a row only in staging is an insert, only in the snapshot a delete, in both but
different an update. Only after the caller has committed every change to the WAL does
:meth:`SnapshotDiff.promote` replace the snapshot with the staging table (an atomic Iceberg
``REPLACE TABLE … AS SELECT``). A run that dies before that diffs the same old snapshot next
time: the changes it re-sends are already in the WAL and append nothing.

Why Spark: the comparison touches every row of both sides (a million rows in a poll); Spark
spills the join to disk and keeps the driver's memory to one partition of *changes*.

The delete census of the HTTP sources (:mod:`.connector_census`) compares id lists the same
way: a staging table, a comparison, and the staging table kept only once the WAL committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.connectors import SqlTable
from ..core.delta import check_identifier
from .layout import namespace, q, table_exists
from .wal_source import JdbcSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SnapshotDiff", "promote_staging", "snapshot_table"]

_ROWS_PER_PARTITION = 50_000
_ROW_ID = "_ls_row_id"
_ROW = "_ls_row"


def snapshot_table(gw: str, connector: str, table: str, suffix: str = "") -> str:
    """The quoted, qualified name of a connector's snapshot of ``table`` (or its staging)."""
    check_identifier(connector, "connector")
    check_identifier(table, "table")
    return f"{namespace(gw)}.{q(f'_ls_snapshot__{connector}__{table}{suffix}')}"


def promote_staging(spark: SparkSession, target: str, staging: str) -> None:
    """Replace ``target`` by ``staging`` (one atomic Iceberg ``REPLACE TABLE … AS SELECT``),
    then drop ``staging``. Call once the WAL committed every change the comparison gave."""
    spark.sql(f"CREATE OR REPLACE TABLE {target} USING iceberg AS SELECT * FROM {staging}")
    spark.sql(f"DROP TABLE IF EXISTS {staging}")


@dataclass
class SnapshotDiff:
    """The diff of one SQL table of one connector (see the module docstring)."""

    spark: SparkSession
    source: JdbcSource
    spec: SqlTable
    gw: str
    connector: str
    fetch_size: int = 10_000

    @property
    def snapshot(self) -> str:
        """The snapshot table (what the WAL holds of the source since the last run)."""
        return snapshot_table(self.gw, self.connector, self.spec.table)

    @property
    def staging(self) -> str:
        """The staging table (the source as read by this run)."""
        return snapshot_table(self.gw, self.connector, self.spec.table, "__staging")

    def _read_source(self) -> DataFrame:
        from pyspark.sql import functions as F

        dbtable = (
            f"({self.spec.query}) _src" if self.spec.query is not None else self.spec.source_sql
        )
        df = (
            self.spark.read.format("jdbc")
            .options(**self.source.options())
            .option("dbtable", dbtable)
            .option("fetchsize", str(self.fetch_size))
            .load()
        )
        rid = self.spec.row_id_column
        others = [c for c in df.columns if c != rid]
        return df.select(
            F.col(rid).cast("string").alias(_ROW_ID),
            F.to_json(F.struct(*[F.col(c) for c in others]), {"ignoreNullFields": "false"}).alias(
                _ROW
            ),
        )

    def stage(self) -> int:
        """Read the source once into the staging table; return its row count."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(self.gw)}")
        self._read_source().writeTo(self.staging).using("iceberg").createOrReplace()
        return int(self.spark.table(self.staging).count())

    def changes(self, staged_rows: int) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """``(row_id, row or None for a delete)`` of every row that differs from the snapshot,
        streamed to the driver one partition at a time (at most about ``_ROWS_PER_PARTITION``
        rows each, however many of the ``staged_rows`` changed: the join runs once, its
        shuffle output is read back partition by partition)."""
        from pyspark.sql import functions as F

        cur = self.spark.table(self.staging).alias("cur")
        if table_exists(self.spark, self.snapshot):
            prev = self.spark.table(self.snapshot).alias("prev")
        else:
            prev = cur.limit(0).alias("prev")
        joined = cur.join(prev, F.col(f"cur.{_ROW_ID}") == F.col(f"prev.{_ROW_ID}"), "full_outer")
        diff = joined.where(~F.col(f"cur.{_ROW}").eqNullSafe(F.col(f"prev.{_ROW}"))).select(
            F.coalesce(F.col(f"cur.{_ROW_ID}"), F.col(f"prev.{_ROW_ID}")).alias(_ROW_ID),
            F.col(f"cur.{_ROW}").alias(_ROW),
        )
        parts = max(1, -(-staged_rows // _ROWS_PER_PARTITION))
        for row in diff.repartition(parts, _ROW_ID).toLocalIterator(prefetchPartitions=False):
            body = row[_ROW]
            yield row[_ROW_ID], None if body is None else json.loads(body)

    def promote(self) -> None:
        """Make the staging table the snapshot (call once the WAL committed every change)."""
        promote_staging(self.spark, self.snapshot, self.staging)
