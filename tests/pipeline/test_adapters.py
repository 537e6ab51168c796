"""The SQL adapters' DatabaseAdapter role and DDL evolution on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from datetime import UTC, datetime

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.delta import DELETE, ColumnDelta, RowDelta
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
        state = adapter.latest_state("todos", ["r1", "r2", "r3"])
        assert state == {"r1": {"title": "b", "done": True}, "r2": None, "r3": None}
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
