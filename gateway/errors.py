"""The one place where domain errors become HTTP responses (PROTOCOL.md §4.2 envelope)."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException

from lakesync_platform.core.errors import AuthError, LakeSyncError, RateLimitedError

__all__ = ["STATUS_BY_CODE", "error_response", "handle_http_exception", "handle_lakesync_error"]

log = logging.getLogger(__name__)

STATUS_BY_CODE: dict[str, int] = {
    "VALIDATION_ERROR": 400,
    "SCHEMA_ERROR": 422,
    "CLOCK_DRIFT": 409,
    "AUTH_ERROR": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "RATE_LIMITED": 429,
    "BACKPRESSURE_ERROR": 503,
    "ADAPTER_ERROR": 503,
    "FLUSH_ERROR": 500,
    "INTERNAL_ERROR": 500,
}
_HTTP_CODES = {
    400: "VALIDATION_ERROR",
    401: "AUTH_ERROR",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "NOT_FOUND",
    413: "VALIDATION_ERROR",
    429: "RATE_LIMITED",
}


def request_id_of(request: Request[Any, Any, Any]) -> str | None:
    """The request id the middleware assigned."""
    value = request.scope.get("lakesync.request_id")
    return value if isinstance(value, str) else None


def error_response(
    message: str,
    code: str,
    status: int,
    request_id: str | None,
    headers: dict[str, str] | None = None,
) -> Response[dict[str, str]]:
    """The protocol's error envelope ``{"error", "code", "requestId"}``."""
    body = {"error": message, "code": code}
    if request_id is not None:
        body["requestId"] = request_id
    return Response(body, status_code=status, headers=headers)


def handle_lakesync_error(
    request: Request[Any, Any, Any], exc: Exception
) -> Response[dict[str, str]]:
    """Map a :class:`LakeSyncError` to its status (an explicit ``status`` attribute wins)."""
    assert isinstance(exc, LakeSyncError)
    status = getattr(exc, "status", None) or STATUS_BY_CODE.get(exc.code, 500)
    if isinstance(exc, AuthError):
        status = exc.status
    headers = None
    if isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(exc.retry_after)}
    if status >= 500:
        log.warning("%s %s -> %s %s: %s", request.method, request.url.path, status, exc.code, exc)
    return error_response(exc.message, exc.code, status, request_id_of(request), headers)


def handle_http_exception(
    request: Request[Any, Any, Any], exc: Exception
) -> Response[dict[str, str]]:
    """Framework errors (unknown route, wrong method, body too large) in the same envelope."""
    if isinstance(exc, HTTPException):
        status = exc.status_code
        if status == 404:
            message = "Not found"
        elif status == 413:
            message = "Payload too large (max 1 MiB)"
        elif status == 405:
            message = "Method not allowed"
        else:
            message = exc.detail or "Bad request"
        code = _HTTP_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "VALIDATION_ERROR")
        return error_response(message, code, status, request_id_of(request))
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response("Internal server error", "INTERNAL_ERROR", 500, request_id_of(request))
