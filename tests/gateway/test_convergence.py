"""Convergence: clients that behave like the unmodified TS client and well-behaved clients all end
equal to the gateway's row state restricted to their view (ARCHITECTURE.md §4).

Random schedules (seeded, many seeds) of inserts, updates, deletes on a small pool of row ids
(so clients collide on the same rows), offline periods, lost push responses (the push commits
but the client never hears: it re-pushes the same deltas later), restarts, clock skew, and —
in the sync-rules variant — rows moving in and out of each client's view.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync_platform.client._wire import read_frames
from lakesync_platform.core.checkpoint import CHECKPOINT_MEDIA_TYPE
from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.proto import decode_sync_response
from lakesync_platform.core.sync_rules import ClientView, SyncRules, parse_sync_rules
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import SECRET, token, wire
from tests.sim import Pushed, StampedClient, TsLikeClient

BASE_MS = 1_700_000_000_000
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


class LostResponse(Exception):
    """The push committed on the server but the answer never reached the client."""


class ServiceGateway:
    """In-process transport over :class:`SyncService` with optional lost push responses."""

    def __init__(self, service: SyncService, gw: str, rng: random.Random, loss: float) -> None:
        self.service, self.gw, self.rng, self.loss = service, gw, rng, loss

    def push(self, client_id: str, deltas: Sequence[RowDelta]) -> Pushed:
        result = self.service.push(self.gw, client_id, deltas, claims={"sub": client_id})
        if self.rng.random() < self.loss:
            raise LostResponse
        return Pushed(result.server_hlc, frozenset(r.delta.delta_id for r in result.refused))

    def pull(
        self, client_id: str, since: int, limit: int, stamped: bool, source: str | None = None
    ) -> tuple[list[dict[str, Any]], int, bool]:
        assert source is None, "the schedules pull the gateway's own rows"
        page = self.service.pull(
            self.gw, client_id, since, limit, claims={"sub": client_id}, stamped=stamped
        )
        return page.deltas, page.server_hlc, page.has_more

    def checkpoint(self, client_id: str) -> tuple[list[RowDelta], int] | None:
        return None  # these schedules run without the pipeline: no checkpoint


def _random_values(rng: random.Random, columns: Sequence[str]) -> dict[str, Any]:
    picks = rng.sample(list(columns), rng.randint(1, len(columns)))
    out: dict[str, Any] = {}
    for c in picks:
        out[c] = rng.choice([rng.randint(0, 9), f"v{rng.randint(0, 99)}", None, True, False])
    return out


class HttpGateway:
    """The same transport over real HTTP to a gateway process."""

    def __init__(self, base_url: str, gw: str, rng: random.Random, loss: float) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30)
        self.gw, self.rng, self.loss = gw, rng, loss

    def _auth(self, client_id: str) -> dict[str, str]:
        return {"Authorization": "Bearer " + token(client_id, self.gw)}

    def push(self, client_id: str, deltas: Sequence[RowDelta]) -> Pushed:
        body = {"clientId": client_id, "deltas": [wire(d) for d in deltas], "lastSeenHlc": "0"}
        r = self.http.post(f"/v1/sync/{self.gw}/push", json=body, headers=self._auth(client_id))
        assert r.status_code == 200, r.text
        if self.rng.random() < self.loss:
            raise LostResponse
        answer = r.json()
        refused = frozenset(x["deltaId"] for x in answer.get("refused", ()))
        return Pushed(int(answer["serverHlc"]), refused)

    def pull(
        self, client_id: str, since: int, limit: int, stamped: bool, source: str | None = None
    ) -> tuple[list[dict[str, Any]], int, bool]:
        params = {"since": str(since), "clientId": client_id, "limit": str(limit)}
        if source:
            params["source"] = source
        if stamped:
            params["format"] = "stamped"
        r = self.http.get(f"/v1/sync/{self.gw}/pull", params=params, headers=self._auth(client_id))
        assert r.status_code == 200, r.text
        body = r.json()
        return body["deltas"], int(body["serverHlc"]), body["hasMore"]

    def checkpoint(self, client_id: str) -> tuple[list[RowDelta], int] | None:
        """``GET /v1/sync/{gw}/checkpoint`` as the TS transport sends it (no query)."""
        r = self.http.get(
            f"/v1/sync/{self.gw}/checkpoint",
            headers={**self._auth(client_id), "Accept": CHECKPOINT_MEDIA_TYPE},
        )
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        deltas = [d for frame in read_frames([r.content]) for d in decode_sync_response(frame)[0]]
        return deltas, int(r.headers.get("X-Checkpoint-Hlc", "0"))


def run_schedule(tmp_path: Path, seed: int, *, with_rules: bool, steps: int = 250) -> None:
    """In-process: the service with a simulated clock."""
    rng = random.Random(seed)
    now = [BASE_MS]
    wal = WriteAheadLog.open(f"sqlite:///{tmp_path / f'wal-{seed}.db'}")
    service = SyncService(wal, clock=lambda: now[0])
    rules = parse_sync_rules(RULES) if with_rules else None
    if rules is not None:
        service.save_sync_rules("conv", rules)
    gateway = ServiceGateway(service, "conv", rng, loss=0.1)
    try:
        drive(rng, gateway, wal, "conv", rules, now, steps)
    finally:
        wal.close()


def drive(
    rng: random.Random,
    gateway: ServiceGateway | HttpGateway,
    wal: WriteAheadLog,
    gw: str,
    rules: SyncRules | None,
    now: list[int],
    steps: int,
    real_clock: bool = False,
) -> None:
    """Run a random schedule, stop writing, sync everyone, compare with the gateway's state."""
    with_rules = rules is not None

    names = ["c1", "c2", "c3", "c4", "c5"]
    clients: list[TsLikeClient | StampedClient] = []
    for i, name in enumerate(names):
        skew = rng.randint(-2000, 2000)
        clock = (lambda s: lambda: now[0] + s)(skew)
        cls = TsLikeClient if i < 3 else StampedClient
        clients.append(cls(name, gateway, clock))
    offline: set[str] = set()
    tables = {"todos": ["title", "done", "prio"]}
    if with_rules:
        tables["notes"] = ["body", "owner"]
    row_pool = [f"r{i}" for i in range(6)]

    for _ in range(steps):
        if real_clock:
            now[0] = int(time.time() * 1000)
        else:
            now[0] += rng.randint(0, 40)
        client = rng.choice(clients)
        table = rng.choice(list(tables))
        row_id = rng.choice(row_pool)
        action = rng.random()
        values = _random_values(rng, tables[table])
        if table == "notes" and ("owner" in values or action < 0.3):
            values["owner"] = rng.choice([client.client_id, *rng.sample(names, 1)])
        try:
            if action < 0.25:
                client.insert(table, row_id, values)
            elif action < 0.5:
                client.update(table, row_id, values)
            elif action < 0.58:
                client.delete(table, row_id)
            elif action < 0.62:
                offline.symmetric_difference_update({client.client_id})
            elif action < 0.64:
                client.restart()
            elif client.client_id not in offline:
                step = rng.random()
                if step < 0.5:
                    client.sync_once()
                elif step < 0.75:
                    client.pull()
                else:
                    client.push()
        except LostResponse:
            pass

    # Writes stop; everyone comes back online and syncs until nothing moves.
    gateway.loss = 0.0
    for _ in range(30):
        for client in clients:
            client.sync_once()
        if not any(c.queue for c in clients):
            for client in clients:
                client.sync_once()
            break
    assert not any(c.queue for c in clients), "clients still have pending changes"

    for client in clients:
        view = ClientView(rules, {"sub": client.client_id})
        expected: dict[tuple[str, str], dict[str, Any]] = {}
        for table in tables:
            for row_id, state in wal.row_states(gw, table):
                values = state.values()
                if state.live and view.row_visible(table, values):
                    expected[(table, row_id)] = {k: v for k, v in values.items() if v is not None}
        got = client.visible_rows()
        assert got == expected, (
            f"{client.client_id} ({type(client).__name__}) diverged\n"
            f"missing={ {k: v for k, v in expected.items() if got.get(k) != v} }\n"
            f"extra={ {k: v for k, v in got.items() if expected.get(k) != v} }"
        )


@pytest.mark.parametrize("seed", range(40))
def test_clients_converge_without_rules(tmp_path: Path, seed: int) -> None:
    run_schedule(tmp_path, seed, with_rules=False)


@pytest.mark.parametrize("seed", range(40))
def test_clients_converge_with_sync_rules(tmp_path: Path, seed: int) -> None:
    run_schedule(tmp_path, seed, with_rules=True)


@pytest.mark.parametrize("with_rules", [False, True])
def test_clients_converge_over_http(tmp_path: Path, with_rules: bool) -> None:
    """The same schedule against a real gateway process (real clock, real sockets)."""
    server = GatewayProcess(tmp_path / "data", SECRET).start()
    gw = "convhttp"
    rng = random.Random(7)
    rules = parse_sync_rules(RULES) if with_rules else None
    try:
        gateway = HttpGateway(server.url, gw, rng, loss=0.1)
        if rules is not None:
            r = gateway.http.post(
                f"/v1/admin/sync-rules/{gw}",
                json=RULES,
                headers={"Authorization": "Bearer " + token("admin", gw, role="admin")},
            )
            assert r.status_code == 200, r.text
        real = [int(time.time() * 1000)]
        wal = WriteAheadLog.open(f"sqlite:///{(tmp_path / 'data' / 'wal.db').resolve()}")
        try:
            drive(rng, gateway, wal, gw, rules, real, steps=150, real_clock=True)
        finally:
            wal.close()
            gateway.http.close()
    finally:
        server.stop()
