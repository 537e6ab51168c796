"""HS256 JWT signing and verification (PROTOCOL.md §4.5)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.core.auth import HEADER_B64, TokenClaims, sign_token, verify_token
from lakesync_platform.core.errors import AuthError

NOW = 1_700_000_000
SECRET = "primary-secret"
OLD_SECRET = "previous-secret"
HS256 = b'{"alg":"HS256","typ":"JWT"}'


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def craft(header: bytes | str, payload: bytes | str, secret: str = SECRET) -> str:
    """A token built independently of the module: any header/payload, a correct signature."""
    h = header if isinstance(header, str) else b64(header)
    p = payload if isinstance(payload, str) else b64(payload)
    sig = hmac.new(secret.encode(), f"{h}.{p}".encode(), hashlib.sha256).digest()
    return f"{h}.{p}.{b64(sig)}"


def claims_token(secret: str = SECRET, **claims: Any) -> str:
    body = {"sub": "client-a", "gw": "gw1", "exp": NOW + 60, **claims}
    return craft(HS256, json.dumps(body).encode(), secret)


def rejects(token: Any, message: str, secrets: list[str] | None = None) -> None:
    with pytest.raises(AuthError) as info:
        verify_token(token, secrets or [SECRET], now_s=NOW)
    assert info.value.message == message
    assert info.value.http_status == 401 and info.value.code == "AUTH_ERROR"


def test_header_is_the_reference_constant() -> None:
    assert HEADER_B64 == "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" == b64(HS256)
    assert sign_token({"sub": "a", "gw": "g"}, SECRET, now_s=NOW).split(".")[0] == HEADER_B64


def test_sign_defaults_and_signature() -> None:
    token = sign_token({"sub": "a", "gw": "g", "team": "x"}, SECRET, now_s=NOW)
    header, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert body == {"sub": "a", "gw": "g", "team": "x", "role": "client", "exp": NOW + 3600}
    expected = hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert signature == b64(expected) and "=" not in token
    short = sign_token(
        {"sub": "a", "gw": "g", "role": "admin", "exp": 5}, SECRET, now_s=NOW, ttl_s=1
    )
    assert json.loads(base64.urlsafe_b64decode(short.split(".")[1] + "==")) == {
        "sub": "a",
        "gw": "g",
        "role": "admin",
        "exp": 5,
    }
    assert sign_token({"sub": "a", "gw": "g"}, SECRET, now_s=NOW, ttl_s=10) != sign_token(
        {"sub": "a", "gw": "g"}, SECRET, now_s=NOW
    )


def test_known_jwt_io_vector_signature_checks() -> None:
    """The well-known jwt.io HS256 example: the signature is accepted (then `exp` is missing)."""
    token = (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    )
    rejects(token, 'Missing or invalid "exp" claim (expiry)', ["your-256-bit-secret"])
    rejects(token, "Invalid JWT signature", ["another-secret"])


def test_round_trip_and_custom_claims() -> None:
    token = sign_token(
        {
            "sub": "client-a",
            "gw": "gw1",
            "role": "admin",
            "tenant": "t1",
            "teams": ["a", "b"],
            "empty": [],
            "age": 42,
            "mixed": ["a", 1],
            "obj": {"k": "v"},
            "flag": True,
            "iat": 1,
            "iss": "me",
            "aud": "you",
        },
        SECRET,
        now_s=NOW,
    )
    claims = verify_token(token, [SECRET], now_s=NOW)
    assert claims == TokenClaims(
        sub="client-a",
        gw="gw1",
        role="admin",
        exp=NOW + 3600,
        claims={"tenant": "t1", "teams": ("a", "b"), "empty": (), "sub": "client-a"},
    )


def test_sub_claim_is_always_the_subject() -> None:
    claims = verify_token(claims_token(extra="x"), [SECRET], now_s=NOW)
    assert claims.claims == {"extra": "x", "sub": "client-a"}


@pytest.mark.parametrize("role", [None, "", 5, ["admin"]])
def test_role_defaults_to_client(role: Any) -> None:
    token = claims_token() if role is None else claims_token(role=role)
    assert verify_token(token, [SECRET], now_s=NOW).role == "client"


def test_expiry_boundary() -> None:
    rejects(claims_token(exp=NOW), "JWT has expired")
    rejects(claims_token(exp=NOW - 1), "JWT has expired")
    assert verify_token(claims_token(exp=NOW + 1), [SECRET], now_s=NOW).exp == NOW + 1
    assert verify_token(claims_token(exp=NOW + 0.5), [SECRET], now_s=NOW).exp == NOW
    assert verify_token(claims_token(exp=10**30), [SECRET], now_s=NOW).exp == 10**30


@pytest.mark.parametrize("exp", ["9999999999", True, None, [1]])
def test_invalid_exp(exp: Any) -> None:
    rejects(claims_token(exp=exp), 'Missing or invalid "exp" claim (expiry)')


def test_infinite_exp_is_invalid() -> None:
    token = craft(HS256, b'{"sub":"a","gw":"g","exp":1e400}')
    rejects(token, 'Missing or invalid "exp" claim (expiry)')


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"sub": ""}, 'Missing or invalid "sub" claim (clientId)'),
        ({"sub": 5}, 'Missing or invalid "sub" claim (clientId)'),
        ({"sub": None}, 'Missing or invalid "sub" claim (clientId)'),
        ({"gw": ""}, 'Missing or invalid "gw" claim (gatewayId)'),
        ({"gw": ["g"]}, 'Missing or invalid "gw" claim (gatewayId)'),
    ],
)
def test_required_claims(claims: dict[str, Any], message: str) -> None:
    rejects(claims_token(**claims), message)


def test_missing_sub_and_gw() -> None:
    rejects(
        craft(HS256, json.dumps({"gw": "g", "exp": NOW + 9}).encode()),
        'Missing or invalid "sub" claim (clientId)',
    )
    rejects(
        craft(HS256, json.dumps({"sub": "s", "exp": NOW + 9}).encode()),
        'Missing or invalid "gw" claim (gatewayId)',
    )


def test_rotation() -> None:
    old = claims_token(secret=OLD_SECRET)
    new = claims_token(secret=SECRET)
    assert verify_token(old, [SECRET, OLD_SECRET], now_s=NOW).sub == "client-a"
    assert verify_token(new, [SECRET, OLD_SECRET], now_s=NOW).sub == "client-a"
    assert verify_token(old, [OLD_SECRET, SECRET], now_s=NOW).sub == "client-a"
    rejects(old, "Invalid JWT signature", [SECRET])
    # The reference would report the *previous* secret's error ("Invalid JWT signature") here.
    rejects(claims_token(secret=SECRET, exp=NOW), "JWT has expired", [SECRET, OLD_SECRET])


def test_empty_secret_list_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        verify_token(claims_token(), [], now_s=NOW)


def test_forged_tokens() -> None:
    header, _, signature = claims_token().split(".")
    forged_payload = b64(json.dumps({"sub": "admin", "gw": "gw1", "exp": NOW + 60}).encode())
    rejects(f"{header}.{forged_payload}.{signature}", "Invalid JWT signature")
    rejects(claims_token(secret="attacker"), "Invalid JWT signature")
    rejects(f"{header}.{forged_payload}.{signature[:-4]}", "Invalid JWT signature")


UNSUPPORTED = 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'


@pytest.mark.parametrize(
    "header",
    [
        b'{"alg":"none","typ":"JWT"}',
        b'{"alg":"HS512","typ":"JWT"}',
        b'{"alg":"HS256","typ":"jwt"}',
        b'{"alg":"HS256"}',
        b'{"typ":"JWT"}',
        b'["HS256","JWT"]',
        b"null",
        b"0",
        b"not json",
        b'{"alg":"HS256","typ":"JWT"',
        b"\xff\xfe",
        b'{"alg":NaN}',
    ],
)
def test_unsupported_headers(header: bytes) -> None:
    rejects(craft(header, b'{"sub":"a","gw":"g","exp":9999999999}'), UNSUPPORTED)


def test_alg_none_without_signature() -> None:
    none_header = b64(b'{"alg":"none","typ":"JWT"}')
    payload = b64(b'{"sub":"a","gw":"g","exp":9999999999}')
    rejects(f"{none_header}.{payload}.", "Malformed JWT: empty segment")
    rejects(f"{none_header}.{payload}.c2ln", UNSUPPORTED)


def test_header_with_extra_members_is_accepted() -> None:
    token = craft(
        b'{"typ":"JWT","kid":"k1","alg":"HS256"}', b'{"sub":"a","gw":"g","exp":9999999999}'
    )
    assert verify_token(token, [SECRET], now_s=NOW).sub == "a"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "Malformed JWT: expected three dot-separated segments"),
        ("abc", "Malformed JWT: expected three dot-separated segments"),
        ("a.b", "Malformed JWT: expected three dot-separated segments"),
        ("a.b.c.d", "Malformed JWT: expected three dot-separated segments"),
        ("..", "Malformed JWT: empty segment"),
        ("a..c", "Malformed JWT: empty segment"),
        ("!!!.b.c", "Malformed JWT: invalid base64url in header"),
        ("abcde.b.c", "Malformed JWT: invalid base64url in header"),  # length % 4 == 1
        ("é.b.c", "Malformed JWT: invalid base64url in header"),
        (f"{HEADER_B64}.b.%%%", "Malformed JWT: invalid base64url in signature"),
        (f"{HEADER_B64}.Yg.c2ln", "Invalid JWT signature"),
    ],
)
def test_malformed(token: str, message: str) -> None:
    rejects(token, message)


@pytest.mark.parametrize("payload", [b"not json", b"null", b"0", b"false", b'""', b"\xff"])
def test_payload_that_is_not_valid_json(payload: bytes) -> None:
    rejects(craft(HS256, payload), "Malformed JWT: payload is not valid JSON")


def test_payload_segments_that_decode_oddly() -> None:
    rejects(craft(HS256, "%%%%"), "Malformed JWT: invalid base64url in payload")
    rejects(craft(HS256, b"[1]"), 'Missing or invalid "exp" claim (expiry)')


def test_non_string_and_huge_tokens() -> None:
    rejects(None, "Malformed JWT: token is not a string of at most 65536 characters")
    rejects(b"a.b.c", "Malformed JWT: token is not a string of at most 65536 characters")
    rejects("a" * 70000, "Malformed JWT: token is not a string of at most 65536 characters")


def test_deeply_nested_json_does_not_crash() -> None:
    rejects(craft(b"[" * 20000 + b"]" * 20000, b"{}"), UNSUPPORTED)
    rejects(craft(HS256, b"[" * 20000 + b"]" * 20000), "Malformed JWT: payload is not valid JSON")


@given(st.text(max_size=200))
def test_garbage_text_only_raises_auth_error(token: str) -> None:
    with pytest.raises(AuthError):
        verify_token(token, [SECRET], now_s=NOW)


@given(st.binary(max_size=64), st.binary(max_size=64), st.binary(max_size=40), st.booleans())
def test_garbage_segments_only_raise_auth_error(
    header: bytes, payload: bytes, signature: bytes, sign: bool
) -> None:
    token = craft(header, payload) if sign else f"{b64(header)}.{b64(payload)}.{b64(signature)}"
    with contextlib.suppress(AuthError):  # anything else fails the test
        verify_token(token, [SECRET], now_s=NOW)


@pytest.mark.parametrize(
    ("alg", "digest"),
    [("HS384", hashlib.sha384), ("HS512", hashlib.sha512), ("RS256", hashlib.sha256)],
)
def test_other_algorithms_are_rejected_even_when_correctly_signed(alg: str, digest: Any) -> None:
    header = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    payload = b64(json.dumps({"sub": "a", "gw": "g", "exp": NOW + 60}).encode())
    sig = hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), digest).digest()
    rejects(f"{header}.{payload}.{b64(sig)}", UNSUPPORTED)


def test_alg_none_with_any_signature_is_rejected() -> None:
    none_header = b64(b'{"alg":"none","typ":"JWT"}')
    payload = b64(json.dumps({"sub": "a", "gw": "g", "exp": NOW + 60}).encode())
    signature = claims_token().split(".")[2]
    rejects(f"{none_header}.{payload}.{signature}", UNSUPPORTED)


def test_missing_exp() -> None:
    rejects(
        craft(HS256, json.dumps({"sub": "s", "gw": "g"}).encode()),
        'Missing or invalid "exp" claim (expiry)',
    )


def test_rotation_accepts_a_previous_secret_only_while_it_is_listed() -> None:
    token = claims_token(secret=OLD_SECRET)
    assert verify_token(token, ["newest", SECRET, OLD_SECRET], now_s=NOW).sub == "client-a"
    rejects(token, "Invalid JWT signature", ["newest", SECRET])


def test_leeway_edge() -> None:
    def verify(exp: int, leeway_s: int) -> TokenClaims:
        return verify_token(claims_token(exp=exp), [SECRET], now_s=NOW, leeway_s=leeway_s)

    assert verify(NOW - 4, 5).exp == NOW - 4  # within the leeway
    with pytest.raises(AuthError, match="JWT has expired"):
        verify(NOW - 5, 5)  # exp <= now - leeway
    with pytest.raises(AuthError, match="JWT has expired"):
        verify(NOW, 0)  # the reference's rule: exp <= now


def test_expiry_uses_the_injected_clock_not_the_real_one() -> None:
    token = claims_token(exp=NOW + 60)  # expired in real time since November 2023
    assert verify_token(token, [SECRET], now_s=NOW).exp == NOW + 60
    assert verify_token(token, [SECRET], now_s=NOW + 59).exp == NOW + 60
    with pytest.raises(AuthError, match="JWT has expired"):
        verify_token(token, [SECRET], now_s=NOW + 60)


def test_long_segments_are_bounded_by_the_token_length_only() -> None:
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "pad": "x" * 1000}).encode())
    payload = b64(json.dumps({"sub": "a", "gw": "g", "exp": NOW + 60}).encode())
    sig = hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert verify_token(f"{header}.{payload}.{b64(sig)}", [SECRET], now_s=NOW).sub == "a"
    rejects(f"{header}.{payload}.{b64(sig * 100)}", "Invalid JWT signature")
