"""WAL stores for the tests: every implementation (contract), and the SQL ones (SQL-specific)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.core.wal import WalStore
from lakesync_platform.wal.memory import MemoryWal
from lakesync_platform.wal.store import WriteAheadLog

BASE_MS = 1_700_000_000_000

SQL_BACKENDS: list[Any] = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
"""The SQL backends, as fixture parameters."""
ALL_BACKENDS: list[Any] = ["memory", *SQL_BACKENDS]
"""Every :class:`WalStore` implementation, as fixture parameters."""


class Clock:
    """A settable wall clock in epoch ms."""

    def __init__(self, ms: int = BASE_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def open_sql_wal(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> WriteAheadLog:
    """A migrated SQL WAL: a fresh SQLite file, or the session's PostgreSQL database."""
    if kind == "sqlite":
        return WriteAheadLog.open(f"sqlite:///{tmp_path / 'wal.db'}")
    return WriteAheadLog.open(request.getfixturevalue("pg_url"))


def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> WalStore:
    """A fresh store of ``kind``: ``memory``, ``sqlite`` or ``postgres``."""
    if kind == "memory":
        return MemoryWal()
    return open_sql_wal(kind, request, tmp_path)


@pytest.fixture(params=ALL_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WalStore]:
    """Each :class:`WalStore` implementation in turn."""
    opened = open_store(request.param, request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture(params=SQL_BACKENDS)
def wal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WriteAheadLog]:
    """A migrated SQL WAL on each backend."""
    opened = open_sql_wal(request.param, request, tmp_path)
    yield opened
    opened.close()
