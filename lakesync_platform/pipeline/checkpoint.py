"""The checkpoint stage: every live row of a gateway at one cursor → chunks + a manifest.

:func:`run_checkpoint` (holding the lake's lock) chooses a consistent cut of the state tables
(:func:`lakesync_platform.spark.checkpoint.plan_checkpoint`), pins the snapshots it reads with
the Iceberg tag ``lakesync-checkpoint-<C>``, writes each table's live rows as chunks of about
``checkpoint_chunk_bytes`` (:class:`lakesync_platform.sync.checkpoint.ChunkCutter`), then the
manifest's copy and, in one write, the current manifest (write-then-swap: see
:mod:`lakesync_platform.core.checkpoint`). It then removes what is no longer needed
(:func:`plan_removal`): checkpoints superseded more than ``checkpoint_grace_s`` ago (their
chunks, manifest copy and tags), and chunks and tags of generations that never published.
Clients that read the old manifest keep their chunks for that grace period.

:func:`check_checkpoint` is the stage's asset check: every chunk of the current manifest
decodes, holds rows of the table it names, and each table's rows add up to the live rows of
its state table at the tagged snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ..adapters.checkpoints import TMP_MARK, open_checkpoint_store
from ..core.checkpoint import (
    CURRENT_MANIFEST,
    STAMPED_FORMAT,
    CheckpointStore,
    ChunkInfo,
    Manifest,
    StoredObject,
    TableSnapshot,
    archived_manifest,
    checkpoint_tag,
    chunk_cursor,
    chunk_name,
    decode_manifest,
    encode_manifest,
    manifest_cursor,
)
from ..core.errors import LakeSyncError
from ..core.stamped import decode_stamped_response
from ..settings import PipelineSettings
from ..spark.checkpoint import (
    CheckpointPlan,
    drop_tag,
    plan_checkpoint,
    read_rows,
    tag_snapshots,
    tagged_cursors,
)
from ..spark.layout import LIVE_COL, log_table, q, state_table, synced_columns
from ..sync.checkpoint import ChunkCutter
from .context import CheckOutcome, PipelineContext

__all__ = [
    "CheckpointResult",
    "Removal",
    "check_checkpoint",
    "checkpoint_store",
    "current_manifest",
    "plan_removal",
    "run_checkpoint",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What one checkpoint run did for one gateway.

    ``cursor`` is the checkpoint's cursor (the new one, or the current one when nothing changed:
    ``written`` is false); ``rows``/``chunks``/``bytes`` describe it; ``removed`` counts older
    checkpoints removed by this run.
    """

    gateway_id: str
    cursor: int
    written: bool
    rows: int
    chunks: int
    bytes: int
    removed: int
    seconds: float


def checkpoint_store(settings: PipelineSettings) -> CheckpointStore:
    """The store at the settings' checkpoint root (a folder, or S3 with the lake's access)."""
    s3 = settings.object_store
    return open_checkpoint_store(
        settings.checkpoint_root,
        endpoint=s3.endpoint,
        region=s3.region,
        access_key_id=s3.access_key_id,
        secret_access_key=s3.secret_access_key,
        session_token=s3.session_token,
    )


def current_manifest(store: CheckpointStore, gw: str) -> Manifest | None:
    """The manifest of ``gw``'s current checkpoint, if there is one."""
    data = store.read(gw, CURRENT_MANIFEST)
    return None if data is None else decode_manifest(data)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def run_checkpoint(
    ctx: PipelineContext,
    gw: str,
    *,
    now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    clock: Callable[[], float] = time.monotonic,
) -> CheckpointResult:
    """Write a new checkpoint of ``gw`` when its state has moved past the current one, then
    remove what is no longer needed; holding the lake's lock."""
    started = clock()
    settings = ctx.settings
    store = checkpoint_store(settings)
    current = current_manifest(store, gw)
    if current is not None and current.cursor >= ctx.wal.flush_watermark(gw):
        # Nothing reached the lake since: no cut can be newer, and unless something is due
        # for removal no Spark session is needed.
        removal = _removal(settings, store, gw, now_ms())
        if removal is not None and not removal.objects:
            return _unchanged(gw, current, clock() - started)
    schemas = ctx.tables(gw)
    spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
    with ctx.exclusive("checkpoint", gw):
        manifest = current_manifest(store, gw)  # another run may have written one meanwhile
        plan = plan_checkpoint(spark, ctx.lake_catalog, gw, schemas)
        written = plan.cursor > (0 if manifest is None else manifest.cursor)
        if written:
            manifest = _write(ctx, store, plan, now_ms(), started, clock)
        removed = _remove(ctx, store, gw, now_ms())
    if manifest is None:
        return CheckpointResult(gw, 0, False, 0, 0, 0, removed, clock() - started)
    return CheckpointResult(
        gw,
        manifest.cursor,
        written,
        manifest.total_deltas,
        manifest.chunk_count,
        manifest.total_bytes,
        removed,
        clock() - started,
    )


def _unchanged(gw: str, current: Manifest, seconds: float) -> CheckpointResult:
    return CheckpointResult(
        gw,
        current.cursor,
        False,
        current.total_deltas,
        current.chunk_count,
        current.total_bytes,
        0,
        seconds,
    )


def _write(
    ctx: PipelineContext,
    store: CheckpointStore,
    plan: CheckpointPlan,
    now: int,
    started: float,
    clock: Callable[[], float],
) -> Manifest:
    """Write the chunks, the manifest's copy, then the current manifest."""
    gw, cursor = plan.gateway_id, plan.cursor
    tag = checkpoint_tag(cursor)
    tag_snapshots(ctx.spark, plan.tables, tag)
    chunks: list[ChunkInfo] = []
    tables: list[TableSnapshot] = []

    def store_chunk(table: str, done: tuple[bytes, int] | None) -> None:
        if done is not None:
            data, rows = done
            name = chunk_name(cursor, len(chunks))
            store.write(gw, name, data)
            chunks.append(ChunkInfo(name, table, rows, len(data)))

    for table_plan in plan.tables:
        names = [name for name, _ in synced_columns(table_plan.schema)]
        cutter = ChunkCutter(table_plan.table, names, cursor, ctx.settings.checkpoint_chunk_bytes)
        rows = 0
        for row in read_rows(ctx.spark, table_plan):
            store_chunk(table_plan.table, cutter.add(row))
            rows += 1
        store_chunk(table_plan.table, cutter.finish())
        if table_plan.snapshot_id is not None:
            tables.append(TableSnapshot(table_plan.table, table_plan.snapshot_id, rows))
    manifest = Manifest(
        format=STAMPED_FORMAT,
        snapshot_hlc=str(cursor),
        generated_at=_iso(now),
        chunk_count=len(chunks),
        total_deltas=sum(c.rows for c in chunks),
        chunks=[c.name for c in chunks],
        chunk_info=chunks,
        tables=tables,
        tag=tag,
        total_bytes=sum(c.bytes for c in chunks),
        seconds=round(clock() - started, 3),
    )
    data = encode_manifest(manifest)
    store.write(gw, archived_manifest(cursor), data)
    store.write(gw, CURRENT_MANIFEST, data)
    return manifest


@dataclass(frozen=True, slots=True)
class Removal:
    """What to remove from a gateway's checkpoint folder: ``objects`` (names) and the
    checkpoints (``cursors``) whose tags go too; ``kept`` are the checkpoints that stay."""

    objects: list[str]
    cursors: list[int]
    kept: list[int]


def plan_removal(
    objects: Sequence[StoredObject],
    manifests: Mapping[int, Manifest],
    current: int,
    now_ms: int,
    grace_ms: int,
) -> Removal:
    """Pure: which checkpoints and objects go.

    ``manifests`` are the kept manifest copies by cursor, ``current`` the current checkpoint's
    cursor. A checkpoint other than the current one goes once the next newer one was published
    ``grace_ms`` ago (until then a client may still be streaming it); chunks no manifest names
    and temporary files of interrupted writes go once they are ``grace_ms`` old.
    """
    published = sorted(manifests)
    gone: list[int] = []
    for cursor in published:
        if cursor == current:
            continue
        newer = [manifests[c] for c in published if c > cursor]
        superseded = min((_ms(m.generated_at) for m in newer), default=None)
        if superseded is not None and now_ms - superseded >= grace_ms:
            gone.append(cursor)
    kept = [c for c in published if c not in gone]
    named = {name for c in kept for name in manifests[c].chunks}
    remove: list[str] = []
    for cursor in gone:
        remove += manifests[cursor].chunks
        remove.append(archived_manifest(cursor))
    for obj in objects:
        old = now_ms - obj.modified_ms >= grace_ms
        stray_chunk = chunk_cursor(obj.name) is not None and obj.name not in named
        if old and (stray_chunk or TMP_MARK in obj.name) and obj.name not in remove:
            remove.append(obj.name)
    return Removal(remove, gone, kept)


def _removal(
    settings: PipelineSettings, store: CheckpointStore, gw: str, now: int
) -> Removal | None:
    """What :func:`plan_removal` says goes from ``gw``'s folder (``None``: no checkpoint)."""
    current = current_manifest(store, gw)
    if current is None:
        return None
    objects = store.list(gw)
    manifests: dict[int, Manifest] = {current.cursor: current}
    for obj in objects:
        cursor = manifest_cursor(obj.name)
        data = store.read(gw, obj.name) if cursor is not None else None
        if cursor is None or data is None:
            continue
        try:
            manifests[cursor] = decode_manifest(data)
        except LakeSyncError as exc:
            log.warning("checkpoint manifest %s of %s is unreadable: %s", obj.name, gw, exc)
    grace_ms = int(settings.checkpoint_grace_s * 1000)
    return plan_removal(objects, manifests, current.cursor, now, grace_ms)


def _remove(ctx: PipelineContext, store: CheckpointStore, gw: str, now: int) -> int:
    """Remove what :func:`_removal` says, and every checkpoint tag of ``gw``'s state tables
    that belongs to no kept checkpoint; return how many checkpoints went."""
    removal = _removal(ctx.settings, store, gw, now)
    if removal is None:
        return 0
    store.delete(gw, removal.objects)
    kept = set(removal.kept)
    for schema in ctx.tables(gw).values():
        qualified = state_table(gw, log_table(schema))
        for cursor in sorted(tagged_cursors(ctx.spark, ctx.lake_catalog, qualified) - kept):
            drop_tag(ctx.spark, ctx.lake_catalog, qualified, checkpoint_tag(cursor))
    return len(removal.cursors)


def check_checkpoint(ctx: PipelineContext, gw: str) -> CheckOutcome:
    """The current checkpoint is whole: each chunk decodes to the rows of the table it names,
    and each table's rows are the live rows of its state table at the snapshot it was read at.
    """
    store = checkpoint_store(ctx.settings)
    manifest = current_manifest(store, gw)
    if manifest is None:
        return CheckOutcome(True, "no checkpoint yet", {"cursor": 0})
    problems: list[str] = []
    rows: dict[str, int] = {}
    for info in manifest.chunk_info:
        data = store.read(gw, info.name)
        if data is None:
            problems.append(f"{info.name} missing")
            continue
        try:
            blocks, _ = decode_stamped_response(data)
        except LakeSyncError as exc:
            problems.append(f"{info.name}: {exc}")
            continue
        held = sum(len(b) for b in blocks)
        if held != info.rows or any(b.table != info.table for b in blocks):
            problems.append(f"{info.name} does not hold {info.rows} rows of {info.table}")
        rows[info.table] = rows.get(info.table, 0) + held
    spark = ctx.spark
    with ctx.exclusive("check of the checkpoint", gw):
        for snap in manifest.tables:
            live = (
                spark.read.option("snapshot-id", str(snap.snapshot_id))
                .table(state_table(gw, snap.table))
                .filter(q(LIVE_COL))
                .count()  # a numpy integer on a Spark Connect client: int() below
            )
            if live != rows.get(snap.table, 0):
                problems.append(f"{snap.table}: {rows.get(snap.table, 0)} rows, state has {live}")
    return CheckOutcome(
        not problems,
        f"checkpoint at cursor {manifest.cursor}: {manifest.total_deltas} rows in "
        f"{manifest.chunk_count} chunks" + (f"; {'; '.join(problems)}" if problems else ""),
        {
            "cursor": manifest.cursor,
            "rows": manifest.total_deltas,
            "chunks": manifest.chunk_count,
            "problems": problems[:10],
        },
    )
