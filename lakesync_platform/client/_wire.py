"""JSON wire shapes the client sends and receives (PROTOCOL.md §1.1, stamped pull format).

Outgoing deltas use :func:`lakesync_platform.core.wire.delta_to_wire`. Incoming pull
deltas are decoded by msgspec into :class:`RemoteRow`: with the ``format=stamped`` extension
each one is a whole row with per-column stamps and the row's delete stamp (``full``); a plain
delta (no ``deleteHlc``: an unstamped gateway) carries only its own columns, stamped with the
delta's stamp.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from ..core.delta import INSERT, OPS, ColumnDelta, RowDelta
from ..core.errors import ValidationError
from ..core.proto import decode_sync_response
from ..core.stamped import StampedBlock, decode_stamped_response
from ..core.wire import delta_to_wire
from ._errors import TransportError

__all__ = [
    "CHECKPOINT_STAMP",
    "CheckpointBatch",
    "PullBody",
    "RemoteColumn",
    "RemoteRow",
    "checkpoint_batches",
    "decode_pull_body",
    "delta_from_wire",
    "delta_to_wire",
    "parse_remote_row",
    "parse_remote_rows",
    "read_frames",
]

CHECKPOINT_STAMP: Final = 1
"""The column stamp given to the rows of a checkpoint without column stamps (the reference's
format: only each row's newest stamp): older than every real write, so any stamped value
(pulled or local) replaces it."""


def _hlc(value: object, what: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValidationError(f"{what} must be a decimal HLC string, got {value!r}")


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ValidationError(f"delta field {key!r} must be a string, got {value!r}")
    return value


def delta_from_wire(obj: Mapping[str, Any]) -> RowDelta:
    """Parse the protocol's JSON delta object."""
    op = _str(obj, "op")
    if op not in OPS:
        raise ValidationError(f"unknown delta op {op!r}")
    columns = obj.get("columns") or []
    return RowDelta(
        op=op,
        table=_str(obj, "table"),
        row_id=_str(obj, "rowId"),
        client_id=_str(obj, "clientId"),
        columns=tuple(ColumnDelta(_str(c, "column"), c.get("value")) for c in columns),
        hlc=_hlc(obj.get("hlc"), "hlc"),
        delta_id=_str(obj, "deltaId"),
    )


_Op = Literal["INSERT", "UPDATE", "DELETE"]


class RemoteColumn(msgspec.Struct, frozen=True, rename="camel"):
    """One column of a remote row and the stamp that wrote it (``None``: the row's stamp)."""

    column: str
    value: Any = None
    hlc: int | None = None
    client_id: str | None = None


class RemoteRow(msgspec.Struct, frozen=True, rename="camel"):
    """A row as the gateway sent it (decoded straight from the wire by msgspec).

    ``op`` is ``DELETE`` (the row was deleted or left this client's view; ``hlc``/``client_id``
    are the row's newest stamp) or an upsert (``INSERT``/``UPDATE``). A row with a
    ``delete_hlc`` is *full* (stamped format): it carries every live column, so a local column it
    lacks was cleared on the server unless it is newer than ``(delete_hlc, delete_client_id)``.
    """

    op: _Op
    table: str
    row_id: str
    hlc: int
    client_id: str
    columns: tuple[RemoteColumn, ...] = ()
    delete_hlc: int | None = None
    delete_client_id: str = ""
    delta_id: str = ""

    @property
    def full(self) -> bool:
        """Whether the row carries all its live columns (the stamped format)."""
        return self.delete_hlc is not None


class PullBody(msgspec.Struct, rename="camel"):
    """A pull response body."""

    deltas: list[RemoteRow]
    server_hlc: int
    has_more: bool = False


def _fix(exc: msgspec.ValidationError) -> ValidationError:
    return ValidationError(f"malformed delta from the gateway: {exc}")


def parse_remote_rows(objs: Sequence[Mapping[str, Any]]) -> list[RemoteRow]:
    """Parse pulled deltas (wire dicts; HLCs as decimal strings)."""
    try:
        return msgspec.convert(objs, list[RemoteRow], strict=False)
    except msgspec.ValidationError as exc:
        raise _fix(exc) from None


def parse_remote_row(obj: Mapping[str, Any]) -> RemoteRow:
    """Parse one pulled delta."""
    return parse_remote_rows([obj])[0]


def decode_pull_body(data: bytes) -> PullBody:
    """Decode a pull response body straight into :class:`RemoteRow` objects."""
    try:
        return msgspec.json.decode(data, type=PullBody, strict=False)
    except msgspec.ValidationError as exc:
        raise _fix(exc) from None


def read_frames(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Split a byte stream into ``uint32`` big-endian length-prefixed frames (a checkpoint)."""
    buffer = bytearray()
    for chunk in chunks:
        buffer.extend(chunk)
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) < 4 + size:
                break
            yield bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
    if buffer:
        raise TransportError(f"checkpoint stream ended inside a frame ({len(buffer)} bytes left)")


CheckpointBatch = StampedBlock | list[RemoteRow]
"""One frame of a checkpoint: a block of stamped rows, or (a frame in the reference's format)
rows without column stamps."""


def checkpoint_batches(frame: bytes) -> list[CheckpointBatch]:
    """The rows of one checkpoint frame (a malformed frame is a
    :class:`~lakesync_platform.core.proto.CodecError`).

    A ``StampedSyncResponse`` gives its blocks: full rows with their column stamps. A frame
    without blocks is read as the reference's ``SyncResponse`` of ``INSERT``\\ s, whose rows
    carry only their newest stamp: each column gets :data:`CHECKPOINT_STAMP` and the row is
    applied as partial.
    """
    blocks, _ = decode_stamped_response(frame)
    if blocks:
        return list(blocks)
    deltas, _, _ = decode_sync_response(frame)
    rows = [
        RemoteRow(
            INSERT,
            d.table,
            d.row_id,
            d.hlc,
            d.client_id,
            tuple(RemoteColumn(c.column, c.value, CHECKPOINT_STAMP, "") for c in d.columns),
        )
        for d in deltas
    ]
    return [rows] if rows else []
