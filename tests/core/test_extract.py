"""extractDelta / applyDelta (PROTOCOL.md §1.3) and their JavaScript equality semantics."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from lakesync_platform.core.extract import (
    apply_delta,
    extract_delta,
    js_deep_equal,
    js_same_value,
)
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.schema import ColumnSchema, TableSchema

IDS = {
    v["name"]: v["id"]
    for v in json.loads((Path(__file__).parent / "vectors" / "ids.json").read_text("utf-8"))[
        "vectors"
    ]
}


def _extract(before: Any, after: Any, **overrides: Any) -> RowDelta | None:
    opts: dict[str, Any] = {
        "table": "todos",
        "row_id": "row-1",
        "client_id": "client-a",
        "hlc": 1,
        **overrides,
    }
    return extract_delta(before, after, **opts)


def _cols(delta: RowDelta | None) -> list[tuple[str, Any]]:
    assert delta is not None
    return [(c.column, c.value) for c in delta.columns]


def test_v1_insert() -> None:
    d = _extract(
        None,
        {"title": "Buy milk", "done": False, "priority": 3},
        hlc=111411200000000000,
    )
    assert d is not None and d.op == INSERT
    assert _cols(d) == [("title", "Buy milk"), ("done", False), ("priority", 3)]
    assert d.delta_id == IDS["V1"]
    assert (d.table, d.row_id, d.client_id, d.hlc) == (
        "todos",
        "row-1",
        "client-a",
        111411200000000000,
    )


def test_v2_update_skips_deep_equal_columns() -> None:
    d = _extract(
        {"title": "Buy milk", "done": False, "meta": {"b": 1, "a": 2}},
        {"title": "Buy oat milk", "done": True, "meta": {"a": 2, "b": 1}, "note": None},
        client_id="client-b",
        hlc=111411200000065543,
    )
    assert d is not None and d.op == UPDATE
    assert _cols(d) == [("title", "Buy oat milk"), ("done", True), ("note", None)]
    assert d.delta_id == IDS["V2"]


def test_v3_delete() -> None:
    d = _extract({"title": "x"}, None, hlc=111411200000131072)
    assert d is not None and d.op == DELETE and d.columns == ()
    assert d.delta_id == IDS["V3"]


def test_v4_insert_with_nested_values() -> None:
    # JavaScript's `undefined` members (p, skip) are simply absent keys in Python.
    after = {"z": 1.5, "a": {"y": [3, {"q": 1, "o": 2}], "x": "é😀"}, "n": None}
    d = _extract(None, after, table="notes", row_id="n/1", client_id="c", hlc=111411200000262143)
    assert d is not None and d.op == INSERT
    assert [c for c, _ in _cols(d)] == ["z", "a", "n"]
    assert d.delta_id == IDS["V4"]


def test_no_rows_and_no_change_give_none() -> None:
    assert _extract(None, None) is None
    assert _extract({"a": 1, "b": [1, {"c": 2}]}, {"b": [1, {"c": 2}], "a": 1}) is None
    assert _extract({"a": 1}, {}) is None  # a removed key never produces a column
    assert _extract({}, {}) is None


def test_update_column_order_is_before_keys_then_new_after_keys() -> None:
    d = _extract({"b": 1, "a": 1, "x": 0}, {"c": 1, "a": 2, "b": 2, "x": 0})
    assert _cols(d) == [("b", 2), ("a", 2), ("c", 1)]


def test_array_index_keys_come_first_as_in_javascript() -> None:
    assert [c for c, _ in _cols(_extract(None, {"b": 1, "10": 1, "2": 1}))] == ["2", "10", "b"]


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        (1, 1.0, False),  # one JavaScript number
        (1, True, True),
        (0, False, True),
        ("1", 1, True),
        (None, None, False),
        (None, 0, True),
        (0, -0.0, True),  # Object.is(0, -0) is false
        (math.nan, math.nan, False),  # Object.is(NaN, NaN) is true
        ([1, 2], (1, 2), False),  # both are JSON arrays
        ([1, 2], [2, 1], True),
        ({"a": 1}, ["a"], True),
        ({"a": 0}, {"a": -0.0}, False),  # fast-deep-equal uses ===
        ({"a": math.nan}, {"a": math.nan}, False),
        ({"a": 1}, {"a": 1, "b": None}, True),
        ({"a": [1, {"b": True}]}, {"a": [1, {"b": 1}]}, True),
        ([], {}, True),
        ("x", "x", False),
    ],
)
def test_update_equality(before: Any, after: Any, changed: bool) -> None:
    d = _extract({"v": before}, {"v": after})
    assert (d is not None) is changed
    if d is not None:
        assert _cols(d) == [("v", after)]


def test_new_null_column_is_a_change() -> None:
    assert _cols(_extract({"a": 1}, {"a": 1, "b": None})) == [("b", None)]


def test_schema_restricts_columns() -> None:
    schema = TableSchema(
        "todos", (ColumnSchema("title", "string"), ColumnSchema("done", "boolean"))
    )
    d = _extract(None, {"title": "t", "secret": 1, "done": False}, schema=schema)
    assert _cols(d) == [("title", "t"), ("done", False)]
    assert _extract({"title": "t"}, {"title": "t", "secret": 2}, schema=schema) is None
    d = _extract({"title": "t", "secret": 1}, {"title": "u", "secret": 2}, schema=schema)
    assert _cols(d) == [("title", "u")]
    assert delta_id("client-a", 1, "todos", "row-1", d.columns) == d.delta_id  # type: ignore[union-attr]


def test_js_same_value_and_deep_equal() -> None:
    assert js_same_value(math.nan, math.nan) and not js_same_value(0, -0.0)
    assert not js_same_value(True, 1) and not js_same_value(None, 0)
    shared: dict[str, Any] = {}
    assert js_same_value(shared, shared) and not js_same_value({}, {})
    assert js_deep_equal({}, {}) and js_deep_equal({"a": [0]}, {"a": [-0.0]})
    assert not js_deep_equal({"a": 1}, {"b": 1}) and not js_deep_equal([1], [1, 2])
    assert not js_deep_equal(True, 1) and not js_deep_equal([], {})


def test_apply_delta() -> None:
    row = {"a": 1, "b": {"x": 1}}
    update = RowDelta(
        UPDATE, "t", "r", "c", (ColumnDelta("b", {"y": 2}), ColumnDelta("c", None)), 1, "id"
    )
    assert apply_delta(row, update) == {"a": 1, "b": {"y": 2}, "c": None}  # shallow: b replaced
    assert row == {"a": 1, "b": {"x": 1}}  # input untouched
    assert apply_delta(None, update) == {"b": {"y": 2}, "c": None}
    assert apply_delta(row, RowDelta(DELETE, "t", "r", "c", (), 1, "id")) is None
    assert apply_delta(None, RowDelta(DELETE, "t", "r", "c", (), 1, "id")) is None


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.5, -0.0, 1.0])
    | st.text(max_size=2),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from("xy"), children, max_size=2)
    ),
    max_leaves=6,
)
rows = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), json_values, max_size=4)


@given(rows | st.none(), rows | st.none())
def test_applying_the_extracted_delta_reaches_after(before: Any, after: Any) -> None:
    d = _extract(before, after)
    result = before if d is None else apply_delta(before, d)
    if after is None:
        assert result is None
        assert d is None or d.op == DELETE
        return
    assert result is not None
    # Removed keys stay (extract never emits a removal); every key of `after` has its value.
    assert set(result) == set(before or {}) | set(after)
    assert all(js_deep_equal(result[k], v) for k, v in after.items())
    if d is not None:
        assert d.delta_id == delta_id("client-a", 1, "todos", "row-1", d.columns)
        assert d.op == (INSERT if before is None else UPDATE)
