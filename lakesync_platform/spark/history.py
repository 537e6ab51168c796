"""A lake table's snapshots, time-travel log and references, read from its Iceberg metadata.

Expiry (:mod:`.upkeep`) and time travel (:mod:`.timetravel`, ``lakesync history``) both need
the same facts about a table: its snapshots (id, parent, commit time, summary), the log of which
snapshot was current when (Iceberg's ``snapshot-log``, what ``AS OF`` timestamps resolve
against), and the tags and branches that pin snapshots. They are parsed here from the table's
metadata as the Iceberg spec writes it (JSON), so one model serves both readers:

* :func:`history_from_pyiceberg` — pyiceberg's metadata, without a JVM: what the pipeline
  reads (expiry, upkeep, ``lakesync history``), on a classic Spark session or a Connect one;
* :func:`history_from_spark` — Iceberg's ``snapshots``, ``history`` and ``refs`` metadata
  tables through Spark SQL (three small Spark jobs; also through Spark Connect), for a catalog
  pyiceberg cannot open.

:class:`TableHistory` itself is pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "Ref",
    "SnapshotEntry",
    "TableHistory",
    "history_from_json",
    "history_from_pyiceberg",
    "history_from_spark",
]


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One snapshot: id, parent, commit time (ms since the epoch), operation and summary."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str
    summary: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Ref:
    """A named reference to a snapshot: a ``tag`` or a ``branch`` (``main`` is one)."""

    name: str
    kind: str
    snapshot_id: int


@dataclass(frozen=True, slots=True)
class TableHistory:
    """A table's snapshots (oldest first), its time-travel log of ``(timestamp_ms,
    snapshot_id)`` (the snapshot that became current then, oldest first), its references and
    its current snapshot (``None`` while it has none)."""

    snapshots: tuple[SnapshotEntry, ...]
    log: tuple[tuple[int, int], ...]
    refs: tuple[Ref, ...]
    current_id: int | None
    _by_id: dict[int, SnapshotEntry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {s.snapshot_id: s for s in self.snapshots})

    def snapshot(self, snapshot_id: int) -> SnapshotEntry | None:
        """The snapshot ``snapshot_id`` if the table still holds it."""
        return self._by_id.get(snapshot_id)

    @property
    def current(self) -> SnapshotEntry | None:
        """The current snapshot."""
        return None if self.current_id is None else self._by_id.get(self.current_id)

    def ancestors(self, snapshot_id: int | None = None) -> Iterator[SnapshotEntry]:
        """``snapshot_id`` (default: the current one), then its parents still held, newest
        first."""
        start = self.current_id if snapshot_id is None else snapshot_id
        snap = None if start is None else self._by_id.get(start)
        while snap is not None:
            yield snap
            snap = None if snap.parent_id is None else self._by_id.get(snap.parent_id)

    def as_of(self, timestamp_ms: int) -> SnapshotEntry | None:
        """The snapshot that was current at ``timestamp_ms`` (Spark's ``TIMESTAMP AS OF``):
        the last log entry at or before it, if that snapshot is still held."""
        found: int | None = None
        for when, snapshot_id in self.log:
            if when > timestamp_ms:
                break
            found = snapshot_id
        return None if found is None else self._by_id.get(found)

    def first_log_ms(self) -> int | None:
        """When the oldest snapshot still in the log became current."""
        return self.log[0][0] if self.log else None

    def pinned(self) -> dict[int, list[str]]:
        """Snapshot id → the names of the tags and branches that reference it."""
        out: dict[int, list[str]] = {}
        for ref in self.refs:
            out.setdefault(ref.snapshot_id, []).append(ref.name)
        return out


def history_from_json(metadata: Mapping[str, Any]) -> TableHistory:
    """The history in an Iceberg table-metadata document (the spec's JSON, parsed)."""
    snapshots = tuple(
        sorted(
            (
                SnapshotEntry(
                    int(s["snapshot-id"]),
                    None if s.get("parent-snapshot-id") is None else int(s["parent-snapshot-id"]),
                    int(s["timestamp-ms"]),
                    str(s.get("summary", {}).get("operation", "")),
                    {str(k): str(v) for k, v in s.get("summary", {}).items() if k != "operation"},
                )
                for s in metadata.get("snapshots", [])
            ),
            key=lambda s: (s.timestamp_ms, s.snapshot_id),
        )
    )
    log = tuple(
        (int(e["timestamp-ms"]), int(e["snapshot-id"])) for e in metadata.get("snapshot-log", [])
    )
    refs = tuple(
        Ref(str(name), str(ref.get("type", "")), int(ref["snapshot-id"]))
        for name, ref in sorted(metadata.get("refs", {}).items())
    )
    current = metadata.get("current-snapshot-id")
    current_id = None if current in (None, -1) else int(current)
    return TableHistory(snapshots, log, refs, current_id)


def history_from_spark(spark: SparkSession, qualified: str) -> TableHistory:
    """The history of a (quoted, fully qualified) table read from its metadata tables by
    Spark SQL (works through Spark Connect; pyiceberg's read is faster where it can open the
    catalog)."""
    snapshots = spark.sql(
        "SELECT snapshot_id, parent_id, unix_millis(committed_at) AS ms, operation, summary "
        f"FROM {qualified}.snapshots"
    ).collect()
    log = spark.sql(
        f"SELECT unix_millis(made_current_at) AS ms, snapshot_id FROM {qualified}.history"
    ).collect()
    refs = spark.sql(f"SELECT name, type, snapshot_id FROM {qualified}.refs").collect()
    main = [r["snapshot_id"] for r in refs if r["name"] == "main"]
    return history_from_json(
        {
            "snapshots": [
                {
                    "snapshot-id": r["snapshot_id"],
                    "parent-snapshot-id": r["parent_id"],
                    "timestamp-ms": r["ms"],
                    "summary": {**(r["summary"] or {}), "operation": r["operation"] or ""},
                }
                for r in snapshots
            ],
            "snapshot-log": [
                {"timestamp-ms": r["ms"], "snapshot-id": r["snapshot_id"]}
                for r in sorted(log, key=lambda r: (r["ms"], r["snapshot_id"]))
            ],
            "refs": {
                r["name"]: {"type": str(r["type"]).lower(), "snapshot-id": r["snapshot_id"]}
                for r in refs
            },
            "current-snapshot-id": main[0] if main else None,
        }
    )


def history_from_pyiceberg(table: Any) -> TableHistory:
    """The history of a pyiceberg ``Table`` (no JVM)."""
    return history_from_json(json.loads(table.metadata.model_dump_json()))
