"""Who is calling: Bearer JWT verification and the gateway/role checks (PROTOCOL.md §4.5)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from lakesync_platform.core.auth import verify_token
from lakesync_platform.core.errors import AuthError, ValidationError
from lakesync_platform.settings import GatewaySettings

__all__ = ["Identity", "authenticate", "check_gateway_id"]

_BEARER = re.compile(r"^Bearer\s+(\S+)$")
_GATEWAY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


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


def check_gateway_id(gw: str) -> str:
    """Gateway ids are short URL-safe names."""
    if _GATEWAY_ID.fullmatch(gw) is None:
        raise ValidationError(f"Invalid gateway id: {gw[:80]!r}")
    return gw


def authenticate(
    request: Request[Any, Any, Any], gw: str, settings: GatewaySettings, *, admin: bool = False
) -> Identity:
    """Verify the caller's token for gateway ``gw`` (and the admin role if ``admin``)."""
    check_gateway_id(gw)
    if not settings.auth_enabled:
        return Identity(None, "admin")
    header = request.headers.get("authorization", "")
    match = _BEARER.match(header)
    if match is None:
        raise AuthError("Missing Bearer token")
    claims = verify_token(match.group(1), settings.jwt_secrets, now_s=int(time.time()))
    if claims.gw != gw:
        raise AuthError("Gateway ID mismatch: JWT authorises a different gateway", status=403)
    if admin and claims.role != "admin":
        raise AuthError("Admin role required", status=403)
    return Identity(claims.sub, claims.role, dict(claims.claims))
