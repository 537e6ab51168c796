"""Compaction in the sync job: every lake table stays within a bounded number of files, with
every entry exactly once, the watermarks and the state as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.core.schema import TableSchema
from lakesync_platform.pipeline.compaction import compact_due
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import check_log_exactly_once, run_flush
from lakesync_platform.pipeline.state import check_state_matches_log, run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.flush import lake_watermark
from lakesync_platform.spark.history import SnapshotEntry, TableHistory
from lakesync_platform.spark.layout import deltas_table, state_table
from lakesync_platform.spark.upkeep import files_since_rewrite, small_rewrite_options, table_files
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher


def _lineage(*ops: tuple[str, int, int]) -> TableHistory:
    entries = tuple(
        SnapshotEntry(i + 1, i or None, i, op,
                      {"added-data-files": str(data), "added-delete-files": str(deletes)})
        for i, (op, data, deletes) in enumerate(ops)
    )  # fmt: skip
    return TableHistory(
        entries, tuple((e.timestamp_ms, e.snapshot_id) for e in entries), (), len(ops)
    )


def test_files_are_counted_from_the_last_rewrite() -> None:
    assert files_since_rewrite(_lineage()) == 0
    assert files_since_rewrite(_lineage(("append", 1, 0), ("overwrite", 1, 1))) == 3
    history = _lineage(("append", 1, 0), ("replace", 1, 0), ("overwrite", 1, 1), ("append", 0, 0))
    assert files_since_rewrite(history) == 2
    options = small_rewrite_options(1 << 20, state=True)
    assert options["min-file-size-bytes"] == str(1 << 20) and options["min-input-files"] == "2"
    assert int(options["delete-file-threshold"]) > 1_000_000  # large files keep their deletes
    assert options["remove-dangling-deletes"] == "true"
    assert "remove-dangling-deletes" not in small_rewrite_options(1 << 20, state=False)


@pytest.mark.spark
def test_the_sync_job_keeps_each_table_within_bounded_files(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str,
    pusher: Pusher, todos: TableSchema,
) -> None:  # fmt: skip
    every = 3
    env = {"LAKESYNC_COMPACT_EVERY_FILES": str(every)}
    settings = PipelineSettings.from_env(env, data_dir=lake_dir, wal_url=wal_url)
    ctx = PipelineContext(settings, spark=spark, wal=wal)
    log, state = deltas_table(gw), state_table(gw, "todos")
    compactions = 0
    worst = {log: 0, state: 0}
    for n in range(8):
        for i in range(4):  # updates of existing rows (position deletes) and new rows
            pusher.write(
                "alice", f"r{(n * 3 + i) % 9}", title=f"round {n} row {i}", done=n % 2 == 0
            )
        if n % 4 == 3:
            pusher.delete("bob", f"r{n % 9}")
        run_flush(ctx, gw)
        run_state(ctx, gw)
        done = compact_due(ctx, gw)
        compactions += len(done)
        for table in (log, state):
            files = table_files(ctx.lake_catalog, table)
            worst[table] = max(worst[table], files.data_files + files.delete_files)
        # Each run leaves the lake as correct as before: the checks of what it wrote pass, the
        # watermark is the WAL's head.
        assert lake_watermark(spark, gw, ctx.lake_catalog).cursor == wal.max_cursor(gw)
        outcome = check_log_exactly_once(ctx, gw)
        assert outcome.passed, outcome.description
        replay = check_state_matches_log(ctx, gw, "todos")
        assert replay.passed, replay.description
    assert compactions >= 3  # both tables compacted, one more than once
    # Bounded: files added since the last rewrite stay under the threshold, plus what a rewrite
    # leaves (a compacted file and its merged delete file).
    assert worst[log] <= every + 2, worst
    assert worst[state] <= every + 3, worst
    # The state holds exactly what the WAL's row state holds.
    expected = {rid: s for rid, s in wal.row_states(gw, "todos")}
    rows = {r["row_id"]: r for r in spark.table(state).collect()}
    assert set(rows) == set(expected)
    assert all(bool(rows[rid]["_ls$live"]) == s.live for rid, s in expected.items())
    assert spark.table(log).count() == wal.max_cursor(gw)


@pytest.mark.spark
def test_no_compaction_below_the_threshold_or_when_switched_off(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str,
    pusher: Pusher, todos: TableSchema,
) -> None:  # fmt: skip
    for every, expect in (("0", 0), ("100", 0)):
        settings = PipelineSettings.from_env(
            {"LAKESYNC_COMPACT_EVERY_FILES": every}, data_dir=lake_dir, wal_url=wal_url
        )
        ctx = PipelineContext(settings, spark=spark, wal=wal)
        for n in range(3):
            pusher.write("alice", f"r{n}", title="t")
            run_flush(ctx, gw)
            run_state(ctx, gw)
        assert len(compact_due(ctx, gw)) == expect
    with pytest.raises(ValueError, match="LAKESYNC_COMPACT_EVERY_FILES"):
        PipelineSettings.from_env({"LAKESYNC_COMPACT_EVERY_FILES": "-1"}, data_dir=lake_dir)
