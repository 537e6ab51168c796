"""The sync engine through the in-process transport: convergence, paging, failures, events."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from lakesync_platform.adapters.checkpoints import LocalCheckpointStore
from lakesync_platform.client import (
    Checkpoint,
    DeadLetterError,
    InProcessTransport,
    PullResponse,
    PushAck,
    SyncReport,
    TransportError,
    backoff_ms,
)
from lakesync_platform.client._wire import checkpoint_batches
from lakesync_platform.client.testing import FlakyTransport
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.errors import RateLimitedError, ValidationError
from lakesync_platform.core.proto import encode_sync_response
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import ManualClock

from ..checkpoint_kit import write_checkpoint
from .conftest import GW, TODOS, ClientFactory, local_rows, server_rows


def _flaky(client: Any) -> FlakyTransport:
    assert isinstance(client.transport, FlakyTransport)
    return client.transport


def test_two_clients_converge(
    make_client: ClientFactory, service: SyncService, clock: ManualClock
) -> None:
    a, b = make_client("alice"), make_client("bob")
    a.tracker.insert("todos", "t1", {"title": "milk", "priority": 1})
    b.tracker.insert("todos", "t2", {"title": "eggs", "meta": {"n": [1, 2]}})
    a.sync_once(), b.sync_once(), a.sync_once()
    clock.advance(10)
    a.tracker.update("todos", "t2", {"done": True})  # different columns of one row
    b.tracker.update("todos", "t2", {"title": "free-range eggs"})
    b.tracker.delete("todos", "t1")
    for c in (a, b, a, b):
        c.sync_once()
    expected = {"t2": {"title": "free-range eggs", "done": True, "meta": {"n": [1, 2]}}}
    assert server_rows(service) == expected
    assert local_rows(a) == local_rows(b) == expected
    assert a.coordinator.queue_depth() == b.coordinator.queue_depth() == 0


def test_same_column_conflict_newest_stamp_wins_everywhere(
    make_client: ClientFactory, clock: ManualClock
) -> None:
    a, b = make_client("alice"), make_client("bob")
    a.tracker.insert("todos", "t", {"title": "v0"})
    a.sync_once(), b.sync_once()
    a.tracker.update("todos", "t", {"title": "from alice"})
    clock.advance(5)
    b.tracker.update("todos", "t", {"title": "from bob"})  # newer
    b.sync_once()  # bob's newer write reaches the server first
    a.sync_once()  # alice pulls bob's value over her pending one, then pushes (loses there)
    b.sync_once()
    assert a.tracker.get("todos", "t")["title"] == "from bob"  # type: ignore[index]
    assert b.tracker.get("todos", "t")["title"] == "from bob"  # type: ignore[index]


def test_remote_stamps_from_a_fast_clock_do_not_beat_later_local_writes(
    make_client: ClientFactory, clock: ManualClock
) -> None:
    fast = ManualClock(clock() + 3000)
    a, b = make_client("alice"), make_client("bob", clock=fast)
    b.tracker.insert("todos", "t", {"title": "bob (clock 3 s ahead)"})
    b.sync_once()
    a.sync_once()
    a.tracker.update("todos", "t", {"title": "alice, after reading bob"})
    a.sync_once(), b.sync_once()
    assert b.tracker.get("todos", "t")["title"] == "alice, after reading bob"  # type: ignore[index]


def test_pull_follows_has_more_and_persists_the_cursor(
    make_client: ClientFactory, tmp_path: Any
) -> None:
    a = make_client("alice")
    for i in range(25):
        a.tracker.insert("todos", f"t{i:02}", {"title": str(i)})
    a.sync_once()
    b = make_client("bob", pull_page_size=4)
    assert b.coordinator.pull() == 25
    assert len(b.tracker.all("todos")) == 25
    cursor = b.coordinator.cursor
    assert cursor > 0
    b.close()
    b2 = make_client("bob", pull_page_size=4)
    assert b2.coordinator.cursor == cursor
    assert b2.coordinator.pull() == 0  # nothing re-downloaded after a restart
    a.tracker.update("todos", "t03", {"title": "changed"})
    a.sync_once()
    assert b2.coordinator.pull() == 1


def test_offline_writes_back_off_then_sync(
    make_client: ClientFactory, clock: ManualClock, service: SyncService
) -> None:
    a = make_client("alice", flaky=True)
    errors: list[BaseException] = []
    a.coordinator.on_error(errors.append)
    _flaky(a).offline = True
    a.tracker.insert("todos", "t1", {"title": "written offline"})
    with pytest.raises(TransportError):
        a.sync_once()
    assert isinstance(errors[-1], TransportError)
    (entry,) = a.coordinator.pending()
    assert entry.retry_count == 1 and entry.retry_after == clock() + backoff_ms(1)
    _flaky(a).offline = False
    assert a.coordinator.push() == 0  # still backing off: nothing sent
    assert _flaky(a).pushes == 0
    clock.advance(backoff_ms(1))
    # pulled=1: after a push, sync_once pulls again and gets its own row back, resolved
    assert a.sync_once() == SyncReport(pulled=1, pushed=1, dead_lettered=0)
    assert server_rows(service) == {"t1": {"title": "written offline"}}


def test_once_the_gateway_answers_again_outage_backoffs_end(
    make_client: ClientFactory, clock: ManualClock, service: SyncService
) -> None:
    a = make_client("alice", flaky=True)
    _flaky(a).offline = True
    for i in range(3):
        a.tracker.insert("todos", f"t{i}", {"title": f"offline {i}"})
    with pytest.raises(TransportError):
        a.sync_once()
    assert all(e.retry_after > clock() for e in a.coordinator.pending())
    _flaky(a).offline = False
    # No clock advance: the pull that succeeds ends the outage, the push sends everything.
    assert a.sync_once().pushed == 3
    assert sorted(server_rows(service)) == ["t0", "t1", "t2"]


def test_lost_push_response_is_retried_without_duplicates(
    make_client: ClientFactory, clock: ManualClock, service: SyncService
) -> None:
    a = make_client("alice", flaky=True)
    for i in range(3):
        a.tracker.insert("todos", f"t{i}", {"title": str(i)})
    _flaky(a).lose_responses = 1  # the gateway commits; the client never hears back
    with pytest.raises(TransportError):
        a.coordinator.push()
    assert a.coordinator.queue_depth() == 3
    clock.advance(backoff_ms(1))
    assert a.coordinator.push() == 3
    ids = _flaky(a).pushed_delta_ids
    assert len(ids) == 6 and len(set(ids)) == 3  # the very same deltas, sent twice
    entries = service.wal.read_entries(GW, 0)
    assert sorted(e.delta_id for e in entries) == sorted(set(ids))  # each logged once
    assert len(server_rows(service)) == 3


def test_duplicate_pushes_are_harmless(make_client: ClientFactory, service: SyncService) -> None:
    a, b = make_client("alice", flaky=True), make_client("bob")
    _flaky(a).duplicate_pushes = True
    a.tracker.insert("todos", "t1", {"title": "x"})
    a.tracker.update("todos", "t1", {"title": "y"})
    a.sync_once(), b.sync_once()
    assert len(service.wal.read_entries(GW, 0)) == 2
    assert local_rows(b) == {"t1": {"title": "y"}}


def test_dead_letter_after_max_retries_is_visible_and_requeueable(
    make_client: ClientFactory, clock: ManualClock, service: SyncService
) -> None:
    a = make_client("alice", flaky=True, max_retries=3)
    dead: list[DeadLetterError] = []
    a.coordinator.on_error(lambda e: dead.append(e) if isinstance(e, DeadLetterError) else None)
    a.tracker.insert("todos", "t1", {"title": "x"})
    _flaky(a).offline = True
    for _ in range(3):
        with pytest.raises(TransportError):
            a.coordinator.push()
        clock.advance(60_000)
    assert a.coordinator.queue_depth() == 0
    (entry,) = a.coordinator.dead_letters()
    assert entry.retry_count == 3 and "unreachable" in (entry.last_error or "")
    assert len(dead) == 1 and dead[0].entry_ids == (entry.id,)
    _flaky(a).offline = False
    assert a.coordinator.push() == 0  # dead entries are not sent
    assert a.coordinator.requeue_dead_letters() == 1
    assert a.coordinator.push() == 1
    assert a.coordinator.dead_letters() == []
    assert server_rows(service) == {"t1": {"title": "x"}}


def test_a_rejected_delta_is_isolated_and_dead_lettered(
    make_client: ClientFactory, service: SyncService
) -> None:
    # the gateway's schema says priority is a string; the client's says number
    server_schema = {
        **TODOS,
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "priority", "type": "string"},
        ],
    }
    service.save_schema(GW, parse_table_schema(server_schema))
    a = make_client("alice")
    dead: list[BaseException] = []
    a.coordinator.on_error(dead.append)
    for i in range(6):
        data: dict[str, Any] = {"title": str(i)}
        if i == 4:
            data["priority"] = 1
        a.tracker.insert("todos", f"t{i}", data)
    report = a.sync_once()
    assert report.pushed == 5 and report.dead_lettered == 1
    (bad,) = a.coordinator.dead_letters()
    assert bad.delta.row_id == "t4" and "expects type" in (bad.last_error or "")
    assert isinstance(dead[0], DeadLetterError)
    assert sorted(server_rows(service)) == ["t0", "t1", "t2", "t3", "t5"]
    assert a.coordinator.discard_dead_letters() == 1


class _RateLimited:
    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        raise RateLimitedError("Too many requests", retry_after=45)

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        return PullResponse([], since, False)

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        return None

    def close(self) -> None:
        pass


def test_rate_limit_waits_at_least_retry_after(
    make_client: ClientFactory, clock: ManualClock
) -> None:
    a = make_client("alice", transport=_RateLimited())
    a.tracker.insert("todos", "t1", {"title": "x"})
    with pytest.raises(RateLimitedError):
        a.sync_once()
    assert a.coordinator.pending()[0].retry_after == clock() + 45_000
    a.sync_once()  # the gateway answers the pull: its refusal still stands
    assert a.coordinator.pending()[0].retry_after == clock() + 45_000


def test_sync_modes(make_client: ClientFactory, service: SyncService) -> None:
    a = make_client("alice")
    a.tracker.insert("todos", "t1", {"title": "x"})
    a.sync_once()
    pull_only = make_client("bob", sync_mode="pull_only")
    pull_only.tracker.insert("todos", "b1", {"title": "stays local"})
    assert pull_only.sync_once() == SyncReport(1, 0, 0)
    assert "b1" not in server_rows(service)
    push_only = make_client("carol", sync_mode="push_only")
    push_only.tracker.insert("todos", "c1", {"title": "pushed"})
    assert push_only.sync_once() == SyncReport(0, 1, 0)
    assert list(push_only.tracker.all("todos")) == ["c1"]


def test_events(make_client: ClientFactory) -> None:
    a, b = make_client("alice"), make_client("bob")
    changes: list[frozenset[str]] = []
    reports: list[SyncReport] = []
    remove = b.coordinator.on_change(changes.append)
    b.coordinator.on_sync_complete(reports.append)
    b.tracker.insert("todos", "local", {"title": "x"})
    assert changes == []  # on_change is for remote changes
    a.tracker.insert("todos", "t1", {"title": "x"})
    a.sync_once()
    b.sync_once()
    assert changes == [frozenset({"todos"})]
    assert reports == [SyncReport(pulled=2, pushed=1, dead_lettered=0)]  # + its own row back
    assert b.coordinator.last_sync_time is not None
    remove()
    a.tracker.update("todos", "t1", {"title": "y"})
    a.sync_once(), b.sync_once()
    assert len(changes) == 1


def test_watch_fires_on_local_and_remote_changes(make_client: ClientFactory) -> None:
    a, b = make_client("alice"), make_client("bob")
    seen: list[list[dict[str, Any]]] = []
    watch = b.watch("SELECT _rowId, title FROM todos ORDER BY _rowId", [], seen.append)
    assert watch.tables == {"todos"}
    assert seen == [[]]
    b.tracker.insert("todos", "b1", {"title": "mine"})
    assert seen[-1] == [{"_rowId": "b1", "title": "mine"}]
    b.tracker.update("todos", "b1", {"done": True})  # same rows → no call
    assert len(seen) == 2
    a.tracker.insert("todos", "a1", {"title": "theirs"})
    a.sync_once(), b.sync_once()
    assert seen[-1] == [{"_rowId": "a1", "title": "theirs"}, {"_rowId": "b1", "title": "mine"}]
    watch.close()
    b.tracker.delete("todos", "a1")
    assert len(seen) == 3 and not watch.active
    with pytest.raises(ValueError):
        b.watch("SELECT 1", [], seen.append)


def test_auto_sync_thread_converges_and_stops_cleanly(make_client: ClientFactory) -> None:
    a, b = make_client("alice", auto_sync_ms=50), make_client("bob", auto_sync_ms=50)
    assert a.coordinator.auto_syncing and b.coordinator.auto_syncing
    a.tracker.insert("todos", "t1", {"title": "x"})
    a.coordinator.request_sync()
    deadline = time.monotonic() + 10
    while b.tracker.get("todos", "t1") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b.tracker.get("todos", "t1") == {
        "title": "x",
        "done": None,
        "priority": None,
        "owner": None,
        "meta": None,
    }
    a.coordinator.stop_auto_sync()
    assert not a.coordinator.auto_syncing
    b.close()
    assert not b.coordinator.auto_syncing


def test_checkpoint_bootstraps_a_new_client(
    make_client: ClientFactory, service: SyncService, tmp_path: Any
) -> None:
    a = make_client("alice")
    a.tracker.insert("todos", "t1", {"title": "in checkpoint"})
    a.sync_once()
    store = LocalCheckpointStore(tmp_path / "checkpoints")
    manifest = write_checkpoint(service.wal, GW, store)
    a.tracker.insert("todos", "t2", {"title": "after checkpoint"})
    a.sync_once()
    b = make_client("bob", transport=InProcessTransport(service, GW, checkpoints=store))
    assert b.sync_once().pulled == 2  # the checkpoint row, then only t2 from the log
    assert sorted(b.tracker.all("todos")) == ["t1", "t2"]
    assert b.coordinator.cursor > manifest.cursor
    # the checkpoint's rows carry their column stamps: b holds exactly what a paging client does
    paged = make_client("carol")
    paged.sync_once()
    stamps = "SELECT tbl, row_id, stamps FROM _lakesync_stamps ORDER BY tbl, row_id"
    assert b.db.query(stamps) == paged.db.query(stamps)
    a.tracker.update("todos", "t1", {"title": "updated"})
    a.sync_once(), b.sync_once()
    assert b.tracker.get("todos", "t1")["title"] == "updated"  # type: ignore[index]


def test_checkpoint_without_stamps_is_replaced_by_any_stamped_write(
    make_client: ClientFactory, service: SyncService
) -> None:
    """A checkpoint in the reference's format (only each row's newest stamp): its columns get a
    minimal stamp, so the pull that follows replaces them; it is asked for once."""
    a = make_client("alice")
    a.tracker.insert("todos", "t1", {"title": "in checkpoint"})
    a.sync_once()
    snapshot = service.pull(GW, "snap", 0, 1000).server_hlc
    frame = encode_sync_response(
        [RowDelta("INSERT", "todos", "t1", "alice", (ColumnDelta("title", "old"),), 5, "x")],
        snapshot,
        False,
    )
    calls: list[int] = []

    def checkpoint() -> Checkpoint:
        calls.append(1)
        return Checkpoint(snapshot, checkpoint_batches(frame))

    b = make_client("bob", transport=InProcessTransport(service, GW, checkpoint=checkpoint))
    assert b.sync_once().pulled == 1
    assert b.tracker.get("todos", "t1")["title"] == "old"  # type: ignore[index]
    b.sync_once()
    assert calls == [1]
    a.tracker.update("todos", "t1", {"title": "updated"})
    a.sync_once(), b.sync_once()
    assert b.tracker.get("todos", "t1")["title"] == "updated"  # type: ignore[index]


def test_rebootstrap_replaces_rows_and_keeps_unpushed_writes(
    make_client: ClientFactory, service: SyncService, tmp_path: Any
) -> None:
    store = LocalCheckpointStore(tmp_path / "checkpoints")
    a = make_client("alice")
    for i in range(4):
        a.tracker.insert("todos", f"t{i}", {"title": f"v{i}"})
    a.sync_once()
    b = make_client("bob", transport=InProcessTransport(service, GW, checkpoints=store))
    b.sync_once()
    assert sorted(b.tracker.all("todos")) == ["t0", "t1", "t2", "t3"]
    # While b is away t0 is deleted and t1 changed, both before the next checkpoint (so a pull
    # from the checkpoint's cursor carries neither); b writes t2 and a new t9, unpushed.
    a.tracker.delete("todos", "t0")
    a.tracker.update("todos", "t1", {"title": "newer"})
    a.sync_once()
    b.tracker.update("todos", "t2", {"title": "mine"})
    b.tracker.insert("todos", "t9", {"title": "unpushed"})
    write_checkpoint(service.wal, GW, store)
    assert b.coordinator.rebootstrap() == 3  # t1, t2, t3 from the checkpoint; nothing after
    held = {r["_rowId"]: r["title"] for r in b.db.query("SELECT _rowId, title FROM todos")}
    assert held == {"t1": "newer", "t2": "mine", "t3": "v3", "t9": "unpushed"}
    assert b.coordinator.cursor == service.pull(GW, "x", 0, 1000).server_hlc
    b.sync_once()
    assert sorted(server_rows(service)) == ["t1", "t2", "t3", "t9"]


def test_restart_keeps_identity_clock_and_outbox(make_client: ClientFactory, tmp_path: Any) -> None:
    late = ManualClock(1_800_000_000_000)
    a = make_client("alice", clock=late)
    first = a.tracker.insert("todos", "t1", {"title": "x"})
    a.close()
    early = ManualClock(1_700_000_000_000)  # the wall clock went backwards
    a2 = make_client("alice", clock=early)
    assert a2.coordinator.queue_depth() == 1
    second = a2.tracker.update("todos", "t1", {"title": "y"})
    assert second is not None and second.hlc > first.hlc
    a2.close()
    with pytest.raises(ValidationError, match="belongs to client"):
        make_client("mallory", path=tmp_path / "alice.db")
