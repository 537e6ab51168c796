"""Pulling from a named source: a delta log outside the WAL, read page by page.

``GET /v1/sync/{gw}/pull?source=NAME`` (PROTOCOL.md §4.3) serves the rows of a declared source
(:mod:`lakesync_platform.adapters.source`) with the guarantees of a normal pull: the page is
cut by :func:`~.pull.cut_page` and encoded by :mod:`.delivery` — a row is sent whole, as the
source holds it now, sync rules are evaluated on it with the caller's claims, a row that is
deleted or out of the view reaches only a client that may hold it, ``hasMore`` is exact and a
page is never empty while it is true.

The reference reads the whole log after ``since`` and slices it; here the log is read in
``(hlc, delta_id)`` order with the limit in the query. A source cursor names a place in that
order: the HLC of the last delta passed and how many deltas with that same HLC were passed
(``skip``), so any number of deltas sharing one HLC page without skipping or repeating one.
The next read asks for ``hlc ≥ H`` (``deltas_since(H - 1)``) and drops the first ``skip``.

A cursor is one integer, as the TS client keeps it (it revives ``serverHlc`` with ``BigInt``):
``MARK | tag << 96 | hlc << 32 | skip``. ``MARK`` (2¹²⁸) puts every source cursor above the
gateway's own cursors, so neither is mistaken for the other; ``tag`` is the view tag of the
source's name, the sync rules and the caller's claims — a cursor of another source, or minted
under other rules or claims, starts the source over from its beginning (rows arrive whole, so a
restart re-sends rows and never loses one).

Rows are read with :meth:`DeltaLog.latest_state`, so each carries one stamp: the ``(hlc,
client_id)`` of the delta that brought it into the page. A row changed again later in the log
is sent again at that later place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..core.delta import RowDelta
from ..core.merge import ColumnState, RowState
from ..core.wal import RowRecord, StoredRow
from .cursors import view_tag

__all__ = [
    "MAX_SOURCE_CURSOR",
    "DeltaLog",
    "SourceCursor",
    "SourceRows",
    "source_row_key",
]

_SKIP_BITS: Final = 32
_HLC_BITS: Final = 64
_TAG_BITS: Final = 22
_MARK: Final = 1 << 128
MAX_SOURCE_CURSOR: Final = _MARK | ((1 << (_TAG_BITS + _HLC_BITS + _SKIP_BITS)) - 1)
"""The largest source cursor (what a source pull's ``since`` may be)."""


class DeltaLog(Protocol):
    """What a source pull reads of a source (part of ``adapters.source.DeltaSource``)."""

    def deltas_since(
        self, since: int, tables: Sequence[str] | None = None, limit: int | None = None
    ) -> list[RowDelta]:
        """Deltas with ``hlc > since``, ordered by ``(hlc, delta_id)``, at most ``limit``."""
        ...

    def latest_state(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The row's current columns; ``None`` when deleted or absent."""
        ...


@dataclass(frozen=True, slots=True)
class SourceCursor:
    """A place in a source's ``(hlc, delta_id)`` order under one view tag."""

    tag: int
    hlc: int
    skip: int

    def encode(self) -> int:
        """The cursor as the wire's integer."""
        return _MARK | (self.tag << (_HLC_BITS + _SKIP_BITS)) | (self.hlc << _SKIP_BITS) | self.skip

    @staticmethod
    def decode(value: int) -> SourceCursor | None:
        """The source cursor ``value`` encodes, or ``None`` (0, a gateway cursor, garbage)."""
        if not _MARK <= value <= MAX_SOURCE_CURSOR:
            return None
        rest = value - _MARK
        return SourceCursor(
            rest >> (_HLC_BITS + _SKIP_BITS),
            (rest >> _SKIP_BITS) & ((1 << _HLC_BITS) - 1),
            rest & ((1 << _SKIP_BITS) - 1),
        )

    @staticmethod
    def tag_for(source: str, rules_tag: int) -> int:
        """The view tag of ``source`` seen through the view whose pull tag is ``rules_tag``."""
        return view_tag(f"source\0{source}\0{rules_tag}".encode(), {})


def source_row_key(source: str, table: str, row_id: str) -> str:
    """The key of a source's row in a client's delivery records (``source/table:row_id``:
    a table name holds no ``/``, so it never equals a gateway row's ``table:row_id``)."""
    return f"{source}/{table}:{row_id}"


class SourceRows:
    """A :class:`~lakesync_platform.core.wal.RowReader` over a source's delta log.

    Reads the log from ``(hlc, skip)`` on; each row is handed out once, at the position (1, 2,
    …) of the first of its deltas read, with the state the source holds now. :meth:`cursor_at`
    maps a position back to a place in the log; :attr:`end` is the place after everything read
    once the log is exhausted.
    """

    def __init__(
        self,
        log: DeltaLog,
        source: str,
        start: SourceCursor,
        records: Callable[[Sequence[str]], dict[str, RowRecord]],
    ) -> None:
        self._log = log
        self._source = source
        self._start = start
        self._tag = start.tag
        self._hlc = start.hlc
        self._skip = start.skip
        self._records = records
        self._places: list[tuple[int, int]] = []  # position - 1 → (hlc, skip) after it
        self._seen: set[str] = set()
        self.exhausted = False

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """The next ``limit`` rows not handed out yet (``after``: the last position handed out)."""
        out: list[StoredRow] = []
        while len(out) < limit and not self.exhausted:
            want = limit - len(out)
            batch = self._log.deltas_since(self._hlc - 1, None, self._skip + want)
            fresh = batch[self._skip :]
            if len(fresh) < want:
                self.exhausted = True
            for delta in fresh:
                self._pass(delta)
                key = source_row_key(self._source, delta.table, delta.row_id)
                if key in self._seen:
                    continue
                self._seen.add(key)
                out.append(self._row(key, delta, len(self._places)))
                if len(out) == limit:
                    self.exhausted = False  # deltas after this one are read next time
                    break
        return out

    def client_records(self, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What the pulling client holds of the rows ``keys``, as far as the server knows."""
        return self._records(keys)

    def cursor_at(self, position: int) -> SourceCursor:
        """The place in the log right after the delta at ``position`` (0: where reading began)."""
        if position == 0:
            return self._start
        hlc, skip = self._places[position - 1]
        return SourceCursor(self._tag, hlc, skip)

    @property
    def end(self) -> SourceCursor:
        """The place after the last delta read."""
        return SourceCursor(self._tag, self._hlc, self._skip)

    def _pass(self, delta: RowDelta) -> None:
        if delta.hlc == self._hlc:
            self._skip += 1
        else:
            self._hlc, self._skip = delta.hlc, 1
        self._places.append((self._hlc, self._skip))

    def _row(self, key: str, delta: RowDelta, position: int) -> StoredRow:
        values = self._log.latest_state(delta.table, delta.row_id)
        stamp, client = delta.hlc, delta.client_id
        if values is None:
            state = RowState({}, stamp, client)
        else:
            state = RowState({c: ColumnState(v, stamp, client) for c, v in values.items()})
        return StoredRow(key, delta.table, delta.row_id, state, position)
