"""The ``lakesync.v1`` protobuf messages, hand-encoded (PROTOCOL.md §7.1).

Byte-compatible with the reference (``@bufbuild/protobuf``): fields in field-number order,
proto3 defaults omitted, ``fixed64`` HLCs little-endian, unknown fields skipped on decode.
Column values, action params and action data travel as UTF-8 ``JSON.stringify`` bytes.

WebSocket frames are one tag byte followed by a message (:func:`frame` / :func:`unframe`).

Every decoding failure — truncation, bad wire types, malformed UTF-8 or JSON, an unspecified
op — raises :class:`CodecError`, never anything else. Unlike ``bufbuild``, malformed UTF-8 in a
string field is rejected (proto3 requires valid UTF-8) instead of being replaced by U+FFFD.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, NoReturn, ParamSpec, TypeVar

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

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_MAX_U64: Final = (1 << 64) - 1
_OP_TO_PROTO: Final = {INSERT: 1, UPDATE: 2, DELETE: 3}
_PROTO_TO_OP: Final = {1: INSERT, 2: UPDATE, 3: DELETE}
_FIXED64_LE: Final = struct.Struct("<Q")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class CodecError(ValidationError):
    """A message could not be encoded or decoded."""


# --- writing ---------------------------------------------------------------------------------

_STR, _BYTES, _MSG, _U64, _UINT, _BOOL = "str", "bytes", "msg", "u64", "uint", "bool"
_FAILURES: Final = (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError)


def _put_varint(out: bytearray, n: int) -> None:
    if n < 0 or n > _MAX_U64:
        raise CodecError(f"integer out of range: {n}")
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write(*fields: tuple[int, str, Any]) -> bytes:
    """Encode ``(field, kind, value)`` triples in order, omitting proto3 defaults.

    A ``_MSG`` (an embedded message, already encoded) is always written, even when empty.
    """
    out = bytearray()
    for field, kind, value in fields:
        if kind == _STR:
            value, kind = value.encode("utf-8"), _BYTES
        if kind == _MSG or (kind == _BYTES and value):
            _put_varint(out, field << 3 | _LEN)
            _put_varint(out, len(value))
            out += value
        elif kind == _U64 and value:
            if value < 0 or value > _MAX_U64:
                raise CodecError(f"fixed64 out of range: {value}")
            _put_varint(out, field << 3 | _FIXED64)
            out += _FIXED64_LE.pack(value)
        elif kind in (_UINT, _BOOL) and value:
            _put_varint(out, field << 3 | _VARINT)
            _put_varint(out, int(value))
    return bytes(out)


def _json_bytes(value: Any) -> bytes:
    return json_stringify(value).encode("utf-8")


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


def _row_delta(d: RowDelta) -> bytes:
    op = _OP_TO_PROTO.get(d.op)
    if op is None:
        raise CodecError(f"unknown op {d.op!r}")
    columns = (
        (4, _MSG, _write((1, _STR, c.column), (2, _BYTES, _json_bytes(c.value)))) for c in d.columns
    )
    return _write(
        (1, _UINT, op),
        (2, _STR, d.table),
        (3, _STR, d.row_id),
        *columns,
        (5, _U64, d.hlc),
        (6, _STR, d.client_id),
        (7, _STR, d.delta_id),
    )


@_codec("encode RowDelta")
def encode_row_delta(d: RowDelta) -> bytes:
    """Serialise a ``RowDelta`` message."""
    return _row_delta(d)


@_codec("encode SyncPush")
def encode_sync_push(client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> bytes:
    """Serialise a ``SyncPush`` message."""
    rows = ((2, _MSG, _row_delta(d)) for d in deltas)
    return _write((1, _STR, client_id), *rows, (3, _U64, last_seen_hlc))


@_codec("encode SyncPull")
def encode_sync_pull(client_id: str, since_hlc: int, max_deltas: int) -> bytes:
    """Serialise a ``SyncPull`` message (``max_deltas`` is a ``uint32``)."""
    if not 0 <= max_deltas <= 0xFFFFFFFF:
        raise CodecError(f"max_deltas out of uint32 range: {max_deltas}")
    return _write((1, _STR, client_id), (2, _U64, since_hlc), (3, _UINT, max_deltas))


@_codec("encode SyncResponse")
def encode_sync_response(deltas: Sequence[RowDelta], server_hlc: int, has_more: bool) -> bytes:
    """Serialise a ``SyncResponse`` message (also the payload of a broadcast frame)."""
    rows = ((1, _MSG, _row_delta(d)) for d in deltas)
    return _write(*rows, (2, _U64, server_hlc), (3, _BOOL, has_more))


def _action(a: Action) -> bytes:
    return _write(
        (1, _STR, a.action_id),
        (2, _STR, a.client_id),
        (3, _U64, a.hlc),
        (4, _STR, a.connector),
        (5, _STR, a.action_type),
        (6, _BYTES, _json_bytes(a.params)),
        (7, _STR, a.idempotency_key or ""),
    )


@_codec("encode Action")
def encode_action(a: Action) -> bytes:
    """Serialise an ``Action`` message (``params`` as JSON; no idempotency key → ``""``)."""
    return _action(a)


@_codec("encode ActionPush")
def encode_action_push(client_id: str, actions: Sequence[Action]) -> bytes:
    """Serialise an ``ActionPush`` message."""
    return _write((1, _STR, client_id), *((2, _MSG, _action(a)) for a in actions))


def _action_entry(r: ActionResult | ActionErrorResult) -> bytes:
    if isinstance(r, ActionResult):
        ok = _write(
            (1, _STR, r.action_id), (2, _BYTES, _json_bytes(r.data)), (3, _U64, r.server_hlc)
        )
        return _write((1, _MSG, ok))
    error = _write(
        (1, _STR, r.action_id), (2, _STR, r.code), (3, _STR, r.message), (4, _BOOL, r.retryable)
    )
    return _write((2, _MSG, error))


@_codec("encode ActionResponse")
def encode_action_response(
    results: Sequence[ActionResult | ActionErrorResult], server_hlc: int
) -> bytes:
    """Serialise an ``ActionResponse`` message (one entry per result, in order)."""
    entries = ((1, _MSG, _action_entry(r)) for r in results)
    return _write(*entries, (2, _U64, server_hlc))


# --- reading ---------------------------------------------------------------------------------


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
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


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field, wire_type, value)``; ``value`` is an int, or bytes for length-delimited."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _get_varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise CodecError("invalid field number 0")
        value: int | bytes
        if wire == _VARINT:
            value, pos = _get_varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if pos + size > end:
                raise CodecError("truncated fixed-width field")
            value = int.from_bytes(data[pos : pos + size], "little")
            pos += size
        elif wire == _LEN:
            length, pos = _get_varint(data, pos)
            if length > end - pos:
                raise CodecError("truncated length-delimited field")
            value = data[pos : pos + length]
            pos += length
        else:
            raise CodecError(f"unsupported wire type {wire}")
        yield field, wire, value


_DEFAULTS: Final[dict[str, Any]] = {_STR: "", _BYTES: b"", _U64: 0, _UINT: 0, _BOOL: False}
_Layout = Mapping[int, tuple[str, str | Callable[[bytes], Any]]]


def _read(data: bytes, layout: _Layout) -> dict[str, Any]:
    """Decode a message by ``layout``: field → ``(name, kind)``.

    A callable kind is a repeated sub-message parsed by it; fields not in the layout are skipped.
    Missing fields get their proto3 default.
    """
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    elif not isinstance(data, bytes):
        raise CodecError(f"expected bytes, got {type(data).__name__}")
    out = {name: [] if callable(kind) else _DEFAULTS[kind] for name, kind in layout.values()}
    for field, wire, raw in _fields(data):
        entry = layout.get(field)
        if entry is None:
            continue
        name, kind = entry
        if callable(kind) or kind in (_STR, _BYTES):
            if wire != _LEN or not isinstance(raw, bytes):
                raise CodecError(f"wrong wire type for field {field}")
            if callable(kind):
                out[name].append(kind(raw))
            elif kind == _STR:
                try:
                    out[name] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise CodecError(f"field {field} is not valid UTF-8") from None
            else:
                out[name] = raw
        else:
            if wire != (_FIXED64 if kind == _U64 else _VARINT) or not isinstance(raw, int):
                raise CodecError(f"wrong wire type for field {field}")
            out[name] = raw != 0 if kind == _BOOL else raw & 0xFFFFFFFF if kind == _UINT else raw
    return out


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"invalid JSON constant {name}")


def _json_value(data: bytes, what: str) -> Any:
    if not data:
        raise CodecError(f"empty {what}")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"{what} is not valid JSON: {exc}") from None


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    value = _json_value(data, what)
    if not isinstance(value, dict):
        raise CodecError(f"{what} is not a JSON object")
    return value


def _read_column(data: bytes) -> ColumnDelta:
    m = _read(data, {1: ("column", _STR), 2: ("value", _BYTES)})
    return ColumnDelta(m["column"], _json_value(m["value"], f'value of column "{m["column"]}"'))


_ROW_DELTA: Final[_Layout] = {
    1: ("op", _UINT),
    2: ("table", _STR),
    3: ("row_id", _STR),
    4: ("columns", _read_column),
    5: ("hlc", _U64),
    6: ("client_id", _STR),
    7: ("delta_id", _STR),
}


def _read_row_delta(data: bytes) -> RowDelta:
    m = _read(data, _ROW_DELTA)
    op = _PROTO_TO_OP.get(m["op"])
    if op is None:
        raise CodecError(f"Unknown or unspecified DeltaOp: {m['op']}")
    return RowDelta(
        op, m["table"], m["row_id"], m["client_id"], tuple(m["columns"]), m["hlc"], m["delta_id"]
    )


@_codec("decode RowDelta")
def decode_row_delta(b: bytes) -> RowDelta:
    """Parse a ``RowDelta``; an unspecified op or an empty column value is a :class:`CodecError`."""
    return _read_row_delta(b)


@_codec("decode SyncPush")
def decode_sync_push(b: bytes) -> tuple[str, list[RowDelta], int]:
    """Parse a ``SyncPush`` into ``(client_id, deltas, last_seen_hlc)``."""
    m = _read(b, {1: ("c", _STR), 2: ("d", _read_row_delta), 3: ("h", _U64)})
    return m["c"], m["d"], m["h"]


@_codec("decode SyncPull")
def decode_sync_pull(b: bytes) -> tuple[str, int, int]:
    """Parse a ``SyncPull`` into ``(client_id, since_hlc, max_deltas)``."""
    m = _read(b, {1: ("c", _STR), 2: ("s", _U64), 3: ("m", _UINT)})
    return m["c"], m["s"], m["m"]


@_codec("decode SyncResponse")
def decode_sync_response(b: bytes) -> tuple[list[RowDelta], int, bool]:
    """Parse a ``SyncResponse`` into ``(deltas, server_hlc, has_more)``."""
    m = _read(b, {1: ("d", _read_row_delta), 2: ("h", _U64), 3: ("more", _BOOL)})
    return m["d"], m["h"], m["more"]


_ACTION: Final[_Layout] = {
    1: ("action_id", _STR),
    2: ("client_id", _STR),
    3: ("hlc", _U64),
    4: ("connector", _STR),
    5: ("action_type", _STR),
    6: ("params", _BYTES),
    7: ("idempotency_key", _STR),
}


def _read_action(data: bytes) -> Action:
    m = _read(data, _ACTION)
    m["params"] = _json_object(m["params"], "action params")
    m["idempotency_key"] = m["idempotency_key"] or None
    return Action(**m)


@_codec("decode Action")
def decode_action(b: bytes) -> Action:
    """Parse an ``Action`` (``params`` must be a JSON object; ``""`` key → ``None``)."""
    return _read_action(b)


@_codec("decode ActionPush")
def decode_action_push(b: bytes) -> tuple[str, list[Action]]:
    """Parse an ``ActionPush`` into ``(client_id, actions)``."""
    m = _read(b, {1: ("c", _STR), 2: ("a", _read_action)})
    return m["c"], m["a"]


def _read_success(data: bytes) -> ActionResult:
    m = _read(data, {1: ("id", _STR), 2: ("data", _BYTES), 3: ("hlc", _U64)})
    return ActionResult(m["id"], _json_object(m["data"], "action result data"), m["hlc"])


def _read_error(data: bytes) -> ActionErrorResult:
    m = _read(data, {1: ("id", _STR), 2: ("code", _STR), 3: ("msg", _STR), 4: ("retry", _BOOL)})
    return ActionErrorResult(m["id"], m["code"], m["msg"], m["retry"])


def _read_entry(data: bytes) -> ActionResult | ActionErrorResult:
    # Both oneof members share one list, so the member last on the wire wins.
    results = _read(data, {1: ("r", _read_success), 2: ("r", _read_error)})["r"]
    if not results:
        raise CodecError("ActionResponseEntry has neither success nor error")
    last: ActionResult | ActionErrorResult = results[-1]
    return last


@_codec("decode ActionResponse")
def decode_action_response(b: bytes) -> tuple[list[ActionResult | ActionErrorResult], int]:
    """Parse an ``ActionResponse`` into ``(results, server_hlc)``."""
    m = _read(b, {1: ("r", _read_entry), 2: ("h", _U64)})
    return m["r"], m["h"]


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
