"""The JSON wire codec of protocol v1 (PROTOCOL.md §1.2, §4.2, §4.3).

HLCs and cursors travel as decimal strings. A push body is decoded and validated in one pass;
errors carry the protocol's codes: malformed input → :class:`ValidationError` (400), a table or
column name that is not a safe identifier → :class:`SchemaError` (422).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from .delta import DELETE, OPS, ColumnDelta, RowDelta, check_identifier
from .errors import ValidationError
from .hlc import MAX_HLC

__all__ = [
    "MAX_DELTAS_PER_PUSH",
    "MAX_ID_LENGTH",
    "PushBody",
    "WireDelta",
    "decode_json",
    "decode_push",
    "delta_to_wire",
    "deltas_to_wire",
    "encode_json",
    "parse_hlc",
    "parse_pull_limit",
    "parse_since",
]

MAX_DELTAS_PER_PUSH = 10_000
MAX_ID_LENGTH = 1024
MAX_VALUE_DEPTH = 64
"""Column values may nest objects/arrays at most this deep."""
DEFAULT_PULL_LIMIT = 100
MAX_PULL_LIMIT = 10_000

_HLC_RE = re.compile(r"[0-9]{1,20}")
_DEC_RE = re.compile(r"[+-]?[0-9]+")
_PREFIXED_RE = re.compile(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")
_LIMIT_RE = re.compile(r"\s*([+-]?[0-9]+)")
_NESTED = (dict, list)


class _Delta(msgspec.Struct):
    op: str
    table: str
    rowId: str
    clientId: str
    columns: tuple[ColumnDelta, ...]  # decoded straight into the core type
    hlc: str
    deltaId: str


class _Push(msgspec.Struct):
    clientId: str
    deltas: list[_Delta]
    lastSeenHlc: Any = None


_push_decoder = msgspec.json.Decoder(_Push)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class PushBody:
    """A decoded, validated push."""

    client_id: str
    deltas: list[RowDelta]


def parse_hlc(value: object, field: str = "hlc") -> int:
    """An HLC from its wire form: a decimal string in ``[0, 2**64)``."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a decimal string, got {type(value).__name__}")
    if 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        parsed = int(value)
        if parsed <= MAX_HLC:
            return parsed
    if _HLC_RE.fullmatch(value) is None:
        raise ValidationError(f"{field} must be a decimal integer string, got {value[:40]!r}")
    parsed = int(value)
    if parsed > MAX_HLC:
        raise ValidationError(f"{field} is out of range (max {MAX_HLC})")
    return parsed


def _check_id(value: str, what: str) -> None:
    if not value:
        raise ValidationError(f"{what} must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(f"{what} is longer than {MAX_ID_LENGTH} characters")


def decode_push(body: bytes) -> PushBody:
    """Decode and validate a push body (whole batch; nothing is partially accepted)."""
    try:
        raw = _push_decoder.decode(body)
    except (UnicodeDecodeError, RecursionError):
        raise ValidationError("Invalid JSON body") from None
    except msgspec.DecodeError as exc:
        if isinstance(exc, msgspec.ValidationError):
            text = str(exc)
            if "missing required field `clientId`" in text or (
                "missing required field `deltas`" in text
            ):
                raise ValidationError("Missing required fields: clientId, deltas") from None
            if text.endswith(("at `$.deltas`", "at `$.clientId`")) or text.startswith(
                "Expected `object`"
            ):
                raise ValidationError("Missing required fields: clientId, deltas") from None
            raise ValidationError(f"Invalid push body: {text}") from None
        raise ValidationError("Invalid JSON body") from None
    if not raw.clientId:
        raise ValidationError("Missing required fields: clientId, deltas")
    if len(raw.deltas) > MAX_DELTAS_PER_PUSH:
        raise ValidationError("Too many deltas in a single push (max 10,000)")
    _check_id(raw.clientId, "clientId")
    deltas: list[RowDelta] = []
    tables: set[str] = set()
    columns: set[str] = set()
    for i, d in enumerate(raw.deltas):
        if d.op not in OPS:
            raise ValidationError(f"deltas[{i}].op must be one of INSERT, UPDATE, DELETE")
        if d.table not in tables:
            tables.add(check_identifier(d.table, "table"))
        if not (0 < len(d.rowId) <= MAX_ID_LENGTH):
            _check_id(d.rowId, f"deltas[{i}].rowId")
        if not (0 < len(d.clientId) <= MAX_ID_LENGTH):
            _check_id(d.clientId, f"deltas[{i}].clientId")
        if not (0 < len(d.deltaId) <= MAX_ID_LENGTH):
            _check_id(d.deltaId, f"deltas[{i}].deltaId")
        text = d.hlc
        if 0 < len(text) <= 19 and text.isascii() and text.isdigit():
            hlc = int(text)  # below 10**19 <= MAX_HLC
        else:
            hlc = parse_hlc(text, f"deltas[{i}].hlc")
        cols = d.columns
        if cols:
            if d.op == DELETE:
                raise ValidationError(f"deltas[{i}]: a DELETE carries no columns")
            for col in cols:
                if col.column not in columns:
                    columns.add(check_identifier(col.column, "column"))
                if type(col.value) in _NESTED and _too_deep(col.value):
                    raise ValidationError(
                        f'deltas[{i}]: column "{col.column}" nests deeper than'
                        f" {MAX_VALUE_DEPTH} levels"
                    )
            if len(cols) > 1 and len({c.column for c in cols}) != len(cols):
                names: set[str] = set()
                for col in cols:
                    if col.column in names:
                        raise ValidationError(f'deltas[{i}]: column "{col.column}" appears twice')
                    names.add(col.column)
        deltas.append(RowDelta(d.op, d.table, d.rowId, d.clientId, cols, hlc, d.deltaId))
    return PushBody(raw.clientId, deltas)


def _too_deep(value: Any) -> bool:
    """Whether a JSON value nests deeper than :data:`MAX_VALUE_DEPTH` (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def parse_since(value: str | None, maximum: int = MAX_HLC) -> int:
    """The pull cursor: required, BigInt-parsable (decimal, ``0x…``; blank = 0), clamped at 0,
    at most ``maximum`` (a source pull's cursors are wider than an HLC)."""
    if value is None:
        raise ValidationError("Missing required query params: since, clientId")
    text = value.strip()
    if text == "":
        return 0
    try:
        if _PREFIXED_RE.fullmatch(text):
            parsed = int(text, 0)
        elif _DEC_RE.fullmatch(text):
            parsed = int(text)
        else:
            raise ValueError(text)
    except ValueError:
        raise ValidationError("Invalid 'since' parameter — must be a decimal integer") from None
    if parsed > maximum:
        raise ValidationError("Invalid 'since' parameter — must be a decimal integer")
    return max(parsed, 0)


def parse_pull_limit(value: str | None) -> int:
    """``limit`` as ``parseInt`` reads it (``"10abc"`` → 10), default 100, clamped to 10 000."""
    if not value:
        return DEFAULT_PULL_LIMIT
    m = _LIMIT_RE.match(value)
    if m is None or int(m.group(1)) < 1:
        raise ValidationError("Invalid 'limit' parameter — must be a positive integer")
    return min(int(m.group(1)), MAX_PULL_LIMIT)


class DeltaLike(Protocol):
    """Anything shaped like a delta (a :class:`RowDelta`, a WAL entry)."""

    @property
    def op(self) -> str: ...
    @property
    def table(self) -> str: ...
    @property
    def row_id(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def columns(self) -> tuple[ColumnDelta, ...]: ...
    @property
    def hlc(self) -> int: ...
    @property
    def delta_id(self) -> str: ...


def delta_to_wire(d: DeltaLike) -> dict[str, Any]:
    """A delta in its JSON wire shape (key order as the reference emits it)."""
    return {
        "op": d.op,
        "table": d.table,
        "rowId": d.row_id,
        "clientId": d.client_id,
        "columns": [{"column": c.column, "value": c.value} for c in d.columns],
        "hlc": str(d.hlc),
        "deltaId": d.delta_id,
    }


class WireDelta(
    msgspec.Struct, rename={"row_id": "rowId", "client_id": "clientId", "delta_id": "deltaId"}
):
    """A delta ready for :func:`encode_json`, in the reference's key order (built in C)."""

    op: str
    table: str
    row_id: str
    client_id: str
    columns: tuple[ColumnDelta, ...]
    hlc: str
    delta_id: str


def deltas_to_wire(deltas: Iterable[DeltaLike]) -> list[WireDelta]:
    """Many deltas as encodable wire structs (the fast path for responses)."""
    return [
        WireDelta(d.op, d.table, d.row_id, d.client_id, d.columns, str(d.hlc), d.delta_id)
        for d in deltas
    ]


def encode_json(value: Any) -> bytes:
    """Compact JSON bytes (msgspec)."""
    return _encoder.encode(value)


def decode_json(body: bytes) -> Any:
    """Parse a JSON body or raise the protocol's ``Invalid JSON body``."""
    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise ValidationError("Invalid JSON body") from None
