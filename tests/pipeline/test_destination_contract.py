"""The ``Destination`` contract, one suite over every kind: SQLite, PostgreSQL, MariaDB and
BigQuery (on the emulator) — DDL and additive evolution, upserts, hard and soft deletes, the
watermark's compare-and-set, reading back as the lake's state holds the values."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lakesync_platform.adapters.bigquery import BigQueryAdapter
from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.schema import parse_table_schema

FIRST = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
        "bigquery",
    ]
)
def destination(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh, empty destination of each kind."""
    adapter: Any
    if request.param == "bigquery":
        adapter = BigQueryAdapter.connect(**request.getfixturevalue("bigquery_dataset"))
    else:
        adapter = SqlAdapter.connect(request.getfixturevalue("dest_url"))
    try:
        yield adapter
    finally:
        adapter.close()


@pytest.fixture
def dest_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """The SQL database of the ``destination`` parameter."""
    kind = request.node.callspec.params["destination"]
    if kind == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    if kind == "mariadb":
        return str(request.getfixturevalue("mariadb_url"))
    return "sqlite:///" + str(tmp_path / "dest.db")


def _arrow(names: list[str], rows: list[tuple[object, ...]]) -> Any:
    import pyarrow as pa

    return pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)})


def test_ddl_evolves_additively_and_upserts(destination: Any) -> None:
    schema = parse_table_schema(
        {"table": "items", "columns": [{"name": "name", "type": "string"}], "softDelete": False}
    )
    assert destination.ensure_table(schema) == "items"
    with destination.transaction() as conn:
        rows = _arrow(["row_id", "name"], [("r1", "one"), ("r2", "two")])
        assert destination.upsert_arrow(conn, schema, rows, FIRST) == 2
    wider = parse_table_schema(
        {
            "table": "items",
            "softDelete": False,
            "columns": [{"name": "name", "type": "string"}, {"name": "n", "type": "number"}],
        }
    )
    destination.ensure_table(wider)
    with destination.transaction() as conn:
        destination.upsert_arrow(
            conn, wider, _arrow(["row_id", "name", "n"], [("r1", "uno", 1.5)]), FIRST
        )
        assert destination.delete_rows(conn, wider, ["r2"], FIRST) == 1  # hard delete
    rows = {r["row_id"]: r for r in destination.read_rows("items")}
    assert set(rows) == {"r1"}
    assert (rows["r1"]["name"], rows["r1"]["n"]) == ("uno", 1.5)
    assert "props" in rows["r1"] and "deleted_at" not in rows["r1"]


def test_first_load_then_upserts_and_soft_deletes(destination: Any) -> None:
    """A first load into an empty table, then upserts and soft deletes over it: nulls, empty
    strings, JSON, booleans and numbers survive both paths and read back as the state holds
    them."""
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
    names = ["row_id", "title", "done", "n", "meta"]
    destination.ensure_table(schema)
    with destination.transaction() as conn:
        assert destination.is_empty(conn, "notes")
        loaded = [
            ("r1", 'a, "quoted"\nline', True, 1.5, '{"k": [1, "x"]}'),
            ("r2", "", False, None, None),
            ("r3", None, None, -2.0, '"s"'),
            ("r4", "", None, 0.0, None),
        ]
        rows = _arrow(names, loaded)
        assert destination.upsert_arrow(conn, schema, rows, FIRST, empty_target=True) == 4
        assert not destination.is_empty(conn, "notes")
    with destination.transaction() as conn:
        destination.upsert_arrow(
            conn, schema, _arrow(names, [("r2", "two", True, 2.0, "[]")]), LATER
        )
        assert destination.delete_rows(conn, schema, ["r3", "missing"], LATER) == 1
        assert destination.delete_rows(conn, schema, ["r3"], LATER) == 0  # already deleted
    rows = {r["row_id"]: r for r in destination.read_rows("notes")}
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
    back = {r["row_id"]: r for r in destination.read_back(schema)}
    assert back["r1"]["meta"] == {"k": [1, "x"]} and back["r1"]["done"] is True
    assert back["r2"]["meta"] == [] and back["r2"]["n"] == 2.0 and back["r2"]["done"] is True
    assert back["r3"]["meta"] == "s" and back["r3"]["deleted_at"] is not None


def test_read_back_in_batches_of_row_ids(destination: Any) -> None:
    """What ``lakesync migrate`` streams: every row once, in ``row_id`` order, batches of at
    most the size asked for, values as :meth:`read_back` gives them."""
    schema = parse_table_schema(
        {
            "table": "pages",
            "columns": [{"name": "n", "type": "number"}, {"name": "meta", "type": "json"}],
        }
    )
    destination.ensure_table(schema)
    ids = [f"r{i}" for i in (3, 10, 1, 7, 2, 5, 0)]  # string order: r0 r1 r10 r2 r3 r5 r7
    with destination.transaction() as conn:
        rows = [(r, float(i), json.dumps({"i": i})) for i, r in enumerate(ids)]
        destination.upsert_arrow(conn, schema, _arrow(["row_id", "n", "meta"], rows), FIRST)
        destination.delete_rows(conn, schema, ["r2"], FIRST)
    batches = list(destination.read_back_batches(schema, 3))
    assert [[r["row_id"] for r in b] for b in batches] == [
        ["r0", "r1", "r10"],
        ["r2", "r3", "r5"],
        ["r7"],
    ]
    by_id = {r["row_id"]: r for r in destination.read_back(schema)}
    assert [r for b in batches for r in b] == [by_id[r] for r in sorted(by_id)]
    assert by_id["r10"]["meta"] == {"i": 1} and by_id["r2"]["deleted_at"] is not None
    assert [len(b) for b in destination.read_back_batches(schema, 7)] == [7]  # none empty


def test_read_back_rows_by_id(destination: Any) -> None:
    """What a check of one run reads: the rows among the ids asked for (absent ones skipped,
    more ids than one statement binds), values as :meth:`read_back` gives them."""
    schema = parse_table_schema(
        {
            "table": "picked",
            "columns": [{"name": "n", "type": "number"}, {"name": "meta", "type": "json"}],
        }
    )
    destination.ensure_table(schema)
    with destination.transaction() as conn:
        rows = [(f"r{i}", float(i), json.dumps({"i": i})) for i in range(1200)]
        destination.upsert_arrow(conn, schema, _arrow(["row_id", "n", "meta"], rows), FIRST)
        destination.delete_rows(conn, schema, ["r2"], FIRST)
    assert destination.read_back_rows(schema, []) == []
    wanted = ["r2", "missing", "r5", *(f"r{i}" for i in range(100, 1200))]
    got = {r["row_id"]: r for r in destination.read_back_rows(schema, wanted)}
    assert set(got) == {"r2", "r5", *(f"r{i}" for i in range(100, 1200))}
    by_id = {r["row_id"]: r for r in destination.read_back(schema)}
    assert got["r5"] == by_id["r5"] and got["r5"]["meta"] == {"i": 5}
    assert got["r2"]["deleted_at"] is not None


def test_delete_many_ids(destination: Any) -> None:
    """A delete of more ids than one statement binds (SQL: chunks; BigQuery: a stage table)."""
    schema = parse_table_schema({"table": "bulk", "columns": [{"name": "v", "type": "string"}]})
    destination.ensure_table(schema)
    live = [(f"r{i}", str(i)) for i in range(1500)]
    with destination.transaction() as conn:
        destination.upsert_arrow(conn, schema, _arrow(["row_id", "v"], live), FIRST)
    ids = [f"r{i}" for i in range(0, 1500, 2)] + [f"missing{i}" for i in range(1200)]
    with destination.transaction() as conn:
        assert destination.delete_rows(conn, schema, ids, LATER) == 750
    rows = destination.read_rows("bulk")
    assert sum(r["deleted_at"] is not None for r in rows) == 750 and len(rows) == 1500


def test_upsert_keyed_by_external_id(destination: Any) -> None:
    """With ``externalIdColumn`` the upsert matches on it: a new row id for a known external id
    updates that row instead of adding one."""
    schema = parse_table_schema(
        {
            "table": "people",
            "columns": [{"name": "email", "type": "string"}, {"name": "name", "type": "string"}],
            "externalIdColumn": "email",
        }
    )
    names = ["row_id", "email", "name"]
    destination.ensure_table(schema)
    with destination.transaction() as conn:
        destination.upsert_arrow(conn, schema, _arrow(names, [("r1", "a@x", "Ann")]), FIRST)
    with destination.transaction() as conn:
        destination.upsert_arrow(conn, schema, _arrow(names, [("r9", "a@x", "Anne")]), LATER)
    (row,) = destination.read_rows("people")
    assert (row["row_id"], row["email"], row["name"]) == ("r1", "a@x", "Anne")


def test_watermark_moves_only_from_the_value_a_run_read(destination: Any) -> None:
    """The watermark is a compare-and-set: a run whose reading went stale (another run
    materialised meanwhile) fails, and its rows roll back with it."""
    schema = parse_table_schema({"table": "marks", "columns": [{"name": "v", "type": "string"}]})
    key = "gw/marks->marks"
    assert destination.watermark(key) == 0  # read-only: creates nothing
    with destination.transaction() as conn:
        assert destination.ensure_table_in(conn, schema, "marks") is True
        assert destination.ensure_table_in(conn, schema, "marks") is False
        destination.upsert_arrow(conn, schema, _arrow(["row_id", "v"], [("r1", "one")]), FIRST)
        destination.set_watermark(conn, key, 5, expected=0)
    assert destination.watermark(key) == 5
    for stale in (0, 3):
        with pytest.raises(AdapterError, match="concurrently"), destination.transaction() as conn:
            destination.upsert_arrow(conn, schema, _arrow(["row_id", "v"], [("r2", "two")]), FIRST)
            destination.set_watermark(conn, key, 7, expected=stale)
    assert [r["row_id"] for r in destination.read_rows("marks")] == ["r1"]
    assert destination.watermark(key) == 5
    with destination.transaction() as conn:
        destination.set_watermark(conn, key, 9, expected=5)
    assert destination.watermark(key) == 9
    assert destination.watermark("gw/other->marks") == 0
