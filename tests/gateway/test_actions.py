"""Actions end to end: real gateway processes, real external systems, real sockets.

The external systems are an HTTP server on a loopback socket (the ``webhook`` connectors post
to it; it counts what it receives) and an SQLite database (the ``sql`` connector writes to it),
both declared in a defs folder the gateway is started with. Side effects are counted there, at
the external system: an action retried — after a restart, on another gateway process sharing a
PostgreSQL WAL, or concurrently — reaches it once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from lakesync_platform.core.actions import Action, ActionResult
from lakesync_platform.core.ids import action_id
from lakesync_platform.core.proto import (
    TAG_ACTION_PUSH,
    TAG_ACTION_RESPONSE,
    decode_action_response,
    encode_action_push,
    frame,
)
from lakesync_platform.testing import GatewayProcess
from tests.action_kit import GW, Hook, serve_hook, start
from tests.helpers import token

CLIENT = "alice"


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    with serve_hook() as served:
        yield served


def action(
    connector: str = "hooks",
    params: dict[str, Any] | None = None,
    *,
    hlc: int = 1,
    client: str = CLIENT,
    action_type: str = "notify",
    key: str | None = None,
) -> dict[str, Any]:
    params = {"text": "hello"} if params is None else params
    out = {
        "actionId": action_id(client, hlc, connector, action_type, params),
        "clientId": client,
        "hlc": str(hlc),
        "connector": connector,
        "actionType": action_type,
        "params": params,
    }
    if key is not None:
        out["idempotencyKey"] = key
    return out


def send(
    gw: GatewayProcess, actions: list[dict[str, Any]], *, client: str = CLIENT, tok: str = ""
) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/sync/{GW}/action",
        json={"clientId": client, "actions": actions},
        headers={"Authorization": f"Bearer {tok or token(client, GW)}"},
        timeout=30,
    )


def results(resp: httpx.Response) -> list[dict[str, Any]]:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert int(body["serverHlc"]) > 0
    found: list[dict[str, Any]] = body["results"]
    return found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, hook: Hook) -> Iterator[GatewayProcess]:
    with start(tmp_path_factory.mktemp("actions"), hook) as proc:
        yield proc


def stored_actions(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "wal.db") as db:
        return int(db.execute("SELECT count(*) FROM wal_actions").fetchone()[0])


# ---------------------------------------------------------------------- one gateway


def test_discovery_lists_the_declared_connectors(gateway: GatewayProcess) -> None:
    resp = httpx.get(
        f"{gateway.url}/v1/sync/{GW}/actions",
        headers={"Authorization": f"Bearer {token(CLIENT, GW)}"},
    )
    assert resp.status_code == 200
    connectors = resp.json()["connectors"]
    assert sorted(connectors) == ["flaky", "hooks", "notes", "slow", "strict"]
    [notify] = connectors["hooks"]
    assert notify["actionType"] == "notify"
    assert notify["paramsSchema"]["properties"] == {
        "text": {"type": "string"},
        "urgent": {"type": "boolean"},
    }
    assert notify["paramsSchema"]["required"] == ["text"]
    assert connectors["slow"] == [{"actionType": "notify", "description": "Post slowly"}]


def test_an_action_reaches_the_external_system_once(gateway: GatewayProcess, hook: Hook) -> None:
    first = action(params={"text": "once"}, hlc=10, key="order-10")
    [ran] = results(send(gateway, [first]))
    assert ran["actionId"] == first["actionId"]
    assert ran["data"] == {"received": 1, "params": {"text": "once"}}
    assert hook.count("/ok", "order-10") == 1
    # Retried by id, then by idempotency key under a new id: the stored result each time.
    assert results(send(gateway, [first])) == [ran]
    again = action(params={"text": "once more"}, hlc=11, key="order-10")
    assert results(send(gateway, [again])) == [{**ran, "actionId": again["actionId"]}]
    assert hook.count("/ok", "order-10") == 1


def test_results_come_in_request_order(gateway: GatewayProcess, hook: Hook) -> None:
    batch = [
        action(params={"text": "a"}, hlc=20),
        action("jira", hlc=21),
        action(action_type="delete", hlc=22),
        action(params={"text": 1}, hlc=23),
        action("strict", {}, hlc=24),
    ]
    ran, jira, delete, bad, refused = results(send(gateway, batch))
    assert ran["data"]["params"] == {"text": "a"}
    assert jira == {
        "actionId": batch[1]["actionId"],
        "code": "ACTION_NOT_SUPPORTED",
        "message": 'No action handler registered for connector "jira"',
        "retryable": False,
    }
    assert delete["message"] == 'Action type "delete" not supported by connector "hooks"'
    assert bad["code"] == "ACTION_VALIDATION_ERROR" and not bad["retryable"]
    assert refused["code"] == "ACTION_EXECUTION_ERROR" and not refused["retryable"]
    assert refused["message"].startswith("Webhook answered 422")
    # A refusal is final: stored, and not sent again.
    assert results(send(gateway, [batch[4]])) == [refused]
    assert hook.count("/reject") == 1


def test_a_retryable_failure_runs_again_and_then_succeeds(
    gateway: GatewayProcess, hook: Hook
) -> None:
    flaky = action("flaky", {}, hlc=30)
    [failed] = results(send(gateway, [flaky]))
    assert failed["code"] == "ACTION_EXECUTION_ERROR" and failed["retryable"]
    assert failed["message"].startswith("Webhook answered 503")
    [ran] = results(send(gateway, [flaky]))
    assert ran["data"]["received"] == 2
    assert results(send(gateway, [flaky])) == [ran]
    assert hook.count("/flaky", flaky["actionId"]) == 2


def test_the_sql_connector_runs_its_statement_once(gateway: GatewayProcess, hook: Hook) -> None:
    add = action("notes", {"body": "buy milk"}, hlc=40, action_type="add")
    [ran] = results(send(gateway, [add]))
    assert ran["data"] == {"rowCount": 1, "rows": [{"action_id": add["actionId"]}]}
    assert results(send(gateway, [add])) == [ran]
    with sqlite3.connect(gateway.data_dir / "ops.db") as db:
        rows = db.execute("SELECT action_id, body, author FROM notes").fetchall()
    assert rows == [(add["actionId"], "buy milk", CLIENT)]
    # A constraint the database refuses is a failure that is not retried.
    dup = action("notes", {"body": "again"}, hlc=41, action_type="add")
    with sqlite3.connect(gateway.data_dir / "ops.db") as db:
        db.execute("INSERT INTO notes VALUES (?, 'x', 'y')", (dup["actionId"],))
    [refused] = results(send(gateway, [dup]))
    assert refused["code"] == "ACTION_EXECUTION_ERROR" and not refused["retryable"]
    assert "UNIQUE constraint failed" in refused["message"]


@pytest.mark.parametrize(
    ("body", "status", "code", "message"),
    [
        (b"{not json", 400, "VALIDATION_ERROR", "Invalid JSON body"),
        (b"[]", 400, "VALIDATION_ERROR", "Missing required fields: clientId, actions"),
        (
            json.dumps({"clientId": CLIENT, "actions": {}}).encode(),
            400,
            "VALIDATION_ERROR",
            "Missing required fields: clientId, actions",
        ),
        (
            json.dumps({"clientId": CLIENT, "actions": [{**action(hlc=50), "hlc": 50}]}).encode(),
            400,
            "VALIDATION_ERROR",
            "hlc must be a bigint",
        ),
        (
            json.dumps({"clientId": CLIENT, "actions": [action(hlc=51), {"x": 1}]}).encode(),
            400,
            "VALIDATION_ERROR",
            "actionId must be a non-empty string",
        ),
        (
            json.dumps({"clientId": CLIENT, "actions": [action(hlc=52, client="bob")]}).encode(),
            400,
            "VALIDATION_ERROR",
            'Action clientId "bob" does not match the request clientId',
        ),
        (
            json.dumps({"clientId": CLIENT, "actions": [action(hlc=53)] * 101}).encode(),
            400,
            "VALIDATION_ERROR",
            "Too many actions in a single request (max 100)",
        ),
        (
            json.dumps({"clientId": CLIENT, "actions": [action(hlc=55, key="k" * 1025)]}).encode(),
            400,
            "VALIDATION_ERROR",
            "idempotencyKey is longer than 1024 characters",
        ),
        (
            json.dumps({"clientId": "bob", "actions": [action(hlc=54, client="bob")]}).encode(),
            403,
            "FORBIDDEN",
            "Client ID mismatch: action clientId does not match authenticated identity",
        ),
    ],
)
def test_bad_bodies_are_refused_whole_and_run_nothing(
    gateway: GatewayProcess, hook: Hook, body: bytes, status: int, code: str, message: str
) -> None:
    before, stored = hook.count(), stored_actions(gateway.data_dir)
    resp = httpx.post(
        f"{gateway.url}/v1/sync/{GW}/action",
        content=body,
        headers={"Authorization": f"Bearer {token(CLIENT, GW)}"},
    )
    assert resp.status_code == status, resp.text
    assert resp.json()["code"] == code and resp.json()["error"] == message
    assert hook.count() == before
    assert stored_actions(gateway.data_dir) == stored


def test_tokens_must_be_for_this_gateway(gateway: GatewayProcess, hook: Hook) -> None:
    before = hook.count()
    resp = send(gateway, [action(hlc=60)], tok=token(CLIENT, "other"))
    assert resp.status_code == 403
    assert resp.json() == {
        "error": "Gateway ID mismatch: JWT authorises a different gateway",
        "code": "AUTH_ERROR",
        "requestId": resp.headers["x-request-id"],
    }
    assert httpx.post(f"{gateway.url}/v1/sync/{GW}/action", json={}).status_code == 401
    other = httpx.get(
        f"{gateway.url}/v1/sync/{GW}/actions",
        headers={"Authorization": f"Bearer {token(CLIENT, 'other')}"},
    )
    assert other.status_code == 403
    assert hook.count() == before


def test_actions_over_the_websocket_run_once_like_http(gateway: GatewayProcess, hook: Hook) -> None:
    """A ``0x04`` ActionPush frame is answered by a ``0x05`` ActionResponse with the same
    checks and the same stored results as ``POST /action``: the socket's retry, and an HTTP
    retry of the same action, reach the external system once."""
    first = action(params={"text": "by socket"}, hlc=40, key="ws-40")
    wire = Action(first["actionId"], CLIENT, 40, "hooks", "notify", first["params"], "ws-40")
    url = f"ws://127.0.0.1:{gateway.port}/v1/sync/{GW}/ws?token={token(CLIENT, GW)}"
    with connect(url) as ws:
        replies = []
        for _ in range(2):
            ws.send(frame(TAG_ACTION_PUSH, encode_action_push(CLIENT, [wire])))
            message = ws.recv(timeout=30)
            assert isinstance(message, bytes) and message[0] == TAG_ACTION_RESPONSE
            replies.append(decode_action_response(message[1:]))
    (ran,), hlc = replies[0]
    assert isinstance(ran, ActionResult) and hlc > 0
    assert ran.data == {"received": 1, "params": {"text": "by socket"}}
    assert replies[1][0] == [ran]
    assert results(send(gateway, [first]))[0]["data"] == ran.data
    assert hook.count("/ok", "ws-40") == 1
    # Another client's action on this token's socket: refused like a push (1008), nothing run.
    other = Action("x" * 64, "mallory", 41, "hooks", "notify", {"text": "no"}, "ws-41")
    with connect(url) as ws:
        ws.send(frame(TAG_ACTION_PUSH, encode_action_push("mallory", [other])))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=30)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    assert "Client ID mismatch" in info.value.rcvd.reason
    assert hook.count("/ok", "ws-41") == 0


def test_the_unversioned_routes_redirect(gateway: GatewayProcess) -> None:
    for method, path in (("POST", "action"), ("GET", "actions"), ("GET", "actions?token=x%2Fy")):
        resp = httpx.request(method, f"{gateway.url}/sync/{GW}/{path}")
        assert resp.status_code == 301
        assert resp.headers["location"] == f"/v1/sync/{GW}/{path}"  # uvicorn: the query too


# ---------------------------------------------------------------------- restarts and processes


def test_a_retry_after_a_restart_gets_the_stored_result(tmp_path: Path, hook: Hook) -> None:
    act = action(params={"text": "durable"}, hlc=70)
    with start(tmp_path, hook) as gw:
        [ran] = results(send(gw, [act]))
    with start(tmp_path, hook) as gw:
        assert results(send(gw, [act])) == [ran]
    assert hook.count("/ok", act["actionId"]) == 1


@pytest.mark.postgres
def test_two_gateway_processes_on_one_wal_run_an_action_once(
    tmp_path: Path, hook: Hook, pg_url: str
) -> None:
    with (
        start(tmp_path / "a", hook, pg_url) as one,
        start(tmp_path / "b", hook, pg_url) as two,
    ):
        act = action(params={"text": "shared"}, hlc=80)
        [ran] = results(send(one, [act]))
        assert results(send(two, [act])) == [ran]
        assert hook.count("/ok", act["actionId"]) == 1

        # Concurrent duplicates on both processes at once: the slow hook sees one request,
        # and every caller gets its result.
        slow = action("slow", {}, hlc=81, key="slow-81")
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: send((one, two)[i % 2], [slow]), range(8)))
        found = [results(a)[0] for a in answers]
        assert hook.count("/slow", "slow-81") == 1
        assert all(r == found[0] for r in found), found
        assert found[0]["data"]["received"] == 1


@pytest.mark.postgres
def test_a_claim_left_by_a_crashed_process_is_taken_over(
    tmp_path: Path, hook: Hook, pg_url: str
) -> None:
    timing = ["--action-timeout", "0.2", "--action-lease", "1"]
    crashed = start(tmp_path / "a", hook, pg_url, *timing)
    act = action("slow", {}, hlc=90)
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(send, crashed, [act])
            while hook.count("/slow", act["actionId"]) == 0:  # the handler is running
                time.sleep(0.01)
            crashed.kill()
            pending.exception()
    finally:
        crashed.kill()
    with start(tmp_path / "b", hook, pg_url, *timing) as survivor:
        deadline = time.monotonic() + 30
        while True:
            [answer] = results(send(survivor, [act]))
            if "data" in answer or time.monotonic() > deadline:
                break
            assert answer["code"] in ("ACTION_IN_PROGRESS", "ACTION_TIMEOUT"), answer
            time.sleep(0.2)
    assert answer["data"]["received"] == 2
