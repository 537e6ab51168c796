"""Actions: imperative requests a client asks a connector to perform (PROTOCOL.md §8).

On the JSON wire an action is
``{"actionId","clientId","hlc":"<decimal>","connector","actionType","params":{…},
"idempotencyKey"?}``; the answer to each is an :class:`ActionResult` or an
:class:`ActionErrorResult`. ``actionId`` is
:func:`~lakesync_platform.core.ids.action_id` of the action's content.

A connector that performs actions is an :class:`ActionHandler`: it lists what it can do as
:class:`ActionDescriptor` values (an action type, a description, and the type of its params: a
msgspec struct, which both checks ``params`` and gives the JSON Schema that discovery shows) and
executes one action at a time, raising :class:`~lakesync_platform.core.errors.ActionError` when
it fails. :func:`params_struct` builds such a type from declared parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Protocol

import msgspec

from .errors import ActionError, ActionValidationError, ValidationError
from .hlc import MAX_HLC
from .sync_rules import Claims
from .wire import MAX_ID_LENGTH

__all__ = [
    "MAX_ACTIONS_PER_PUSH",
    "PARAM_TYPES",
    "Action",
    "ActionContext",
    "ActionDescriptor",
    "ActionErrorResult",
    "ActionHandler",
    "ActionPush",
    "ActionResult",
    "ParamSpec",
    "action_result_from_json",
    "action_result_to_json",
    "checked_action_push",
    "decode_action_push",
    "error_result",
    "params_struct",
    "validate_action",
]

MAX_ACTIONS_PER_PUSH: Final = 100
"""Actions in one request at most (the reference client sends batches of at most 100)."""

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


def error_result(action_id: str, error: ActionError) -> ActionErrorResult:
    """The result of an action that failed with ``error``."""
    return ActionErrorResult(action_id, error.code, error.message, error.retryable)


def action_result_from_json(obj: Mapping[str, Any]) -> ActionResult | ActionErrorResult:
    """Inverse of :func:`action_result_to_json` (an error result has ``code`` and
    ``retryable``, as the reference's ``isActionError`` tells them apart)."""
    if "code" in obj and "retryable" in obj:
        return ActionErrorResult(
            obj["actionId"], obj["code"], obj["message"], bool(obj["retryable"])
        )
    return ActionResult(obj["actionId"], obj["data"], int(obj["serverHlc"]))


# ---------------------------------------------------------------------- a request of actions


@dataclass(frozen=True, slots=True)
class ActionPush:
    """A request of actions (``{"clientId", "actions": [...]}``), each validated."""

    client_id: str
    actions: tuple[Action, ...]


_decode_json = msgspec.json.Decoder().decode


def decode_action_push(raw: bytes) -> ActionPush:
    """Decode and validate an action request body (``validateActionBody`` + ``validateAction``).

    The whole request fails on the first bad action (400, the reference's messages); an action
    whose ``clientId`` is not the request's is refused too, and so are ids and idempotency keys
    longer than ``MAX_ID_LENGTH`` (they key the stored results).
    """
    try:
        body = _decode_json(raw)
    except msgspec.DecodeError:
        raise ValidationError("Invalid JSON body") from None
    if not isinstance(body, dict):
        raise ValidationError("Missing required fields: clientId, actions")
    client_id = body.get("clientId")
    actions = body.get("actions")
    if not isinstance(client_id, str) or not client_id or not isinstance(actions, list):
        raise ValidationError("Missing required fields: clientId, actions")
    return checked_action_push(client_id, [validate_action(a) for a in actions])


def checked_action_push(client_id: str, actions: Sequence[Action]) -> ActionPush:
    """The checks every action request passes, whatever its encoding (JSON over HTTP,
    protobuf over the WebSocket): at most ``MAX_ACTIONS_PER_PUSH`` actions, ids and
    idempotency keys no longer than ``MAX_ID_LENGTH``, each action of the request's client."""
    if not client_id:
        raise ValidationError("Missing required fields: clientId, actions")
    if len(actions) > MAX_ACTIONS_PER_PUSH:
        raise ValidationError(f"Too many actions in a single request (max {MAX_ACTIONS_PER_PUSH})")
    if len(client_id) > MAX_ID_LENGTH:
        raise ValidationError(f"clientId is longer than {MAX_ID_LENGTH} characters")
    for action in actions:
        for what, value in (
            ("actionId", action.action_id),
            ("idempotencyKey", action.idempotency_key or ""),
        ):
            if len(value) > MAX_ID_LENGTH:
                raise ValidationError(f"{what} is longer than {MAX_ID_LENGTH} characters")
        if action.client_id != client_id:
            raise ValidationError(
                f'Action clientId "{action.client_id}" does not match the request clientId'
            )
    return ActionPush(client_id, tuple(actions))


# ---------------------------------------------------------------------- handlers


PARAM_TYPES: Final[Mapping[str, Any]] = {
    "string": str,
    "number": float,
    "integer": int,
    "boolean": bool,
    "object": dict[str, Any],
    "array": list[Any],
    "json": Any,
}
"""The types a declared action parameter may have, and their Python types."""


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """A declared parameter: its type (one of :data:`PARAM_TYPES`), whether it is required."""

    type: str
    required: bool = True
    description: str | None = None


def params_struct(name: str, params: Mapping[str, ParamSpec]) -> type[msgspec.Struct]:
    """A msgspec struct type for declared ``params`` (unknown fields refused)."""
    fields: list[Any] = []
    for param, spec in params.items():
        if spec.type not in PARAM_TYPES:
            raise ValidationError(
                f"parameter {param!r} type must be one of {', '.join(PARAM_TYPES)}"
            )
        typ: Any = PARAM_TYPES[spec.type]
        if spec.description:
            typ = Annotated[typ, msgspec.Meta(description=spec.description)]
        if spec.required:
            fields.append((param, typ))
        else:
            fields.append((param, typ | msgspec.UnsetType, msgspec.UNSET))
    fields.sort(key=lambda f: len(f) == 3)  # required fields first, as a struct needs
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True)


@dataclass(frozen=True, slots=True)
class ActionDescriptor:
    """An action type a connector supports; ``params`` (a msgspec struct type) checks the
    action's params and is shown in discovery as a JSON Schema (``paramsSchema``)."""

    action_type: str
    description: str
    params: type[msgspec.Struct] | None = None

    def params_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the params (inlined: no ``$ref``), or ``None``."""
        if self.params is None:
            return None
        schema = msgspec.json.schema(self.params)
        defs = schema.get("$defs", {})
        if len(defs) == 1 and schema.get("$ref") == f"#/$defs/{next(iter(defs))}":
            inlined: dict[str, Any] = next(iter(defs.values()))
            return inlined
        return schema

    def to_json(self) -> dict[str, Any]:
        """The wire form ``{"actionType","description","paramsSchema"?}``."""
        out: dict[str, Any] = {"actionType": self.action_type, "description": self.description}
        schema = self.params_schema()
        if schema is not None:
            out["paramsSchema"] = schema
        return out

    def check_params(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ActionValidationError` if ``params`` do not match the schema."""
        if self.params is None:
            return
        try:
            msgspec.convert(params, self.params)
        except msgspec.ValidationError as exc:
            message = str(exc).replace("at `$", "at `$.params")
            raise ActionValidationError(
                f"Invalid params for {self.action_type}: {message}"
            ) from None


@dataclass(frozen=True, slots=True)
class ActionContext:
    """Who asked for an action: the gateway, the client, and its token's claims."""

    gateway_id: str
    client_id: str
    claims: Claims = field(default_factory=dict)


class ActionHandler(Protocol):
    """A connector that performs actions against an external system (``ActionHandler``)."""

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        """Every action type it supports."""
        ...

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        """Perform ``action`` (its params already checked) and return the result's ``data``.

        Raises :class:`~lakesync_platform.core.errors.ActionError` on failure, with
        ``retryable`` set when sending the same action again may succeed. Called on a worker
        thread, possibly several at once.
        """
        ...
