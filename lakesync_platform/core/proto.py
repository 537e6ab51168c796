"""The ``lakesync.v1`` protobuf messages (PROTOCOL.md §7.1), over the official ``protobuf`` runtime.

The messages are the classes protoc generates from ``_pb/lakesync_v1.proto`` (regenerate them
with ``scripts/gen_proto.sh``; a test checks the checked-in files are current). The runtime writes
fields in field-number order and omits proto3 defaults, so the bytes are the reference's
(``@bufbuild/protobuf``); ``fixed64`` HLCs are little-endian, unknown fields are skipped on
decode. Column values, action params and action data travel as UTF-8 ``JSON.stringify`` bytes.

WebSocket frames are one tag byte followed by a message (:func:`frame` / :func:`unframe`).

Every decoding failure — truncation, bad wire types, malformed UTF-8 or JSON, an unspecified
op — raises :class:`CodecError`, never anything else (the runtime's ``DecodeError`` is translated
here). Malformed UTF-8 in a string field is rejected (proto3 requires valid UTF-8), where
``bufbuild`` replaces it by U+FFFD. The runtime files a known field that arrives with another
wire type (an ``hlc`` sent as a varint) among the unknown fields; such a message is rejected
here too: after parsing, unknown fields are dropped and the message re-measured, and when its
size is not the input's, :func:`_wire_problem` walks the input and names the offending field.
The same walk names the reason when the runtime refuses a message. As in every protobuf
runtime, a singular message field that occurs twice is merged, and field numbers above the
protobuf maximum (2**29 - 1) are refused.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn, ParamSpec, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from ._pb import lakesync_v1_pb2 as pb
from .actions import Action, ActionErrorResult, ActionResult
from .delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from .errors import ValidationError
from .ids import json_stringify

__all__ = [
    "TAG_ACTION_PUSH",
    "TAG_ACTION_RESPONSE",
    "TAG_BROADCAST",
    "TAG_SYNC_PULL",
    "TAG_SYNC_PUSH",
    "CodecError",
    "decode_action",
    "decode_action_push",
    "decode_action_response",
    "decode_row_delta",
    "decode_sync_pull",
    "decode_sync_push",
    "decode_sync_response",
    "encode_action",
    "encode_action_push",
    "encode_action_response",
    "encode_row_delta",
    "encode_sync_pull",
    "encode_sync_push",
    "encode_sync_response",
    "frame",
    "unframe",
]

TAG_SYNC_PUSH: Final = 0x01
"""Client → server: ``SyncPush``."""
TAG_SYNC_PULL: Final = 0x02
"""Client → server: ``SyncPull``."""
TAG_BROADCAST: Final = 0x03
"""Server → client: ``SyncResponse`` pushed after another client's write."""
TAG_ACTION_PUSH: Final = 0x04
"""Client → server: ``ActionPush``."""
TAG_ACTION_RESPONSE: Final = 0x05
"""Server → client: ``ActionResponse``."""
_TAGS: Final = frozenset(
    (TAG_SYNC_PUSH, TAG_SYNC_PULL, TAG_BROADCAST, TAG_ACTION_PUSH, TAG_ACTION_RESPONSE)
)

_MAX_U64: Final = (1 << 64) - 1
_OP_TO_PROTO: Final = {
    INSERT: pb.DELTA_OP_INSERT,
    UPDATE: pb.DELTA_OP_UPDATE,
    DELETE: pb.DELTA_OP_DELETE,
}
_PROTO_TO_OP: Final[dict[int, str]] = {v: k for k, v in _OP_TO_PROTO.items()}
_P = ParamSpec("_P")
_R = TypeVar("_R")
_M = TypeVar("_M", bound=Message)


class CodecError(ValidationError):
    """A message could not be encoded or decoded."""


_FAILURES: Final = (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError)


def _codec(what: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Make every failure of the decorated function a :class:`CodecError` saying ``what`` failed."""

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return fn(*args, **kwargs)
            except CodecError as exc:
                raise CodecError(f"Failed to {what}: {exc.message}") from exc
            except _FAILURES as exc:
                raise CodecError(f"Failed to {what}: {exc}") from exc

        return wrapper

    return decorate


# --- writing ---------------------------------------------------------------------------------


def _fixed64(n: int) -> int:
    if not 0 <= n <= _MAX_U64:
        raise CodecError(f"fixed64 out of range: {n}")
    return n


def _json_bytes(value: Any) -> bytes:
    return json_stringify(value).encode("utf-8")


def _row_delta(d: RowDelta) -> pb.RowDelta:
    op = _OP_TO_PROTO.get(d.op)
    if op is None:
        raise CodecError(f"unknown op {d.op!r}")
    return pb.RowDelta(
        op=op,
        table=d.table,
        row_id=d.row_id,
        columns=[pb.ColumnDelta(column=c.column, value=_json_bytes(c.value)) for c in d.columns],
        hlc=_fixed64(d.hlc),
        client_id=d.client_id,
        delta_id=d.delta_id,
    )


@_codec("encode RowDelta")
def encode_row_delta(d: RowDelta) -> bytes:
    """Serialise a ``RowDelta`` message."""
    return _row_delta(d).SerializeToString()


@_codec("encode SyncPush")
def encode_sync_push(client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> bytes:
    """Serialise a ``SyncPush`` message."""
    return pb.SyncPush(
        client_id=client_id,
        deltas=[_row_delta(d) for d in deltas],
        last_seen_hlc=_fixed64(last_seen_hlc),
    ).SerializeToString()


@_codec("encode SyncPull")
def encode_sync_pull(client_id: str, since_hlc: int, max_deltas: int) -> bytes:
    """Serialise a ``SyncPull`` message (``max_deltas`` is a ``uint32``)."""
    if not 0 <= max_deltas <= 0xFFFFFFFF:
        raise CodecError(f"max_deltas out of uint32 range: {max_deltas}")
    return pb.SyncPull(
        client_id=client_id, since_hlc=_fixed64(since_hlc), max_deltas=max_deltas
    ).SerializeToString()


@_codec("encode SyncResponse")
def encode_sync_response(deltas: Sequence[RowDelta], server_hlc: int, has_more: bool) -> bytes:
    """Serialise a ``SyncResponse`` message (also the payload of a broadcast frame)."""
    return pb.SyncResponse(
        deltas=[_row_delta(d) for d in deltas],
        server_hlc=_fixed64(server_hlc),
        has_more=has_more,
    ).SerializeToString()


def _action(a: Action) -> pb.Action:
    return pb.Action(
        action_id=a.action_id,
        client_id=a.client_id,
        hlc=_fixed64(a.hlc),
        connector=a.connector,
        action_type=a.action_type,
        params=_json_bytes(a.params),
        idempotency_key=a.idempotency_key or "",
    )


@_codec("encode Action")
def encode_action(a: Action) -> bytes:
    """Serialise an ``Action`` message (``params`` as JSON; no idempotency key → ``""``)."""
    return _action(a).SerializeToString()


@_codec("encode ActionPush")
def encode_action_push(client_id: str, actions: Sequence[Action]) -> bytes:
    """Serialise an ``ActionPush`` message."""
    return pb.ActionPush(
        client_id=client_id, actions=[_action(a) for a in actions]
    ).SerializeToString()


def _action_entry(r: ActionResult | ActionErrorResult) -> pb.ActionResponseEntry:
    if isinstance(r, ActionResult):
        ok = pb.ActionResultMsg(
            action_id=r.action_id, data=_json_bytes(r.data), server_hlc=_fixed64(r.server_hlc)
        )
        return pb.ActionResponseEntry(success=ok)
    error = pb.ActionErrorMsg(
        action_id=r.action_id, code=r.code, message=r.message, retryable=r.retryable
    )
    return pb.ActionResponseEntry(error=error)


@_codec("encode ActionResponse")
def encode_action_response(
    results: Sequence[ActionResult | ActionErrorResult], server_hlc: int
) -> bytes:
    """Serialise an ``ActionResponse`` message (one entry per result, in order)."""
    return pb.ActionResponse(
        results=[_action_entry(r) for r in results], server_hlc=_fixed64(server_hlc)
    ).SerializeToString()


# --- reading ---------------------------------------------------------------------------------


def _parse(cls: type[_M], data: bytes) -> _M:
    """Parse ``data`` as a ``cls`` whose known fields all arrived with their own wire types."""
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    elif not isinstance(data, bytes):
        raise CodecError(f"expected bytes, got {type(data).__name__}")
    name = cls.DESCRIPTOR.full_name
    try:
        msg = cls.FromString(data)
    except DecodeError as exc:
        raise CodecError(_wire_problem(data, name) or str(exc)) from exc
    # Dropping unknown fields changes the size only if there were some (or the input was not
    # canonical: a repeated scalar, an explicit default, a long varint); then look closer.
    # types-protobuf omits Message.DiscardUnknownFields, a documented runtime method.
    msg.DiscardUnknownFields()  # type: ignore[attr-defined]
    if msg.ByteSize() != len(data) and (problem := _wire_problem(data, name)):
        raise CodecError(problem)
    return msg


_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_WIRE_OF: Final = {
    FieldDescriptor.TYPE_STRING: _LEN,
    FieldDescriptor.TYPE_BYTES: _LEN,
    FieldDescriptor.TYPE_MESSAGE: _LEN,
    FieldDescriptor.TYPE_FIXED64: _FIXED64,
    FieldDescriptor.TYPE_UINT32: _VARINT,
    FieldDescriptor.TYPE_BOOL: _VARINT,
    FieldDescriptor.TYPE_ENUM: _VARINT,
}
_FIELDS: Final[dict[str, dict[int, FieldDescriptor]]] = {
    m.full_name: dict(m.fields_by_number) for m in pb.DESCRIPTOR.message_types_by_name.values()
}
"""Each message's fields by number, by the message's full name."""


def _wire_problem(data: bytes, message: str) -> str:
    """What is wrong with ``data`` as the wire form of ``message`` (a full name), or ``""``.

    Looks for truncation, over-long varints, field number 0, groups and other wire types outside
    proto3, known fields with a foreign wire type and string fields that are not UTF-8, in
    embedded messages too.
    """
    try:
        _walk(data, message)
    except CodecError as exc:
        return exc.message
    return ""


def _walk(data: bytes, message: str) -> None:
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise CodecError("invalid field number 0")
        value = b""
        if wire == _VARINT:
            _, pos = _varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            pos += 8 if wire == _FIXED64 else 4
            if pos > end:
                raise CodecError("truncated fixed-width field")
        elif wire == _LEN:
            length, pos = _varint(data, pos)
            if length > end - pos:
                raise CodecError("truncated length-delimited field")
            value, pos = data[pos : pos + length], pos + length
        else:
            raise CodecError(f"unsupported wire type {wire}")
        field = _FIELDS[message].get(number)
        if field is None:
            continue
        if wire != _WIRE_OF[field.type]:
            raise CodecError(f"wrong wire type for field {number}")
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            _walk(value, field.message_type.full_name)
        elif field.type == FieldDescriptor.TYPE_STRING:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise CodecError(f"field {number} is not valid UTF-8") from None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise CodecError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MAX_U64, pos
        shift += 7
        if shift >= 70:
            raise CodecError("varint longer than 10 bytes")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"invalid JSON constant {name}")


_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant)
"""One decoder for every value (``json.loads`` with an option builds a new one per call)."""


def _json_value(data: bytes, what: str) -> Any:
    if not data:
        raise CodecError(f"empty {what}")
    try:
        return _JSON.decode(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"{what} is not valid JSON: {exc}") from None


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    value = _json_value(data, what)
    if not isinstance(value, dict):
        raise CodecError(f"{what} is not a JSON object")
    return value


def _row_delta_of(m: pb.RowDelta) -> RowDelta:
    op = _PROTO_TO_OP.get(m.op)
    if op is None:
        raise CodecError(f"Unknown or unspecified DeltaOp: {m.op}")
    columns = tuple(
        ColumnDelta(c.column, _json_value(c.value, f'value of column "{c.column}"'))
        for c in m.columns
    )
    return RowDelta(op, m.table, m.row_id, m.client_id, columns, m.hlc, m.delta_id)


@_codec("decode RowDelta")
def decode_row_delta(b: bytes) -> RowDelta:
    """Parse a ``RowDelta``; an unspecified op or an empty column value is a :class:`CodecError`."""
    return _row_delta_of(_parse(pb.RowDelta, b))


@_codec("decode SyncPush")
def decode_sync_push(b: bytes) -> tuple[str, list[RowDelta], int]:
    """Parse a ``SyncPush`` into ``(client_id, deltas, last_seen_hlc)``."""
    m = _parse(pb.SyncPush, b)
    return m.client_id, [_row_delta_of(d) for d in m.deltas], m.last_seen_hlc


@_codec("decode SyncPull")
def decode_sync_pull(b: bytes) -> tuple[str, int, int]:
    """Parse a ``SyncPull`` into ``(client_id, since_hlc, max_deltas)``."""
    m = _parse(pb.SyncPull, b)
    return m.client_id, m.since_hlc, m.max_deltas


@_codec("decode SyncResponse")
def decode_sync_response(b: bytes) -> tuple[list[RowDelta], int, bool]:
    """Parse a ``SyncResponse`` into ``(deltas, server_hlc, has_more)``."""
    m = _parse(pb.SyncResponse, b)
    return [_row_delta_of(d) for d in m.deltas], m.server_hlc, m.has_more


def _action_of(m: pb.Action) -> Action:
    return Action(
        m.action_id,
        m.client_id,
        m.hlc,
        m.connector,
        m.action_type,
        _json_object(m.params, "action params"),
        m.idempotency_key or None,
    )


@_codec("decode Action")
def decode_action(b: bytes) -> Action:
    """Parse an ``Action`` (``params`` must be a JSON object; ``""`` key → ``None``)."""
    return _action_of(_parse(pb.Action, b))


@_codec("decode ActionPush")
def decode_action_push(b: bytes) -> tuple[str, list[Action]]:
    """Parse an ``ActionPush`` into ``(client_id, actions)``."""
    m = _parse(pb.ActionPush, b)
    return m.client_id, [_action_of(a) for a in m.actions]


def _action_entry_of(m: pb.ActionResponseEntry) -> ActionResult | ActionErrorResult:
    kind = m.WhichOneof("result")
    if kind == "success":
        s = m.success
        return ActionResult(s.action_id, _json_object(s.data, "action result data"), s.server_hlc)
    if kind == "error":
        e = m.error
        return ActionErrorResult(e.action_id, e.code, e.message, e.retryable)
    raise CodecError("ActionResponseEntry has neither success nor error")


@_codec("decode ActionResponse")
def decode_action_response(b: bytes) -> tuple[list[ActionResult | ActionErrorResult], int]:
    """Parse an ``ActionResponse`` into ``(results, server_hlc)``."""
    m = _parse(pb.ActionResponse, b)
    return [_action_entry_of(e) for e in m.results], m.server_hlc


# --- framing ---------------------------------------------------------------------------------


def frame(tag: int, payload: bytes) -> bytes:
    """A WebSocket binary frame: the tag byte, then the message."""
    if tag not in _TAGS:
        raise CodecError(f"Unknown message tag: 0x{tag & 0xFF:02x}")
    return bytes((tag,)) + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """Split a frame into ``(tag, payload)`` (the reference server's checks and messages)."""
    if len(data) < 2:
        raise CodecError("Message too short")
    tag = data[0]
    if tag not in _TAGS:
        raise CodecError(f"Unknown message tag: 0x{tag:02x}")
    return tag, bytes(data[1:])
