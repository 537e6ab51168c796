"""The Iceberg layout of the lake (one namespace per gateway id).

In namespace ``lakesync.<gw>``:

* ``lakesync_deltas`` — the append-only change log, one row per flushed WAL entry:
  ``cursor, delta_id, table, row_id, op, client_id, hlc, columns`` (JSON array of
  ``{"column","value"}``, the entry's effective columns), ``ingest_ms``, ``ingest_ts``, ``size``;
  partitioned by ``table`` and ``days(ingest_ts)``. Each flush commit carries the WAL range it
  covers in its snapshot summary (``lakesync.wal.from`` / ``lakesync.wal.to``).
* one **state table** per synced table, named like the table: ``row_id``, one typed column per
  schema column, and what per-column LWW needs — per column ``<col>$hlc`` / ``<col>$client``
  (the stamp that wrote it, null when the column is absent), the row's delete stamp
  ``_ls$delete_hlc`` / ``_ls$delete_client``, ``_ls$live`` and ``_ls$cursor`` (the last log cursor
  that touched the row; the state job's watermark is its maximum).

``$`` never occurs in a protocol identifier, so bookkeeping columns cannot collide with user
columns.

Beside them, the connectors keep tables of their own (:func:`connector_table`): the ``diff``
strategy's snapshots ``_ls_snapshot__<connector>__<table>`` and the census's known ids
``_ls_known__<connector>``, each with a ``…__staging`` table during a run, their files under
``_ls-tables/`` (:mod:`.staged`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from ..core.delta import check_identifier
from ..core.errors import ValidationError
from ..core.identifiers import check_gateway_id
from ..core.schema import TableSchema
from .session import CATALOG

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CURSOR_COL",
    "DELETE_CLIENT_COL",
    "DELETE_HLC_COL",
    "DELTAS_TABLE",
    "KNOWN_IDS_PREFIX",
    "LIVE_COL",
    "SNAPSHOT_PREFIX",
    "SPARK_TYPES",
    "WAL_FROM_PROP",
    "WAL_TO_PROP",
    "client_col",
    "connector_table",
    "deltas_table",
    "ensure_deltas_table",
    "ensure_state_table",
    "hlc_col",
    "log_table",
    "namespace",
    "q",
    "state_columns",
    "state_table",
    "state_value",
    "synced_columns",
    "table_exists",
]

DELTAS_TABLE: Final = "lakesync_deltas"
WAL_FROM_PROP: Final = "lakesync.wal.from"
"""Snapshot-summary key: first WAL cursor a flush commit covers."""
WAL_TO_PROP: Final = "lakesync.wal.to"
"""Snapshot-summary key: last WAL cursor a flush commit covers (the lake watermark)."""
LIVE_COL: Final = "_ls$live"
CURSOR_COL: Final = "_ls$cursor"
DELETE_HLC_COL: Final = "_ls$delete_hlc"
DELETE_CLIENT_COL: Final = "_ls$delete_client"
SNAPSHOT_PREFIX: Final = "_ls_snapshot__"
"""Name prefix of the ``diff`` strategy's snapshot tables."""
KNOWN_IDS_PREFIX: Final = "_ls_known__"
"""Name prefix of the delete census's known-id tables."""

SPARK_TYPES: Final = {
    "string": "string",
    "number": "double",
    "boolean": "boolean",
    "json": "string",
    "null": "string",
}
"""Schema column type → Spark SQL type in the state table (json is stored as JSON text)."""


def q(name: str) -> str:
    """Backtick-quote one Spark SQL identifier part."""
    return "`" + name.replace("`", "``") + "`"


def namespace(gw: str) -> str:
    """The quoted namespace of gateway ``gw``: ``lakesync.`gw```."""
    return f"{CATALOG}.{q(check_gateway_id(gw))}"


def deltas_table(gw: str) -> str:
    """Fully qualified, quoted name of ``gw``'s change log."""
    return f"{namespace(gw)}.{q(DELTAS_TABLE)}"


def state_table(gw: str, table: str) -> str:
    """Fully qualified, quoted name of the state table of ``table``."""
    check_identifier(table, "table")
    if table == DELTAS_TABLE:
        raise ValidationError(f"{DELTAS_TABLE!r} is reserved in the lake")
    return f"{namespace(gw)}.{q(table)}"


def connector_table(name: str) -> bool:
    """Whether lake table ``name`` is a connector's own (a snapshot, known ids, or their
    staging table): replaced whole by its connector, never compacted or expired by upkeep."""
    return name.startswith((SNAPSHOT_PREFIX, KNOWN_IDS_PREFIX))


def hlc_col(column: str) -> str:
    """State-table column holding the HLC that wrote ``column``."""
    return f"{column}$hlc"


def client_col(column: str) -> str:
    """State-table column holding the client id that wrote ``column``."""
    return f"{column}$client"


def log_table(schema: TableSchema) -> str:
    """The table name the schema's deltas carry (``sourceTable`` if set, else ``table``).

    The lake's state table is named after it; destinations default to ``schema.table``.
    """
    return schema.source_table or schema.table


def synced_columns(schema: TableSchema) -> list[tuple[str, str]]:
    """``(name, type)`` of the schema's columns that the lake keeps (not ``row_id``)."""
    return [(c.name, c.type) for c in schema.columns if c.name != "row_id"]


def state_value(value: Any, typ: str) -> Any:
    """A state-table cell as a Python value (json-typed columns hold JSON text)."""
    if value is None:
        return None
    if typ == "json":
        return json.loads(value)
    return value


def state_columns(schema: TableSchema) -> list[tuple[str, str]]:
    """Every state-table column as ``(name, spark type)``, in table order."""
    cols: list[tuple[str, str]] = [("row_id", "string")]
    cols += [(name, SPARK_TYPES[typ]) for name, typ in synced_columns(schema)]
    cols += [
        (LIVE_COL, "boolean"),
        (DELETE_HLC_COL, "bigint"),
        (DELETE_CLIENT_COL, "string"),
        (CURSOR_COL, "bigint"),
    ]
    for name, _ in synced_columns(schema):
        cols += [(hlc_col(name), "bigint"), (client_col(name), "string")]
    return cols


def table_exists(spark: SparkSession, qualified: str) -> bool:
    """Whether the (quoted, fully qualified) table exists in the catalog."""
    return bool(spark.catalog.tableExists(qualified.replace("`", "")))


# zstd level 1: at 1M log entries it wrote 0.15-0.25 s faster than Parquet's default level 3
# and the files came out no larger (33.2 MB against 33.8 MB; snappy: 63 MB).
_TBL_PROPS = (
    "TBLPROPERTIES ('format-version'='2', 'write.parquet.compression-codec'='zstd', "
    "'write.parquet.compression-level'='1', "
    "'write.metadata.delete-after-commit.enabled'='true', "
    "'write.metadata.previous-versions-max'='50')"
)


def ensure_deltas_table(spark: SparkSession, gw: str) -> str:
    """Create ``gw``'s namespace and change log if missing; return the table name."""
    name = deltas_table(gw)
    if table_exists(spark, name):
        return name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(gw)}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {name} ("
        "`cursor` bigint NOT NULL, delta_id string NOT NULL, `table` string NOT NULL, "
        "row_id string NOT NULL, op string NOT NULL, client_id string NOT NULL, "
        "hlc bigint NOT NULL, `columns` string NOT NULL, ingest_ms bigint NOT NULL, "
        "ingest_ts timestamp NOT NULL, size int NOT NULL"
        f") USING iceberg PARTITIONED BY (`table`, days(ingest_ts)) {_LOG_PROPS}"
    )
    return name


# A flush batch touches few (table, day) partitions: a fan-out writer avoids shuffling the batch.
_LOG_PROPS = _TBL_PROPS.replace(
    "TBLPROPERTIES (",
    "TBLPROPERTIES ('write.distribution-mode'='none', 'write.spark.fanout.enabled'='true', ",
)
_STATE_PROPS = _TBL_PROPS.replace(
    "TBLPROPERTIES (",
    "TBLPROPERTIES ('write.merge.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
    "'write.delete.mode'='merge-on-read', ",
)


def ensure_state_table(spark: SparkSession, gw: str, schema: TableSchema) -> str:
    """Create the state table of ``schema`` or add the columns it lacks (additive evolution)."""
    name = state_table(gw, log_table(schema))
    wanted = state_columns(schema)
    if not table_exists(spark, name):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(gw)}")
        cols = ", ".join(f"{q(n)} {t}" for n, t in wanted)
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({cols}) USING iceberg {_STATE_PROPS}")
        return name
    present = set(spark.table(name).columns)
    missing = [(n, t) for n, t in wanted if n not in present]
    if missing:
        cols = ", ".join(f"{q(n)} {t}" for n, t in missing)
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({cols})")
    return name
