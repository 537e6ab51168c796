"""Following a gateway: a sync run keeps syncing pass after pass while changes keep coming, each
pass checked, and ends once the gateway is quiet; the Dagster sync job follows when told to."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.definitions import build_definitions
from lakesync_platform.core.errors import FlushError
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.follow import SyncPass, follow, sync_pass
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.layout import state_table
from lakesync_platform.wal.store import WriteAheadLog
from resources.sync_runs import sync_job_name

from .conftest import Pusher
from .test_upkeep import _defs_folder

pytestmark = pytest.mark.spark


def _titles(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT row_id, title FROM todos WHERE deleted_at IS NULL"))


def _context(spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, defs: Path) -> Any:
    env = {"LAKESYNC_DEFS_DIR": str(defs), "LAKESYNC_FOLLOW_SECONDS": "1"}
    settings = PipelineSettings.from_env(env, data_dir=lake_dir, wal_url=wal_url)
    return PipelineContext(settings, spark=spark, wal=wal)


def test_a_followed_gateway_is_synced_pass_after_pass_until_it_is_quiet(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str,
    pusher: Pusher, tmp_path: Path,
) -> None:  # fmt: skip
    dest = tmp_path / "dest.db"
    ctx = _context(spark, lake_dir, wal, wal_url, _defs_folder(tmp_path / "defs", gw, dest))
    pusher.write("alice", "r0", title="first")
    first = sync_pass(ctx, gw)
    assert first.flush.entries == 1 and all(c.passed for c in first.checks.values())
    assert set(first.checks) == {
        "exactly_once", "matches_log_replay todos", "matches_state local.todos"
    }  # fmt: skip

    passes: list[SyncPass] = []
    arrived: dict[str, float] = {}

    def writer() -> None:  # a client writing while the run follows
        for n in range(1, 4):
            time.sleep(0.3)
            pusher.write("alice", f"r{n}", title=f"row {n}")
            arrived[f"r{n}"] = time.monotonic()

    thread = threading.Thread(target=writer)
    started = time.monotonic()
    thread.start()
    made = follow(ctx, gw, follow_s=3.0, max_s=120.0, on_pass=passes.append, poll_s=0.05)
    thread.join()
    assert made == len(passes) >= 1
    assert sum(p.flush.entries for p in passes) == 3  # each change once, over the passes
    assert all(c.passed for p in passes for c in p.checks.values())
    assert _titles(dest) == {"r0": "first", "r1": "row 1", "r2": "row 2", "r3": "row 3"}
    # It ended on its own, some 3 s after the last change.
    assert time.monotonic() - max(arrived.values()) >= 3.0
    assert time.monotonic() - started < 100
    # Quiet from the start: no pass, back after follow_s.
    assert follow(ctx, gw, follow_s=0.5, max_s=10.0, on_pass=passes.append) == 0


def test_a_pass_whose_check_fails_stops_the_following(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str,
    pusher: Pusher, tmp_path: Path,
) -> None:  # fmt: skip
    dest = tmp_path / "dest.db"
    ctx = _context(spark, lake_dir, wal, wal_url, _defs_folder(tmp_path / "defs", gw, dest))
    pusher.write("alice", "r0", title="first")
    sync_pass(ctx, gw)
    # The state diverges behind the pipeline's back; the next pass's replay check sees it.
    spark.sql(f"UPDATE {state_table(gw, 'todos')} SET title = 'tampered' WHERE row_id = 'r0'")
    pusher.write("bob", "r0", done=True)
    with pytest.raises(FlushError, match="matches_log_replay todos"):
        follow(ctx, gw, follow_s=2.0, max_s=60.0, on_pass=lambda _: None, poll_s=0.05)


def test_the_sync_job_follows_when_told_to(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str,
    pusher: Pusher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    dest = tmp_path / "dest.db"
    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(_defs_folder(tmp_path / "defs", gw, dest)),
        "LAKESYNC_FOLLOW_SECONDS": "5",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pusher.write("alice", "r0", title="first")
    stop = threading.Event()

    def writer() -> None:  # once the job's own flush took r0, two more writes
        while wal.stats(gw).backlog_entries and not stop.wait(0.05):
            pass
        for n in range(1, 3):
            if stop.wait(1.0):
                return
            pusher.write("alice", f"r{n}", title=f"row {n}")

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with dg.DagsterInstance.ephemeral() as instance:
            job = build_definitions(env).resolve_job_def(sync_job_name(gw))
            result = job.execute_in_process(instance=instance)
    finally:
        stop.set()
        thread.join()
    assert result.success
    follow_passes = [
        e for e in result.get_asset_materialization_events()
        if e.materialization.metadata.get("pass") and e.asset_key.path[-1] == "lakesync_deltas"
    ]  # fmt: skip
    assert len(follow_passes) >= 1  # the writes after the job's own steps came in passes
    assert _titles(dest) == {"r0": "first", "r1": "row 1", "r2": "row 2"}
