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
from lakesync_platform.pipeline.context import CheckOutcome, PipelineContext
from lakesync_platform.pipeline.follow import SyncPass, follow, sync_pass
from lakesync_platform.pipeline.materialise import MaterialiseRun
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.flush import FlushResult
from lakesync_platform.wal.store import WriteAheadLog
from resources.sync_runs import sync_job_name

from .conftest import Pusher
from .test_upkeep import _defs_folder


def _titles(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT row_id, title FROM todos WHERE deleted_at IS NULL"))


def _context(spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, defs: Path) -> Any:
    env = {"LAKESYNC_DEFS_DIR": str(defs), "LAKESYNC_FOLLOW_SECONDS": "1"}
    settings = PipelineSettings.from_env(env, data_dir=lake_dir, wal_url=wal_url)
    return PipelineContext(settings, spark=spark, wal=wal)


@pytest.mark.spark
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


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Wal:
    """The WAL's backlog as a following run sees it: entries arrive at given times."""

    def __init__(self, clock: _Clock, arrivals: list[float]) -> None:
        self.clock, self.arrivals = clock, arrivals

    def stats(self, gw: str) -> Any:
        waiting = sum(1 for t in self.arrivals if t <= self.clock.now)
        return type("Stats", (), {"backlog_entries": waiting})()


def _pass(checks: dict[str, CheckOutcome]) -> SyncPass:
    flushed = FlushResult("gw", 1, 1, 1, 10, 1, 0.0)
    return SyncPass(flushed, [], [], MaterialiseRun(), checks, 0.5)


def test_following_ends_once_quiet_and_stops_at_a_failed_check() -> None:
    clock = _Clock()
    wal = _Wal(clock, [0.0, 2.0, 9.0])
    ctx: Any = type("Ctx", (), {"wal": wal})()
    made: list[float] = []

    def run_pass(_ctx: Any, _gw: str) -> SyncPass:
        wal.arrivals = [t for t in wal.arrivals if t > clock.now]  # this pass flushed them
        made.append(clock.now)
        clock.now += 0.5
        return _pass({"exactly_once": CheckOutcome(True, "ok")})

    kwargs: dict[str, Any] = {"clock": clock, "sleep": clock.sleep, "run_pass": run_pass}
    # Changes at 0 s and 2 s, then quiet: it ends 5 s after the last pass, before the 9 s one.
    passes = follow(ctx, "gw", follow_s=5.0, max_s=60.0, on_pass=lambda _: None, **kwargs)
    assert passes == 2 and made[0] == 0.0 and 2.0 <= made[1] < 2.5
    assert 7.0 <= clock.now < 8.0
    # At most max_s in all, however busy.
    clock.now, wal.arrivals = 0.0, [float(t) for t in range(100)]
    assert follow(ctx, "gw", follow_s=5.0, max_s=10.0, on_pass=lambda _: None, **kwargs) <= 11

    def failing(_ctx: Any, _gw: str) -> SyncPass:
        return _pass({"matches_log_replay todos": CheckOutcome(False, "1 row differs")})

    clock.now, wal.arrivals = 0.0, [0.0]
    kwargs["run_pass"] = failing
    with pytest.raises(FlushError, match="matches_log_replay todos: 1 row differs"):
        follow(ctx, "gw", follow_s=5.0, max_s=60.0, on_pass=lambda _: None, **kwargs)


@pytest.mark.spark
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
