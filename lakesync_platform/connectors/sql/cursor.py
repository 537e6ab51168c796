"""The SQL ``cursor`` strategy: rows whose cursor column is past the last one seen.

A poll reads ``SELECT * FROM <table or (query)> WHERE <cursor> > :since ORDER BY <cursor>,
<row id>`` with ``since = last cursor − lookback`` (none on the first poll). The statement is
SQLAlchemy ``text`` with a bound parameter, so each dialect gets its own placeholder style
(``%(since)s`` for psycopg and PyMySQL) and its own identifier quoting; rows stream from a
server-side cursor in pages of ``page_size``, so a million-row table is never held at once.
Each page's state is the cursor value of its last row (typed, so the lookback subtracts
milliseconds from a timestamp or a number and leaves anything else as it is).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from ...core.connectors import CursorStrategy, SqlTable
from ...core.errors import AdapterError
from ..model import Page
from ..records import json_value, row_change

__all__ = ["SqlCursorStream", "cursor_since", "encode_cursor", "source_engine", "sqlalchemy_url"]

_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}


def sqlalchemy_url(url: str) -> str:
    """``url`` with this platform's driver for its backend (``postgresql://`` → psycopg,
    ``mysql://`` → PyMySQL); URLs naming a driver are kept."""
    parsed = make_url(url)
    if "+" in parsed.drivername:
        return url
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise AdapterError(f"Unsupported SQL source {parsed.drivername!r}: use postgresql or mysql")
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def source_engine(url: str) -> Engine:
    """An engine on a SQL source (one connection: a poll reads one table at a time)."""
    return create_engine(sqlalchemy_url(url), pool_size=1, max_overflow=0, pool_pre_ping=True)


def encode_cursor(value: Any) -> dict[str, Any]:
    """A cursor value as stream state: JSON plus its kind (``datetime``, ``date``, ``number``,
    ``text``)."""
    if isinstance(value, dt.datetime):
        return {"cursor": value.isoformat(), "kind": "datetime"}
    if isinstance(value, dt.date):
        return {"cursor": value.isoformat(), "kind": "date"}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"cursor": value, "kind": "number"}
    return {"cursor": json_value(value), "kind": "text"}


def cursor_since(state: Mapping[str, Any], lookback_ms: int) -> Any:
    """The parameter of the next poll: the saved cursor minus the lookback (``None``: the
    first poll reads everything)."""
    if "cursor" not in state:
        return None
    value, kind = state["cursor"], state.get("kind")
    if kind == "datetime":
        return dt.datetime.fromisoformat(value) - dt.timedelta(milliseconds=lookback_ms)
    if kind == "date":
        return dt.date.fromisoformat(value) - dt.timedelta(days=-(-lookback_ms // 86_400_000))
    if kind == "number":
        return value - lookback_ms
    return value


@dataclass(frozen=True, slots=True)
class SqlCursorStream:
    """One ``cursor``-strategy table of a SQL connector, as a :class:`~..model.Stream`."""

    spec: SqlTable
    engine: Engine
    page_size: int = 500

    @property
    def name(self) -> str:
        """State key: the gateway table."""
        return self.spec.table

    @property
    def table(self) -> str:
        """The gateway table written."""
        return self.spec.table

    def statement(self, first: bool) -> str:
        """The poll's SQL in this engine's dialect (``:since`` bound by SQLAlchemy)."""
        strategy = self.spec.strategy
        assert isinstance(strategy, CursorStrategy)
        quote = self.engine.dialect.identifier_preparer.quote
        source = self.spec.source_sql
        if self.spec.query is None:
            source = ".".join(quote(part) for part in source.split("."))
        col, rid = quote(strategy.cursor_column), quote(self.spec.row_id_column)
        where = "" if first else f" WHERE _src.{col} > :since"
        alias = "" if self.spec.query is not None else " AS _src"
        return f"SELECT * FROM {source}{alias}{where} ORDER BY _src.{col}, _src.{rid}"

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """Pages of ``page_size`` rows in cursor order, each with the cursor of its last row."""
        strategy = self.spec.strategy
        assert isinstance(strategy, CursorStrategy)
        since = cursor_since(state, strategy.lookback_ms)
        sql = text(self.statement(since is None))
        params = {} if since is None else {"since": since}
        with self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=self.page_size).execute(
                sql, params
            )
            for part in result.mappings().partitions(self.page_size):
                last = part[-1][strategy.cursor_column]
                changes = [row_change(row, self.spec.row_id_column) for row in part]
                yield Page(changes, encode_cursor(last), api_calls=1)
