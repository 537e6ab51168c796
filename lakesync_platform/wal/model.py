"""Plain records the write-ahead log hands out (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ..core.delta import ColumnDelta, RowDelta

__all__ = [
    "FlushRequest",
    "GatewayStats",
    "PullPage",
    "PulledColumn",
    "PulledDelta",
    "PushResult",
    "StampedColumn",
    "StampedInsert",
    "WalEntry",
]


class WalEntry(msgspec.Struct, frozen=True):
    """One accepted change, as appended to the log (a struct: built in C on the push path).

    ``cursor`` is the server-assigned, strictly increasing ingest cursor (per gateway).
    ``columns`` are the *effective* columns (the ones the delta won); ``op`` is ``INSERT`` (the
    row became live), ``UPDATE`` or ``DELETE``. ``hlc``/``client_id``/``delta_id`` are the
    writer's. ``ingest_ms`` is the server's wall clock at commit.
    """

    cursor: int
    delta_id: str
    table: str
    row_id: str
    op: str
    client_id: str
    hlc: int
    columns: tuple[ColumnDelta, ...]
    ingest_ms: int
    size: int

    def to_delta(self) -> RowDelta:
        """The entry as a row delta (its effective columns only)."""
        return RowDelta(
            self.op, self.table, self.row_id, self.client_id, self.columns, self.hlc, self.delta_id
        )


@dataclass(frozen=True, slots=True)
class PushResult:
    """Outcome of one push: ``accepted`` counts new and duplicate deltas; ``entries`` were added."""

    accepted: int
    duplicates: int
    entries: tuple[WalEntry, ...]
    server_hlc: int


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


@dataclass(frozen=True, slots=True)
class GatewayStats:
    """Counters for one gateway id (admin metrics, backpressure)."""

    gateway_id: str
    max_cursor: int
    flush_watermark: int
    backlog_entries: int
    backlog_bytes: int
    row_count: int
    live_rows: int


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """A request to flush a gateway's WAL to the lake, made through the admin route."""

    request_id: str
    gateway_id: str
    requested_ms: int
    status: str
    detail: str | None
    updated_ms: int
