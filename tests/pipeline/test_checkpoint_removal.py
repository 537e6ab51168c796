"""Which superseded checkpoints and stray objects a checkpoint run removes (the pure rule)."""

from __future__ import annotations

from datetime import UTC, datetime

from lakesync_platform.core.checkpoint import Manifest, StoredObject
from lakesync_platform.pipeline.checkpoint import plan_removal

HOUR = 3_600_000
T0 = 1_800_000_000_000


def _manifest(cursor: int, published_ms: int, chunks: int = 2) -> Manifest:
    names = [f"chunk-{cursor}-{i:03d}.bin" for i in range(chunks)]
    iso = datetime.fromtimestamp(published_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return Manifest(str(cursor), iso, chunks, 10, names)


def test_a_checkpoint_goes_a_grace_period_after_the_next_one_was_published() -> None:
    manifests = {
        10: _manifest(10, T0),
        20: _manifest(20, T0 + HOUR),
        30: _manifest(30, T0 + 3 * HOUR),
    }
    now = T0 + 3 * HOUR + 60_000  # 30 was published a minute ago
    removal = plan_removal([], manifests, 30, now, HOUR)
    # 10 was superseded by 20 two hours ago; 20 by 30 a minute ago: a reader may still stream it
    assert removal.cursors == [10] and removal.kept == [20, 30]
    assert sorted(removal.objects) == ["chunk-10-000.bin", "chunk-10-001.bin", "manifest-10.json"]
    assert plan_removal([], manifests, 30, now + HOUR, HOUR).cursors == [10, 20]
    # the current checkpoint never goes, however old
    assert 30 in plan_removal([], manifests, 30, now + 100 * HOUR, HOUR).kept


def test_leftovers_of_a_failed_run_go_once_as_old_as_the_grace_period() -> None:
    manifests = {20: _manifest(20, T0)}
    now = T0 + 2 * HOUR
    objects = [
        StoredObject("chunk-20-000.bin", 10, T0),  # the current checkpoint's: kept
        StoredObject("chunk-25-000.bin", 10, T0),  # never published, old: goes
        StoredObject("chunk-26-000.bin", 10, now - 1000),  # maybe being written now: kept
        StoredObject("manifest.json.tmp-0abc", 3, T0),  # an interrupted write: goes
        StoredObject("notes.txt", 3, T0),  # not ours: kept
    ]
    removal = plan_removal(objects, manifests, 20, now, HOUR)
    assert removal.cursors == [] and removal.kept == [20]
    assert sorted(removal.objects) == ["chunk-25-000.bin", "manifest.json.tmp-0abc"]
