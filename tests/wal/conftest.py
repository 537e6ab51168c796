"""A WAL and a sync service on each backend (SQLite file, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync_platform.wal.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

BASE_MS = 1_700_000_000_000


class Clock:
    """A settable wall clock in epoch ms."""

    def __init__(self, ms: int = BASE_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def wal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WriteAheadLog]:
    """A migrated WAL on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'wal.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    store = WriteAheadLog.open(url)
    yield store
    store.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(wal: WriteAheadLog, clock: Clock) -> SyncService:
    return SyncService(wal, clock)
