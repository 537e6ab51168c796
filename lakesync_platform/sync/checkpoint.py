"""Checkpoints as a delivery: rows as chunks are written, and the stream one client is served.

A checkpoint chunk holds each live row as the **stamped** delivery of :mod:`.delivery` would
send it (:func:`~.delivery.stamped_insert`: every live column with its stamp, the row's delete
stamp) plus the row's position, as a ``lakesync.platform.v1.StampedRow``
(:mod:`lakesync_platform.core.stamped`). :class:`ChunkCutter` cuts one table's rows into chunks
of about the configured size. That is everything serving needs:

* the rows' full values, for the caller's sync rules (evaluated at serve time with its claims,
  as a pull does: nothing outside its view leaves the server);
* per-column stamps, for clients that keep them (``format=stamped``, our Python client);
* the full row and its newest stamp, for the unmodified TS client, which gets the pull's pair
  (:func:`~.delivery.ts_row_deltas`: ``DELETE`` stamped 0, then the whole row as ``INSERT``).

:func:`checkpoint_frames` streams a checkpoint to one client as ``uint32`` big-endian
length-prefixed frames (PROTOCOL.md §6). Chunks of tables outside the caller's view are never
read; a chunk the caller sees whole in the stamped encoding is streamed as it is stored, in
pieces, without being decoded; any other chunk is read (at most one at a time: memory stays
bounded by the chunk size, whatever the checkpoint's) and re-encoded in frames of at most
:data:`FRAME_ROWS` rows. For tables sync rules filter, the rows sent are recorded as held by
the client *before* their frame is sent, so a pull from the checkpoint's cursor retracts a
row that has left the view since.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set
from typing import Final

import msgspec

from ..core.checkpoint import STAMPED_FORMAT, CheckpointStore, ChunkInfo, Manifest, length_prefix
from ..core.delta import ColumnDelta, RowDelta
from ..core.errors import AdapterError
from ..core.merge import ColumnState, RowState
from ..core.proto import CodecError, encode_sync_response
from ..core.stamped import (
    OP_INSERT,
    StampedColumn,
    StampedRow,
    encode_stamped_response,
    json_bytes,
    parse_stamped_response,
)
from ..core.sync_rules import ClientView
from ..core.wal import RowRecord, StoredRow
from .config import GatewayConfig
from .delivery import stamped_insert, ts_row_deltas

__all__ = [
    "FRAME_ROWS",
    "ChunkCutter",
    "checkpoint_frames",
    "stamped_row",
    "stored_row",
]

FRAME_ROWS: Final = 2000
"""Rows per re-encoded frame (a stored chunk the caller sees whole is sent as one frame)."""
_PIECE: Final = 1 << 20
"""Bytes read from storage at a time when a chunk is streamed as it is stored."""
_json_decode = msgspec.json.Decoder().decode


def stamped_row(row: StoredRow, names: tuple[str, ...], name_set: Set[str]) -> StampedRow:
    """A live row as a chunk holds it: the stamped delivery of the row, plus its position."""
    s = stamped_insert(row, names, name_set)
    return StampedRow(
        op=OP_INSERT,
        table=s.table,
        row_id=s.row_id,
        columns=[
            StampedColumn(
                column=c.column, value=json_bytes(c.value), hlc=int(c.hlc), client_id=c.client_id
            )
            for c in s.columns
        ],
        hlc=int(s.hlc),
        client_id=s.client_id,
        delta_id=s.delta_id,
        delete_hlc=int(s.delete_hlc),
        delete_client_id=s.delete_client_id,
        position=row.position,
    )


def stored_row(row: StampedRow) -> StoredRow:
    """A chunk's row back as row state (values decoded from their JSON)."""
    try:
        columns = {
            c.column: ColumnState(_json_decode(c.value), c.hlc, c.client_id) for c in row.columns
        }
    except msgspec.DecodeError as exc:
        raise CodecError(f"a column value of row {row.row_id!r} is not JSON: {exc}") from None
    state = RowState(columns, row.delete_hlc, row.delete_client_id)
    return StoredRow(f"{row.table}:{row.row_id}", row.table, row.row_id, state, row.position)


class ChunkCutter:
    """Cuts the rows of one table into chunks of about ``chunk_bytes`` (at least one row each).

    :meth:`add` returns a finished chunk's bytes when the next row would overflow it;
    :meth:`finish` the last one. ``rows`` and ``size`` describe the chunk being filled.
    """

    def __init__(self, cursor: int, chunk_bytes: int) -> None:
        self.cursor = cursor
        self.chunk_bytes = chunk_bytes
        self._rows: list[StampedRow] = []
        self.size = 0

    @property
    def rows(self) -> int:
        """Rows in the chunk being filled."""
        return len(self._rows)

    def add(self, row: StampedRow) -> tuple[bytes, int] | None:
        """Add ``row``; a finished chunk ``(bytes, rows)`` when this row starts a new one."""
        size = row.ByteSize() + 6  # the field key and length of the repeated field
        done = None
        if self._rows and self.size + size > self.chunk_bytes:
            done = self.finish()
        self._rows.append(row)
        self.size += size
        return done

    def finish(self) -> tuple[bytes, int] | None:
        """The chunk being filled ``(bytes, rows)``, if it holds any row; starts a new one."""
        if not self._rows:
            return None
        rows, self._rows, self.size = self._rows, [], 0
        return encode_stamped_response(rows, self.cursor), len(rows)


def checkpoint_frames(
    store: CheckpointStore,
    gw: str,
    manifest: Manifest,
    cfg: GatewayConfig,
    view: ClientView,
    *,
    cursor: int,
    stamped: bool,
    record: Callable[[Mapping[str, RowRecord]], None] | None,
) -> Iterator[bytes]:
    """The stream of ``manifest``'s checkpoint for a client with ``view``: length-prefixed
    frames, each possibly yielded in several pieces.

    ``cursor`` is the ``server_hlc`` of re-encoded frames (the client's pull cursor at the
    checkpoint); ``stamped`` picks the encoding. ``record`` saves what the client holds of rows
    of filtered tables (``None``: sync rules filter nothing the caller may see). A chunk that
    is missing, changed or undecodable ends the stream with :class:`AdapterError` — never a
    silent gap (the client would take the checkpoint for whole).
    """
    if manifest.format != STAMPED_FORMAT:
        raise AdapterError(f"checkpoint chunks of unknown format {manifest.format!r}")
    held = RowRecord(True, manifest.cursor)
    for info in manifest.chunk_info:
        if not view.table_visible(info.table):
            continue
        unfiltered = view.table_unfiltered(info.table)
        if stamped and unfiltered:
            yield from _stored_frame(store, gw, info)
            continue
        data = store.read(gw, info.name)
        if data is None:
            raise AdapterError(f"checkpoint chunk {info.name} of {gw} is missing")
        try:
            rows = parse_stamped_response(data).deltas
        except CodecError as exc:
            raise AdapterError(f"checkpoint chunk {info.name} of {gw}: {exc.message}") from exc
        names, name_set = cfg.delivered_columns(info.table)
        for start in range(0, len(rows), FRAME_ROWS):
            batch = rows[start : start + FRAME_ROWS]
            kept: list[StampedRow] = []
            plain: list[RowDelta] = []
            keys: list[str] = []
            for row in batch:
                stored = None
                if not unfiltered:
                    stored = stored_row(row)
                    if not view.row_visible(info.table, stored.state.values()):
                        continue
                    keys.append(stored.row_key)
                if stamped:
                    kept.append(row)
                else:
                    plain.extend(_ts_pair(stored or stored_row(row), names, name_set))
            if not kept and not plain:
                continue
            if keys and record is not None:
                record(dict.fromkeys(keys, held))
            payload = (
                encode_stamped_response(kept, cursor)
                if stamped
                else encode_sync_response(plain, cursor, False)
            )
            yield length_prefix(len(payload)) + payload


def _ts_pair(row: StoredRow, names: tuple[str, ...], name_set: Set[str]) -> list[RowDelta]:
    """:func:`~.delivery.ts_row_deltas` as protocol deltas."""
    return [
        RowDelta(
            d.op,
            d.table,
            d.row_id,
            d.client_id,
            tuple(ColumnDelta(c.column, c.value) for c in d.columns),
            int(d.hlc),
            d.delta_id,
        )
        for d in ts_row_deltas(row, names, name_set)
    ]


def _stored_frame(store: CheckpointStore, gw: str, info: ChunkInfo) -> Iterator[bytes]:
    """A stored chunk as one frame, read and sent in pieces (never decoded)."""
    yield length_prefix(info.bytes)
    sent = 0
    with store.open(gw, info.name) as stream:
        while piece := stream.read(min(_PIECE, info.bytes - sent + 1)):
            sent += len(piece)
            if sent > info.bytes:
                break
            yield piece
    if sent != info.bytes:
        raise AdapterError(
            f"checkpoint chunk {info.name} of {gw} has {sent} bytes, its manifest says {info.bytes}"
        )
