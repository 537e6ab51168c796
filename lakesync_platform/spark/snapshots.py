"""Iceberg table metadata read with pyiceberg, over the catalog the Spark session writes.

Watermarks and commit summaries live in snapshot metadata. Reading them with Spark SQL over the
``snapshots`` metadata table costs a Spark job each (100-300 ms); pyiceberg reads the catalog's
row and the table's metadata file in this process (~10-30 ms), with a classic session and a
Spark Connect one alike (no JVM is needed here). Every call loads the table afresh, so commits
made by other processes (a Connect server, another pipeline process) are seen.

The catalog is :func:`lakesync_platform.spark.session.pyiceberg_catalog` of the session's
settings: the same JDBC catalog (SQLite or PostgreSQL) and warehouse, S3 included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .session import CATALOG

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["SnapshotInfo", "ancestors", "current_snapshot", "load_table", "table_identifier"]


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One snapshot: its id and its summary (string properties, without ``operation``)."""

    snapshot_id: int
    summary: dict[str, str]

    def int_prop(self, key: str, default: int = 0) -> int:
        """An integer summary property (``default`` when absent)."""
        value = self.summary.get(key)
        return default if value is None else int(value)


def table_identifier(qualified: str) -> tuple[str, str]:
    """Pure: a quoted, fully qualified Spark name (``lakesync.`gw`.`t```, the catalog part
    optional) → pyiceberg's ``(namespace, table)``."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(qualified):
        ch = qualified[i]
        if ch == "`":
            if quoted and qualified[i + 1 : i + 2] == "`":
                current.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    if len(parts) == 3 and parts[0] == CATALOG:
        parts = parts[1:]
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"not a table of catalog {CATALOG!r}: {qualified!r}")
    return parts[0], parts[1]


def load_table(catalog: Catalog, qualified: str) -> Table:
    """The pyiceberg table for a quoted, fully qualified Spark name, loaded now (its latest
    commit)."""
    return catalog.load_table(table_identifier(qualified))


def _info(snapshot: Snapshot) -> SnapshotInfo:
    summary = {} if snapshot.summary is None else snapshot.summary.additional_properties
    return SnapshotInfo(snapshot.snapshot_id, {str(k): str(v) for k, v in summary.items()})


def current_snapshot(catalog: Catalog, qualified: str) -> SnapshotInfo | None:
    """The table's current snapshot (``None`` while the table has none)."""
    snapshot = load_table(catalog, qualified).current_snapshot()
    return None if snapshot is None else _info(snapshot)


def ancestors(catalog: Catalog, qualified: str) -> Iterator[SnapshotInfo]:
    """The current snapshot, then its parents, newest first (lazily: stop early to save work;
    the table's metadata is loaded once, on the first step)."""
    metadata = load_table(catalog, qualified).metadata
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        yield _info(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else metadata.snapshot_by_id(parent)
