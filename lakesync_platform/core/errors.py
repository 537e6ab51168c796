"""The one exception tree of LakeSync Platform, and the registry of its wire codes.

Every failure a caller can act on carries a stable ``code`` (the protocol's ``ApiErrorCode``
strings, PROTOCOL.md §4.2) and the HTTP status the gateway answers it with (``http_status``; an
instance may carry another one, e.g. :class:`AuthError` 403 for a wrong gateway or role).

::

    LakeSyncError            INTERNAL_ERROR      500  anything unexpected (504 on a timeout)
    ├── ValidationError      VALIDATION_ERROR    400  malformed input
    ├── SchemaError          SCHEMA_ERROR        422  bad identifiers/schemas (400 on admin routes)
    ├── BackpressureError    BACKPRESSURE_ERROR  503  WAL backlog over its bound
    ├── ClockDriftError      CLOCK_DRIFT         409  remote HLC too far ahead
    ├── AuthError            AUTH_ERROR          401  bad token (403: wrong gateway/role)
    ├── ForbiddenError       FORBIDDEN           403  identity mismatch
    │   └── WriteForbiddenError WRITE_FORBIDDEN  403  the sync rules refuse a delta (per delta,
    │                                                 in a push's 200 answer: ``refused``)
    ├── NotFoundError        NOT_FOUND           404
    │   └── SourceNotFoundError SOURCE_NOT_FOUND 404  ``pull?source=`` names no declared source
    ├── RateLimitedError     RATE_LIMITED        429  (with ``retry_after`` seconds)
    ├── AdapterError         ADAPTER_ERROR       503  a storage backend failed
    └── FlushError           FLUSH_ERROR         500  a pipeline stage failed or could not start
        └── CommitConflictError COMMIT_CONFLICT  409  another commit landed first (retried)

:data:`ERRORS_BY_CODE` is the registry (code → class → ``http_status``): the gateway's error
responses, its OpenAPI error enum and the client's parsing of error envelopes are all built from
it, so a code is added in exactly one place.

Actions (PROTOCOL.md §8) fail per action, inside a 200 answer, not as HTTP errors: a handler
raises an :class:`ActionError` and the action's result carries its ``code`` and ``retryable``.
:data:`ACTION_ERRORS_BY_CODE` is their registry::

    ActionError              ACTION_EXECUTION_ERROR   the handler failed (retryable as it says)
    ├── ActionNotSupportedError  ACTION_NOT_SUPPORTED  no such connector or action type
    ├── ActionValidationError    ACTION_VALIDATION_ERROR  params do not match the action's schema
    ├── ActionTimeoutError       ACTION_TIMEOUT        still running after the timeout (retryable)
    └── ActionInProgressError    ACTION_IN_PROGRESS    a duplicate is running elsewhere (retryable)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Final

__all__ = [
    "ACTION_ERRORS_BY_CODE",
    "ERRORS_BY_CODE",
    "ActionError",
    "ActionInProgressError",
    "ActionNotSupportedError",
    "ActionTimeoutError",
    "ActionValidationError",
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
    "SourceNotFoundError",
    "ValidationError",
    "WriteForbiddenError",
]


class LakeSyncError(Exception):
    """Base of every LakeSync failure; ``code`` is stable and machine-readable.

    ``http_status`` is the class's status on the wire unless the instance was given another.
    """

    code: ClassVar[str] = "INTERNAL_ERROR"
    http_status: int = 500

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if http_status is not None:
            self.http_status = http_status


class ValidationError(LakeSyncError):
    """Input that is not well-formed (bad JSON, wrong types, out-of-range values)."""

    code = "VALIDATION_ERROR"
    http_status = 400


class SchemaError(LakeSyncError):
    """An identifier that is not a safe SQL identifier, or a delta/schema that violates a schema."""

    code = "SCHEMA_ERROR"
    http_status = 422


class BackpressureError(LakeSyncError):
    """The unflushed WAL backlog is over its configured bound; retry later."""

    code = "BACKPRESSURE_ERROR"
    http_status = 503


class ClockDriftError(LakeSyncError):
    """A remote HLC whose wall clock is more than ``MAX_DRIFT_MS`` ahead of ours."""

    code = "CLOCK_DRIFT"
    http_status = 409


class AuthError(LakeSyncError):
    """Authentication failed: 401 (no/invalid token) or, given as ``http_status``, 403."""

    code = "AUTH_ERROR"
    http_status = 401


class ForbiddenError(LakeSyncError):
    """The caller is authenticated but may not do this (e.g. push as another client)."""

    code = "FORBIDDEN"
    http_status = 403


class WriteForbiddenError(ForbiddenError):
    """The sync rules do not let the caller write a row (docs/gateway.md, "Security model").

    A push does not fail for it: the delta is refused inside the 200 answer (``refused``, with
    this code and message), the rest of the batch is accepted, and the row is re-announced.
    """

    code = "WRITE_FORBIDDEN"


class NotFoundError(LakeSyncError):
    """The addressed thing does not exist."""

    code = "NOT_FOUND"
    http_status = 404


class SourceNotFoundError(NotFoundError):
    """A pull names a ``source`` the gateway has not declared (the reference's message)."""

    code = "SOURCE_NOT_FOUND"


class RateLimitedError(LakeSyncError):
    """Too many requests in the current window; ``retry_after`` is in seconds."""

    code = "RATE_LIMITED"
    http_status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AdapterError(LakeSyncError):
    """A storage backend (database, object store, lake) failed."""

    code = "ADAPTER_ERROR"
    http_status = 503


class FlushError(LakeSyncError):
    """A pipeline stage failed or could not start: a flush of the WAL to the lake, or a stage
    that gave up waiting for the lake's lock (``lakesync_platform.pipeline.lock``)."""

    code = "FLUSH_ERROR"
    http_status = 500


class CommitConflictError(FlushError):
    """An Iceberg commit lost to another one that landed first (its validation found the
    other's files): nothing of it was committed, and the stage may plan again and retry."""

    code = "COMMIT_CONFLICT"
    http_status = 409


ERRORS_BY_CODE: Final[Mapping[str, type[LakeSyncError]]] = MappingProxyType(
    {
        cls.code: cls
        for cls in (
            ValidationError,
            SchemaError,
            BackpressureError,
            ClockDriftError,
            AuthError,
            ForbiddenError,
            NotFoundError,
            RateLimitedError,
            AdapterError,
            FlushError,
            LakeSyncError,
            SourceNotFoundError,
            CommitConflictError,
            WriteForbiddenError,
        )
    }
)
"""Every code the gateway sends, with the class that carries it: the protocol's, in its order,
then ours."""


class ActionError(Exception):
    """An action failed (raised by a handler; becomes the action's ``ActionErrorResult``).

    ``retryable`` says whether the client may send the action again: a retryable failure is not
    stored, so the retry runs the handler again; any other outcome is stored and replayed.
    """

    code: ClassVar[str] = "ACTION_EXECUTION_ERROR"
    default_retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable


class ActionNotSupportedError(ActionError):
    """No handler is registered for the connector, or it has no such action type."""

    code = "ACTION_NOT_SUPPORTED"


class ActionValidationError(ActionError):
    """The action's ``params`` do not match its type's parameter schema."""

    code = "ACTION_VALIDATION_ERROR"


class ActionTimeoutError(ActionError):
    """The handler was still running when the action timeout ran out (it may yet finish)."""

    code = "ACTION_TIMEOUT"
    default_retryable = True


class ActionInProgressError(ActionError):
    """The same action (by ``actionId`` or ``idempotencyKey``) is running in another request."""

    code = "ACTION_IN_PROGRESS"
    default_retryable = True


ACTION_ERRORS_BY_CODE: Final[Mapping[str, type[ActionError]]] = MappingProxyType(
    {
        cls.code: cls
        for cls in (
            ActionError,
            ActionNotSupportedError,
            ActionValidationError,
            ActionTimeoutError,
            ActionInProgressError,
        )
    }
)
"""Every code an action's error result carries, with the class that raises it."""
