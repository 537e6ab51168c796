"""The WAL's database: engines, transactions and the dialect helpers its stores share.

Backends:

* SQLite (embedded default): see :mod:`.sqlite` — writers queue on :class:`SqliteWriterLock`,
  a background thread checkpoints.
* PostgreSQL: any number of gateway processes may share one database. A push locks its
  gateway's row in ``wal_gateways`` (``SELECT … FOR UPDATE``) before it reads anything, so
  pushes to one gateway are serialised and commit in cursor order: a reader never sees cursor
  ``n+1`` committed without ``n``.

Driver errors are translated here, at the edge: callers see
:class:`~lakesync_platform.core.errors.AdapterError` only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import AdapterError
from .sqlite import (
    SERVER_MEMORY,
    SqliteCheckpointer,
    SqliteMemory,
    SqliteWriterLock,
    configure_sqlite,
)

__all__ = ["SqlDatabase", "chunks", "create_engines", "redact"]

_CHUNK = 500


def chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size`` (SQLite caps the parameters of a statement)."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def redact(url: str) -> str:
    """``url`` without its credentials (for error messages)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def create_engines(
    url: str, pool_size: int, memory: SqliteMemory = SERVER_MEMORY
) -> tuple[Engine, Engine, Engine | None]:
    """The write, read and bookkeeping engines for ``url`` (``None``: bookkeeping writes on
    the write engine); SQLite connections use ``memory``. Raises :class:`AdapterError` for an
    unsupported URL."""
    if url.startswith("sqlite"):
        write_engine = create_engine(url, pool_size=4, max_overflow=8)
        read_engine = create_engine(url, pool_size=8, max_overflow=16)
        meta_engine = create_engine(url, pool_size=2, max_overflow=8)
        configure_sqlite(write_engine, immediate=True, memory=memory)
        configure_sqlite(read_engine, immediate=False, memory=memory)
        configure_sqlite(meta_engine, immediate=True, synchronous="NORMAL", memory=memory)
        return write_engine, read_engine, meta_engine
    if url.startswith("postgresql"):
        write_engine = create_engine(url, pool_size=pool_size, pool_pre_ping=True)
        return write_engine, write_engine, None
    raise AdapterError(f"Unsupported WAL URL {url!r}: use sqlite:/// or postgresql://")


class SqlDatabase:
    """Transactions on the WAL's database (the base of every SQL store of the WAL)."""

    def __init__(
        self, write_engine: Engine, read_engine: Engine, url: str, meta_engine: Engine | None = None
    ) -> None:
        self._write = write_engine
        self._read = read_engine
        self._meta = meta_engine or write_engine
        database = write_engine.url.database if write_engine.dialect.name == "sqlite" else None
        writer_lock = SqliteWriterLock(database) if database else None
        self._write_lock: AbstractContextManager[Any] = writer_lock or nullcontext()
        self._checkpointer = (
            SqliteCheckpointer(database, writer_lock)
            if database and writer_lock is not None and database != ":memory:"
            else None
        )
        self.url = url
        self.dialect = write_engine.dialect.name

    def _dispose(self) -> None:
        """Stop the checkpointer and release every connection."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        for engine in {self._write, self._read, self._meta}:
            engine.dispose()
        if isinstance(self._write_lock, SqliteWriterLock):
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

    @contextmanager
    def _bookkeeping(self) -> Iterator[Connection]:
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

    def ping(self) -> None:
        """Raise :class:`AdapterError` if the database does not answer."""
        with self.read() as conn:
            conn.execute(select(1))

    # ------------------------------------------------------------------ dialect helpers

    def _insert(self, table: Any) -> Any:
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)

    def _sql(self, template: str) -> str:
        """A raw statement with the driver's placeholder style (``?`` or ``%s``)."""
        return template if self.dialect == "sqlite" else template.replace("?", "%s")

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
        for part in chunks(values):
            stmt = sql.replace("{IN}", "IN (" + ",".join("?" * len(part)) + ")")
            out.extend(conn.exec_driver_sql(stmt, (gw, *part)).all())
        return out
