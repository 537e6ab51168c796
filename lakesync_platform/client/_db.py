"""The client's local SQLite database: one file per client (or memory).

:class:`LocalDB` is a thin, thread-safe wrapper over :mod:`sqlite3` in autocommit mode with
explicit transactions: :meth:`LocalDB.transaction` opens ``BEGIN IMMEDIATE`` at the outermost
level and a ``SAVEPOINT`` when nested (as ``sqlite_utils.Database.atomic``), so a tracker write
inside an application transaction commits or rolls back with it.

Change notification: code that modifies a user table calls :meth:`LocalDB.mark_changed`; the
tables are announced to the listeners once the outermost transaction commits (and forgotten on
rollback). Listeners run after the lock is released, in the thread that committed.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["ChangeListener", "LocalDB"]

log = logging.getLogger(__name__)

ChangeListener = Callable[[frozenset[str]], None]
"""Called with the names of the user tables a committed transaction changed."""


class LocalDB:
    """A local SQLite database shared by the tracker, the sync engine and the application.

    ``LocalDB.open(path)`` for a file (WAL journal, ``synchronous=NORMAL``: a commit survives a
    crash of the process; pass ``synchronous="FULL"`` to survive power loss too),
    ``LocalDB.memory()`` for tests. Every method may be called from any thread.
    """

    def __init__(self, conn: sqlite3.Connection, path: str | None) -> None:
        self._conn = conn
        self._lock = threading.RLock()
        self._depth = 0
        self._changed: set[str] = set()
        self._listeners: list[ChangeListener] = []
        self._closed = False
        self.path = path
        """The database file, or ``None`` for an in-memory database."""

    @classmethod
    def open(cls, path: str | Path, *, synchronous: str = "NORMAL") -> LocalDB:
        """Open (creating if needed) the database file at ``path``."""
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"invalid synchronous mode {synchronous!r}")
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute("PRAGMA busy_timeout=5000")
        return cls(conn, str(path))

    @classmethod
    def memory(cls) -> LocalDB:
        """A private in-memory database (gone when closed)."""
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        return cls(conn, None)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def lock(self) -> threading.RLock:
        """The re-entrant lock every database call holds; hold it to serialise with writes."""
        return self._lock

    @property
    def in_transaction(self) -> bool:
        """Whether the calling code runs inside :meth:`transaction`."""
        return self._depth > 0

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute one statement; returns the number of rows it changed."""
        with self._lock:
            return self._conn.execute(sql, tuple(params)).rowcount

    def exec_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Execute one statement once per parameter row."""
        with self._lock:
            return self._conn.executemany(sql, rows).rowcount

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts (column name → SQLite value)."""
        with self._lock:
            cur = self._conn.execute(sql, tuple(params))
            names = [d[0] for d in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def query_tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query and return its rows as tuples (cheaper than :meth:`query`)."""
        with self._lock:
            return self._conn.execute(sql, tuple(params)).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[LocalDB]:
        """Run a block atomically; nested calls become savepoints.

        The lock is held for the whole block, so other threads wait rather than interleave.
        """
        with self._lock:
            self._check_open()
            outer = self._depth == 0
            savepoint = f"sp_{self._depth}"
            self._conn.execute("BEGIN IMMEDIATE" if outer else f"SAVEPOINT {savepoint}")
            self._depth += 1
            changed_before = set(self._changed)
            try:
                yield self
            except BaseException:
                self._depth -= 1
                if outer:
                    self._conn.execute("ROLLBACK")
                    self._changed.clear()
                else:
                    self._conn.execute(f"ROLLBACK TO {savepoint}")
                    self._conn.execute(f"RELEASE {savepoint}")
                    self._changed = changed_before
                raise
            self._depth -= 1
            if not outer:
                self._conn.execute(f"RELEASE {savepoint}")
                return
            self._conn.execute("COMMIT")
            changed = frozenset(self._changed)
            self._changed.clear()
        if changed:
            self._notify(changed)

    def mark_changed(self, tables: frozenset[str] | set[str]) -> None:
        """Record that user ``tables`` changed; announced when the transaction commits."""
        if not tables:
            return
        with self._lock:
            if self._depth > 0:
                self._changed.update(tables)
                return
        self._notify(frozenset(tables))

    def add_listener(self, listener: ChangeListener) -> Callable[[], None]:
        """Call ``listener(tables)`` after each commit that changed user tables.

        Returns a function that removes the listener.
        """
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _notify(self, tables: frozenset[str]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(tables)
            except Exception:
                log.exception("change listener %r failed", listener)

    def _check_open(self) -> None:
        if self._closed:
            raise sqlite3.ProgrammingError("the local database is closed")

    def close(self) -> None:
        """Close the database; later calls fail. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()

    def __enter__(self) -> LocalDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
