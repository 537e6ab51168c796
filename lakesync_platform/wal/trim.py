"""Trimming the hot WAL on SQL: log entries the lake holds, forgotten delta ids, the footprint.

The log only grows on the push path; what is in the lake need not stay. :meth:`SqlTrim.trim`
deletes entries at or below the flush watermark in batches, each its own short transaction —
on SQLite one holds the writer lock for a few milliseconds, so pushes queue behind a batch, never
behind the whole trim; on PostgreSQL a batch touches old rows only and never the gateway's row
that pushes lock (the floor lives in ``wal_trims``). Batches commit without waiting for fsync
(:meth:`~.database.SqlDatabase._bookkeeping`): a trim lost in a power cut is redone by the next
one, the floor with it (one transaction).

:meth:`SqlTrim.trim_delta_ids` forgets the accepted ids of deltas stamped before a horizon — the
key of ``wal_delta_ids`` starts with the HLC, so that is a range at the start of the index. A
delta re-sent after its id was forgotten is merged again, which changes nothing: the per-column
merge is idempotent (docs/pipeline.md, "Hot WAL retention").
"""

from __future__ import annotations

import os
import time

from sqlalchemy import Connection, select
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import AdapterError
from ..core.wal import WalStorage
from . import tables as t
from .database import SqlDatabase

__all__ = ["SqlTrim"]

_TRIM_ROW = (
    "INSERT INTO wal_trims (gateway_id, entries_to, entries_trimmed, ids_below_hlc,"
    " ids_trimmed, updated_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (gateway_id) DO UPDATE SET"
    " entries_to = CASE WHEN excluded.entries_to > wal_trims.entries_to"
    " THEN excluded.entries_to ELSE wal_trims.entries_to END,"
    " entries_trimmed = wal_trims.entries_trimmed + excluded.entries_trimmed,"
    " ids_below_hlc = CASE WHEN excluded.ids_below_hlc > wal_trims.ids_below_hlc"
    " THEN excluded.ids_below_hlc ELSE wal_trims.ids_below_hlc END,"
    " ids_trimmed = wal_trims.ids_trimmed + excluded.ids_trimmed,"
    " updated_ms = excluded.updated_ms"
)


class SqlTrim(SqlDatabase):
    """Trimming, floors and the footprint of the SQL WAL."""

    def trim(self, gw: str, up_to: int, *, before_ms: int | None = None, batch: int = 2_000) -> int:
        """Delete entries in the lake with cursor ≤ ``up_to`` in batches; see the module."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        total = 0
        while True:
            with self._bookkeeping() as conn:
                done, more = self._trim_batch(conn, gw, up_to, before_ms, batch)
            total += done
            if not more:
                return total

    def _trim_batch(
        self, conn: Connection, gw: str, up_to: int, before_ms: int | None, batch: int
    ) -> tuple[int, bool]:
        """One batch: ``(entries deleted, whether a next batch may find more)``."""
        mark = conn.execute(
            select(t.gateways.c.flush_watermark).where(t.gateways.c.gateway_id == gw)
        ).scalar()
        bound = min(up_to, int(mark or 0))
        floor = self._floor_in(conn, gw)
        if bound <= floor:
            return 0, False
        rows = conn.exec_driver_sql(
            self._sql(
                "SELECT cursor, ingest_ms FROM wal_entries WHERE gateway_id = ?"
                " AND cursor > ? AND cursor <= ? ORDER BY cursor LIMIT ?"
            ),
            (gw, floor, bound, batch),
        ).all()
        taken = len(rows)
        if before_ms is not None:
            # The oldest run only: an entry ingested at or after ``before_ms`` ends it (a wall
            # clock stepping back can only keep entries longer, never trim a young one).
            taken = next((i for i, r in enumerate(rows) if r[1] >= before_ms), len(rows))
        if taken == 0:
            return 0, False
        last = int(rows[taken - 1][0])
        deleted = conn.exec_driver_sql(
            self._sql(
                "DELETE FROM wal_entries WHERE gateway_id = ? AND cursor > ? AND cursor <= ?"
            ),
            (gw, floor, last),
        ).rowcount
        conn.exec_driver_sql(self._sql(_TRIM_ROW), (gw, last, int(deleted or 0), 0, 0, _now()))
        return int(deleted or 0), taken == batch

    def trim_delta_ids(self, gw: str, before_hlc: int, *, batch: int = 2_000) -> int:
        """Forget ids of deltas stamped before ``before_hlc``, ``batch`` per transaction."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        total = 0
        sql = self._sql(
            "DELETE FROM wal_delta_ids WHERE (gateway_id, hlc, delta_id) IN"
            " (SELECT gateway_id, hlc, delta_id FROM wal_delta_ids WHERE gateway_id = ?"
            " AND hlc < ? ORDER BY hlc LIMIT ?)"
        )
        while True:
            with self._bookkeeping() as conn:
                deleted = int(conn.exec_driver_sql(sql, (gw, before_hlc, batch)).rowcount or 0)
                if deleted < batch:
                    # The horizon is recorded once every id before it is gone.
                    conn.exec_driver_sql(
                        self._sql(_TRIM_ROW), (gw, 0, 0, before_hlc, deleted, _now())
                    )
                elif deleted:
                    conn.exec_driver_sql(self._sql(_TRIM_ROW), (gw, 0, 0, 0, deleted, _now()))
            total += deleted
            if deleted < batch:
                return total

    def log_floor(self, gw: str) -> int:
        """The cursor up to which the log was trimmed (0: never)."""
        with self.read() as conn:
            return self._floor_in(conn, gw)

    def dedup_horizon(self, gw: str) -> int:
        """The HLC before which accepted ids may have been forgotten (0: none were)."""
        with self.read() as conn:
            value = conn.execute(
                select(t.trims.c.ids_below_hlc).where(t.trims.c.gateway_id == gw)
            ).scalar()
        return int(value or 0)

    def cursor_keeping(self, gw: str, entries: int) -> int:
        """The highest cursor that leaves the newest ``entries`` log entries above it."""
        if entries < 0:
            raise ValueError("entries must be >= 0")
        with self.read() as conn:
            value = conn.exec_driver_sql(
                self._sql(
                    "SELECT cursor FROM wal_entries WHERE gateway_id = ?"
                    " ORDER BY cursor DESC LIMIT 1 OFFSET ?"
                ),
                (gw, entries),
            ).scalar()
        return int(value or 0)

    def storage(self) -> WalStorage:
        """The database file and its journal (SQLite), or the WAL's tables (PostgreSQL)."""
        with self.read() as conn:
            if self.dialect == "postgresql":
                size = conn.exec_driver_sql(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                    " AND left(c.relname, 4) = 'wal_'"
                ).scalar()
                return WalStorage(int(size or 0), None)
            page = int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0)
            free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
        path = self._write.url.database or ""
        on_disk = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        return WalStorage(on_disk, free * page)

    def reclaim(self) -> None:
        """PostgreSQL: ``VACUUM`` the trimmed tables, so their dead rows' space is reused by
        the next appends instead of growing the tables until autovacuum comes by (it takes a
        lock that blocks no reader or writer; ``SKIP_LOCKED``: never waits). SQLite reuses a
        deleted row's page at once: nothing to do."""
        if self.dialect != "postgresql":
            return
        try:
            with self._write.connect() as conn:
                auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                auto.exec_driver_sql("VACUUM (SKIP_LOCKED) wal_entries, wal_delta_ids")
        except SQLAlchemyError as exc:
            raise AdapterError(f"WAL vacuum failed: {exc}") from exc

    @staticmethod
    def _floor_in(conn: Connection, gw: str) -> int:
        value = conn.execute(
            select(t.trims.c.entries_to).where(t.trims.c.gateway_id == gw)
        ).scalar()
        return int(value or 0)


def _now() -> int:
    """Wall clock for ``updated_ms`` (bookkeeping only: no rule reads it)."""
    return int(time.time() * 1000)
