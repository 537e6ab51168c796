"""Lake upkeep of one Iceberg table: compaction, snapshot expiry and orphan removal.

Every step is Iceberg's own Spark maintenance — the actions behind the ``rewrite_data_files``,
``rewrite_position_delete_files``, ``rewrite_manifests``, ``expire_snapshots`` and
``remove_orphan_files`` procedures (``org.apache.iceberg.spark.actions.SparkActions``, with the
procedures' option names). The actions are called directly rather than through ``CALL`` for two
reasons the procedures of Iceberg 1.10 cannot serve:

* a commit made by compaction must carry the lake's watermark in its snapshot summary
  (``snapshotProperty``; the procedures take no snapshot properties) — see
  :func:`compact_table`;
* orphan removal may be given an age under a day (the procedure refuses one; the action takes
  it), which the tests use and an operator who writes the lake only through LakeSync may choose.

:func:`compact_table` rewrites small data files (bin-pack; state tables sorted by ``row_id``,
applying their merge-on-read deletes), then position delete files, then manifests.
:func:`expire_table` expires the snapshots older than :func:`expiry_cutoff` (never one the
time-travel window, a watermark or a tag or branch still needs) and removes orphan files. The
callers (:mod:`lakesync_platform.pipeline.upkeep`) hold the lake's lock around each of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import FlushError
from .history import TableHistory, history_from_spark
from .snapshots import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "UPKEEP_PROP",
    "CompactionResult",
    "ExpiryResult",
    "TableFiles",
    "UpkeepPolicy",
    "compact_table",
    "expire_table",
    "expiry_cutoff",
    "files_in",
    "rewrite_options",
    "table_files",
]

UPKEEP_PROP = "lakesync.upkeep"
"""Snapshot-summary key on every commit upkeep makes: which step made it."""


@dataclass(frozen=True, slots=True)
class UpkeepPolicy:
    """The knobs of one upkeep run (from ``lakesync_platform.settings.UpkeepSettings``).

    ``retention_ms``: the time-travel window; ``orphan_age_ms``: the age an unreferenced file
    must reach before it is removed; ``prefix_listing``: list a table's folder through its
    FileIO (object stores) instead of Hadoop's filesystem.
    """

    min_input_files: int = 5
    target_file_bytes: int = 128 * 1024 * 1024
    delete_file_threshold: int = 1
    retention_ms: int = 7 * 86_400_000
    orphan_age_ms: int = 86_400_000
    prefix_listing: bool = False

    @property
    def small_file_bytes(self) -> int:
        """Files under this size count as small (Iceberg's ``min-file-size-bytes``)."""
        return self.target_file_bytes * 3 // 4


@dataclass(frozen=True, slots=True)
class TableFiles:
    """What a table's current snapshot holds (its summary's totals)."""

    data_files: int
    delete_files: int
    bytes: int
    records: int
    snapshots: int


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What compaction did to one table: files and bytes before and after, what each step
    rewrote, and the snapshots it committed (oldest first)."""

    gateway_id: str
    table: str
    before: TableFiles
    after: TableFiles
    rewritten_data_files: int
    added_data_files: int
    rewritten_delete_files: int
    rewritten_manifests: int
    snapshot_ids: tuple[int, ...]
    seconds: float


@dataclass(frozen=True, slots=True)
class ExpiryResult:
    """What expiry and orphan removal did to one table: snapshots before and expired, the
    cut-off (snapshots committed before it went, unless pinned), files deleted with them, and
    orphan files removed."""

    gateway_id: str
    table: str
    snapshots_before: int
    snapshots_expired: int
    cutoff_ms: int
    files_deleted: int
    orphans_removed: int
    seconds: float


def rewrite_options(policy: UpkeepPolicy, *, state: bool) -> dict[str, str]:
    """Pure: the ``rewrite_data_files`` options for a table (``state``: a state table)."""
    options = {
        "min-input-files": str(policy.min_input_files),
        "target-file-size-bytes": str(policy.target_file_bytes),
        # New files take the rewrite commit's own sequence number, so every delete file written
        # before it no longer applies to them and goes as dangling (with the starting snapshot's
        # number, the newest deletes would still "apply" and stay). Iceberg starts from the old
        # number so that deletes committed during a long rewrite keep applying; the lake's
        # lock keeps every other stage out while a table is compacted, so there are none.
        "use-starting-sequence-number": "false",
    }
    if state:
        options["delete-file-threshold"] = str(policy.delete_file_threshold)
        options["remove-dangling-deletes"] = "true"
    return options


def expiry_cutoff(
    history: TableHistory, now_ms: int, retention_ms: int, keep: Iterable[int] = ()
) -> int:
    """Pure: snapshots committed before the returned time may be expired.

    It is ``now - retention`` moved back to the snapshot that was current at that moment (time
    travel to any instant of the window needs it, though it is older than the window), and
    further back to each snapshot in ``keep`` (those a watermark needs). Iceberg itself never
    expires the current snapshot nor one a tag or branch references.
    """
    boundary = now_ms - retention_ms
    cutoff = boundary
    at_boundary = history.as_of(boundary)
    if at_boundary is not None:
        cutoff = min(cutoff, at_boundary.timestamp_ms)
    for snapshot_id in keep:
        kept = history.snapshot(snapshot_id)
        if kept is not None:
            cutoff = min(cutoff, kept.timestamp_ms)
    return cutoff


def _actions(spark: SparkSession) -> Any:
    jvm: Any = spark._jvm
    return jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)


def _size(spark: SparkSession, iterable: Any) -> int:
    jvm: Any = spark._jvm
    return int(jvm.org.apache.iceberg.relocated.com.google.common.collect.Iterables.size(iterable))


def files_in(history: TableHistory) -> TableFiles:
    """The totals of ``history``'s current snapshot (its summary)."""
    current = history.current
    summary: Mapping[str, str] = {} if current is None else current.summary

    def total(key: str) -> int:
        return int(summary.get(key, "0"))

    return TableFiles(
        total("total-data-files"),
        total("total-delete-files"),
        total("total-files-size"),
        total("total-records"),
        len(history.snapshots),
    )


def table_files(spark: SparkSession, qualified: str) -> TableFiles:
    """The totals of a table's current snapshot (no Spark job: its metadata only)."""
    return files_in(history_from_spark(spark, load_table(spark, qualified)))


def _run(what: str, qualified: str, action: Callable[[], Any]) -> Any:
    """Run a Java action, its failure as one :class:`FlushError` line."""
    try:
        return action()
    except Exception as exc:  # py4j: translate at the edge, no Java stack trace
        from .java_errors import one_line

        raise FlushError(f"{what} of {qualified} failed: {one_line(exc)}") from exc


def compact_table(
    spark: SparkSession,
    gw: str,
    table: str,
    qualified: str,
    policy: UpkeepPolicy,
    *,
    sort_by_row_id: bool,
    properties: Mapping[str, str] = {},
    clock: Callable[[], float] = time.monotonic,
) -> CompactionResult:
    """Rewrite ``qualified``'s small data files, then its position delete files, then its
    manifests — each step only when there is something to rewrite (manifests: at least
    ``min_input_files`` of a kind; Iceberg merges them itself from 100 on).

    ``sort_by_row_id``: a state table (sorted by ``row_id``, its deletes applied); else
    bin-pack. ``properties`` go into the summary of every commit, beside
    :data:`UPKEEP_PROP`: the change log's compaction commits carry the lake watermark there,
    so the watermark is read from the current snapshot after compaction as after a flush.
    """
    started = clock()
    jtable = load_table(spark, qualified)
    before_history = history_from_spark(spark, jtable)
    before = files_in(before_history)
    rewritten = added = rewritten_deletes = manifests = 0

    def stamped(action: Any, step: str) -> Any:
        action = action.snapshotProperty(UPKEEP_PROP, step)
        for key, value in properties.items():
            action = action.snapshotProperty(key, value)
        return action

    if before_history.current is not None and (before.data_files > 1 or before.delete_files):
        action = _actions(spark).rewriteDataFiles(jtable)
        if sort_by_row_id:
            jvm: Any = spark._jvm
            order = jvm.org.apache.iceberg.SortOrder.builderFor(jtable.schema()).asc("row_id")
            action = action.sort(order.build())
        else:
            action = action.binPack()
        for key, value in rewrite_options(policy, state=sort_by_row_id).items():
            action = action.option(key, value)
        result = _run(
            "rewrite_data_files", qualified, stamped(action, "rewrite_data_files").execute
        )
        rewritten = int(result.rewrittenDataFilesCount())
        added = int(result.addedDataFilesCount())
        rewritten_deletes = int(result.removedDeleteFilesCount())
        jtable.refresh()
    snapshot = jtable.currentSnapshot()
    if snapshot is not None and int(snapshot.summary().get("total-delete-files") or 0):
        # All of them: after the data rewrite above, what is left is mostly dangling (it
        # points at rewritten files), and a rewrite drops dangling deletes; a lone delete file
        # would otherwise never reach a rewrite group (Iceberg wants two or more).
        action = _actions(spark).rewritePositionDeletes(jtable).option("rewrite-all", "true")
        result = _run(
            "rewrite_position_delete_files",
            qualified,
            stamped(action, "rewrite_position_delete_files").execute,
        )
        rewritten_deletes += int(result.rewrittenDeleteFilesCount())
        jtable.refresh()
        snapshot = jtable.currentSnapshot()
    if snapshot is not None and (
        _size(spark, snapshot.dataManifests(jtable.io())) >= policy.min_input_files
        or _size(spark, snapshot.deleteManifests(jtable.io())) >= policy.min_input_files
    ):
        action = stamped(_actions(spark).rewriteManifests(jtable), "rewrite_manifests")
        result = _run("rewrite_manifests", qualified, action.execute)
        manifests = _size(spark, result.rewrittenManifests())
        jtable.refresh()
    after_history = history_from_spark(spark, jtable)
    new = [
        s.snapshot_id
        for s in after_history.ancestors()
        if s.snapshot_id != before_history.current_id
        and before_history.snapshot(s.snapshot_id) is None
    ]
    return CompactionResult(
        gw,
        table,
        before,
        files_in(after_history),
        rewritten,
        added,
        rewritten_deletes,
        manifests,
        tuple(reversed(new)),
        clock() - started,
    )


def expire_table(
    spark: SparkSession,
    gw: str,
    table: str,
    qualified: str,
    policy: UpkeepPolicy,
    *,
    now_ms: int,
    keep: Callable[[TableHistory], Iterable[int]] = lambda _: (),
    clock: Callable[[], float] = time.monotonic,
) -> ExpiryResult:
    """Expire ``qualified``'s snapshots committed before :func:`expiry_cutoff`, then remove
    the files in its folder that no snapshot references and that are older than the policy's
    orphan age.

    ``keep`` names, from the table's history, the snapshots a watermark still needs. Tags and
    branches (a checkpoint being generated pins its snapshots with tags) are kept by Iceberg.
    """
    started = clock()
    jtable = load_table(spark, qualified)
    history = history_from_spark(spark, jtable)
    cutoff = expiry_cutoff(history, now_ms, policy.retention_ms, keep(history))
    expirable = [s for s in history.snapshots if s.timestamp_ms < cutoff]
    deleted = 0
    if expirable and len(history.snapshots) > 1:
        action = _actions(spark).expireSnapshots(jtable).expireOlderThan(cutoff).retainLast(1)
        result = _run("expire_snapshots", qualified, action.execute)
        deleted = sum(
            int(n)
            for n in (
                result.deletedDataFilesCount(),
                result.deletedPositionDeleteFilesCount(),
                result.deletedEqualityDeleteFilesCount(),
                result.deletedManifestsCount(),
                result.deletedManifestListsCount(),
            )
        )
        jtable.refresh()
    after = history_from_spark(spark, jtable)
    orphans = _run(
        "remove_orphan_files",
        qualified,
        _actions(spark)
        .deleteOrphanFiles(jtable)
        .olderThan(now_ms - policy.orphan_age_ms)
        .usePrefixListing(policy.prefix_listing)
        .execute,
    )
    removed = _size(spark, orphans.orphanFileLocations())
    return ExpiryResult(
        gw,
        table,
        len(history.snapshots),
        len(history.snapshots) - len(after.snapshots),
        cutoff,
        deleted,
        removed,
        clock() - started,
    )
