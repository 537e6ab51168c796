"""Checkpoints for tests that need one without the pipeline: the WAL's row state written with the
same chunk codec and manifest as the Spark job (``lakesync_platform.pipeline.checkpoint``), which
reads the lake's state tables instead (tests/pipeline/test_checkpoint.py runs that one)."""

from __future__ import annotations

from collections import defaultdict

from lakesync_platform.core.checkpoint import (
    CURRENT_MANIFEST,
    STAMPED_FORMAT,
    CheckpointStore,
    ChunkInfo,
    Manifest,
    archived_manifest,
    chunk_name,
    encode_manifest,
)
from lakesync_platform.core.stamped import decode_stamped_response
from lakesync_platform.core.wal import StoredRow, WalStore
from lakesync_platform.sync.checkpoint import ChunkCutter, stored_row


def write_checkpoint(
    wal: WalStore, gw: str, store: CheckpointStore, *, chunk_bytes: int = 16 << 20
) -> Manifest:
    """Write every live row of ``gw``'s row state as a checkpoint at the WAL's head."""
    cursor = wal.max_cursor(gw)
    by_table: dict[str, list[StoredRow]] = defaultdict(list)
    with wal.pull_read(gw, "checkpoint-kit", 0, 0, record=False) as reader:
        after = 0
        while page := reader.scan(after, 1000):
            for row in page:
                if row.state.live:
                    by_table[row.table].append(row)
            after = page[-1].position
    known = wal.table_columns(gw)
    chunks: list[ChunkInfo] = []
    for table, rows in sorted(by_table.items()):
        cutter = ChunkCutter(table, known.get(table, ()), cursor, chunk_bytes)
        for done in [*(cutter.add(r) for r in rows), cutter.finish()]:
            if done is not None:
                name = chunk_name(cursor, len(chunks))
                store.write(gw, name, done[0])
                chunks.append(ChunkInfo(name, table, done[1], len(done[0])))
    manifest = Manifest(
        format=STAMPED_FORMAT,
        snapshot_hlc=str(cursor),
        generated_at="2026-01-01T00:00:00.000+00:00",
        chunk_count=len(chunks),
        total_deltas=sum(c.rows for c in chunks),
        chunks=[c.name for c in chunks],
        chunk_info=chunks,
        total_bytes=sum(c.bytes for c in chunks),
    )
    store.write(gw, archived_manifest(cursor), encode_manifest(manifest))
    store.write(gw, CURRENT_MANIFEST, encode_manifest(manifest))
    return manifest


def stamped_rows(frame: bytes) -> list[StoredRow]:
    """The rows of a stamped frame (or chunk), as row state."""
    blocks, _ = decode_stamped_response(frame)
    return [stored_row(b, i) for b in blocks for i in range(len(b))]
