"""The client parses every code of the error registry back into its exception."""

from __future__ import annotations

import pytest

from lakesync_platform.client import TransportError
from lakesync_platform.client._errors import error_from_envelope
from lakesync_platform.core.errors import (
    ERRORS_BY_CODE,
    AuthError,
    LakeSyncError,
    RateLimitedError,
)


@pytest.mark.parametrize("code", list(ERRORS_BY_CODE))
def test_every_code_parses_to_its_class(code: str) -> None:
    cls = ERRORS_BY_CODE[code]
    body = {"error": "boom", "code": code, "requestId": "r1"}
    parsed = error_from_envelope(cls.http_status, body, retry_after="5")
    if cls is LakeSyncError:  # a fault of the server, not of the request: retry
        assert isinstance(parsed, TransportError)
        assert parsed.status == 500
        assert parsed.message == "boom (requestId: r1) [INTERNAL_ERROR]"
        return
    assert type(parsed) is cls
    assert parsed.code == code
    assert parsed.message == "boom (requestId: r1)"
    assert parsed.http_status == cls.http_status


def test_auth_errors_keep_their_status_and_rate_limits_their_retry_after() -> None:
    forbidden = error_from_envelope(403, {"error": "x", "code": "AUTH_ERROR"})
    assert isinstance(forbidden, AuthError) and forbidden.http_status == 403
    limited = error_from_envelope(429, {"error": "x", "code": "RATE_LIMITED"}, "12")
    assert isinstance(limited, RateLimitedError) and limited.retry_after == 12


def test_statuses_without_a_code_and_unknown_codes() -> None:
    assert isinstance(error_from_envelope(401, None), AuthError)
    assert isinstance(error_from_envelope(429, "busy"), RateLimitedError)
    unknown = error_from_envelope(418, {"error": "teapot", "code": "TEAPOT"})
    assert isinstance(unknown, TransportError) and unknown.status == 418
