"""The durable write-ahead log and config store, on SQLAlchemy Core.

One :class:`WriteAheadLog` serves any number of gateway ids, isolated by key. Backends:

* SQLite (embedded default): one file in WAL journal mode, ``synchronous=FULL``; writes take
  the database lock up front (``BEGIN IMMEDIATE``), reads run on their own connections.
  Commits only append to the ``-wal`` file (and fsync it); copying pages back into the
  database file (the checkpoint) runs on a background thread with its own connection
  (:class:`_SqliteCheckpointer`), off the commit path.
* PostgreSQL: any number of gateway processes may share one database. A push locks its
  gateway's row in ``wal_gateways`` (``SELECT … FOR UPDATE``) before it reads anything, so
  pushes to one gateway are serialised and commit in cursor order: a reader never sees cursor
  ``n+1`` committed without ``n``.

This module does I/O only; what to write is decided by :mod:`lakesync_platform.wal.service`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, create_engine, delete, event, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from ..core.delta import ColumnDelta
from ..core.errors import AdapterError
from ..core.merge import RowState, decode_row_state
from ..core.schema import TableSchema, evolve_schema, parse_table_schema, table_schema_to_json
from ..core.sync_rules import SyncRules, parse_sync_rules, sync_rules_to_json
from . import tables as t
from .model import FlushRequest, GatewayStats, WalEntry

__all__ = ["GatewayLock", "RowRecord", "StoredRow", "WriteAheadLog"]

log = logging.getLogger(__name__)

_CHUNK = 500
_UPSERT_ROWS = (
    " ON CONFLICT (gateway_id, row_key) DO UPDATE SET state = excluded.state,"
    " live = excluded.live, position = excluded.position"
)
_RECORD_PULL = (
    "INSERT INTO wal_clients (gateway_id, client_id, last_since, updated_ms)"
    " VALUES (?,?,?,?) ON CONFLICT (gateway_id, client_id) DO UPDATE SET"
    " last_since = excluded.last_since, updated_ms = excluded.updated_ms"
    " WHERE wal_clients.last_since <> excluded.last_since"
)
_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True, slots=True)
class GatewayLock:
    """A gateway's counters, read under its write lock at the start of a push."""

    gateway_id: str
    last_cursor: int
    appended_bytes: int
    flushed_bytes: int


class StoredRow(msgspec.Struct, frozen=True, gc=False):
    """A row as stored: its key, table, id, state, and the cursor of its last change.

    A struct, not a dataclass: pulls build a thousand per page, and a frozen dataclass's
    ``__init__`` costs six times as much.
    """

    row_key: str
    table: str
    row_id: str
    state: RowState
    position: int


@dataclass(frozen=True, slots=True)
class RowRecord:
    """What a client holds of a row: ``held`` once it applied the page ending at ``at_cursor``."""

    held: bool
    at_cursor: int


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def encode_columns(columns: Sequence[ColumnDelta]) -> str:
    """Columns as the WAL stores them: a JSON array of ``{"column", "value"}``."""
    return _json_encode(columns).decode()  # a ColumnDelta struct encodes as that object


def decode_columns(text: str) -> tuple[ColumnDelta, ...]:
    """Inverse of :func:`encode_columns`."""
    return tuple(ColumnDelta(c["column"], c["value"]) for c in _json_decode(text))


class WriteAheadLog:
    """The accepted-change log, row state, delivery state and config store of every gateway."""

    def __init__(
        self, write_engine: Engine, read_engine: Engine, url: str, meta_engine: Engine | None = None
    ) -> None:
        self._write = write_engine
        self._read = read_engine
        self._meta = meta_engine or write_engine
        database = write_engine.url.database if write_engine.dialect.name == "sqlite" else None
        writer_lock = _SqliteWriterLock(database) if database else None
        self._write_lock: AbstractContextManager[Any] = writer_lock or nullcontext()
        self._checkpointer = (
            _SqliteCheckpointer(database, writer_lock)
            if database and writer_lock is not None and database != ":memory:"
            else None
        )
        self.url = url
        self.dialect = write_engine.dialect.name
        self._legacy_ids: dict[str, bool] = {}

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, url: str, *, now_ms: int = 0, pool_size: int = 8) -> WriteAheadLog:
        """Open (and migrate) the WAL at ``url``: ``sqlite:///PATH`` or ``postgresql+psycopg://…``."""
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://") :]
        try:
            if url.startswith("sqlite"):
                write_engine = create_engine(url, pool_size=4, max_overflow=8)
                read_engine = create_engine(url, pool_size=8, max_overflow=16)
                sqlite_meta = create_engine(url, pool_size=2, max_overflow=8)
                _configure_sqlite(write_engine, immediate=True)
                _configure_sqlite(read_engine, immediate=False)
                _configure_sqlite(sqlite_meta, immediate=True, synchronous="NORMAL")
                meta_engine: Engine | None = sqlite_meta
            elif url.startswith("postgresql"):
                write_engine = create_engine(url, pool_size=pool_size, pool_pre_ping=True)
                read_engine = write_engine
                meta_engine = None
            else:
                raise AdapterError(f"Unsupported WAL URL {url!r}: use sqlite:/// or postgresql://")
            wal = cls(write_engine, read_engine, url, meta_engine)
            wal._migrate(now_ms)
        except (SQLAlchemyError, AdapterError) as exc:
            raise AdapterError(f"Cannot open the WAL at {_redact(url)}: {exc}") from exc
        return wal

    def _migrate(self, now_ms: int) -> None:
        with self.write() as conn:
            if self.dialect == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7226001)")
            t.migrate(conn, now_ms)

    def close(self) -> None:
        """Release every connection."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        for engine in {self._write, self._read, self._meta}:
            engine.dispose()
        if isinstance(self._write_lock, _SqliteWriterLock):
            self._write_lock.close()

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (commits on success, rolls back on any exception).

        On SQLite, threads of this process queue on a lock before ``BEGIN IMMEDIATE``: SQLite's
        own busy handler polls with sleeps, which would idle the single writer under load.
        """
        try:
            with self._write_lock, self._write.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise AdapterError(f"WAL write failed: {exc.__class__.__name__}: {exc}") from exc
        finally:
            if self._checkpointer is not None:
                self._checkpointer.notify()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (one snapshot on SQLite)."""
        try:
            with self._read.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise AdapterError(f"WAL read failed: {exc.__class__.__name__}: {exc}") from exc

    def ping(self) -> None:
        """Raise :class:`AdapterError` if the database does not answer."""
        with self.read() as conn:
            conn.execute(select(1))

    # ------------------------------------------------------------------ push path

    def _insert(self, table: Any) -> Any:
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)

    def lock_gateway(self, conn: Connection, gw: str, now_ms: int) -> GatewayLock:
        """Create the gateway's row if new and lock it for the rest of the transaction."""
        g = t.gateways.c
        row = conn.execute(
            select(g.last_cursor, g.appended_bytes, g.flushed_bytes)
            .where(g.gateway_id == gw)
            .with_for_update()
        ).first()
        if row is None:
            conn.execute(
                self._insert(t.gateways)
                .values(
                    gateway_id=gw,
                    last_cursor=0,
                    appended_bytes=0,
                    flush_watermark=0,
                    flushed_bytes=0,
                    created_ms=now_ms,
                )
                .on_conflict_do_nothing()
            )
            row = conn.execute(
                select(g.last_cursor, g.appended_bytes, g.flushed_bytes)
                .where(g.gateway_id == gw)
                .with_for_update()
            ).one()
        return GatewayLock(gw, row[0], row[1], row[2])

    def _select_in(self, conn: Connection, sql: str, gw: str, values: Sequence[str]) -> list[Any]:
        """Run ``sql`` (ending in ``… WHERE gateway_id = ? AND col {IN}``) over ``values``.

        PostgreSQL gets one array parameter (``= ANY(%s)``); SQLite gets ``IN (?, …)`` in
        chunks. Both avoid per-value SQLAlchemy work on the push path.
        """
        out: list[Any] = []
        if self.dialect == "postgresql":
            stmt = sql.replace("?", "%s").replace("{IN}", "= ANY(%b::text[])")
            out.extend(conn.exec_driver_sql(stmt, (gw, list(values))).all())
            return out
        for part in _chunks(values):
            stmt = sql.replace("{IN}", "IN (" + ",".join("?" * len(part)) + ")")
            out.extend(conn.exec_driver_sql(stmt, (gw, *part)).all())
        return out

    def known_delta_ids(self, conn: Connection, gw: str, ids: Sequence[str]) -> set[str]:
        """The subset of ``ids`` already accepted by this gateway (ever), whatever their HLC.

        Checks and tools only: the push path claims ``(hlc, deltaId)`` pairs
        (:meth:`claim_delta_ids`); this scans the gateway's ids.
        """
        wanted = set(ids)
        rows = conn.exec_driver_sql(
            self._sql("SELECT delta_id FROM wal_delta_ids WHERE gateway_id = ?"), (gw,)
        )
        return {r[0] for r in rows if r[0] in wanted}

    def load_rows(self, conn: Connection, gw: str, keys: Sequence[str]) -> dict[str, RowState]:
        """Current row states for ``keys`` (absent keys are unknown rows)."""
        rows = self._select_in(
            conn,
            "SELECT row_key, state FROM wal_rows WHERE gateway_id = ? AND row_key {IN}",
            gw,
            keys,
        )
        return {key: decode_row_state(state) for key, state in rows}

    def _sql(self, template: str) -> str:
        """A raw statement with the driver's placeholder style (``?`` or ``%s``)."""
        return template if self.dialect == "sqlite" else template.replace("?", "%s")

    def claim_delta_ids(
        self, conn: Connection, gw: str, stamped_ids: Sequence[tuple[int, str]]
    ) -> set[tuple[int, str]]:
        """Record ``(hlc, deltaId)`` pairs as accepted; return those not accepted before.

        One ``INSERT … ON CONFLICT DO NOTHING RETURNING`` (per 500 pairs on SQLite): the dedup
        lookup and the insert are one index descent per delta, at the end of the index (keys
        start with the HLC). Ids accepted before the HLC was part of the key (schema version
        1) are then looked up by id. The caller holds the gateway lock.
        """
        if not stamped_ids:
            return set()
        out: set[tuple[int, str]] = set()
        if self.dialect == "postgresql":
            hlcs, ids = zip(*stamped_ids, strict=True)
            rows = conn.exec_driver_sql(
                "INSERT INTO wal_delta_ids (gateway_id, hlc, delta_id)"
                " SELECT %s, * FROM unnest(%b::bigint[], %b::text[])"
                " ON CONFLICT DO NOTHING RETURNING hlc, delta_id",
                (gw, list(hlcs), list(ids)),
            ).all()
            out.update((r[0], r[1]) for r in rows)
        else:
            for part in _chunks(stamped_ids):
                stmt = (
                    "INSERT INTO wal_delta_ids (gateway_id, hlc, delta_id) VALUES "
                    + ",".join(["(?1,?,?)"] * len(part))
                    + " ON CONFLICT DO NOTHING RETURNING hlc, delta_id"
                )
                params = [v for pair in part for v in pair]
                out.update((r[0], r[1]) for r in conn.exec_driver_sql(stmt, (gw, *params)).all())
        if out and self._has_legacy_ids(conn, gw):
            legacy = {
                r[0]
                for r in self._select_in(
                    conn,
                    "SELECT delta_id FROM wal_delta_ids WHERE gateway_id = ?"
                    f" AND hlc = {t.LEGACY_HLC} AND delta_id {{IN}}",
                    gw,
                    sorted({i for _, i in out}),
                )
            }
            out = {pair for pair in out if pair[1] not in legacy}
        return out

    def _has_legacy_ids(self, conn: Connection, gw: str) -> bool:
        """Whether ``gw`` has ids from before schema version 2 (none are added since)."""
        known = self._legacy_ids.get(gw)
        if known is None:
            known = self._legacy_ids[gw] = (
                conn.exec_driver_sql(
                    self._sql(
                        "SELECT 1 FROM wal_delta_ids WHERE gateway_id = ?"
                        f" AND hlc = {t.LEGACY_HLC} LIMIT 1"
                    ),
                    (gw,),
                ).first()
                is not None
            )
        return known

    def write_push(
        self,
        conn: Connection,
        gw: str,
        *,
        entry_rows: Sequence[tuple[Any, ...]],
        state_rows: Sequence[tuple[Any, ...]],
        last_cursor: int,
        added_bytes: int,
        new_columns: Sequence[tuple[str, str, int]],
    ) -> None:
        """Write one push's effects; the caller holds the gateway lock and commits.

        ``entry_rows``: ``(cursor, delta_id, tbl, row_id, op, client_id, hlc, columns_json,
        ingest_ms, size)``; ``state_rows``: ``(row_key, tbl, row_id,
        state_json, live, position)``. The hot path of every push: plain driver statements, no
        per-row SQLAlchemy work.
        """
        if self.dialect == "postgresql":
            self._write_push_postgres(conn, gw, entry_rows, state_rows)
        else:
            if entry_rows:
                conn.exec_driver_sql(
                    "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op,"
                    " client_id, hlc, columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [(gw, *e) for e in entry_rows],
                )
            if state_rows:
                conn.exec_driver_sql(
                    "INSERT INTO wal_rows (gateway_id, row_key, tbl, row_id, state, live, position)"
                    " VALUES (?,?,?,?,?,?,?)" + _UPSERT_ROWS,
                    [(gw, *r) for r in state_rows],
                )
        if new_columns:
            conn.execute(
                self._insert(t.table_columns).on_conflict_do_nothing(),
                [
                    {"gateway_id": gw, "tbl": tbl, "col": col, "ordinal": ordinal}
                    for tbl, col, ordinal in new_columns
                ],
            )
        conn.exec_driver_sql(
            self._sql(
                "UPDATE wal_gateways SET last_cursor = ?, appended_bytes = appended_bytes + ?"
                " WHERE gateway_id = ?"
            ),
            (last_cursor, added_bytes, gw),
        )

    @staticmethod
    def _write_push_postgres(
        conn: Connection,
        gw: str,
        entry_rows: Sequence[tuple[Any, ...]],
        state_rows: Sequence[tuple[Any, ...]],
    ) -> None:
        """One statement per table: columns as binary arrays, expanded server-side by ``unnest``."""
        if entry_rows:
            cols = list(zip(*entry_rows, strict=True))
            conn.exec_driver_sql(
                "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id,"
                " hlc, columns, ingest_ms, size) SELECT %s, * FROM unnest(%b::bigint[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[],"
                " %b::text[], %b::bigint[], %b::int[])",
                (gw, *[list(c) for c in cols]),
            )
        if state_rows:
            cols = list(zip(*state_rows, strict=True))
            conn.exec_driver_sql(
                "INSERT INTO wal_rows (gateway_id, row_key, tbl, row_id, state, live, position)"
                " SELECT %s, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::int[], %b::bigint[])" + _UPSERT_ROWS,
                (gw, *[list(c) for c in cols]),
            )

    # ------------------------------------------------------------------ pull path

    def scan_rows(self, conn: Connection, gw: str, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after cursor ``after``, in cursor order."""
        rows = conn.exec_driver_sql(
            self._sql(
                "SELECT row_key, tbl, row_id, state, position FROM wal_rows"
                " WHERE gateway_id = ? AND position > ? ORDER BY position LIMIT ?"
            ),
            (gw, after, limit),
        ).all()
        return [
            StoredRow(key, tbl, row_id, decode_row_state(state), pos)
            for key, tbl, row_id, state, pos in rows
        ]

    def client_records(
        self, conn: Connection, gw: str, client_id: str, keys: Sequence[str]
    ) -> dict[str, RowRecord]:
        """What ``client_id`` holds of the rows ``keys``, as far as the server knows."""
        c = t.client_rows.c
        out: dict[str, RowRecord] = {}
        for part in _chunks(keys):
            for key, held, at in conn.execute(
                select(c.row_key, c.held, c.at_cursor).where(
                    c.gateway_id == gw, c.client_id == client_id, c.row_key.in_(part)
                )
            ):
                out[key] = RowRecord(bool(held), at)
        return out

    def save_client_records(
        self, conn: Connection, gw: str, client_id: str, records: dict[str, RowRecord]
    ) -> None:
        """Upsert ``records`` for ``client_id``."""
        if not records:
            return
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

    def last_since(self, conn: Connection, gw: str, client_id: str) -> int | None:
        """The cursor ``client_id`` last pulled from, if it ever pulled."""
        c = t.clients.c
        value = conn.execute(
            select(c.last_since).where(c.gateway_id == gw, c.client_id == client_id)
        ).scalar()
        return None if value is None else int(value)

    def record_pull(self, gw: str, client_id: str, since: int, now_ms: int) -> None:
        """Remember that ``client_id`` pulled from ``since`` (it holds everything before it).

        Written on every pull that changes it, from any process. This is bookkeeping, not data:
        it commits without waiting for fsync (SQLite ``synchronous=NORMAL``, PostgreSQL
        ``synchronous_commit=off``) — durable across a crash of the gateway, not a power cut.
        """
        with self.bookkeeping() as conn:
            self._record_pull_in(conn, gw, client_id, since, now_ms)

    def _record_pull_in(
        self, conn: Connection, gw: str, client_id: str, since: int, now_ms: int
    ) -> None:
        conn.exec_driver_sql(self._sql(_RECORD_PULL), (gw, client_id, since, now_ms))

    @contextmanager
    def pull_read(self, gw: str, client_id: str, since: int, now_ms: int) -> Iterator[Connection]:
        """:meth:`record_pull`, then a read transaction for the page.

        On PostgreSQL both are one transaction (the bookkeeping row commits with the read,
        without waiting for fsync): one connection checkout and one commit per pull instead of
        two. On SQLite the bookkeeping takes the write lock, so it commits first.
        """
        if self.dialect != "postgresql":
            self.record_pull(gw, client_id, since, now_ms)
            with self.read() as conn:
                yield conn
            return
        with self.bookkeeping() as conn:
            self._record_pull_in(conn, gw, client_id, since, now_ms)
            yield conn

    @contextmanager
    def bookkeeping(self) -> Iterator[Connection]:
        """A write transaction for delivery bookkeeping that need not wait for fsync."""
        try:
            with self._write_lock, self._meta.begin() as conn:
                if self.dialect == "postgresql":
                    conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                yield conn
        except SQLAlchemyError as exc:
            raise AdapterError(f"WAL write failed: {exc.__class__.__name__}: {exc}") from exc
        finally:
            if self._checkpointer is not None:
                self._checkpointer.notify()

    def table_columns(self, gw: str) -> dict[str, list[str]]:
        """Every column ever accepted, per table, in first-seen order."""
        c = t.table_columns.c
        out: dict[str, list[str]] = {}
        with self.read() as conn:
            for tbl, col in conn.execute(
                select(c.tbl, c.col).where(c.gateway_id == gw).order_by(c.tbl, c.ordinal, c.col)
            ):
                out.setdefault(tbl, []).append(col)
        return out

    # ------------------------------------------------------------------ pipeline-facing

    def gateway_ids(self) -> list[str]:
        """Every gateway id that has ever accepted a push or stored config."""
        with self.read() as conn:
            ids = set(conn.execute(select(t.gateways.c.gateway_id)).scalars())
            ids.update(conn.execute(select(t.schemas.c.gateway_id).distinct()).scalars())
        return sorted(ids)

    def read_entries(self, gw: str, after: int, limit: int = 10_000) -> list[WalEntry]:
        """Log entries with cursor > ``after``, ascending, at most ``limit``."""
        c = t.entries.c
        with self.read() as conn:
            result = conn.execute(
                select(
                    c.cursor,
                    c.delta_id,
                    c.tbl,
                    c.row_id,
                    c.op,
                    c.client_id,
                    c.hlc,
                    c.columns,
                    c.ingest_ms,
                    c.size,
                )
                .where(c.gateway_id == gw, c.cursor > after)
                .order_by(c.cursor)
                .limit(limit)
            )
            return [
                WalEntry(cur, did, tbl, rid, op, cid, hlc, decode_columns(cols), ms, size)
                for cur, did, tbl, rid, op, cid, hlc, cols, ms, size in result
            ]

    def max_cursor(self, gw: str) -> int:
        """The last cursor handed out by ``gw`` (0 if none)."""
        with self.read() as conn:
            value = conn.execute(
                select(t.gateways.c.last_cursor).where(t.gateways.c.gateway_id == gw)
            ).scalar()
        return int(value or 0)

    def flush_watermark(self, gw: str) -> int:
        """The cursor up to which the lake holds this gateway's log."""
        with self.read() as conn:
            value = conn.execute(
                select(t.gateways.c.flush_watermark).where(t.gateways.c.gateway_id == gw)
            ).scalar()
        return int(value or 0)

    def set_flush_watermark(self, gw: str, cursor: int) -> None:
        """Record that the lake holds every entry up to ``cursor`` (never moves backwards)."""
        g, e = t.gateways.c, t.entries.c
        with self.write() as conn:
            current = conn.execute(
                select(g.flush_watermark).where(g.gateway_id == gw).with_for_update()
            ).scalar()
            if current is None or cursor <= current:
                return
            flushed = conn.execute(
                select(func.coalesce(func.sum(e.size), 0)).where(
                    e.gateway_id == gw, e.cursor > current, e.cursor <= cursor
                )
            ).scalar()
            conn.execute(
                update(t.gateways)
                .where(g.gateway_id == gw)
                .values(flush_watermark=cursor, flushed_bytes=g.flushed_bytes + int(flushed or 0))
            )

    def trim(self, gw: str, up_to: int) -> int:
        """Delete log entries already in the lake with cursor ≤ ``up_to``; return how many."""
        c = t.entries.c
        with self.write() as conn:
            mark = conn.execute(
                select(t.gateways.c.flush_watermark).where(t.gateways.c.gateway_id == gw)
            ).scalar()
            bound = min(up_to, int(mark or 0))
            result = conn.execute(delete(t.entries).where(c.gateway_id == gw, c.cursor <= bound))
            return int(result.rowcount or 0)

    def stats(self, gw: str) -> GatewayStats:
        """Counters for ``gw``: cursor, flush watermark, backlog and row counts."""
        g, e, r = t.gateways.c, t.entries.c, t.rows.c
        with self.read() as conn:
            head = conn.execute(
                select(g.last_cursor, g.flush_watermark, g.appended_bytes, g.flushed_bytes).where(
                    g.gateway_id == gw
                )
            ).first()
            last, mark, appended, flushed = head if head is not None else (0, 0, 0, 0)
            backlog = conn.execute(
                select(func.count()).where(e.gateway_id == gw, e.cursor > mark)
            ).scalar()
            total = conn.execute(select(func.count()).where(r.gateway_id == gw)).scalar()
            live = conn.execute(
                select(func.count()).where(r.gateway_id == gw, r.live == 1)
            ).scalar()
        return GatewayStats(
            gw,
            int(last),
            int(mark),
            int(backlog or 0),
            int(appended - flushed),
            int(total or 0),
            int(live or 0),
        )

    def oldest_unflushed_ms(self, gw: str) -> int | None:
        """Ingest time of the oldest entry not yet in the lake."""
        g, e = t.gateways.c, t.entries.c
        with self.read() as conn:
            mark = conn.execute(select(g.flush_watermark).where(g.gateway_id == gw)).scalar()
            value = conn.execute(
                select(func.min(e.ingest_ms)).where(e.gateway_id == gw, e.cursor > (mark or 0))
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

    # ------------------------------------------------------------------ config store

    def schemas(self, gw: str) -> dict[str, TableSchema]:
        """Registered table schemas of ``gw`` by table name."""
        c = t.schemas.c
        with self.read() as conn:
            result = conn.execute(select(c.tbl, c.schema_json).where(c.gateway_id == gw))
            return {tbl: parse_table_schema(_json_decode(js)) for tbl, js in result}

    def schema_versions(self, gw: str) -> dict[str, int]:
        """Version of each registered schema (1 on first save, +1 per evolution)."""
        c = t.schemas.c
        with self.read() as conn:
            return dict(
                conn.execute(select(c.tbl, c.version).where(c.gateway_id == gw)).tuples().all()
            )

    def save_schema(self, gw: str, schema: TableSchema, now_ms: int = 0) -> TableSchema:
        """Register or evolve (additively) ``schema``; return the stored schema."""
        c = t.schemas.c
        with self.write() as conn:
            row = conn.execute(
                select(c.schema_json, c.version)
                .where(c.gateway_id == gw, c.tbl == schema.table)
                .with_for_update()
            ).first()
            current = None if row is None else parse_table_schema(_json_decode(row[0]))
            evolved = evolve_schema(current, schema)
            if current is not None and evolved == current:
                return current
            body = _json_encode(table_schema_to_json(evolved)).decode()
            version = 1 if row is None else int(row[1]) + 1
            stmt = self._insert(t.schemas).values(
                gateway_id=gw,
                tbl=schema.table,
                version=version,
                schema_json=body,
                updated_ms=now_ms,
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["gateway_id", "tbl"],
                    set_={
                        "version": stmt.excluded.version,
                        "schema_json": stmt.excluded.schema_json,
                        "updated_ms": stmt.excluded.updated_ms,
                    },
                )
            )
        return evolved

    def sync_rules(self, gw: str) -> SyncRules | None:
        """The gateway's sync rules, or ``None`` if none were saved."""
        c = t.sync_rules.c
        with self.read() as conn:
            body = conn.execute(select(c.rules_json).where(c.gateway_id == gw)).scalar()
        return None if body is None else parse_sync_rules(_json_decode(body))

    def save_sync_rules(self, gw: str, rules: SyncRules, now_ms: int = 0) -> None:
        """Replace the gateway's sync rules."""
        body = _json_encode(sync_rules_to_json(rules)).decode()
        stmt = self._insert(t.sync_rules).values(gateway_id=gw, rules_json=body, updated_ms=now_ms)
        with self.write() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["gateway_id"],
                    set_={"rules_json": stmt.excluded.rules_json, "updated_ms": now_ms},
                )
            )

    # ------------------------------------------------------------------ flush requests

    def request_flush(self, gw: str, now_ms: int) -> FlushRequest:
        """Queue a flush of ``gw`` for the pipeline; return the request."""
        req = FlushRequest(uuid.uuid4().hex, gw, now_ms, "pending", None, now_ms)
        with self.write() as conn:
            conn.execute(
                t.flush_requests.insert().values(
                    request_id=req.request_id,
                    gateway_id=gw,
                    requested_ms=now_ms,
                    status=req.status,
                    detail=None,
                    updated_ms=now_ms,
                )
            )
        return req

    def flush_requests(
        self, gw: str | None = None, status: str | None = "pending", limit: int = 100
    ) -> list[FlushRequest]:
        """Flush requests, newest last, filtered by gateway and status."""
        c = t.flush_requests.c
        query = select(c.request_id, c.gateway_id, c.requested_ms, c.status, c.detail, c.updated_ms)
        if gw is not None:
            query = query.where(c.gateway_id == gw)
        if status is not None:
            query = query.where(c.status == status)
        with self.read() as conn:
            result = conn.execute(query.order_by(c.requested_ms, c.request_id).limit(limit))
            return [FlushRequest(*row) for row in result]

    def update_flush_request(
        self, request_id: str, status: str, detail: str | None, now_ms: int
    ) -> None:
        """Record the progress or outcome of a flush request."""
        with self.write() as conn:
            conn.execute(
                update(t.flush_requests)
                .where(t.flush_requests.c.request_id == request_id)
                .values(status=status, detail=detail, updated_ms=now_ms)
            )

    def delete_gateway_rows(self, gw: str, keys: Iterable[str]) -> None:
        """Forget rows entirely (administrative purge; not part of the sync path)."""
        with self.write() as conn:
            conn.execute(
                delete(t.rows).where(t.rows.c.gateway_id == gw, t.rows.c.row_key.in_(list(keys)))
            )


class _SqliteWriterLock:
    """Serialises SQLite writers: threads on a lock, processes on ``flock`` of ``<db>.lock``.

    SQLite's own busy handler polls with sleeps, which idles the single writer under load; a
    kernel lock hands the database over the moment the previous writer commits, also between
    the worker processes of one gateway (``--workers``).
    """

    def __init__(self, database: str) -> None:
        self._thread_lock = threading.Lock()
        self._path = database + ".lock" if database not in ("", ":memory:") else None
        self._fd: int | None = None

    def __enter__(self) -> None:
        self._thread_lock.acquire()
        if self._path is None:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def close(self) -> None:
        """Close the lock file."""
        with self._thread_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


_CATCH_UP_ROUNDS = 8
"""Passive checkpoints at most, after the first, before a restart takes the writer lock."""
_CATCH_UP_FRAMES = 512
"""A catch-up pass that copied fewer frames than this leaves little for the restart."""


class _SqliteCheckpointer:
    """Checkpoints a SQLite WAL on a background thread, off the commit path.

    Every connection of :class:`WriteAheadLog` runs with ``wal_autocheckpoint=0``: a commit
    only appends its pages to the ``-wal`` file and fsyncs it (``synchronous=FULL``; that is
    what makes an acknowledged push durable). Copying those pages into the database file and
    fsyncing it — the checkpoint, which SQLite would otherwise run inside every ~1000th commit —
    happens here, on a separate connection: SQLite releases the GIL while it checkpoints, so
    the copy overlaps with the next pushes instead of delaying them.

    After a write is signalled the thread waits ``delay_s`` (so one checkpoint covers many
    commits) and runs a ``PASSIVE`` checkpoint, which never blocks readers or writers. Under
    continuous writes a passive checkpoint may never catch up with the end of the log, so the
    log could not restart from its beginning; once it holds ``restart_frames`` frames the
    thread takes the writer lock (writers queue for the few milliseconds it takes to copy the
    rest) and runs a ``RESTART`` checkpoint, after which the next commit starts the log over.
    """

    def __init__(
        self,
        database: str,
        writer_lock: _SqliteWriterLock,
        *,
        delay_s: float = 0.05,
        restart_frames: int = 16_384,
    ) -> None:
        self._database = database
        self._writer_lock = writer_lock
        self._delay_s = delay_s
        self._restart_frames = restart_frames
        self._cond = threading.Condition()
        self._pending = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def notify(self) -> None:
        """A write committed (or failed): check the log soon."""
        if self._pending:
            return
        with self._cond:
            self._pending = True
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="lakesync-wal-checkpoint", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Stop the thread (after a last checkpoint)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self._database, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=2000")
            conn.execute("PRAGMA wal_autocheckpoint=0")
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        self._cond.wait()
                    if not self._pending and self._closed:
                        return
                if not self._closed:
                    time.sleep(self._delay_s)
                self._pending = False
                self.checkpoint(conn)
        except Exception as exc:  # never take the gateway down; SQLite checkpoints on close
            log.warning("WAL checkpoint thread stopped: %s", exc)
        finally:
            if conn is not None:
                conn.close()

    def checkpoint(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """One passive checkpoint; a restart under the writer lock once the log is long.

        Before it takes the lock, the thread runs passive checkpoints again (at most
        ``_CATCH_UP_ROUNDS``) while each still copies many frames — those committed during
        the previous one — so that the restart, which writers wait for, copies few. With 1M
        rows stored (a push then dirties hundreds of pages), the lock was held for 33-50 ms
        instead of up to 120 ms, and the slowest of 300 in-process 500-delta pushes took
        55-72 ms instead of 125-141 ms.
        """
        busy, frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames >= self._restart_frames:
            for _ in range(_CATCH_UP_ROUNDS):
                before = done
                busy, frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if done - before < _CATCH_UP_FRAMES:
                    break  # little was left: the restart will be quick too
            with self._writer_lock:
                busy, frames, done = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        return int(busy), int(frames), int(done)


def _configure_sqlite(engine: Engine, *, immediate: bool, synchronous: str = "FULL") -> None:
    """WAL journal, fsync on commit (``FULL``), busy timeout, explicit transaction control.

    No automatic checkpoints: :class:`_SqliteCheckpointer` runs them in the background.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA busy_timeout=30000")
        # Large WALs: keep the hot index pages (delta ids, row keys) in memory.
        cur.execute("PRAGMA cache_size=-131072")
        cur.execute("PRAGMA mmap_size=1073741824")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA wal_autocheckpoint=0")
        # Statement journals (a multi-row INSERT may have to undo itself) in memory, not in a
        # temporary file: one write syscall per touched page otherwise.
        cur.execute("PRAGMA temp_store=MEMORY")
        cur.close()

    begin_sql = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin_sql)


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
