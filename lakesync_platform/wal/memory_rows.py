"""The in-memory WAL's delivery state and its readers (the twin of :mod:`.rows`): what each
client of a gateway holds, the cursor it last pulled from, and the readers pulls and the
broadcast feed cut their pages from."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.wal import RowRecord, StoredRow

__all__ = [
    "Deliveries",
    "Held",
    "MemoryFeedReader",
    "MemoryRowReader",
    "held_records",
    "save_records",
]

Held = dict[str, dict[str, RowRecord]]
"""Records by client id, then row key."""


@dataclass
class Deliveries:
    """Per client of one gateway: the cursor it last pulled from, and what it holds."""

    last_since: dict[str, int] = field(default_factory=dict)
    client_rows: Held = field(default_factory=dict)


def held_records(
    delivery: Deliveries | None, client_ids: Sequence[str], keys: Sequence[str]
) -> Held:
    """What each of ``client_ids`` holds of the rows ``keys`` (clients holding none left out)."""
    out: Held = {}
    for c in client_ids:
        held = {} if delivery is None else delivery.client_rows.get(c, {})
        if found := {k: rec for k in keys if (rec := held.get(k)) is not None}:
            out[c] = found
    return out


def save_records(
    delivery: Deliveries,
    records: Mapping[str, Mapping[str, RowRecord]],
    expected: Mapping[str, Mapping[str, RowRecord]],
) -> None:
    """Upsert ``records``; a record in ``expected`` only if it is still the one given there."""
    for client_id, held in records.items():
        stored = delivery.client_rows.setdefault(client_id, {})
        was = expected.get(client_id, {})
        for key, rec in held.items():
            if key not in was or stored.get(key) == was[key]:
                stored[key] = rec


class MemoryRowReader:
    """A pull's view of a gateway's rows and of one client's records, as of its start."""

    def __init__(self, rows: list[StoredRow], records: dict[str, RowRecord]) -> None:
        self._rows = rows
        self._positions = [r.position for r in rows]
        self._records = records

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after cursor ``after``, in cursor order."""
        start = bisect_right(self._positions, after)
        return self._rows[start : start + limit]

    def client_records(self, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What the pulling client holds of the rows ``keys``, as far as the server knows."""
        return {k: rec for k in keys if (rec := self._records.get(k)) is not None}


class MemoryFeedReader(MemoryRowReader):
    """The feed's view of a gateway's rows as of its start, and of its clients' records as
    they are when asked (``records``: read under the store's lock)."""

    def __init__(
        self, rows: list[StoredRow], records: Callable[[Sequence[str], Sequence[str]], Held]
    ) -> None:
        super().__init__(rows, {})
        self._held = records

    def delivery_records(self, client_ids: Sequence[str], keys: Sequence[str]) -> Held:
        """What each of ``client_ids`` holds of the rows ``keys``."""
        return self._held(client_ids, keys)
