"""Iceberg table metadata read through the Iceberg Java API of the running Spark session.

Watermarks and commit summaries live in snapshot metadata. Reading them with Spark SQL over
the ``history`` / ``snapshots`` metadata tables costs a Spark job each (100-300 ms); reading them
from the catalog's ``Table`` object costs a catalog lookup and a metadata-file read. Every call
refreshes the table first, so commits made by other processes are seen.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SnapshotInfo", "ancestors", "current_snapshot", "load_table"]


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One snapshot: its id and its summary (string properties)."""

    snapshot_id: int
    summary: dict[str, str]

    def int_prop(self, key: str, default: int = 0) -> int:
        """An integer summary property (``default`` when absent)."""
        value = self.summary.get(key)
        return default if value is None else int(value)


def load_table(spark: SparkSession, qualified: str) -> Any:
    """The refreshed ``org.apache.iceberg.Table`` for a quoted, fully qualified Spark name."""
    jvm: Any = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession,
        qualified,
    )
    table.refresh()
    return table


def _info(spark: SparkSession, snapshot: Any) -> SnapshotInfo:
    # One call for the whole snapshot as JSON: converting the Java summary map to a dict costs
    # a py4j round trip per entry (~30 ms for a Spark commit's summary, against ~2 ms).
    jvm: Any = spark._jvm
    parsed = json.loads(jvm.org.apache.iceberg.SnapshotParser.toJson(snapshot))
    summary = parsed.get("summary", {})
    summary.pop("operation", None)  # the JSON form adds it; the summary map does not hold it
    return SnapshotInfo(int(parsed["snapshot-id"]), {k: str(v) for k, v in summary.items()})


def current_snapshot(spark: SparkSession, qualified: str) -> SnapshotInfo | None:
    """The table's current snapshot (``None`` while the table has none)."""
    snapshot = load_table(spark, qualified).currentSnapshot()
    return None if snapshot is None else _info(spark, snapshot)


def ancestors(spark: SparkSession, qualified: str) -> Iterator[SnapshotInfo]:
    """The current snapshot, then its parents, newest first (lazily: stop early to save work)."""
    table = load_table(spark, qualified)
    snapshot = table.currentSnapshot()
    while snapshot is not None:
        yield _info(spark, snapshot)
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
