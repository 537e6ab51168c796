"""Live queries: re-run a query when one of its tables changes (the React ``useQuery`` analogue).

A :class:`QueryWatch` listens to :meth:`LocalDB.add_listener`, so it fires after local writes
and after applied remote pages alike, once per committed transaction, in the thread that
committed. The callback receives the new rows and is called only when they differ from the
rows it saw last.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._db import LocalDB

__all__ = ["QueryWatch", "tables_in"]

_TABLE_RE = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO)\s+[\"`\[]?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE
)

Rows = list[dict[str, Any]]


def tables_in(sql: str) -> frozenset[str]:
    """The table names a query reads (those after ``FROM`` / ``JOIN``), best effort."""
    return frozenset(_TABLE_RE.findall(sql))


class QueryWatch:
    """A subscription to a query's results; :meth:`close` ends it."""

    def __init__(
        self,
        db: LocalDB,
        sql: str,
        params: Sequence[Any],
        callback: Callable[[Rows], None],
        *,
        tables: Iterable[str] | None = None,
        initial: bool = True,
    ) -> None:
        self.sql = sql
        self.params = tuple(params)
        self.tables = frozenset(tables) if tables is not None else tables_in(sql)
        """The tables whose changes re-run the query."""
        if not self.tables:
            raise ValueError(f"cannot tell which tables {sql!r} reads; pass tables=")
        self._db = db
        self._callback = callback
        self._lock = threading.RLock()
        self._rows: Rows | None = None
        self._remove: Callable[[], None] | None = db.add_listener(self._on_change)
        if initial:
            self.refresh()

    @property
    def rows(self) -> Rows:
        """The latest rows (queried now if the watch has not run yet)."""
        if self._rows is None:
            return self._db.query(self.sql, self.params)
        return self._rows

    @property
    def active(self) -> bool:
        """Whether the watch still listens."""
        return self._remove is not None

    def _on_change(self, tables: frozenset[str]) -> None:
        if self.tables & tables:
            self.refresh()

    def refresh(self) -> None:
        """Re-run the query now; call back if the rows changed."""
        with self._lock:
            if self._remove is None:
                return
            rows = self._db.query(self.sql, self.params)
            if rows == self._rows:
                return
            self._rows = rows
            self._callback(rows)

    def close(self) -> None:
        """Stop listening. Idempotent."""
        with self._lock:
            if self._remove is not None:
                self._remove()
                self._remove = None

    def __enter__(self) -> QueryWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
