"""The WebSocket transport: push and pull over ``/v1/sync/{gw}/ws``, broadcasts as they arrive.

Frames are the protocol's (PROTOCOL.md §7): a tag byte and a protobuf message; a push (``0x01``)
or pull (``0x02``) is answered by the next untagged message, and ``0x03`` frames are broadcasts
— rows other writes changed, pushed by the gateway. One thread reads the socket: replies go to
the waiting request, broadcasts to a second thread that hands them to the ``on_broadcast``
listeners (the sync engine applies them; a listener may itself send requests, the reader keeps
reading meanwhile). When the socket drops, the reader reconnects with backoff (1 s doubling to
30 s, reset once connected) and tells the ``on_resync`` listeners, which pull from the
client's cursor — what was broadcast while it was away is not lost. While connected, they are
told again every ``heartbeat_s`` (the heartbeat pull): a safety net that brings, within one
interval, a row whose broadcast never arrived (a frame lost to a bug, a commit the gateway
has not noticed yet); the pull from the cursor costs one small reply when nothing is missing.

Rows arrive in the gateway's unstamped encoding (the TS client's: a ``DELETE`` stamped 0 then
the full row as ``INSERT`` stamped with the row's newest stamp, or a ``DELETE`` of a row gone
or out of view); protobuf carries no column stamps, so each column of a row takes the row's
stamp (:func:`remote_rows`). The ``DELETE`` stamped 0 exists for the TS applier and is dropped.

A request the gateway refuses closes the socket with 1008 and only a reason; the request is
then sent again over HTTP (pushes are idempotent by ``deltaId``), which answers with the exact
error (or accepts it, if the refusal was transient). Checkpoints always come over HTTP.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal, cast
from urllib.parse import quote, urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import ClientConnection, connect

from ..core.delta import DELETE, RowDelta
from ..core.proto import (
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    TAG_SYNC_PUSH,
    CodecError,
    decode_sync_response,
    encode_sync_pull,
    encode_sync_push,
    frame,
)
from ._errors import TransportError
from ._http import HttpTransport
from ._transport import Checkpoint, PullResponse, PushAck
from ._wire import RemoteColumn, RemoteRow

__all__ = [
    "HEARTBEAT_S",
    "RECONNECT_BASE_S",
    "RECONNECT_MAX_S",
    "WebSocketTransport",
    "remote_rows",
]

log = logging.getLogger(__name__)

RECONNECT_BASE_S = 1.0
"""First reconnect delay; it doubles after each failed attempt."""
RECONNECT_MAX_S = 30.0
"""Longest reconnect delay."""
HEARTBEAT_S = 30.0
"""Seconds between heartbeat pulls while connected."""
_POLICY_VIOLATION = 1008

BroadcastListener = Callable[[list[RemoteRow], int], None]
"""``listener(rows, server_hlc)``: a broadcast arrived."""


class _Refused(Exception):
    """The gateway closed the socket in answer to a request (1008: refused)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason


_Op = Literal["INSERT", "UPDATE", "DELETE"]


def remote_rows(deltas: Sequence[RowDelta]) -> list[RemoteRow]:
    """Unstamped deltas as :class:`RemoteRow` objects (every column with the row's stamp);
    the clearing ``DELETE`` stamped 0 of the TS pair is dropped."""
    return [
        RemoteRow(
            cast(_Op, d.op),
            d.table,
            d.row_id,
            d.hlc,
            d.client_id,
            tuple(RemoteColumn(c.column, c.value) for c in d.columns),
            delta_id=d.delta_id,
        )
        for d in deltas
        if not (d.op == DELETE and d.hlc == 0)
    ]


def _socket_url(url: str, gateway_id: str, api_prefix: str) -> str:
    parts = urlsplit(url.rstrip("/"))
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = f"{parts.path}{api_prefix}/sync/{quote(gateway_id, safe='')}/ws"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class WebSocketTransport:
    """A :class:`~lakesync_platform.client.Transport` over the gateway's WebSocket, with live
    broadcasts (see the module docstring). ``http`` answers checkpoints and refused requests;
    the socket opens on a background thread at once. ``heartbeat_s=None`` turns the heartbeat
    pull off."""

    def __init__(
        self,
        url: str,
        gateway_id: str,
        *,
        token: str | None = None,
        get_token: Callable[[], str] | None = None,
        timeout_s: float = 10.0,
        api_prefix: str = "/v1",
        http: HttpTransport | None = None,
        reconnect_base_s: float = RECONNECT_BASE_S,
        reconnect_max_s: float = RECONNECT_MAX_S,
        heartbeat_s: float | None = HEARTBEAT_S,
    ) -> None:
        if heartbeat_s is not None and heartbeat_s <= 0:
            raise ValueError(f"heartbeat_s must be > 0 (or None), not {heartbeat_s!r}")
        self.url = _socket_url(url, gateway_id, api_prefix)
        self.http = http or HttpTransport(
            url, gateway_id, token=token, get_token=get_token, timeout_s=timeout_s
        )
        self._token = token
        self._get_token = get_token
        self._timeout_s = timeout_s
        self._base_s = reconnect_base_s
        self._max_s = reconnect_max_s
        self._heartbeat_s = heartbeat_s
        self._ws: ClientConnection | None = None
        self._connected = threading.Event()
        self._closing = threading.Event()
        self._request_lock = threading.Lock()
        self._replies: queue.Queue[bytes | BaseException] = queue.Queue()
        self._waiting = False
        self._events: queue.Queue[tuple[list[RemoteRow], int] | None] = queue.Queue()
        self._broadcast_listeners: list[BroadcastListener] = []
        self._resync_listeners: list[Callable[[], None]] = []
        self.attempts = 0
        """Failed connection attempts since the last success (the backoff's exponent)."""
        self._reader = threading.Thread(target=self._read, name="lakesync-ws-read", daemon=True)
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="lakesync-ws-dispatch", daemon=True
        )
        self._reader.start()
        self._dispatcher.start()

    # ---------------------------------------------------------------- listeners

    def on_broadcast(self, listener: BroadcastListener) -> None:
        """Call ``listener(rows, server_hlc)`` for every broadcast, in arrival order."""
        self._broadcast_listeners.append(listener)

    def on_resync(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every (re)connection and every ``heartbeat_s`` while
        connected, on the broadcast thread."""
        self._resync_listeners.append(listener)

    @property
    def connected(self) -> bool:
        """Whether the socket is open."""
        return self._connected.is_set()

    def wait_connected(self, timeout_s: float) -> bool:
        """Wait until the socket is open; whether it is."""
        return self._connected.wait(timeout_s)

    # ---------------------------------------------------------------- requests

    def _request(self, data: bytes) -> bytes:
        with self._request_lock:
            if not self._connected.wait(self._timeout_s):
                raise TransportError("WebSocket not connected")
            ws = self._ws
            assert ws is not None
            while not self._replies.empty():
                self._replies.get_nowait()
            self._waiting = True
            try:
                ws.send(data)
                reply = self._replies.get(timeout=self._timeout_s)
            except queue.Empty:
                ws.close(1001, "request timed out")
                raise TransportError("WebSocket request timed out") from None
            except ConnectionClosed as exc:
                raise TransportError(f"WebSocket closed: {exc}") from None
            finally:
                self._waiting = False
            if isinstance(reply, BaseException):
                raise reply
            return reply

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        """A ``0x01`` frame; refused → the same push over HTTP (its exact answer)."""
        try:
            reply = self._request(
                frame(TAG_SYNC_PUSH, encode_sync_push(client_id, deltas, last_seen_hlc))
            )
        except _Refused as refused:
            log.info("push refused over the socket (%s); asking over HTTP", refused.reason)
            return self.http.push(client_id, deltas, last_seen_hlc)
        _, server_hlc, _ = self._decode(reply)
        return PushAck(server_hlc, len(deltas))

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        """A ``0x02`` frame; refused → the same pull over HTTP. A pull from a declared
        ``source`` goes over HTTP (the socket's ``SyncPull`` has no source, PROTOCOL.md §7.2)."""
        if source is not None:
            return self.http.pull(client_id, since, limit, source)
        try:
            reply = self._request(frame(TAG_SYNC_PULL, encode_sync_pull(client_id, since, limit)))
        except _Refused as refused:
            log.info("pull refused over the socket (%s); asking over HTTP", refused.reason)
            return self.http.pull(client_id, since, limit)
        deltas, server_hlc, has_more = self._decode(reply)
        # A reply with no rows says has_more only to be a non-empty message (PROTOCOL.md §7.2).
        return PullResponse(remote_rows(deltas), server_hlc, has_more and bool(deltas))

    @staticmethod
    def _decode(reply: bytes) -> tuple[list[RowDelta], int, bool]:
        try:
            return decode_sync_response(reply)
        except CodecError as exc:
            raise TransportError(f"gateway sent an undecodable reply: {exc.message}") from None

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        """Over HTTP (``GET /v1/sync/{gw}/checkpoint``)."""
        return self.http.checkpoint(client_id)

    def close(self) -> None:
        """Close the socket, stop reconnecting, stop the threads, close the HTTP transport."""
        self._closing.set()
        ws = self._ws
        if ws is not None:
            ws.close()
        self._events.put(None)
        for thread in (self._reader, self._dispatcher):
            if thread is not threading.current_thread():
                thread.join(self._timeout_s)
        self.http.close()

    # ---------------------------------------------------------------- threads

    def _socket_with_token(self) -> str:
        token = self._get_token() if self._get_token is not None else self._token
        return f"{self.url}?token={quote(token, safe='')}" if token else self.url

    def _read(self) -> None:
        while not self._closing.is_set():
            try:
                with connect(
                    self._socket_with_token(), max_size=None, open_timeout=self._timeout_s
                ) as ws:
                    self._ws = ws
                    self.attempts = 0
                    self._connected.set()
                    self._events.put(([], -1))  # marker: (re)connected, pull
                    try:
                        self._receive(ws)
                    finally:
                        self._connected.clear()
            except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
                delay = min(self._base_s * 2**self.attempts, self._max_s)
                self.attempts += 1
                log.info("WebSocket connect failed (%s); retrying in %.1fs", exc, delay)
                self._closing.wait(delay)

    def _receive(self, ws: ClientConnection) -> None:
        try:
            for message in ws:
                if isinstance(message, str) or len(message) < 2:
                    continue
                if message[0] == TAG_BROADCAST:
                    try:
                        deltas, server_hlc, _ = decode_sync_response(message[1:])
                    except CodecError as exc:
                        log.warning("undecodable broadcast ignored: %s", exc.message)
                        continue
                    self._events.put((remote_rows(deltas), server_hlc))
                elif self._waiting:
                    self._replies.put(message)
        except ConnectionClosed:
            pass
        close = ws.close_code
        if self._waiting:
            reason = ws.close_reason or ""
            if close == _POLICY_VIOLATION:
                self._replies.put(_Refused(close, reason))
            else:
                self._replies.put(TransportError(f"WebSocket closed ({close}) {reason}".strip()))

    def _dispatch(self) -> None:
        hb = self._heartbeat_s

        def next_beat() -> float | None:
            return None if hb is None else time.monotonic() + hb

        beat_at = next_beat()
        while True:
            try:
                timeout = None if beat_at is None else max(beat_at - time.monotonic(), 0.0)
                event = self._events.get(timeout=timeout)
            except queue.Empty:  # heartbeat due; while disconnected, the reconnection pulls
                beat_at = next_beat()
                if not self._connected.is_set():
                    continue
                event = ([], -1)
            if event is None:
                return
            rows, server_hlc = event
            calls: list[Callable[[], None]]
            if server_hlc < 0:
                beat_at = next_beat()
                calls = list(self._resync_listeners)
            else:
                calls = [
                    functools.partial(fn, rows, server_hlc) for fn in self._broadcast_listeners
                ]
            for call in calls:
                try:
                    call()
                except Exception:
                    log.exception("WebSocket listener failed")
