"""The one place where errors become HTTP responses (PROTOCOL.md §4.2 envelope).

A :class:`LakeSyncError` is answered with its code and ``http_status`` from the registry in
``lakesync_platform.core.errors``; framework errors get the code of their status.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException

from lakesync_platform.core.errors import (
    AuthError,
    ForbiddenError,
    LakeSyncError,
    NotFoundError,
    RateLimitedError,
    ValidationError,
)

from .bodies import ErrorBody

__all__ = ["error_response", "handle_http_exception", "handle_lakesync_error"]

log = logging.getLogger(__name__)

_FRAMEWORK_CODES = {
    400: ValidationError.code,
    401: AuthError.code,
    403: ForbiddenError.code,
    404: NotFoundError.code,
    405: NotFoundError.code,
    413: ValidationError.code,
    429: RateLimitedError.code,
}
"""Codes for the framework's own errors (unknown route, wrong method, body too large)."""


def request_id_of(request: Request[Any, Any, Any]) -> str | None:
    """The request id the middleware assigned."""
    value = request.scope.get("lakesync.request_id")
    return value if isinstance(value, str) else None


def error_response(
    message: str,
    code: str,
    status: int,
    request_id: str | None,
    headers: Mapping[str, str] | None = None,
) -> Response[ErrorBody]:
    """The protocol's error envelope ``{"error", "code", "requestId"}``."""
    body = ErrorBody(message, code) if request_id is None else ErrorBody(message, code, request_id)
    return Response(body, status_code=status, headers=headers)


def handle_lakesync_error(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
    """Answer a :class:`LakeSyncError` with its ``http_status`` (see ``core.errors``)."""
    assert isinstance(exc, LakeSyncError)
    status = exc.http_status
    headers = None
    if isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(exc.retry_after)}
    if status >= 500:
        log.warning("%s %s -> %s %s: %s", request.method, request.url.path, status, exc.code, exc)
    return error_response(exc.message, exc.code, status, request_id_of(request), headers)


def handle_http_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
    """Framework errors (unknown route, wrong method, body too large) in the same envelope,
    with the framework's headers (a 405's ``Allow``: the methods the path has)."""
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
        code = _FRAMEWORK_CODES.get(
            status, LakeSyncError.code if status >= 500 else ValidationError.code
        )
        return error_response(message, code, status, request_id_of(request), exc.headers)
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response("Internal server error", LakeSyncError.code, 500, request_id_of(request))
