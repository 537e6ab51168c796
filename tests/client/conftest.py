"""Fixtures for the client SDK tests: an in-process gateway engine on a throwaway SQLite WAL,
a manual clock, and a factory for clients wired to either."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.client import InProcessTransport, LakeSyncClient, Transport, create_client
from lakesync_platform.client.testing import FlakyTransport
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import GatewayProcess, ManualClock
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import SECRET

TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "priority", "type": "number"},
        {"name": "owner", "type": "string"},
        {"name": "meta", "type": "json"},
    ],
}
"""The schema most client tests use."""

GW = "gw_client"

ClientFactory = Callable[..., LakeSyncClient]


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when the test says so."""
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def wal(tmp_path: Path) -> Iterator[WriteAheadLog]:
    """A fresh SQLite write-ahead log."""
    log = WriteAheadLog.open(f"sqlite:///{tmp_path / 'wal.db'}")
    yield log
    log.close()


@pytest.fixture
def service(wal: WriteAheadLog, clock: ManualClock) -> SyncService:
    """The gateway's sync engine over ``wal`` (same clock as the clients)."""
    return SyncService(wal, clock)


@pytest.fixture
def make_client(
    service: SyncService, clock: ManualClock, tmp_path: Path
) -> Iterator[ClientFactory]:
    """``make_client(client_id, ...)``: a file-backed client on the in-process gateway.

    Keyword arguments go to :func:`create_client`; ``claims`` to the transport; ``flaky=True``
    wraps the transport in a :class:`FlakyTransport` (reachable as ``client.transport``).
    """
    opened: list[LakeSyncClient] = []

    def factory(
        client_id: str,
        *,
        claims: Mapping[str, str | Sequence[str]] | None = None,
        flaky: bool = False,
        transport: Transport | None = None,
        **kwargs: Any,
    ) -> LakeSyncClient:
        inner: Transport = transport or InProcessTransport(service, GW, claims=claims)
        kwargs.setdefault("schemas", [TODOS])
        kwargs.setdefault("path", tmp_path / f"{client_id}.db")
        kwargs.setdefault("auto_sync_ms", 0)
        kwargs.setdefault("clock", clock)
        client = create_client(
            name=client_id,
            client_id=client_id,
            transport=FlakyTransport(inner) if flaky else inner,
            **kwargs,
        )
        opened.append(client)
        return client

    yield factory
    for client in opened:
        client.close()


def server_rows(service: SyncService, table: str = "todos") -> dict[str, dict[str, Any]]:
    """The gateway's live rows of ``table`` as ``{row_id: {column: value}}``."""
    return {
        row_id: {k: v for k, v in state.values().items() if v is not None}
        for row_id, state in service.known_rows(GW, table).items()
        if state.live
    }


def local_rows(client: LakeSyncClient, table: str = "todos") -> dict[str, dict[str, Any]]:
    """A client's rows of ``table`` without NULL columns (comparable with :func:`server_rows`)."""
    return {
        row_id: {k: v for k, v in row.items() if v is not None}
        for row_id, row in client.tracker.all(table).items()
    }


@dataclass
class LiveGateway:
    """A real gateway process plus a read handle on its WAL (the source of truth)."""

    process: GatewayProcess
    wal_url: str
    service: SyncService

    @property
    def url(self) -> str:
        return self.process.url

    def rows(self, gw: str, table: str = "todos") -> dict[str, dict[str, Any]]:
        """The gateway's live rows of ``table`` without NULL columns."""
        return {
            row_id: {k: v for k, v in s.values().items() if v is not None}
            for row_id, s in self.service.known_rows(gw, table).items()
            if s.live
        }


def _live(data_dir: Path, wal_url: str) -> Iterator[LiveGateway]:
    process = GatewayProcess(data_dir, SECRET, wal_url=wal_url).start()
    wal = WriteAheadLog.open(wal_url)
    try:
        yield LiveGateway(process, wal_url, SyncService(wal, lambda: 0))
    finally:
        wal.close()
        process.stop()


@pytest.fixture(scope="session")
def sqlite_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    """A gateway process (uvicorn) on a SQLite WAL, shared by the client tests."""
    data_dir = tmp_path_factory.mktemp("gw-sqlite")
    yield from _live(data_dir, f"sqlite:///{data_dir / 'wal.db'}")


@pytest.fixture(scope="session")
def postgres_gateway(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str
) -> Iterator[LiveGateway]:
    """A gateway process on the Postgres WAL (a throwaway database, dropped afterwards)."""
    yield from _live(tmp_path_factory.mktemp("gw-postgres"), pg_url)
