"""Table schemas: wire validation, evolution and delta checks (PROTOCOL.md §9)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from lakesync_platform.core.errors import SchemaError
from lakesync_platform.core.schema import (
    COLUMN_TYPES,
    ColumnSchema,
    TableSchema,
    check_delta,
    evolve_schema,
    parse_table_schema,
    table_schema_to_json,
)

IDENT_RULE = (
    "Identifiers must start with a letter or underscore, contain only alphanumeric characters "
    "and underscores, and be at most 64 characters long."
)
TODOS = TableSchema(
    "todos",
    (
        ColumnSchema("title", "string"),
        ColumnSchema("done", "boolean"),
        ColumnSchema("prio", "number"),
        ColumnSchema("meta", "json"),
        ColumnSchema("nothing", "null"),
    ),
)


def test_column_types() -> None:
    assert COLUMN_TYPES == ("string", "number", "boolean", "json", "null")


def test_parse_minimal_schema_uses_defaults() -> None:
    schema = parse_table_schema(
        {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    )
    assert schema == TableSchema("todos", (ColumnSchema("title", "string"),))
    assert schema.primary_key == ("row_id",) and schema.soft_delete is True
    assert schema.external_id_column is None and schema.source_table is None


def test_parse_full_schema_and_round_trip() -> None:
    wire = {
        "table": "contacts",
        "sourceTable": "sf_contacts",
        "columns": [
            {"name": "email", "type": "string"},
            {
                "name": "account_id",
                "type": "string",
                "references": {
                    "table": "accounts",
                    "column": "row_id",
                    "cardinality": "many-to-one",
                },
            },
            {"name": "score", "type": "number"},
        ],
        "primaryKey": ["row_id", "email"],
        "softDelete": False,
        "externalIdColumn": "email",
    }
    schema = parse_table_schema(wire)
    assert schema.column_names == ("email", "account_id", "score")
    assert schema.column("account_id") == ColumnSchema(
        "account_id",
        "string",
        {"table": "accounts", "column": "row_id", "cardinality": "many-to-one"},
    )
    assert schema.column("nope") is None
    assert (schema.primary_key, schema.soft_delete) == (("row_id", "email"), False)
    assert (schema.external_id_column, schema.source_table) == ("email", "sf_contacts")
    assert table_schema_to_json(schema) == wire
    assert parse_table_schema(table_schema_to_json(schema)) == schema
    assert parse_table_schema(table_schema_to_json(TODOS)) == TODOS
    assert hash(schema) == hash(parse_table_schema(wire))  # usable as a dict key


def _schema(**overrides: Any) -> dict[str, Any]:
    return {"table": "todos", "columns": [{"name": "title", "type": "string"}], **overrides}


def _column(**column: Any) -> dict[str, Any]:
    return {"table": "todos", "columns": [column]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "Missing required fields: table, columns"),
        ([], "Missing required fields: table, columns"),
        ({"columns": []}, "Missing required fields: table, columns"),
        ({"table": "t"}, "Missing required fields: table, columns"),
        ({"table": "", "columns": []}, "Missing required fields: table, columns"),
        ({"table": "t", "columns": {}}, "Missing required fields: table, columns"),
        ({"table": "bad-name", "columns": []}, f'Invalid table name: "bad-name". {IDENT_RULE}'),
        ({"table": 5, "columns": []}, f'Invalid table name: "5". {IDENT_RULE}'),
        ({"table": "a" * 65, "columns": []}, f'Invalid table name: "{"a" * 65}". {IDENT_RULE}'),
        (_column(type="string"), "Each column must have a non-empty 'name' string"),
        (_column(name="", type="string"), "Each column must have a non-empty 'name' string"),
        ({"table": "t", "columns": ["title"]}, "Each column must have a non-empty 'name' string"),
        (_column(name="1abc", type="string"), f'Invalid column name: "1abc". {IDENT_RULE}'),
        (
            _column(name="title", type="text"),
            'Invalid column type "text" for column "title". '
            "Allowed: string, number, boolean, json, null",
        ),
        (
            _column(name="title"),
            'Invalid column type "undefined" for column "title". '
            "Allowed: string, number, boolean, json, null",
        ),
        (
            _column(name="title", type=None),
            'Invalid column type "null" for column "title". '
            "Allowed: string, number, boolean, json, null",
        ),
        (
            {"table": "t", "columns": [{"name": "a", "type": "string"}] * 2},
            'Duplicate column name: "a"',
        ),
        (
            _column(name="a", type="string", references="accounts"),
            'Column "a" references must be an object of strings',
        ),
        (
            _column(name="a", type="string", references={"table": "x-y", "column": "id"}),
            'Column "a" references must name a valid table and column',
        ),
        (
            _column(
                name="a",
                type="string",
                references={"table": "x", "column": "id", "cardinality": "1:1"},
            ),
            'Column "a" references cardinality must be one of: many-to-one, one-to-many',
        ),
        (_schema(primaryKey=[]), "primaryKey must be a non-empty array of strings"),
        (_schema(primaryKey="row_id"), "primaryKey must be a non-empty array of strings"),
        (_schema(primaryKey=[1]), "primaryKey must be a non-empty array of strings"),
        (_schema(primaryKey=None), "primaryKey must be a non-empty array of strings"),
        (
            _schema(primaryKey=["row_id", "nope"]),
            'primaryKey column "nope" must be "row_id" or exist in columns',
        ),
        (_schema(softDelete="yes"), "softDelete must be a boolean"),
        (_schema(softDelete=None), "softDelete must be a boolean"),
        (_schema(externalIdColumn=""), "externalIdColumn must be a non-empty string"),
        (_schema(externalIdColumn=None), "externalIdColumn must be a non-empty string"),
        (_schema(externalIdColumn="nope"), 'externalIdColumn "nope" must exist in columns'),
        (_schema(sourceTable="a b"), f'Invalid source table name: "a b". {IDENT_RULE}'),
    ],
)
def test_validation_messages(body: Any, message: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_table_schema(body)
    assert info.value.message == message
    assert info.value.code == "SCHEMA_ERROR"


def test_evolve() -> None:
    assert evolve_schema(None, TODOS) is TODOS
    same = TableSchema("todos", TODOS.columns)
    assert evolve_schema(TODOS, same) is TODOS
    wider = TableSchema("todos", (*TODOS.columns, ColumnSchema("due", "string")))
    assert evolve_schema(TODOS, wider) is wider
    reordered = TableSchema("todos", tuple(reversed(TODOS.columns)))
    assert evolve_schema(TODOS, reordered) is reordered
    options = TableSchema("todos", TODOS.columns, soft_delete=False)
    assert evolve_schema(TODOS, options) is options


@pytest.mark.parametrize(
    ("new", "message"),
    [
        (
            TableSchema("todos", TODOS.columns[1:]),
            'Cannot remove column "title" — only adding nullable columns is supported',
        ),
        (
            TableSchema("todos", (ColumnSchema("title", "json"), *TODOS.columns[1:])),
            'Cannot change type of column "title" from "string" to "json"',
        ),
        (
            TableSchema("notes", TODOS.columns),
            'Cannot evolve schema: table name mismatch ("todos" vs "notes")',
        ),
    ],
)
def test_evolve_rejects(new: TableSchema, message: str) -> None:
    with pytest.raises(SchemaError) as info:
        evolve_schema(TODOS, new)
    assert info.value.message == message


def _delta(op: str, *columns: tuple[str, Any]) -> RowDelta:
    return RowDelta(op, "todos", "r", "c", tuple(ColumnDelta(*c) for c in columns), 1, "id")


def test_check_delta_accepts_valid_and_sparse_deltas() -> None:
    check_delta(TODOS, _delta(INSERT, ("title", "t"), ("done", False), ("prio", 2.5)))
    check_delta(TODOS, _delta(UPDATE, ("meta", {"a": [1, None, "x"]})))
    check_delta(TODOS, _delta(UPDATE))
    check_delta(TODOS, _delta(DELETE))
    check_delta(TODOS, _delta(DELETE, ("unknown", object())))  # a DELETE's columns are ignored


def test_check_delta_unknown_column() -> None:
    with pytest.raises(SchemaError) as info:
        check_delta(TODOS, _delta(UPDATE, ("title", "t"), ("color", "red")))
    assert info.value.message == (
        'Unknown column "color" in delta for table "todos". '
        "Schema version 1 does not include this column."
    )
    with pytest.raises(SchemaError, match="Schema version 7 does not include"):
        check_delta(TODOS, _delta(UPDATE, ("color", "red")), version=7)


@pytest.mark.parametrize(
    ("column", "value", "ok"),
    [
        ("title", "x", True),
        ("title", "", True),
        ("title", 1, False),
        ("prio", 1, True),
        ("prio", -2.5, True),
        ("prio", True, False),
        ("prio", "1", False),
        ("prio", math.nan, False),
        ("prio", math.inf, False),
        ("done", True, True),
        ("done", 0, False),
        ("meta", {"a": [1, {"b": None}]}, True),
        ("meta", "s", True),
        ("meta", 3, True),
        ("meta", False, True),
        ("meta", {"a": {1, 2}}, False),
        ("meta", {1: "x"}, False),
        ("meta", [math.nan], False),
        ("nothing", 0, False),
        ("nothing", "", False),
    ],
)
def test_check_delta_types(column: str, value: Any, ok: bool) -> None:
    delta = _delta(UPDATE, (column, value))
    if ok:
        check_delta(TODOS, delta)
    else:
        with pytest.raises(
            SchemaError, match=f'Column "{column}" in delta for table "todos" expects'
        ):
            check_delta(TODOS, delta)


@pytest.mark.parametrize("column", ["title", "prio", "done", "meta", "nothing"])
def test_null_fits_every_type(column: str) -> None:
    check_delta(TODOS, _delta(UPDATE, (column, None)))


def test_type_error_message_names_expected_and_got() -> None:
    with pytest.raises(SchemaError) as info:
        check_delta(TODOS, _delta(UPDATE, ("done", "yes")))
    assert (
        info.value.message
        == 'Column "done" in delta for table "todos" expects type "boolean", got string'
    )
    with pytest.raises(SchemaError) as info:
        check_delta(TODOS, _delta(UPDATE, ("prio", [1])))
    assert info.value.message.endswith('expects type "number", got array')
    with pytest.raises(SchemaError) as info:
        check_delta(TODOS, _delta(UPDATE, ("prio", math.inf)))
    assert info.value.message.endswith("got non-finite number")
