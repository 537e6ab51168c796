"""Sync rules: validation, JavaScript value semantics and row visibility (PROTOCOL.md §5)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.sync_rules import (
    Bucket,
    ClientView,
    Filter,
    SyncRules,
    js_parse_float,
    js_string,
    locale_compare,
    parse_sync_rules,
    sync_rules_to_json,
)


def rules(*buckets: Bucket) -> SyncRules:
    return SyncRules(1, buckets)


def bucket(name: str, tables: Sequence[str], *filters: tuple[str, str, str]) -> Bucket:
    return Bucket(name, tuple(tables), tuple(Filter(*f) for f in filters))


# --- parsing ---------------------------------------------------------------------------------

EXAMPLE = {
    "version": 1,
    "buckets": [
        {
            "name": "user",
            "tables": ["todos"],
            "filters": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}],
        },
        {"name": "all", "tables": [], "filters": []},
    ],
}


def test_parse_and_round_trip() -> None:
    parsed = parse_sync_rules(EXAMPLE)
    assert parsed == rules(
        bucket("user", ["todos"], ("user_id", "eq", "jwt:sub")), bucket("all", [])
    )
    assert sync_rules_to_json(parsed) == EXAMPLE
    assert parse_sync_rules(sync_rules_to_json(parsed)) == parsed


def test_version_may_be_an_integral_float_and_extra_keys_are_ignored() -> None:
    parsed = parse_sync_rules({"version": 2.0, "buckets": [], "comment": "x"})
    assert parsed == SyncRules(2, ()) and isinstance(parsed.version, int)


def _bucket_with(**overrides: Any) -> dict[str, Any]:
    return {"version": 1, "buckets": [{"name": "b", "tables": ["t"], "filters": [], **overrides}]}


def _filter(**overrides: Any) -> dict[str, Any]:
    return _bucket_with(filters=[{"column": "c", "op": "eq", "value": "v", **overrides}])


OPS_MESSAGE = 'Bucket "b" filter at index 0 op must be one of: eq, in, neq, gt, lt, gte, lte'


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "Sync rules config must be an object"),
        ([], "Sync rules config must be an object"),
        ({"buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": 0, "buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": 1.5, "buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": True, "buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": "1", "buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": math.inf, "buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": 1}, "Sync rules buckets must be an array"),
        ({"version": 1, "buckets": {}}, "Sync rules buckets must be an array"),
        ({"version": 1, "buckets": [5]}, "Bucket at index 0 must be an object"),
        ({"version": 1, "buckets": [{"name": ""}]}, "Bucket at index 0 must have a non-empty name"),
        ({"version": 1, "buckets": [{"name": 3}]}, "Bucket at index 0 must have a non-empty name"),
        (
            {
                "version": 1,
                "buckets": [
                    {"name": "b", "tables": [], "filters": []},
                    {"name": "b", "tables": [], "filters": []},
                ],
            },
            'Duplicate bucket name: "b"',
        ),
        (_bucket_with(tables="t"), 'Bucket "b" tables must be an array'),
        (_bucket_with(tables=[""]), 'Bucket "b" tables must contain non-empty strings'),
        (_bucket_with(tables=[1]), 'Bucket "b" tables must contain non-empty strings'),
        (
            _bucket_with(tables=["bad-table"]),
            'Bucket "b" table "bad-table" is not a valid SQL identifier '
            "(^[a-zA-Z_][a-zA-Z0-9_]{0,63}$)",
        ),
        (_bucket_with(filters=None), 'Bucket "b" filters must be an array'),
        (_bucket_with(filters=["x"]), 'Bucket "b" filter at index 0 must be an object'),
        (_filter(column=""), 'Bucket "b" filter at index 0 must have a non-empty column'),
        (_filter(column=None), 'Bucket "b" filter at index 0 must have a non-empty column'),
        (_filter(op="like"), OPS_MESSAGE),
        (_filter(op=None), OPS_MESSAGE),
        (_filter(value=""), 'Bucket "b" filter at index 0 must have a non-empty value'),
        (_filter(value=3), 'Bucket "b" filter at index 0 must have a non-empty value'),
    ],
)
def test_validation_messages(config: Any, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_sync_rules(config)
    assert info.value.message == message
    assert info.value.code == "VALIDATION_ERROR"


# --- JavaScript value semantics ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (2.5, "2.5"),
        (1.0, "1"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        ("x", "x"),
        ({"a": 1}, "[object Object]"),
        (["a", "b"], "a,b"),
        ([1, [2, 3], None, True, {}], "1,2,3,,true,[object Object]"),
        ([], ""),
    ],
)
def test_js_string(value: Any, expected: str) -> None:
    assert js_string(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3", 3.0),
        ("3abc", 3.0),
        ("  .5x", 0.5),
        ("-1e3", -1000.0),
        ("1e", 1.0),
        ("1e+", 1.0),
        ("5.", 5.0),
        ("1.2.3", 1.2),
        ("0x10", 0.0),
        ("Infinity", math.inf),
        ("-Infinityx", -math.inf),
        ("\u00a0\u2028\ufeff 7", 7.0),
        ("+2", 2.0),
    ],
)
def test_js_parse_float(text: str, expected: float) -> None:
    assert js_parse_float(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "true", "null", "+-1", ".", "e5", "\x1c7", "infinity"])
def test_js_parse_float_nan(text: str) -> None:
    assert math.isnan(js_parse_float(text))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("abc", "abc", 0),
        ("a", "b", -1),
        ("a", "B", -1),  # case is a tertiary difference (code points would say "a" > "B")
        ("a", "A", -1),  # lowercase first
        ("é", "f", -1),  # accents are secondary (code points would say "é" > "f")
        ("e", "é", -1),
        ("-", "a", -1),  # punctuation before digits before letters
        ("1", "a", -1),
        ("abc", "3", 1),
        ("true", "3", 1),
        ("a", "ab", -1),
        ("10", "9", -1),  # no numeric collation
    ],
)
def test_locale_compare_approximation(a: str, b: str, expected: int) -> None:
    assert locale_compare(a, b) == expected
    assert locale_compare(b, a) == -expected


# --- visibility --------------------------------------------------------------------------------

PRIO_GTE_3 = rules(bucket("p", ["t"], ("prio", "gte", "3")))


@pytest.mark.parametrize(
    ("prio", "visible"),
    [("3", True), (10, True), (2.5, False), ("abc", True), ("3abc", True), (True, True)],
)
def test_verified_gte_table(prio: Any, visible: bool) -> None:
    """The reference's observed results for the rule ``prio gte "3"`` (PROTOCOL.md §5)."""
    assert ClientView(PRIO_GTE_3, {}).row_visible("t", {"prio": prio}) is visible


@pytest.mark.parametrize(
    ("op", "value", "row_value", "visible"),
    [
        ("gt", "3", 3, False),
        ("gt", "3", "3.5", True),
        ("lt", "10", 9, True),  # numeric, not "10" < "9"
        ("lt", "10", "9x", True),
        ("lte", "3", 3.0, True),
        ("lt", "b", "a", True),
        ("gt", "b", "B", True),  # ICU puts "B" after "b" (code points would not)
        ("gte", "3", None, True),  # String(null) = "null", which sorts after "3"
        ("lt", "-1", -2, True),
        ("gt", "Infinity", 1e308, False),
    ],
)
def test_comparisons(op: str, value: str, row_value: Any, visible: bool) -> None:
    view = ClientView(rules(bucket("b", ["t"], ("v", op, value))), {})
    assert view.row_visible("t", {"v": row_value}) is visible


def test_missing_filter_column_fails() -> None:
    assert not ClientView(PRIO_GTE_3, {}).row_visible("t", {"other": 5})
    neq = rules(bucket("b", ["t"], ("v", "neq", "x")))
    assert not ClientView(neq, {}).row_visible("t", {})  # even neq needs the column


@pytest.mark.parametrize(
    ("row_value", "visible"), [("3", True), (3, True), (3.0, True), ("03", False), (True, False)]
)
def test_eq_compares_javascript_strings(row_value: Any, visible: bool) -> None:
    view = ClientView(rules(bucket("b", ["t"], ("v", "eq", "3"))), {})
    assert view.row_visible("t", {"v": row_value}) is visible


def test_eq_literal_true_and_null() -> None:
    view = ClientView(rules(bucket("b", ["t"], ("a", "eq", "true"), ("n", "eq", "null"))), {})
    assert view.row_visible("t", {"a": True, "n": None})
    assert not view.row_visible("t", {"a": True, "n": "x"})


USER_RULES = rules(bucket("user", ["todos"], ("user_id", "eq", "jwt:sub")))


def test_jwt_claim_filter() -> None:
    view = ClientView(USER_RULES, {"sub": "u1"})
    assert view.row_visible("todos", {"user_id": "u1", "title": "x"})
    assert not view.row_visible("todos", {"user_id": "u2"})
    assert not view.row_visible("todos", {"title": "x"})
    assert not view.row_visible("notes", {"user_id": "u1"})  # table not in any bucket


def test_missing_claim_matches_nothing() -> None:
    view = ClientView(USER_RULES, {})
    assert not view.row_visible("todos", {"user_id": "u1"})
    assert not view.table_visible("todos")
    neq = ClientView(rules(bucket("b", ["t"], ("v", "neq", "jwt:team"))), {"sub": "x"})
    assert not neq.row_visible("t", {"v": "anything"})  # a missing claim fails even neq


def test_list_claims() -> None:
    claims: Mapping[str, str | Sequence[str]] = {
        "sub": "u1",
        "tenants": ["t1", "t2"],
        "lvl": ["5", "1"],
    }
    for op in ("eq", "in"):
        view = ClientView(rules(bucket("b", ["t"], ("tenant", op, "jwt:tenants"))), claims)
        assert view.row_visible("t", {"tenant": "t2"})
        assert not view.row_visible("t", {"tenant": "t3"})
    neq = ClientView(rules(bucket("b", ["t"], ("tenant", "neq", "jwt:tenants"))), claims)
    assert neq.row_visible("t", {"tenant": "t3"}) and not neq.row_visible("t", {"tenant": "t1"})
    gte = ClientView(rules(bucket("b", ["t"], ("level", "gte", "jwt:lvl"))), claims)
    assert gte.row_visible("t", {"level": 5}) and not gte.row_visible(
        "t", {"level": 4}
    )  # first only
    empty = ClientView(rules(bucket("b", ["t"], ("tenant", "in", "jwt:none"))), {"none": []})
    assert not empty.row_visible("t", {"tenant": ""}) and not empty.table_visible("t")


def test_union_of_buckets_and_conjunction_of_filters() -> None:
    view = ClientView(
        rules(
            bucket("mine", ["todos"], ("owner", "eq", "jwt:sub"), ("archived", "eq", "false")),
            bucket("shared", ["todos", "notes"], ("shared", "eq", "true")),
        ),
        {"sub": "u1"},
    )
    assert view.row_visible("todos", {"owner": "u1", "archived": False})
    assert not view.row_visible("todos", {"owner": "u1", "archived": True})
    assert view.row_visible("todos", {"owner": "u2", "archived": True, "shared": True})
    assert view.row_visible("notes", {"shared": True})
    assert not view.row_visible("notes", {"owner": "u1", "archived": False})


def test_no_rules_or_no_buckets_show_everything() -> None:
    for view in (ClientView(None, {}), ClientView(SyncRules(1, ()), {})):
        assert view.row_visible("any", {})
        assert view.table_visible("any")
        assert view.table_unfiltered("any")


def test_empty_tables_cover_every_table() -> None:
    view = ClientView(rules(bucket("all", [])), {})
    assert view.table_unfiltered("x") and view.row_visible("y", {})


def test_table_visible_and_unfiltered() -> None:
    view = ClientView(
        rules(
            bucket("open", ["public"]),
            bucket("user", ["todos", "public"], ("owner", "eq", "jwt:sub")),
            bucket("team", ["teams"], ("team", "eq", "jwt:team")),
        ),
        {"sub": "u1"},
    )
    assert view.table_visible("public") and view.table_unfiltered("public")
    assert view.table_visible("todos") and not view.table_unfiltered("todos")
    assert not view.table_visible("teams") and not view.table_unfiltered("teams")  # no claim
    assert not view.table_visible("other") and not view.table_unfiltered("other")
    assert view.row_visible("public", {}) and not view.row_visible("todos", {})


# An independent, literal port of the reference evaluator, applied to a row as a delta whose
# columns are the row's entries, is the oracle for the compiled view.
def _reference_visible(
    rules_: SyncRules, claims: Mapping[str, Any], table: str, row: dict[str, Any]
) -> bool:
    if not rules_.buckets:
        return True

    def resolve(value: str) -> list[str]:
        if not value.startswith("jwt:"):
            return [value]
        claim = claims.get(value[4:])
        if claim is None:
            return []
        return [claim] if isinstance(claim, str) else list(claim)

    def compare(dv: str, rv: str, op: str) -> bool:
        a, b = js_parse_float(dv), js_parse_float(rv)
        cmp = (a > b) - (a < b) if not (math.isnan(a) or math.isnan(b)) else locale_compare(dv, rv)
        return {"gt": cmp > 0, "lt": cmp < 0, "gte": cmp >= 0, "lte": cmp <= 0}[op]

    def filter_matches(f: Filter) -> bool:
        if f.column not in row:
            return False
        dv, rv = js_string(row[f.column]), resolve(f.value)
        if not rv:
            return False
        if f.op in ("eq", "in"):
            return dv in rv
        if f.op == "neq":
            return dv not in rv
        return compare(dv, rv[0], f.op)

    return any(
        (not b.tables or table in b.tables) and all(filter_matches(f) for f in b.filters)
        for b in rules_.buckets
    )


values = (
    st.sampled_from(["a", "B", "3", "10", "abc", "", "u1"])
    | st.integers(-2, 12)
    | st.booleans()
    | st.none()
)
filters = st.builds(
    Filter,
    st.sampled_from(["x", "y"]),
    st.sampled_from(["eq", "in", "neq", "gt", "lt", "gte", "lte"]),
    st.sampled_from(["3", "a", "10", "jwt:sub", "jwt:tags", "jwt:none"]),
)
buckets_ = st.builds(
    Bucket,
    st.uuids().map(str),
    st.lists(st.sampled_from(["t", "u"]), max_size=2).map(tuple),
    st.lists(filters, max_size=2).map(tuple),
)
claims_ = st.fixed_dictionaries(
    {
        "sub": st.sampled_from(["u1", "3"]),
        "tags": st.lists(st.sampled_from(["a", "3", "10"]), max_size=2),
    }
)


@given(
    st.lists(buckets_, max_size=3).map(lambda bs: SyncRules(1, tuple(bs))),
    claims_,
    st.sampled_from(["t", "u"]),
    st.lists(st.dictionaries(st.sampled_from(["x", "y", "z"]), values, max_size=3), max_size=5),
)
def test_view_agrees_with_reference_evaluator(
    rules_: SyncRules, claims: dict[str, Any], table: str, rows: list[dict[str, Any]]
) -> None:
    view = ClientView(rules_, claims)
    results = [view.row_visible(table, row) for row in rows]
    assert results == [_reference_visible(rules_, claims, table, row) for row in rows]
    if any(results):
        assert view.table_visible(table)
    if view.table_unfiltered(table):
        assert all(results)
