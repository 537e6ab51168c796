"""The SQL adapters' DatabaseAdapter role on SQLite, PostgreSQL and MariaDB (the destination
role is the contract suite of ``test_destination_contract.py``)."""

from __future__ import annotations

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


def test_a_constraint_the_bulk_upsert_violates_is_an_adapter_error(dest_url: str) -> None:
    """Bulk upserts run on the driver's own cursor: its errors are translated as well."""
    schema = parse_table_schema(
        {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    )
    adapter = SqlAdapter.connect(dest_url)
    try:
        adapter.ensure_table(schema)
        with adapter.transaction() as conn:
            conn.exec_driver_sql(
                "CREATE TRIGGER no_bad BEFORE INSERT ON todos WHEN NEW.title = 'bad' "
                "BEGIN SELECT RAISE(ABORT, 'no bad titles'); END"
                if adapter.dialect.name == "sqlite"
                else "ALTER TABLE todos ADD CONSTRAINT no_bad CHECK (title <> 'bad')"
            )
        now = datetime(2026, 1, 1, tzinfo=UTC)
        rows = [("r1", "fine"), ("r2", "bad")]
        with pytest.raises(AdapterError, match="destination failed"), adapter.transaction() as conn:
            adapter.upsert_rows(conn, schema, rows, now)
        assert adapter.read_rows("todos") == []
    finally:
        adapter.close()
