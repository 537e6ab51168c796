"""The JSON bodies of the routes, as msgspec structs (the wire contract and its OpenAPI schemas).

Response structs are what the routes encode: field order is key order on the wire, names are
camel-cased as the protocol spells them. Request bodies are decoded by the core codecs
(``decode_push``, ``parse_table_schema``, ``parse_sync_rules``: their speed and their error
messages are part of the protocol), so the request structs here only describe them, for the
OpenAPI document, with the rules those codecs enforce (patterns, lengths, enums). So does the
pull page's struct: the page is encoded from the sync engine's delivery structs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

import msgspec
from litestar.openapi.spec import OpenAPIType, Schema
from msgspec import UNSET, Meta, UnsetType

from lakesync_platform.core.actions import MAX_ACTIONS_PER_PUSH
from lakesync_platform.core.delta import IDENTIFIER_RE
from lakesync_platform.core.errors import ERRORS_BY_CODE
from lakesync_platform.core.hlc import MAX_HLC
from lakesync_platform.core.schema import CARDINALITIES, COLUMN_TYPES
from lakesync_platform.core.sync_rules import FILTER_OPS, UNRESTRICTED_WRITES, WRITE_OPS
from lakesync_platform.core.wire import MAX_DELTAS_PER_PUSH, MAX_ID_LENGTH, WireDelta
from lakesync_platform.sync.delivery import PulledDelta, StampedInsert
from lakesync_platform.sync.source_pull import MAX_SOURCE_CURSOR

__all__ = [
    "ACTION_RESULT_SCHEMA",
    "HLC_PATTERN",
    "ActionDiscoveryBody",
    "ActionRequest",
    "ActionResponseBody",
    "ConnectorBody",
    "ConnectorRegistered",
    "ConnectorUnregistered",
    "ConnectorView",
    "ErrorBody",
    "FlushAccepted",
    "FlushRequestView",
    "GatewayMetricsBody",
    "PullPageBody",
    "PullResponse",
    "PushRequest",
    "PushResponse",
    "Saved",
    "SavedSchema",
    "SchemaList",
    "Status",
    "SyncRulesBody",
    "TableSchemaBody",
]


def _decimal_at_most(limit: int) -> str:
    """An anchored pattern for decimal strings of at most ``len(str(limit))`` digits whose
    value is at most ``limit`` (leading zeros allowed, as the codec allows them)."""
    digits = str(limit)
    n = len(digits)
    alternatives = [f"[0-9]{{1,{n - 1}}}"]
    for i, digit in enumerate(digits):
        if digit != "0":
            alternatives.append(f"{digits[:i]}[0-{int(digit) - 1}][0-9]{{{n - 1 - i}}}")
    alternatives.append(digits)
    return f"^(?:{'|'.join(alternatives)})$"


HLC_PATTERN = _decimal_at_most(MAX_HLC)
"""An HLC on the wire: a decimal string of 1 to 20 digits, at most ``2**64 - 1``."""

Hlc = Annotated[str, Meta(pattern=HLC_PATTERN, description="64-bit HLC as a decimal string")]
Cursor = Annotated[
    str,
    Meta(
        pattern=_decimal_at_most(MAX_SOURCE_CURSOR),
        description="A pull cursor as a decimal string: at most 2^64 - 1, or a source pull's"
        " (up to 2^128 + 2^118 - 1)",
    ),
]
Identifier = Annotated[
    str, Meta(pattern=f"^{IDENTIFIER_RE.pattern}$", description="a safe SQL identifier")
]
Identifiers = Annotated[
    list[str],
    Meta(
        extra_json_schema={
            "extra": {
                "items": Schema(type=OpenAPIType.STRING, pattern=f"^{IDENTIFIER_RE.pattern}$")
            }
        }
    ),
]
"""A list of identifiers (the schema generator reads constraints of a field, not of its items)."""
Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LENGTH)]
NonEmpty = Annotated[str, Meta(min_length=1)]


def _one_of(values: Iterable[str]) -> Meta:
    """A string field's allowed values, from the constant that names them."""
    return Meta(extra_json_schema={"extra": {"enum": list(values)}})


class ErrorBody(msgspec.Struct, rename="camel", omit_defaults=True):
    """The protocol's error envelope (PROTOCOL.md §4.2); ``code`` is one of the registry's."""

    error: str
    code: Annotated[str, _one_of(ERRORS_BY_CODE)]
    request_id: str | UnsetType = UNSET


class Status(msgspec.Struct, omit_defaults=True):
    """``/health`` and ``/ready``: ``{"status"}``, with a ``reason`` when not ready."""

    status: str
    reason: str | None = None


class PushRefusal(msgspec.Struct, rename="camel"):
    """A delta of the push the sync rules refused (docs/gateway.md, "Security model")."""

    delta_id: str
    table: str
    row_id: str
    code: str
    error: str


class PushResponse(msgspec.Struct, rename="camel", omit_defaults=True):
    """A push's answer: the cursor to resume from, deltas accepted (refused ones not counted),
    what was appended, and — only when there are some — the deltas the sync rules refused."""

    server_hlc: str
    accepted: int
    deltas: list[WireDelta]
    refused: list[PushRefusal] = msgspec.field(default_factory=list)


class PullResponse(msgspec.Struct, rename="camel"):
    """One pull page."""

    deltas: Sequence[PulledDelta | StampedInsert]
    server_hlc: str
    has_more: bool


class Saved(msgspec.Struct):
    """A config write succeeded."""

    saved: bool


class SavedSchema(msgspec.Struct):
    """A schema was registered or evolved to ``version``."""

    saved: bool
    table: str
    version: int


class SchemaList(msgspec.Struct):
    """Every registered schema (its JSON form plus ``version``)."""

    schemas: list[dict[str, Any]]


class FlushAccepted(msgspec.Struct, rename="camel"):
    """A queued flush request."""

    request_id: str
    status: str


class FlushRequestView(msgspec.Struct, rename="camel"):
    """A flush request as the admin metrics list it."""

    request_id: str
    status: str
    detail: str | None
    requested_ms: int
    updated_ms: int


class GatewayMetricsBody(msgspec.Struct, rename="camel"):
    """Counters of one gateway (the reference's fields plus WAL positions and flush requests)."""

    log_size: int
    index_size: int
    byte_size: int
    live_rows: int
    cursor: str
    flush_watermark: str
    oldest_unflushed_ms: int | None
    flush_requests: list[FlushRequestView]
    process: dict[str, int]


# --------------------------------------------------------------------------- described only


class ColumnValue(msgspec.Struct):
    """A column of a pushed delta: its name and any JSON value (``null`` included)."""

    column: Identifier
    value: Any


class InsertDelta(msgspec.Struct, rename="camel", tag_field="op", tag="INSERT"):
    """A pushed delta that writes columns (``op`` ``INSERT``; ``UPDATE`` has the same shape).

    Column names appear once per delta; a table with a registered schema takes only its columns,
    each of its type (else 400 and 422: rules a JSON Schema cannot state).
    """

    table: Identifier
    row_id: Id
    client_id: Id
    columns: list[ColumnValue]
    hlc: Hlc
    delta_id: Id


class UpdateDelta(InsertDelta, tag="UPDATE"):
    """A pushed ``UPDATE``: the shape of an ``INSERT``."""


class DeleteDelta(msgspec.Struct, rename="camel", tag_field="op", tag="DELETE"):
    """A pushed ``DELETE``: it carries no columns."""

    table: Identifier
    row_id: Id
    client_id: Id
    columns: Annotated[list[ColumnValue], Meta(extra_json_schema={"extra": {"max_items": 0}})]
    hlc: Hlc
    delta_id: Id


class PushRequest(msgspec.Struct, rename="camel"):
    """A push: a batch of deltas from ``clientId``, accepted whole or rejected whole.

    ``lastSeenHlc`` is sent by the reference client and ignored.
    """

    client_id: Id
    deltas: Annotated[
        list[InsertDelta | UpdateDelta | DeleteDelta], Meta(max_length=MAX_DELTAS_PER_PUSH)
    ]
    last_seen_hlc: Any = None


class PulledColumnBody(msgspec.Struct, rename="camel"):
    """A pulled column; a stamped pull adds the column's ``hlc`` and writer ``clientId``."""

    column: str
    value: Any
    hlc: str | UnsetType = UNSET
    client_id: str | UnsetType = UNSET


class PulledDeltaBody(msgspec.Struct, rename="camel"):
    """A pulled delta; a stamped pull's live rows add the row's delete stamp."""

    op: Literal["INSERT", "UPDATE", "DELETE"]
    table: str
    row_id: str
    client_id: str
    columns: list[PulledColumnBody]
    hlc: Hlc
    delta_id: str
    delete_hlc: str | UnsetType = UNSET
    delete_client_id: str | UnsetType = UNSET


class PullPageBody(msgspec.Struct, rename="camel"):
    """One pull page (encoded as :class:`PullResponse`)."""

    deltas: list[PulledDeltaBody]
    server_hlc: Cursor
    has_more: bool


class ColumnReference(msgspec.Struct):
    """A column's foreign reference."""

    table: Identifier
    column: Identifier
    cardinality: Annotated[str, _one_of(CARDINALITIES)] | None = None


class ColumnDeclaration(msgspec.Struct):
    """A column of a table schema."""

    name: Identifier
    type: Annotated[str, _one_of(COLUMN_TYPES)]
    references: ColumnReference | None = None


class TableSchemaBody(msgspec.Struct, rename="camel"):
    """A table schema (PROTOCOL.md §9). Column names are unique; ``primaryKey`` and
    ``externalIdColumn`` name declared columns (``row_id`` too, for the key); a schema evolves
    additively only (else 400: rules a JSON Schema cannot state)."""

    table: Identifier
    columns: list[ColumnDeclaration]
    primary_key: Annotated[list[str], Meta(min_length=1)] | UnsetType = UNSET
    soft_delete: bool = True
    external_id_column: NonEmpty | UnsetType = UNSET
    source_table: Identifier | None = None


class SyncRulesFilter(msgspec.Struct):
    """``column op value``; ``value`` is a literal or ``jwt:<claim>``."""

    column: NonEmpty
    op: Annotated[str, _one_of(FILTER_OPS)]
    value: NonEmpty


class SyncRulesBucket(msgspec.Struct):
    """A named set of rows: rows of ``tables`` (empty: every table) matching every filter.

    ``write``: the operations a client may apply to the bucket's rows — ``true`` (default:
    insert, update, delete), ``false`` (read-only) or a list of them (docs/gateway.md,
    "Security model")."""

    name: NonEmpty
    tables: Identifiers
    filters: list[SyncRulesFilter]
    write: bool | list[Annotated[str, _one_of(WRITE_OPS)]] = True


class SyncRulesBody(msgspec.Struct):
    """The sync rules (PROTOCOL.md §5); bucket names are unique (else 400). ``writes``:
    ``"rules"`` (default: a push may change only rows the pusher sees, before and after) or
    ``"unrestricted"`` (the reference's push: any client writes any row)."""

    version: Annotated[int, Meta(ge=1)]
    buckets: list[SyncRulesBucket]
    writes: Annotated[str, _one_of(("rules", UNRESTRICTED_WRITES))] = "rules"


class ActionBody(msgspec.Struct, rename="camel"):
    """An action (PROTOCOL.md §8): its ``clientId`` is the request's (else 400)."""

    action_id: Id
    client_id: NonEmpty
    hlc: Hlc
    connector: NonEmpty
    action_type: NonEmpty
    params: dict[str, Any]
    idempotency_key: Annotated[str, Meta(max_length=MAX_ID_LENGTH)] | UnsetType = UNSET


class ActionRequest(msgspec.Struct, rename="camel"):
    """Actions for the gateway's connectors to run, in order, from ``clientId``."""

    client_id: Id
    actions: Annotated[list[ActionBody], Meta(max_length=MAX_ACTIONS_PER_PUSH)]


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": list(properties), "properties": properties}


_STRING = {"type": "string"}
ACTION_RESULT_SCHEMA: dict[str, Any] = {
    "oneOf": [
        _object(
            {
                "actionId": _STRING,
                "data": {"type": "object"},
                "serverHlc": {"type": "string", "pattern": HLC_PATTERN},
            }
        ),
        _object(
            {
                "actionId": _STRING,
                "code": _STRING,
                "message": _STRING,
                "retryable": {"type": "boolean"},
            }
        ),
    ]
}
"""An action's result: ``{actionId, data, serverHlc}`` when it ran, ``{actionId, code, message,
retryable}`` when it failed (send it again only if ``retryable``)."""


class ActionResponseBody(msgspec.Struct, rename="camel"):
    """One result per action, in request order (each as :data:`ACTION_RESULT_SCHEMA`)."""

    results: Annotated[
        list[dict[str, Any]], Meta(extra_json_schema={"extra": {"items": ACTION_RESULT_SCHEMA}})
    ]
    server_hlc: Hlc


class ActionDescriptorBody(msgspec.Struct, rename="camel"):
    """An action type a connector supports; ``paramsSchema`` is the JSON Schema of its params."""

    action_type: str
    description: str
    params_schema: dict[str, Any] | UnsetType = UNSET


class ActionDiscoveryBody(msgspec.Struct):
    """The gateway's connectors and the action types each supports."""

    connectors: dict[str, list[ActionDescriptorBody]]


class ConnectorBody(msgspec.Struct):
    """A ``ConnectorConfig`` (PROTOCOL.md §11.1): ``name``, ``type``, the ``<type>`` object
    (secrets only as ``${VAR}`` references), ``ingest`` for SQL types, a cron ``schedule``."""

    name: Annotated[str, Meta(pattern=IDENTIFIER_RE.pattern)]
    type: Literal["postgres", "mysql", "bigquery", "jira", "salesforce"]
    schedule: str | UnsetType = UNSET
    ingest: dict[str, Any] | UnsetType = UNSET
    postgres: dict[str, Any] | UnsetType = UNSET
    mysql: dict[str, Any] | UnsetType = UNSET
    jira: dict[str, Any] | UnsetType = UNSET
    salesforce: dict[str, Any] | UnsetType = UNSET
    bigquery: dict[str, Any] | UnsetType = UNSET


class ConnectorRegistered(msgspec.Struct, rename="camel"):
    """A connector was registered."""

    registered: bool
    name: str


class ConnectorUnregistered(msgspec.Struct):
    """A connector was unregistered."""

    unregistered: bool
    name: str


class ConnectorView(msgspec.Struct, rename="camel"):
    """A registered connector: the reference's fields, then its schedule and its config with
    every secret masked."""

    name: str
    type: str
    has_ingest: bool
    is_polling: bool
    schedule: str
    config: dict[str, Any]
