"""The SQL adapters' DatabaseAdapter role and DDL evolution on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.delta import DELETE, ColumnDelta, RowDelta
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.schema import parse_table_schema


def _delta(op: str, row: str, hlc: int, client: str = "a", **cols: object) -> RowDelta:
    columns = tuple(ColumnDelta(k, v) for k, v in cols.items())
    return RowDelta(
        op, "todos", row, client, columns, hlc, delta_id(client, hlc, "todos", row, columns)
    )


def test_delta_log_role(dest_url: str) -> None:
    adapter = SqlAdapter.connect(dest_url)
    try:
        adapter.ensure_delta_log()
        adapter.ensure_delta_log()  # idempotent
        d1 = _delta("INSERT", "r1", 10, title="a", done=False)
        d2 = _delta("UPDATE", "r1", 20, "b", title="b")
        d3 = _delta("UPDATE", "r1", 15, "c", done=True)  # older, other column: kept per column
        d4 = _delta("INSERT", "r2", 12, title="x")
        d5 = _delta(DELETE, "r2", 30)
        assert adapter.insert_deltas([d1, d2, d3, d4, d5]) == 5
        assert adapter.insert_deltas([d1, d2]) == 0  # idempotent by delta_id
        since = adapter.deltas_since(12)
        assert [d.hlc for d in since] == [15, 20, 30]
        assert adapter.deltas_since(0, ["other"]) == []
        assert [d.hlc for d in adapter.deltas_since(0, limit=2)] == [10, 12]
        assert adapter.latest_state("todos", "r1") == {"title": "b", "done": True}
        assert adapter.latest_state("todos", "r2") is None
        assert adapter.latest_state("todos", "r3") is None
    finally:
        adapter.close()


def test_destination_ddl_evolves_additively_and_upserts(dest_url: str) -> None:
    schema = parse_table_schema(
        {"table": "items", "columns": [{"name": "name", "type": "string"}], "softDelete": False}
    )
    adapter = SqlAdapter.connect(dest_url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        adapter.ensure_table(schema)
        with adapter.transaction() as conn:
            adapter.upsert_rows(conn, schema, [("r1", "one"), ("r2", "two")], now)
        wider = parse_table_schema(
            {
                "table": "items",
                "softDelete": False,
                "columns": [{"name": "name", "type": "string"}, {"name": "n", "type": "number"}],
            }
        )
        adapter.ensure_table(wider)
        with adapter.transaction() as conn:
            adapter.upsert_rows(conn, wider, [("r1", "uno", 1.5)], now)
            assert adapter.delete_rows(conn, wider, ["r2"], now) == 1  # hard delete
        rows = {r["row_id"]: r for r in adapter.read_rows("items")}
        assert set(rows) == {"r1"}
        assert (rows["r1"]["name"], rows["r1"]["n"]) == ("uno", 1.5)
        assert "props" in rows["r1"] and "deleted_at" not in rows["r1"]
    finally:
        adapter.close()


def test_arrow_first_load_then_upserts_and_soft_deletes(dest_url: str) -> None:
    """A first load into an empty table (Postgres: COPY straight in), then upserts and
    soft deletes over it: nulls, empty strings, JSON, booleans and numbers survive both paths."""
    import pyarrow as pa

    schema = parse_table_schema(
        {
            "table": "notes",
            "columns": [
                {"name": "title", "type": "string"},
                {"name": "done", "type": "boolean"},
                {"name": "n", "type": "number"},
                {"name": "meta", "type": "json"},
            ],
        }
    )

    def arrow(rows: list[tuple[object, ...]]) -> pa.Table:
        names = ["row_id", "title", "done", "n", "meta"]
        return pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)})

    adapter = SqlAdapter.connect(dest_url)
    first = datetime(2026, 1, 1, tzinfo=UTC)
    later = datetime(2026, 1, 2, tzinfo=UTC)
    try:
        adapter.ensure_table(schema)
        with adapter.transaction() as conn:
            assert adapter.is_empty(conn, "notes")
            loaded = [
                ("r1", 'a, "quoted"\nline', True, 1.5, '{"k": [1, "x"]}'),
                ("r2", "", False, None, None),
                ("r3", None, None, -2.0, '"s"'),
                ("r4", "", None, 0.0, None),
            ]
            assert adapter.upsert_arrow(conn, schema, arrow(loaded), first, empty_target=True) == 4
            assert not adapter.is_empty(conn, "notes")
        with adapter.transaction() as conn:
            adapter.upsert_arrow(conn, schema, arrow([("r2", "two", True, 2.0, "[]")]), later)
            assert adapter.delete_rows(conn, schema, ["r3", "missing"], later) == 1
            assert adapter.delete_rows(conn, schema, ["r3"], later) == 0  # already deleted
        rows = {r["row_id"]: r for r in adapter.read_rows("notes")}
        assert set(rows) == {"r1", "r2", "r3", "r4"}
        assert rows["r4"]["title"] == "" and rows["r4"]["n"] == 0.0 and rows["r4"]["meta"] is None
        assert rows["r1"]["title"] == 'a, "quoted"\nline' and bool(rows["r1"]["done"]) is True
        assert rows["r1"]["n"] == 1.5 and rows["r1"]["deleted_at"] is None
        meta = rows["r1"]["meta"]
        assert (json.loads(meta) if isinstance(meta, str) else meta) == {"k": [1, "x"]}
        assert rows["r2"]["title"] == "two" and rows["r2"]["n"] == 2.0
        assert rows["r3"]["title"] is None and rows["r3"]["deleted_at"] is not None
        assert str(rows["r1"]["synced_at"]).startswith("2026-01-01")
        assert str(rows["r2"]["synced_at"]).startswith("2026-01-02")
    finally:
        adapter.close()


def test_watermark_moves_only_from_the_value_a_run_read(dest_url: str) -> None:
    """The watermark is a compare-and-set: a run whose reading went stale (another run
    materialised meanwhile) fails, and its rows roll back with it."""
    schema = parse_table_schema({"table": "marks", "columns": [{"name": "v", "type": "string"}]})
    adapter = SqlAdapter.connect(dest_url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        adapter.drop_table("lakesync_materialise_watermarks")
        assert adapter.watermark("gw/marks->marks") == 0  # read-only: creates nothing
        with adapter.transaction() as conn:
            assert adapter.ensure_table_in(conn, schema, "marks") is True
            assert adapter.ensure_table_in(conn, schema, "marks") is False
            adapter.upsert_rows(conn, schema, [("r1", "one")], now, "marks")
            adapter.set_watermark(conn, "gw/marks->marks", 5, expected=0)
        assert adapter.watermark("gw/marks->marks") == 5
        for stale in (0, 3):
            with (
                pytest.raises(AdapterError, match="concurrently"),
                adapter.transaction() as conn,
            ):
                adapter.upsert_rows(conn, schema, [("r2", "two")], now, "marks")
                adapter.set_watermark(conn, "gw/marks->marks", 7, expected=stale)
        assert [r["row_id"] for r in adapter.read_rows("marks")] == ["r1"]
        assert adapter.watermark("gw/marks->marks") == 5
        with adapter.transaction() as conn:
            adapter.set_watermark(conn, "gw/marks->marks", 9, expected=5)
        assert adapter.watermark("gw/marks->marks") == 9
        assert adapter.watermark("gw/other->marks") == 0
    finally:
        adapter.drop_table("marks")
        adapter.close()
