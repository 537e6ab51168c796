"""Convergence over the WebSocket feed alone: clients that behave like the unmodified TS client on
its ``WebSocketTransport`` push over the socket and apply broadcast frames — they never pull —
and end equal to the gateway's row state restricted to their view (ARCHITECTURE.md §4).

Random schedules of inserts, updates and deletes on a small pool of rows (clients collide),
pushes whose replies arrive after broadcasts that crossed them, reconnects, and — with sync
rules — rows handed between owners; on one gateway process, and on two gateway processes
sharing a Postgres WAL with clients spread over both.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync_platform.core.sync_rules import ClientView, parse_sync_rules
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import SECRET, token
from tests.sim import TsLikeClient, WsLink

RULES = {
    "version": 1,
    "buckets": [
        {"name": "shared", "tables": ["todos"], "filters": []},
        {
            "name": "mine",
            "tables": ["notes"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        },
    ],
}
TABLES = {"todos": ["title", "done", "prio"], "notes": ["body", "owner"]}
NAMES = ["c1", "c2", "c3", "c4"]


def _values(rng: random.Random, columns: list[str]) -> dict[str, Any]:
    picks = rng.sample(columns, rng.randint(1, len(columns)))
    return {c: rng.choice([rng.randint(0, 9), f"v{rng.randint(0, 99)}", None, True]) for c in picks}


def _expected(wal: WriteAheadLog, gw: str, client_id: str) -> dict[tuple[str, str], Any]:
    view = ClientView(parse_sync_rules(RULES), {"sub": client_id})
    out: dict[tuple[str, str], Any] = {}
    for table in TABLES:
        for row_id, state in wal.row_states(gw, table):
            values = state.values()
            if state.live and view.row_visible(table, values):
                out[(table, row_id)] = {k: v for k, v in values.items() if v is not None}
    return out


def run(procs: list[GatewayProcess], wal_url: str, gw: str, seed: int, steps: int) -> None:
    """Drive TS-like clients over sockets spread over ``procs``; then wait for convergence."""
    headers = {"Authorization": "Bearer " + token("admin", gw, role="admin")}
    r = httpx.post(f"{procs[0].url}/v1/admin/sync-rules/{gw}", json=RULES, headers=headers)
    assert r.status_code == 200, r.text
    rng = random.Random(seed)
    clients: list[TsLikeClient] = []
    links: list[WsLink] = []
    for i, name in enumerate(NAMES):
        skew = rng.randint(-1500, 1500)
        client = TsLikeClient(name, None, lambda s=skew: int(time.time() * 1000) + s)  # type: ignore[arg-type]
        proc = procs[i % len(procs)]
        url = f"ws://127.0.0.1:{proc.port}/sync/{gw}/ws?token={token(name, gw)}"
        link = WsLink(url, client.handle_broadcast)
        client.gateway = link
        clients.append(client)
        links.append(link)
    rows = [f"r{i}" for i in range(6)]
    try:
        for _ in range(steps):
            i = rng.randrange(len(clients))
            client, link = clients[i], links[i]
            table = rng.choice(list(TABLES))
            values = _values(rng, TABLES[table])
            if table == "notes" and ("owner" in values or rng.random() < 0.3):
                values["owner"] = rng.choice(NAMES)
            action = rng.random()
            if action < 0.25:
                client.insert(table, rng.choice(rows), values)
            elif action < 0.5:
                client.update(table, rng.choice(rows), values)
            elif action < 0.58:
                client.delete(table, rng.choice(rows))
            elif action < 0.6:
                link.reconnect()
            elif action < 0.85:
                client.push()
            else:
                link.pump(0.002)
        # Writes stop; every client pushes what it holds and takes broadcasts until it
        # holds its view of the gateway's rows.
        for _ in range(20):
            for client in clients:
                client.push()
            if not any(c.queue for c in clients):
                break
        assert not any(c.queue for c in clients), "clients still have pending changes"
        wal = WriteAheadLog.open(wal_url)
        try:
            for client, link in zip(clients, links, strict=True):
                expected = _expected(wal, gw, client.client_id)
                deadline = time.monotonic() + 30
                while client.visible_rows() != expected and time.monotonic() < deadline:
                    link.pump(0.05)
                got = client.visible_rows()
                assert got == expected, (
                    f"{client.client_id} diverged (no polling)\n"
                    f"missing={ {k: v for k, v in expected.items() if got.get(k) != v} }\n"
                    f"extra={ {k: v for k, v in got.items() if expected.get(k) != v} }"
                )
                assert client.failed_applies == 0 or link.broadcasts > 0
        finally:
            wal.close()
    finally:
        for link in links:
            link.close()


@pytest.mark.parametrize("seed", range(1, 7))
def test_ts_clients_converge_on_broadcasts_alone(tmp_path: Path, gw: str, seed: int) -> None:
    proc = GatewayProcess(tmp_path / "gw", SECRET).start()
    try:
        run([proc], f"sqlite:///{(tmp_path / 'gw' / 'wal.db').resolve()}", gw, seed, steps=200)
    finally:
        proc.stop()


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [11, 12])
def test_ts_clients_on_two_processes_of_one_postgres_wal_converge(
    tmp_path: Path, pg_url: str, gw: str, seed: int
) -> None:
    procs = [GatewayProcess(tmp_path / f"p{i}", SECRET, wal_url=pg_url).start() for i in (1, 2)]
    try:
        run(procs, pg_url, gw, seed, steps=200)
    finally:
        for proc in procs:
            proc.stop()
