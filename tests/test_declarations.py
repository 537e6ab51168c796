"""YAML declarations: parsing, errors, env expansion, application to the config store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync_platform.adapters.source import SOURCE_KINDS as ADAPTER_SOURCE_KINDS
from lakesync_platform.declarations import (
    SOURCE_KINDS,
    DeclarationError,
    apply_declarations,
    expand_env,
    load_declarations,
    parse_declarations,
)
from lakesync_platform.testing import DEMO_GATEWAY, demo_declarations_yaml, demo_todos_schema
from lakesync_platform.wal.store import WriteAheadLog

REPO_DEFS = Path(__file__).resolve().parents[1] / "defs"


def test_repository_example_declares_the_demo() -> None:
    decls = load_declarations(REPO_DEFS)
    demo = decls.gateway("demo")
    assert set(demo.tables) == {"todos"}
    assert demo.tables["todos"].column_names == ("title", "completed", "priority", "tags")
    local = demo.destinations["local"]
    assert local.kind == "sqlite" and local.covers("todos") and not local.covers("other")


def test_the_demo_is_declared_once(tmp_path: Path) -> None:
    """``defs/todos.yaml``, the file ``lakesync dev`` writes where there is none, and the testing
    kit's demo table are one definition."""
    (tmp_path / "todos.yaml").write_text(demo_declarations_yaml())
    written = load_declarations(tmp_path).gateway(DEMO_GATEWAY)
    repo = load_declarations(REPO_DEFS).gateway(DEMO_GATEWAY)
    assert written.tables == repo.tables == {"todos": demo_todos_schema()}
    assert written.destinations == repo.destinations


def test_files_add_up_and_default_to_every_table(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "gateway: g1\ntables:\n  - {table: t1, columns: [{name: c, type: string}]}\n"
    )
    (tmp_path / "b.yml").write_text(
        "gateway: g1\ndestinations:\n  - {name: wh, kind: postgres, url: 'postgresql://x/y'}\n"
    )
    decls = load_declarations(tmp_path)
    g1 = decls.gateway("g1")
    assert set(g1.tables) == {"t1"} and g1.destinations["wh"].tables is None
    assert g1.destinations["wh"].covers("anything")
    assert load_declarations(tmp_path / "missing").gateways == {}


@pytest.mark.parametrize(
    ("doc", "message", "path"),
    [
        (
            {"tables": [{"table": "t", "columns": [{"name": "c", "type": "text"}]}]},
            "Invalid column type",
            "$.tables[0]",
        ),
        (
            {"destinations": [{"name": "d", "kind": "oracle", "url": "x"}]},
            "kind must be one of",
            "$.destinations[0].kind",
        ),
        (
            {"destinations": [{"name": "d", "kind": "sqlite"}]},
            "missing required field `url`",
            "$.destinations[0]",
        ),
        (
            {"destinations": [{"name": "d", "kind": "sqlite", "url": ""}]},
            "length >= 1",
            "$.destinations[0].url",
        ),
        (
            {"destinations": [{"name": "d-1", "kind": "sqlite", "url": "x"}]},
            "Invalid SQL identifier",
            "$.destinations[0].name",
        ),
        (
            {"destinations": [{"name": "d", "kind": "sqlite", "url": "x", "tables": ["ok", 3]}]},
            "Expected `str`, got `int`",
            "$.destinations[0].tables[1]",
        ),
        (
            {"destinations": [{"name": "d", "kind": "sqlite", "url": "x", "tabls": ["t"]}]},
            "unknown field `tabls`",
            "$.destinations[0]",
        ),
        (
            {"sources": [{"name": "crm", "kind": "oracle", "url": "x"}]},
            "source 'crm' kind must be one of",
            "$.sources[0].kind",
        ),
        ({"sources": [{"name": "crm", "kind": "postgres"}]}, "`url`", "$.sources[0]"),
        (
            {"sources": [{"name": "c-1", "kind": "postgres", "url": "x"}]},
            "Source names must match",
            "$.sources[0].name",
        ),
        (
            {"sources": [{"name": "c", "kind": "mysql", "url": "x", "options": {"a": 1}}]},
            "Expected `str`, got `int`",
            "$.sources[0].options[...]",
        ),
        (
            {"sources": [{"name": "c", "kind": "mysql", "url": "x"}] * 2},
            "source 'c' declared twice",
            "$.sources[1].name",
        ),
        (
            {"destinations": [{"name": "d", "kind": "sqlite", "url": "x", "role": "backup"}]},
            "role must be one of",
            "$.destinations[0].role",
        ),
        (
            {"destinations": [{"name": "d", "kind": "sqlite", "url": "x", "role": "best_effort"}]},
            "declares a best_effort destination but no primary one",
            "$.destinations[0].role",
        ),
        ({"tabels": []}, "unknown field `tabels`", "$"),
        ({"tables": {"t": {}}}, "Expected `array | null`, got `object`", "$.tables"),
        ({"gateway": "bad gw"}, "Invalid gateway id", "$.gateway"),
        ({"gateway": "_private"}, "Invalid gateway id", "$.gateway"),
        ({"gateway": 7}, "Expected `str`, got `int`", "$.gateway"),
        (["gateway: x"], "Expected `object`, got `array`", "$"),
    ],
)
def test_malformed_declarations_name_the_file_and_the_path(
    doc: object, message: str, path: str
) -> None:
    with pytest.raises(DeclarationError, match=message) as info:
        parse_declarations([("x.yaml", doc)])
    assert info.value.message.startswith("x.yaml: ")
    assert info.value.message.endswith(f" - at `{path}`")


def test_reserved_keys_are_refused_by_name() -> None:
    with pytest.raises(DeclarationError, match=r"x.yaml: \['syncRules'\] are not supported yet"):
        parse_declarations([("x.yaml", {"syncRules": {}})])


def test_duplicates_are_rejected() -> None:
    doc = {"tables": [{"table": "t", "columns": []}]}
    with pytest.raises(DeclarationError, match="declared twice"):
        parse_declarations([("a.yaml", doc), ("b.yaml", doc)])


def test_sources_are_declared_per_gateway_with_the_kinds_the_adapters_open() -> None:
    doc = {
        "gateway": "g1",
        "sources": [{"name": "crm", "kind": "postgres", "url": "${CRM}", "options": {"k": "v"}}],
    }
    g1 = parse_declarations([("s.yaml", doc)]).gateway("g1")
    crm = g1.sources["crm"]
    assert (crm.kind, crm.url, dict(crm.options)) == ("postgres", "${CRM}", {"k": "v"})
    assert set(SOURCE_KINDS) == set(ADAPTER_SOURCE_KINDS)


def test_destinations_route_tables_and_default_to_primary() -> None:
    doc = {
        "destinations": [
            {"name": "wh", "kind": "postgres", "url": "x", "tables": ["a"]},
            {"name": "bk", "kind": "mysql", "url": "y", "role": "best_effort"},
        ]
    }
    dests = parse_declarations([("r.yaml", doc)]).gateway("default").destinations
    assert dests["wh"].primary and dests["wh"].covers("a") and not dests["wh"].covers("b")
    assert not dests["bk"].primary and dests["bk"].covers("b")


def test_env_expansion() -> None:
    assert expand_env("sqlite:///${D}/x.db", {"D": "/data"}) == "sqlite:////data/x.db"
    with pytest.raises(DeclarationError, match="NOPE"):
        expand_env("${NOPE}", {})


@pytest.fixture
def wal(tmp_path: Path) -> Iterator[WriteAheadLog]:
    """A fresh SQLite WAL (its config store is what declarations are applied to)."""
    log = WriteAheadLog.open("sqlite:///" + str(tmp_path / "wal.db"))
    yield log
    log.close()


def test_apply_registers_and_evolves_in_the_config_store(wal: WriteAheadLog) -> None:
    base = {
        "gateway": "g",
        "tables": [{"table": "t", "columns": [{"name": "a", "type": "string"}]}],
    }
    assert apply_declarations(parse_declarations([("a.yaml", base)]), wal) == 1
    evolved = {
        "gateway": "g",
        "tables": [
            {
                "table": "t",
                "columns": [{"name": "a", "type": "string"}, {"name": "b", "type": "number"}],
            }
        ],
    }
    apply_declarations(parse_declarations([("a.yaml", evolved)]), wal)
    assert wal.schemas("g")["t"].column_names == ("a", "b")
    assert wal.schema_versions("g")["t"] == 2
