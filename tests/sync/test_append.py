"""Server-side appends (connectors): merged like pushes, only real changes appended, no client
delivery state recorded."""

from __future__ import annotations

import pytest

from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.errors import BackpressureError, ClockDriftError, ForbiddenError
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.sync_rules import parse_sync_rules
from lakesync_platform.core.wal import WalStore
from lakesync_platform.sync.service import SyncService
from tests.helpers import make_delta
from tests.wal.conftest import BASE_MS, Clock

SOURCE = "jira"
CLIENT = "ingest:jira"


def h(ms_offset: int, counter: int = 0) -> int:
    return encode(BASE_MS + ms_offset, counter)


def record(offset: int, **columns: object) -> RowDelta:
    """A connector's delta for issue ``ISSUE-1`` as polled at ``BASE_MS + offset``."""
    return make_delta(CLIENT, h(offset), "issues", "ISSUE-1", columns, "INSERT")


def test_a_new_record_is_appended_whole(service: SyncService, wal: WalStore, gw: str) -> None:
    entries = service.append(gw, SOURCE, [record(1, title="Crash", status="open")])
    assert [(e.op, e.client_id, [(c.column, c.value) for c in e.columns]) for e in entries] == [
        ("INSERT", CLIENT, [("title", "Crash"), ("status", "open")])
    ]
    assert wal.read_entries(gw, 0) == list(entries)
    assert service.known_rows(gw, "issues")["ISSUE-1"].values() == {
        "title": "Crash",
        "status": "open",
    }


def test_re_appending_an_unchanged_record_appends_nothing(
    service: SyncService, wal: WalStore, gw: str
) -> None:
    service.append(gw, SOURCE, [record(1, title="Crash", status="open")])
    cursor = wal.max_cursor(gw)
    assert service.append(gw, SOURCE, [record(2, title="Crash", status="open")]) == ()
    assert wal.max_cursor(gw) == cursor  # nothing appended, nothing re-announced
    assert len(wal.read_entries(gw, 0)) == 1


def test_a_null_for_a_column_the_row_lacks_appends_nothing(
    service: SyncService, wal: WalStore, gw: str
) -> None:
    """A field the source grew arrives as ``null`` on every record re-read: no rewrite."""
    service.append(gw, SOURCE, [record(1, title="Crash")])
    assert service.append(gw, SOURCE, [record(2, title="Crash", team=None)]) == ()
    [entry] = service.append(gw, SOURCE, [record(3, title="Crash", team="Blue")])
    assert [(c.column, c.value) for c in entry.columns] == [("team", "Blue")]
    [entry] = service.append(gw, SOURCE, [record(4, title="Crash", team=None)])
    assert [(c.column, c.value) for c in entry.columns] == [("team", None)]


def test_a_changed_record_appends_only_its_changed_columns(
    service: SyncService, wal: WalStore, gw: str
) -> None:
    service.append(gw, SOURCE, [record(1, title="Crash", status="open", points=3)])
    [entry] = service.append(gw, SOURCE, [record(2, title="Crash", status="done", points=3.0)])
    # 3.0 is not 3 on the wire: a changed value
    assert (entry.op, [(c.column, c.value) for c in entry.columns]) == (
        "UPDATE",
        [("status", "done"), ("points", 3.0)],
    )
    assert service.known_rows(gw, "issues")["ISSUE-1"].values() == {
        "title": "Crash",
        "status": "done",
        "points": 3.0,
    }


def test_changes_within_one_batch_are_compared_in_order(service: SyncService, gw: str) -> None:
    service.append(gw, SOURCE, [record(1, status="open")])
    entries = service.append(gw, SOURCE, [record(2, status="done"), record(3, status="open")])
    assert [[c.value for c in e.columns] for e in entries] == [["done"], ["open"]]
    assert service.known_rows(gw, "issues")["ISSUE-1"].values() == {"status": "open"}


def test_duplicates_and_deletes(service: SyncService, wal: WalStore, gw: str) -> None:
    first = record(1, title="Crash")
    assert len(service.append(gw, SOURCE, [first, first])) == 1
    assert service.append(gw, SOURCE, [first]) == ()
    gone = make_delta(CLIENT, h(2), "issues", "ISSUE-1", None)
    [deleted] = service.append(gw, SOURCE, [gone])
    assert deleted.op == "DELETE"
    # deleting a row that is not live (deleted, or never seen) changes nothing
    assert service.append(gw, SOURCE, [make_delta(CLIENT, h(3), "issues", "ISSUE-1", None)]) == ()
    assert service.append(gw, SOURCE, [make_delta(CLIENT, h(3), "issues", "ISSUE-9", None)]) == ()
    assert [e.op for e in wal.read_entries(gw, 0)] == ["INSERT", "DELETE"]


def test_a_newer_client_write_wins_over_an_older_append(service: SyncService, gw: str) -> None:
    service.push(gw, "alice", [make_delta("alice", h(5), "issues", "ISSUE-1", {"status": "x"})])
    [entry] = service.append(gw, SOURCE, [record(1, status="open", title="Crash")])
    assert [(c.column, c.value) for c in entry.columns] == [("title", "Crash")]
    assert service.known_rows(gw, "issues")["ISSUE-1"].values() == {
        "status": "x",
        "title": "Crash",
    }


def test_appended_rows_reach_clients(service: SyncService, gw: str) -> None:
    service.append(gw, SOURCE, [record(1, title="Crash")])
    page = service.pull(gw, "bob", 0, 100, claims={"sub": "bob"}, stamped=True)
    assert [(d["rowId"], d["clientId"]) for d in page.deltas] == [("ISSUE-1", CLIENT)]


def test_append_records_no_client_delivery_state(
    service: SyncService, wal: WalStore, gw: str
) -> None:
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "mine",
                    "tables": ["issues"],
                    "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
                }
            ],
        }
    )
    service.save_sync_rules(gw, rules)
    service.append(gw, SOURCE, [record(1, owner=CLIENT)])
    with wal.pull_read(gw, "someone", 0, 0) as reader:
        assert len(reader.scan(0, 10)) == 1
    with wal.pull_read(gw, CLIENT, 0, 0) as reader:
        assert reader.client_records(["issues:ISSUE-1"]) == {}


def test_append_validates_like_push(
    service: SyncService, wal: WalStore, gw: str, clock: Clock
) -> None:
    with pytest.raises(ForbiddenError):
        service.append(gw, SOURCE, [make_delta("alice", h(1), "issues", "I-2", {"x": 1})])
    late = make_delta(CLIENT, encode(clock.ms + 6000, 0), "issues", "I-2", {"x": 1})
    with pytest.raises(ClockDriftError):
        service.append(gw, SOURCE, [record(1, title="ok"), late])
    assert wal.max_cursor(gw) == 0 and wal.read_entries(gw, 0) == []


def test_append_is_held_back_by_backpressure(wal: WalStore, clock: Clock, gw: str) -> None:
    service = SyncService(wal, clock, max_backlog_bytes=1)
    service.append(gw, SOURCE, [record(1, title="Crash")])
    with pytest.raises(BackpressureError):
        service.append(gw, SOURCE, [record(2, title="Crash again")])
