"""The one exception tree of LakeSync Platform.

Every failure a caller can act on carries a stable ``code`` (the protocol's ``ApiErrorCode``
strings, PROTOCOL.md §4.2). The gateway maps codes to HTTP statuses in one place
(``gateway/errors.py``); nothing else inspects exception types for that.

::

    LakeSyncError (INTERNAL_ERROR)
    ├── ValidationError      VALIDATION_ERROR   malformed input (400)
    ├── SchemaError          SCHEMA_ERROR       bad identifiers/schemas (422 push, 400 admin)
    ├── ClockDriftError      CLOCK_DRIFT        remote HLC too far ahead (409)
    ├── AuthError            AUTH_ERROR         bad token (401), wrong gateway/role (403)
    ├── ForbiddenError       FORBIDDEN          identity mismatch (403)
    ├── NotFoundError        NOT_FOUND          (404)
    ├── BackpressureError    BACKPRESSURE_ERROR WAL backlog over its bound (503)
    ├── RateLimitedError     RATE_LIMITED       (429)
    ├── AdapterError         ADAPTER_ERROR      a storage backend failed (500/503)
    └── FlushError           FLUSH_ERROR        a pipeline flush failed
"""

from __future__ import annotations

__all__ = [
    "AdapterError",
    "AuthError",
    "BackpressureError",
    "ClockDriftError",
    "FlushError",
    "ForbiddenError",
    "LakeSyncError",
    "NotFoundError",
    "RateLimitedError",
    "SchemaError",
    "ValidationError",
]


class LakeSyncError(Exception):
    """Base of every LakeSync failure; ``code`` is stable and machine-readable."""

    code: str = "INTERNAL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationError(LakeSyncError):
    """Input that is not well-formed (bad JSON, wrong types, out-of-range values)."""

    code = "VALIDATION_ERROR"


class SchemaError(LakeSyncError):
    """An identifier that is not a safe SQL identifier, or a delta/schema that violates a schema."""

    code = "SCHEMA_ERROR"


class ClockDriftError(LakeSyncError):
    """A remote HLC whose wall clock is more than ``MAX_DRIFT_MS`` ahead of ours."""

    code = "CLOCK_DRIFT"


class AuthError(LakeSyncError):
    """Authentication failed; ``status`` is 401 (no/invalid token) or 403 (wrong gateway/role)."""

    code = "AUTH_ERROR"

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


class ForbiddenError(LakeSyncError):
    """The caller is authenticated but may not do this (e.g. push as another client)."""

    code = "FORBIDDEN"


class NotFoundError(LakeSyncError):
    """The addressed thing does not exist."""

    code = "NOT_FOUND"


class BackpressureError(LakeSyncError):
    """The unflushed WAL backlog is over its configured bound; retry later."""

    code = "BACKPRESSURE_ERROR"


class RateLimitedError(LakeSyncError):
    """Too many requests in the current window; ``retry_after`` is in seconds."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AdapterError(LakeSyncError):
    """A storage backend (database, object store, lake) failed."""

    code = "ADAPTER_ERROR"


class FlushError(LakeSyncError):
    """A flush of the WAL to the lake failed or could not start."""

    code = "FLUSH_ERROR"
