"""Row state and client delivery state on SQL: page scans, what each client holds, pull
bookkeeping.

Each row's current state (per-column values and stamps, ``core.merge``) is stored with the
cursor of its last change (its *position*); pulls scan rows by position. Per client the WAL
keeps the cursor it last pulled from (``wal_clients``) and, for tables sync rules filter, which
rows it holds (``wal_client_rows``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, select

from ..core.merge import RowState, decode_row_state
from ..core.wal import RowRecord, StoredRow
from . import tables as t
from .database import SqlDatabase, chunks

__all__ = ["SqlRowReader", "SqlRows"]

_RECORD_PULL = (
    "INSERT INTO wal_clients (gateway_id, client_id, last_since, updated_ms)"
    " VALUES (?,?,?,?) ON CONFLICT (gateway_id, client_id) DO UPDATE SET"
    " last_since = excluded.last_since, updated_ms = excluded.updated_ms"
    " WHERE wal_clients.last_since <> excluded.last_since"
)


class SqlRowReader:
    """Reads rows for one client's pull page, on one connection (one snapshot on SQLite)."""

    def __init__(self, conn: Connection, gw: str, client_id: str, scan_sql: str) -> None:
        self._conn = conn
        self._gw = gw
        self._client_id = client_id
        self._scan_sql = scan_sql

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after cursor ``after``, in cursor order."""
        rows = self._conn.exec_driver_sql(self._scan_sql, (self._gw, after, limit)).all()
        return [
            StoredRow(key, tbl, row_id, decode_row_state(state), pos)
            for key, tbl, row_id, state, pos in rows
        ]

    def client_records(self, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What the pulling client holds of the rows ``keys``, as far as the server knows."""
        c = t.client_rows.c
        out: dict[str, RowRecord] = {}
        for part in chunks(keys):
            for key, held, at in self._conn.execute(
                select(c.row_key, c.held, c.at_cursor).where(
                    c.gateway_id == self._gw, c.client_id == self._client_id, c.row_key.in_(part)
                )
            ):
                out[key] = RowRecord(bool(held), at)
        return out


class SqlRows(SqlDatabase):
    """Row state, client records and pull bookkeeping of the SQL WAL."""

    @contextmanager
    def pull_read(
        self, gw: str, client_id: str, since: int, now_ms: int, *, record: bool = True
    ) -> Iterator[SqlRowReader]:
        """Remember that ``client_id`` pulled from ``since`` (unless not ``record``), then a
        read transaction for the page.

        The bookkeeping row is not data: it commits without waiting for fsync (SQLite
        ``synchronous=NORMAL``, PostgreSQL ``synchronous_commit=off``) — durable across a crash
        of the gateway, not a power cut — and only when it changes. On PostgreSQL bookkeeping
        and read are one transaction: one connection checkout and one commit per pull instead
        of two. On SQLite the bookkeeping takes the write lock, so it commits first.
        """
        scan_sql = self._sql(
            "SELECT row_key, tbl, row_id, state, position FROM wal_rows"
            " WHERE gateway_id = ? AND position > ? ORDER BY position LIMIT ?"
        )
        if not record:
            with self.read() as conn:
                yield SqlRowReader(conn, gw, client_id, scan_sql)
            return
        record_sql = self._sql(_RECORD_PULL)
        if self.dialect != "postgresql":
            with self._bookkeeping() as conn:
                conn.exec_driver_sql(record_sql, (gw, client_id, since, now_ms))
            with self.read() as conn:
                yield SqlRowReader(conn, gw, client_id, scan_sql)
            return
        with self._bookkeeping() as conn:
            conn.exec_driver_sql(record_sql, (gw, client_id, since, now_ms))
            yield SqlRowReader(conn, gw, client_id, scan_sql)

    def last_pulled_since(self, gw: str, client_id: str) -> int:
        """The cursor ``client_id`` last pulled from (0 if it never pulled)."""
        with self.read() as conn:
            return self._last_since(conn, gw, client_id) or 0

    def has_pulled(self, gw: str, client_id: str) -> bool:
        """Whether ``client_id`` ever pulled from ``gw`` (a pull from 0 included)."""
        with self.read() as conn:
            return self._last_since(conn, gw, client_id) is not None

    def save_client_records(
        self, gw: str, client_id: str, records: Mapping[str, RowRecord]
    ) -> None:
        """Upsert what ``client_id`` holds of the rows ``records`` names (a durable write)."""
        if records:
            with self.write() as conn:
                self._save_client_records_in(conn, gw, client_id, records)

    def client_records(self, gw: str, client_id: str, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What ``client_id`` holds of the rows ``keys``, as far as the server knows."""
        with self.read() as conn:
            return SqlRowReader(conn, gw, client_id, "").client_records(keys)

    def _save_client_records_in(
        self, conn: Connection, gw: str, client_id: str, records: Mapping[str, RowRecord]
    ) -> None:
        stmt = self._insert(t.client_rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=["gateway_id", "client_id", "row_key"],
            set_={"held": stmt.excluded.held, "at_cursor": stmt.excluded.at_cursor},
        )
        conn.execute(
            stmt,
            [
                {
                    "gateway_id": gw,
                    "client_id": client_id,
                    "row_key": key,
                    "held": 1 if rec.held else 0,
                    "at_cursor": rec.at_cursor,
                }
                # Sorted: every transaction locks client rows in one order (no deadlocks).
                for key, rec in sorted(records.items())
            ],
        )

    @staticmethod
    def _last_since(conn: Connection, gw: str, client_id: str) -> int | None:
        """The cursor ``client_id`` last pulled from, if it ever pulled."""
        c = t.clients.c
        value = conn.execute(
            select(c.last_since).where(c.gateway_id == gw, c.client_id == client_id)
        ).scalar()
        return None if value is None else int(value)

    def row_states(self, gw: str, table: str) -> Iterator[tuple[str, RowState]]:
        """Every row of ``table`` as ``(row_id, state)`` (tombstones included)."""
        c = t.rows.c
        with self.read() as conn:
            result = conn.execute(
                select(c.row_id, c.state)
                .where(c.gateway_id == gw, c.tbl == table)
                .order_by(c.row_id)
            )
            rows = [(rid, decode_row_state(state)) for rid, state in result]
        yield from rows
