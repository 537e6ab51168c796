"""The error registry: every wire code maps to exactly one class and one HTTP status."""

from __future__ import annotations

import inspect

from lakesync_platform.core import errors
from lakesync_platform.core.errors import (
    ACTION_ERRORS_BY_CODE,
    ERRORS_BY_CODE,
    ActionError,
    AuthError,
    LakeSyncError,
    RateLimitedError,
    SchemaError,
)

PROTOCOL_CODES = [  # PROTOCOL.md §4.2, in the order the OpenAPI document lists them
    "VALIDATION_ERROR",
    "SCHEMA_ERROR",
    "BACKPRESSURE_ERROR",
    "CLOCK_DRIFT",
    "AUTH_ERROR",
    "FORBIDDEN",
    "NOT_FOUND",
    "RATE_LIMITED",
    "ADAPTER_ERROR",
    "FLUSH_ERROR",
    "INTERNAL_ERROR",
]


def test_the_registry_holds_the_protocol_codes_in_order_then_ours() -> None:
    assert list(ERRORS_BY_CODE) == [
        *PROTOCOL_CODES,
        "SOURCE_NOT_FOUND",
        "COMMIT_CONFLICT",
        "WRITE_FORBIDDEN",
    ]


def test_each_code_has_one_class_and_one_status() -> None:
    classes = list(ERRORS_BY_CODE.values())
    assert len(set(classes)) == len(classes)
    for code, cls in ERRORS_BY_CODE.items():
        assert cls.code == code
        assert issubclass(cls, LakeSyncError)
        assert 400 <= cls.http_status <= 599


def test_every_class_of_the_tree_is_registered() -> None:
    tree = {
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, LakeSyncError)
    }
    assert tree == set(ERRORS_BY_CODE.values())


def test_statuses_match_the_protocol() -> None:
    statuses = {code: cls.http_status for code, cls in ERRORS_BY_CODE.items()}
    assert statuses == {
        "VALIDATION_ERROR": 400,
        "SCHEMA_ERROR": 422,
        "BACKPRESSURE_ERROR": 503,
        "CLOCK_DRIFT": 409,
        "AUTH_ERROR": 401,
        "FORBIDDEN": 403,
        "NOT_FOUND": 404,
        "RATE_LIMITED": 429,
        "ADAPTER_ERROR": 503,
        "FLUSH_ERROR": 500,
        "INTERNAL_ERROR": 500,
        "SOURCE_NOT_FOUND": 404,
        "COMMIT_CONFLICT": 409,
        "WRITE_FORBIDDEN": 403,
    }


def test_an_instance_may_carry_its_own_status_without_changing_the_class() -> None:
    assert AuthError("wrong gateway", http_status=403).http_status == 403
    assert AuthError("no token").http_status == 401
    timeout = LakeSyncError("Request timeout after 30.0s", http_status=504)
    assert (timeout.code, timeout.http_status) == ("INTERNAL_ERROR", 504)
    assert LakeSyncError.http_status == 500
    exc = SchemaError("bad schema")
    exc.http_status = 400
    assert SchemaError.http_status == 422
    limited = RateLimitedError("Too many requests", retry_after=7)
    assert (limited.retry_after, limited.http_status) == (7, 429)


def test_action_error_codes_are_registered_with_their_retryability() -> None:
    assert {code: cls.default_retryable for code, cls in ACTION_ERRORS_BY_CODE.items()} == {
        "ACTION_EXECUTION_ERROR": False,
        "ACTION_NOT_SUPPORTED": False,
        "ACTION_VALIDATION_ERROR": False,
        "ACTION_TIMEOUT": True,
        "ACTION_IN_PROGRESS": True,
    }
    tree = {
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, ActionError)
    }
    assert tree == set(ACTION_ERRORS_BY_CODE.values())
    assert ActionError("x", retryable=True).retryable
