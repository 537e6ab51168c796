"""Who is calling: Bearer JWT verification and the gateway/role checks (PROTOCOL.md §4.5).

Authentication runs as a Litestar guard before any handler: :func:`client_guard` on the sync
routes, :func:`admin_guard` on the admin routes. A guard checks the path's gateway id (400 before
anything else), verifies the token against the app's injected clock (with the configured
leeway), checks the role, applies the optional rate limit to the verified caller (its token's
``sub``, or its address when auth is off; see ``gateway/ratelimit.py``), and leaves the caller's
:class:`Identity` as the connection's ``user`` (``request.user`` in handlers). The guards are
coroutines so that Litestar runs them on the event loop, not on a worker thread.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from lakesync_platform.core.auth import verify_token
from lakesync_platform.core.errors import AuthError, LakeSyncError
from lakesync_platform.core.identifiers import check_gateway_id
from lakesync_platform.settings import GatewaySettings

from .state import gateway_state

__all__ = [
    "COUNTS_PUSH",
    "Identity",
    "admin_guard",
    "authenticate",
    "client_guard",
]

_BEARER = re.compile(r"^Bearer\s+(\S+)$")
COUNTS_PUSH = "lakesync.counts_push"
"""Route ``opt`` flag: a request rejected by the guard counts as a failed push in the metrics."""


@dataclass(frozen=True, slots=True)
class Identity:
    """The verified caller: ``client_id`` is ``None`` when auth is off."""

    client_id: str | None
    role: str
    claims: dict[str, str | tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        """Whether the caller holds the admin role."""
        return self.role == "admin"


def authenticate(
    authorization: str, gw: str, settings: GatewaySettings, now_s: int, *, admin: bool = False
) -> Identity:
    """Verify the ``Authorization`` header for gateway ``gw`` (and the admin role if ``admin``)."""
    check_gateway_id(gw)
    if not settings.auth_enabled:
        return Identity(None, "admin")
    match = _BEARER.match(authorization)
    if match is None:
        raise AuthError("Missing Bearer token")
    claims = verify_token(
        match.group(1), settings.jwt_secrets, now_s=now_s, leeway_s=settings.jwt_leeway_s
    )
    if claims.gw != gw:
        raise AuthError("Gateway ID mismatch: JWT authorises a different gateway", http_status=403)
    if admin and claims.role != "admin":
        raise AuthError("Admin role required", http_status=403)
    return Identity(claims.sub, claims.role, dict(claims.claims))


def _caller(connection: ASGIConnection[Any, Any, Any, Any], identity: Identity) -> str:
    """The rate limit's key: the verified token's subject, else the remote address."""
    if identity.client_id is not None:
        return "sub:" + identity.client_id
    client = connection.client
    return "addr:" + (client.host if client else "unknown")


def _guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler, *, admin: bool
) -> None:
    state = gateway_state(connection)
    started = time.perf_counter()
    try:
        identity = authenticate(
            connection.headers.get("authorization", ""),
            connection.path_params["gw"],
            state.settings,
            state.clock() // 1000,
            admin=admin,
        )
        if state.limiter is not None:
            state.limiter.check(_caller(connection, identity))
    except LakeSyncError:
        if handler.opt.get(COUNTS_PUSH):
            state.services.metrics.observe_push(
                connection.path_params["gw"], "error", time.perf_counter() - started
            )
        raise
    connection.scope["user"] = identity


async def client_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """Guard of the sync routes: a valid token for the path's gateway."""
    _guard(connection, handler, admin=False)


async def admin_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """Guard of the admin routes: a valid admin token for the path's gateway."""
    _guard(connection, handler, admin=True)
