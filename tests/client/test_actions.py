"""Client actions against a real gateway process and a real webhook server: sent at once,
queued while the gateway is unreachable (across a client restart), retried with the same
``actionId`` until a final answer, and discovered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync_platform.client import (
    ActionQueue,
    GatewayConfig,
    LakeSyncClient,
    LocalDB,
    create_client,
)
from lakesync_platform.core.actions import ActionErrorResult, ActionResult
from lakesync_platform.core.hlc import HLC
from lakesync_platform.testing import GatewayProcess, ManualClock, free_port
from tests.action_kit import GW, Hook, serve_hook, start
from tests.helpers import token

CLIENT = "carol"


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    with serve_hook() as served:
        yield served


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, hook: Hook) -> Iterator[GatewayProcess]:
    with start(tmp_path_factory.mktemp("client-actions"), hook) as proc:
        yield proc


def open_client(url: str, path: Path, clock: ManualClock | None = None) -> LakeSyncClient:
    return create_client(
        name="acts",
        client_id=CLIENT,
        gateway=GatewayConfig(url=url, gateway_id=GW, token=token(CLIENT, GW), retries=1),
        path=path,
        auto_sync_ms=0,
        **({"clock": clock} if clock is not None else {}),
    )


def test_an_action_runs_at_once_and_is_discoverable(
    gateway: GatewayProcess, hook: Hook, tmp_path: Path
) -> None:
    with open_client(gateway.url, tmp_path / "c.db") as client:
        described = client.describe_actions()["connectors"]
        assert described["hooks"][0]["paramsSchema"]["required"] == ["text"]
        done: list[tuple[str, object]] = []
        client.on_action_complete(lambda aid, result: done.append((aid, result)))
        result = client.execute_action("hooks", "notify", {"text": "now"}, idempotency_key="c-1")
        assert isinstance(result, ActionResult)
        assert result.data == {"received": 1, "params": {"text": "now"}}
        assert done == [(result.action_id, result)]
        assert client.action_result(result.action_id) == result
        assert client.pending_actions() == []
        # The same idempotency key again: the gateway answers with the stored result.
        again = client.execute_action("hooks", "notify", {"text": "again"}, idempotency_key="c-1")
        assert isinstance(again, ActionResult) and again.data == result.data
        assert hook.count("/ok", "c-1") == 1
        refused = client.execute_action("hooks", "notify", {"text": 5})
        assert isinstance(refused, ActionErrorResult)
        assert refused.code == "ACTION_VALIDATION_ERROR"


def test_a_retryable_answer_stays_queued_and_is_sent_again(
    gateway: GatewayProcess, hook: Hook, tmp_path: Path
) -> None:
    clock = ManualClock()
    with open_client(gateway.url, tmp_path / "c.db", clock) as client:
        assert client.execute_action("flaky", "notify", {}) is None  # the hook answered 503
        [entry] = client.pending_actions()
        assert entry.retry_count == 1 and "503" in (entry.last_error or "")
        clock.advance(5_000)  # past the backoff
        client.sync_once()
        result = client.action_result(entry.action.action_id)
        assert isinstance(result, ActionResult) and result.data["received"] == 2
        assert hook.count("/flaky", entry.action.action_id) == 2


def test_offline_actions_wait_in_the_local_database(hook: Hook, tmp_path: Path) -> None:
    port = free_port()
    clock = ManualClock()
    path = tmp_path / "c.db"
    with open_client(f"http://127.0.0.1:{port}", path, clock) as client:
        assert (
            client.execute_action("hooks", "notify", {"text": "offline"}, idempotency_key="off")
            is None
        )
        [queued] = client.pending_actions()
        assert queued.retry_after > clock()  # backing off: the gateway could not be reached
    # The client restarts, the gateway comes up: the next sync sends the action, once — at
    # once, as the outbox's entries, since the outage it backed off from is over.
    with (
        start(tmp_path / "gw", hook, port=port),
        open_client(f"http://127.0.0.1:{port}", path, clock) as client,
    ):
        assert [e.action for e in client.pending_actions()] == [queued.action]
        done: list[str] = []
        client.on_action_complete(lambda aid, _: done.append(aid))
        # An action the gateway refuses for now (the hook answers 503 once): an answer, so the
        # outage is over, but this one keeps its backoff.
        assert client.execute_action("flaky", "notify", {"text": "later"}) is None
        client.sync_once()  # no clock advance
        assert done == [queued.action.action_id]
        result = client.action_result(queued.action.action_id)
        assert isinstance(result, ActionResult)
        assert result.data["params"] == {"text": "offline"}
        [refused] = client.pending_actions()
        assert refused.action.connector == "flaky" and refused.retry_after > clock()
        client.sync_once()
        assert hook.count("/flaky", refused.action.action_id) == 1
    assert hook.count("/ok", "off") == 1


def test_an_actions_table_of_an_earlier_version_gains_the_unreachable_column(
    tmp_path: Path,
) -> None:
    db = LocalDB.open(tmp_path / "old.db")
    try:
        db.exec(  # the table as earlier versions created it
            "CREATE TABLE _lakesync_actions ("
            "id INTEGER PRIMARY KEY AUTOINCREMENT, action_id TEXT NOT NULL UNIQUE, "
            "hlc INTEGER NOT NULL, action BLOB NOT NULL, "
            "status TEXT NOT NULL DEFAULT 'pending', retry_count INTEGER NOT NULL DEFAULT 0, "
            "retry_after INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, result BLOB, "
            "last_error TEXT)"
        )
        db.exec(
            "INSERT INTO _lakesync_actions (action_id, hlc, action, retry_after, created_at) "
            "VALUES ('a1', 1, x'7b7d', 5000, 0)"
        )
        ActionQueue.create(db)
        queue = ActionQueue(db, HLC(lambda: 0), CLIENT, lambda: 0)
        assert queue.end_outage() == 0  # an old entry's backoff cause is unknown: it stands
        rows = db.query_tuples("SELECT retry_after, unreachable FROM _lakesync_actions")
        assert rows == [(5000, 0)]
    finally:
        db.close()
