"""What a stage's results say: one line per result for people, or one JSON document for scripts
(``lakesync run`` prints them).

A line names the stage and what it covered, the counts and the time, in the spirit of dlt's and
Dagster's step lines::

    flush demo: 12 345 entries, WAL 1..12 345, 410 kB into the lake in 1.2 s
    state demo.todos: 1 234 rows changed (1 200 live), log 1..12 345 in 2.0 s
    materialise demo → todos: 1 200 upserted, 34 deleted, state 1..12 345 in 0.3 s
    connector demo/shop: 1 000 records, 12 INSERT, 3 DELETE in 0.8 s
    connector demo/crm: 4 000 records, 4 000 INSERT in 2.1 s; stopped: quota reached (…)
    compact demo.todos: 12 → 1 data files, 3 → 0 delete files, 410 kB → 380 kB in 1.2 s
    expire demo.todos: 5 of 7 snapshots expired (committed before …), 14 files deleted, …
    trim demo: 10 000 entries, 9 800 delta ids; WAL floor 12 000, 2 345 left, 18.2 MB in 0.4 s
    tier demo hot → archive.todos: 120 rows moved (0 kept hot, 0 released) in 0.2 s
    checkpoint demo: 1 200 rows at cursor 12 345, 1 chunk, 98 kB in 1.1 s

The JSON document is ``{"stage": …, "ok": …, "seconds": …, "results": [{"kind": …, …}], "error":
{"code", "message"} | null}``, each result being the stage's result record as is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from ..connectors.model import RunReport
from ..core.errors import LakeSyncError
from ..spark.flush import FlushResult
from ..spark.materialise import MaterialiseResult
from ..spark.state import StateResult
from ..spark.upkeep import CompactionResult, ExpiryResult
from .checkpoint import CheckpointResult
from .lifecycle import TrimResult
from .tiering import TierResult

__all__ = ["StageResult", "describe", "json_document", "number"]

StageResult = (
    FlushResult
    | StateResult
    | MaterialiseResult
    | RunReport
    | TrimResult
    | TierResult
    | CompactionResult
    | ExpiryResult
    | CheckpointResult
)
"""One result of a pipeline stage (a connector's poll, lake upkeep, lifecycle and checkpoints
included)."""


def number(n: int) -> str:
    """``12345`` → ``12 345`` (thousands apart, as the docs write them)."""
    return f"{n:,}".replace(",", " ")


def _size(n: int) -> str:
    if n < 10_000:
        return f"{number(n)} B"
    if n < 10_000_000:
        return f"{n / 1000:.0f} kB"
    return f"{n / 1_000_000:.1f} MB"


def _range(first: int, last: int) -> str:
    return f"{number(first)}..{number(last)}"


def describe(result: StageResult) -> str:
    """One human line for ``result``."""
    took = f"in {result.seconds:.1f} s"
    if isinstance(result, RunReport):
        ops = ", ".join(f"{number(n)} {op}" for op, n in sorted(result.deltas.items()))
        head = f"connector {result.gateway}/{result.connector}"
        line = f"{head}: {number(result.records)} records, {ops or 'no changes'} {took}"
        census = result.census or {}
        if census.get("ranThisRun"):
            last = census["last"]
            line += f"; census: {number(last['vanished'])} vanished"
            line += f", {number(last['missing'])} missing" if last["missing"] else ", consistent"
        if result.stopped:
            quota = result.quota or {}
            used = f" ({number(quota['used'])}/{number(quota['limit'])} API calls used today)"
            line += f"; stopped: {result.stopped}" + (used if quota.get("limit") else "")
        return line
    if isinstance(result, TrimResult):
        return (
            f"trim {result.gateway_id}: {number(result.entries_trimmed)} entries, "
            f"{number(result.ids_trimmed)} delta ids; WAL floor {number(result.log_floor)}, "
            f"{number(result.log_entries)} left, {_size(result.wal_bytes)} {took}"
        )
    if isinstance(result, TierResult):
        return (
            f"tier {result.gateway_id} {result.destination} → {result.cold}.{result.table}: "
            f"{number(result.moved)} rows moved ({number(result.kept)} kept hot, "
            f"{number(result.released)} released) {took}"
        )
    if isinstance(result, CheckpointResult):
        return _describe_checkpoint(result, took)
    if isinstance(result, FlushResult):
        head = f"flush {result.gateway_id}"
        if result.empty:
            return f"{head}: nothing new (the lake holds WAL ..{number(result.to_cursor)}) {took}"
        wal = _range(result.from_cursor, result.to_cursor)
        size = _size(result.lake_bytes)
        return f"{head}: {number(result.entries)} entries, WAL {wal}, {size} into the lake {took}"
    if isinstance(result, CompactionResult | ExpiryResult):
        return _describe_upkeep(result)
    if isinstance(result, StateResult):
        head = f"state {result.gateway_id}.{result.table}"
        if result.to_cursor < result.from_cursor:
            return f"{head}: up to date (log ..{number(result.to_cursor)}) {took}"
        return (
            f"{head}: {number(result.rows_changed)} rows changed "
            f"({number(result.live_changed)} live), log "
            f"{_range(result.from_cursor, result.to_cursor)} {took}"
        )
    head = f"materialise {result.gateway_id} → {result.destination_table}"
    if result.to_cursor < result.from_cursor:
        return f"{head}: up to date (state ..{number(result.to_cursor)}) {took}"
    return (
        f"{head}: {number(result.upserted)} upserted, {number(result.deleted)} deleted, "
        f"state {_range(result.from_cursor, result.to_cursor)} {took}"
    )


def _describe_upkeep(result: CompactionResult | ExpiryResult) -> str:
    """``compact demo.todos: 12 → 1 data files, …`` / ``expire demo.todos: 5 of 7 …``."""
    from ..spark.timetravel import format_ms

    took = f"in {result.seconds:.1f} s"
    if isinstance(result, ExpiryResult):
        return (
            f"expire {result.gateway_id}.{result.table}: {number(result.snapshots_expired)} of "
            f"{number(result.snapshots_before)} snapshots expired (committed before "
            f"{format_ms(result.cutoff_ms)}), {number(result.files_deleted)} files deleted, "
            f"{number(result.orphans_removed)} orphan files removed {took}"
        )
    head = f"compact {result.gateway_id}.{result.table}"
    b, a = result.before, result.after
    if not result.snapshot_ids:
        return (
            f"{head}: nothing to rewrite ({number(b.data_files)} data files, "
            f"{number(b.delete_files)} delete files, {_size(b.bytes)}) {took}"
        )
    return (
        f"{head}: {number(b.data_files)} → {number(a.data_files)} data files, "
        f"{number(b.delete_files)} → {number(a.delete_files)} delete files, "
        f"{_size(b.bytes)} → {_size(a.bytes)} {took}"
    )


def _describe_checkpoint(result: CheckpointResult, took: str) -> str:
    head = f"checkpoint {result.gateway_id}"
    removed = f", {number(result.removed)} older removed" if result.removed else ""
    if result.cursor == 0:
        return f"{head}: nothing in the lake yet {took}"
    if not result.written:
        return (
            f"{head}: up to date (cursor {number(result.cursor)}, "
            f"{number(result.rows)} rows){removed} {took}"
        )
    chunks = f"{number(result.chunks)} chunk{'' if result.chunks == 1 else 's'}"
    return (
        f"{head}: {number(result.rows)} rows at cursor {number(result.cursor)}, {chunks}, "
        f"{_size(result.bytes)}{removed} {took}"
    )


def json_document(
    stage: str,
    results: Sequence[StageResult],
    seconds: float,
    error: LakeSyncError | None = None,
) -> str:
    """The one JSON document of a ``--json`` run (see the module docstring)."""
    kinds = {
        FlushResult: "flush",
        StateResult: "state",
        MaterialiseResult: "materialise",
        RunReport: "connector",
        CompactionResult: "compaction",
        ExpiryResult: "expiry",
        TrimResult: "trim",
        TierResult: "tier",
        CheckpointResult: "checkpoint",
    }
    doc: dict[str, Any] = {
        "stage": stage,
        "ok": error is None,
        "seconds": round(seconds, 3),
        "results": [
            {"kind": kinds[type(r)], **dataclasses.asdict(r), "seconds": round(r.seconds, 3)}
            for r in results
        ],
        "error": None if error is None else {"code": error.code, "message": error.message},
    }
    return json.dumps(doc)
