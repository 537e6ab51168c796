"""``lakesync migrate``: a PostgreSQL destination copied into MariaDB, twice, to the same rows
and watermark; unknown names stop it with exit status 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.cli.migrate import migrate
from lakesync_platform.core.schema import parse_table_schema
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
        assert first.output.strip() == (
            f"migrated 3 rows (1 deleted) in 1 tables from old to new (gateway {gw})"
        )
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
