"""Per-column stamps of the local rows, kept in a side table next to the user tables.

For every row the client holds (or has deleted locally) the table ``_lakesync_stamps`` keeps the
stamp ``(hlc, client_id)`` that wrote each column and the stamp of the newest *local* delete. The
sync engine compares remote stamps with these, column by column, so a stale remote value never
overwrites a newer local or already-received one (ARCHITECTURE.md §5).

Invariant kept by the tracker and the applier: a row is present in its user table iff its stamps
hold at least one column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from ._db import LocalDB

__all__ = [
    "NO_STAMP",
    "STAMPS_DDL",
    "RowStamps",
    "Stamp",
    "has_stamps",
    "load_stamps",
    "save_new_stamps",
    "save_stamps",
]

Stamp = tuple[int, str]
"""``(hlc, client_id)``; ordered with :func:`lakesync_platform.core.merge.stamp_gt`."""

NO_STAMP: Stamp = (0, "")
"""Older than every real stamp."""

STAMPS_DDL = (
    "CREATE TABLE IF NOT EXISTS _lakesync_stamps ("
    "tbl TEXT NOT NULL, row_id TEXT NOT NULL, stamps BLOB NOT NULL, "
    "PRIMARY KEY (tbl, row_id)) WITHOUT ROWID"
)


class _Encoded(msgspec.Struct, array_like=True):
    c: dict[str, tuple[int, str]]
    d: tuple[int, str]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Encoded)


@dataclass(slots=True)
class RowStamps:
    """The column stamps of one local row plus the stamp of its newest local delete."""

    columns: dict[str, Stamp] = field(default_factory=dict)
    delete: Stamp = NO_STAMP

    @property
    def live(self) -> bool:
        """Whether the row is present locally."""
        return bool(self.columns)

    def encode(self) -> bytes:
        """Compact JSON for the side table."""
        return _encoder.encode(_Encoded(self.columns, self.delete))

    @staticmethod
    def decode(data: bytes | str) -> RowStamps:
        """Inverse of :meth:`encode`."""
        raw = _decoder.decode(data)
        return RowStamps(dict(raw.c), raw.d)


def load_stamps(db: LocalDB, table: str, row_ids: Iterable[str]) -> dict[str, RowStamps]:
    """The stamps of ``row_ids`` in ``table`` that have any (others are absent)."""
    ids = list(dict.fromkeys(row_ids))
    found: dict[str, RowStamps] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for row_id, blob in db.query_tuples(
            f"SELECT row_id, stamps FROM _lakesync_stamps WHERE tbl = ? AND row_id IN ({marks})",
            [table, *chunk],
        ):
            found[row_id] = RowStamps.decode(blob)
    return found


def save_stamps(db: LocalDB, table: str, rows: Mapping[str, RowStamps]) -> None:
    """Write the stamps of ``rows``; a row with no columns and no delete stamp is forgotten."""
    upserts = []
    deletes = []
    for row_id, stamps in rows.items():
        if stamps.columns or stamps.delete != NO_STAMP:
            upserts.append((table, row_id, stamps.encode()))
        else:
            deletes.append((table, row_id))
    if upserts:
        db.exec_many(
            "INSERT INTO _lakesync_stamps (tbl, row_id, stamps) VALUES (?, ?, ?) "
            "ON CONFLICT (tbl, row_id) DO UPDATE SET stamps = excluded.stamps",
            upserts,
        )
    if deletes:
        db.exec_many("DELETE FROM _lakesync_stamps WHERE tbl = ? AND row_id = ?", deletes)


def has_stamps(db: LocalDB, table: str) -> bool:
    """Whether the client holds stamps of any row of ``table`` (a first sync: none)."""
    found = db.query_tuples("SELECT 1 FROM _lakesync_stamps WHERE tbl = ? LIMIT 1", [table])
    return bool(found)


def save_new_stamps(
    db: LocalDB, table: str, row_ids: Sequence[str], columns: Sequence[dict[str, Stamp]]
) -> None:
    """Write the stamps of rows new to the client: ``columns[i]`` are row ``i``'s column stamps
    (no local delete). Each row's stamps are encoded as one ``[columns, delete]`` array, the
    layout of :meth:`RowStamps.encode`, without building a :class:`RowStamps` per row."""
    # One encoder call for all rows (newline-delimited; JSON escapes newlines in strings).
    blobs = _encoder.encode_lines([(cells, NO_STAMP) for cells in columns]).split(b"\n")
    db.exec_many(
        "INSERT INTO _lakesync_stamps (tbl, row_id, stamps) VALUES (?, ?, ?) "
        "ON CONFLICT (tbl, row_id) DO UPDATE SET stamps = excluded.stamps",
        [(table, row_id, blob) for row_id, blob in zip(row_ids, blobs, strict=False)],
    )
