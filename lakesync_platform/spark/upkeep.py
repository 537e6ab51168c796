"""Lake upkeep of one Iceberg table: compaction, snapshot expiry and orphan removal.

Every step is one of Iceberg's Spark procedures, run by ``CALL lakesync.system.…`` — which a
classic session and a Spark Connect client run alike (no JVM handle is needed):
``rewrite_data_files`` (bin-pack; state tables sorted by ``row_id``, applying their
merge-on-read deletes), ``rewrite_position_delete_files``, ``rewrite_manifests``,
``expire_snapshots`` and ``remove_orphan_files``. The table's metadata (files, snapshots,
manifests) is read with pyiceberg, from the same catalog. Two things the procedures of Iceberg
1.10 cannot do, and what is done instead (checked in its source, ``spark/v3.5/.../procedures``;
Iceberg's main branch is the same):

* **no snapshot properties** — the actions' ``snapshotProperty`` has no procedure argument, so
  compaction commits no longer carry ``lakesync.wal.to`` or :data:`UPKEEP_PROP`. The watermark
  survives anyway: the flush reads it from the newest *ancestor* that carries it (compaction
  commits are skipped), expiry keeps that snapshot whatever its age
  (:func:`expiry_cutoff`'s ``keep``), and where compaction committed to a table and the caller
  passes ``properties`` (the change log's watermark) :func:`compact_table` ends with one empty
  append that carries them and ``lakesync.upkeep=watermark`` — so the current snapshot holds the
  watermark again and the next expiry may drop the pre-compaction snapshots and their files.
  Upkeep's own commits are recognised by their operation (``replace``: only rewrites make it)
  or :data:`UPKEEP_PROP` (:func:`upkeep_commit`).
* **no orphan age under a day** — ``remove_orphan_files`` refuses an ``older_than`` less than
  24 hours ago (unless the server runs with ``spark.testing``). For a shorter age (the tests,
  or an operator who writes the lake only through LakeSync) the table's folder is listed here
  (pyiceberg's file I/O, local disk or S3), the files past the age are handed to the procedure
  as its ``file_list_view``, each stamped with the epoch so its own (day-long) age filter passes
  them, and the procedure decides which of them no snapshot references and deletes those.

:func:`compact_table` rewrites small data files, then position delete files, then manifests.
:func:`expire_table` expires the snapshots older than :func:`expiry_cutoff` (never one the
time-travel window, a watermark or a tag or branch still needs) and removes orphan files. The
callers (:mod:`lakesync_platform.pipeline.upkeep`) hold the lake's lock around each of them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.errors import FlushError
from .history import SnapshotEntry, TableHistory, history_from_pyiceberg
from .lake_files import list_prefix
from .snapshots import load_table

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import Row, SparkSession

__all__ = [
    "UPKEEP_PROP",
    "CompactionResult",
    "ExpiryResult",
    "TableFiles",
    "UpkeepPolicy",
    "compact_small_files",
    "compact_table",
    "expire_table",
    "expiry_cutoff",
    "files_in",
    "files_since_rewrite",
    "rewrite_options",
    "small_rewrite_options",
    "table_files",
    "upkeep_commit",
]

UPKEEP_PROP = "lakesync.upkeep"
"""Snapshot-summary key of the watermark commit compaction makes (``watermark``); the commits of
an earlier release's upkeep name their step in it too."""
_DAY_MS = 86_400_000
_MARGIN_MS = 60_000
"""How far past a day an orphan age must be for the procedure's own check (its clock runs on)."""


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


def upkeep_commit(snapshot: SnapshotEntry) -> bool:
    """Whether upkeep made the commit: a rewrite (operation ``replace``) or a watermark commit
    (:data:`UPKEEP_PROP`)."""
    return snapshot.operation == "replace" or UPKEEP_PROP in snapshot.summary


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


def table_files(catalog: Catalog, qualified: str) -> TableFiles:
    """The totals of a table's current snapshot (no Spark job: its metadata only)."""
    return files_in(history_from_pyiceberg(load_table(catalog, qualified)))


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _timestamp(ms: int) -> str:
    """SQL: a timestamp literal for ``ms`` since the epoch, its offset named (procedure arguments
    must be literals; the offset keeps the session's time zone out of it)."""
    moment = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
    return f"TIMESTAMP '{moment.isoformat(timespec='milliseconds')}'"


def _options(options: Mapping[str, str]) -> str:
    """SQL: ``map('k', 'v', …)``."""
    return (
        "map(" + ", ".join(f"{_sql_string(k)}, {_sql_string(v)}" for k, v in options.items()) + ")"
    )


def _call(spark: SparkSession, procedure: str, qualified: str, args: str = "") -> list[Row]:
    """``CALL lakesync.system.<procedure>(table => qualified, args)``, its rows; a failure as
    one :class:`FlushError` line."""
    extra = f", {args}" if args else ""
    sql = f"CALL lakesync.system.{procedure}(table => {_sql_string(qualified)}{extra})"
    try:
        return spark.sql(sql).collect()
    except Exception as exc:  # Spark's errors (classic or Connect): translate at the edge
        from .java_errors import one_line

        raise FlushError(f"{procedure} of {qualified} failed: {one_line(exc)}") from exc


def _first(rows: list[Row], column: str) -> int:
    return int(rows[0][column] or 0) if rows else 0


def _manifests(table: Table) -> tuple[int, int]:
    """How many data and delete manifests the table's current snapshot has."""
    from pyiceberg.manifest import ManifestContent

    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0, 0
    manifests = snapshot.manifests(table.io)
    deletes = sum(1 for m in manifests if m.content == ManifestContent.DELETES)
    return len(manifests) - deletes, deletes


def compact_table(
    spark: SparkSession,
    catalog: Catalog,
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
    bin-pack. ``properties``: when a step committed, one empty append carrying them (and
    :data:`UPKEEP_PROP` = ``watermark``) follows — the change log's lake watermark, so the
    current snapshot holds it after compaction as after a flush (module docstring).
    """
    started = clock()
    before_history = history_from_pyiceberg(load_table(catalog, qualified))
    before = files_in(before_history)
    rewritten = added = rewritten_deletes = manifests = 0
    if before_history.current is not None and (before.data_files > 1 or before.delete_files):
        rewritten, added, rewritten_deletes = _rewrite_data_files(
            spark, qualified, rewrite_options(policy, state=sort_by_row_id), sort_by_row_id
        )
    jtable = load_table(catalog, qualified)
    current = history_from_pyiceberg(jtable).current
    if current is not None and int(current.summary.get("total-delete-files") or 0):
        # All of them: after the data rewrite above, what is left is mostly dangling (it
        # points at rewritten files), and a rewrite drops dangling deletes; a lone delete file
        # would otherwise never reach a rewrite group (Iceberg wants two or more).
        rows = _call(
            spark,
            "rewrite_position_delete_files",
            qualified,
            f"options => {_options({'rewrite-all': 'true'})}",
        )
        rewritten_deletes += _first(rows, "rewritten_delete_files_count")
        jtable = load_table(catalog, qualified)
    data_manifests, delete_manifests = _manifests(jtable)
    if max(data_manifests, delete_manifests) >= policy.min_input_files:
        rows = _call(spark, "rewrite_manifests", qualified)
        manifests = _first(rows, "rewritten_manifests_count")
    after_history = _stamped(spark, catalog, qualified, before_history, properties)
    return CompactionResult(
        gw,
        table,
        before,
        files_in(after_history),
        rewritten,
        added,
        rewritten_deletes,
        manifests,
        _committed(before_history, after_history),
        clock() - started,
    )


def _committed(before: TableHistory, after: TableHistory) -> tuple[int, ...]:
    """The snapshots ``after`` holds that ``before`` did not: what a compaction committed,
    oldest first."""
    new = [s.snapshot_id for s in after.ancestors() if before.snapshot(s.snapshot_id) is None]
    return tuple(reversed(new))


def _rewrite_data_files(
    spark: SparkSession, qualified: str, options: Mapping[str, str], sort_by_row_id: bool
) -> tuple[int, int, int]:
    """``rewrite_data_files`` (sorted by ``row_id`` or bin-packed) with ``options``: the data
    files it rewrote and added, the delete files it removed."""
    strategy = "'sort', sort_order => 'row_id ASC NULLS FIRST'" if sort_by_row_id else "'binpack'"
    rows = _call(
        spark,
        "rewrite_data_files",
        qualified,
        f"strategy => {strategy}, options => {_options(options)}",
    )
    return (
        _first(rows, "rewritten_data_files_count"),
        _first(rows, "added_data_files_count"),
        _first(rows, "removed_delete_files_count"),
    )


def _stamped(
    spark: SparkSession,
    catalog: Catalog,
    qualified: str,
    before: TableHistory,
    properties: Mapping[str, str],
) -> TableHistory:
    """The table's history after a compaction, its ``properties`` committed first when the
    compaction committed and there are any (the change log's watermark)."""
    after = history_from_pyiceberg(load_table(catalog, qualified))
    if properties and after.current_id != before.current_id:
        _commit_properties(spark, qualified, {**properties, UPKEEP_PROP: "watermark"})
        after = history_from_pyiceberg(load_table(catalog, qualified))
    return after


def _commit_properties(spark: SparkSession, qualified: str, properties: Mapping[str, str]) -> None:
    """One empty append to ``qualified`` whose snapshot summary carries ``properties`` (an
    append of no rows still commits a snapshot)."""
    writer = spark.table(qualified).limit(0).writeTo(qualified)
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    try:
        writer.append()
    except Exception as exc:  # Spark's errors (classic or Connect): translate at the edge
        from .java_errors import one_line

        raise FlushError(f"the watermark commit to {qualified} failed: {one_line(exc)}") from exc


def expire_table(
    spark: SparkSession,
    catalog: Catalog,
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
    history = history_from_pyiceberg(load_table(catalog, qualified))
    cutoff = expiry_cutoff(history, now_ms, policy.retention_ms, keep(history))
    expirable = [s for s in history.snapshots if s.timestamp_ms < cutoff]
    deleted = 0
    if expirable and len(history.snapshots) > 1:
        rows = _call(
            spark,
            "expire_snapshots",
            qualified,
            f"older_than => {_timestamp(int(cutoff))}, retain_last => 1",
        )
        deleted = sum(
            _first(rows, column)
            for column in (
                "deleted_data_files_count",
                "deleted_position_delete_files_count",
                "deleted_equality_delete_files_count",
                "deleted_manifest_files_count",
                "deleted_manifest_lists_count",
            )
        )
    after = history_from_pyiceberg(load_table(catalog, qualified))
    removed = _remove_orphans(spark, catalog, qualified, policy, now_ms)
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


def _remove_orphans(
    spark: SparkSession, catalog: Catalog, qualified: str, policy: UpkeepPolicy, now_ms: int
) -> int:
    """``remove_orphan_files`` of the files older than the policy's orphan age; how many went.
    An age under a day goes through a listing of our own (module docstring)."""
    older_than = now_ms - policy.orphan_age_ms
    if policy.orphan_age_ms >= _DAY_MS + _MARGIN_MS:
        listing = "true" if policy.prefix_listing else "false"
        args = f"older_than => {_timestamp(older_than)}, prefix_listing => {listing}"
        return len(_call(spark, "remove_orphan_files", qualified, args))
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    table = load_table(catalog, qualified)
    location = str(table.location()).rstrip("/")
    candidates = [
        (f.location,)
        for f in list_prefix(table.io, location)
        if f.modified_ms < older_than and not _hidden(f.location, location)
    ]
    if not candidates:
        return 0
    view = f"lakesync_orphan_candidates_{uuid.uuid4().hex}"
    schema = StructType([StructField("file_path", StringType(), False)])
    listed: Any = spark.createDataFrame(candidates, schema)
    listed = listed.selectExpr("file_path", "timestamp_millis(0) AS last_modified")
    listed = listed.select(
        listed["file_path"], listed["last_modified"].cast(TimestampType()).alias("last_modified")
    )
    listed.createOrReplaceTempView(view)
    try:
        cutoff = now_ms - _DAY_MS - _MARGIN_MS
        args = f"older_than => {_timestamp(cutoff)}, file_list_view => {_sql_string(view)}"
        return len(_call(spark, "remove_orphan_files", qualified, args))
    finally:
        spark.catalog.dropTempView(view)


def _hidden(path: str, root: str) -> bool:
    """Whether a file under ``root`` sits in a hidden file or folder (``_``/``.`` prefix),
    which Iceberg's own listing leaves alone."""

    def bare(location: str) -> str:
        return location.split(":", 1)[-1].lstrip("/")

    relative = bare(path).removeprefix(bare(root)).lstrip("/")
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def files_since_rewrite(history: TableHistory) -> int:
    """Pure: how many data and delete files the commits since the table's last rewrite added
    (all of its lineage when it was never rewritten): what compaction in the sync job waits
    for (:func:`compact_small_files`)."""
    added = 0
    for snapshot in history.ancestors():
        if snapshot.operation == "replace":
            break
        summary = snapshot.summary
        added += int(summary.get("added-data-files", "0"))
        added += int(summary.get("added-delete-files", "0"))
    return added


def small_rewrite_options(small_file_bytes: int, *, state: bool) -> dict[str, str]:
    """Pure: ``rewrite_data_files`` options that rewrite only a table's small files: those under
    ``small_file_bytes`` (at least two of them in a partition), into files of up to 128 MiB.
    Large files are left as they are, their merge-on-read deletes included, so the cost follows
    what was added since the last rewrite, not the table — until Iceberg's delete-ratio
    threshold (30 % of a file's rows deleted) makes a large file worth rewriting too."""
    options = {
        "min-input-files": "2",
        "min-file-size-bytes": str(small_file_bytes),
        "target-file-size-bytes": str(max(small_file_bytes * 16, 128 * 1024 * 1024)),
        "delete-file-threshold": str(2**31 - 1),
        # As in rewrite_options: the lake's lock keeps other writers out meanwhile.
        "use-starting-sequence-number": "false",
    }
    if state:
        options["remove-dangling-deletes"] = "true"
    return options


def compact_small_files(
    spark: SparkSession,
    catalog: Catalog,
    gw: str,
    table: str,
    qualified: str,
    small_file_bytes: int,
    *,
    sort_by_row_id: bool,
    properties: Mapping[str, str] = {},
    clock: Callable[[], float] = time.monotonic,
) -> CompactionResult:
    """Rewrite ``qualified``'s small data files (:func:`small_rewrite_options`) and merge its
    position delete files (two or more in a partition), then, when a step committed and
    ``properties`` are given, commit them as :func:`compact_table` does (the change log's lake
    watermark). The light compaction the sync job runs once :func:`files_since_rewrite` passes
    its threshold; the daily upkeep (:func:`compact_table`) rewrites everything."""
    started = clock()
    before_history = history_from_pyiceberg(load_table(catalog, qualified))
    before = files_in(before_history)
    rewritten = added = rewritten_deletes = 0
    if before.data_files > 1:
        options = small_rewrite_options(small_file_bytes, state=sort_by_row_id)
        rewritten, added, rewritten_deletes = _rewrite_data_files(
            spark, qualified, options, sort_by_row_id
        )
    if files_in(history_from_pyiceberg(load_table(catalog, qualified))).delete_files > 1:
        rows = _call(
            spark,
            "rewrite_position_delete_files",
            qualified,
            f"options => {_options({'min-input-files': '2'})}",
        )
        rewritten_deletes += _first(rows, "rewritten_delete_files_count")
    after_history = _stamped(spark, catalog, qualified, before_history, properties)
    return CompactionResult(
        gw,
        table,
        before,
        files_in(after_history),
        rewritten,
        added,
        rewritten_deletes,
        0,
        _committed(before_history, after_history),
        clock() - started,
    )
