"""ASGI middleware: request ids, security and CORS headers, preflight, unversioned redirects."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

from litestar import Litestar
from litestar.enums import ScopeType
from litestar.types import Message, Receive, Scope, Send

__all__ = ["ProtocolHeadersMiddleware"]

_SECURITY = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"strict-transport-security", b"max-age=31536000; includeSubDomains"),
]
_NO_STORE = ("/sync/", "/admin/", "/v1/sync/", "/v1/admin/")
_UNVERSIONED = ("/sync/", "/admin/")


class ProtocolHeadersMiddleware:
    """Everything PROTOCOL.md §4.4 puts on every response, plus 301s and OPTIONS → 204."""

    def __init__(self, app: Litestar, allowed_origins: tuple[str, ...] | None) -> None:
        self.app = app
        self.allowed_origins = allowed_origins

    def _cors(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        if self.allowed_origins is None:
            allow = origin or "*"
        elif origin is not None and origin in self.allowed_origins:
            allow = origin
        else:
            return []
        return [
            (b"access-control-allow-origin", allow.encode("latin-1")),
            (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
            (b"access-control-allow-headers", b"Authorization, Content-Type, X-Request-Id"),
            (b"access-control-expose-headers", b"X-Request-Id, X-Checkpoint-Hlc"),
            (b"access-control-max-age", b"86400"),
            (b"vary", b"Origin"),
        ]

    @property
    def state(self) -> Any:
        """The wrapped Litestar app's state (``state.gateway`` after startup)."""
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        incoming = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if 0 < len(incoming) <= 128 else str(uuid.uuid4())
        scope["lakesync.request_id"] = request_id  # type: ignore[typeddict-unknown-key]
        origin_raw = headers.get(b"origin")
        origin = origin_raw.decode("latin-1") if origin_raw else None
        path: str = scope["path"]
        extra: list[tuple[bytes, bytes]] = [(b"x-request-id", request_id.encode("latin-1"))]
        extra += _SECURITY
        extra += self._cors(origin)
        if path.startswith(_NO_STORE):
            extra.append((b"cache-control", b"no-store"))
        if path.startswith("/v1/"):
            extra.append((b"api-version", b"v1"))

        if scope["method"] == "OPTIONS":
            await _respond(send, 204, extra, b"")
            return
        if path.startswith(_UNVERSIONED) or path == "/connectors/types":
            location = _versioned_location(scope)
            await _respond(
                send, 301, [*extra, (b"location", location), (b"sunset", b"2026-06-01")], b""
            )
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _versioned_location(scope: Scope) -> bytes:
    """``/v1`` + the request's path and query as the client sent them (the reference drops the
    query; its worker keeps it). The path's raw bytes keep escapes such as ``%2F`` escaped and
    cannot fail to encode; without them the decoded path is escaped again."""
    raw: bytes | None = scope.get("raw_path")
    # Servers give the path alone (uvicorn); some test clients the path and the query.
    target = raw.partition(b"?")[0] if raw else quote(scope["path"]).encode("ascii")
    query: bytes = scope.get("query_string", b"")
    return b"/v1" + target + (b"?" + query if query else b"")


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    start: Any = {
        "type": "http.response.start",
        "status": status,
        "headers": [*headers, (b"content-length", str(len(body)).encode())],
    }
    await send(start)
    end: Any = {"type": "http.response.body", "body": body}
    await send(end)
