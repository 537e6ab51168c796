"""HS256 JSON Web Tokens as the reference issues and checks them (PROTOCOL.md §4.5).

Only ``{"alg":"HS256","typ":"JWT"}`` tokens are accepted; ``exp`` (seconds), ``sub`` (the client
id) and ``gw`` (the gateway id) are required, ``role`` defaults to ``"client"``. Secrets are tried
in order for rotation (``[primary, previous]``). The current time is injected (``now_s``).

Failures raise :class:`~lakesync_platform.core.errors.AuthError` (status 401) with the
reference messages; garbage input never raises anything else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from .errors import AuthError

__all__ = [
    "HEADER_B64",
    "MAX_TOKEN_LENGTH",
    "STANDARD_CLAIMS",
    "TokenClaims",
    "sign_token",
    "verify_token",
]

HEADER_B64: Final = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
"""base64url of ``{"alg":"HS256","typ":"JWT"}``, the only header issued or accepted."""
MAX_TOKEN_LENGTH: Final = 65536
"""Longer tokens are rejected before any decoding (the reference has no limit)."""
STANDARD_CLAIMS: Final = frozenset(("sub", "gw", "exp", "iat", "iss", "aud", "role"))
"""Claims that are not passed on to sync rules (except ``sub``, which always is)."""

_UNSUPPORTED: Final = 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """A verified token: client id ``sub``, gateway ``gw``, ``role``, expiry ``exp`` (seconds).

    ``claims`` are the reference ``customClaims``: every non-standard claim whose value is a
    string or a list of strings (lists as tuples), plus ``sub`` — what sync rules resolve
    ``jwt:<claim>`` against.
    """

    sub: str
    gw: str
    role: str
    exp: int
    claims: dict[str, str | tuple[str, ...]] = field(hash=False)


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    """Decode like the reference (``atob`` after mapping ``-_`` to ``+/`` and padding)."""
    standard = text.replace("-", "+").replace("_", "/")
    return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"invalid JSON constant {name}")


def _parse_json(data: bytes) -> Any:
    """``JSON.parse(new TextDecoder().decode(data))``, or ``None`` if it is not JSON."""
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def _js_falsy(value: Any) -> bool:
    return (
        value is None
        or value is False
        or value == ""
        or (isinstance(value, int | float) and not isinstance(value, bool) and value == 0)
    )


def sign_token(payload: Mapping[str, Any], secret: str, *, now_s: int, ttl_s: int = 3600) -> str:
    """Sign ``payload`` with HMAC-SHA256 (reference ``signToken``).

    ``role`` defaults to ``"client"`` and ``exp`` to ``now_s + ttl_s`` when absent. The payload
    JSON is ASCII-only (non-ASCII escaped), so any verifier decodes it identically.
    """
    claims = dict(payload)
    claims.setdefault("role", "client")
    claims.setdefault("exp", now_s + ttl_s)
    body = json.dumps(claims, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    signing_input = f"{HEADER_B64}.{_b64url_encode(body.encode('ascii'))}"
    signature = hmac.new(secret.encode("utf-8"), signing_input.encode("ascii"), hashlib.sha256)
    return f"{signing_input}.{_b64url_encode(signature.digest())}"


def _split(token: object) -> tuple[str, str, str]:
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        raise AuthError("Malformed JWT: token is not a string of at most 65536 characters")
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthError("Malformed JWT: expected three dot-separated segments")
    header, payload, signature = parts
    if not header or not payload or not signature:
        raise AuthError("Malformed JWT: empty segment")
    return header, payload, signature


def _decode_segment(segment: str, what: str) -> bytes:
    try:
        return _b64url_decode(segment)
    except (binascii.Error, ValueError):
        raise AuthError(f"Malformed JWT: invalid base64url in {what}") from None


def _check_signature(
    header_b64: str, payload_b64: str, signature: bytes, secrets: Sequence[str]
) -> None:
    if isinstance(secrets, str) or not secrets:
        raise ValueError("verify_token needs a non-empty sequence of secrets")
    signing_input = f"{header_b64}.{payload_b64}".encode()
    valid = False
    for secret in secrets:
        expected = hmac.new(secret.encode("utf-8"), signing_input, hashlib.sha256).digest()
        valid |= hmac.compare_digest(expected, signature)
    if not valid:
        raise AuthError("Invalid JWT signature")


def _custom_claims(payload: Mapping[str, Any], sub: str) -> dict[str, str | tuple[str, ...]]:
    claims: dict[str, str | tuple[str, ...]] = {}
    for key, value in payload.items():
        if key in STANDARD_CLAIMS:
            continue
        if isinstance(value, str):
            claims[key] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            claims[key] = tuple(value)
    claims["sub"] = sub
    return claims


def verify_token(token: str, secrets: Sequence[str], *, now_s: int) -> TokenClaims:
    """Verify an HS256 token against any of ``secrets`` (tried in order) at time ``now_s``.

    Raises :class:`AuthError` (401) with the reference message on any failure; raises
    :class:`ValueError` only if ``secrets`` is empty (a configuration error).
    """
    header_b64, payload_b64, signature_b64 = _split(token)
    header = _parse_json(_decode_segment(header_b64, "header"))
    if not isinstance(header, dict) or header.get("alg") != "HS256" or header.get("typ") != "JWT":
        raise AuthError(_UNSUPPORTED)
    signature = _decode_segment(signature_b64, "signature")
    _check_signature(header_b64, payload_b64, signature, secrets)

    payload = _parse_json(_decode_segment(payload_b64, "payload"))
    if _js_falsy(payload):
        raise AuthError("Malformed JWT: payload is not valid JSON")
    fields: Mapping[str, Any] = payload if isinstance(payload, dict) else {}

    exp = fields.get("exp")
    if (
        isinstance(exp, bool)
        or not isinstance(exp, int | float)
        or (isinstance(exp, float) and not math.isfinite(exp))
    ):
        raise AuthError('Missing or invalid "exp" claim (expiry)')
    if exp <= now_s:
        raise AuthError("JWT has expired")
    sub = fields.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthError('Missing or invalid "sub" claim (clientId)')
    gw = fields.get("gw")
    if not isinstance(gw, str) or not gw:
        raise AuthError('Missing or invalid "gw" claim (gatewayId)')
    role = fields.get("role")
    return TokenClaims(
        sub=sub,
        gw=gw,
        role=role if isinstance(role, str) and role else "client",
        exp=int(exp),
        claims=_custom_claims(fields, sub),
    )
