"""The WebSocket route: ``/sync/{gw}/ws`` and ``/v1/sync/{gw}/ws`` (PROTOCOL.md §7).

The handler authenticates the upgrade as the HTTP routes do (:func:`..auth.authenticate`: the
token from ``Authorization: Bearer …`` or ``?token=``, its ``gw`` the path's), refuses it when
the process holds its maximum of sockets, accepts, and hands the socket to the realtime service
(``lakesync_platform.sync.realtime``), which serves its frames and broadcasts.

A refused upgrade is answered with the HTTP status and error envelope the HTTP routes use (401,
403, 400; 503 when full) through the ASGI WebSocket denial response; a server without that
extension gets a close instead (1008, or 1013 when full).
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
from litestar import WebSocket, websocket
from litestar.types import (
    WebSocketAcceptEvent,
    WebSocketResponseBodyEvent,
    WebSocketResponseStartEvent,
    WebSocketSendEvent,
)

from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.sync.realtime import (
    CLOSE_POLICY_VIOLATION,
    CLOSE_TRY_AGAIN_LATER,
    RealtimeLimits,
)

from ..auth import authenticate
from ..bodies import ErrorBody
from ..openapi import GatewayId
from ..state import gateway_state

__all__ = ["WS_PATHS", "realtime_limits", "sync_socket"]

WS_PATHS = ["/sync/{gw:str}/ws", "/v1/sync/{gw:str}/ws"]
"""The reference server's path and the versioned one the reference worker and router use."""


def realtime_limits(settings: GatewaySettings) -> RealtimeLimits:
    """The realtime feed's limits from the gateway's settings."""
    return RealtimeLimits(
        max_connections=settings.ws_max_connections,
        max_messages_per_s=settings.ws_max_messages_per_s,
        max_frame_bytes=settings.ws_max_frame_bytes,
        send_queue=settings.ws_send_queue,
        poll_interval_s=settings.ws_poll_interval_s,
    )


class _Socket:
    """A Litestar WebSocket as the realtime service's ``FrameSocket``."""

    def __init__(self, ws: WebSocket[Any, Any, Any]) -> None:
        self._ws = ws

    async def receive(self) -> bytes | str | None:
        message = await self._ws.receive()
        if message["type"] != "websocket.receive":
            return None
        data: bytes | None = message.get("bytes")
        if data is not None:
            return data
        text: str = message.get("text") or ""
        return text

    async def send(self, data: bytes) -> None:
        event: WebSocketSendEvent = {"type": "websocket.send", "bytes": data, "text": None}
        await self._ws.send(event)

    async def close(self, code: int, reason: str) -> None:
        await self._ws.close(code, reason)


def _authorization(ws: WebSocket[Any, Any, Any]) -> str:
    header = ws.headers.get("authorization")
    if header:
        return header
    token = ws.query_params.get("token")
    return f"Bearer {token}" if token else ""


async def _deny(ws: WebSocket[Any, Any, Any], status: int, error: LakeSyncError, code: int) -> None:
    """Refuse the upgrade: an HTTP answer where the server can send one, else a close."""
    extensions: dict[str, Any] = ws.scope.get("extensions") or {}
    if "websocket.http.response" not in extensions:
        accept: WebSocketAcceptEvent = {
            "type": "websocket.accept",
            "subprotocol": None,
            "headers": [],
        }
        await ws.send(accept)
        await ws.close(code, error.message[:120])
        return
    body = msgspec.json.encode(ErrorBody(error.message, error.code))
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    start: WebSocketResponseStartEvent = {
        "type": "websocket.http.response.start",
        "status": status,
        "headers": headers,
    }
    await ws.send(start)
    end: WebSocketResponseBodyEvent = {
        "type": "websocket.http.response.body",
        "body": body,
        "more_body": False,
    }
    await ws.send(end)


@websocket(WS_PATHS)
async def sync_socket(socket: WebSocket[Any, Any, Any], gw: GatewayId) -> None:
    """Authenticate, accept, and serve one realtime socket until it closes."""
    state = gateway_state(socket)
    realtime = state.services.realtime
    await socket.receive()  # websocket.connect
    try:
        identity = authenticate(_authorization(socket), gw, state.settings, state.clock() // 1000)
    except LakeSyncError as exc:
        await _deny(socket, exc.http_status, exc, CLOSE_POLICY_VIOLATION)
        return
    if not realtime.admit():
        full = LakeSyncError("Too many connections", http_status=503)
        await _deny(socket, 503, full, CLOSE_TRY_AGAIN_LATER)
        return
    try:
        await socket.send({"type": "websocket.accept", "subprotocol": None, "headers": []})
        session = await realtime.open(
            _Socket(socket),
            gw,
            identity.client_id or f"anon-{uuid.uuid4()}",
            identity.claims,
            any_client_id=identity.client_id is None or identity.is_admin,
        )
    except BaseException:
        realtime.release()
        raise
    await realtime.serve(session)
