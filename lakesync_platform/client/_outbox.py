"""The persistent outbox: local deltas waiting for the gateway's acknowledgement.

Entries live in ``_lakesync_outbox`` in the client's own SQLite file and are written by the
tracker in the same transaction as the local change, so a crash can never keep one without the
other. Life of an entry::

    pending ──take_batch──▶ sending ──ack──▶ (deleted)
       ▲                       │
       └──────nack (backoff)───┘──(too many failures / permanent error)──▶ dead

An entry is deleted only after the gateway acknowledged it. Entries found ``sending`` when the
outbox opens (the process died mid-push) go back to ``pending`` and are re-sent with the same
``deltaId`` — the gateway deduplicates them. Dead entries stay until the application requeues or
discards them (:meth:`Outbox.requeue_dead`, :meth:`Outbox.discard_dead`).

A nack records whether the gateway could not be reached (``unreachable``) or answered with a
refusal. Once it answers again, :meth:`Outbox.end_outage` makes the first kind due at once,
while refused entries keep their backoff (the gateway asked for it) — the retry rules the action
queue follows too (:mod:`._retry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from ..core.delta import RowDelta
from ._db import LocalDB
from ._retry import add_unreachable_column, backoff_ms, release_unreachable
from ._wire import delta_from_wire, delta_to_wire

__all__ = ["OUTBOX_DDL", "Outbox", "OutboxEntry"]

OUTBOX_DDL = (
    "CREATE TABLE IF NOT EXISTS _lakesync_outbox ("
    "id INTEGER PRIMARY KEY AUTOINCREMENT, delta_id TEXT NOT NULL, tbl TEXT NOT NULL, "
    "row_id TEXT NOT NULL, hlc INTEGER NOT NULL, delta BLOB NOT NULL, "
    "status TEXT NOT NULL DEFAULT 'pending', retry_count INTEGER NOT NULL DEFAULT 0, "
    "retry_after INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, last_error TEXT, "
    "unreachable INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS _lakesync_outbox_status ON _lakesync_outbox (status, id)",
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One queued local delta and its delivery state."""

    id: int
    delta: RowDelta
    status: str
    retry_count: int
    retry_after: int
    created_at: int
    last_error: str | None
    size: int


_COLUMNS = "id, delta, status, retry_count, retry_after, created_at, last_error"


def _entry(row: tuple[int, bytes, str, int, int, int, str | None]) -> OutboxEntry:
    id_, blob, status, retries, after, created, error = row
    return OutboxEntry(
        id_,
        delta_from_wire(_decoder.decode(blob)),
        status,
        retries,
        after,
        created,
        error,
        len(blob),
    )


def _marks(ids: Sequence[int]) -> str:
    return ",".join("?" * len(ids))


class Outbox:
    """Queue operations over ``_lakesync_outbox``; every method is one atomic step."""

    def __init__(self, db: LocalDB) -> None:
        self._db = db

    def create(self) -> None:
        """Create the table if needed and release entries a crash left ``sending``."""
        with self._db.transaction():
            for ddl in OUTBOX_DDL:
                self._db.exec(ddl)
            add_unreachable_column(self._db, "_lakesync_outbox")  # a file of an earlier version
            self._db.exec("UPDATE _lakesync_outbox SET status = 'pending' WHERE status = 'sending'")

    def add(self, delta: RowDelta, now_ms: int) -> None:
        """Queue ``delta``; call inside the transaction that made the local change."""
        self._db.exec(
            "INSERT INTO _lakesync_outbox (delta_id, tbl, row_id, hlc, delta, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                delta.delta_id,
                delta.table,
                delta.row_id,
                delta.hlc,
                _encoder.encode(delta_to_wire(delta)),
                now_ms,
            ),
        )

    def take_batch(self, now_ms: int, limit: int, max_bytes: int) -> list[OutboxEntry]:
        """Mark up to ``limit`` due pending entries (at most ``max_bytes``) ``sending``."""
        with self._db.transaction():
            rows = self._db.query_tuples(
                f"SELECT {_COLUMNS} FROM _lakesync_outbox "
                "WHERE status = 'pending' AND retry_after <= ? ORDER BY id LIMIT ?",
                (now_ms, limit),
            )
            batch: list[OutboxEntry] = []
            total = 0
            for row in rows:
                total += len(row[1])
                if batch and total > max_bytes:
                    break
                batch.append(_entry(row))
            if batch:
                ids = [e.id for e in batch]
                self._db.exec(
                    f"UPDATE _lakesync_outbox SET status = 'sending' WHERE id IN ({_marks(ids)})",
                    ids,
                )
            return batch

    def ack(self, ids: Sequence[int]) -> None:
        """The gateway acknowledged these entries: delete them."""
        if ids:
            with self._db.transaction():
                self._db.exec(f"DELETE FROM _lakesync_outbox WHERE id IN ({_marks(ids)})", ids)

    def release(self, ids: Sequence[int]) -> None:
        """Put ``sending`` entries back to ``pending`` without counting a failure."""
        if ids:
            with self._db.transaction():
                self._db.exec(
                    "UPDATE _lakesync_outbox SET status = 'pending' "
                    f"WHERE status = 'sending' AND id IN ({_marks(ids)})",
                    ids,
                )

    def nack(
        self,
        ids: Sequence[int],
        now_ms: int,
        error: str,
        max_retries: int,
        min_delay_ms: int = 0,
        *,
        unreachable: bool = False,
    ) -> list[int]:
        """Count a failed attempt and schedule the retry; returns the ids that went dead.
        ``unreachable``: the gateway was not reached (not a refusal it answered)."""
        if not ids:
            return []
        with self._db.transaction():
            rows = self._db.query_tuples(
                f"SELECT id, retry_count FROM _lakesync_outbox WHERE id IN ({_marks(ids)})", ids
            )
            dead = []
            updates = []
            for id_, retries in rows:
                count = retries + 1
                if count >= max_retries:
                    dead.append(id_)
                    updates.append(("dead", count, now_ms, error, 0, id_))
                else:
                    delay = max(backoff_ms(count), min_delay_ms)
                    updates.append(("pending", count, now_ms + delay, error, unreachable, id_))
            self._db.exec_many(
                "UPDATE _lakesync_outbox SET status = ?, retry_count = ?, retry_after = ?, "
                "last_error = ?, unreachable = ? WHERE id = ?",
                updates,
            )
            return dead

    def dead_letter(self, ids: Sequence[int], error: str) -> None:
        """Move entries to the dead letter at once (a permanent error)."""
        if ids:
            with self._db.transaction():
                self._db.exec(
                    "UPDATE _lakesync_outbox SET status = 'dead', last_error = ? "
                    f"WHERE id IN ({_marks(ids)})",
                    [error, *ids],
                )

    def depth(self) -> int:
        """Entries not yet acknowledged and not dead."""
        rows = self._db.query_tuples("SELECT count(*) FROM _lakesync_outbox WHERE status != 'dead'")
        return int(rows[0][0])

    def entries(self, status: str | None = None) -> list[OutboxEntry]:
        """All entries (or those in ``status``), oldest first."""
        where = "" if status is None else "WHERE status = ?"
        params = () if status is None else (status,)
        rows = self._db.query_tuples(
            f"SELECT {_COLUMNS} FROM _lakesync_outbox {where} ORDER BY id", params
        )
        return [_entry(r) for r in rows]

    def next_retry_at(self) -> int | None:
        """When the earliest pending entry becomes due (epoch ms), or ``None``."""
        rows = self._db.query_tuples(
            "SELECT min(retry_after) FROM _lakesync_outbox WHERE status = 'pending'"
        )
        value = rows[0][0]
        return None if value is None else int(value)

    def reset_backoff(self) -> int:
        """Make every pending entry due now (connectivity is back); returns how many."""
        with self._db.transaction():
            return self._db.exec(
                "UPDATE _lakesync_outbox SET retry_after = 0 "
                "WHERE status = 'pending' AND retry_after > 0"
            )

    def end_outage(self) -> int:
        """The gateway answers again: entries backing off because it could not be reached
        become due now (refused ones keep their backoff); returns how many."""
        return release_unreachable(self._db, "_lakesync_outbox")

    def requeue_dead(self, ids: Sequence[int] | None = None) -> int:
        """Give dead entries (all, or ``ids``) a fresh start; returns how many."""
        sql = (
            "UPDATE _lakesync_outbox SET status = 'pending', retry_count = 0, retry_after = 0 "
            "WHERE status = 'dead'"
        )
        with self._db.transaction():
            if ids is None:
                return self._db.exec(sql)
            return self._db.exec(f"{sql} AND id IN ({_marks(ids)})", ids) if ids else 0

    def discard_dead(self, ids: Sequence[int] | None = None) -> int:
        """Drop dead entries for good (all, or ``ids``); returns how many."""
        sql = "DELETE FROM _lakesync_outbox WHERE status = 'dead'"
        with self._db.transaction():
            if ids is None:
                return self._db.exec(sql)
            return self._db.exec(f"{sql} AND id IN ({_marks(ids)})", ids) if ids else 0

    def max_hlc(self) -> int:
        """The newest HLC ever queued that is still here (0 if none)."""
        rows = self._db.query_tuples("SELECT max(hlc) FROM _lakesync_outbox")
        return int(rows[0][0] or 0)
