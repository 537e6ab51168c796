"""The WAL's bulk export: the SQL that hands a cursor range of ``wal_entries`` to the lake.

The flush reads the log in bulk over JDBC (Spark's JDBC source, parallel by cursor range)
instead of paging it through Python. This module owns that read's SQL, built from the column
definitions in :mod:`lakesync_platform.wal.tables`, so the WAL is read through one door: the
store's own tables. :mod:`lakesync_platform.spark.wal_source` only runs the query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from sqlalchemy import BigInteger, Integer, Text

from . import tables as t

__all__ = ["CURSOR_COLUMN", "EXPORT_COLUMNS", "ExportColumn", "export_query", "ingested_ids_query"]

ColumnKind = Literal["int64", "int32", "text"]


@dataclass(frozen=True, slots=True)
class ExportColumn:
    """One exported column: its name in ``wal_entries`` and the kind of value it holds."""

    name: str
    kind: ColumnKind


def _kind(column: object) -> ColumnKind:
    typ = getattr(column, "type", None)
    if isinstance(typ, BigInteger):
        return "int64"
    if isinstance(typ, Integer):
        return "int32"
    if isinstance(typ, Text):
        return "text"
    raise TypeError(f"wal_entries column {column!r} has no export kind")


EXPORT_COLUMNS: Final[tuple[ExportColumn, ...]] = tuple(
    ExportColumn(c.name, _kind(c)) for c in t.entries.columns if c.name != "gateway_id"
)
"""The columns of one exported entry, in ``wal_entries`` order (the gateway id is implied)."""
CURSOR_COLUMN: Final = t.entries.c.cursor.name
"""The ingest cursor: the export's range and partition column."""


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def export_query(gw: str, after: int, up_to: int) -> str:
    """SQL selecting :data:`EXPORT_COLUMNS` of ``gw``'s entries with ``after < cursor <= up_to``.

    Plain SQL that SQLite, PostgreSQL and MariaDB all accept, for use as a JDBC subquery.
    """
    cursor = CURSOR_COLUMN
    return (
        f"SELECT {', '.join(c.name for c in EXPORT_COLUMNS)} "
        f"FROM {t.entries.name} WHERE {t.entries.c.gateway_id.name} = {_sql_string(gw)} "
        f"AND {cursor} > {int(after)} AND {cursor} <= {int(up_to)}"
    )


def ingested_ids_query(gw: str, client_id: str, after: int) -> str:
    """SQL selecting the distinct ``(tbl, row_id)`` that ``client_id`` (a connector's
    ``ingest:<name>``) wrote to ``gw`` with ``cursor > after`` (a delete census's known ids).

    Plain SQL that SQLite, PostgreSQL and MariaDB all accept, for use as a JDBC subquery.
    """
    e = t.entries.c
    return (
        f"SELECT DISTINCT {e.tbl.name}, {e.row_id.name} FROM {t.entries.name} "
        f"WHERE {e.gateway_id.name} = {_sql_string(gw)} "
        f"AND {e.client_id.name} = {_sql_string(client_id)} AND {CURSOR_COLUMN} > {int(after)}"
    )
