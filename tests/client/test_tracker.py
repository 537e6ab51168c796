"""SyncTracker: local writes, validation, and atomicity with the outbox."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lakesync_platform.client import (
    LakeSyncClient,
    RowExistsError,
    RowNotFoundError,
    create_client,
)
from lakesync_platform.core.errors import SchemaError, ValidationError
from lakesync_platform.core.extract import extract_delta
from lakesync_platform.testing import ManualClock

from .conftest import TODOS


@pytest.fixture
def client(clock: ManualClock) -> Iterator[LakeSyncClient]:
    c = create_client(
        name="t", schemas=[TODOS], client_id="me", backend="memory", auto_sync_ms=0, clock=clock
    )
    yield c
    c.close()


def _outbox_ops(client: LakeSyncClient) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (e.delta.op, e.delta.row_id, {c.column: c.value for c in e.delta.columns})
        for e in client.coordinator.pending()
    ]


def test_insert_writes_row_stamps_and_outbox(client: LakeSyncClient, clock: ManualClock) -> None:
    data = {"title": "milk", "done": False, "priority": 2, "meta": {"tags": ["a"]}}
    delta = client.tracker.insert("todos", "t1", data)
    expected = extract_delta(None, data, table="todos", row_id="t1", client_id="me", hlc=delta.hlc)
    assert delta == expected  # the same id the reference would compute
    assert delta.hlc >> 16 == clock()
    assert client.tracker.get("todos", "t1") == {**data, "owner": None}
    raw = client.db.query("SELECT done, meta FROM todos")
    assert raw == [{"done": 0, "meta": '{"tags":["a"]}'}]  # reference affinities
    assert _outbox_ops(client) == [("INSERT", "t1", data)]
    assert client.coordinator.queue_depth() == 1


def test_update_queues_only_changed_columns(client: LakeSyncClient) -> None:
    client.tracker.insert("todos", "t1", {"title": "a", "done": False})
    assert client.tracker.update("todos", "t1", {"title": "a"}) is None  # nothing changed
    delta = client.tracker.update("todos", "t1", {"title": "b", "done": False, "priority": 1})
    assert delta is not None and delta.op == "UPDATE"
    assert [(c.column, c.value) for c in delta.columns] == [("title", "b"), ("priority", 1)]
    assert client.tracker.get("todos", "t1") == {
        "title": "b",
        "done": False,
        "priority": 1,
        "owner": None,
        "meta": None,
    }
    assert client.coordinator.queue_depth() == 2


def test_delete_and_upsert(client: LakeSyncClient) -> None:
    client.tracker.upsert("todos", "t1", {"title": "a"})
    client.tracker.upsert("todos", "t1", {"title": "b"})
    assert client.tracker.get("todos", "t1") == {
        "title": "b",
        "done": None,
        "priority": None,
        "owner": None,
        "meta": None,
    }
    delta = client.tracker.delete("todos", "t1")
    assert delta.op == "DELETE" and delta.columns == ()
    assert client.tracker.get("todos", "t1") is None
    assert [op for op, _, _ in _outbox_ops(client)] == ["INSERT", "UPDATE", "DELETE"]
    client.tracker.insert("todos", "t1", {"title": "again"})  # re-insert after a delete
    assert client.tracker.all("todos") == {
        "t1": {"title": "again", "done": None, "priority": None, "owner": None, "meta": None}
    }


def test_errors_leave_nothing_behind(client: LakeSyncClient) -> None:
    client.tracker.insert("todos", "t1", {"title": "a"})
    with pytest.raises(RowExistsError):
        client.tracker.insert("todos", "t1", {"title": "b"})
    with pytest.raises(RowNotFoundError):
        client.tracker.update("todos", "nope", {"title": "b"})
    with pytest.raises(RowNotFoundError):
        client.tracker.delete("todos", "nope")
    with pytest.raises(SchemaError, match="Unknown column"):
        client.tracker.insert("todos", "t2", {"colour": "red"})
    with pytest.raises(SchemaError, match="Unknown column"):
        client.tracker.update("todos", "t1", {"colour": "red"})
    with pytest.raises(SchemaError, match="expects type"):
        client.tracker.insert("todos", "t2", {"done": "yes"})
    with pytest.raises(SchemaError, match="not registered"):
        client.tracker.insert("other", "t2", {"title": "x"})
    with pytest.raises(SchemaError, match="Invalid SQL identifier"):
        client.tracker.insert("drop table;", "t2", {"title": "x"})
    with pytest.raises(ValidationError):
        client.tracker.insert("todos", "t2", {})
    assert list(client.tracker.all("todos")) == ["t1"]
    assert client.coordinator.queue_depth() == 1
    assert client.tracker.get("todos", "t1") == {
        "title": "a",
        "done": None,
        "priority": None,
        "owner": None,
        "meta": None,
    }


def test_write_and_outbox_commit_or_roll_back_together(client: LakeSyncClient) -> None:
    with pytest.raises(RuntimeError), client.db.transaction():
        client.tracker.insert("todos", "t1", {"title": "a"})
        client.tracker.insert("todos", "t2", {"title": "b"})
        raise RuntimeError("application failed after two writes")
    assert client.tracker.all("todos") == {}
    assert client.coordinator.queue_depth() == 0
    assert client.db.query_tuples("SELECT count(*) FROM _lakesync_stamps") == [(0,)]
    with client.db.transaction():
        client.tracker.insert("todos", "t1", {"title": "a"})
        client.tracker.insert("todos", "t2", {"title": "b"})
    assert client.coordinator.queue_depth() == 2


def test_query_passes_through(client: LakeSyncClient) -> None:
    client.tracker.insert("todos", "t1", {"title": "a", "priority": 3})
    client.tracker.insert("todos", "t2", {"title": "b", "priority": 1})
    rows = client.tracker.query("SELECT _rowId, title FROM todos WHERE priority > ?", [2])
    assert rows == [{"_rowId": "t1", "title": "a"}]


def test_hlc_is_monotonic_with_a_stuck_clock(client: LakeSyncClient) -> None:
    stamps = [client.tracker.insert("todos", f"t{i}", {"title": "x"}).hlc for i in range(5)]
    assert stamps == sorted(set(stamps))
