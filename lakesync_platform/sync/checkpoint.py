"""Checkpoints as a delivery: rows as chunks are written, and the stream one client is served.

A checkpoint chunk holds the live rows of one table as a stamped block
(:class:`~lakesync_platform.core.stamped.StampedBlock`, stored column by column): every live
column with the stamp that wrote it, each row's newest stamp and delete stamp — what the stamped
delivery of :mod:`.delivery` (:func:`~.delivery.stamped_insert`) sends for a row — plus each
row's position. :class:`ChunkCutter` cuts one table's rows into chunks of about the configured
size. That is everything serving needs:

* the rows' full values, for the caller's sync rules (evaluated at serve time with its claims,
  as a pull does: nothing outside its view leaves the server);
* per-column stamps, for clients that keep them (``format=stamped``, our Python client);
* the full row and its newest stamp, for the unmodified TS client, which gets the pull's pair
  (:func:`~.delivery.ts_row_deltas`: ``DELETE`` stamped 0, then the whole row as ``INSERT``) in
  ``lakesync.v1.SyncResponse`` frames.

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

from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from typing import Final

import msgspec

from ..core.checkpoint import STAMPED_FORMAT, CheckpointStore, ChunkInfo, Manifest, length_prefix
from ..core.delta import ColumnDelta, RowDelta
from ..core.errors import AdapterError
from ..core.merge import ColumnState, RowState
from ..core.proto import CodecError, encode_sync_response
from ..core.stamped import (
    StampedBlock,
    StampedColumns,
    decode_stamped_response,
    encode_stamped_response,
)
from ..core.sync_rules import ClientView
from ..core.wal import RowRecord, StoredRow
from .config import GatewayConfig
from .delivery import ts_row_deltas

__all__ = [
    "FRAME_ROWS",
    "ChunkCutter",
    "checkpoint_frames",
    "stamped_block",
    "stored_row",
]

FRAME_ROWS: Final = 2000
"""Rows per re-encoded frame (a stored chunk the caller sees whole is sent as one frame)."""
_PIECE: Final = 1 << 20
"""Bytes read from storage at a time when a chunk is streamed as it is stored."""
_encode_json = msgspec.json.Encoder().encode


def stamped_block(table: str, rows: Sequence[StoredRow], names: Sequence[str]) -> StampedBlock:
    """Live ``rows`` of ``table`` as a block: each row's columns with their stamps (``names``
    first, then any other column a row holds; a column no row holds is left out), newest and
    delete stamps, position."""
    present: dict[str, None] = {}
    for row in rows:
        present.update(dict.fromkeys(row.state.columns))
    order = [n for n in names if n in present]
    order += [n for n in present if n not in set(names)]
    columns = [StampedColumns(name, [], [], []) for name in order]
    newest = [row.state.newest_stamp() for row in rows]
    for row in rows:
        cells = row.state.columns
        for col in columns:
            cell = cells.get(col.name)
            if cell is None:
                col.values.append(None)
                col.hlcs.append(0)
                col.client_ids.append("")
            else:
                col.values.append(cell.value)
                col.hlcs.append(cell.hlc)
                col.client_ids.append(cell.client_id)
    return StampedBlock(
        table,
        [r.row_id for r in rows],
        [h for h, _ in newest],
        [c for _, c in newest],
        [r.state.delete_hlc for r in rows],
        [r.state.delete_client for r in rows],
        [r.position for r in rows],
        columns,
    )


def stored_row(block: StampedBlock, i: int) -> StoredRow:
    """Row ``i`` of a block back as row state."""
    columns = {
        c.name: ColumnState(c.values[i], c.hlcs[i], c.client_ids[i])
        for c in block.columns
        if c.hlcs[i]
    }
    state = RowState(columns, block.delete_hlcs[i], block.delete_client_ids[i])
    row_id = block.row_ids[i]
    return StoredRow(f"{block.table}:{row_id}", block.table, row_id, state, block.positions[i])


class ChunkCutter:
    """Cuts the live rows of one table into chunks of about ``chunk_bytes`` (a row at least).

    :meth:`add` returns a finished chunk ``(bytes, rows)`` when the next row would overflow it;
    :meth:`finish` the last one.
    """

    def __init__(self, table: str, names: Sequence[str], cursor: int, chunk_bytes: int) -> None:
        self.table = table
        self.names = list(names)
        self.cursor = cursor
        self.chunk_bytes = chunk_bytes
        self._rows: list[StoredRow] = []
        self._size = 0

    def add(self, row: StoredRow) -> tuple[bytes, int] | None:
        """Add ``row``; a finished chunk when this row starts a new one."""
        # About the row's encoded size: its values as JSON, 10 bytes per stamp, its ids.
        cells = row.state.columns
        size = len(_encode_json(row.state.values())) + len(row.row_id) + 40
        size += sum(10 + len(c.client_id) for c in cells.values())
        done = None
        if self._rows and self._size + size > self.chunk_bytes:
            done = self.finish()
        self._rows.append(row)
        self._size += size
        return done

    def finish(self) -> tuple[bytes, int] | None:
        """The chunk being filled, if it holds any row; starts a new one."""
        if not self._rows:
            return None
        rows, self._rows, self._size = self._rows, [], 0
        block = stamped_block(self.table, rows, self.names)
        return encode_stamped_response([block], self.cursor), len(rows)


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
    of filtered tables (``None``: no client to record for; it is called only for rows of
    tables the rules filter). A chunk that
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
            blocks, _ = decode_stamped_response(data)
        except CodecError as exc:
            raise AdapterError(f"checkpoint chunk {info.name} of {gw}: {exc.message}") from exc
        names, name_set = cfg.delivered_columns(info.table)
        for block in blocks:
            for start in range(0, len(block), FRAME_ROWS):
                kept: list[int] = []
                plain: list[RowDelta] = []
                keys: list[str] = []
                for i in range(start, min(start + FRAME_ROWS, len(block))):
                    stored = None
                    if not unfiltered:
                        stored = stored_row(block, i)
                        if not view.row_visible(info.table, stored.state.values()):
                            continue
                        keys.append(stored.row_key)
                    if stamped:
                        kept.append(i)
                    else:
                        plain.extend(_ts_pair(stored or stored_row(block, i), names, name_set))
                if not kept and not plain:
                    continue
                if keys and record is not None:
                    record(dict.fromkeys(keys, held))
                payload = (
                    encode_stamped_response([block.subset(kept)], cursor)
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
