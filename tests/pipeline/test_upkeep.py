"""Lake upkeep: compaction and expiry keep every entry exactly once; tags, the time-travel window
and young files survive expiry; the small-files check; ``lakesync run compact``."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from assets.definitions import build_definitions
from lakesync_platform.cli.run import run
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.materialise import run_materialise
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.pipeline.upkeep import check_small_files
from lakesync_platform.settings import PipelineSettings, UpkeepSettings
from lakesync_platform.spark.history import SnapshotEntry, TableHistory
from lakesync_platform.spark.layout import WAL_TO_PROP, deltas_table, state_table
from lakesync_platform.spark.snapshots import current_snapshot, load_table
from lakesync_platform.spark.upkeep import UPKEEP_PROP, expiry_cutoff, rewrite_options
from lakesync_platform.spark.upkeep import UpkeepPolicy as Policy
from lakesync_platform.wal.store import WriteAheadLog
from resources.sync_runs import sync_job_name
from resources.upkeep_runs import upkeep_job_name

from .conftest import TODOS, Pusher


def _history(*snapshots: tuple[int, int], refs: dict[int, str] | None = None) -> TableHistory:
    """A straight lineage of ``(id, timestamp_ms)`` snapshots, each current in turn."""
    from lakesync_platform.spark.history import Ref

    entries = tuple(
        SnapshotEntry(sid, snapshots[i - 1][0] if i else None, ts, "append", {})
        for i, (sid, ts) in enumerate(snapshots)
    )
    log = tuple((ts, sid) for sid, ts in snapshots)
    tags = tuple(Ref(name, "tag", sid) for sid, name in (refs or {}).items())
    return TableHistory(entries, log, tags, snapshots[-1][0])


def test_expiry_cutoff_keeps_what_the_window_and_the_watermarks_need() -> None:
    day = 86_400_000
    history = _history((1, 0), (2, 10 * day), (3, 12 * day))
    # Day 13, a 7-day window from day 6: snapshot 1 was current then (until day 10), so time
    # travel to day 6 needs it although it is older than the window.
    assert expiry_cutoff(history, 13 * day, 7 * day) == 0
    # Day 20: the window starts at day 13, when snapshot 3 was current; 1 and 2 may go.
    assert expiry_cutoff(history, 20 * day, 7 * day) == 12 * day
    # ... unless a watermark needs snapshot 2.
    assert expiry_cutoff(history, 20 * day, 7 * day, keep=[2]) == 10 * day
    # A snapshot no longer held is ignored; an empty table's cut-off is the window's start.
    assert expiry_cutoff(history, 20 * day, 7 * day, keep=[99]) == 12 * day
    assert expiry_cutoff(TableHistory((), (), (), None), 20 * day, 7 * day) == 13 * day


def test_rewrite_options_and_upkeep_settings() -> None:
    policy = Policy(min_input_files=3, target_file_bytes=1000, delete_file_threshold=1)
    assert rewrite_options(policy, state=False) == {
        "min-input-files": "3",
        "target-file-size-bytes": "1000",
        "use-starting-sequence-number": "false",
    }
    state = rewrite_options(policy, state=True)
    assert state["delete-file-threshold"] == "1" and state["remove-dangling-deletes"] == "true"
    assert policy.small_file_bytes == 750
    settings = UpkeepSettings.from_env(
        {"LAKESYNC_SNAPSHOT_RETENTION_SECONDS": "60", "LAKESYNC_COMPACT_MIN_INPUT_FILES": "2"}
    )
    assert (settings.snapshot_retention_s, settings.min_input_files) == (60.0, 2)
    assert UpkeepSettings.from_env({}).snapshot_retention_s == 7 * 86_400
    with pytest.raises(ValueError, match="LAKESYNC_COMPACT_MIN_INPUT_FILES"):
        UpkeepSettings.from_env({"LAKESYNC_COMPACT_MIN_INPUT_FILES": "1"})
    with pytest.raises(ValueError, match="LAKESYNC_ORPHAN_AGE_SECONDS"):
        UpkeepSettings.from_env({"LAKESYNC_ORPHAN_AGE_SECONDS": "soon"})


def _defs_folder(folder: Path, gw: str, dest_db: Path) -> Path:
    folder.mkdir(exist_ok=True)
    doc = {
        "gateway": gw,
        "tables": [
            {"table": "todos", "columns": [{"name": c.name, "type": c.type} for c in TODOS.columns]}
        ],
        "destinations": [
            {"name": "local", "kind": "sqlite", "url": f"sqlite:///{dest_db}", "tables": ["todos"]}
        ],
    }
    (folder / "todos.yaml").write_text(yaml.safe_dump(doc))
    return folder


def _round(pusher: Pusher, n: int) -> None:
    """Writes, updates and deletes touching old and new rows."""
    pusher.write("a", f"r{n}", title=f"new {n}", done=False, priority=n)
    pusher.write("b", "r0", title=f"r0 in round {n}", meta={"round": n})
    if n >= 2:
        pusher.delete("a", f"r{n - 1}")
    if n == 3:
        pusher.write("c", "r1", title="resurrected")


def _destination(path: Path) -> dict[str, tuple[Any, bool]]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT row_id, title, deleted_at FROM todos").fetchall()
    return {rid: (title, deleted is not None) for rid, title, deleted in rows}


def _expected(wal: WriteAheadLog, gw: str) -> dict[str, tuple[Any, bool]]:
    return {
        rid: (state.values().get("title") if state.live else None, not state.live)
        for rid, state in wal.row_states(gw, "todos")
    }


@pytest.mark.spark
def test_flush_compact_expire_flush_state_materialise_keeps_every_entry_once(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(_defs_folder(tmp_path / "defs", gw, tmp_path / "dest.db")),
        "LAKESYNC_COMPACT_MIN_INPUT_FILES": "2",
        "LAKESYNC_MAX_SMALL_FILES": "1",
        "LAKESYNC_SNAPSHOT_RETENTION_SECONDS": "0",  # expire everything not pinned
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ctx = PipelineContext(PipelineSettings.from_env(env), spark=spark, wal=wal)
    for n in (1, 2):  # two flushes: two small files in the log's one partition
        _round(pusher, n)
        run_flush(ctx, gw)
        run_state(ctx, gw)
    run_materialise(ctx, gw)
    log_name = deltas_table(gw)
    head = wal.max_cursor(gw)
    small = check_small_files(ctx, gw)
    assert not small.passed and small.metadata["max_small_files"] == 2
    assert small.metadata["worst_table"] == "lakesync_deltas"

    defs = build_definitions(env)
    schedule = defs.resolve_schedule_def(f"{upkeep_job_name(gw)}_schedule")
    assert (schedule.job_name, schedule.cron_schedule) == (upkeep_job_name(gw), "0 3 * * *")
    job = defs.resolve_job_def(upkeep_job_name(gw))
    with dg.DagsterInstance.ephemeral() as instance:
        upkeep = job.execute_in_process(instance=instance)
    assert upkeep.success
    events = {
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in upkeep.get_asset_materialization_events()
    }
    compaction, expiry = events[f"{gw}/upkeep/compaction"], events[f"{gw}/upkeep/expiry"]
    tables = compaction["tables"].value
    assert tables["lakesync_deltas"]["data_files"] == [2, 1]
    assert tables["todos"]["delete_files"][0] > 0 and tables["todos"]["delete_files"][1] == 0
    assert compaction["data_files_after"].value < compaction["data_files_before"].value
    assert expiry["snapshots_expired"].value > 0
    (check,) = upkeep.get_asset_check_evaluations()
    assert check.check_name == "small_files" and check.passed

    # Compaction's last commit to the change log carries the lake watermark (the procedures'
    # rewrites cannot; an empty commit after them does); expiry left that one snapshot.
    log_commits = [int(i) for i in compaction["snapshot_ids"].value["lakesync_deltas"]]
    current = ctx.lake_catalog.load_table((gw, "lakesync_deltas")).current_snapshot()
    assert current.snapshot_id == log_commits[-1] and len(log_commits) >= 2
    summary = current.summary.additional_properties
    assert summary.get(WAL_TO_PROP) == str(head)
    assert summary.get(UPKEEP_PROP) == "watermark"
    assert spark.sql(f"SELECT count(*) FROM {log_name}.snapshots").first()[0] == 1
    state_rows = spark.table(state_table(gw, "todos")).count()

    # Then the pipeline goes on: every entry exactly once everywhere (the job's own checks).
    _round(pusher, 3)
    with dg.DagsterInstance.ephemeral() as instance:
        sync = defs.resolve_job_def(sync_job_name(gw)).execute_in_process(instance=instance)
    assert sync.success
    checks = sync.get_asset_check_evaluations()
    assert {c.check_name for c in checks} == {"exactly_once", "matches_log_replay", "matches_state"}
    assert all(c.passed for c in checks), [c.description for c in checks]
    flushed = next(
        e.materialization.metadata
        for e in sync.get_asset_materialization_events()
        if e.asset_key.to_user_string() == f"{gw}/lakesync_deltas"
    )
    assert flushed["wal_range"].value == f"{head + 1}..{wal.max_cursor(gw)}"
    # Every commit's snapshot is in the run's metadata: read the run's output as it left it.
    meta = {
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in sync.get_asset_materialization_events()
    }
    state_now = current_snapshot(ctx.lake_catalog, state_table(gw, "todos")).snapshot_id
    assert meta[f"{gw}/state/todos"]["snapshot_id"].value == str(state_now)
    assert meta[f"{gw}/local/todos"]["state_snapshot_id"].value == str(state_now)
    log_now = current_snapshot(ctx.lake_catalog, log_name).snapshot_id
    assert flushed["snapshot_id"].value == str(log_now)
    lake = spark.table(log_name).groupBy().agg({"cursor": "count"}).first()[0]
    assert lake == wal.max_cursor(gw) == spark.table(log_name).select("cursor").distinct().count()
    assert spark.table(state_table(gw, "todos")).count() == state_rows + 1  # r3 is new
    dest, expected = _destination(tmp_path / "dest.db"), _expected(wal, gw)
    assert {r: t for r, (t, dead) in dest.items() if not dead} == {
        r: t for r, (t, dead) in expected.items() if not dead
    }
    # Rows deleted before their first materialisation never reached the destination.
    assert {r for r, (_, dead) in dest.items() if dead} <= {
        r for r, (_, dead) in expected.items() if dead
    }


@pytest.mark.spark
def test_run_compact_keeps_tagged_snapshots_and_young_files(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    tmp_path: Path,
) -> None:
    settings = PipelineSettings.from_env({}, data_dir=lake_dir, wal_url=wal_url)
    ctx = PipelineContext(settings, spark=spark, wal=wal)
    pusher.write("a", "r1", title="first")
    first = run_flush(ctx, gw)
    pusher.write("a", "r2", title="second")
    second = run_flush(ctx, gw)
    pusher.write("a", "r3", title="third")
    run_flush(ctx, gw)
    log_name = deltas_table(gw)
    # A checkpoint being generated pins the snapshot it reads with a tag; a branch pins too.
    tag = f"lakesync-checkpoint-{first.to_cursor}"
    spark.sql(f"ALTER TABLE {log_name} CREATE TAG `{tag}` AS OF VERSION {first.snapshot_id}")
    spark.sql(f"ALTER TABLE {log_name} CREATE BRANCH audit AS OF VERSION {second.snapshot_id}")
    data = Path(load_table(ctx.lake_catalog, log_name).location().removeprefix("file:")) / "data"
    old, young = data / "left-by-a-crashed-writer.parquet", data / "being-written.parquet"
    old.write_bytes(b"not referenced")
    young.write_bytes(b"not referenced yet")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "t.yaml").write_text(
        f"gateway: {gw}\ntables:\n  - {{table: todos, columns: [{{name: title, type: string}}]}}\n"
    )
    env = {
        "LAKESYNC_SNAPSHOT_RETENTION_SECONDS": "0",
        "LAKESYNC_ORPHAN_AGE_SECONDS": "3600",
        "LAKESYNC_COMPACT_MIN_INPUT_FILES": "2",
    }
    common = ["--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs), "--wal-url", wal_url]
    result = CliRunner(env=env).invoke(run, ["compact", *common])
    assert result.exit_code == 0, result.output
    took = r"in \d+\.\d s"
    assert re.fullmatch(
        rf"compact {gw}\.lakesync_deltas: 3 → 1 data files, 0 → 0 delete files, "
        rf"[\d .]+ k?B → [\d .]+ k?B {took}\n"
        rf"expire {gw}\.lakesync_deltas: 3 of 6 snapshots expired \(committed before "
        rf"[-\d: .]+ UTC\), \d+ files deleted, 1 orphan files removed {took}\n",
        result.stdout,
    ), result.stdout
    for step in (f"compact {gw}", f"compact {gw}.lakesync_deltas", f"expire {gw}.lakesync_deltas"):
        assert re.search(rf"^{re.escape(step)} done {took}$", result.stderr, re.M), result.stderr
    snapshots = {r[0] for r in spark.sql(f"SELECT snapshot_id FROM {log_name}.snapshots").collect()}
    current = current_snapshot(ctx.lake_catalog, log_name).snapshot_id
    assert snapshots == {first.snapshot_id, second.snapshot_id, current}  # tag, branch, main
    tagged = spark.read.option("tag", tag).table(log_name).select("row_id").collect()
    assert [r[0] for r in tagged] == ["r1"]  # its data files were kept too
    branch = spark.read.option("branch", "audit").table(log_name).select("row_id").collect()
    assert sorted(r[0] for r in branch) == ["r1", "r2"]
    assert not old.exists() and young.exists()
    young.unlink()


def test_upkeep_results_in_the_json_document() -> None:
    from lakesync_platform.pipeline.report import json_document
    from lakesync_platform.spark.upkeep import CompactionResult, ExpiryResult, TableFiles

    files = TableFiles(3, 1, 300, 9, 4)
    compacted = CompactionResult("g", "t", files, files, 3, 1, 1, 0, (7,), 0.5)
    expired = ExpiryResult("g", "t", 4, 3, 1_000, 5, 1, 0.25)
    doc = json.loads(json_document("compact", [compacted, expired], 1.0))
    assert [r["kind"] for r in doc["results"]] == ["compaction", "expiry"]
    assert doc["results"][0]["before"]["data_files"] == 3
    assert doc["results"][0]["snapshot_ids"] == [7]
    assert doc["results"][1]["snapshots_expired"] == 3
