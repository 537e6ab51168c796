"""``GET /v1/sync/{gw}/pull?source=NAME``: pulls from a declared source's delta log (a real
PostgreSQL or MariaDB database) through the in-process gateway, with sync rules applied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.client import HttpTransport, create_client
from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.sync.source_pull import SourceCursor
from tests.gateway.conftest import Gateway, GatewayFactory, assert_error
from tests.helpers import make_delta, token
from tests.pipeline.conftest import _server_database
from tests.sim import TsLikeClient

RULES = {
    "version": 1,
    "buckets": [
        {"name": "shared", "tables": ["todos"], "filters": []},
        {
            "name": "mine",
            "tables": ["notes"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        },
    ],
}
BASE_MS = 1_767_000_000_000


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mariadb),
    ]
)
def source_db(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """``(kind, url)`` of a fresh PostgreSQL or MariaDB database."""
    if request.param == "postgres":
        for name in _server_database(
            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
            'CREATE DATABASE "{name}"',
            'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        ):
            yield "postgres", f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    else:
        for name in _server_database(
            "mysql+pymysql://root:@127.0.0.1:3306/test",
            "CREATE DATABASE `{name}` CHARACTER SET utf8mb4",
            "DROP DATABASE IF EXISTS `{name}`",
        ):
            yield "mysql", f"mysql+pymysql://root:@127.0.0.1:3306/{name}"


@pytest.fixture
def source(source_db: tuple[str, str]) -> Iterator[SqlAdapter]:
    """The source database's delta log."""
    adapter = SqlAdapter.connect(source_db[1])
    adapter.ensure_delta_log()
    yield adapter
    adapter.close()


@pytest.fixture
def gateway(
    make_gateway: GatewayFactory, source_db: tuple[str, str], gw: str, tmp_path: Path
) -> Gateway:
    """A gateway declaring the source as ``crm`` (its URL through ``${CRM_URL}``)."""
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "sources.yaml").write_text(
        f"gateway: {gw}\nsources:\n  - name: crm\n    kind: {source_db[0]}\n    url: ${{CRM_URL}}\n"
    )
    return make_gateway(defs_dir=defs, env={"CRM_URL": source_db[1]})


def _note(row: str, hlc_ms: int, counter: int = 0, **cols: Any) -> RowDelta:
    return make_delta("writer", encode(BASE_MS + hlc_ms, counter), "notes", row, cols or None)


def _pull(gateway: Gateway, gw: str, sub: str, since: str = "0", **params: str) -> dict[str, Any]:
    resp = gateway.pull(gw, since, client_id=sub, source="crm", **params)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _ops(body: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(d["op"], d["rowId"], int(d["hlc"])) for d in body["deltas"]]


def _set_rules(gateway: Gateway, gw: str) -> None:
    resp = gateway.client.post(f"/v1/admin/sync-rules/{gw}", json=RULES, headers=gateway.admin(gw))
    assert resp.status_code == 200, resp.text


def test_source_pull_applies_each_callers_sync_rules(
    gateway: Gateway, source: SqlAdapter, gw: str
) -> None:
    _set_rules(gateway, gw)
    source.insert_deltas(
        [
            _note("n1", 1, title="a1", owner="alice"),
            _note("n2", 2, title="b1", owner="bob"),
            _note("n3", 3, title="a3", owner="alice"),
        ]
    )
    h3 = encode(BASE_MS + 3, 0)
    alice = _pull(gateway, gw, "alice")
    # The TS-client encoding: each row whole, as DELETE stamped 0 then INSERT.
    assert _ops(alice) == [
        ("DELETE", "n1", 0),
        ("INSERT", "n1", encode(BASE_MS + 1, 0)),
        ("DELETE", "n3", 0),
        ("INSERT", "n3", h3),
    ]
    assert alice["deltas"][1]["columns"] == [
        {"column": "title", "value": "a1"},
        {"column": "owner", "value": "alice"},
    ]
    assert alice["hasMore"] is False
    bob = _pull(gateway, gw, "bob")
    assert [(op, row) for op, row, _ in _ops(bob)] == [("DELETE", "n2"), ("INSERT", "n2")]

    # n3 moves to bob, n1 is deleted: alice holds both and is told; bob gets n3 whole.
    source.insert_deltas([_note("n3", 10, owner="bob"), _note("n1", 11)])
    alice2 = _pull(gateway, gw, "alice", alice["serverHlc"])
    assert [(op, row) for op, row, _ in _ops(alice2)] == [("DELETE", "n3"), ("DELETE", "n1")]
    bob2 = _pull(gateway, gw, "bob", bob["serverHlc"])
    assert [(op, row) for op, row, _ in _ops(bob2)] == [("DELETE", "n3"), ("INSERT", "n3")]
    assert bob2["deltas"][1]["columns"] == [
        {"column": "title", "value": "a3"},
        {"column": "owner", "value": "bob"},
    ]
    # Nothing more for either; a cursor that is not one of this view's starts over.
    assert _pull(gateway, gw, "alice", alice2["serverHlc"])["deltas"] == []
    assert _pull(gateway, gw, "bob", bob2["serverHlc"])["deltas"] == []
    assert _pull(gateway, gw, "alice", bob2["serverHlc"])["deltas"] == []  # held nothing
    assert [d["rowId"] for d in _pull(gateway, gw, "bob", alice2["serverHlc"])["deltas"]] == [
        "n2",
        "n2",
        "n3",
        "n3",
    ]
    # The gateway's own pull cursor is untouched by source pulls (push answers it).
    assert gateway.pull_all(gw, "alice") == []


def test_source_pages_over_many_deltas_with_one_hlc(
    gateway: Gateway, source: SqlAdapter, gw: str
) -> None:
    hlc = encode(BASE_MS, 5)
    deltas = [make_delta("writer", hlc, "todos", f"t{i:04d}", {"n": i}) for i in range(600)]
    source.insert_deltas(deltas)
    rows = [d.row_id for d in sorted(deltas, key=lambda d: d.delta_id)]
    for fmt, limit, per_row in (("", "100", 2), ("stamped", "64", 1)):
        params = {"limit": limit, "format": fmt} if fmt else {"limit": limit}
        since, seen, pages = "0", [], 0
        while True:
            body = _pull(gateway, gw, "c1", since, **params)
            pages += 1
            assert body["deltas"], "a page is never empty"
            assert len(body["deltas"]) <= int(limit)
            seen += [d["rowId"] for d in body["deltas"] if d["op"] == "INSERT"]
            since = body["serverHlc"]
            cursor = SourceCursor.decode(int(since))
            assert cursor is not None and cursor.hlc == hlc
            if not body["hasMore"]:
                break
        assert seen == rows  # in (hlc, delta_id) order: none skipped, none repeated
        assert pages == -(-len(rows) * per_row // int(limit))
        last = _pull(gateway, gw, "c1", since, **params)
        assert last == {"deltas": [], "serverHlc": since, "hasMore": False}
    later = make_delta("writer", hlc + 1, "todos", "t0001", {"title": "later"})
    source.insert_deltas([later])
    assert [d["rowId"] for d in _pull(gateway, gw, "c1", since, format="stamped")["deltas"]] == [
        "t0001"
    ]


def test_ts_client_pull_from_and_python_client_pull_from_converge(
    gateway: Gateway, source: SqlAdapter, gw: str, tmp_path: Path
) -> None:
    _set_rules(gateway, gw)
    source.insert_deltas(
        [_note(f"n{i}", i, title=f"t{i}", owner=("alice" if i % 3 else "bob")) for i in range(900)]
        + [_note("n7", 2000, title="edited"), _note("n8", 2001)]
    )
    expected = {
        ("notes", f"n{i}"): {"title": "edited" if i == 7 else f"t{i}", "owner": "alice"}
        for i in range(900)
        if i % 3 and i != 8
    }

    class Http:
        def pull(
            self, client_id: str, since: int, limit: int, stamped: bool, source: str | None = None
        ) -> tuple[list[dict[str, Any]], int, bool]:
            extra = {"source": source} if source else {}
            resp = gateway.pull(gw, str(since), client_id=client_id, limit=str(limit), **extra)
            assert resp.status_code == 200, resp.text
            body = resp.json()
            return body["deltas"], int(body["serverHlc"]), body["hasMore"]

    ts = TsLikeClient("alice", Http(), clock=lambda: BASE_MS + 5000)  # type: ignore[arg-type]
    for _ in range(3):  # it ignores hasMore: one page of at most 1000 deltas per call
        ts.pull_from("crm")
    assert ts.failed_applies == 0
    assert ts.visible_rows() == expected

    transport = HttpTransport(
        "http://testserver", gw, token=token("alice", gw), client=gateway.client
    )
    schema = {
        "table": "notes",
        "columns": [{"name": "title", "type": "string"}, {"name": "owner", "type": "string"}],
    }
    client = create_client(
        name="alice",
        client_id="alice",
        schemas=[schema],
        transport=transport,
        path=tmp_path / "alice.db",
        auto_sync_ms=0,
        pull_page_size=300,
    )
    try:
        # n7 changed again at the end of the log: sent again there (whole, idempotent).
        assert client.pull_from("crm") == len(expected) + 1
        assert client.coordinator.cursor == 0  # the gateway cursor is its own
        local = client.db.query("SELECT * FROM notes")
        got = {("notes", r["_rowId"]): {"title": r["title"], "owner": r["owner"]} for r in local}
        assert got == expected
        assert client.pull_from("crm") == 0
    finally:
        client.close()


def test_unknown_source_is_404_and_another_gateways_token_is_refused(
    gateway: Gateway, gw: str
) -> None:
    resp = gateway.pull(gw, "0", source="nope")
    assert_error(resp, 404, "SOURCE_NOT_FOUND", 'Source adapter "nope" not found')
    other = f"{gw}_other"
    resp = gateway.pull(other, "0", source="crm")  # declared for gw, not for other
    assert_error(resp, 404, "SOURCE_NOT_FOUND", 'Source adapter "crm" not found')
    resp = gateway.pull(gw, "0", source="crm", headers=gateway.auth("c1", other))
    assert_error(resp, 403, "AUTH_ERROR", "Gateway ID mismatch: JWT authorises a different gateway")
    resp = gateway.pull(gw, "0", source="crm", headers={})
    assert_error(resp, 401, "AUTH_ERROR", "Missing Bearer token")
