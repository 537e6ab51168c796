"""The lifecycle stage on the real local Spark: the hot WAL trimmed below both watermarks (a
flush refuses a lake behind the floor), and a tiered destination whose moved rows stay in one
tier across later materialise runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.errors import FlushError
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import check_log_exactly_once, run_flush
from lakesync_platform.pipeline.lifecycle import check_wal_retention, run_trim
from lakesync_platform.pipeline.materialise import (
    check_destination_matches_state,
    run_materialise,
)
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.pipeline.tiering import run_tiering
from lakesync_platform.settings import PipelineSettings, RetentionSettings
from lakesync_platform.spark.layout import deltas_table
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import NOW_MS, Pusher

pytestmark = [pytest.mark.spark]


def _context(
    spark: Any, wal: WriteAheadLog, lake_dir: Path, wal_url: str, defs: Path
) -> PipelineContext:
    settings = PipelineSettings(data_dir=lake_dir, wal_url=wal_url, defs_dir=defs)
    return PipelineContext(settings, spark=spark, wal=wal)


def test_trim_keeps_below_both_watermarks_and_a_lagging_lake_stops_the_flush(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: Any,
) -> None:
    ctx = _context(spark, wal, lake_dir, wal_url, lake_dir / "no-defs")
    for i in range(6):
        pusher.write("a", f"t{i}", title=f"todo {i}")
    run_flush(ctx, gw)
    for i in range(6, 9):
        pusher.write("a", f"t{i}", title=f"todo {i}")
    head = wal.max_cursor(gw)
    wal.set_flush_watermark(gw, head)  # the WAL believes more than the lake holds
    now = NOW_MS + 10_000
    keep_all = run_trim(ctx, gw, retention=RetentionSettings(wal_age_s=3600), now_ms=now)
    assert keep_all.entries_trimmed == 0  # younger than the retention
    done = run_trim(ctx, gw, retention=RetentionSettings(wal_age_s=0, dedup_age_s=0), now_ms=now)
    assert (done.entries_trimmed, done.log_floor, done.lake_watermark) == (6, 6, 6)
    assert done.log_entries == 3 and done.ids_trimmed == 9 and done.wal_bytes > 0
    assert check_log_exactly_once(ctx, gw).passed
    assert check_wal_retention(ctx, gw, now_ms=now).passed
    run_flush(ctx, gw)  # the rest reaches the lake from above the floor
    assert check_log_exactly_once(ctx, gw).passed
    stale = check_wal_retention(ctx, gw, now_ms=now + 10 * 86_400_000)  # no trim for 10 days
    assert not stale.passed and "not trimming" in stale.description

    spark.sql(f"DROP TABLE {deltas_table(gw)}")  # the lake lost its change log
    outcome = check_wal_retention(ctx, gw, now_ms=now)
    assert not outcome.passed and "in neither" in outcome.description
    with pytest.raises(FlushError, match="trimmed up to 6"):
        run_flush(ctx, gw)


def _declare(defs: Path, gw: str, hot: str, cold: Path) -> None:
    defs.mkdir(exist_ok=True)
    (defs / "tiers.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n"
        "  - {table: todos, softDelete: true, columns: [{name: title, type: string}]}\n"
        "destinations:\n"
        f"  - name: hot\n    kind: postgres\n    url: '{hot}'\n"
        "    lifecycle: {to: archive, after: P1D}\n"
        f"  - {{name: archive, kind: sqlite, url: 'sqlite:///{cold}', role: cold}}\n"
    )


def _titles(url: str) -> dict[str, tuple[str | None, bool]]:
    adapter = SqlAdapter.connect(url)
    try:
        return {
            r["row_id"]: (r["title"], r["deleted_at"] is not None)
            for r in adapter.read_rows("todos")
        }
    finally:
        adapter.close()


@pytest.mark.postgres
def test_tiered_rows_move_once_and_come_back_hot_when_they_change(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    defs, cold = tmp_path / "defs", tmp_path / "cold.db"
    _declare(defs, gw, postgres_url, cold)
    ctx = _context(spark, wal, lake_dir, wal_url, defs)

    def sync() -> None:
        run_flush(ctx, gw)
        run_state(ctx, gw)
        assert [d for d, _ in run_materialise(ctx, gw).results] == ["hot"]  # never the cold one

    for i in range(1, 4):
        pusher.write("a", f"r{i}", title=f"todo {i}")
    sync()
    later = datetime.now(UTC) + timedelta(days=2)
    [moved] = run_tiering(ctx, gw, now=later)
    assert (moved.destination, moved.cold, moved.moved) == ("hot", "archive", 3)
    assert run_tiering(ctx, gw, now=later)[0].moved == 0  # a re-run moves nothing
    assert _titles(postgres_url) == {}
    assert check_destination_matches_state(ctx, gw, "hot", "todos").passed

    pusher.write("b", "r2", title="changed")
    pusher.delete("b", "r3")
    pusher.write("b", "r4", title="todo 4")
    sync()
    assert _titles(postgres_url) == {
        "r2": ("changed", False),
        "r3": ("todo 3", True),  # back hot as it was, then soft-deleted
        "r4": ("todo 4", False),
    }
    assert _titles(f"sqlite:///{cold}") == {"r1": ("todo 1", False)}  # one tier each
    assert check_destination_matches_state(ctx, gw, "hot", "todos").passed
    assert run_tiering(ctx, gw)[0].moved == 0  # nothing is a day old yet
    sync()  # nothing changed: nothing resurrected, nothing duplicated
    assert sorted(_titles(postgres_url)) == ["r2", "r3", "r4"]
    assert sorted(_titles(f"sqlite:///{cold}")) == ["r1"]


def test_the_lifecycle_job_trims_on_its_schedule_and_checks_retention(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dagster as dg

    from assets.definitions import build_definitions
    from resources.sync_runs import lifecycle_job_name

    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(tmp_path / "no-defs"),
        "LAKESYNC_WAL_RETENTION_SECONDS": "0",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for i in range(4):
        pusher.write("a", f"t{i}", title=f"todo {i}")
    run_flush(_context(spark, wal, lake_dir, wal_url, tmp_path / "no-defs"), gw)
    defs = build_definitions(env)
    job = lifecycle_job_name(gw)
    assert defs.resolve_schedule_def(f"{job}_schedule").cron_schedule == "17 * * * *"
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(job).execute_in_process(instance=instance)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    assert event.asset_key == dg.AssetKey([gw, "hot_wal"])
    meta = event.materialization.metadata
    assert (meta["entries_trimmed"].value, meta["wal_floor"].value) == (4, 4)
    assert meta["wal_bytes"].value > 0
    (check,) = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("retention_holds", True)
    assert wal.log_floor(gw) == 4
