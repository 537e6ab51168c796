"""Per-column last-writer-wins row state (ARCHITECTURE.md §5).

Every column keeps its value and the stamp ``(hlc, client_id)`` that wrote it; the row keeps the
stamp of its newest delete. Stamps order by HLC, then by ``client_id`` in JavaScript string
order (UTF-16 code units), as the protocol's tie-break (PROTOCOL.md §3.1). Two writes with the
same stamp but different values (which honest clients never produce) are ordered by the
canonical JSON of the value, so the merge stays deterministic.

Rules:

* a write sets each of its columns whose stamp is newer than that column's stamp and newer than
  the row's delete stamp; the columns it loses are not part of its effective change;
* a delete newer than the row's delete stamp raises it and clears every column not newer than
  it; the row is live while at least one column survives;
* a later write resurrects a deleted row with only its own columns.

The state is a join of per-column registers and a max-register for the delete stamp, so merging
is commutative, associative and idempotent: any delivery order, with duplicates, gives the same
state (``tests/core/test_merge_laws.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec

from .delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta

__all__ = [
    "ColumnState",
    "MergeOutcome",
    "RowState",
    "decode_row_state",
    "encode_row_state",
    "js_string_lt",
    "merge_delta",
    "stamp_gt",
]


def js_string_lt(a: str, b: str) -> bool:
    """``a < b`` in JavaScript string order (UTF-16 code units)."""
    if a.isascii() and b.isascii():
        return a < b
    return a.encode("utf-16-be", "surrogatepass") < b.encode("utf-16-be", "surrogatepass")


def stamp_gt(hlc_a: int, client_a: str, hlc_b: int, client_b: str) -> bool:
    """Whether stamp ``(hlc_a, client_a)`` is newer than ``(hlc_b, client_b)``."""
    if hlc_a != hlc_b:
        return hlc_a > hlc_b
    return client_a != client_b and js_string_lt(client_b, client_a)


def _value_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ColumnState(msgspec.Struct, array_like=True):
    """A column's current value and the stamp that wrote it (stored as ``[value, hlc, client]``)."""

    value: Any
    hlc: int
    client_id: str


class RowState(
    msgspec.Struct,
    rename={"columns": "c", "delete_hlc": "dh", "delete_client": "dc"},
    forbid_unknown_fields=True,
):
    """A row's per-column state plus its newest delete stamp (``0, ""`` if never deleted).

    Invariant: every column's stamp is newer than the delete stamp.
    """

    columns: dict[str, ColumnState] = msgspec.field(default_factory=dict)
    delete_hlc: int = 0
    delete_client: str = ""

    @property
    def live(self) -> bool:
        """Whether the row exists (at least one column survives the last delete)."""
        return bool(self.columns)

    def values(self) -> dict[str, Any]:
        """The row as ``{column: value}``."""
        return {name: col.value for name, col in self.columns.items()}

    def newest_stamp(self) -> tuple[int, str]:
        """The newest stamp in the row (over its columns and its delete)."""
        hlc, client = self.delete_hlc, self.delete_client
        for col in self.columns.values():
            # stamp_gt(col.hlc, col.client_id, hlc, client), inline: pulls call this per row
            h = col.hlc
            if h > hlc or (
                h == hlc and col.client_id != client and js_string_lt(client, col.client_id)
            ):
                hlc, client = h, col.client_id
        return hlc, client

    def copy(self) -> RowState:
        """A copy that can be merged into without touching this one."""
        return RowState(dict(self.columns), self.delete_hlc, self.delete_client)


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """The result of merging one delta.

    ``op`` is ``None`` when the delta changed nothing (it lost every column, or it is a delete
    not newer than the row's delete stamp); otherwise ``INSERT`` (the row became live),
    ``UPDATE`` (a live row changed) or ``DELETE`` (the delete stamp rose). ``columns`` are the
    columns the delta won, in its order.
    """

    state: RowState
    op: str | None
    columns: tuple[ColumnDelta, ...]


def _column_wins(incoming: ColumnDelta, hlc: int, client: str, current: ColumnState | None) -> bool:
    if current is None:
        return True
    if current.hlc != hlc or current.client_id != client:
        return stamp_gt(hlc, client, current.hlc, current.client_id)
    return _value_key(incoming.value) > _value_key(current.value)


def merge_delta(state: RowState | None, delta: RowDelta) -> MergeOutcome:
    """Merge ``delta`` into ``state`` (``None`` = unknown row); ``state`` is not modified."""
    hlc, client = delta.hlc, delta.client_id
    if state is None and delta.op != DELETE:
        # Fast path (most writes): every column of a write to an unknown row wins.
        won: dict[str, ColumnDelta] = {c.column: c for c in delta.columns}
        fresh = RowState({n: ColumnState(c.value, hlc, client) for n, c in won.items()})
        return MergeOutcome(fresh, INSERT if won else None, tuple(won.values()))
    new = state.copy() if state is not None else RowState()
    if delta.op == DELETE:
        if not stamp_gt(hlc, client, new.delete_hlc, new.delete_client):
            return MergeOutcome(new, None, ())
        new.delete_hlc, new.delete_client = hlc, client
        new.columns = {
            name: col
            for name, col in new.columns.items()
            if stamp_gt(col.hlc, col.client_id, hlc, client)
        }
        return MergeOutcome(new, DELETE, ())
    if not stamp_gt(hlc, client, new.delete_hlc, new.delete_client):
        return MergeOutcome(new, None, ())
    was_live = new.live
    won = {}
    for col in delta.columns:
        if _column_wins(col, hlc, client, new.columns.get(col.column)):
            new.columns[col.column] = ColumnState(col.value, hlc, client)
            won[col.column] = col
    if not won:
        return MergeOutcome(new, None, ())
    return MergeOutcome(new, UPDATE if was_live else INSERT, tuple(won.values()))


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RowState)


def encode_row_state(state: RowState) -> bytes:
    """Serialise a row state: ``{"c": {col: [value, hlc, client]}, "dh": hlc, "dc": client}``."""
    return _encoder.encode(state)


def decode_row_state(data: bytes | str) -> RowState:
    """Inverse of :func:`encode_row_state`."""
    return _decoder.decode(data)
