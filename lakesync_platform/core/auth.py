"""HS256 JSON Web Tokens as the reference issues and checks them (PROTOCOL.md §4.5).

Signing, signature verification and the expiry rule are joserfc's: an HS256-only JWS registry
(``none`` and every other ``alg`` are unknown to it), keys imported once per secret, and its
``exp`` check run against the injected ``now_s`` with a leeway. This module keeps what the
reference adds on top and no library knows: the header must be ``{"alg":"HS256","typ":"JWT"}``
exactly; ``sub`` (the client id) and ``gw`` (the gateway id) are required non-empty strings;
``role`` defaults to ``"client"``; the ``customClaims``; and the reference's error messages.
Secrets are tried in order for rotation (``[primary, previous]``).

Why joserfc and not PyJWT (measured): ``import jwt`` loads PyJWT's JWKS HTTP client
(``urllib.request``, ``http``, ``ssl``, ``socket``, ``threading``), which the pure core may not
load; PyJWT re-imports the key on every decode (36 µs per verification against joserfc's 13 µs
here) and checks ``exp`` against the real clock only, where joserfc's claims registry takes
``now``.

Failures raise :class:`~lakesync_platform.core.errors.AuthError` (status 401) with the
reference messages; garbage input never raises anything else.
"""

from __future__ import annotations

import binascii
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from joserfc.errors import ExpiredTokenError, JoseError
from joserfc.jwk import OctKey
from joserfc.jws import (
    CompactSignature,
    JWSRegistry,
    extract_compact,
    serialize_compact,
    validate_compact,
)
from joserfc.jwt import JWTClaimsRegistry
from joserfc.util import urlsafe_b64decode

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

_HEADER: Final = {"alg": "HS256", "typ": "JWT"}
_UNSUPPORTED: Final = 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'
_EXP_INVALID: Final = 'Missing or invalid "exp" claim (expiry)'

_HS256_ONLY: Final = JWSRegistry(algorithms=["HS256"], strict_check_header=False)
"""Knows HS256 alone; other header members are ignored, as the reference ignores them. The
token's length is bounded by ``MAX_TOKEN_LENGTH`` alone (joserfc's per-segment limits lifted)."""
_HS256_ONLY.max_header_length = MAX_TOKEN_LENGTH
_HS256_ONLY.max_payload_length = MAX_TOKEN_LENGTH
_HS256_ONLY.max_signature_length = MAX_TOKEN_LENGTH


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


@functools.lru_cache(maxsize=16)
def _key(secret: str) -> OctKey:
    """The HMAC key of ``secret``, imported (and checked by joserfc) once per process."""
    return OctKey.import_key(secret)


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
    return serialize_compact(_HEADER, body.encode("ascii"), _key(secret), registry=_HS256_ONLY)


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
    """Strict base64url, as joserfc decodes it (no padding, no ``+/``, canonical last digit)."""
    try:
        return urlsafe_b64decode(segment.encode("utf-8"))
    except (binascii.Error, ValueError):
        raise AuthError(f"Malformed JWT: invalid base64url in {what}") from None


def _check_header(header_b64: str) -> None:
    if header_b64 == HEADER_B64:  # the header every issuer writes; anything else is parsed
        return
    header = _parse_json(_decode_segment(header_b64, "header"))
    if not isinstance(header, dict) or header.get("alg") != "HS256" or header.get("typ") != "JWT":
        raise AuthError(_UNSUPPORTED)


def _verified(token: str, keys: Sequence[OctKey]) -> CompactSignature:
    """The token's JWS once a key verifies its signature (keys tried in order).

    Called once the header passed :func:`_check_header`; when joserfc refuses a segment, the
    reference's message is found by decoding the segments in the reference's order.
    """
    _, payload_b64, signature_b64 = token.split(".")
    try:
        signed = extract_compact(token.encode("utf-8"), registry=_HS256_ONLY)
        if any(validate_compact(signed, key, registry=_HS256_ONLY) for key in keys):
            return signed
    except JoseError:
        _decode_segment(signature_b64, "signature")
        _decode_segment(payload_b64, "payload")
        # a header only joserfc's stricter JSON decoding refuses, or a registered header
        # member of the wrong type (e.g. a numeric "kid")
        raise AuthError(_UNSUPPORTED) from None
    _decode_segment(signature_b64, "signature")
    raise AuthError("Invalid JWT signature")


def _check_expiry(fields: Mapping[str, Any], now_s: int, leeway_s: int) -> int:
    """joserfc's ``exp`` rule at the injected time: a finite number, expired at ``now - leeway``."""
    exp: Any = fields.get("exp")
    try:
        JWTClaimsRegistry(now=now_s, leeway=leeway_s).validate_exp(exp)
    except ExpiredTokenError:
        raise AuthError("JWT has expired") from None
    except JoseError:
        raise AuthError(_EXP_INVALID) from None
    return int(exp)


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


def verify_token(
    token: str, secrets: Sequence[str], *, now_s: int, leeway_s: int = 0
) -> TokenClaims:
    """Verify an HS256 token against any of ``secrets`` (tried in order) at time ``now_s``.

    A token is expired once ``exp <= now_s - leeway_s``; the default leeway 0 is the
    reference's rule. ``nbf``, ``iat``, ``iss`` and ``aud`` are not checked (nor by the
    reference). Raises :class:`AuthError` (401) with the reference message on any failure;
    raises :class:`ValueError` if ``secrets`` is empty or holds an unusable secret (a
    configuration error).
    """
    if isinstance(secrets, str) or not secrets:
        raise ValueError("verify_token needs a non-empty sequence of secrets")
    keys = [_key(secret) for secret in secrets]
    _check_header(_split(token)[0])
    signed = _verified(token, keys)

    payload = _parse_json(signed.payload)
    if _js_falsy(payload):
        raise AuthError("Malformed JWT: payload is not valid JSON")
    fields: Mapping[str, Any] = payload if isinstance(payload, dict) else {}

    exp = _check_expiry(fields, now_s, leeway_s)
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
        exp=exp,
        claims=_custom_claims(fields, sub),
    )
