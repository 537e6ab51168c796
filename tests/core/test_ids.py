"""Canonical JSON, JavaScript number formatting and content ids (PROTOCOL.md §1.3)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.core.delta import ColumnDelta
from lakesync_platform.core.ids import (
    action_id,
    action_id_payload,
    canonical_json,
    delta_id,
    delta_id_payload,
    js_key_order,
    js_number,
    json_stringify,
)

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "vectors" / "ids.json").read_text("utf-8")
)["vectors"]
DELTA_VECTORS = [v for v in VECTORS if v["name"].startswith("V")]
ACTION_VECTORS = [v for v in VECTORS if v["name"].startswith("A")]


def test_vector_file_is_complete() -> None:
    assert [v["name"] for v in VECTORS] == ["V1", "V2", "V3", "V4", "A1"]


@pytest.mark.parametrize("vector", DELTA_VECTORS, ids=lambda v: v["name"])
def test_delta_id_vectors(vector: dict[str, Any]) -> None:
    f = vector["fields"]
    columns = [ColumnDelta(c["column"], c["value"]) for c in f["columns"]]
    args = (f["clientId"], int(f["hlc"]), f["table"], f["rowId"], columns)
    assert delta_id_payload(*args) == vector["canonical"]
    assert delta_id(*args) == vector["id"]
    assert canonical_json(f) == vector["canonical"]
    assert hashlib.sha256(vector["canonical"].encode()).hexdigest() == vector["id"]


@pytest.mark.parametrize("vector", ACTION_VECTORS, ids=lambda v: v["name"])
def test_action_id_vectors(vector: dict[str, Any]) -> None:
    f = vector["fields"]
    params = {"title": "t", "base": "main"}  # the reference's insertion order; sorting must fix it
    args = (f["clientId"], int(f["hlc"]), f["connector"], f["actionType"], params)
    assert action_id_payload(*args) == vector["canonical"]
    assert action_id(*args) == vector["id"]


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (100.0, "100"),
        (-1.5, "-1.5"),
        (0.1, "0.1"),
        (0.1 + 0.2, "0.30000000000000004"),
        (4.35, "4.35"),
        (123456.789, "123456.789"),
        (1e20, "100000000000000000000"),
        (123e18, "123000000000000000000"),
        (123456789012345680000, "123456789012345680000"),
        (1e21, "1e+21"),
        (-1e21, "-1e+21"),
        (10**21, "1e+21"),
        (1e100, "1e+100"),
        (1.5e300, "1.5e+300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (1e-6, "0.000001"),
        (0.000001234, "0.000001234"),
        (1e-7, "1e-7"),
        (-1e-7, "-1e-7"),
        (1.5e-7, "1.5e-7"),
        (1.2345e-10, "1.2345e-10"),
        (5e-324, "5e-324"),
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
        (2**53 + 1, "9007199254740992"),  # a JS number cannot hold 2**53 + 1
        (2**63, "9223372036854776000"),
        (math.inf, "null"),
        (-math.inf, "null"),
        (math.nan, "null"),
        (10**400, "null"),  # Infinity as a double
    ],
)
def test_js_number(number: int | float, expected: str) -> None:
    assert js_number(number) == expected


@pytest.mark.parametrize("not_a_number", [True, False, "1", None])
def test_js_number_rejects_non_numbers(not_a_number: Any) -> None:
    with pytest.raises(TypeError):
        js_number(not_a_number)


_JS_NUMBER = re.compile(
    r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?|-?[1-9](\.[0-9]*[1-9])?e[+-][1-9][0-9]*"
)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_js_number_round_trips_and_uses_js_notation(x: float) -> None:
    text = js_number(x)
    assert _JS_NUMBER.fullmatch(text), text
    assert float(text) == x
    plain = x == 0 or 1e-6 <= abs(x) < 1e21
    assert ("e" not in text) == plain
    # The same (shortest round-trip) significant digits as Python's repr.
    assert _digits(text) == _digits(repr(x))


def _digits(text: str) -> str:
    return re.sub(r"e.*|[-.]", "", text).strip("0")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        ("", '""'),
        ([], "[]"),
        ({}, "{}"),
        ((1, "a"), '[1,"a"]'),
        ("a/b", '"a/b"'),  # "/" is not escaped
        ('q"b\\', '"q\\"b\\\\"'),
        ("\x00\x08\t\n\x0b\x0c\r\x1f", '"\\u0000\\b\\t\\n\\u000b\\f\\r\\u001f"'),
        ("\x7f\u2028é😀", '"\x7f\u2028é😀"'),  # emitted raw, as JSON.stringify does
        ("\ud800", '"\\ud800"'),  # lone surrogates are escaped (well-formed JSON.stringify)
        ("x\udc00y", '"x\\udc00y"'),
        ("\ud83d\ude00", '"😀"'),  # a pair stored as two code points is one character
        ({"b": 1, "a": [2.0, {"d": None, "c": 1e-7}]}, '{"a":[2,{"c":1e-7,"d":null}],"b":1}'),
        ({"\ue000": 1, "\U0001f600": 2}, '{"\U0001f600":2,"\ue000":1}'),  # UTF-16 order
        ({"b": 1, "B": 2, "a": 3, "_": 4}, '{"B":2,"_":4,"a":3,"b":1}'),
    ],
)
def test_canonical_json(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected


def test_canonical_json_rejects_non_json() -> None:
    for bad in [{1, 2}, b"x", object(), {1: "x"}]:
        with pytest.raises(TypeError):
            canonical_json(bad)
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="circular"):
        canonical_json(cyclic)


def test_shared_but_acyclic_values_are_fine() -> None:
    shared = {"x": 1}
    assert canonical_json([shared, shared]) == '[{"x":1},{"x":1}]'


def test_json_stringify_keeps_javascript_key_order() -> None:
    value = {
        "b": 1,
        "2": 0,
        "a": {"z": 1, "y": 2},
        "1": 0,
        "01": 4,
        "4294967295": 5,
        "4294967294": 6,
    }
    assert json_stringify(value) == (
        '{"1":0,"2":0,"4294967294":6,"b":1,"a":{"z":1,"y":2},"01":4,"4294967295":5}'
    )
    assert js_key_order(["x", "10", "9"]) == ["9", "10", "x"]
    assert js_key_order(["x", "y"]) == ["x", "y"]


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


def _as_js(value: Any) -> Any:
    """Numbers as doubles, as JSON.parse would give them."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {k: _as_js(v) for k, v in value.items()}
    return [_as_js(v) for v in value]


@given(json_values)
def test_canonical_json_parses_back_to_the_same_value(value: Any) -> None:
    assert _as_js(json.loads(canonical_json(value))) == _as_js(value)
    assert _as_js(json.loads(json_stringify(value))) == _as_js(value)


@given(json_values)
def test_canonical_json_is_independent_of_key_insertion_order(value: Any) -> None:
    def reverse(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: reverse(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reverse(x) for x in v]
        return v

    assert canonical_json(reverse(value)) == canonical_json(value)


no_float_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(max_codepoint=0xD7FF)), children, max_size=4)
    ),
    max_leaves=20,
)


@given(no_float_values)
def test_canonical_json_matches_python_json_where_they_agree(value: Any) -> None:
    """Without floats, astral-vs-private-use keys or surrogates, Python's json is an oracle."""
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == expected


def test_delta_id_depends_on_every_field() -> None:
    cols = [ColumnDelta("a", 1)]
    base = delta_id("c", 1, "t", "r", cols)
    assert len(base) == 64 and re.fullmatch("[0-9a-f]{64}", base)
    assert delta_id("c", 1, "t", "r", [ColumnDelta("a", 1.0)]) == base  # 1.0 is the JS number 1
    others = {
        delta_id("d", 1, "t", "r", cols),
        delta_id("c", 2, "t", "r", cols),
        delta_id("c", 1, "u", "r", cols),
        delta_id("c", 1, "t", "s", cols),
        delta_id("c", 1, "t", "r", [ColumnDelta("a", "1")]),
        delta_id("c", 1, "t", "r", [ColumnDelta("b", 1)]),
        delta_id("c", 1, "t", "r", [ColumnDelta("a", 1), ColumnDelta("b", 2)]),
        delta_id("c", 1, "t", "r", [ColumnDelta("b", 2), ColumnDelta("a", 1)]),
    }
    assert base not in others and len(others) == 8


_PLAIN_VALUES = st.one_of(
    st.text(),
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=1e-5, max_value=1e16),
    st.integers(min_value=-(2**54), max_value=2**54).map(float),  # 5.0 is written 5
    st.just(-0.0),
)


@given(
    st.text(),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.text(),
    st.text(),
    st.lists(st.tuples(st.text(), _PLAIN_VALUES), max_size=6),
)
def test_the_fast_delta_id_payload_is_the_canonical_one(
    client: str, hlc: int, table: str, row: str, cols: list[tuple[str, Any]]
) -> None:
    columns = [ColumnDelta(c, v) for c, v in cols]
    expected = canonical_json(
        {
            "clientId": client,
            "columns": [{"column": c.column, "value": c.value} for c in columns],
            "hlc": str(hlc),
            "rowId": row,
            "table": table,
        }
    )
    assert delta_id_payload(client, hlc, table, row, columns) == expected
