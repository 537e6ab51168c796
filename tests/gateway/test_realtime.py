"""The WebSocket feed against real gateway processes over real sockets (PROTOCOL.md §7).

Upgrade auth and refusals, bad frames and limits with their close codes (the server stays up),
push and pull over the socket equal to HTTP, broadcasts filtered by sync rules, across gateway
processes on one Postgres WAL and across workers on one SQLite WAL, and a slow consumer closed
without holding anyone back.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect
from websockets.uri import parse_uri

from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.proto import (
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    TAG_SYNC_PUSH,
    decode_sync_response,
    encode_sync_pull,
    encode_sync_push,
    frame,
)
from lakesync_platform.core.wire import delta_to_wire
from lakesync_platform.testing import GatewayProcess
from tests.helpers import SECRET, make_delta, token, wire

RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}


# ---------------------------------------------------------------------- helpers


def ws_url(proc: GatewayProcess, gw: str, *, versioned: bool = True) -> str:
    """The socket URL of ``gw`` on ``proc``."""
    prefix = "/v1" if versioned else ""
    return f"ws://127.0.0.1:{proc.port}{prefix}/sync/{gw}/ws"


def open_ws(proc: GatewayProcess, gw: str, sub: str, **kwargs: Any) -> ClientConnection:
    """A socket of ``sub`` (token in ``?token=``, as the TS client sends it)."""
    kwargs.setdefault("max_size", None)
    return connect(f"{ws_url(proc, gw)}?token={token(sub, gw)}", **kwargs)


def delta(sub: str, row_id: str, columns: dict[str, Any] | None, ms: int = 0) -> RowDelta:
    """A delta stamped now (plus ``ms``)."""
    return make_delta(sub, encode(int(time.time() * 1000) + ms, 0), "todos", row_id, columns)


def push_frame(client_id: str, deltas: list[RowDelta]) -> bytes:
    """A ``0x01`` frame."""
    return frame(TAG_SYNC_PUSH, encode_sync_push(client_id, deltas, 0))


def request(ws: ClientConnection, data: bytes) -> tuple[list[RowDelta], int, bool]:
    """Send a push or pull frame; the untagged reply (broadcasts meanwhile are skipped)."""
    ws.send(data)
    while True:
        message = ws.recv(timeout=10)
        assert isinstance(message, bytes)
        if message[0] != TAG_BROADCAST:
            return decode_sync_response(message)


def closed_with(ws: ClientConnection) -> tuple[int, str]:
    """Read until the server closes; its close code and reason."""
    with pytest.raises(ConnectionClosed) as info:
        for _ in range(100_000):
            ws.recv(timeout=20)
    close = info.value.rcvd
    assert close is not None, "the connection dropped without a close frame"
    return close.code, close.reason


def http_push(
    proc: GatewayProcess, gw: str, sub: str, deltas: list[RowDelta], role: str = "client"
) -> httpx.Response:
    """``POST /v1/sync/{gw}/push`` as ``sub`` (with a token of ``role``)."""
    body = {"clientId": sub, "deltas": [wire(d) for d in deltas], "lastSeenHlc": "0"}
    headers = {"Authorization": "Bearer " + token(sub, gw, role=role)}
    return httpx.post(f"{proc.url}/v1/sync/{gw}/push", json=body, headers=headers, timeout=30)


def save_rules(proc: GatewayProcess, gw: str) -> None:
    """Store :data:`RULES` for ``gw``."""
    headers = {"Authorization": "Bearer " + token("admin", gw, role="admin")}
    r = httpx.post(f"{proc.url}/v1/admin/sync-rules/{gw}", json=RULES, headers=headers)
    assert r.status_code == 200, r.text


class Replica:
    """What a socket's broadcasts build: rows by id (the TS pair applied: DELETE-0, INSERT)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.rows: dict[str, dict[str, Any]] = {}
        self.frames: list[list[RowDelta]] = []

    def apply(self, deltas: list[RowDelta]) -> None:
        for d in deltas:
            if d.op == "DELETE":
                self.rows.pop(d.row_id, None)
            else:
                self.rows[d.row_id] = {c.column: c.value for c in d.columns}

    def until(self, done: Callable[[dict[str, dict[str, Any]]], bool], timeout: float = 20) -> None:
        """Apply broadcasts until ``done(rows)`` holds."""
        deadline = time.monotonic() + timeout
        while not done(self.rows):
            message = self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
            assert isinstance(message, bytes) and message[0] == TAG_BROADCAST, message
            deltas, server_hlc, has_more = decode_sync_response(message[1:])
            assert server_hlc > 0 and not has_more
            self.frames.append(deltas)
            self.apply(deltas)


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway process on SQLite for the tests that need no special limits."""
    p = GatewayProcess(tmp_path_factory.mktemp("ws") / "gw", SECRET).start()
    try:
        yield p
    finally:
        p.stop()


def assert_up(proc: GatewayProcess) -> None:
    """The gateway still answers."""
    assert httpx.get(f"{proc.url}/health").status_code == 200


# ---------------------------------------------------------------------- upgrade


@pytest.mark.parametrize("versioned", [False, True])
def test_token_in_the_header_or_the_query_on_either_path(
    proc: GatewayProcess, gw: str, versioned: bool
) -> None:
    url = ws_url(proc, gw, versioned=versioned)
    auth = {"Authorization": "Bearer " + token("alice", gw)}
    with connect(url, additional_headers=auth) as ws:
        assert request(ws, frame(TAG_SYNC_PULL, encode_sync_pull("alice", 0, 10)))[0] == []
    with connect(f"{url}?token={token('alice', gw)}") as ws:
        assert request(ws, frame(TAG_SYNC_PULL, encode_sync_pull("alice", 0, 10)))[0] == []


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("", 401, "Missing Bearer token"),
        ("?token=abc", 401, None),
        ("?token={other}", 403, "Gateway ID mismatch: JWT authorises a different gateway"),
        ("?token={expired}", 401, "JWT has expired"),
    ],
)
def test_refused_upgrades_answer_like_http(
    proc: GatewayProcess, gw: str, query: str, status: int, message: str | None
) -> None:
    query = query.format(
        other=token("alice", "elsewhere"), expired=token("alice", gw, exp=int(time.time()) - 10)
    )
    with pytest.raises(InvalidStatus) as info:
        connect(ws_url(proc, gw) + query)
    response = info.value.response
    assert response.status_code == status
    body = httpx.Response(status, content=bytes(response.body or b"")).json()
    assert body["code"] == "AUTH_ERROR"
    if message is not None:
        assert body["error"] == message
    assert_up(proc)


def test_bad_gateway_id_is_refused(proc: GatewayProcess) -> None:
    with pytest.raises(InvalidStatus) as info:
        connect(f"ws://127.0.0.1:{proc.port}/v1/sync/bad-gw!/ws?token=x")
    assert info.value.response.status_code == 400


# ---------------------------------------------------------------------- frames


@pytest.mark.parametrize(
    ("data", "code", "reason"),
    [
        (b"\x01", 1002, "Message too short"),
        (b"\x09\x00", 1002, "Unknown message tag: 0x09"),
        (b"\x03\x00", 1002, "Unknown message tag: 0x03"),
        ("hello", 1003, "Binary frames only"),
        (b"\x01" + b"\x00" * (1 << 20), 1009, "Message too big (max 1048576 bytes)"),
        (b"\x01\xff\xff", 1002, None),
        (b"\x02\x0a\x05ab", 1002, None),
    ],
    ids=["short", "unknown-tag", "broadcast-tag", "text", "oversize", "bad-push", "bad-pull"],
)
def test_bad_frames_close_with_the_reference_codes(
    proc: GatewayProcess, gw: str, data: bytes | str, code: int, reason: str | None
) -> None:
    with open_ws(proc, gw, "alice") as ws:
        ws.send(data)
        got_code, got_reason = closed_with(ws)
    assert got_code == code
    if reason is not None:
        assert got_reason == reason
    else:
        assert got_reason.startswith("Failed to decode")
    assert_up(proc)


def test_push_as_another_client_is_refused(proc: GatewayProcess, gw: str) -> None:
    with open_ws(proc, gw, "alice") as ws:
        ws.send(push_frame("mallory", [delta("mallory", "r1", {"title": "x"})]))
        code, reason = closed_with(ws)
    assert (code, reason[:18]) == (1008, "Client ID mismatch")
    with open_ws(proc, gw, "alice") as ws:
        assert request(ws, frame(TAG_SYNC_PULL, encode_sync_pull("alice", 0, 10)))[0] == []


def test_a_refused_push_writes_nothing_and_says_why_like_http(
    proc: GatewayProcess, gw: str
) -> None:
    drifted = [delta("alice", "r1", {"title": "ok"}), delta("alice", "r2", {"t": 1}, ms=60_000)]
    http = http_push(proc, gw, "alice", drifted)
    assert http.status_code == 409
    with open_ws(proc, gw, "alice") as ws:
        ws.send(push_frame("alice", drifted))
        code, reason = closed_with(ws)
    assert http.json()["code"] == "CLOCK_DRIFT"
    assert code == 1008 and reason.startswith("Remote clock is ")
    assert reason.endswith("ms ahead (max drift: 5000ms)")
    with open_ws(proc, gw, "alice") as ws:
        deltas, _, _ = request(ws, frame(TAG_SYNC_PULL, encode_sync_pull("alice", 0, 100)))
    assert deltas == []


def test_push_and_pull_over_the_socket_equal_http(proc: GatewayProcess, gw: str) -> None:
    batch = [delta("alice", f"r{i}", {"title": f"t{i}", "done": i % 2 == 0}) for i in range(5)]
    with open_ws(proc, gw, "alice") as ws:
        _, server_hlc, _ = request(ws, push_frame("alice", batch))
        again = http_push(proc, gw, "alice", batch)  # the same deltas: duplicates, as over HTTP
        assert again.status_code == 200 and again.json()["deltas"] == []
        assert int(again.json()["serverHlc"]) == server_hlc
    headers = {"Authorization": "Bearer " + token("admin", gw, role="admin")}
    params = {"since": "0", "clientId": "bob", "limit": "4"}
    body = httpx.get(f"{proc.url}/v1/sync/{gw}/pull", params=params, headers=headers).json()
    # An admin token may pull as anyone, over both transports.
    with connect(f"{ws_url(proc, gw)}?token={token('admin', gw, role='admin')}") as ws:
        deltas, cursor, has_more = request(ws, frame(TAG_SYNC_PULL, encode_sync_pull("bob", 0, 4)))
    assert [delta_to_wire(d) for d in deltas] == body["deltas"]
    assert (str(cursor), has_more) == (body["serverHlc"], body["hasMore"])


# ---------------------------------------------------------------------- broadcast


def test_broadcast_reaches_every_socket_of_the_gateway_only(proc: GatewayProcess, gw: str) -> None:
    with (
        open_ws(proc, gw, "alice") as a,
        open_ws(proc, gw, "bob") as b,
        open_ws(proc, "other_" + gw, "carol") as c,
    ):
        alice, bob = Replica(a), Replica(b)
        request(a, push_frame("alice", [delta("alice", "r1", {"title": "ws"})]))
        assert (
            http_push(proc, gw, "bob", [delta("bob", "r2", {"title": "http"})]).status_code == 200
        )
        for replica in (alice, bob):
            replica.until(lambda rows: rows.get("r2") == {"title": "http"} and "r1" in rows)
            assert replica.rows == {"r1": {"title": "ws"}, "r2": {"title": "http"}}
        # Another gateway's socket received nothing: its first frame is its own pull's reply.
        assert request(c, frame(TAG_SYNC_PULL, encode_sync_pull("carol", 0, 10)))[0] == []


def test_broadcast_is_filtered_by_each_sockets_rules(proc: GatewayProcess, gw: str) -> None:
    save_rules(proc, gw)
    with open_ws(proc, gw, "alice") as a, open_ws(proc, gw, "bob") as b:
        alice, bob = Replica(a), Replica(b)
        assert http_push(proc, gw, "alice", [delta("alice", "a1", {"owner": "alice"})]).is_success
        alice.until(lambda rows: "a1" in rows)
        assert http_push(proc, gw, "bob", [delta("bob", "b1", {"owner": "bob"})]).is_success
        bob.until(lambda rows: "b1" in rows)
        assert bob.rows == {"b1": {"owner": "bob"}}  # alice's row never reached bob
        assert all(d.row_id == "b1" for frame_ in bob.frames for d in frame_)
        # alice may not hand her row over (it would leave her view): refused, nothing moves.
        handover = delta("alice", "a1", {"owner": "bob", "title": "yours"}, ms=1)
        refused = http_push(proc, gw, "alice", [handover]).json()["refused"]
        assert [(r["rowId"], r["code"]) for r in refused] == [("a1", "WRITE_FORBIDDEN")]
        # Handed over by the service (an admin token): it leaves alice's view (a DELETE) and
        # enters bob's (whole).
        assert "refused" not in http_push(proc, gw, "alice", [handover], role="admin").json()
        bob.until(lambda rows: "a1" in rows)
        alice.until(lambda rows: "a1" not in rows)
        assert bob.rows["a1"] == {"owner": "bob", "title": "yours"}
        assert alice.rows == {}


@pytest.mark.postgres
def test_processes_on_one_postgres_wal_broadcast_each_others_pushes(
    tmp_path: Path, pg_url: str, gw: str
) -> None:
    p1 = GatewayProcess(tmp_path / "p1", SECRET, wal_url=pg_url).start()
    p2 = GatewayProcess(tmp_path / "p2", SECRET, wal_url=pg_url).start()
    try:
        with open_ws(p1, gw, "alice") as a, open_ws(p2, gw, "bob") as b:
            alice, bob = Replica(a), Replica(b)
            request(a, push_frame("alice", [delta("alice", "r1", {"title": "from p1"})]))
            bob.until(lambda rows: "r1" in rows)
            assert http_push(p2, gw, "bob", [delta("bob", "r2", {"title": "p2"})]).is_success
            alice.until(lambda rows: "r2" in rows)
            bob.until(lambda rows: "r2" in rows)  # its own push comes back whole too
            assert alice.rows == bob.rows == {"r1": {"title": "from p1"}, "r2": {"title": "p2"}}
    finally:
        p1.stop()
        p2.stop()


def test_workers_on_one_sqlite_wal_broadcast_each_others_pushes(tmp_path: Path, gw: str) -> None:
    p = GatewayProcess(tmp_path / "gw", SECRET, workers=2).start()
    try:
        sockets = [open_ws(p, gw, f"u{i}", legacy=True) for i in range(6)]
        replicas = [Replica(ws) for ws in sockets]
        expected = {f"r{i}": {"n": i} for i in range(4)}
        for i in range(4):
            with httpx.Client(base_url=p.url) as http:  # a new connection: any worker
                body = {"clientId": "w", "deltas": [wire(delta("w", f"r{i}", {"n": i}))]}
                headers = {"Authorization": "Bearer " + token("w", gw)}
                assert http.post(f"/v1/sync/{gw}/push", json=body, headers=headers).is_success
        for replica in replicas:
            replica.until(lambda rows: rows == expected)
        for ws in sockets:
            ws.close()
    finally:
        p.stop()


# ---------------------------------------------------------------------- limits


def test_connection_and_rate_limits_close_with_clear_codes(tmp_path: Path, gw: str) -> None:
    extra = ["--ws-max-connections", "2", "--ws-rate-limit", "5"]
    p = GatewayProcess(tmp_path / "gw", SECRET, extra_args=extra).start()
    try:
        a = open_ws(p, gw, "a", legacy=True)
        with open_ws(p, gw, "b"):
            with pytest.raises(InvalidStatus) as info:
                connect(f"{ws_url(p, gw)}?token={token('c', gw)}")
            assert info.value.response.status_code == 503
            pull = frame(TAG_SYNC_PULL, encode_sync_pull("a", 0, 10))
            for _ in range(10):
                a.send(pull)
            assert closed_with(a) == (1008, "Rate limit exceeded")
        assert_up(p)
    finally:
        p.stop()


class StalledClient:
    """A WebSocket client that stops reading after the handshake: the socket's receive buffer
    is 4 KiB and nothing is read, so the server's sends stall almost at once. :meth:`close_frame`
    reads everything afterwards (sans-I/O ``websockets``) up to the server's close frame."""

    def __init__(self, url: str, port: int) -> None:
        self.protocol = ClientProtocol(parse_uri(url), max_size=None)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        self.protocol.send_request(self.protocol.connect())
        self.sock.sendall(b"".join(self.protocol.data_to_send()))
        while self.protocol.handshake_exc is None and not self.protocol.events_received():
            self.protocol.receive_data(self.sock.recv(1))  # byte by byte: nothing read ahead
            if self.protocol.state is State.OPEN:
                break
        assert self.protocol.state is State.OPEN, self.protocol.handshake_exc

    def close_frame(self, timeout: float = 30) -> tuple[int, str]:
        """Read until the server's close frame; its code and reason."""
        self.sock.settimeout(timeout)
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                raise AssertionError("the connection dropped without a close frame")
            self.protocol.receive_data(data)
            for event in self.protocol.events_received():
                if isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                    close = Close.parse(event.data)
                    self.sock.close()
                    return close.code, close.reason


def test_a_slow_consumer_is_closed_without_holding_anyone_back(tmp_path: Path, gw: str) -> None:
    p = GatewayProcess(tmp_path / "gw", SECRET, extra_args=["--ws-send-queue", "2"]).start()
    try:
        slow = StalledClient(f"{ws_url(p, gw)}?token={token('slow', gw)}", p.port)
        with open_ws(p, gw, "fast") as fast:
            replica = Replica(fast)
            for i in range(40):  # 4 MB: more than the kernel's socket buffers hold
                blob = secrets.token_urlsafe(75_000)  # 100 kB
                assert http_push(p, gw, "w", [delta("w", f"r{i}", {"blob": blob})]).is_success
            replica.until(lambda rows: len(rows) == 40, timeout=60)
        assert slow.close_frame() == (1013, "Too far behind: reconnect and pull")
        assert_up(p)
    finally:
        p.stop()
