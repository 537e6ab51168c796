"""Local tables from schemas, additive migration, value codec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.client import LocalDB, SchemaRegistry, SchemaSynchroniser, create_client
from lakesync_platform.client._schemas import from_sql, to_sql
from lakesync_platform.core.errors import SchemaError
from lakesync_platform.core.schema import ColumnSchema, TableSchema

NOTES = TableSchema("notes", (ColumnSchema("body", "string"),))


def _columns(db: LocalDB, table: str) -> dict[str, str]:
    return {r["name"]: r["type"] for r in db.query(f'PRAGMA table_info("{table}")')}


def test_register_creates_table_with_reference_affinities() -> None:
    db = LocalDB.memory()
    reg = SchemaRegistry(db)
    reg.load()
    reg.register(
        {
            "table": "t",
            "columns": [
                {"name": "s", "type": "string"},
                {"name": "n", "type": "number"},
                {"name": "b", "type": "boolean"},
                {"name": "j", "type": "json"},
                {"name": "z", "type": "null"},
            ],
        }
    )
    assert _columns(db, "t") == {
        "_rowId": "TEXT",
        "s": "TEXT",
        "n": "REAL",
        "b": "INTEGER",
        "j": "TEXT",
        "z": "TEXT",
    }
    assert reg.version("t") == 1
    assert reg.tables() == ["t"]


def test_reregistering_evolves_additively_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with create_client(name="s", schemas=[NOTES], path=path, auto_sync_ms=0) as client:
        client.tracker.insert("notes", "n1", {"body": "hi"})
        wider = TableSchema("notes", (*NOTES.columns, ColumnSchema("pinned", "boolean")))
        client.register_schema(wider)
        assert client.schema("notes") == wider
        client.tracker.update("notes", "n1", {"pinned": True})
        with pytest.raises(SchemaError, match="Cannot remove column"):
            client.register_schema(
                {"table": "notes", "columns": [{"name": "pinned", "type": "boolean"}]}
            )
        with pytest.raises(SchemaError, match="Cannot change type"):
            client.register_schema(
                {
                    "table": "notes",
                    "columns": [
                        {"name": "body", "type": "json"},
                        {"name": "pinned", "type": "boolean"},
                    ],
                }
            )
    with create_client(name="s", path=path, auto_sync_ms=0) as again:  # schemas come from the file
        assert again.tracker.get("notes", "n1") == {"body": "hi", "pinned": True}
        assert again._registry.version("notes") == 2


def test_schema_synchroniser_follows_server_versions() -> None:
    db = LocalDB.memory()
    reg = SchemaRegistry(db)
    reg.load()
    reg.register(NOTES)
    sync = SchemaSynchroniser(reg)
    assert not sync.synchronise(NOTES, 1)  # local version already 1
    wider = {
        "table": "notes",
        "columns": [{"name": "body", "type": "string"}, {"name": "x", "type": "number"}],
    }
    assert sync.synchronise(wider, 3)
    assert reg.version("notes") == 3
    assert "x" in _columns(db, "notes")
    assert not sync.synchronise(wider, 3)
    with pytest.raises(SchemaError):
        sync.synchronise({"table": "notes", "columns": []}, 4)
    assert reg.version("notes") == 3


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(json_values)
def test_json_column_round_trips(value: Any) -> None:
    db = LocalDB.memory()
    db.exec("CREATE TABLE t (j TEXT)")
    db.exec("INSERT INTO t VALUES (?)", [to_sql(value, "json")])
    (stored,) = db.query_tuples("SELECT j FROM t")[0]
    assert from_sql(stored, "json") == value


@given(st.one_of(st.none(), st.booleans()))
def test_boolean_column_round_trips(value: bool | None) -> None:
    assert from_sql(to_sql(value, "boolean"), "boolean") is value


@given(st.one_of(st.none(), st.text()))
def test_string_column_round_trips(value: str | None) -> None:
    db = LocalDB.memory()
    db.exec("CREATE TABLE t (s TEXT)")
    db.exec("INSERT INTO t VALUES (?)", [to_sql(value, "string")])
    assert from_sql(db.query_tuples("SELECT s FROM t")[0][0], "string") == value
