"""The durable write-ahead log on SQLAlchemy Core (SQLite or PostgreSQL): one class, composed.

:class:`WriteAheadLog` implements :class:`~lakesync_platform.core.wal.WalStore` for any number
of gateway ids, isolated by key, from cohesive parts:

* :mod:`.append` — the push transaction (claim ids, load rows, write the sync engine's plan),
  run by :mod:`.group_commit`;
* :mod:`.log` — reading entries, cursors, the flush watermark, counters;
* :mod:`.trim` — trimming what the lake holds (entries, old delta ids), the floor, the footprint;
* :mod:`.rows` — row state, what each client holds, pull bookkeeping;
* :mod:`.config` — schemas, sync rules, known columns;
* :mod:`.connectors` — registered connectors and their per-stream state;
* :mod:`.flush_requests` — the flush-request queue;
* :mod:`.actions` — action claims and stored results (idempotency of actions);
* :mod:`.database` and :mod:`.sqlite` — engines and transactions; SQLite's writer lock and
  background checkpointer.

This package does I/O only; what to write is decided by :mod:`lakesync_platform.sync`.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import AdapterError
from . import tables as t
from .actions import SqlActions
from .append import SqlAppend
from .config import SqlConfigStore
from .connectors import SqlConnectorStore
from .database import create_engines, redact
from .flush_requests import SqlFlushRequests
from .group_commit import GroupCommitter
from .log import SqlLog
from .sqlite import SERVER_MEMORY, SqliteMemory
from .trim import SqlTrim

__all__ = ["WriteAheadLog"]


class WriteAheadLog(
    SqlAppend, SqlLog, SqlTrim, SqlConfigStore, SqlConnectorStore, SqlFlushRequests, SqlActions
):
    """The accepted-change log, row state, delivery state, config store, flush requests and
    action results of every gateway, and its connectors, in one SQL database."""

    def __init__(
        self,
        write_engine: Engine,
        read_engine: Engine,
        url: str,
        meta_engine: Engine | None = None,
        on_group_commit: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(write_engine, read_engine, url, meta_engine)
        self._legacy_ids = {}
        self._committer = GroupCommitter(self, on_commit=on_group_commit)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        now_ms: int = 0,
        pool_size: int = 8,
        on_group_commit: Callable[[int], None] | None = None,
        memory: SqliteMemory = SERVER_MEMORY,
    ) -> WriteAheadLog:
        """Open (and migrate) the WAL at ``url``: ``sqlite:///PATH`` or ``postgresql+psycopg://…``.

        ``on_group_commit`` is called with the number of pushes of every committed group;
        ``memory`` bounds an embedded (SQLite) WAL's page cache and memory map per connection
        (a pipeline run opens it with :data:`~.sqlite.BATCH_MEMORY`).
        """
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://") :]
        try:
            write_engine, read_engine, meta_engine = create_engines(url, pool_size, memory)
            wal = cls(write_engine, read_engine, url, meta_engine, on_group_commit)
            wal._migrate(now_ms)
        except (SQLAlchemyError, AdapterError) as exc:
            raise AdapterError(f"Cannot open the WAL at {redact(url)}: {exc}") from exc
        return wal

    def _migrate(self, now_ms: int) -> None:
        with self.write() as conn:
            if self.dialect == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7226001)")
            t.migrate(conn, now_ms)

    def close(self) -> None:
        """Finish queued pushes, stop the writer and checkpoint threads, release connections."""
        self._committer.close()
        self._dispose()
