"""The delivery encodings: how a row reaches a client, by pull, checkpoint or WebSocket.

Every delivery is cut from **row state**: a row is sent whole, as it is now, never as the
history of its changes (that is what makes any cursor safe; see :mod:`.pull`).

* Clients without per-column stamps (the TypeScript client, PROTOCOL.md §12) get a live row in
  their view as two deltas (:func:`ts_row_deltas`) — ``DELETE`` stamped ``0`` followed by a
  full-row ``INSERT`` stamped with the row's newest stamp. The ``0``-stamped delete loses to any
  pending local change and otherwise clears the row, so the ``INSERT`` never hits an existing
  row; when a pending local change loses to the row, the TS applier turns the ``INSERT`` into
  an ``UPDATE`` (pending ``UPDATE``) or applies it (pending ``DELETE``, none), and the row ends
  equal to the server's. The full row carries every known column (``null`` for cleared ones).
* Clients that keep per-column stamps get :func:`stamped_insert`: one delta per row with every
  column's stamp and the row's delete stamp (see docs/protocol.md).
* A row deleted or out of the view is one ``DELETE`` stamped with its newest stamp
  (:func:`out_of_view_delete`), sent only to clients that may hold it.

Each delivery has a stable id (:func:`delivery_id`) derived from the row and the position of
the version it carries, so a re-sent page carries the same ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

import msgspec

from ..core.delta import DELETE, INSERT
from ..core.wal import StoredRow

__all__ = [
    "PullPage",
    "PulledColumn",
    "PulledDelta",
    "StampedColumn",
    "StampedInsert",
    "delivery_id",
    "out_of_view_delete",
    "stamped_insert",
    "ts_row_deltas",
]

# Pulled deltas are structs, not dicts: a page holds a thousand, and structs are built and
# JSON-encoded (field names known in advance) in about two thirds of a dict's time. They are
# not tracked by the garbage collector (gc=False): nothing in them refers back to them.


class PulledColumn(msgspec.Struct, gc=False):
    """A column of a pulled delta: ``{"column", "value"}``."""

    column: str
    value: Any


class StampedColumn(msgspec.Struct, gc=False, rename="camel"):
    """A column of a stamped pull: ``{"column", "value", "hlc", "clientId"}``."""

    column: str
    value: Any
    hlc: str
    client_id: str


class PulledDelta(msgspec.Struct, gc=False, rename="camel"):
    """A pulled delta as the wire carries it (HLC as decimal text)."""

    op: str
    table: str
    row_id: str
    client_id: str
    columns: list[PulledColumn] | list[StampedColumn]
    hlc: str
    delta_id: str


class StampedInsert(msgspec.Struct, gc=False, rename="camel"):
    """A live row in a stamped pull: every column with its stamp, and the row's delete stamp."""

    op: str
    table: str
    row_id: str
    client_id: str
    columns: list[StampedColumn]
    hlc: str
    delta_id: str
    delete_hlc: str
    delete_client_id: str


@dataclass(frozen=True, slots=True)
class PullPage:
    """One page of a pull: its deltas, the cursor to resume from, and ``has_more``."""

    wire: list[PulledDelta | StampedInsert]
    server_hlc: int
    has_more: bool

    @property
    def deltas(self) -> list[dict[str, Any]]:
        """The deltas as the JSON objects the wire carries (``wire`` encodes to the same)."""
        out: list[dict[str, Any]] = msgspec.to_builtins(self.wire)
        return out


def delivery_id(kind: str, key: str, position: int) -> str:
    """The delivery id of one version (``position``) of a row, for one kind of delivery.

    The SHA-256 of ``kind``, the row key, NUL and the position, as hex (one string built and
    encoded per id: pulls compute one or two per row). Kinds: ``D`` out-of-view delete, ``C``
    the clearing delete and ``I`` the insert of a TS pair, ``S`` a stamped insert.
    """
    return hashlib.sha256(f"{kind}{key}\0{position}".encode()).hexdigest()


def out_of_view_delete(row: StoredRow) -> PulledDelta:
    """The ``DELETE`` of a row that is deleted or left the client's view (newest stamp)."""
    hlc, client = row.state.newest_stamp()
    delta_id = delivery_id("D", row.row_key, row.position)
    return PulledDelta(DELETE, row.table, row.row_id, client, [], str(hlc), delta_id)


def ts_row_deltas(row: StoredRow, names: tuple[str, ...], name_set: Set[str]) -> list[PulledDelta]:
    """A live row for the TS client: ``DELETE`` stamped 0, then the full row as ``INSERT``.

    ``names`` are the table's known columns in order (``name_set`` the same as a set); columns
    the row holds outside them follow.
    """
    state = row.state
    hlc, client = state.newest_stamp()
    cols = state.columns
    extra = [n for n in cols if n not in name_set]
    full = [
        PulledColumn(n, c.value if (c := cols.get(n)) is not None else None)
        for n in (*names, *extra)
    ]
    clear_id = delivery_id("C", row.row_key, row.position)
    insert_id = delivery_id("I", row.row_key, row.position)
    return [
        PulledDelta(DELETE, row.table, row.row_id, client, [], "0", clear_id),
        PulledDelta(INSERT, row.table, row.row_id, client, full, str(hlc), insert_id),
    ]


def stamped_insert(row: StoredRow, names: tuple[str, ...], name_set: Set[str]) -> StampedInsert:
    """A live row with every column's stamp and the row's delete stamp (known columns first)."""
    state = row.state
    hlc, client = state.newest_stamp()
    cols = state.columns
    columns = [
        StampedColumn(n, c.value, str(c.hlc), c.client_id)
        for n in names
        if (c := cols.get(n)) is not None
    ]
    if len(columns) < len(cols):  # columns outside the table's known ones, after them
        columns.extend(
            StampedColumn(n, c.value, str(c.hlc), c.client_id)
            for n, c in cols.items()
            if n not in name_set
        )
    return StampedInsert(
        INSERT,
        row.table,
        row.row_id,
        client,
        columns,
        str(hlc),
        delivery_id("S", row.row_key, row.position),
        str(state.delete_hlc),
        state.delete_client,
    )
