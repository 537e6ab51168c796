"""WAL → flush → state → materialise round trips into SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.spark.flush import flush_gateway
from lakesync_platform.spark.materialise import materialise_table
from lakesync_platform.spark.state import update_state
from lakesync_platform.spark.wal_source import jdbc_source
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher

pytestmark = pytest.mark.spark


def _run(
    spark: Any,
    lake_catalog: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    schema: TableSchema,
    adapter: SqlAdapter,
) -> None:
    flush_gateway(spark, lake_catalog, wal, jdbc_source(wal_url), gw)
    update_state(spark, lake_catalog, gw, schema)
    materialise_table(spark, lake_catalog, gw, schema, adapter)


def _dest(adapter: SqlAdapter) -> dict[str, dict[str, Any]]:
    out = {}
    for row in adapter.read_rows("todos"):
        meta = row["meta"]
        out[row["row_id"]] = {
            "title": row["title"],
            "done": None if row["done"] is None else bool(row["done"]),
            "priority": row["priority"],
            # psycopg decodes JSONB itself; MySQL and SQLite hand back JSON text.
            "meta": meta
            if adapter.dialect.name == "postgresql" or meta is None
            else json.loads(meta),
            "deleted": row["deleted_at"] is not None,
        }
    return out


def _live_view(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Soft-deleted rows keep their last values (PROTOCOL §10.5): compare only the flag."""
    return {rid: {"deleted": True} if r["deleted"] else r for rid, r in rows.items()}


def _expected(wal: WriteAheadLog, gw: str) -> dict[str, dict[str, Any]]:
    out = {}
    for rid, state in wal.row_states(gw, "todos"):
        v = state.values()
        out[rid] = {
            "title": v.get("title"),
            "done": v.get("done"),
            "priority": None if v.get("priority") is None else float(v["priority"]),
            "meta": v.get("meta"),
            "deleted": not state.live,
        }
    return out


def test_round_trip_into_destination(
    spark: Any,
    lake_catalog: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
    dest_url: str,
) -> None:
    adapter = SqlAdapter.connect(dest_url)
    try:
        pusher.write("a", "r1", title="one", done=False, priority=1, meta={"tags": ["x"]})
        pusher.write("a", "r2", title="two", meta="plain")
        pusher.write("b", "r3", title="three", done=True)
        _run(spark, lake_catalog, wal, wal_url, gw, todos, adapter)
        first = _dest(adapter)
        assert first == _expected(wal, gw)
        assert not any(r["deleted"] for r in first.values())
        assert first["r2"]["meta"] == "plain"
        # Second round: update, delete, resurrect, new row; a schema evolution adds a column.
        pusher.write("b", "r1", title="one!", done=True)
        pusher.delete("a", "r2")
        pusher.delete("a", "r3")
        pusher.write("c", "r3", priority=7)
        pusher.write("c", "r4", title="four")
        _run(spark, lake_catalog, wal, wal_url, gw, todos, adapter)
        second = _dest(adapter)
        assert _live_view(second) == _live_view(_expected(wal, gw))
        assert second["r2"]["deleted"] and second["r2"]["title"] == "two"
        assert second["r3"] == {
            "title": None,
            "done": None,
            "priority": 7.0,
            "meta": None,
            "deleted": False,
        }
        # Nothing new: a re-run changes nothing and keeps the watermark.
        _run(spark, lake_catalog, wal, wal_url, gw, todos, adapter)
        assert _dest(adapter) == second
    finally:
        adapter.close()


def test_schema_evolution_adds_columns_everywhere(
    spark: Any,
    lake_catalog: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
    tmp_path: Any,
) -> None:
    from lakesync_platform.core.schema import parse_table_schema, table_schema_to_json

    adapter = SqlAdapter.connect("sqlite:///" + str(tmp_path / "evolve.db"))
    try:
        pusher.write("a", "r1", title="one")
        _run(spark, lake_catalog, wal, wal_url, gw, todos, adapter)
        body = table_schema_to_json(todos)
        body["columns"] = [*body["columns"], {"name": "due", "type": "string"}]
        # Through the service, as the admin route does (it refreshes the service's config).
        evolved = pusher.service.save_schema(gw, parse_table_schema(body))
        pusher.write("a", "r1", due="tomorrow")
        _run(spark, lake_catalog, wal, wal_url, gw, evolved, adapter)
        (row,) = adapter.read_rows("todos")
        assert row["title"] == "one" and row["due"] == "tomorrow"
    finally:
        adapter.close()
