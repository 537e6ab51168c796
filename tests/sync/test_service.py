"""Push and pull semantics of the sync service, on every WAL store (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync_platform.core.errors import BackpressureError, ClockDriftError, SchemaError
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.core.sync_rules import parse_sync_rules
from lakesync_platform.core.wal import WalStore
from lakesync_platform.sync.cursors import POSITION_BITS
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import make_delta
from tests.wal.conftest import BASE_MS, Clock


def h(ms_offset: int, counter: int = 0) -> int:
    return encode(BASE_MS + ms_offset, counter)


def stamped_rows(
    service: SyncService,
    gw: str,
    client: str,
    claims: dict[str, Any] | None = None,
    since: int = 0,
    limit: int = 1000,
) -> tuple[dict[str, dict[str, Any]], int]:
    """Pull everything in the stamped format: row id → {column: value} (deleted rows: None)."""
    out: dict[str, Any] = {}
    cursor = since
    while True:
        page = service.pull(
            gw, client, cursor, limit, claims=claims or {"sub": client}, stamped=True
        )
        for d in page.deltas:
            out[d["rowId"]] = (
                None if d["op"] == "DELETE" else {c["column"]: c["value"] for c in d["columns"]}
            )
        cursor = page.server_hlc
        if not page.has_more:
            return out, cursor


def test_per_column_lww_keeps_an_older_write_to_another_column(
    service: SyncService, gw: str
) -> None:
    service.push(gw, "a", [make_delta("a", h(10), "todos", "r1", {"title": "new"}, "INSERT")])
    # b's clock is behind: its write is older, but touches a column nobody newer wrote.
    result = service.push(
        gw, "b", [make_delta("b", h(5), "todos", "r1", {"done": True, "title": "old"})]
    )
    assert [(c.column, c.value) for c in result.entries[0].columns] == [("done", True)]
    rows, _ = stamped_rows(service, gw, "c")
    assert rows == {"r1": {"title": "new", "done": True}}


def test_equal_hlc_is_won_by_the_higher_client_id(service: SyncService, gw: str) -> None:
    service.push(gw, "b", [make_delta("b", h(1), "t", "r", {"x": "from-b"}, "INSERT")])
    service.push(gw, "a", [make_delta("a", h(1), "t", "r", {"x": "from-a"}, "INSERT")])
    assert stamped_rows(service, gw, "z")[0] == {"r": {"x": "from-b"}}


def test_batch_with_a_drifted_delta_writes_nothing(
    service: SyncService, wal: WalStore, gw: str, clock: Clock
) -> None:
    good = [make_delta("a", h(i), "t", f"r{i}", {"x": i}, "INSERT") for i in range(5)]
    bad = make_delta("a", encode(clock.ms + 5001, 0), "t", "late", {"x": 1}, "INSERT")
    with pytest.raises(
        ClockDriftError, match=r"Remote clock is 5001ms ahead \(max drift: 5000ms\)"
    ):
        service.push(gw, "a", [*good[:2], bad, *good[2:]])
    assert wal.max_cursor(gw) == 0
    assert wal.read_entries(gw, 0) == []
    exactly = make_delta("a", encode(clock.ms + 5000, 0), "t", "edge", {"x": 1}, "INSERT")
    assert len(service.push(gw, "a", [exactly]).entries) == 1


def test_delta_ids_are_deduplicated_forever(service: SyncService, wal: WalStore, gw: str) -> None:
    d = make_delta("a", h(1), "t", "r", {"x": 1}, "INSERT")
    first = service.push(gw, "a", [d])
    assert len(first.entries) == 1
    wal.set_flush_watermark(gw, wal.max_cursor(gw))
    assert wal.trim(gw, wal.max_cursor(gw)) == 1
    again = service.push(gw, "a", [d, d])
    assert again.accepted == 2 and again.duplicates == 2 and again.entries == ()
    assert wal.read_entries(gw, 0) == []


def test_a_write_that_loses_everything_appends_nothing_but_reannounces_the_row(
    service: SyncService, wal: WalStore, gw: str
) -> None:
    service.push(gw, "a", [make_delta("a", h(10), "t", "r", {"x": "new"}, "INSERT")])
    service.pull(gw, "b", 0, 100, claims={"sub": "b"})
    position_before = wal.max_cursor(gw)
    lost = service.push(gw, "b", [make_delta("b", h(5), "t", "r", {"x": "old"})])
    assert lost.entries == ()
    assert wal.max_cursor(gw) == position_before + 1  # the row moved to a fresh cursor
    assert [e.cursor for e in wal.read_entries(gw, 0)] == [1]
    # b set its cursor to the push's serverHlc (where it last pulled from) and gets the row back.
    assert lost.server_hlc == 0
    page = service.pull(gw, "b", lost.server_hlc, 100, claims={"sub": "b"})
    assert page.deltas[-1]["columns"] == [{"column": "x", "value": "new"}]


def test_push_answers_the_cursor_the_client_last_pulled_from(service: SyncService, gw: str) -> None:
    service.push(
        gw, "a", [make_delta("a", h(1), "t", f"r{i}", {"x": i}, "INSERT") for i in range(3)]
    )
    page = service.pull(gw, "b", 0, 1000, claims={"sub": "b"})
    assert page.server_hlc == 3
    service.pull(gw, "b", page.server_hlc, 1000, claims={"sub": "b"})
    service.push(gw, "a", [make_delta("a", h(2), "t", "r9", {"x": 9}, "INSERT")])
    # b's push must not move b's cursor past a's r9, which b has not received.
    result = service.push(gw, "b", [make_delta("b", h(3), "t", "rb", {"x": 0}, "INSERT")])
    assert result.server_hlc == 3


def test_delete_clears_older_columns_and_a_later_write_resurrects(
    service: SyncService, gw: str
) -> None:
    service.push(gw, "a", [make_delta("a", h(1), "t", "r", {"x": 1, "y": 2}, "INSERT")])
    service.push(gw, "b", [make_delta("b", h(2), "t", "r", None)])
    assert stamped_rows(service, gw, "z")[0] == {"r": None}
    service.push(gw, "a", [make_delta("a", h(3), "t", "r", {"y": 3})])
    assert stamped_rows(service, gw, "z")[0] == {"r": {"y": 3}}
    # An older write arriving after the delete stays dead.
    service.push(gw, "c", [make_delta("c", h(1, 5), "t", "r", {"x": 7})])
    assert stamped_rows(service, gw, "z")[0] == {"r": {"y": 3}}


def test_ts_encoding_is_a_zero_stamped_delete_then_the_full_row(
    service: SyncService, gw: str
) -> None:
    service.save_schema(
        gw,
        parse_table_schema(
            {
                "table": "todos",
                "columns": [
                    {"name": "title", "type": "string"},
                    {"name": "done", "type": "boolean"},
                    {"name": "note", "type": "string"},
                ],
            }
        ),
    )
    service.push(
        gw, "a", [make_delta("a", h(1), "todos", "r1", {"title": "t", "done": False}, "INSERT")]
    )
    service.push(gw, "b", [make_delta("b", h(2), "todos", "r1", {"done": True})])
    page = service.pull(gw, "c", 0, 1000, claims={"sub": "c"})
    assert [d["op"] for d in page.deltas] == ["DELETE", "INSERT"]
    low, full = page.deltas
    assert low["hlc"] == "0" and low["columns"] == []
    assert full["hlc"] == str(h(2)) and full["clientId"] == "b"
    assert full["columns"] == [
        {"column": "title", "value": "t"},
        {"column": "done", "value": True},
        {"column": "note", "value": None},
    ]
    assert page.has_more is False and page.server_hlc == 2


def test_pages_never_skip_rows_changed_while_paging(service: SyncService, gw: str) -> None:
    service.push(
        gw, "a", [make_delta("a", h(1), "t", f"r{i:02}", {"v": 0}, "INSERT") for i in range(30)]
    )
    seen: dict[str, Any] = {}
    cursor, pages = 0, 0
    while True:
        page = service.pull(gw, "b", cursor, 7, claims={"sub": "b"}, stamped=True)
        assert page.deltas or not page.has_more
        for d in page.deltas:
            seen[d["rowId"]] = {c["column"]: c["value"] for c in d["columns"]}
        cursor = page.server_hlc
        pages += 1
        if pages == 2:  # rows already delivered and rows not yet delivered both change
            service.push(
                gw, "a", [make_delta("a", h(2), "t", r, {"v": 1}) for r in ("r00", "r20", "r29")]
            )
        if not page.has_more:
            break
    assert pages >= 5
    assert len(seen) == 30
    assert {r for r, v in seen.items() if v["v"] == 1} == {"r00", "r20", "r29"}


def test_has_more_cursor_is_safe_for_a_client_that_ignores_has_more(
    service: SyncService, gw: str
) -> None:
    service.push(
        gw, "a", [make_delta("a", h(1), "t", f"r{i:04}", {"v": i}, "INSERT") for i in range(1500)]
    )
    got: set[str] = set()
    cursor, pulls = 0, 0
    while True:  # like the TS client: cursor = serverHlc, hasMore ignored, stop on an empty page
        page = service.pull(gw, "b", cursor, 1000, claims={"sub": "b"})
        if not page.deltas:
            break
        assert len(page.deltas) <= 1000
        assert page.has_more == (len(got) + len(page.deltas) // 2 < 1500)
        got.update(d["rowId"] for d in page.deltas if d["op"] == "INSERT")
        cursor, pulls = page.server_hlc, pulls + 1
    assert len(got) == 1500 and pulls == 3


def test_registered_schema_is_enforced_on_push(
    service: SyncService, wal: WalStore, gw: str
) -> None:
    service.save_schema(
        gw, parse_table_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
    )
    with pytest.raises(SchemaError, match='Unknown column "done"'):
        service.push(
            gw,
            "a",
            [
                make_delta("a", h(1), "todos", "r", {"title": "x"}, "INSERT"),
                make_delta("a", h(2), "todos", "r2", {"done": True}, "INSERT"),
            ],
        )
    with pytest.raises(SchemaError, match="title"):
        service.push(gw, "a", [make_delta("a", h(1), "todos", "r", {"title": 3}, "INSERT")])
    assert wal.max_cursor(gw) == 0
    service.push(gw, "a", [make_delta("a", h(1), "other", "r", {"anything": 1}, "INSERT")])
    assert wal.max_cursor(gw) == 1


def test_backpressure_until_the_backlog_is_flushed(wal: WalStore, clock: Clock, gw: str) -> None:
    service = SyncService(wal, clock, max_backlog_bytes=2000)
    i = 0
    with pytest.raises(BackpressureError, match="backlog"):
        for i in range(100):
            service.push(gw, "a", [make_delta("a", h(i), "t", f"r{i}", {"x": "y" * 50}, "INSERT")])
    assert 5 < i < 100
    wal.set_flush_watermark(gw, wal.max_cursor(gw))
    service.push(gw, "a", [make_delta("a", h(500), "t", "after", {"x": 1}, "INSERT")])


def test_rows_enter_and_leave_a_filtered_view(service: SyncService, gw: str) -> None:
    service.save_sync_rules(
        gw,
        parse_sync_rules(
            {
                "version": 1,
                "buckets": [
                    {
                        "name": "mine",
                        "tables": ["notes"],
                        "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
                    }
                ],
            }
        ),
    )
    # "w" is a service writer (an admin token): the sync rules do not restrict its writes.
    service.push(
        gw,
        "w",
        [
            make_delta("w", h(1), "notes", "n1", {"owner": "alice", "body": "x"}, "INSERT"),
            make_delta("w", h(1), "notes", "n2", {"owner": "bob", "body": "y"}, "INSERT"),
        ],
        any_client_ids=True,
    )
    alice, cur_a = stamped_rows(service, gw, "alice")
    bob, cur_b = stamped_rows(service, gw, "bob")
    assert alice == {"n1": {"owner": "alice", "body": "x"}}
    assert bob == {"n2": {"owner": "bob", "body": "y"}}
    service.push(
        gw, "w", [make_delta("w", h(2), "notes", "n1", {"owner": "bob"})], any_client_ids=True
    )
    alice2, _ = stamped_rows(service, gw, "alice", since=cur_a)
    bob2, _ = stamped_rows(service, gw, "bob", since=cur_b)
    assert alice2 == {"n1": None}  # left alice's view
    assert bob2 == {"n1": {"owner": "bob", "body": "x"}}  # entered bob's, whole
    # carol never held either row: she hears nothing about them, not even a DELETE.
    assert stamped_rows(service, gw, "carol")[0] == {}
    service.push(gw, "w", [make_delta("w", h(3), "notes", "n2", None)], any_client_ids=True)
    assert stamped_rows(service, gw, "carol")[0] == {}


def test_changing_rules_resyncs_old_cursors(service: SyncService, gw: str) -> None:
    service.push(
        gw,
        "w",
        [
            make_delta("w", h(1), "notes", f"n{i}", {"owner": o}, "INSERT")
            for i, o in enumerate(["alice", "bob", "alice"])
        ],
    )
    _, cursor = stamped_rows(service, gw, "alice")
    assert cursor >> POSITION_BITS == 0
    service.save_sync_rules(
        gw,
        parse_sync_rules(
            {
                "version": 1,
                "buckets": [
                    {
                        "name": "mine",
                        "tables": ["notes"],
                        "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
                    }
                ],
            }
        ),
    )
    rows, new_cursor = stamped_rows(service, gw, "alice", since=cursor)
    assert new_cursor >> POSITION_BITS != 0
    # Her old cursor is from another view: she is re-sent her view (the rows she may no longer
    # see are not retracted — she received them before rules existed and holds no record).
    assert {r for r, v in rows.items() if v is not None} == {"n0", "n2"}


def test_gateways_are_isolated(service: SyncService, wal: WalStore, gw: str) -> None:
    other = gw + "_other"
    d = make_delta("a", h(1), "t", "r", {"x": 1}, "INSERT")
    service.push(gw, "a", [d])
    assert service.pull(other, "a", 0, 100, claims={"sub": "a"}).deltas == []
    # The same delta id is new to another gateway.
    assert len(service.push(other, "a", [d]).entries) == 1
    assert wal.max_cursor(gw) == 1 and wal.max_cursor(other) == 1


def test_one_batch_applies_like_its_deltas_one_push_at_a_time(clock: Clock, tmp_path: Any) -> None:
    """New rows take a shortcut (no merge); the outcome must equal merging every delta in order:
    rows touched several times in one batch, duplicates of rows the batch created, deletes of
    unknown rows, losing writes, writes without columns, a column repeated in one delta."""
    pre = [make_delta("a", h(50), "t", "old", {"x": 1, "y": 1}, "INSERT")]
    created = make_delta("a", h(1), "t", "r2", {"x": 1}, "INSERT")
    batch = [
        make_delta("a", h(1), "t", "r1", {"x": 1, "y": 2}, "INSERT"),
        make_delta("b", h(2), "t", "r1", {"y": 3}),  # onto a row created in this batch
        created,
        created,  # a duplicate of a row created in this batch: re-announced
        make_delta("a", h(3), "t", "r3", None),  # delete of an unknown row
        make_delta("a", h(2), "t", "r3", {"x": 5}, "INSERT"),  # older than that delete: lost
        make_delta("b", h(60), "t", "old", {"x": 2}),  # newer than the stored row
        make_delta("b", h(1), "t", "old", {"y": 0}),  # older: lost, re-announced
        make_delta("a", h(4), "t", "r4", {}),  # a write without columns
        make_delta("a", h(5), "u", "r1", {"z": [1, {"k": "v"}], "w": None}, "INSERT"),
    ]
    repeated = make_delta("a", h(6), "t", "r5", {"x": 1}, "INSERT")
    batch.append(
        type(repeated)(
            repeated.op, "t", "r5", "a", (*repeated.columns, *repeated.columns), h(6), "rep-col"
        )
    )
    outcomes = []
    for one_by_one in (False, True):
        wal = WriteAheadLog.open(f"sqlite:///{tmp_path / f'wal{one_by_one}.db'}")
        service = SyncService(wal, clock)
        service.push("gw", "a", pre)
        if one_by_one:
            results = [service.push("gw", d.client_id, [d], any_client_ids=True) for d in batch]
        else:
            results = [service.push("gw", "a", batch, any_client_ids=True)]
        entries = [(e.delta_id, e.op, e.columns, e.hlc) for r in results for e in r.entries]
        log = [(e.delta_id, e.op, e.columns, e.hlc) for e in wal.read_entries("gw", 1)]
        assert log == entries
        rows = {(tbl, k): v for tbl in ("t", "u") for k, v in service.known_rows("gw", tbl).items()}
        pulled, _ = stamped_rows(service, "gw", "c")
        logged = {e.cursor for e in wal.read_entries("gw", 0)}
        with wal.pull_read("gw", "probe", 0, 0) as reader:
            scanned = reader.scan(0, 100)
        reannounced = {r.row_key for r in scanned} - {
            r.row_key for r in scanned if r.position in logged
        }
        outcomes.append((entries, rows, pulled, reannounced, sum(r.duplicates for r in results)))
        wal.close()
    assert outcomes[0] == outcomes[1]
    entries, rows, pulled, reannounced, duplicates = outcomes[0]
    assert duplicates == 1
    assert reannounced == {"t:r2", "t:r3", "t:old", "t:r4"}
    assert rows[("t", "r1")].values() == {"x": 1, "y": 3}
    assert not rows[("t", "r3")].live and rows[("t", "r3")].delete_client == "a"
    assert rows[("t", "old")].values() == {"x": 2, "y": 1}
    assert pulled["r2"] == {"x": 1} and pulled["r3"] is None
    assert [e[1] for e in entries[:3]] == ["INSERT", "UPDATE", "INSERT"]
