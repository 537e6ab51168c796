"""Per-column LWW in the Iceberg state tables equals the WAL's own row state."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from lakesync_platform.core.delta import DELETE
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.spark.flush import flush_gateway
from lakesync_platform.spark.layout import state_table
from lakesync_platform.spark.state import update_state
from lakesync_platform.spark.wal_source import jdbc_source
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher
from .lake_checks import actual_state, expected_state

pytestmark = pytest.mark.spark


def assert_state_matches_wal(spark: Any, wal: WriteAheadLog, gw: str, schema: TableSchema) -> None:
    rows = {r["row_id"]: r.asDict() for r in spark.table(state_table(gw, schema.table)).collect()}
    expected = {rid: expected_state(schema, st) for rid, st in wal.row_states(gw, schema.table)}
    assert set(rows) == set(expected)
    for rid, exp in expected.items():
        assert actual_state(schema, rows[rid]) == exp, rid


def test_lww_ties_deletes_and_resurrection(
    spark: Any,
    lake_catalog: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
) -> None:
    p = pusher
    h = p.hlc(100)
    # Same HLC, different clients: the higher client id (JS order) wins each column.
    p.push("alice", [p.delta("alice", "r1", h, title="a", done=False)])
    p.push("bob", [p.delta("bob", "r1", h, title="b")])
    # An older write to another column still lands (per-column, not per-delta).
    p.push("carol", [p.delta("carol", "r1", p.hlc(50), priority=3, meta={"k": [1, "x"]})])
    # Delete then resurrect with only the new columns.
    p.push("alice", [p.delta("alice", "r2", p.hlc(10), title="gone", done=True)])
    p.push("bob", [p.delta("bob", "r2", p.hlc(20), op=DELETE)])
    p.push("carol", [p.delta("carol", "r2", p.hlc(30), done=False)])
    # A delete older than a column keeps it; JSON string vs number in a json column.
    p.push("dave", [p.delta("dave", "r3", p.hlc(40), title="keep", meta="5")])
    p.push("erin", [p.delta("erin", "r3", p.hlc(35), op=DELETE)])
    p.push("dave", [p.delta("dave", "r4", p.hlc(41), meta=5, title=None)])
    # Non-ASCII client ids: UTF-16 order differs from UTF-8 byte order.
    hx = p.hlc(60)
    p.push("\U0001f600", [p.delta("\U0001f600", "r5", hx, title="emoji")])
    p.push("\uff01", [p.delta("\uff01", "r5", hx, title="fullwidth")])
    # A json value that looks like a log element (nested), and a string needing escapes.
    nested = {"column": "meta", "value": "inner"}
    p.push("frank", [p.delta("frank", "r6", p.hlc(70), meta=nested)])
    p.push("frank", [p.delta("frank", "r7", p.hlc(71), meta='say "hi" \\ \u00e9')])
    source = jdbc_source(wal_url)
    flush_gateway(spark, lake_catalog, wal, source, gw)
    result = update_state(spark, lake_catalog, gw, todos)
    assert result.rows_changed == 7
    assert_state_matches_wal(spark, wal, gw, todos)
    state = {r["row_id"]: r for r in spark.table(state_table(gw, "todos")).collect()}
    assert state["r1"]["title"] == "b" and state["r1"]["priority"] == 3.0
    assert state["r2"]["title"] is None and state["r2"]["done"] is False
    assert state["r3"]["meta"] == '"5"' and state["r4"]["meta"] == "5"
    assert state["r5"]["title"] == "fullwidth"
    assert json.loads(state["r6"]["meta"]) == nested
    assert json.loads(state["r7"]["meta"]) == 'say "hi" \\ \u00e9'
    # The first load's figures are observed while writing: they match the table.
    assert result.live_changed == sum(1 for r in state.values() if r["_ls$live"])
    assert result.to_cursor == max(r["_ls$cursor"] for r in state.values())


def test_random_history_in_batches_equals_wal(
    spark: Any,
    lake_catalog: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
) -> None:
    rnd = random.Random(4)
    p = pusher
    clients = ["a", "b", "c", "zz"]
    source = jdbc_source(wal_url)
    for _batch in range(3):
        for _ in range(60):
            client = rnd.choice(clients)
            row = f"r{rnd.randrange(12)}"
            h = p.hlc(rnd.randrange(1, 400), rnd.randrange(2))
            if rnd.random() < 0.2:
                d = p.delta(client, row, h, op=DELETE)
            else:
                cols = rnd.sample(["title", "done", "priority", "meta"], rnd.randrange(1, 4))
                values = {
                    "title": rnd.choice(["x", "y", None]),
                    "done": rnd.choice([True, False]),
                    "priority": rnd.randrange(5),
                    "meta": rnd.choice([{"a": 1}, [1, 2], "s", None]),
                }
                d = p.delta(client, row, h, **{c: values[c] for c in cols})
            p.push(client, [d])
        flush_gateway(spark, lake_catalog, wal, source, gw)
        update_state(spark, lake_catalog, gw, todos)
        assert_state_matches_wal(spark, wal, gw, todos)
    again = update_state(spark, lake_catalog, gw, todos)
    assert again.rows_changed == 0


def test_pyiceberg_and_spark_read_the_same_changed_rows(
    spark: Any,
    lake_catalog: Any,
    spark_settings: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
) -> None:
    """Materialise reads changed state rows through pyiceberg where it can: after merges
    (position deletes) and deletes, both readers see the same rows above any watermark."""
    from lakesync_platform.spark.arrow import collect_arrow
    from lakesync_platform.spark.materialise import _read_arrow, changed_rows
    from lakesync_platform.spark.session import local_pyiceberg_catalog

    catalog = local_pyiceberg_catalog(spark_settings)
    assert catalog is not None
    source = jdbc_source(wal_url)
    rnd = random.Random(9)
    p = pusher
    for _batch in range(3):
        for _ in range(40):
            client, row = rnd.choice(["a", "b", "c"]), f"r{rnd.randrange(15)}"
            if rnd.random() < 0.25:
                p.push(client, [p.delta(client, row, p.hlc(), op=DELETE)])
            else:
                p.write(client, row, title=rnd.choice(["x", "", None]), meta=rnd.choice([[1], "s"]))
        flush_gateway(spark, lake_catalog, wal, source, gw)
        update_state(spark, lake_catalog, gw, todos)

    def rows(table: Any) -> list[tuple[Any, ...]]:
        columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        return sorted(zip(*columns, strict=True))

    state = spark.table(state_table(gw, "todos"))
    top = state.agg({"`_ls$cursor`": "max"}).collect()[0][0]
    for after in (0, top // 2, top):
        ours = _read_arrow(catalog, gw, todos, after, lambda: None)
        theirs = collect_arrow(changed_rows(state, todos, after))
        assert ours.column_names == theirs.column_names
        assert rows(ours) == rows(theirs)
        assert len(rows(ours)) == (15 if after == 0 else len(rows(theirs)))
    assert _read_arrow(catalog, gw, todos, top, lambda: None).num_rows == 0
    # A column the state table lacks yet (schema evolved before the next state run): the
    # reader has the table evolved first and reads the new column as nulls.
    from lakesync_platform.core.schema import parse_table_schema, table_schema_to_json
    from lakesync_platform.spark.layout import ensure_state_table

    body = table_schema_to_json(todos)
    body["columns"] = [*body["columns"], {"name": "due", "type": "string"}]
    wider = parse_table_schema(body)
    evolved: list[str] = []

    def ensure() -> None:
        evolved.append(ensure_state_table(spark, gw, wider))

    out = _read_arrow(catalog, gw, wider, 0, ensure)
    assert evolved and "due" in out.column_names and out.num_rows == 15
    assert set(out.column("due").to_pylist()) == {None}


def test_batch_is_pinned_to_the_snapshot_its_watermark_was_read_at(
    spark: Any,
    lake_catalog: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flush that commits while a state run starts is left for the next run: the first load
    reads the log as of the watermark's snapshot, so it takes exactly ``(0, upper]``."""
    import lakesync_platform.spark.flush as flush_module

    p = pusher
    source = jdbc_source(wal_url)
    p.push("a", [p.delta("a", "r1", p.hlc(10), title="one")])
    first = flush_gateway(spark, lake_catalog, wal, source, gw)
    real = flush_module.lake_watermark

    def watermark_then_flush(spark_: Any, gw_: str, catalog_: Any = None) -> Any:
        mark = real(spark_, gw_, catalog_)
        monkeypatch.setattr(flush_module, "lake_watermark", real)  # the flush below reads it
        p.push("b", [p.delta("b", "r1", p.hlc(20), title="two")])
        p.push("b", [p.delta("b", "r2", p.hlc(21), title="new")])
        assert flush_gateway(spark, lake_catalog, wal, source, gw).entries == 2
        return mark

    monkeypatch.setattr(flush_module, "lake_watermark", watermark_then_flush)
    pinned = update_state(spark, lake_catalog, gw, todos)
    assert (pinned.to_cursor, pinned.rows_changed) == (first.to_cursor, 1)
    rows = {r["row_id"]: r["title"] for r in spark.table(state_table(gw, "todos")).collect()}
    assert rows == {"r1": "one"}
    rest = update_state(spark, lake_catalog, gw, todos)
    assert (rest.from_cursor, rest.rows_changed) == (first.to_cursor + 1, 2)
    assert_state_matches_wal(spark, wal, gw, todos)
