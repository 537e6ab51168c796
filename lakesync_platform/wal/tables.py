"""The WAL's SQL tables (SQLAlchemy Core) and its versioned migrations.

Every table is keyed by ``gateway_id`` first: one database holds any number of isolated
gateways. On SQLite the log, dedup and delivery tables are ``WITHOUT ROWID`` (the primary key is
the table: one B-tree insert per row instead of two). Migrations are a list of functions;
``wal_schema_version`` records which ran.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    inspect,
    select,
)

__all__ = [
    "LEGACY_HLC",
    "MIGRATIONS",
    "actions",
    "client_rows",
    "clients",
    "connector_state",
    "connectors",
    "delta_ids",
    "entries",
    "flush_requests",
    "gateways",
    "metadata",
    "migrate",
    "rows",
    "schema_version",
    "schemas",
    "sync_rules",
    "table_columns",
    "trims",
]

metadata = MetaData()

schema_version = Table(
    "wal_schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("applied_ms", BigInteger, nullable=False),
)

gateways = Table(
    "wal_gateways",
    metadata,
    Column("gateway_id", Text, primary_key=True),
    # Last ingest cursor handed out; updating this row serialises appends per gateway, so
    # commit order equals cursor order even with several gateway processes on one database.
    Column("last_cursor", BigInteger, nullable=False),
    Column("appended_bytes", BigInteger, nullable=False),
    Column("flush_watermark", BigInteger, nullable=False),
    Column("flushed_bytes", BigInteger, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)

entries = Table(
    "wal_entries",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("cursor", BigInteger, nullable=False),
    Column("delta_id", Text, nullable=False),
    Column("tbl", Text, nullable=False),
    Column("row_id", Text, nullable=False),
    Column("op", Text, nullable=False),
    Column("client_id", Text, nullable=False),
    Column("hlc", BigInteger, nullable=False),
    Column("columns", Text, nullable=False),
    Column("ingest_ms", BigInteger, nullable=False),
    Column("size", Integer, nullable=False),
    PrimaryKeyConstraint("gateway_id", "cursor", name="pk_wal_entries"),
    sqlite_with_rowid=False,
)

delta_ids = Table(
    "wal_delta_ids",
    metadata,
    Column("gateway_id", Text, nullable=False),
    # The delta's HLC, ahead of its id: a deltaId is the hash of the delta's content, HLC
    # included, so (hlc, deltaId) names the same deltas; keyed by HLC first, accepted ids go
    # in at the end of the index (clients' clocks are all near now) instead of at random
    # places, and a push dirties a few index pages instead of one per delta. -1 marks ids
    # accepted before the HLC was recorded (see _v2_delta_ids_by_hlc).
    Column("hlc", BigInteger, nullable=False),
    Column("delta_id", Text, nullable=False),
    PrimaryKeyConstraint("gateway_id", "hlc", "delta_id", name="pk_wal_delta_ids"),
    sqlite_with_rowid=False,
)

LEGACY_HLC = -1
"""``wal_delta_ids.hlc`` of ids accepted before version 2 of the schema."""

rows = Table(
    "wal_rows",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("row_key", Text, nullable=False),
    Column("tbl", Text, nullable=False),
    Column("row_id", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("live", Integer, nullable=False),
    # Cursor of the row's last change (or re-announcement); pulls page by it.
    Column("position", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "row_key", name="pk_wal_rows"),
    Index("ix_wal_rows_position", "gateway_id", "position"),
    # A rowid table on purpose: pulls scan by position, and a WITHOUT ROWID table keyed by
    # row_key would turn every scanned row into a random-key lookup (2-3x slower pages at 1M).
)

clients = Table(
    "wal_clients",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("client_id", Text, nullable=False),
    Column("last_since", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "client_id", name="pk_wal_clients"),
)

client_rows = Table(
    "wal_client_rows",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("client_id", Text, nullable=False),
    Column("row_key", Text, nullable=False),
    Column("held", Integer, nullable=False),
    # Ingest position of the page that set ``held``; confirmed once the client pulls past it.
    Column("at_cursor", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "client_id", "row_key", name="pk_wal_client_rows"),
    sqlite_with_rowid=False,
)

schemas = Table(
    "wal_schemas",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("tbl", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("schema_json", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "tbl", name="pk_wal_schemas"),
)

sync_rules = Table(
    "wal_sync_rules",
    metadata,
    Column("gateway_id", Text, primary_key=True),
    Column("rules_json", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

table_columns = Table(
    "wal_table_columns",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("tbl", Text, nullable=False),
    Column("col", Text, nullable=False),
    Column("ordinal", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "tbl", "col", name="pk_wal_table_columns"),
)

flush_requests = Table(
    "wal_flush_requests",
    metadata,
    Column("request_id", Text, primary_key=True),
    Column("gateway_id", Text, nullable=False),
    Column("requested_ms", BigInteger, nullable=False),
    Column("status", Text, nullable=False),
    Column("detail", Text, nullable=True),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_wal_flush_requests_status", "status", "gateway_id"),
)

actions = Table(
    "wal_actions",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("client_id", Text, nullable=False),
    # "id:<actionId>" or "key:<idempotencyKey>": an action holds one row per key it has.
    Column("action_key", Text, nullable=False),
    # The claim's holder (a random token per execution); "running" until the result is stored.
    Column("owner", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("result_json", Text, nullable=True),
    Column("claimed_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "client_id", "action_key", name="pk_wal_actions"),
    Index("ix_wal_actions_updated", "updated_ms"),
)

connectors = Table(
    "wal_connectors",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    # The validated ConnectorConfig JSON: secrets only as ${VAR} references.
    Column("config_json", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "name", name="pk_wal_connectors"),
)

connector_state = Table(
    "wal_connector_state",
    metadata,
    Column("gateway_id", Text, nullable=False),
    Column("connector", Text, nullable=False),
    Column("stream", Text, nullable=False),
    # A stream's cursor and state, written only after the WAL committed what it covers.
    Column("state_json", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("gateway_id", "connector", "stream", name="pk_wal_connector_state"),
)

trims = Table(
    "wal_trims",
    metadata,
    Column("gateway_id", Text, primary_key=True),
    # Log entries with cursor <= entries_to are trimmed (the hot WAL's floor); the ids of deltas
    # stamped before ids_below_hlc may be forgotten (the dedup horizon). A table of its own, not
    # columns of wal_gateways: a trim never locks the row every push locks.
    Column("entries_to", BigInteger, nullable=False),
    Column("entries_trimmed", BigInteger, nullable=False),
    Column("ids_below_hlc", BigInteger, nullable=False),
    Column("ids_trimmed", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)


def _v1_initial(conn: Connection) -> None:
    metadata.create_all(conn)


def _v2_delta_ids_by_hlc(conn: Connection) -> None:
    """Key ``wal_delta_ids`` by ``(gateway_id, hlc, delta_id)``.

    A database created at version 1 by this code already has that shape (``_v1_initial``
    creates the current tables); an older one gets the column, with :data:`LEGACY_HLC` for
    every id it holds (their HLCs are not known: entries are trimmed, and losing deltas have
    none), and the new key. Pushes look legacy ids up by id alone, so they stay deduplicated.
    """
    if "hlc" in {c["name"] for c in inspect(conn).get_columns("wal_delta_ids")}:
        return
    if conn.dialect.name == "postgresql":
        for stmt in (
            f"ALTER TABLE wal_delta_ids ADD COLUMN hlc BIGINT NOT NULL DEFAULT {LEGACY_HLC}",
            "ALTER TABLE wal_delta_ids ALTER COLUMN hlc DROP DEFAULT",
            "ALTER TABLE wal_delta_ids DROP CONSTRAINT pk_wal_delta_ids",
            "ALTER TABLE wal_delta_ids ADD CONSTRAINT pk_wal_delta_ids"
            " PRIMARY KEY (gateway_id, hlc, delta_id)",
        ):
            conn.exec_driver_sql(stmt)
        return
    conn.exec_driver_sql("ALTER TABLE wal_delta_ids RENAME TO wal_delta_ids_v1")
    delta_ids.create(conn)
    conn.exec_driver_sql(
        "INSERT INTO wal_delta_ids (gateway_id, hlc, delta_id)"
        f" SELECT gateway_id, {LEGACY_HLC}, delta_id FROM wal_delta_ids_v1"
    )
    conn.exec_driver_sql("DROP TABLE wal_delta_ids_v1")


def _v3_actions(conn: Connection) -> None:
    """Add ``wal_actions`` (action results and claims); a database created at version 1 by
    this code has it already."""
    actions.create(conn, checkfirst=True)


def _v4_connectors(conn: Connection) -> None:
    """Registered connectors and their per-stream state (a database created at version 1 by
    this code has them already)."""
    connectors.create(conn, checkfirst=True)
    connector_state.create(conn, checkfirst=True)


def _v5_trims(conn: Connection) -> None:
    """The hot WAL's floor and dedup horizon per gateway (a database created at version 1 by
    this code has the table already)."""
    trims.create(conn, checkfirst=True)


MIGRATIONS: list[tuple[int, Callable[[Connection], None]]] = [
    (1, _v1_initial),
    (2, _v2_delta_ids_by_hlc),
    (3, _v3_actions),
    (4, _v4_connectors),
    (5, _v5_trims),
]
"""Ordered ``(version, migrate)`` pairs; append new ones, never edit applied ones."""


def migrate(conn: Connection, now_ms: int) -> int:
    """Apply every migration newer than the database's version; return the resulting version."""
    schema_version.create(conn, checkfirst=True)
    current = conn.execute(select(schema_version.c.version)).scalars().all()
    done = max(current, default=0)
    for version, step in MIGRATIONS:
        if version > done:
            step(conn)
            conn.execute(schema_version.insert().values(version=version, applied_ms=now_ms))
            done = version
    return done
