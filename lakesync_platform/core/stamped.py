"""Rows with per-column stamps as protobuf: the ``lakesync.platform.v1`` messages.

Checkpoint chunks, and the checkpoint frames our Python client asks for (``format=stamped``),
are ``StampedSyncResponse`` messages (``_pb/lakesync_platform_v1.proto``): each row carries
every live column with the stamp that wrote it, the row's newest stamp, its delete stamp and
its position. Field numbers follow ``lakesync.v1`` (``SyncResponse``/``RowDelta``/
``ColumnDelta``), so the same bytes are a ``lakesync.v1.SyncResponse`` of ``INSERT``\\ s to a
reader that knows only the reference's schema (the stamps are unknown fields to it).

The messages are the classes protoc generates; this module builds and parses them and turns
every decoding failure into :class:`~.proto.CodecError`. Column values are UTF-8
``JSON.stringify`` bytes, as in ``lakesync.v1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from google.protobuf.message import DecodeError

from ._pb import lakesync_platform_v1_pb2 as pb
from .ids import json_stringify
from .proto import CodecError

__all__ = [
    "OP_INSERT",
    "StampedColumn",
    "StampedRow",
    "StampedSyncResponse",
    "encode_stamped_response",
    "json_bytes",
    "parse_stamped_response",
]

StampedColumn = pb.StampedColumn
"""A column with its value (JSON bytes) and the stamp that wrote it."""
StampedRow = pb.StampedRow
"""A live row: its columns with their stamps, newest and delete stamps, and position."""
StampedSyncResponse = pb.StampedSyncResponse
"""Rows with stamps, ``server_hlc`` and ``has_more`` (a chunk, or one frame of a stream)."""

OP_INSERT: Final = 1
"""``lakesync.v1.DeltaOp.DELTA_OP_INSERT``: every stamped row is a live row."""


def json_bytes(value: Any) -> bytes:
    """A column value as the wire carries it: UTF-8 ``JSON.stringify``."""
    return json_stringify(value).encode("utf-8")


def encode_stamped_response(rows: Sequence[pb.StampedRow], server_hlc: int) -> bytes:
    """A ``StampedSyncResponse`` of ``rows`` with ``server_hlc`` and ``has_more = false``."""
    return pb.StampedSyncResponse(deltas=rows, server_hlc=server_hlc).SerializeToString()


def parse_stamped_response(data: bytes) -> pb.StampedSyncResponse:
    """Parse a ``StampedSyncResponse`` (malformed bytes or UTF-8, an op other than ``INSERT``:
    :class:`CodecError`)."""
    try:
        message = pb.StampedSyncResponse.FromString(data)
    except DecodeError as exc:
        raise CodecError(f"Failed to decode StampedSyncResponse: {exc}") from exc
    for row in message.deltas:
        if row.op != OP_INSERT:
            raise CodecError(f"Failed to decode StampedSyncResponse: a row with op {row.op}")
    return message
