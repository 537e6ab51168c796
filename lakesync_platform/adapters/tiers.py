"""Hot and cold tiers of a SQL destination table: rows moved verbatim between two
:class:`~lakesync_platform.adapters.sql.SqlAdapter`\\ s (the reference's ``LifecycleAdapter``
role, for materialised tables).

A row moves whole — ``row_id``, the schema's columns, ``props``, ``deleted_at`` and
``synced_at`` as they are — so a row that goes cold and comes back is the row it was (the
reference moves log deltas; our destinations hold state rows, so rows move). Values are read in
the source's dialect, brought to one form (:func:`_normal`) and written in the target's.

:class:`SqlTier` is one destination table's pair of tiers: :meth:`~SqlTier.move` (the lifecycle
job: copy rows not written since a cutoff to cold, commit, then delete them from hot unless a run
wrote them meanwhile), and what materialise calls so a cold row that changes again ends up in
the hot tier only: :meth:`~SqlTier.promote` inside materialise's hot transaction (absent rows
copied back, their ids recorded in the hot database's ``lakesync_tier_releases``, atomically
with the rows) and :meth:`~SqlTier.release` after it committed (those ids deleted from cold,
then the record cleared). A crash between any two commits leaves either a row in both tiers,
which the next :meth:`~SqlTier.move` or :meth:`~SqlTier.release` settles (hot wins), or nothing
to settle — never a row in neither.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import Connection, text

from ..core.schema import TableSchema
from .sql import SqlAdapter

__all__ = ["RELEASES", "MoveResult", "SqlTier"]

RELEASES: Final = "lakesync_tier_releases"
"""Hot-side table of row ids promoted out of the cold tier whose cold copy is still to delete."""
_CHUNK: Final = 500


@dataclass(frozen=True, slots=True)
class MoveResult:
    """What one move of one table did: rows copied to cold and removed from hot (``moved``),
    rows copied but kept hot because a run wrote them meanwhile (``kept``), cold copies of
    hot rows deleted (``released``)."""

    table: str
    moved: int
    kept: int
    released: int


class SqlTier:
    """The hot and cold tier of one destination table (see the module docstring)."""

    def __init__(self, hot: SqlAdapter, cold: SqlAdapter, schema: TableSchema, table: str) -> None:
        self.hot, self.cold, self.schema, self.table = hot, cold, schema, table
        self._columns = ["row_id", *(c.name for c in schema.columns if c.name != "row_id")]
        self._columns += ["props", *(["deleted_at"] if schema.soft_delete else []), "synced_at"]
        self._json = {c.name for c in schema.columns if c.type == "json"} | {"props"}
        self._bools = {c.name for c in schema.columns if c.type == "boolean"}
        self._times = {"deleted_at", "synced_at"}

    # ------------------------------------------------------------------ the lifecycle job

    def move(self, cutoff: datetime, batch: int = 5_000) -> MoveResult:
        """Move rows whose ``synced_at`` is before ``cutoff`` from hot to cold, ``batch`` per
        round: each round commits the copy in cold first, then deletes from hot the rows still
        unwritten since (a row materialise wrote meanwhile stays hot; its cold copy goes)."""
        released = self.release()
        self.cold.ensure_table(self.schema, self.table)
        moved = kept = 0
        after = ""
        while True:
            rows = self._old_rows(cutoff, after, batch)
            if not rows:
                break
            ids = [r["row_id"] for r in rows]
            with self.cold.transaction() as conn:
                self._put(self.cold, conn, rows, replace=True)
            with self.hot.transaction() as conn:
                gone = self._delete(self.hot, conn, ids, before=cutoff)
            if gone < len(ids):
                # Written since they were read: hot again, so their cold copies go.
                still = self._present(self.hot, ids)
                with self.cold.transaction() as conn:
                    self._delete(self.cold, conn, sorted(still))
                kept += len(still)
                gone = len(ids) - len(still)
            moved += gone
            after = ids[-1]
            if len(rows) < batch:
                break
        return MoveResult(self.table, moved, kept, released)

    # ------------------------------------------------------------------ materialise's side

    def promote(self, conn: Connection, row_ids: Sequence[str]) -> int:
        """Inside materialise's hot transaction ``conn``: copy the cold rows among ``row_ids``
        that hot lacks back into hot, and record every one found cold for :meth:`release`."""
        found = self._rows(self.cold, row_ids)
        if not found:
            return 0
        self._ensure_releases(conn)
        self._put(self.hot, conn, found, replace=False)
        self._record(conn, [r["row_id"] for r in found])
        return len(found)

    def release(self) -> int:
        """Delete from cold the rows recorded as promoted (their hot commit is done), then the
        record; return how many cold rows went."""
        with self.hot.transaction() as conn:
            self._ensure_releases(conn)
            q = self.hot.dialect.q
            ids = [
                str(r[0])
                for r in conn.execute(
                    text(f"SELECT {q('row_id')} FROM {q(RELEASES)} WHERE {q('dest_table')} = :t"),
                    {"t": self.table},
                )
            ]
        if not ids:
            return 0
        if self._exists(self.cold):
            with self.cold.transaction() as conn:
                gone = self._delete(self.cold, conn, ids)
        else:
            gone = 0
        with self.hot.transaction() as conn:
            q = self.hot.dialect.q
            for part in _chunks(ids):
                marks, params = _in(part)
                conn.execute(
                    text(
                        f"DELETE FROM {q(RELEASES)} WHERE {q('dest_table')} = :t "
                        f"AND {q('row_id')} IN ({marks})"
                    ),
                    {**params, "t": self.table},
                )
        return gone

    # ------------------------------------------------------------------ reads and writes

    def hot_exists(self) -> bool:
        """Whether the hot table exists (materialise has written it)."""
        return self._exists(self.hot)

    def cold_rows(self) -> list[dict[str, Any]]:
        """Every cold row, as :meth:`SqlAdapter.read_back` reads rows (for checks)."""
        return self.cold.read_back(self.schema, self.table) if self._exists(self.cold) else []

    def cold_rows_of(self, row_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The cold rows among ``row_ids``, as :meth:`cold_rows` reads them (for the checks of
        what one run changed)."""
        if not row_ids or not self._exists(self.cold):
            return []
        return self.cold.read_back_rows(self.schema, row_ids, self.table)

    def _exists(self, side: SqlAdapter) -> bool:
        with side.transaction() as conn:
            return side._columns(conn, self.table) is not None

    def _old_rows(self, cutoff: datetime, after: str, limit: int) -> list[dict[str, Any]]:
        q = self.hot.dialect.q
        sql = (
            f"SELECT {', '.join(q(c) for c in self._columns)} FROM {q(self.table)} "
            f"WHERE {q('synced_at')} < :cutoff AND {q('row_id')} > :after "
            f"ORDER BY {q('row_id')} LIMIT :n"
        )
        params = {"cutoff": self._stamp(self.hot, cutoff), "after": after, "n": limit}
        with self.hot.transaction() as conn:
            return [
                self._normal(self.hot, dict(r._mapping)) for r in conn.execute(text(sql), params)
            ]

    def _rows(self, side: SqlAdapter, row_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not row_ids or not self._exists(side):
            return []
        q = side.dialect.q
        out: list[dict[str, Any]] = []
        with side.transaction() as conn:
            for part in _chunks(row_ids):
                marks, params = _in(part)
                sql = (
                    f"SELECT {', '.join(q(c) for c in self._columns)} FROM {q(self.table)} "
                    f"WHERE {q('row_id')} IN ({marks})"
                )
                out += [
                    self._normal(side, dict(r._mapping)) for r in conn.execute(text(sql), params)
                ]
        return out

    def _present(self, side: SqlAdapter, row_ids: Sequence[str]) -> set[str]:
        q = side.dialect.q
        found: set[str] = set()
        with side.transaction() as conn:
            for part in _chunks(row_ids):
                marks, params = _in(part)
                sql = f"SELECT {q('row_id')} FROM {q(self.table)} WHERE {q('row_id')} IN ({marks})"
                found.update(str(r[0]) for r in conn.execute(text(sql), params))
        return found

    def _delete(
        self,
        side: SqlAdapter,
        conn: Connection,
        row_ids: Sequence[str],
        *,
        before: datetime | None = None,
    ) -> int:
        q = side.dialect.q
        done = 0
        for part in _chunks(row_ids):
            marks, params = _in(part)
            sql = f"DELETE FROM {q(self.table)} WHERE {q('row_id')} IN ({marks})"
            if before is not None:
                sql += f" AND {q('synced_at')} < :before"
                params["before"] = self._stamp(side, before)
            done += int(conn.execute(text(sql), params).rowcount or 0)
        return done

    def _put(
        self, side: SqlAdapter, conn: Connection, rows: list[dict[str, Any]], *, replace: bool
    ) -> None:
        """Write ``rows`` (normal form) verbatim: replacing a row with the same key, or (not
        ``replace``) leaving an existing one as it is."""
        d = side.dialect
        cols = self._columns
        names = ", ".join(d.q(c) for c in cols)
        values = ", ".join(
            f"CAST(:{c} AS JSONB)" if d.name == "postgresql" and c in self._json else f":{c}"
            for c in cols
        )
        keys = ", ".join(d.q(k) for k in self.schema.primary_key)
        if d.name == "mysql":
            tail = (
                " ON DUPLICATE KEY UPDATE "
                + ", ".join(f"{d.q(c)} = VALUES({d.q(c)})" for c in cols[1:])
                if replace
                else ""
            )
            verb = "INSERT" if replace else "INSERT IGNORE"
            sql = f"{verb} INTO {d.q(self.table)} ({names}) VALUES ({values}){tail}"
        else:
            action = (
                "DO UPDATE SET " + ", ".join(f"{d.q(c)} = excluded.{d.q(c)}" for c in cols[1:])
                if replace
                else "DO NOTHING"
            )
            sql = (
                f"INSERT INTO {d.q(self.table)} ({names}) VALUES ({values}) "
                f"ON CONFLICT ({keys}) {action}"
            )
        params = [self._dialect_row(side, r) for r in rows]
        for start in range(0, len(params), _CHUNK):
            conn.execute(text(sql), params[start : start + _CHUNK])

    def _ensure_releases(self, conn: Connection) -> None:
        d = self.hot.dialect
        if self.hot._columns(conn, RELEASES) is None:
            conn.exec_driver_sql(
                f"CREATE TABLE {d.q(RELEASES)} ({d.q('dest_table')} {d.key_type} NOT NULL, "
                f"{d.q('row_id')} {d.key_type} NOT NULL, "
                f"PRIMARY KEY ({d.q('dest_table')}, {d.q('row_id')}))"
            )

    def _record(self, conn: Connection, row_ids: Sequence[str]) -> None:
        d = self.hot.dialect
        verb = "INSERT IGNORE" if d.name == "mysql" else "INSERT"
        tail = "" if d.name == "mysql" else " ON CONFLICT DO NOTHING"
        conn.execute(
            text(
                f"{verb} INTO {d.q(RELEASES)} ({d.q('dest_table')}, {d.q('row_id')}) "
                f"VALUES (:t, :r){tail}"
            ),
            [{"t": self.table, "r": rid} for rid in row_ids],
        )

    # ------------------------------------------------------------------ values

    def _normal(self, side: SqlAdapter, row: dict[str, Any]) -> dict[str, Any]:
        """A row read from ``side`` in one form: JSON as text, booleans as ``bool``, times as
        aware UTC datetimes."""
        dialect = side.dialect.name
        out: dict[str, Any] = {}
        for col, value in row.items():
            if value is None:
                out[col] = None
            elif col in self._json:
                out[col] = json.dumps(value) if dialect == "postgresql" else value
            elif col in self._bools:
                out[col] = bool(value)
            elif col in self._times:
                out[col] = _utc(value)
            else:
                out[col] = value
        return out

    def _dialect_row(self, side: SqlAdapter, row: dict[str, Any]) -> dict[str, Any]:
        """A normal-form row as ``side``'s driver takes it."""
        out = dict(row)
        for col in self._times:
            if col in out and out[col] is not None:
                out[col] = self._stamp(side, out[col])
        if side.dialect.name != "postgresql":
            for col in self._bools:
                if out.get(col) is not None:
                    out[col] = int(out[col])
        return out

    @staticmethod
    def _stamp(side: SqlAdapter, when: datetime) -> Any:
        """``when`` as ``side`` stores timestamps (as :class:`SqlAdapter` writes them)."""
        name = side.dialect.name
        if name == "sqlite":
            return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        if name == "mysql":
            return when.astimezone(UTC).replace(tzinfo=None)
        return when


def _utc(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _in(part: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``:r0, :r1, …`` and their values."""
    return ", ".join(f":r{i}" for i in range(len(part))), {f"r{i}": v for i, v in enumerate(part)}
