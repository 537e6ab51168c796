"""SQL destinations and the ``DatabaseAdapter`` role: PostgreSQL, MySQL/MariaDB and SQLite.

A :class:`SqlAdapter` wraps one SQLAlchemy engine, implements the
:class:`~lakesync_platform.adapters.destination.Destination` port (its unit of work is a
SQLAlchemy connection inside a transaction) and speaks its dialect natively:

* **destination tables** (PROTOCOL.md §10.5): ``row_id``, the schema's typed columns, ``props``
  (JSON, default ``{}``, never written by upserts), ``deleted_at`` when the schema soft-deletes,
  ``synced_at``; primary key from the schema, ``UNIQUE`` on ``externalIdColumn``. DDL is created
  on first use and evolved additively (missing columns are added, nothing is dropped).
  Upserts use the dialect's native statement — Postgres ``COPY`` into a temporary stage then
  ``INSERT … ON CONFLICT DO UPDATE``, MySQL ``INSERT … ON DUPLICATE KEY UPDATE``, SQLite
  ``INSERT … ON CONFLICT DO UPDATE`` — and deletes set ``deleted_at`` (or delete the row);
* **materialise watermarks**: the last state cursor written to each destination table, stored
  in ``lakesync_materialise_watermarks`` in the same transaction as the rows;
* the reference's **DatabaseAdapter** role: a ``lakesync_deltas`` table, idempotent
  :meth:`SqlAdapter.insert_deltas`, :meth:`SqlAdapter.deltas_since` and
  :meth:`SqlAdapter.latest_state`.

Driver errors are translated to :class:`~lakesync_platform.core.errors.AdapterError` here.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from ..core.delta import ColumnDelta, RowDelta, check_identifier
from ..core.errors import AdapterError
from ..core.merge import RowState, merge_delta
from ..core.schema import TableSchema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DESTINATION_TYPES", "DestinationRow", "SqlAdapter"]

DESTINATION_TYPES: Final[dict[str, dict[str, str]]] = {
    "postgresql": {
        "string": "TEXT",
        "number": "DOUBLE PRECISION",
        "boolean": "BOOLEAN",
        "json": "JSONB",
        "null": "TEXT",
    },
    "mysql": {
        "string": "TEXT",
        "number": "DOUBLE",
        "boolean": "TINYINT(1)",
        "json": "JSON",
        "null": "TEXT",
    },
    "sqlite": {
        "string": "TEXT",
        "number": "REAL",
        "boolean": "INTEGER",
        "json": "TEXT",
        "null": "TEXT",
    },
}
"""Schema column type → destination SQL type per dialect (PROTOCOL.md §10.5)."""

WATERMARKS: Final = "lakesync_materialise_watermarks"
DELTAS: Final = "lakesync_deltas"
_CHUNK: Final = 1000

DestinationRow = tuple[Any, ...]
"""``(row_id, value of each schema column in schema order)``; json values as JSON text."""


@dataclass(frozen=True, slots=True)
class _Dialect:
    name: str

    def q(self, ident: str) -> str:
        check_identifier(ident, "identifier")
        return f"`{ident}`" if self.name == "mysql" else f'"{ident}"'

    @property
    def key_type(self) -> str:
        return "VARCHAR(255)" if self.name == "mysql" else "TEXT"

    @property
    def ts_type(self) -> str:
        return {"postgresql": "TIMESTAMPTZ", "mysql": "TIMESTAMP", "sqlite": "TEXT"}[self.name]

    @property
    def props_ddl(self) -> str:
        if self.name == "postgresql":
            return "JSONB NOT NULL DEFAULT '{}'"
        if self.name == "mysql":
            return "JSON NOT NULL DEFAULT ('{}')"
        return "TEXT NOT NULL DEFAULT '{}'"


class SqlAdapter:
    """A SQL database as materialise destination and delta store (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        name = engine.dialect.name
        if name not in DESTINATION_TYPES:
            raise AdapterError(f"Unsupported SQL dialect {name!r}")
        self.engine = engine
        self.dialect = _Dialect(name)

    @classmethod
    def connect(cls, url: str) -> SqlAdapter:
        """Open ``url`` (``postgresql+psycopg://``, ``mysql+pymysql://``, ``sqlite:///``)."""
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        if url.startswith(("mysql://", "mariadb://")):
            url = "mysql+pymysql://" + url.split("://", 1)[1]
        try:
            return cls(create_engine(url, pool_pre_ping=True))
        except SQLAlchemyError as exc:
            raise AdapterError(f"Cannot open destination: {exc}") from exc

    def close(self) -> None:
        """Release every connection."""
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction; driver errors surface as :class:`AdapterError` (the DB-API's own
        too: bulk upserts run on the driver's cursor)."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except (SQLAlchemyError, self.engine.dialect.loaded_dbapi.Error) as exc:
            raise AdapterError(f"{self.dialect.name} destination failed: {exc}") from exc

    # ------------------------------------------------------------------ destination DDL

    def ensure_table(self, schema: TableSchema, name: str | None = None) -> str:
        """Create the destination table of ``schema`` or add the columns it lacks (and the
        watermark table), in a transaction of its own; return the table's name."""
        name = check_identifier(name or schema.table, "table")
        with self.transaction() as conn:
            self.ensure_table_in(conn, schema, name)
        return name

    def ensure_table_in(self, conn: Connection, schema: TableSchema, name: str) -> bool:
        """:meth:`ensure_table` inside the caller's transaction (on MySQL, whose DDL commits
        implicitly, call it first); return whether the table was created."""
        check_identifier(name, "table")
        d = self.dialect
        types = DESTINATION_TYPES[d.name]
        cols = [(c.name, types[c.type]) for c in schema.columns if c.name != "row_id"]
        present = self._columns(conn, name)
        if present is None:
            parts = [f"{d.q('row_id')} {d.key_type} NOT NULL"]
            parts += [f"{d.q(n)} {t}" for n, t in cols]
            parts.append(f"{d.q('props')} {d.props_ddl}")
            if schema.soft_delete:
                parts.append(f"{d.q('deleted_at')} {d.ts_type} NULL")
            parts.append(f"{d.q('synced_at')} {d.ts_type} NOT NULL")
            parts.append(f"PRIMARY KEY ({', '.join(d.q(k) for k in schema.primary_key)})")
            if schema.external_id_column:
                ext = schema.external_id_column
                if d.name == "mysql":
                    parts.append(f"UNIQUE KEY ({d.q(ext)}(255))")
                else:
                    parts.append(f"UNIQUE ({d.q(ext)})")
            conn.exec_driver_sql(f"CREATE TABLE {d.q(name)} ({', '.join(parts)})")
        else:
            missing = [(n, t) for n, t in cols if n not in present]
            if schema.soft_delete and "deleted_at" not in present:
                missing.append(("deleted_at", f"{d.ts_type} NULL"))
            for n, t in missing:
                conn.exec_driver_sql(f"ALTER TABLE {d.q(name)} ADD COLUMN {d.q(n)} {t}")
        if self._columns(conn, WATERMARKS) is None:
            conn.exec_driver_sql(
                f"CREATE TABLE {d.q(WATERMARKS)} ({d.q('source')} {d.key_type} NOT NULL "
                f"PRIMARY KEY, {d.q('cursor')} BIGINT NOT NULL)"
            )
        return present is None

    def _columns(self, conn: Connection, table: str) -> set[str] | None:
        """The column names of ``table`` (None when it does not exist): one catalog query."""
        d = self.dialect
        if d.name == "postgresql":
            sql = (
                "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = "
                "to_regclass(quote_ident(current_schema()) || '.' || :t) "
                "AND attnum > 0 AND NOT attisdropped"
            )
            rows = conn.execute(text(sql), {"t": d.q(table)}).scalars().all()
        elif d.name == "mysql":
            sql = (
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = :t"
            )
            rows = conn.execute(text(sql), {"t": table}).scalars().all()
        else:
            sql = "SELECT name FROM pragma_table_info(:t)"
            rows = conn.execute(text(sql), {"t": table}).scalars().all()
        return {str(r) for r in rows} or None

    # ------------------------------------------------------------------ materialise

    def watermark(self, key: str) -> int:
        """The last state cursor materialised under ``key`` (0 when none). Read-only."""
        d = self.dialect
        with self.transaction() as conn:
            if self._columns(conn, WATERMARKS) is None:
                return 0
            value = conn.execute(
                text(f"SELECT {d.q('cursor')} FROM {d.q(WATERMARKS)} WHERE {d.q('source')} = :k"),
                {"k": key},
            ).scalar()
        return int(value or 0)

    def set_watermark(self, conn: Connection, key: str, cursor: int, expected: int) -> None:
        """Move ``key`` from ``expected`` (what the run read before it started) to ``cursor``
        inside the caller's transaction.

        Raises :class:`AdapterError` (the caller's transaction then rolls back, rows and all)
        when another run moved the watermark meanwhile: that run wrote a state at least as new,
        which this one must not overwrite with its older rows."""
        d = self.dialect
        src, cur, tbl = d.q("source"), d.q("cursor"), d.q(WATERMARKS)
        if expected == 0:
            verb = "INSERT IGNORE" if d.name == "mysql" else "INSERT"
            tail = "" if d.name == "mysql" else f" ON CONFLICT ({src}) DO NOTHING"
            sql = f"{verb} INTO {tbl} ({src}, {cur}) VALUES (:k, :c){tail}"
        else:
            sql = f"UPDATE {tbl} SET {cur} = :c WHERE {src} = :k AND {cur} = :e"
        done = conn.execute(text(sql), {"k": key, "c": cursor, "e": expected}).rowcount
        if done != 1:
            raise AdapterError(
                f"Watermark {key!r} moved past {expected} while this run was writing: "
                "another run materialised this table concurrently; nothing was written"
            )

    def upsert_rows(
        self,
        conn: Connection,
        schema: TableSchema,
        rows: Sequence[DestinationRow],
        synced_at: datetime,
        name: str | None = None,
    ) -> int:
        """Insert or update live rows (and clear their ``deleted_at``); return how many."""
        if not rows:
            return 0
        d = self.dialect
        name = name or schema.table
        cols = [c.name for c in schema.columns if c.name != "row_id"]
        target = [c.name for c in schema.columns if c.name == schema.external_id_column] or list(
            schema.primary_key
        )
        all_cols = ["row_id", *cols]
        sets = [f"{d.q(c)} = excluded.{d.q(c)}" for c in cols]
        if schema.soft_delete:
            sets.append(f"{d.q('deleted_at')} = NULL")
        sets.append(f"{d.q('synced_at')} = excluded.{d.q('synced_at')}")
        col_list = ", ".join(d.q(c) for c in [*all_cols, "synced_at"])
        if d.name == "postgresql":
            return self._pg_upsert(conn, schema, name, rows, synced_at)
        stamp = synced_at.strftime("%Y-%m-%d %H:%M:%S.%f")
        params = [(*row, stamp) for row in _sqlite_bools(d.name, schema, rows)]
        placeholders = ", ".join(["%s" if d.name == "mysql" else "?"] * (len(all_cols) + 1))
        if d.name == "mysql":
            mysets = [f"{d.q(c)} = VALUES({d.q(c)})" for c in cols]
            if schema.soft_delete:
                mysets.append(f"{d.q('deleted_at')} = NULL")
            mysets.append(f"{d.q('synced_at')} = VALUES({d.q('synced_at')})")
            sql = (
                f"INSERT INTO {d.q(name)} ({col_list}) VALUES ({placeholders}) "
                f"ON DUPLICATE KEY UPDATE {', '.join(mysets)}"
            )
        else:
            sql = (
                f"INSERT INTO {d.q(name)} ({col_list}) VALUES ({placeholders}) "
                f"ON CONFLICT ({', '.join(d.q(c) for c in target)}) DO UPDATE SET {', '.join(sets)}"
            )
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            for start in range(0, len(params), 5000):
                cursor.executemany(sql, params[start : start + 5000])
        finally:
            cursor.close()
        return len(rows)

    def is_empty(self, conn: Connection, name: str) -> bool:
        """Whether the destination table holds no row."""
        d = self.dialect
        return conn.exec_driver_sql(f"SELECT 1 FROM {d.q(name)} LIMIT 1").first() is None

    def upsert_arrow(
        self,
        conn: Connection,
        schema: TableSchema,
        rows: pa.Table,
        synced_at: datetime,
        name: str | None = None,
        *,
        empty_target: bool = False,
    ) -> int:
        """Upsert an Arrow table whose columns are ``row_id`` then the schema's columns.

        Postgres streams it to ``COPY`` as CSV written by Arrow (no per-row Python): into a
        stage and from there ``INSERT … ON CONFLICT``, or — when the caller saw the table empty
        in this transaction (``empty_target``, a first load) and rows cannot collide on an
        external id — straight into the table. The other dialects go through
        :meth:`upsert_rows`.
        """
        if rows.num_rows == 0:
            return 0
        if self.dialect.name != "postgresql":
            columns = [rows.column(i).to_pylist() for i in range(rows.num_columns)]
            return self.upsert_rows(conn, schema, list(zip(*columns, strict=True)), synced_at, name)
        if empty_target and not schema.external_id_column:
            return self._pg_copy(conn, name or schema.table, rows, synced_at)
        return self._pg_upsert(conn, schema, name or schema.table, rows, synced_at)

    def _pg_copy(self, conn: Connection, name: str, rows: pa.Table, synced_at: datetime) -> int:
        """``COPY`` rows (plus ``synced_at``) straight into the table, as CSV written by Arrow."""
        import pyarrow as pa

        d = self.dialect
        # As ISO 8601 text: Arrow's CSV writer formats timestamps an order of magnitude slower.
        stamp = pa.repeat(pa.scalar(synced_at.isoformat(), pa.string()), rows.num_rows)
        stamped = rows.append_column("synced_at", stamp)
        col_list = ", ".join(d.q(c) for c in stamped.column_names)
        raw = conn.connection.driver_connection
        with (
            raw.cursor() as cur,  # type: ignore[union-attr]
            cur.copy(f"COPY {d.q(name)} ({col_list}) FROM STDIN WITH (FORMAT csv)") as copy,
        ):
            copy.write(_arrow_csv(stamped))
        return int(rows.num_rows)

    def _pg_upsert(
        self,
        conn: Connection,
        schema: TableSchema,
        name: str,
        rows: Sequence[DestinationRow] | pa.Table,
        synced_at: datetime,
    ) -> int:
        """COPY ``rows`` into a temporary stage, then ``INSERT … ON CONFLICT DO UPDATE``."""
        d = self.dialect
        types = DESTINATION_TYPES["postgresql"]
        cols = [c for c in schema.columns if c.name != "row_id"]
        all_cols = ["row_id", *[c.name for c in cols]]
        stage_cols = [f"{d.q('row_id')} TEXT"] + [f"{d.q(c.name)} {types[c.type]}" for c in cols]
        stage = d.q("_lakesync_stage")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {stage}")
        conn.exec_driver_sql(f"CREATE TEMP TABLE {stage} ({', '.join(stage_cols)}) ON COMMIT DROP")
        raw = conn.connection.driver_connection
        col_list = ", ".join(d.q(c) for c in all_cols)
        with raw.cursor() as cur:  # type: ignore[union-attr]
            if isinstance(rows, Sequence):
                with cur.copy(f"COPY {stage} ({col_list}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                with cur.copy(f"COPY {stage} ({col_list}) FROM STDIN WITH (FORMAT csv)") as copy:
                    copy.write(_arrow_csv(rows))
        target = [c.name for c in schema.columns if c.name == schema.external_id_column] or list(
            schema.primary_key
        )
        sets = [f"{d.q(c)} = excluded.{d.q(c)}" for c in all_cols[1:]]
        if schema.soft_delete:
            sets.append(f"{d.q('deleted_at')} = NULL")
        sets.append(f"{d.q('synced_at')} = excluded.{d.q('synced_at')}")
        result = conn.execute(
            text(
                f"INSERT INTO {d.q(name)} ({col_list}, {d.q('synced_at')}) "
                f"SELECT {col_list}, :ts FROM {stage} "
                f"ON CONFLICT ({', '.join(d.q(c) for c in target)}) DO UPDATE SET {', '.join(sets)}"
            ),
            {"ts": synced_at},
        )
        conn.exec_driver_sql(f"DROP TABLE {stage}")
        return int(result.rowcount or 0)

    def delete_rows(
        self,
        conn: Connection,
        schema: TableSchema,
        row_ids: Sequence[str],
        synced_at: datetime,
        name: str | None = None,
    ) -> int:
        """Soft-delete (set ``deleted_at``) or delete rows by ``row_id``; return rows affected."""
        d = self.dialect
        name = name or schema.table
        ts: Any = synced_at if d.name != "sqlite" else synced_at.strftime("%Y-%m-%d %H:%M:%S.%f")
        if schema.soft_delete:
            head = f"UPDATE {d.q(name)} SET {d.q('deleted_at')} = :ts, {d.q('synced_at')} = :ts "
            tail = f" AND {d.q('deleted_at')} IS NULL"
        else:
            head, tail = f"DELETE FROM {d.q(name)} ", ""
        if d.name == "postgresql" and row_ids:
            # One statement, the ids as one array parameter.
            sql = f"{head}WHERE {d.q('row_id')} = ANY(:ids){tail}"
            return int(conn.execute(text(sql), {"ids": list(row_ids), "ts": ts}).rowcount or 0)
        done = 0
        for start in range(0, len(row_ids), _CHUNK):
            chunk = list(row_ids[start : start + _CHUNK])
            marks = ", ".join(f":r{i}" for i in range(len(chunk)))
            params: dict[str, Any] = {f"r{i}": rid for i, rid in enumerate(chunk)}
            params["ts"] = ts
            sql = f"{head}WHERE {d.q('row_id')} IN ({marks}){tail}"
            done += int(conn.execute(text(sql), params).rowcount or 0)
        return done

    def read_rows(self, name: str) -> list[dict[str, Any]]:
        """Every row of a destination table as dicts (for checks and tests)."""
        with self.transaction() as conn:
            result = conn.execute(text(f"SELECT * FROM {self.dialect.q(name)}"))
            return [dict(r._mapping) for r in result]

    def read_back(self, schema: TableSchema, name: str | None = None) -> list[dict[str, Any]]:
        """Every row of the destination table of ``schema``, synced columns as the lake's state
        holds them: json decoded, booleans as ``bool``, numbers as ``float``."""
        return self._as_state(schema, self.read_rows(name or schema.table))

    def read_back_rows(
        self, schema: TableSchema, row_ids: Sequence[str], name: str | None = None
    ) -> list[dict[str, Any]]:
        """The rows among ``row_ids``, as :meth:`read_back` reads them (one ``IN`` query per
        thousand ids; on Postgres one query, the ids as an array)."""
        d = self.dialect
        head = f"SELECT * FROM {d.q(name or schema.table)} WHERE {d.q('row_id')}"
        rows: list[dict[str, Any]] = []
        with self.transaction() as conn:
            if d.name == "postgresql":
                if row_ids:
                    found = conn.execute(text(f"{head} = ANY(:ids)"), {"ids": list(row_ids)})
                    rows = [dict(r._mapping) for r in found]
                return self._as_state(schema, rows)
            for start in range(0, len(row_ids), _CHUNK):
                chunk = list(row_ids[start : start + _CHUNK])
                marks = ", ".join(f":r{i}" for i in range(len(chunk)))
                params = {f"r{i}": rid for i, rid in enumerate(chunk)}
                found = conn.execute(text(f"{head} IN ({marks})"), params)
                rows += [dict(r._mapping) for r in found]
        return self._as_state(schema, rows)

    def read_back_batches(
        self, schema: TableSchema, batch_rows: int, name: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """:meth:`read_back` in ``row_id`` order, ``batch_rows`` at most per batch: a short
        query per batch, after the last ``row_id`` before (no read stays open meanwhile)."""
        rid, after = self.dialect.q("row_id"), None
        head = f"SELECT * FROM {self.dialect.q(name or schema.table)}"
        while True:
            where = "" if after is None else f" WHERE {rid} > :after"
            with self.transaction() as conn:
                sql = text(f"{head}{where} ORDER BY {rid} LIMIT :n")
                rows = [
                    dict(r._mapping) for r in conn.execute(sql, {"after": after, "n": batch_rows})
                ]
            if not rows:
                return
            after = rows[-1]["row_id"]
            yield self._as_state(schema, rows)
            if len(rows) < batch_rows:
                return

    def _as_state(self, schema: TableSchema, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` with their synced columns as the lake's state holds them (in place)."""
        types = [(c.name, c.type) for c in schema.columns if c.name != "row_id"]
        for row in rows:
            for col, typ in types:
                row[col] = self._state_value(row[col], typ)
        return rows

    def _state_value(self, value: Any, typ: str) -> Any:
        """A value read from this dialect as the lake's state holds it."""
        if value is None:
            return None
        if typ == "json":
            return value if self.dialect.name == "postgresql" else json.loads(value)
        if typ == "boolean":
            return bool(value)
        if typ == "number":
            return float(value)
        return value

    def drop_table(self, name: str) -> None:
        """Drop a table if it exists."""
        with self.transaction() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.dialect.q(name)}")

    # ------------------------------------------------------------------ DatabaseAdapter role

    def ensure_delta_log(self) -> None:
        """Create ``lakesync_deltas`` (reference layout, PROTOCOL.md §10.5) if missing."""
        d = self.dialect
        key = d.key_type
        cols_type = {"postgresql": "JSONB", "mysql": "JSON", "sqlite": "TEXT"}[d.name]
        with self.transaction() as conn:
            if self._columns(conn, DELTAS) is not None:
                return
            conn.exec_driver_sql(
                f"CREATE TABLE {d.q(DELTAS)} ({d.q('delta_id')} {key} PRIMARY KEY, "
                f"{d.q('table')} {key} NOT NULL, {d.q('row_id')} {key} NOT NULL, "
                f"{d.q('columns')} {cols_type} NOT NULL, {d.q('hlc')} BIGINT NOT NULL, "
                f"{d.q('client_id')} {key} NOT NULL, {d.q('op')} VARCHAR(50) NOT NULL)"
            )
            conn.exec_driver_sql(
                f"CREATE INDEX idx_lakesync_deltas_hlc ON {d.q(DELTAS)} ({d.q('hlc')})"
            )
            conn.exec_driver_sql(
                f"CREATE INDEX idx_lakesync_deltas_table_row ON {d.q(DELTAS)} "
                f"({d.q('table')}, {d.q('row_id')})"
            )

    def insert_deltas(self, deltas: Sequence[RowDelta]) -> int:
        """Insert deltas, ignoring ``delta_id``s already present; return how many were new."""
        d = self.dialect
        rows = [
            {
                "delta_id": x.delta_id,
                "tbl": x.table,
                "row_id": x.row_id,
                "cols": json.dumps([{"column": c.column, "value": c.value} for c in x.columns]),
                "hlc": x.hlc,
                "client_id": x.client_id,
                "op": x.op,
            }
            for x in deltas
        ]
        if not rows:
            return 0
        cols = ", ".join(
            d.q(c) for c in ("delta_id", "table", "row_id", "columns", "hlc", "client_id", "op")
        )
        values = "(:delta_id, :tbl, :row_id, :cols, :hlc, :client_id, :op)"
        if d.name == "mysql":
            sql = f"INSERT IGNORE INTO {d.q(DELTAS)} ({cols}) VALUES {values}"
        else:
            sql = (
                f"INSERT INTO {d.q(DELTAS)} ({cols}) VALUES {values} "
                f"ON CONFLICT ({d.q('delta_id')}) DO NOTHING"
            )
        added = 0
        with self.transaction() as conn:
            for row in rows:
                added += int(conn.execute(text(sql), row).rowcount or 0)
        return added

    def _select_deltas(self) -> str:
        d = self.dialect
        return (
            f"SELECT {d.q('delta_id')}, {d.q('table')}, {d.q('row_id')}, {d.q('columns')}, "
            f"{d.q('hlc')}, {d.q('client_id')}, {d.q('op')} FROM {d.q(DELTAS)} "
        )

    def deltas_since(
        self, since: int, tables: Sequence[str] | None = None, limit: int | None = None
    ) -> list[RowDelta]:
        """Deltas with HLC greater than ``since`` (optionally of ``tables``), ordered by
        ``(hlc, delta_id)``, at most ``limit`` (the limit is in the query)."""
        d = self.dialect
        params: dict[str, Any] = {"since": since}
        where = f"{d.q('hlc')} > :since"
        if tables:
            marks = ", ".join(f":t{i}" for i in range(len(tables)))
            where += f" AND {d.q('table')} IN ({marks})"
            params.update({f"t{i}": check_identifier(t, "table") for i, t in enumerate(tables)})
        sql = f"{self._select_deltas()}WHERE {where} ORDER BY {d.q('hlc')}, {d.q('delta_id')}"
        if limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = limit
        with self.transaction() as conn:
            result = conn.execute(text(sql), params).all()
        return [_row_delta(*row) for row in result]

    def latest_state(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The current row (``{column: value}``), ``None`` when deleted or unknown.

        Folds the row's stored deltas in ``(hlc, delta_id)`` order with the per-column LWW of
        :func:`~lakesync_platform.core.merge.merge_delta` — the reference's latest-state merge
        (PROTOCOL.md §3.5: later columns overwrite, a delete clears) on a log whose HLCs
        differ, and deterministic where two clients wrote one row at the same HLC.
        """
        d = self.dialect
        params = {"tbl": check_identifier(table, "table"), "rid": row_id}
        sql = (
            f"{self._select_deltas()}WHERE {d.q('table')} = :tbl AND {d.q('row_id')} = :rid "
            f"ORDER BY {d.q('hlc')}, {d.q('delta_id')}"
        )
        state: RowState | None = None
        with self.transaction() as conn:
            for row in conn.execute(text(sql), params).all():
                state = merge_delta(state, _row_delta(*row)).state
        return state.values() if state is not None and state.live else None


def _arrow_csv(rows: pa.Table) -> bytes:
    """Rows as headerless CSV for Postgres ``COPY``: null is empty, "" is quoted."""
    import pyarrow.csv as pacsv

    buffer = io.BytesIO()
    pacsv.write_csv(rows, buffer, pacsv.WriteOptions(include_header=False, quoting_style="needed"))
    return buffer.getvalue()


def _sqlite_bools(
    dialect: str, schema: TableSchema, rows: Sequence[DestinationRow]
) -> Iterable[DestinationRow]:
    """SQLite and MySQL store booleans as integers."""
    value_cols = [c for c in schema.columns if c.name != "row_id"]
    bool_idx = [i + 1 for i, c in enumerate(value_cols) if c.type == "boolean"]
    if not bool_idx:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i in bool_idx:
            if values[i] is not None:
                values[i] = int(values[i])
        out.append(tuple(values))
    return out


def _row_delta(
    delta_id: str, table: str, row_id: str, columns: Any, hlc: int, client_id: str, op: str
) -> RowDelta:
    raw = json.loads(columns) if isinstance(columns, (str, bytes)) else columns
    cols = tuple(ColumnDelta(c["column"], c["value"]) for c in raw)
    return RowDelta(op, table, row_id, client_id, cols, int(hlc), delta_id)
