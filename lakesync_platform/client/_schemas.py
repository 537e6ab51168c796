"""User tables created from registered schemas, and their additive migration.

Each registered :class:`~lakesync_platform.core.schema.TableSchema` becomes a SQLite table
``"<table>"(_rowId TEXT PRIMARY KEY, <column> <affinity>, ...)`` with the reference client's
affinities (string → TEXT, number → REAL, boolean → INTEGER, json → TEXT holding JSON,
null → TEXT) and a row in ``_lakesync_meta(table_name, schema_version, schema_json,
updated_at)``. Registering a schema again evolves it additively (new columns are added with
``ALTER TABLE ADD COLUMN``; removing one or changing a type raises ``SchemaError``), as
:class:`SchemaSynchroniser` does for a schema announced by the server.

:func:`to_sql` / :func:`from_sql` convert JSON values to the stored form and back, so the values
the tracker reads back (for update deltas, :meth:`SyncTracker.get`) are the JSON values written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..core.delta import check_identifier
from ..core.schema import TableSchema, evolve_schema, parse_table_schema, table_schema_to_json
from ._db import LocalDB

__all__ = [
    "META_DDL",
    "SQL_TYPES",
    "SchemaRegistry",
    "SchemaSynchroniser",
    "as_table_schema",
    "from_sql",
    "to_sql",
]

SQL_TYPES: dict[str, str] = {
    "string": "TEXT",
    "number": "REAL",
    "boolean": "INTEGER",
    "json": "TEXT",
    "null": "TEXT",
}
"""Column affinity per protocol column type (as ``packages/client/src/db/schema-registry.ts``)."""

META_DDL = (
    "CREATE TABLE IF NOT EXISTS _lakesync_meta (table_name TEXT PRIMARY KEY, "
    "schema_version INTEGER NOT NULL DEFAULT 1, schema_json TEXT NOT NULL, "
    "updated_at INTEGER NOT NULL DEFAULT 0)"
)


_json_encoder = msgspec.json.Encoder()


def _dumps(value: Any) -> str:
    try:
        return _json_encoder.encode(value).decode()
    except (OverflowError, TypeError):  # ints beyond 64 bits and the like
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def to_sql(value: Any, col_type: str) -> Any:
    """The value to bind for a JSON ``value`` in a column of ``col_type``."""
    if value is None:
        return None
    if col_type == "json" or isinstance(value, (dict, list, tuple)):
        return _dumps(value)
    if col_type == "boolean" and isinstance(value, bool):
        return int(value)
    return value


def from_sql(value: Any, col_type: str) -> Any:
    """The JSON value for a stored SQLite ``value`` of a column of ``col_type``."""
    if value is None:
        return None
    if col_type == "json" and isinstance(value, str):
        try:
            return msgspec.json.decode(value)
        except msgspec.DecodeError:
            return value
    if col_type == "boolean" and isinstance(value, int):
        return bool(value)
    return value


def as_table_schema(schema: TableSchema | Mapping[str, Any]) -> TableSchema:
    """Accept a :class:`TableSchema` or the protocol's JSON shape."""
    return schema if isinstance(schema, TableSchema) else parse_table_schema(schema)


def _quote(name: str) -> str:
    return f'"{check_identifier(name)}"'


class SchemaRegistry:
    """The schemas of the local user tables, cached in memory and stored in ``_lakesync_meta``."""

    def __init__(self, db: LocalDB, clock: Callable[[], int] | None = None) -> None:
        self._db = db
        self._clock = clock
        self._schemas: dict[str, TableSchema] = {}
        self._types: dict[str, dict[str, str]] = {}
        self._versions: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Create the meta table and read the stored schemas."""
        self._db.exec(META_DDL)
        for version, raw in self._db.query_tuples(
            "SELECT schema_version, schema_json FROM _lakesync_meta"
        ):
            self._remember(parse_table_schema(msgspec.json.decode(raw)), int(version))

    def _remember(self, schema: TableSchema, version: int) -> None:
        with self._lock:
            self._schemas[schema.table] = schema
            self._types[schema.table] = {c.name: c.type for c in schema.columns}
            self._versions[schema.table] = version

    def get(self, table: str) -> TableSchema | None:
        """The schema of ``table``, or ``None`` if it is not registered."""
        return self._schemas.get(table)

    def types(self, table: str) -> dict[str, str] | None:
        """``{column: type}`` of ``table``, or ``None`` if it is not registered."""
        return self._types.get(table)

    def version(self, table: str) -> int:
        """The local schema version of ``table`` (0 if not registered)."""
        return self._versions.get(table, 0)

    def tables(self) -> list[str]:
        """Names of the registered tables."""
        return list(self._schemas)

    def register(
        self, schema: TableSchema | Mapping[str, Any], version: int | None = None
    ) -> TableSchema:
        """Create the table, or evolve it additively; returns the stored schema.

        ``version`` sets the stored version (the server's, when synchronising); by default a
        changed schema bumps it by one.
        """
        new = as_table_schema(schema)
        current = self.get(new.table)
        evolved = evolve_schema(current, new)
        if current is not None and evolved is current and version is None:
            return current
        now = self._clock() if self._clock is not None else 0
        with self._db.transaction():
            if current is None:
                cols = ", ".join(f"{_quote(c.name)} {SQL_TYPES[c.type]}" for c in new.columns)
                sep = ", " if cols else ""
                self._db.exec(
                    f"CREATE TABLE IF NOT EXISTS {_quote(new.table)} "
                    f"(_rowId TEXT PRIMARY KEY{sep}{cols})"
                )
            else:
                have = set(current.column_names)
                for col in evolved.columns:
                    if col.name not in have:
                        self._db.exec(
                            f"ALTER TABLE {_quote(new.table)} "
                            f"ADD COLUMN {_quote(col.name)} {SQL_TYPES[col.type]}"
                        )
            new_version = version if version is not None else self.version(new.table) + 1
            self._db.exec(
                "INSERT INTO _lakesync_meta (table_name, schema_version, schema_json, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (table_name) DO UPDATE SET "
                "schema_version = excluded.schema_version, schema_json = excluded.schema_json, "
                "updated_at = excluded.updated_at",
                (
                    evolved.table,
                    new_version,
                    msgspec.json.encode(table_schema_to_json(evolved)).decode(),
                    now,
                ),
            )
        self._remember(evolved, new_version)
        return evolved


class SchemaSynchroniser:
    """Bring a local table up to a schema version announced by the server (additive only)."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def synchronise(
        self, server_schema: TableSchema | Mapping[str, Any], server_version: int
    ) -> bool:
        """Apply ``server_schema`` if ``server_version`` is newer than the local version.

        Returns whether anything changed. Removing a column or changing its type raises
        ``SchemaError`` and leaves the local table untouched.
        """
        schema = as_table_schema(server_schema)
        if self._registry.version(schema.table) >= server_version:
            return False
        self._registry.register(schema, version=server_version)
        return True
