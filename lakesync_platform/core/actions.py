"""Actions: imperative requests a client asks a connector to perform (PROTOCOL.md §8).

On the JSON wire an action is
``{"actionId","clientId","hlc":"<decimal>","connector","actionType","params":{…},
"idempotencyKey"?}``; the answer to each is an :class:`ActionResult` or an
:class:`ActionErrorResult`. ``actionId`` is
:func:`~lakesync_platform.core.ids.action_id` of the action's content.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import ValidationError
from .hlc import MAX_HLC

__all__ = [
    "Action",
    "ActionErrorResult",
    "ActionResult",
    "action_result_to_json",
    "validate_action",
]

_DECIMAL: Final = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class Action:
    """One action; ``hlc`` is the client's timestamp, ``params`` a JSON object."""

    action_id: str
    client_id: str
    hlc: int
    connector: str
    action_type: str
    params: Mapping[str, Any] = field(hash=False)
    idempotency_key: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form (``hlc`` as a decimal string, ``idempotencyKey`` only when set)."""
        out: dict[str, Any] = {
            "actionId": self.action_id,
            "clientId": self.client_id,
            "hlc": str(self.hlc),
            "connector": self.connector,
            "actionType": self.action_type,
            "params": dict(self.params),
        }
        if self.idempotency_key is not None:
            out["idempotencyKey"] = self.idempotency_key
        return out


@dataclass(frozen=True, slots=True)
class ActionResult:
    """A successful action: the connector's ``data`` and the server HLC after it ran."""

    action_id: str
    data: Mapping[str, Any] = field(hash=False)
    server_hlc: int

    def to_json(self) -> dict[str, Any]:
        """The wire form ``{"actionId","data","serverHlc":"<decimal>"}``."""
        return {
            "actionId": self.action_id,
            "data": dict(self.data),
            "serverHlc": str(self.server_hlc),
        }


@dataclass(frozen=True, slots=True)
class ActionErrorResult:
    """A failed action; ``retryable`` says whether the client may send it again."""

    action_id: str
    code: str
    message: str
    retryable: bool

    def to_json(self) -> dict[str, Any]:
        """The wire form ``{"actionId","code","message","retryable"}``."""
        return {
            "actionId": self.action_id,
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }


def action_result_to_json(result: ActionResult | ActionErrorResult) -> dict[str, Any]:
    """The wire form of either kind of result."""
    return result.to_json()


def _non_empty(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{key} must be a non-empty string")
    return value


def validate_action(obj: object) -> Action:
    """Check a wire action (parsed JSON) and build an :class:`Action` (``validateAction``).

    ``hlc`` must be a decimal string (what the reference's JSON reviver turns into a bigint);
    a JSON number or any other string gives the reference message ``hlc must be a bigint``.
    Raises :class:`ValidationError`.
    """
    if not isinstance(obj, Mapping):
        raise ValidationError("Action must be a non-null object")
    action_id = _non_empty(obj, "actionId")
    client_id = _non_empty(obj, "clientId")
    raw_hlc = obj.get("hlc")
    if not isinstance(raw_hlc, str) or _DECIMAL.fullmatch(raw_hlc) is None:
        raise ValidationError("hlc must be a bigint")
    significant = raw_hlc.lstrip("0")
    hlc = int(significant or "0") if len(significant) <= 20 else MAX_HLC + 1
    if hlc > MAX_HLC:
        raise ValidationError("hlc must fit in 64 bits")
    connector = _non_empty(obj, "connector")
    action_type = _non_empty(obj, "actionType")
    params = obj.get("params")
    if not isinstance(params, Mapping):
        raise ValidationError("params must be a non-null object")
    idempotency_key = obj.get("idempotencyKey")
    if "idempotencyKey" in obj and not isinstance(idempotency_key, str):
        raise ValidationError("idempotencyKey must be a string if provided")
    return Action(
        action_id=action_id,
        client_id=client_id,
        hlc=hlc,
        connector=connector,
        action_type=action_type,
        params=params,
        idempotency_key=idempotency_key,
    )
