"""The sync service over every WAL store (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync_platform.core.wal import WalStore
from lakesync_platform.sync.service import SyncService
from tests.wal.conftest import ALL_BACKENDS, Clock, open_store


@pytest.fixture(params=ALL_BACKENDS)
def wal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WalStore]:
    """Each WAL store in turn."""
    opened = open_store(request.param, request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(wal: WalStore, clock: Clock) -> SyncService:
    return SyncService(wal, clock)
