"""The Python client over the WebSocket transport, against real gateway processes: rows other
clients push arrive by broadcast with no polling, a refused push reports the gateway's exact
error, and after the gateway comes back the client reconnects and pulls what it missed."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync_platform.client import (
    GatewayConfig,
    LakeSyncClient,
    RowExistsError,
    RowNotFoundError,
    WebSocketTransport,
    create_client,
)
from lakesync_platform.core.errors import ClockDriftError
from lakesync_platform.core.hlc import encode
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import SECRET, make_delta, token, wire

from .conftest import TODOS, LiveGateway, local_rows

pytestmark = pytest.mark.slow


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait until ``condition()`` holds (polling the local state, not the gateway)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@pytest.fixture
def gw() -> str:
    return f"gw_ws_{uuid.uuid4().hex[:10]}"


def realtime_client(url: str, gw: str, client_id: str, path: Path) -> LakeSyncClient:
    """A client on the WebSocket transport, without auto-sync (no polling)."""
    config = GatewayConfig(url, gw, token=token(client_id, gw), realtime=True)
    client = create_client(
        name=client_id,
        client_id=client_id,
        schemas=[TODOS],
        path=path,
        gateway=config,
        auto_sync_ms=0,
    )
    transport = client.transport
    assert isinstance(transport, WebSocketTransport) and transport.wait_connected(10)
    return client


@pytest.fixture
def clients(sqlite_gateway: LiveGateway, gw: str, tmp_path: Path) -> Iterator[list[LakeSyncClient]]:
    made = [realtime_client(sqlite_gateway.url, gw, n, tmp_path / f"{n}.db") for n in "abc"]
    yield made
    for client in made:
        client.close()


def test_rows_arrive_by_broadcast_without_polling(
    sqlite_gateway: LiveGateway, gw: str, clients: list[LakeSyncClient]
) -> None:
    a, b, c = clients
    a.tracker.insert("todos", "t1", {"title": "milk", "done": False})
    assert a.coordinator.push() == 1
    wait_for(lambda: local_rows(b).get("t1") == {"title": "milk", "done": False})
    b.tracker.update("todos", "t1", {"done": True})
    b.coordinator.push()
    wait_for(lambda: local_rows(a).get("t1") == {"title": "milk", "done": True})
    wait_for(lambda: local_rows(c) == sqlite_gateway.rows(gw))


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_clients_converge_on_broadcasts_alone(
    sqlite_gateway: LiveGateway, gw: str, clients: list[LakeSyncClient], seed: int
) -> None:
    rng = random.Random(seed)
    for step in range(120):
        client = rng.choice(clients)
        row = f"r{rng.randrange(5)}"
        values: dict[str, Any] = {"title": f"v{step}", "priority": rng.randrange(9)}
        held = row in local_rows(client)
        action = rng.random()
        try:  # a broadcast may add or remove the row between the look and the write
            if not held:
                client.tracker.insert("todos", row, values)
            elif action < 0.7:
                client.tracker.update("todos", row, dict(rng.sample(sorted(values.items()), 1)))
            else:
                client.tracker.delete("todos", row)
        except (RowExistsError, RowNotFoundError):
            pass
        if rng.random() < 0.5:
            client.coordinator.push()
    for client in clients:
        client.coordinator.push()
    for client in clients:
        wait_for(lambda client=client: local_rows(client) == sqlite_gateway.rows(gw))  # type: ignore[misc]


def test_a_refused_push_reports_the_gateways_error(sqlite_gateway: LiveGateway, gw: str) -> None:
    transport = WebSocketTransport(sqlite_gateway.url, gw, token=token("a", gw))
    try:
        assert transport.wait_connected(10)
        drifted = make_delta("a", encode(int(time.time() * 1000) + 60_000, 0), "todos", "x", {})
        with pytest.raises(ClockDriftError):
            transport.push("a", [drifted], 0)
        ok = make_delta("a", encode(int(time.time() * 1000), 0), "todos", "y", {"title": "ok"})
        assert transport.push("a", [ok], 0).accepted == 1  # the socket came back
        page = transport.pull("a", 0, 100)
        assert [(r.op, r.row_id) for r in page.rows] == [("INSERT", "y")]
    finally:
        transport.close()


def test_after_an_outage_the_client_reconnects_and_pulls_what_it_missed(
    tmp_path: Path, gw: str
) -> None:
    proc = GatewayProcess(tmp_path / "gw", SECRET).start()
    writer = reader = None
    try:
        transport = WebSocketTransport(
            proc.url, gw, token=token("reader", gw), reconnect_base_s=0.05, reconnect_max_s=0.2
        )
        reader = create_client(
            name="reader",
            client_id="reader",
            schemas=[TODOS],
            path=tmp_path / "reader.db",
            transport=transport,
            auto_sync_ms=0,
        )
        assert transport.wait_connected(10)
        proc.stop()
        wait_for(lambda: not transport.connected)
        proc.start()
        # The writer pushes before the reader is back: no broadcast can reach the reader.
        writer = realtime_client(proc.url, gw, "writer", tmp_path / "writer.db")
        writer.tracker.insert("todos", "w1", {"title": "while you were away"})
        writer.coordinator.push()
        wait_for(lambda: local_rows(reader).get("w1") == {"title": "while you were away"})
    finally:
        for client in (writer, reader):
            if client is not None:
                client.close()
        proc.stop()


def test_the_heartbeat_pull_brings_a_row_no_broadcast_announced(tmp_path: Path, gw: str) -> None:
    wal_url = f"sqlite:///{tmp_path / 'wal.db'}"
    # The gateway reads the WAL's head once an hour: a commit by another process is not
    # broadcast within this test; only the clients' own pulls can bring it.
    proc = GatewayProcess(
        tmp_path / "gw", SECRET, wal_url=wal_url, extra_args=["--ws-poll-interval", "3600"]
    ).start()
    wal = WriteAheadLog.open(wal_url)
    made: list[LakeSyncClient] = []
    try:
        for name, heartbeat_s in (("beating", 0.3), ("silent", None)):
            config = GatewayConfig(
                proc.url, gw, token=token(name, gw), realtime=True, heartbeat_s=heartbeat_s
            )
            made.append(
                create_client(
                    name=name,
                    client_id=name,
                    schemas=[TODOS],
                    path=tmp_path / f"{name}.db",
                    gateway=config,
                    auto_sync_ms=0,
                )
            )
            transport = made[-1].transport
            assert isinstance(transport, WebSocketTransport) and transport.wait_connected(10)
        beating, silent = made
        # A row pushed through the gateway is broadcast to both sockets; a client applies its
        # broadcasts after its pull on connecting, so once both hold it, only a later pull — the
        # heartbeat — can bring what is pushed next.
        seed = make_delta(
            "elsewhere",
            encode(int(time.time() * 1000), 0),
            "todos",
            "x0",
            {"title": "seed"},
            "INSERT",
        )
        pushed = httpx.post(
            f"{proc.url}/v1/sync/{gw}/push",
            json={"clientId": "elsewhere", "deltas": [wire(seed)], "lastSeenHlc": "0"},
            headers={"Authorization": f"Bearer {token('elsewhere', gw)}"},
        )
        assert pushed.status_code == 200, pushed.text
        for client in made:
            wait_for(lambda c=client: "x0" in local_rows(c), timeout=10)
        service = SyncService(wal, lambda: time.time_ns() // 1_000_000)
        now = encode(int(time.time() * 1000), 0)
        service.push(gw, "elsewhere", [make_delta("elsewhere", now, "todos", "x1", {"title": "x"})])
        wait_for(lambda: local_rows(beating).get("x1") == {"title": "x"}, timeout=5)
        assert "x1" not in local_rows(silent)  # no broadcast came: the heartbeat brought it
        assert proc.proc is not None and proc.proc.poll() is None
    finally:
        for client in made:
            client.close()
        wal.close()
        proc.stop()
