"""Local writes: change a user table, stamp the columns, queue the delta — in one transaction.

Every :class:`SyncTracker` write runs inside :meth:`LocalDB.transaction` (a savepoint when the
application already opened one), so the user row, its column stamps and the outbox entry are
committed together or not at all. Values are checked against the table's schema before anything
is written (``SchemaError`` for an unknown column or a value of the wrong type).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.delta import RowDelta, check_identifier
from ..core.errors import SchemaError, ValidationError
from ..core.extract import extract_delta
from ..core.hlc import HLC
from ..core.schema import TableSchema, check_delta
from ._db import LocalDB
from ._errors import RowExistsError, RowNotFoundError
from ._outbox import Outbox
from ._schemas import SchemaRegistry, from_sql, to_sql
from ._stamps import RowStamps, load_stamps, save_stamps

__all__ = ["SyncTracker"]


def _q(name: str) -> str:
    return f'"{name}"'


class SyncTracker:
    """Insert, update and delete rows locally; each change is queued for the gateway.

    Writes return the queued :class:`RowDelta` (``None`` when an update changed nothing).
    """

    def __init__(
        self,
        db: LocalDB,
        registry: SchemaRegistry,
        outbox: Outbox,
        hlc: HLC,
        client_id: str,
        clock: Callable[[], int],
    ) -> None:
        self._db = db
        self._registry = registry
        self._outbox = outbox
        self._hlc = hlc
        self._client_id = client_id
        self._clock = clock

    @property
    def client_id(self) -> str:
        """The identity that stamps this client's writes."""
        return self._client_id

    def _schema(self, table: str) -> TableSchema:
        schema = self._registry.get(check_identifier(table, "table"))
        if schema is None:
            raise SchemaError(f'Table "{table}" is not registered with this client')
        return schema

    def _read(self, schema: TableSchema, row_id: str) -> dict[str, Any] | None:
        names = schema.column_names
        cols = "".join(f", {_q(n)}" for n in names)
        rows = self._db.query_tuples(
            f"SELECT _rowId{cols} FROM {_q(schema.table)} WHERE _rowId = ?", (row_id,)
        )
        if not rows:
            return None
        types = [c.type for c in schema.columns]
        return {n: from_sql(v, t) for n, v, t in zip(names, rows[0][1:], types, strict=True)}

    def _queue(self, delta: RowDelta, stamps: RowStamps, schema: TableSchema) -> None:
        save_stamps(self._db, schema.table, {delta.row_id: stamps})
        self._outbox.add(delta, self._clock())
        self._db.mark_changed({schema.table})

    def insert(self, table: str, row_id: str, data: Mapping[str, Any]) -> RowDelta:
        """Create a row; raises :class:`RowExistsError` if the row is already held locally."""
        schema = self._schema(table)
        if not data:
            raise ValidationError("insert needs at least one column")
        types = {c.name: c.type for c in schema.columns}
        with self._db.transaction():
            delta = extract_delta(
                None,
                data,
                table=table,
                row_id=row_id,
                client_id=self._client_id,
                hlc=self._hlc.now(),
            )
            assert delta is not None  # an insert of a non-empty row always yields a delta
            check_delta(schema, delta)
            names = [c.column for c in delta.columns]
            marks = ", ?" * len(names)
            try:
                self._db.exec(
                    f"INSERT INTO {_q(table)} (_rowId{''.join(', ' + _q(n) for n in names)}) "
                    f"VALUES (?{marks})",
                    [row_id, *(to_sql(c.value, types[c.column]) for c in delta.columns)],
                )
            except sqlite3.IntegrityError as exc:
                raise RowExistsError(f'Row "{row_id}" already exists in table "{table}"') from exc
            stamps = load_stamps(self._db, table, [row_id]).get(row_id) or RowStamps()
            stamp = (delta.hlc, self._client_id)
            stamps.columns = dict.fromkeys(names, stamp)
            self._queue(delta, stamps, schema)
        return delta

    def update(self, table: str, row_id: str, data: Mapping[str, Any]) -> RowDelta | None:
        """Change some columns of a held row; only the columns that changed are queued."""
        schema = self._schema(table)
        with self._db.transaction():
            before = self._read(schema, row_id)
            if before is None:
                raise RowNotFoundError(f'Row "{row_id}" not found in table "{table}"')
            for name in data:
                if name not in before:
                    raise SchemaError(f'Unknown column "{name}" for table "{table}"')
            delta = extract_delta(
                before,
                {**before, **data},
                table=table,
                row_id=row_id,
                client_id=self._client_id,
                hlc=self._hlc.now(),
            )
            if delta is None:
                return None
            check_delta(schema, delta)
            types = {c.name: c.type for c in schema.columns}
            sets = ", ".join(f"{_q(c.column)} = ?" for c in delta.columns)
            self._db.exec(
                f"UPDATE {_q(table)} SET {sets} WHERE _rowId = ?",
                [*(to_sql(c.value, types[c.column]) for c in delta.columns), row_id],
            )
            stamps = load_stamps(self._db, table, [row_id]).get(row_id) or RowStamps()
            for col in delta.columns:
                stamps.columns[col.column] = (delta.hlc, self._client_id)
            self._queue(delta, stamps, schema)
        return delta

    def upsert(self, table: str, row_id: str, data: Mapping[str, Any]) -> RowDelta | None:
        """Insert the row, or update it if it is already held."""
        with self._db.transaction():
            if self._read(self._schema(table), row_id) is None:
                return self.insert(table, row_id, data)
            return self.update(table, row_id, data)

    def delete(self, table: str, row_id: str) -> RowDelta:
        """Delete a held row; raises :class:`RowNotFoundError` if there is none."""
        schema = self._schema(table)
        with self._db.transaction():
            if self._db.exec(f"DELETE FROM {_q(table)} WHERE _rowId = ?", (row_id,)) == 0:
                raise RowNotFoundError(f'Row "{row_id}" not found in table "{table}"')
            delta = extract_delta(
                {},
                None,
                table=table,
                row_id=row_id,
                client_id=self._client_id,
                hlc=self._hlc.now(),
            )
            assert delta is not None  # row → nothing is always a DELETE
            self._queue(delta, RowStamps({}, (delta.hlc, self._client_id)), schema)
        return delta

    def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The row's columns as JSON values (``None`` if not held)."""
        return self._read(self._schema(table), row_id)

    def all(self, table: str) -> dict[str, dict[str, Any]]:
        """Every held row of ``table`` as ``{row_id: {column: value}}`` (JSON values)."""
        schema = self._schema(table)
        names = schema.column_names
        types = [c.type for c in schema.columns]
        cols = "".join(f", {_q(n)}" for n in names)
        return {
            row[0]: {n: from_sql(v, t) for n, v, t in zip(names, row[1:], types, strict=True)}
            for row in self._db.query_tuples(f"SELECT _rowId{cols} FROM {_q(table)}")
        }

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a read query on the local database (rows as dicts of SQLite values)."""
        return self._db.query(sql, params)
