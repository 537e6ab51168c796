"""Clients that go through a load balancer and count every error they see.

* :class:`BalancedWriter` — pushes batches over HTTP (``Writer`` of ``test_e2e``), the same
  batch again until the gateway acknowledges it (pushes are idempotent by ``deltaId``),
  remembering which gateway answered each push (HAProxy's ``X-LakeSync-Gateway`` header).
* :class:`BalancedReader` — pages through ``GET /pull`` (stamped) from its cursor, again
  after any failure.
* :class:`SocketClient` — the WebSocket feed as the TypeScript client's transport uses it:
  connects through the balancer, pulls from its cursor over the socket, applies broadcasts as
  they arrive, and reconnects when the socket closes (at once after 1001, the drain's
  going-away; after a pause otherwise). It records every close code and every failed
  connection.

"An error a client sees" is anything but an answer: a non-200 status, a transport error, a
WebSocket that closes with any code but 1001 (or could not be opened), a socket request left
without a reply.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from lakesync_platform.core.delta import DELETE, RowDelta
from lakesync_platform.core.proto import (
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    decode_sync_response,
    encode_sync_pull,
    frame,
)
from tests.gateway.test_e2e import PushRecord, RowKey, Snapshot, Writer, stamped_snapshot
from tests.helpers import token

GATEWAY_HEADER = "X-LakeSync-Gateway"
GOING_AWAY = 1001


@dataclass
class Answered:
    """One push attempt, the gateway that answered it (``None``: no answer) and when."""

    record: PushRecord
    gateway: str | None
    at: float


class BalancedWriter:
    """A :class:`~tests.gateway.test_e2e.Writer` through the balancer; a batch is pushed again
    until it is acknowledged, so every batch it made is in the log once it stops."""

    def __init__(self, url: str, gw: str, client_id: str, *, seed: int) -> None:
        self.writer = Writer(url, gw, client_id, seed=seed, max_batch=6)
        self._answered_by: str | None = None
        self.writer.http.event_hooks["response"].append(self._on_response)
        self.attempts: list[Answered] = []
        self.errors: list[str] = []

    def _on_response(self, response: httpx.Response) -> None:
        self._answered_by = response.headers.get(GATEWAY_HEADER)

    @property
    def records(self) -> list[PushRecord]:
        """Every push attempt (acknowledged or not)."""
        return self.writer.records

    def failures(self) -> list[str]:
        """The attempts that were not acknowledged, described."""
        failed = [a.record for a in self.attempts if not a.record.acked]
        return [f"{r.status} {r.error[:200]}" for r in failed]

    def run(self, stop: threading.Event, pause: float = 0.0) -> None:
        """Push until ``stop``, ``pause`` seconds between batches; the batch in hand is finished
        (acknowledged) first."""
        try:
            while not stop.wait(pause):
                batch = self.writer.batch()
                while True:
                    self._answered_by = None
                    record = self.writer.push(batch)
                    self.attempts.append(Answered(record, self._answered_by, time.monotonic()))
                    if record.acked:
                        break
                    time.sleep(0.05)
        except Exception as exc:  # recorded and asserted on by the test
            self.errors.append(f"{self.writer.client_id}: {exc!r}")

    def close(self) -> None:
        """Release the HTTP connections."""
        self.writer.close()


@dataclass
class BalancedReader:
    """A stamped reader through the balancer (rows as in ``test_e2e.Reader``)."""

    url: str
    gw: str
    client_id: str
    limit: int = 100
    cursor: int = 0
    rows: dict[RowKey, Snapshot] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    pages: int = 0

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token(self.client_id, self.gw)}"},
            timeout=httpx.Timeout(30.0, connect=5.0),
        )

    def pull(self) -> bool | None:
        """One page from the cursor, applied; ``hasMore`` (``None``: it failed, recorded)."""
        params = {"since": str(self.cursor), "clientId": self.client_id}
        params |= {"limit": str(self.limit), "format": "stamped"}
        try:
            resp = self.http.get(f"/v1/sync/{self.gw}/pull", params=params)
        except httpx.TransportError as exc:
            self.failures.append(repr(exc))
            return None
        if resp.status_code != 200:
            self.failures.append(f"{resp.status_code} {resp.text[:200]}")
            return None
        body = resp.json()
        for d in body["deltas"]:
            self.rows[(d["table"], d["rowId"])] = stamped_snapshot(d)
        server = int(body["serverHlc"])
        assert server >= self.cursor, f"{self.client_id}: cursor went backwards"
        self.cursor = server
        self.pages += 1
        return bool(body["hasMore"])

    def run(self, stop: threading.Event) -> None:
        """Page until ``stop`` (pausing when caught up or after a failure)."""
        try:
            while not stop.is_set():
                more = self.pull()
                if not more:
                    time.sleep(0.05)
        except Exception as exc:  # recorded and asserted on by the test
            self.errors.append(f"{self.client_id}: {exc!r}")

    def catch_up(self, deadline: float) -> None:
        """Pull until a page ends the log (failures retried) or ``deadline``."""
        while time.monotonic() < deadline:
            if self.pull() is False:
                return
            time.sleep(0.02)
        raise AssertionError(f"{self.client_id} did not catch up in time")

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()


@dataclass
class Delivered:
    """Rows one broadcast brought, and the gateway whose socket delivered them."""

    gateway: str | None
    stamps: list[tuple[int, str]]


class SocketClient:
    """A WebSocket client of the feed, through the balancer, on a thread of its own.

    Rows are applied as the TypeScript client applies them (a ``DELETE`` then the row's full
    ``INSERT``, or a ``DELETE`` of a row gone); ``values`` holds its rows. ``connections``
    lists the gateway of each connection; ``closes`` the code of each close; ``failures``
    every error it saw.
    """

    def __init__(self, url: str, gw: str, client_id: str) -> None:
        ws_url = url.replace("http://", "ws://", 1)
        self.url = f"{ws_url}/v1/sync/{gw}/ws?token={token(client_id, gw)}"
        self.client_id = client_id
        self.cursor = 0
        self.values: dict[RowKey, dict[str, Any]] = {}
        self.connections: list[str | None] = []
        self.closes: list[int | None] = []
        self.failures: list[str] = []
        self.errors: list[str] = []
        self.broadcasts: list[Delivered] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=client_id, daemon=True)

    def start(self) -> SocketClient:
        """Connect and keep connected until :meth:`stop`."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the socket (1000) and end the thread."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.client_id} hung"

    def wait_for_cursor(self, cursor: int, deadline: float) -> bool:
        """Wait until broadcasts (or the pull after a reconnect) brought it to ``cursor``."""
        while time.monotonic() < deadline:
            if self.cursor >= cursor:
                return True
            time.sleep(0.05)
        return False

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    with connect(self.url, max_size=None, open_timeout=10) as ws:
                        self._serve(ws)
                    if self._stop.is_set():
                        return  # closed by this client
                    self.closes.append(ws.close_code)
                    if ws.close_code != GOING_AWAY:
                        self.failures.append(f"closed {ws.close_code} {ws.close_reason!r}")
                        time.sleep(0.2)
                except (OSError, InvalidHandshake, TimeoutError) as exc:
                    self.failures.append(f"connect: {exc!r}")
                    time.sleep(0.2)
        except Exception as exc:  # recorded and asserted on by the test
            self.errors.append(f"{self.client_id}: {exc!r}")

    def _serve(self, ws: ClientConnection) -> None:
        """Pull from the cursor, then apply broadcasts until the socket closes or stop."""
        gateway = ws.response.headers.get(GATEWAY_HEADER) if ws.response else None
        self.connections.append(gateway)
        try:
            more = True
            while more and not self._stop.is_set():  # the pull a reconnection makes
                ws.send(frame(TAG_SYNC_PULL, encode_sync_pull(self.client_id, self.cursor, 200)))
                more = self._until_reply(ws, gateway)
            while not self._stop.is_set():
                try:
                    message = ws.recv(timeout=0.2)
                except TimeoutError:
                    continue
                self._on_message(message, gateway, reply_expected=False)
            ws.close()
        except ConnectionClosed:
            pass

    def _until_reply(self, ws: ClientConnection, gateway: str | None) -> bool:
        while True:
            try:
                message = ws.recv(timeout=15)
            except TimeoutError:
                self.failures.append("a pull over the socket got no reply in 15 s")
                ws.close()
                raise ConnectionClosed(None, None) from None
            more = self._on_message(message, gateway, reply_expected=True)
            if more is not None:
                return more

    def _on_message(
        self, message: str | bytes, gateway: str | None, *, reply_expected: bool
    ) -> bool | None:
        assert isinstance(message, bytes), "the feed sends binary frames only"
        if message[0] == TAG_BROADCAST:
            deltas, server_hlc, _ = decode_sync_response(message[1:])
            self.broadcasts.append(Delivered(gateway, self._apply(deltas)))
            self.cursor = max(self.cursor, server_hlc)
            return None
        assert reply_expected, "an untagged message nobody asked for"
        deltas, server_hlc, has_more = decode_sync_response(message)
        self._apply(deltas)
        self.cursor = max(self.cursor, server_hlc)
        return has_more and bool(deltas)

    def _apply(self, deltas: list[RowDelta]) -> list[tuple[int, str]]:
        stamps = []
        for d in deltas:
            key = (d.table, d.row_id)
            if d.op == DELETE:
                self.values.pop(key, None)
                if d.hlc:
                    stamps.append((d.hlc, d.client_id))
                continue
            assert key not in self.values, f"{self.client_id}: INSERT of a row it holds: {d}"
            self.values[key] = {c.column: c.value for c in d.columns if c.value is not None}
            stamps.append((d.hlc, d.client_id))
        return stamps


def close_codes(clients: list[SocketClient]) -> Counter[int | None]:
    """How often each close code ended the clients' connections."""
    return Counter(code for c in clients for code in c.closes)
