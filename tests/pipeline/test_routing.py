"""Routing and fan-out: tables routed to PostgreSQL, MariaDB and SQLite destinations; a
best-effort destination that is down for a run catches up on the next; a primary that fails
fails the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.materialise import (
    check_destination_lag,
    destination_lag,
    run_materialise,
)
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.mariadb]

UNREACHABLE = "1"  # nothing listens on port 1 of 127.0.0.1


def _declare(defs: Path, gw: str, pg: str, maria_db: str, lite: Path) -> None:
    defs.mkdir(exist_ok=True)
    (defs / "routes.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n"
        "  - {table: todos, columns: [{name: title, type: string}]}\n"
        "  - {table: notes, columns: [{name: body, type: string}]}\n"
        "destinations:\n"
        f"  - {{name: warehouse, kind: postgres, url: '{pg}', tables: [todos]}}\n"
        f"  - {{name: local, kind: sqlite, url: 'sqlite:///{lite}', tables: [notes]}}\n"
        "  - name: backup\n"
        "    kind: mysql\n"
        f"    url: 'mysql+pymysql://root:@127.0.0.1:${{BACKUP_PORT}}/{maria_db}'\n"
        "    tables: [todos]\n"
        "    role: best_effort\n"
    )


def _rows(url: str, table: str) -> dict[str, str | None]:
    adapter = SqlAdapter.connect(url)
    try:
        col = "title" if table == "todos" else "body"
        return {r["row_id"]: r[col] for r in adapter.read_rows(table)}
    finally:
        adapter.close()


def _context(
    spark: Any, wal: WriteAheadLog, lake_dir: Path, wal_url: str, defs: Path, port: str
) -> PipelineContext:
    settings = PipelineSettings(
        data_dir=lake_dir,
        wal_url=wal_url,
        defs_dir=defs,
        env={"BACKUP_PORT": port},
        best_effort_attempts=2,
        best_effort_wait_s=0.01,
    )
    return PipelineContext(settings, spark=spark, wal=wal)


def _sync(ctx: PipelineContext, gw: str) -> Any:
    run_flush(ctx, gw)
    run_state(ctx, gw)
    return run_materialise(ctx, gw)


def test_route_by_table_and_fan_out_with_a_best_effort_destination_down_for_a_run(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    postgres_url: str,
    mariadb_url: str,
    tmp_path: Path,
) -> None:
    defs, lite = tmp_path / "defs", tmp_path / "local.db"
    maria_db = mariadb_url.rsplit("/", 1)[1]
    _declare(defs, gw, postgres_url, maria_db, lite)
    pusher.write("a", "t1", title="one")
    pusher.write("a", "n1", table="notes", body="note")

    run = _sync(_context(spark, wal, lake_dir, wal_url, defs, "3306"), gw)
    assert sorted((d, r.table) for d, r in run.results) == [
        ("backup", "todos"),
        ("local", "notes"),
        ("warehouse", "todos"),
    ]
    assert run.failures == [] and run.lag == {("backup", "todos"): 0}
    assert _rows(postgres_url, "todos") == {"t1": "one"}  # todos → warehouse (and backup)
    assert _rows(f"sqlite:///{lite}", "notes") == {"n1": "note"}  # notes → local only
    assert _rows(mariadb_url, "todos") == {"t1": "one"}

    # The backup is down for a run: the primaries go on, the backup's lag shows.
    pusher.write("b", "t1", title="one, edited")
    pusher.write("b", "t2", title="two")
    down = _context(spark, wal, lake_dir, wal_url, defs, UNREACHABLE)
    run = _sync(down, gw)
    assert [(d, r.table) for d, r in run.results] == [("warehouse", "todos"), ("local", "notes")]
    [failure] = run.failures
    assert (failure.destination, failure.table, failure.attempts) == ("backup", "todos", 2)
    assert run.lag == {("backup", "todos"): None}  # its watermark cannot be read either
    assert not check_destination_lag(down, gw, "backup", "todos").passed
    assert _rows(postgres_url, "todos") == {"t1": "one, edited", "t2": "two"}
    up = _context(spark, wal, lake_dir, wal_url, defs, "3306")
    lag = destination_lag(up, gw, "backup", "todos")
    assert lag is not None and lag > 0
    assert not check_destination_lag(up, gw, "backup", "todos").passed
    assert _rows(mariadb_url, "todos") == {"t1": "one"}

    # Back up (nothing new in the lake): it catches up from its own watermark, once.
    run = run_materialise(up, gw)
    [caught_up] = [r for d, r in run.results if d == "backup"]
    assert (caught_up.upserted, caught_up.deleted) == (2, 0)
    assert run.failures == [] and run.lag == {("backup", "todos"): 0}
    assert _rows(mariadb_url, "todos") == {"t1": "one, edited", "t2": "two"}
    assert check_destination_lag(up, gw, "backup", "todos").passed
    again = run_materialise(up, gw)
    assert [(d, r.upserted) for d, r in again.results] == [
        ("warehouse", 0),
        ("local", 0),
        ("backup", 0),
    ]


def test_a_failing_primary_fails_the_run(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    tmp_path: Path,
) -> None:
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "d.yaml").write_text(
        f"gateway: {gw}\n"
        "tables: [{table: todos, columns: [{name: title, type: string}]}]\n"
        "destinations:\n"
        f"  - {{name: main, kind: postgres, url: 'postgresql+psycopg://postgres@127.0.0.1:"
        f"{UNREACHABLE}/x'}}\n"
        f"  - {{name: copy, kind: sqlite, url: 'sqlite:///{tmp_path}/c.db', role: best_effort}}\n"
    )
    pusher.write("a", "t1", title="one")
    ctx = _context(spark, wal, lake_dir, wal_url, defs, UNREACHABLE)
    run_flush(ctx, gw)
    run_state(ctx, gw)
    with pytest.raises(AdapterError):
        run_materialise(ctx, gw)


def test_destination_assets_carry_their_role_and_best_effort_ones_a_lag_check(
    lake_dir: Path, wal_url: str, wal: WriteAheadLog, gw: str, tmp_path: Path
) -> None:
    import dagster as dg

    from assets.definitions import build_definitions
    from assets.gateway_assets import ROLE_TAG

    defs_dir = tmp_path / "defs"
    defs_dir.mkdir()
    (defs_dir / "d.yaml").write_text(
        f"gateway: {gw}\n"
        "tables: [{table: todos, columns: [{name: title, type: string}]}]\n"
        "destinations:\n"
        f"  - {{name: main, kind: sqlite, url: 'sqlite:///{tmp_path}/m.db'}}\n"
        f"  - {{name: copy, kind: sqlite, url: 'sqlite:///{tmp_path}/c.db', role: best_effort}}\n"
    )
    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(defs_dir),
    }
    graph = build_definitions(env).get_repository_def().asset_graph
    main, copy = dg.AssetKey([gw, "main", "todos"]), dg.AssetKey([gw, "copy", "todos"])
    assert graph.get(main).tags[ROLE_TAG] == "primary"
    assert graph.get(copy).tags[ROLE_TAG] == "best_effort"
    checks = {(k.asset_key, k.name) for k in graph.asset_check_keys}
    assert (copy, "lag_behind_primary") in checks and (main, "lag_behind_primary") not in checks
    assert {(main, "matches_state"), (copy, "matches_state")} <= checks


def test_the_sync_job_succeeds_with_a_best_effort_destination_down(
    lake_dir: Path,
    wal_url: str,
    wal: WriteAheadLog,
    gw: str,
    pusher: Pusher,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dagster as dg

    from assets.definitions import build_definitions
    from resources.sync_runs import sync_job_name

    defs_dir = tmp_path / "defs"
    defs_dir.mkdir()
    (defs_dir / "d.yaml").write_text(
        f"gateway: {gw}\n"
        "tables: [{table: todos, columns: [{name: title, type: string}]}]\n"
        "destinations:\n"
        f"  - {{name: main, kind: sqlite, url: 'sqlite:///{tmp_path}/m.db'}}\n"
        "  - {name: copy, kind: postgres, role: best_effort,\n"
        f"     url: 'postgresql+psycopg://postgres@127.0.0.1:{UNREACHABLE}/x'}}\n"
    )
    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(defs_dir),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pusher.write("a", "t1", title="one")
    defs = build_definitions(env)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(sync_job_name(gw)).execute_in_process(instance=instance)
        run = instance.get_run_by_id(result.run_id)
    assert result.success
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert f"{gw}/main/todos" in done and f"{gw}/copy/todos" not in done
    assert run is not None
    assert run.tags["lakesync/lag.copy.todos"] == "unknown"
    assert "Connection refused" in run.tags["lakesync/failed.copy.todos"]
    checks = {(c.asset_key.path[1], c.check_name): c for c in result.get_asset_check_evaluations()}
    # The copy's checks are skipped with it; the primary's run and pass.
    assert sorted(checks) == [
        ("lakesync_deltas", "exactly_once"),
        ("main", "matches_state"),
        ("state", "matches_log_replay"),
    ]
    assert all(c.passed for c in checks.values())
