"""The log on SQL: reading entries, cursors, the flush watermark and counters.

Entries are appended by :mod:`.append`. The flush watermark is the cursor up to which the lake
holds a gateway's log (set by the flush after its Iceberg commit; it never moves backwards);
``flushed_bytes`` follows it, so the backlog in bytes is ``appended_bytes - flushed_bytes``.
Only entries at or below the watermark may be trimmed (:mod:`.trim`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update

from ..core.wal import GatewayStats, WalEntry, decode_columns
from . import tables as t
from .database import SqlDatabase

__all__ = ["CursorSpan", "SqlLog"]


@dataclass(frozen=True, slots=True)
class CursorSpan:
    """How many log entries a cursor range holds and the sum of their cursors: a fingerprint a
    copy of the range (the lake's change log) can be held to without listing the entries."""

    entries: int
    cursor_sum: int


class SqlLog(SqlDatabase):
    """Reads, watermarks and counters of the SQL WAL's log."""

    def gateway_ids(self) -> list[str]:
        """Every gateway id that has ever accepted a push or stored config."""
        with self.read() as conn:
            ids = set(conn.execute(select(t.gateways.c.gateway_id)).scalars())
            ids.update(conn.execute(select(t.schemas.c.gateway_id).distinct()).scalars())
            ids.update(conn.execute(select(t.connectors.c.gateway_id).distinct()).scalars())
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

    def cursor_span(self, gw: str, first: int, last: int) -> CursorSpan:
        """Count and cursor sum of ``gw``'s entries with ``first <= cursor <= last`` (one
        aggregate over the primary key's range, no entry leaves the database)."""
        c = t.entries.c
        with self.read() as conn:
            count, total = conn.execute(
                select(func.count(), func.coalesce(func.sum(c.cursor), 0)).where(
                    c.gateway_id == gw, c.cursor >= first, c.cursor <= last
                )
            ).one()
        return CursorSpan(int(count or 0), int(total or 0))

    def cursors_between(self, gw: str, first: int, last: int, limit: int = 10) -> list[int]:
        """The first ``limit`` cursors of ``gw``'s entries with ``first <= cursor <= last``
        (a check's sample of what its copy lacks)."""
        c = t.entries.c
        with self.read() as conn:
            rows = conn.execute(
                select(c.cursor)
                .where(c.gateway_id == gw, c.cursor >= first, c.cursor <= last)
                .order_by(c.cursor)
                .limit(limit)
            ).scalars()
            return [int(r) for r in rows]

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
            entries = conn.execute(select(func.count()).where(e.gateway_id == gw)).scalar()
            floor = conn.execute(
                select(t.trims.c.entries_to).where(t.trims.c.gateway_id == gw)
            ).scalar()
        return GatewayStats(
            gw,
            int(last),
            int(mark),
            int(backlog or 0),
            int(appended - flushed),
            int(total or 0),
            int(live or 0),
            int(entries or 0),
            int(floor or 0),
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
