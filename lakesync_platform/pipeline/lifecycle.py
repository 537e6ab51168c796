"""The lifecycle stage's WAL half: trim the hot WAL of what the lake holds (docs/pipeline.md,
"Hot WAL retention").

:func:`run_trim` reads both watermarks — the WAL's flush watermark and the lake's own, read back
from the Iceberg snapshot summaries like the flush does — and trims log entries at or below the
lower one that break the retention (:class:`~lakesync_platform.settings.RetentionSettings`:
older than its age, or beyond its newest-N count), then forgets delta ids stamped before the
dedup horizon. The WAL does the deleting in short batches (:mod:`lakesync_platform.wal.trim`),
so pushes keep flowing; nothing here holds the lake's lock (it only reads the lake).

What a trim removes is read by nothing but the flush: pulls, the WebSocket feed and checkpoints
are cut from row state, which stays, as do delivery state and the action results. A flush that
would need trimmed entries (the lake fell behind the WAL's floor: restored from an old backup)
fails with :class:`~lakesync_platform.core.errors.FlushError` instead of skipping them
(:func:`lakesync_platform.spark.flush.plan_flush`). :func:`check_wal_retention` is the asset
check that trimming keeps up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..core.hlc import encode
from ..core.wal import WalStore
from ..settings import RetentionSettings
from ..spark.flush import lake_watermark
from .context import CheckOutcome, PipelineContext

__all__ = [
    "CHECK_SLACK_S",
    "TrimResult",
    "check_wal_retention",
    "run_trim",
    "trim_bound",
    "trim_wal",
]

CHECK_SLACK_S = 7_200.0
"""How far past the retention an entry in the lake may be before the check fails: two periods
of the hourly lifecycle schedule."""


@dataclass(frozen=True, slots=True)
class TrimResult:
    """What one trim of one gateway did, and the hot WAL after it.

    ``log_floor``: entries at or below it are gone from the WAL (the lake holds them);
    ``log_entries``: entries left; ``wal_bytes``/``wal_free_bytes``: the whole WAL database on
    disk and, of that, free for reuse (``None``: not known); ``dedup_horizon``: the HLC before
    which accepted delta ids may be forgotten.
    """

    gateway_id: str
    entries_trimmed: int
    ids_trimmed: int
    log_floor: int
    log_entries: int
    flush_watermark: int
    lake_watermark: int
    wal_bytes: int
    wal_free_bytes: int | None
    dedup_horizon: int
    seconds: float


def trim_bound(flush_watermark: int, lake_watermark: int, keep_cursor: int | None) -> int:
    """Pure: the highest cursor a trim may reach — what both the WAL's flush watermark and the
    lake's own watermark cover, and (with a count limit) below the newest entries kept."""
    bound = min(flush_watermark, lake_watermark)
    return bound if keep_cursor is None else min(bound, keep_cursor)


def trim_wal(
    wal: WalStore, gw: str, lake_mark: int, policy: RetentionSettings, now_ms: int
) -> tuple[int, int]:
    """Trim ``gw``'s entries by ``policy`` below the flush watermark and ``lake_mark`` (the
    lake's own watermark), then its delta ids before the dedup horizon, and make the space
    reusable; ``(entries, ids)``."""
    keep = None if policy.wal_entries is None else wal.cursor_keeping(gw, policy.wal_entries)
    bound = trim_bound(wal.flush_watermark(gw), lake_mark, keep)
    before_ms = now_ms - int(policy.wal_age_s * 1000)
    entries = wal.trim(gw, bound, before_ms=before_ms, batch=policy.batch)
    horizon = encode(max(now_ms - int(policy.dedup_age_s * 1000), 0), 0)
    ids = wal.trim_delta_ids(gw, horizon, batch=policy.batch)
    if entries or ids:
        wal.reclaim()
    return entries, ids


def run_trim(
    ctx: PipelineContext,
    gw: str,
    *,
    retention: RetentionSettings | None = None,
    now_ms: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TrimResult:
    """Trim ``gw``'s hot WAL by ``retention`` (default: the settings'); see the module."""
    started = clock()
    policy = retention or ctx.settings.retention
    now = int(time.time() * 1000) if now_ms is None else now_ms
    wal = ctx.wal
    lake = lake_watermark(ctx.spark, gw, ctx.lake_catalog).cursor
    flushed = wal.flush_watermark(gw)
    trimmed, ids = trim_wal(wal, gw, lake, policy, now)
    stats = wal.stats(gw)
    used = wal.storage()
    return TrimResult(
        gw,
        trimmed,
        ids,
        stats.log_floor,
        stats.log_entries,
        flushed,
        lake,
        used.bytes,
        used.free_bytes,
        wal.dedup_horizon(gw),
        clock() - started,
    )


def check_wal_retention(
    ctx: PipelineContext, gw: str, *, now_ms: int | None = None
) -> CheckOutcome:
    """Trimming keeps up: the lake holds everything at or below the WAL's floor, and no entry
    the lake holds has outlived the retention age by more than :data:`CHECK_SLACK_S` or the
    retention again, whichever is longer (the lake falling behind, or the lifecycle schedule
    stopped, fails it; an entry flushed since the last trim does not)."""
    policy = ctx.settings.retention
    now = int(time.time() * 1000) if now_ms is None else now_ms
    wal = ctx.wal
    floor = wal.log_floor(gw)
    lake = lake_watermark(ctx.spark, gw, ctx.lake_catalog).cursor
    meta: dict[str, object] = {"log_floor": floor, "lake_watermark": lake}
    if lake < floor:
        return CheckOutcome(
            False,
            f"the lake holds the log up to {lake} but the WAL was trimmed up to {floor}: "
            f"entries {lake + 1}..{floor} are in neither",
            meta,
        )
    oldest = wal.read_entries(gw, floor, 1)
    covered = min(wal.flush_watermark(gw), lake)
    limit_ms = now - int((policy.wal_age_s + max(policy.wal_age_s, CHECK_SLACK_S)) * 1000)
    if oldest and oldest[0].cursor <= covered and oldest[0].ingest_ms < limit_ms:
        age_s = (now - oldest[0].ingest_ms) / 1000
        meta["oldest_age_s"] = round(age_s, 1)
        return CheckOutcome(
            False,
            f"entry {oldest[0].cursor} is in the lake and {age_s:.0f} s old, far over the "
            f"retention of {policy.wal_age_s:.0f} s: the lifecycle job is not trimming",
            meta,
        )
    meta["log_entries"] = wal.stats(gw).log_entries
    return CheckOutcome(True, f"hot WAL floor {floor}, within the retention", meta)
