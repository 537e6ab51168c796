"""In-process gateway fixtures for the HTTP tests: the real app over a throwaway SQLite WAL,
driven through Litestar's ``TestClient`` (no sockets, no subprocess)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from sqlalchemy import func, select

from gateway.app import create_app
from gateway.middleware import ProtocolHeadersMiddleware
from gateway.state import GatewayState
from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.settings import DataLayout, GatewaySettings
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal import tables as t
from tests.helpers import SECRET, make_delta, token, wire


def build_app(settings: GatewaySettings, clock: Callable[[], int]) -> ProtocolHeadersMiddleware:
    """``create_app(settings, clock=clock)``."""
    return create_app(settings, clock=clock)


def assert_error(
    resp: httpx.Response, status: int, code: str, message: str | None = None
) -> dict[str, Any]:
    """The protocol's error envelope with this status and code (and exact message, if given)."""
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]
    if message is not None:
        assert body["error"] == message
    assert body["requestId"] == resp.headers["x-request-id"]
    return body


@dataclass
class Gateway:
    """A running in-process gateway app, its TestClient, and its (fixed) wall clock."""

    client: TestClient[Any]
    app: ProtocolHeadersMiddleware
    now_ms: int

    # ------------------------------------------------------------------ plumbing

    @property
    def state(self) -> GatewayState:
        """The app's :class:`GatewayState` (exists after startup)."""
        state: GatewayState = self.app.state.gateway
        return state

    def hlc(self, ahead_ms: int = 0, counter: int = 0) -> int:
        """An HLC ``ahead_ms`` after the gateway's clock."""
        return encode(self.now_ms + ahead_ms, counter)

    def delta(
        self,
        row_id: str,
        columns: dict[str, Any] | None,
        *,
        table: str = "todos",
        client_id: str = "c1",
        ahead_ms: int = 0,
        counter: int = 0,
        op: str = "UPDATE",
    ) -> RowDelta:
        """A correctly-identified delta stamped relative to the gateway clock."""
        return make_delta(client_id, self.hlc(ahead_ms, counter), table, row_id, columns, op=op)

    @staticmethod
    def auth(sub: str, gw: str, role: str = "client", **claims: Any) -> dict[str, str]:
        """``Authorization`` header for a valid token."""
        return {"Authorization": "Bearer " + token(sub, gw, role, **claims)}

    @classmethod
    def admin(cls, gw: str) -> dict[str, str]:
        """``Authorization`` header for an admin of ``gw``."""
        return cls.auth("admin", gw, "admin")

    # ------------------------------------------------------------------ sync routes

    def push(
        self,
        gw: str,
        deltas: Sequence[RowDelta | dict[str, Any]],
        *,
        client_id: str = "c1",
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """``POST /v1/sync/{gw}/push`` as ``client_id`` (token sub = ``client_id`` by default)."""
        body = {
            "clientId": client_id,
            "deltas": [d if isinstance(d, dict) else wire(d) for d in deltas],
            "lastSeenHlc": "0",
        }
        return self.push_raw(
            gw,
            json.dumps(body).encode(),
            headers=self.auth(client_id, gw) if headers is None else headers,
        )

    def push_raw(
        self, gw: str, body: Any, *, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Push arbitrary bytes (or a byte iterator) with the default ``c1`` token."""
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(self.auth("c1", gw) if headers is None else headers)
        return self.client.post(f"/v1/sync/{gw}/push", content=body, headers=hdrs)

    def pull(
        self,
        gw: str,
        since: str = "0",
        *,
        client_id: str = "c1",
        headers: dict[str, str] | None = None,
        **params: str,
    ) -> httpx.Response:
        """``GET /v1/sync/{gw}/pull``."""
        query = {"since": since, "clientId": client_id, **params}
        return self.client.get(
            f"/v1/sync/{gw}/pull",
            params=query,
            headers=self.auth(client_id, gw) if headers is None else headers,
        )

    def pull_all(self, gw: str, client_id: str = "c1", limit: str = "1000") -> list[dict[str, Any]]:
        """Every delta from cursor 0, following ``hasMore``."""
        since, out = "0", []
        for _ in range(1000):
            resp = self.pull(gw, since, client_id=client_id, limit=limit)
            assert resp.status_code == 200, resp.text
            body = resp.json()
            out.extend(body["deltas"])
            since = body["serverHlc"]
            if not body["hasMore"]:
                return out
        raise AssertionError("pull never finished")

    # ------------------------------------------------------------------ admin / WAL

    def metrics(self, gw: str) -> dict[str, Any]:
        """``GET /v1/admin/metrics/{gw}`` (asserted 200)."""
        resp = self.client.get(f"/v1/admin/metrics/{gw}", headers=self.admin(gw))
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    def snapshot(self, gw: str) -> dict[str, Any]:
        """Everything a write could change for ``gw``: admin metrics and WAL row counts."""
        m = self.metrics(gw)
        counts: dict[str, Any] = {
            k: m[k]
            for k in ("logSize", "indexSize", "byteSize", "liveRows", "cursor", "flushWatermark")
        }
        counts["flushRequests"] = [r["requestId"] for r in m["flushRequests"]]
        wal = self.state.wal
        with wal.read() as conn:
            for name, table in (
                ("entries", t.entries),
                ("deltaIds", t.delta_ids),
                ("rows", t.rows),
                ("schemas", t.schemas),
                ("syncRules", t.sync_rules),
                ("tableColumns", t.table_columns),
            ):
                counts[name] = conn.execute(
                    select(func.count()).select_from(table).where(table.c.gateway_id == gw)
                ).scalar()
        return counts

    def health_ok(self) -> None:
        """The server still answers."""
        resp = self.client.get("/health")
        assert resp.status_code == 200
        assert resp.json() == {"status": "ok"}


GatewayFactory = Callable[..., Gateway]


def _open(stack: ExitStack, wal_path: Path, **overrides: Any) -> Gateway:
    now_ms = int(time.time() * 1000)
    overrides.setdefault("jwt_secrets", (SECRET,))
    settings = GatewaySettings(wal_url=f"sqlite:///{wal_path}", **overrides)
    app = build_app(settings, clock=lambda: now_ms)
    client = stack.enter_context(TestClient(app))
    return Gateway(client, app, now_ms)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One app per test module (tests isolate themselves by gateway id — see ``gw``)."""
    with ExitStack() as stack:
        yield _open(stack, tmp_path_factory.mktemp("gw") / "wal.db")


@pytest.fixture
def make_gateway(tmp_path: Path) -> Iterator[GatewayFactory]:
    """``make_gateway(**settings)``: a fresh app with its own WAL and custom settings."""
    with ExitStack() as stack:
        n = 0

        def factory(**overrides: Any) -> Gateway:
            nonlocal n
            n += 1
            return _open(stack, tmp_path / f"wal{n}.db", **overrides)

        yield factory


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def wal_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str | None, str]:
    """``(--wal-url flag or None, URL the test opens)``: the default SQLite file, or Postgres."""
    if request.param == "sqlite":
        return None, DataLayout.at(tmp_path / "gw").wal_url
    url: str = request.getfixturevalue("pg_url")
    return url, url


@pytest.fixture
def gateway(tmp_path: Path, wal_target: tuple[str | None, str]) -> Iterator[GatewayProcess]:
    """A real gateway process on the chosen WAL (tests may kill and restart it)."""
    proc = GatewayProcess(tmp_path / "gw", SECRET, wal_url=wal_target[0])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
