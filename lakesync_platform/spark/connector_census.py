"""The delete census of an HTTP source as a Spark job: the sweep's ids against the known ids.

The *known* ids of a connector live in an Iceberg table in the gateway's namespace,
``_ls_known__<connector>`` (``tbl, row_id``), whose ``lakesync.known-through`` property is the
WAL cursor they are complete up to. A census (:class:`IdCensus`, a
:class:`~lakesync_platform.connectors.census.CensusDiffer`):

It is the Spark :class:`~lakesync_platform.connectors.census.CensusDiffer` (the pipeline
adapts its :class:`IdComparison`):

1. :meth:`~IdCensus.stage` — the sweep's ``(table, row_id)`` pairs, fetched over HTTP on the
   driver, go into a staging table (``…__staging``) in batches, so the driver holds one batch;
2. :meth:`~IdCensus.compare` — the known ids are the known table plus every id the connector
   (client ``ingest:<connector>``) appended after ``known-through``: read from the WAL over
   JDBC (the WAL's own query, :func:`~lakesync_platform.wal.export.ingested_ids_query`) and
   from the lake's change log (what a WAL trimmed by its retention no longer holds); known
   ids missing from the sweep *vanished* (deleted at the source), streamed to the driver a
   partition at a time; sweep ids that are not known are *missing* (counted);
3. :meth:`~IdCensus.promote` — once the WAL committed the deletes, the staging table becomes
   the known table, ``known-through`` set to the WAL cursor taken before this run's polls
   (ids appended after it are read again next time: a larger known set costs nothing, as
   deleting a row that is not live appends nothing). Catalog operations only, no data
   rewritten: the staging table gets the property, the old known table is dropped (purged)
   and the staging table renamed. A run that dies before promoting compares the old known
   set again; one that dies between the drop and the rename has no known table, and the next
   census takes every id the connector ever appended (the WAL and the lake hold them all) —
   larger, never smaller, than the truth.

Why Spark: like the ``diff`` strategy (:mod:`.connector_diff`), both sides hold every id of
the source (a million in a large org); Spark joins them spilling to disk.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.delta import check_identifier
from .layout import deltas_table, namespace, q, table_exists
from .wal_source import JdbcSource, read_ingested_ids

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["KNOWN_THROUGH", "IdCensus", "IdComparison", "known_ids_table"]

KNOWN_THROUGH = "lakesync.known-through"
"""Table property: the WAL cursor the known ids are complete up to."""
_SCHEMA = "tbl STRING, row_id STRING"
_ROWS_PER_PARTITION = 50_000
_MISSING_SAMPLE = 10


@dataclass(frozen=True, slots=True)
class IdComparison:
    """The sweep against the known ids: the vanished ones (lazily), how many were known, how
    many swept ids are missing from them, and a few of those."""

    vanished: Iterator[tuple[str, str]]
    known: int
    missing: int
    missing_sample: tuple[tuple[str, str], ...]


def known_ids_table(gw: str, connector: str, suffix: str = "") -> str:
    """The quoted, qualified name of a connector's known ids (or their staging)."""
    check_identifier(connector, "connector")
    return f"{namespace(gw)}.{q(f'_ls_known__{connector}{suffix}')}"


@dataclass
class IdCensus:
    """The census comparison of one connector (see the module docstring). ``wal`` reads the
    WAL over JDBC; ``head`` is the WAL cursor taken before this run's polls."""

    spark: SparkSession
    gw: str
    connector: str
    wal: JdbcSource
    head: int
    batch: int = 50_000
    _known: DataFrame | None = None

    @property
    def known_table(self) -> str:
        """The known ids."""
        return known_ids_table(self.gw, self.connector)

    @property
    def staging(self) -> str:
        """This census's sweep."""
        return known_ids_table(self.gw, self.connector, "__staging")

    def stage(self, ids: Iterable[tuple[str, str]]) -> int:
        """Write the sweep to the staging table, a batch at a time; return its size."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(self.gw)}")
        it = iter(ids)
        first = list(itertools.islice(it, self.batch))
        self.spark.createDataFrame(first, _SCHEMA).writeTo(self.staging).using(
            "iceberg"
        ).createOrReplace()
        count = len(first)
        while batch := list(itertools.islice(it, self.batch)):
            self.spark.createDataFrame(batch, _SCHEMA).writeTo(self.staging).append()
            count += len(batch)
        return count

    def _known_through(self) -> int:
        if not table_exists(self.spark, self.known_table):
            return 0
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {self.known_table} ('{KNOWN_THROUGH}')")
        value = rows.collect()[0]["value"]
        return int(value) if str(value).isdigit() else 0

    def compare(self) -> IdComparison:
        """The staged sweep against the known ids (kept cached until :meth:`promote`)."""
        client_id, after = f"ingest:{self.connector}", self._known_through()
        known = read_ingested_ids(self.spark, self.wal, self.gw, client_id, after)
        if table_exists(self.spark, deltas_table(self.gw)):  # flushed (and maybe trimmed)
            log = self.spark.table(deltas_table(self.gw))
            flushed = log.where((log["client_id"] == client_id) & (log["cursor"] > after))
            known = known.unionByName(flushed.selectExpr("`table` AS tbl", "row_id"))
        if table_exists(self.spark, self.known_table):
            known = known.unionByName(self.spark.table(self.known_table).select("tbl", "row_id"))
        self._known = known.distinct().cache()
        swept = self.spark.table(self.staging).select("tbl", "row_id")
        missing = swept.join(self._known, ["tbl", "row_id"], "left_anti")
        found = missing.limit(_MISSING_SAMPLE).collect()
        sample = tuple((r["tbl"], r["row_id"]) for r in found)
        missing_count = missing.count() if len(found) == _MISSING_SAMPLE else len(found)
        known_count = self._known.count()
        vanished = self._known.join(swept, ["tbl", "row_id"], "left_anti")
        return IdComparison(self._stream(vanished, known_count), known_count, missing_count, sample)

    def _stream(self, vanished: DataFrame, known: int) -> Iterator[tuple[str, str]]:
        parts = max(1, -(-known // _ROWS_PER_PARTITION))
        for row in vanished.repartition(parts).toLocalIterator(prefetchPartitions=False):
            yield row["tbl"], row["row_id"]

    def promote(self) -> None:
        """The sweep becomes the known ids, complete through this run's starting cursor."""
        if self._known is not None:
            self._known.unpersist()
            self._known = None
        self.spark.sql(
            f"ALTER TABLE {self.staging} SET TBLPROPERTIES ('{KNOWN_THROUGH}'='{int(self.head)}')"
        )
        self.spark.sql(f"DROP TABLE IF EXISTS {self.known_table} PURGE")
        name = self.known_table.split(".", 1)[1]  # RENAME TO names the table within the catalog
        self.spark.sql(f"ALTER TABLE {self.staging} RENAME TO {name}")
