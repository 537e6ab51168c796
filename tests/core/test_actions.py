"""Action validation and wire forms (PROTOCOL.md §8)."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync_platform.core.actions import (
    Action,
    ActionErrorResult,
    ActionResult,
    action_result_to_json,
    validate_action,
)
from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.ids import action_id

A1_ID = "5453cc712eee801b8bce6db14bf0567981dc5a8f62f414f47a535be4ea64da2f"
WIRE = {
    "actionId": A1_ID,
    "clientId": "client-a",
    "hlc": "111411200000000000",
    "connector": "github",
    "actionType": "create_pr",
    "params": {"title": "t", "base": "main"},
}


def test_validate_builds_an_action() -> None:
    action = validate_action(WIRE)
    assert action == Action(
        A1_ID, "client-a", 111411200000000000, "github", "create_pr", {"title": "t", "base": "main"}
    )
    assert action.idempotency_key is None
    assert (
        action_id(action.client_id, action.hlc, action.connector, action.action_type, action.params)
        == A1_ID
    )
    assert action.to_json() == WIRE
    assert validate_action(action.to_json()) == action


def test_idempotency_key() -> None:
    action = validate_action({**WIRE, "idempotencyKey": "k-1"})
    assert action.idempotency_key == "k-1"
    assert action.to_json() == {**WIRE, "idempotencyKey": "k-1"}
    assert validate_action({**WIRE, "idempotencyKey": ""}).idempotency_key == ""


def test_hlc_bounds() -> None:
    assert validate_action({**WIRE, "hlc": "0"}).hlc == 0
    assert validate_action({**WIRE, "hlc": "000"}).hlc == 0
    assert validate_action({**WIRE, "hlc": "18446744073709551615"}).hlc == 2**64 - 1
    assert validate_action({**WIRE, "hlc": "0" * 30 + "7"}).hlc == 7


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "Action must be a non-null object"),
        ([WIRE], "Action must be a non-null object"),
        ({**WIRE, "actionId": ""}, "actionId must be a non-empty string"),
        ({k: v for k, v in WIRE.items() if k != "actionId"}, "actionId must be a non-empty string"),
        ({**WIRE, "clientId": 5}, "clientId must be a non-empty string"),
        ({**WIRE, "hlc": 111411200000000000}, "hlc must be a bigint"),  # a JSON number
        ({**WIRE, "hlc": None}, "hlc must be a bigint"),
        ({**WIRE, "hlc": "abc"}, "hlc must be a bigint"),
        ({**WIRE, "hlc": "1e3"}, "hlc must be a bigint"),
        ({**WIRE, "hlc": "-1"}, "hlc must be a bigint"),
        ({**WIRE, "hlc": ""}, "hlc must be a bigint"),
        ({**WIRE, "hlc": " 12"}, "hlc must be a bigint"),
        ({**WIRE, "hlc": "١٢"}, "hlc must be a bigint"),  # non-ASCII digits
        ({**WIRE, "hlc": "18446744073709551616"}, "hlc must fit in 64 bits"),
        ({**WIRE, "hlc": "9" * 10_000}, "hlc must fit in 64 bits"),
        ({**WIRE, "connector": ""}, "connector must be a non-empty string"),
        ({**WIRE, "actionType": None}, "actionType must be a non-empty string"),
        ({**WIRE, "params": None}, "params must be a non-null object"),
        ({**WIRE, "params": ["a"]}, "params must be a non-null object"),
        ({**WIRE, "params": "{}"}, "params must be a non-null object"),
        ({**WIRE, "idempotencyKey": None}, "idempotencyKey must be a string if provided"),
        ({**WIRE, "idempotencyKey": 5}, "idempotencyKey must be a string if provided"),
    ],
)
def test_validation_messages(body: Any, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_action(body)
    assert info.value.message == message
    assert info.value.code == "VALIDATION_ERROR"


def test_result_wire_forms() -> None:
    ok = ActionResult("a1", {"url": "u"}, 999)
    error = ActionErrorResult(
        "a2", "ACTION_NOT_SUPPORTED", 'No action handler registered for connector "x"', False
    )
    assert action_result_to_json(ok) == {"actionId": "a1", "data": {"url": "u"}, "serverHlc": "999"}
    assert action_result_to_json(error) == {
        "actionId": "a2",
        "code": "ACTION_NOT_SUPPORTED",
        "message": 'No action handler registered for connector "x"',
        "retryable": False,
    }


def test_actions_are_hashable_despite_dict_params() -> None:
    assert hash(validate_action(WIRE)) == hash(validate_action(dict(WIRE)))
    assert len({ActionResult("a", {}, 1), ActionResult("a", {}, 1)}) == 1
