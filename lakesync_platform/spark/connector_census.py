"""The delete census of an HTTP source as a Spark job: the sweep's ids against the known ids.

The *known* ids of a connector live in an Iceberg table in the gateway's namespace,
``_ls_known__<connector>`` (``tbl, row_id``), whose ``lakesync.known-through`` property is the
WAL cursor they are complete up to. A census (:class:`IdCensus`, a
:class:`~lakesync_platform.connectors.census.CensusDiffer`):

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
   rewritten (:mod:`.staged`): the staging table is marked ready with ``known-through`` in
   one commit, the old known table dropped with its files, the staging table renamed.

Crash points: a census that dies before the mark leaves a staging table that is not ready;
the next census drops it and compares the old known set again (the deletes it may have
appended are ids appended since ``known-through``: known). One that dies after the mark (the
old table dropped or not) leaves a ready staging table, and the next census finishes the swap
first. A staging table of an earlier release that carries ``known-through`` was marked by it
just before its swap: it counts as ready.

Why Spark: like the ``diff`` strategy (:mod:`.connector_diff`), both sides hold every id of
the source (a million in a large org); Spark joins them spilling to disk.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.delta import check_identifier
from .layout import KNOWN_IDS_PREFIX, deltas_table, namespace, q, table_exists
from .staged import StagedSwap
from .wal_source import JdbcSource, read_ingested_ids

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
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
    return f"{namespace(gw)}.{q(_known_name(connector) + suffix)}"


def _known_name(connector: str) -> str:
    check_identifier(connector, "connector")
    return f"{KNOWN_IDS_PREFIX}{connector}"


@dataclass
class IdCensus:
    """The census comparison of one connector (see the module docstring). ``wal`` reads the
    WAL over JDBC; ``head`` is the WAL cursor taken before this run's polls."""

    spark: SparkSession
    catalog: Catalog
    gw: str
    connector: str
    wal: JdbcSource
    head: int
    batch: int = 50_000
    _known: DataFrame | None = None
    _swap: StagedSwap | None = None

    @property
    def tables(self) -> StagedSwap:
        """The known table and its staging table."""
        if self._swap is None:
            self._swap = StagedSwap(self.spark, self.catalog, self.gw, _known_name(self.connector))
        return self._swap

    @property
    def known_table(self) -> str:
        """The known ids."""
        return self.tables.target

    @property
    def staging(self) -> str:
        """This census's sweep."""
        return self.tables.staging

    def recover(self) -> None:
        """Finish or drop what an earlier census left (module docstring)."""
        staged = self.tables.staged()
        if staged is None:
            return
        if staged.ready or KNOWN_THROUGH in staged.properties:
            self.tables.swap()
        else:
            self.tables.discard()

    def stage(self, ids: Iterable[tuple[str, str]]) -> int:
        """Recover an earlier census's leftovers, then write the sweep to a new staging
        table, a batch at a time; return its size."""
        self.recover()
        self.tables.create_staging(_SCHEMA)
        count = 0
        it = iter(ids)
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
        # int(): a Spark Connect client's count() is a numpy integer (it reads it through pandas).
        missing_count = int(missing.count()) if len(found) == _MISSING_SAMPLE else len(found)
        known_count = int(self._known.count())
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
        self.tables.mark_ready({KNOWN_THROUGH: str(int(self.head))})
        self.tables.swap()
