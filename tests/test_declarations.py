"""YAML declarations: parsing, errors, env expansion, application to the config store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
            "destination 'd' of kind sqlite needs a url",
            "$.destinations[0].url",
        ),
        (
            {"destinations": [{"name": "d", "kind": "postgres", "url": "x", "dataset": "a"}]},
            "'dataset' applies to kind bigquery, not postgres",
            "$.destinations[0].dataset",
        ),
        (
            {"destinations": [{"name": "d", "kind": "bigquery", "project": "p"}]},
            "destination 'd' of kind bigquery needs a dataset",
            "$.destinations[0].dataset",
        ),
        (
            {"destinations": [{"name": "d", "kind": "bigquery", "dataset": "a"}]},
            "destination 'd' of kind bigquery needs a project",
            "$.destinations[0].project",
        ),
        (
            {"destinations": [{"name": "d", "kind": "bigquery", "url": "x", "project": "p"}]},
            "takes project and dataset, not a url",
            "$.destinations[0].url",
        ),
        (
            {"destinations": [{"name": "d", "kind": "bigquery", "project": "p", "dataset": "a-b"}]},
            "Invalid SQL identifier",
            "$.destinations[0].dataset",
        ),
        (
            {
                "destinations": [
                    {
                        "name": "d",
                        "kind": "bigquery",
                        "project": "p",
                        "dataset": "a",
                        "endpoint": "x",
                    }
                ]
            },
            "endpoint must be an http\\(s\\) URL",
            "$.destinations[0].endpoint",
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
            {"actions": [{"connector": "h", "kind": "ftp", "url": "x", "types": {}}]},
            "action kind must be one of",
            "$.actions[0].kind",
        ),
        (
            {"actions": [{"connector": "h", "kind": "webhook", "types": {}}]},
            "a webhook connector needs a url",
            "$.actions[0]",
        ),
        (
            {"actions": [{"connector": "s", "kind": "sql", "url": "x", "destination": "d"}]},
            "missing required field `types`",
            "$.actions[0]",
        ),
        (
            {"actions": [{"connector": "s", "kind": "sql", "url": "x", "types": {"t": {}}}]},
            "a sql action type needs a statement",
            "$.actions[0].types.t",
        ),
        (
            {
                "actions": [
                    {
                        "connector": "h",
                        "kind": "webhook",
                        "url": "x",
                        "types": {"t": {"params": {"p": {"type": "date"}}}},
                    }
                ]
            },
            "must be one of string, number, integer, boolean, object, array, json",
            "$.actions[0].types.t.params.p.type",
        ),
        (
            {"actions": [{"connector": "h", "kind": "webhook", "url": "x", "types": {"a b": {}}}]},
            "Invalid SQL identifier",
            "$.actions[0].types.a b",
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


def test_bigquery_destination_is_declared_by_project_and_dataset() -> None:
    doc = {
        "gateway": "g1",
        "destinations": [
            {
                "name": "bq",
                "kind": "bigquery",
                "project": "${PROJECT}",
                "dataset": "analytics",
                "location": "EU",
                "endpoint": "http://127.0.0.1:9050",
                "tables": ["todos"],
            }
        ],
    }
    dest = parse_declarations([("x.yaml", doc)]).gateway("g1").destinations["bq"]
    assert (dest.kind, dest.url, dest.project, dest.dataset) == (
        "bigquery",
        None,
        "${PROJECT}",
        "analytics",
    )
    assert (dest.location, dest.endpoint, dest.tables) == (
        "EU",
        "http://127.0.0.1:9050",
        ("todos",),
    )


SHOP = {
    "name": "shop",
    "type": "postgres",
    "postgres": {"connectionString": "postgresql://app:${SHOP_PW}@db/shop"},
    "ingest": {"tables": [{"table": "items", "strategy": {"type": "diff"}}]},
}
JIRA = {"domain": "acme", "email": "bot@acme.io", "apiToken": "${JIRA_TOKEN}"}
RULES = {"version": 1, "buckets": [{"name": "all", "tables": ["items"], "filters": []}]}


def test_sync_rules_and_connectors_are_declared_and_applied() -> None:
    from lakesync_platform.wal.memory import MemoryWal

    decls = parse_declarations(
        [("x.yaml", {"gateway": "g", "syncRules": RULES, "connectors": [SHOP]})]
    )
    decl = decls.gateway("g")
    assert decl.sync_rules is not None and list(decl.connectors) == ["shop"]
    store = MemoryWal()
    apply_declarations(decls, store)
    assert store.sync_rules("g") == decl.sync_rules
    assert store.connectors("g") == dict(decl.connectors)
    store.save_connector_state("g", "shop", "items", {"snapshotRows": 3})
    apply_declarations(decls, store)  # re-applied: the config restored, the cursor kept
    assert store.connector_state("g", "shop") == {"items": {"snapshotRows": 3}}
    # the secret stays a reference: nothing is expanded at load time
    assert store.connectors("g")["shop"].source["connectionString"].endswith("${SHOP_PW}@db/shop")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"connectors": [{**SHOP, "ingest": {"tables": [{"table": "items"}]}}]},
            "x.yaml: Object missing required field `strategy`"
            " - at `$.connectors[0].ingest.tables[0]`",
        ),
        (
            {"connectors": [{**SHOP, "postgres": {"connectionString": "postgresql://a:pw@db/x"}}]},
            "x.yaml: the password in connectionString must be a ${VAR} reference"
            " - at `$.connectors[0].postgres.connectionString`",
        ),
        ({"connectors": [SHOP, SHOP]}, "x.yaml: connector 'shop' declared twice"),
        (
            {"connectors": [{"name": "t", "type": "jira", "jira": {**JIRA, "pageSize": 0}}]},
            "x.yaml: pageSize must be between 1 and 100 - at `$.connectors[0].jira.pageSize`",
        ),
        (
            {
                "connectors": [
                    {"name": "crm", "type": "salesforce", "salesforce": {"clientId": "c"}}
                ]
            },
            "x.yaml: instanceUrl is required (a non-empty string)"
            " - at `$.connectors[0].salesforce.instanceUrl`",
        ),
        (
            {
                "syncRules": {
                    "version": 1,
                    "buckets": [
                        {
                            "name": "b",
                            "tables": [],
                            "filters": [{"column": "c", "op": "like", "value": "x"}],
                        }
                    ],
                }
            },
            'x.yaml: Bucket "b" filter at index 0 op must be one of',
        ),
    ],
)
def test_bad_connectors_and_sync_rules_name_the_file_the_key_and_the_problem(
    doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeclarationError) as info:
        parse_declarations([("x.yaml", doc)])
    assert info.value.message.startswith(message)


def test_duplicates_are_rejected() -> None:
    doc = {"tables": [{"table": "t", "columns": []}]}
    with pytest.raises(DeclarationError, match="declared twice"):
        parse_declarations([("a.yaml", doc), ("b.yaml", doc)])


def test_action_connectors_are_declared_per_gateway() -> None:
    decls = parse_declarations(
        [
            (
                "a.yaml",
                {
                    "gateway": "g",
                    "destinations": [{"name": "db", "kind": "sqlite", "url": "sqlite:///x"}],
                    "actions": [
                        {
                            "connector": "ops",
                            "kind": "sql",
                            "destination": "db",
                            "types": {
                                "close": {
                                    "description": "Close one",
                                    "statement": "UPDATE t SET done = 1 WHERE id = :id",
                                    "params": {"id": {"type": "string"}},
                                }
                            },
                        },
                        {
                            "connector": "hook",
                            "kind": "webhook",
                            "url": "https://${HOST}/x",
                            "timeoutSeconds": 2,
                            "types": {"ping": {}},
                        },
                    ],
                },
            )
        ]
    )
    actions = decls.gateway("g").actions
    assert sorted(actions) == ["hook", "ops"]
    close = actions["ops"].types["close"].descriptor("ops")
    assert close.to_json()["paramsSchema"]["required"] == ["id"]
    assert actions["hook"].timeout_s == 2 and actions["hook"].types["ping"].params is None
    with pytest.raises(DeclarationError, match="uses destination 'nowhere', which is not"):
        parse_declarations(
            [
                (
                    "b.yaml",
                    {
                        "actions": [
                            {"connector": "s", "kind": "sql", "destination": "nowhere", "types": {}}
                        ]
                    },
                )
            ]
        )


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
