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
from typing import Any

from sqlalchemy import Connection, select

from ..core.merge import RowState, decode_row_state
from ..core.wal import RowRecord, StoredRow
from . import tables as t
from .database import SqlDatabase, chunks

__all__ = ["SqlFeedReader", "SqlRowReader", "SqlRows"]

_SCAN = (
    "SELECT row_key, tbl, row_id, state, position FROM wal_rows"
    " WHERE gateway_id = ? AND position > ? ORDER BY position LIMIT ?"
)
_RECORDS = "SELECT client_id, row_key, held, at_cursor FROM wal_client_rows WHERE gateway_id = ?"
_SET_IF_UNCHANGED = (
    "UPDATE wal_client_rows SET held = ?, at_cursor = ?"
    " WHERE gateway_id = ? AND client_id = ? AND row_key = ? AND held = ? AND at_cursor = ?"
)
_RECORDS_CHUNK = 250  # client ids and row keys per statement on SQLite (500 parameters at most)

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


class SqlFeedReader:
    """Reads rows and the records of many clients for the broadcast feed, on one connection
    (one snapshot on SQLite)."""

    def __init__(self, conn: Connection, gw: str, scan_sql: str, postgres: bool) -> None:
        self._rows = SqlRowReader(conn, gw, "", scan_sql)
        self._conn = conn
        self._gw = gw
        self._postgres = postgres

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after cursor ``after``, in cursor order."""
        return self._rows.scan(after, limit)

    def delivery_records(
        self, client_ids: Sequence[str], keys: Sequence[str]
    ) -> dict[str, dict[str, RowRecord]]:
        """What each of ``client_ids`` holds of the rows ``keys``: one statement on PostgreSQL
        (arrays), statements of at most 250 ids by 250 keys on SQLite — each a walk of the
        primary key (gateway, client, row), whatever the number of records stored."""
        out: dict[str, dict[str, RowRecord]] = {}
        if not client_ids or not keys:
            return out
        statements: list[tuple[str, tuple[Any, ...]]]
        if self._postgres:
            sql = _RECORDS.replace("?", "%s")
            sql += " AND client_id = ANY(%b::text[]) AND row_key = ANY(%b::text[])"
            statements = [(sql, (self._gw, list(client_ids), list(keys)))]
        else:
            statements = [
                (
                    f"{_RECORDS} AND client_id IN ({','.join('?' * len(ids))})"
                    f" AND row_key IN ({','.join('?' * len(part))})",
                    (self._gw, *ids, *part),
                )
                for ids in chunks(client_ids, _RECORDS_CHUNK)
                for part in chunks(keys, _RECORDS_CHUNK)
            ]
        for sql, args in statements:
            for client_id, key, held, at in self._conn.exec_driver_sql(sql, args):
                out.setdefault(client_id, {})[key] = RowRecord(bool(held), at)
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
        scan_sql = self._sql(_SCAN)
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

    @contextmanager
    def feed_read(self, gw: str) -> Iterator[SqlFeedReader]:
        """A read transaction for the broadcast feed's pages (no client's pull recorded)."""
        with self.read() as conn:
            yield SqlFeedReader(conn, gw, self._sql(_SCAN), self.dialect == "postgresql")

    def save_delivery_records(
        self,
        gw: str,
        records: Mapping[str, Mapping[str, RowRecord]],
        expected: Mapping[str, Mapping[str, RowRecord]] | None = None,
    ) -> None:
        """Upsert what each client holds of the rows named, in one transaction (a durable
        write, as a pull's); a record in ``expected`` only if it is unchanged."""
        self._save_records(gw, records, expected or {})

    def last_pulled_since(self, gw: str, client_id: str) -> int:
        """The cursor ``client_id`` last pulled from (0 if it never pulled)."""
        with self.read() as conn:
            return self._last_since(conn, gw, client_id) or 0

    def has_pulled(self, gw: str, client_id: str) -> bool:
        """Whether ``client_id`` ever pulled from ``gw`` (a pull from 0 included)."""
        with self.read() as conn:
            return self._last_since(conn, gw, client_id) is not None

    def save_client_records(
        self,
        gw: str,
        client_id: str,
        records: Mapping[str, RowRecord],
        expected: Mapping[str, RowRecord] | None = None,
    ) -> None:
        """Upsert what ``client_id`` holds of the rows ``records`` names (a durable write); a
        record in ``expected`` only if it is unchanged."""
        self._save_records(gw, {client_id: records}, {client_id: expected or {}})

    def _save_records(
        self,
        gw: str,
        records: Mapping[str, Mapping[str, RowRecord]],
        expected: Mapping[str, Mapping[str, RowRecord]],
    ) -> None:
        upserts: list[tuple[str, str, RowRecord]] = []
        updates: list[tuple[int, int, str, str, str, int, int]] = []
        for c, held in records.items():
            was = expected.get(c, {})
            for key, rec in held.items():
                old = was.get(key)
                if old is None:
                    upserts.append((c, key, rec))
                else:  # compare and set: a record changed since it was read stays
                    updates.append(
                        (int(rec.held), rec.at_cursor, gw, c, key, int(old.held), old.at_cursor)
                    )
        if not upserts and not updates:
            return
        with self.write() as conn:
            if upserts:
                self._upsert_client_rows(conn, gw, upserts)
            if updates:
                updates.sort(key=lambda u: (u[3], u[4]))  # one lock order (no deadlocks)
                conn.exec_driver_sql(self._sql(_SET_IF_UNCHANGED), updates)

    def client_records(self, gw: str, client_id: str, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What ``client_id`` holds of the rows ``keys``, as far as the server knows."""
        with self.read() as conn:
            return SqlRowReader(conn, gw, client_id, "").client_records(keys)

    def _save_client_records_in(
        self, conn: Connection, gw: str, client_id: str, records: Mapping[str, RowRecord]
    ) -> None:
        self._upsert_client_rows(conn, gw, [(client_id, k, rec) for k, rec in records.items()])

    def _upsert_client_rows(
        self, conn: Connection, gw: str, rows: Sequence[tuple[str, str, RowRecord]]
    ) -> None:
        """Upsert ``(client_id, row_key, record)`` rows."""
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
                for client_id, key, rec in sorted(rows, key=lambda r: (r[0], r[1]))
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
