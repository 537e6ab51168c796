"""The SQL adapters' DatabaseAdapter role on SQLite, PostgreSQL and MariaDB (the destination
role is the contract suite of ``test_destination_contract.py``)."""

from __future__ import annotations

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.delta import DELETE, ColumnDelta, RowDelta
from lakesync_platform.core.ids import delta_id


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
