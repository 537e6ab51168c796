"""``lakesync migrate``: a PostgreSQL destination copied into MariaDB, twice, to the same rows
and watermark; unknown names stop it with exit status 2."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.cli.migrate import migrate
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.pipeline.migrate import MigratedTable
from lakesync_platform.spark.materialise import watermark_key

TODOS = parse_table_schema(
    {
        "table": "todos",
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "done", "type": "boolean"},
            {"name": "priority", "type": "number"},
            {"name": "meta", "type": "json"},
        ],
        "softDelete": True,
    }
)


def _defs(tmp_path: Path, gw: str, source: str, target: str) -> Path:
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "d.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n"
        "  - table: todos\n"
        "    softDelete: true\n"
        "    columns: [{name: title, type: string}, {name: done, type: boolean},\n"
        "              {name: priority, type: number}, {name: meta, type: json}]\n"
        "destinations:\n"
        f"  - {{name: old, kind: postgres, url: '{source}'}}\n"
        f"  - {{name: new, kind: mysql, url: '{target}', role: best_effort}}\n"
    )
    return defs


def _snapshot(adapter: SqlAdapter, gw: str) -> tuple[dict[str, Any], int]:
    rows = {
        r["row_id"]: {k: r[k] for k in ("title", "done", "priority", "meta")}
        | {"deleted": r["deleted_at"] is not None}
        for r in adapter.read_back(TODOS)
    }
    return rows, adapter.watermark(watermark_key(gw, TODOS, "todos"))


@pytest.mark.postgres
@pytest.mark.mariadb
def test_migrate_twice_gives_the_same_destination(
    postgres_url: str, mariadb_url: str, gw: str, tmp_path: Path
) -> None:
    source = SqlAdapter.connect(postgres_url)
    target = SqlAdapter.connect(mariadb_url)
    try:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        source.ensure_table(TODOS)
        with source.transaction() as conn:
            source.upsert_rows(
                conn,
                TODOS,
                [
                    ("r1", "one", True, 1.0, json.dumps({"a": [1, 2]})),
                    ("r2", "two", False, None, None),
                    ("r3", "gone", None, 3.5, json.dumps("x")),
                ],
                now,
            )
            source.delete_rows(conn, TODOS, ["r3"], now)
            source.set_watermark(conn, watermark_key(gw, TODOS, "todos"), 42, expected=0)
        args = ["--from", "old", "--to", "new", "--gw", gw, "--data-dir", str(tmp_path)]
        args += ["--defs", str(_defs(tmp_path, gw, postgres_url, mariadb_url))]
        runner = CliRunner()
        first = runner.invoke(migrate, args)
        assert first.exit_code == 0, first.output
        assert first.stdout.strip() == (
            f"migrated 3 rows (1 deleted) in 1 tables from old to new (gateway {gw})"
        )
        assert "  todos: 3 rows copied" in first.stderr.splitlines()
        copied = _snapshot(target, gw)
        assert copied == _snapshot(source, gw)
        assert copied[1] == 42  # materialise continues from where the source stood

        second = runner.invoke(migrate, [*args, "--json", "--tables", "todos"])
        assert second.exit_code == 0, second.output
        report = json.loads(second.output)
        assert report["tables"] == [{"table": "todos", "rows": 3, "deleted": 1, "watermark": 42}]
        assert _snapshot(target, gw) == copied
    finally:
        source.close()
        target.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--from", "nope", "--to", "new"], "unknown destination 'nope'"),
        (["--from", "old", "--to", "nope"], "unknown destination 'nope' of gateway"),
        (["--from", "old", "--to", "new", "--tables", "todos,nope"], "unknown table 'nope'"),
        (["--from", "old", "--to", "new", "--gw", "other"], "unknown gateway 'other'"),
    ],
)
def test_unknown_names_stop_with_exit_2(
    extra: list[str], message: str, gw: str, tmp_path: Path
) -> None:
    defs = _defs(tmp_path, gw, "postgresql+psycopg://u@127.0.0.1:1/x", "mysql+pymysql://u@h/x")
    args = ["--data-dir", str(tmp_path), "--defs", str(defs), *extra]
    if "--gw" not in extra:
        args += ["--gw", gw]
    result = CliRunner().invoke(migrate, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_large_table_is_copied_in_batches_and_a_run_that_failed_midway_is_run_again(
    gw: str, tmp_path: Path
) -> None:
    from lakesync_platform.pipeline.context import PipelineContext
    from lakesync_platform.pipeline.migrate import migrate_destination
    from lakesync_platform.settings import PipelineSettings

    old, new = f"sqlite:///{tmp_path / 'old.db'}", f"sqlite:///{tmp_path / 'new.db'}"
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "d.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n  - {table: todos, columns: [{name: title, type: string}]}\n"
        f"destinations:\n  - {{name: old, kind: sqlite, url: '{old}'}}\n"
        f"  - {{name: new, kind: sqlite, url: '{new}'}}\n"
    )
    schema = parse_table_schema(
        {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    )
    key = watermark_key(gw, schema, "todos")
    source, target = SqlAdapter.connect(old), SqlAdapter.connect(new)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        source.ensure_table(schema)
        with source.transaction() as conn:
            rows = [
                (f"r{i:05d}", "same" if i in (15_001, 15_002) else f"t{i}") for i in range(20_000)
            ]
            source.upsert_rows(conn, schema, rows, now)
            source.delete_rows(conn, schema, [f"r{i:05d}" for i in range(0, 20_000, 1000)], now)
            source.set_watermark(conn, key, 42, expected=0)
        # The target refuses the fourth batch (rows 15 000-19 999): two equal titles.
        target.ensure_table(schema)
        with target.transaction() as conn:
            conn.exec_driver_sql("CREATE UNIQUE INDEX one_title ON todos (title)")
        settings = PipelineSettings.from_env({}, data_dir=tmp_path, defs_dir=defs)
        for attempt in range(2):
            copied: list[tuple[str, int]] = []
            ctx = PipelineContext(settings)

            def run(ctx: PipelineContext = ctx, copied: list[tuple[str, int]] = copied) -> Any:
                return migrate_destination(
                    ctx, gw, "old", "new", batch_rows=5000, on_rows=lambda *a: copied.append(a)
                )

            try:
                if attempt == 0:
                    with pytest.raises(AdapterError, match="UNIQUE"):
                        run()
                    # three batches are in, the watermark is where it was
                    assert copied == [("todos", 5000), ("todos", 10_000), ("todos", 15_000)]
                    assert len(target.read_rows("todos")) == 15_000
                    assert target.watermark(key) == 0
                    with target.transaction() as conn:
                        conn.exec_driver_sql("DROP INDEX one_title")
                else:
                    report = run()
                    assert copied == [("todos", n) for n in (5000, 10_000, 15_000, 20_000)]
                    assert report.tables == [MigratedTable("todos", 20_000, 20, 42)]
            finally:
                ctx.close()

        def state(adapter: SqlAdapter) -> dict[str, tuple[str, bool]]:
            return {
                r["row_id"]: (r["title"], r["deleted_at"] is not None)
                for r in adapter.read_back(schema)
            }

        assert state(target) == state(source) and len(state(target)) == 20_000
        assert target.watermark(key) == 42
        # the command: a step line for the table, the rows after each batch, the report
        args = ["--from", "old", "--to", "new", "--gw", gw, "--data-dir", str(tmp_path)]
        result = CliRunner().invoke(migrate, [*args, "--defs", str(defs), "--batch-rows", "7000"])
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"migrated 20000 rows (20 deleted) in 1 tables from old to new (gateway {gw})\n"
        )
        lines = result.stderr.splitlines()
        assert lines[:4] == [
            "migrate todos (old → new) …",
            "  todos: 7 000 rows copied",
            "  todos: 14 000 rows copied",
            "  todos: 20 000 rows copied",
        ]
        assert re.fullmatch(r"migrate todos done in \d+\.\d s", lines[4]) and len(lines) == 5
        assert state(target) == state(source) and target.watermark(key) == 42
    finally:
        source.close()
        target.close()
