"""Client-side failures, added to the one exception tree of :mod:`lakesync_platform.core.errors`.

::

    LakeSyncError
    ├── (every core error: ValidationError, SchemaError, ClockDriftError, AuthError, ...)
    ├── TransportError       TRANSPORT_ERROR  the gateway could not be reached / answered oddly
    ├── RowNotFoundError     ROW_NOT_FOUND    update/delete of a row the local store does not hold
    ├── RowExistsError       ROW_EXISTS       insert of a row the local store already holds
    └── DeadLetterError      DEAD_LETTERED    outbox entries gave up after too many failures

Gateway error envelopes (``{"error", "code", "requestId"?}``, PROTOCOL.md §4.2) are turned back
into the core exception with the same ``code`` by :func:`error_from_envelope` (looked up in the
registry :data:`~lakesync_platform.core.errors.ERRORS_BY_CODE`), so the sync engine handles an
in-process gateway and an HTTP one the same way. ``INTERNAL_ERROR`` (a fault of the server, not of
the request) and unknown codes become a retryable :class:`TransportError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.errors import (
    ERRORS_BY_CODE,
    AuthError,
    LakeSyncError,
    RateLimitedError,
    SchemaError,
    ValidationError,
)

__all__ = [
    "DeadLetterError",
    "RowExistsError",
    "RowNotFoundError",
    "TransportError",
    "error_from_envelope",
    "is_permanent",
]


class TransportError(LakeSyncError):
    """The gateway could not be reached, timed out, or answered with something unexpected.

    Always safe to retry: pushes are idempotent by ``deltaId``.
    """

    code = "TRANSPORT_ERROR"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RowNotFoundError(LakeSyncError):
    """``update``/``delete`` of a row that the local store does not hold."""

    code = "ROW_NOT_FOUND"


class RowExistsError(LakeSyncError):
    """``insert`` of a row that the local store already holds (use ``update``)."""

    code = "ROW_EXISTS"


class DeadLetterError(LakeSyncError):
    """Outbox entries were moved to the dead letter after repeated failures.

    ``entry_ids`` name them (see ``SyncCoordinator.dead_letters``); ``cause`` is the last error.
    """

    code = "DEAD_LETTERED"

    def __init__(self, message: str, entry_ids: tuple[int, ...], cause: BaseException) -> None:
        super().__init__(message)
        self.entry_ids = entry_ids
        self.cause = cause


def error_from_envelope(status: int, body: object, retry_after: str | None = None) -> LakeSyncError:
    """Map a gateway error response to the matching exception (unknown → ``TransportError``)."""
    message = f"HTTP {status}"
    code = ""
    if isinstance(body, Mapping):
        message = str(body.get("error") or message)
        code = str(body.get("code") or "")
        request_id = body.get("requestId")
        if request_id:
            message = f"{message} (requestId: {request_id})"
    if code == AuthError.code or status == 401:
        return AuthError(message, http_status=status)
    if code == RateLimitedError.code or status == 429:
        try:
            seconds = int(retry_after or "1")
        except ValueError:
            seconds = 1
        return RateLimitedError(message, retry_after=seconds)
    cls = ERRORS_BY_CODE.get(code)
    if cls is not None and cls is not LakeSyncError:
        return cls(message)
    return TransportError(f"{message} [{code or 'no code'}]", status=status)


def is_permanent(error: BaseException) -> bool:
    """Whether retrying the same deltas can never succeed (malformed or schema-violating)."""
    return isinstance(error, (ValidationError, SchemaError))
