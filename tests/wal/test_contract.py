"""The contract of every WAL store: memory, SQLite and PostgreSQL answer alike.

Appending (claimed ids, loaded rows, a plan written whole or not at all), reading entries,
scanning rows for pulls, pull bookkeeping and client records, the config store, flush requests,
watermarks, trimming and counters, action claims and stored results.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lakesync_platform.core.delta import ColumnDelta
from lakesync_platform.core.errors import SchemaError
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.merge import ColumnState, RowState, encode_row_state
from lakesync_platform.core.schema import parse_table_schema
from lakesync_platform.core.sync_rules import parse_sync_rules, sync_rules_to_json
from lakesync_platform.core.wal import (
    ActionClaim,
    AppendRequest,
    GatewayCounters,
    LoadedRows,
    NewColumn,
    PushPlan,
    RowRecord,
    RowWrite,
    WalEntry,
    WalStorage,
    WalStore,
    encode_columns,
)
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.memory import MemoryWal
from tests.helpers import make_delta
from tests.wal.conftest import BASE_MS


def _row(key: str, x: object, hlc: int, position: int) -> RowWrite:
    """The stored form of row ``key`` (table ``t``) holding ``x``, at ``position``."""
    state = RowState({"x": ColumnState(x, hlc, "a")})
    return RowWrite(key, "t", key.split(":")[1], encode_row_state(state).decode(), True, position)


def _entry(cursor: int, row_id: str, x: object, hlc: int) -> WalEntry:
    cols = (ColumnDelta("x", x),)
    return WalEntry(cursor, f"d{cursor}", "t", row_id, "INSERT", "a", hlc, cols, BASE_MS, 10)


def _plan(last: int, entries: list[WalEntry], rows: list[RowWrite], **kw: object) -> PushPlan:
    plan = PushPlan(
        entries,
        [encode_columns(e.columns) for e in entries],
        rows,
        [],
        [],
        0,
        sum(e.size for e in entries),
        last,
    )
    for name, value in kw.items():
        setattr(plan, name, value)
    return plan


class Recorder:
    """A planner that remembers what it was given and answers a fixed plan."""

    def __init__(self, plan: PushPlan) -> None:
        self.plan = plan
        self.loaded: LoadedRows | None = None

    def __call__(self, loaded: LoadedRows) -> PushPlan:
        self.loaded = loaded
        return self.plan


def test_append_claims_ids_loads_rows_and_writes_the_plan(store: WalStore, gw: str) -> None:
    h1, h2 = encode(BASE_MS, 1), encode(BASE_MS, 2)
    first = Recorder(
        _plan(
            1,
            [_entry(1, "r1", {"k": [1, None]}, h1)],
            [_row("t:r1", {"k": [1, None]}, h1, 1)],
            new_columns=[NewColumn("t", "x", 1)],
        )
    )
    request = AppendRequest([(h1, "a"), (h2, "b"), (h1, "a")], ["t:r1"])
    commit = store.append_changes(gw, request, first, BASE_MS)
    assert commit.plan is first.plan and commit.last_since == 0
    assert first.loaded == LoadedRows(GatewayCounters(0, 0, 0), {(h1, "a"), (h2, "b")}, {})

    second = Recorder(_plan(3, [], [_row("t:r1", 5, h2, 3)], reannounced=["t:r1"]))
    store.append_changes(gw, AppendRequest([(h1, "a"), (h2, "c")], ["t:r1", "t:r2"]), second, 0)
    assert second.loaded is not None
    assert second.loaded.counters == GatewayCounters(1, 10, 0)
    assert second.loaded.fresh_ids == {(h2, "c")}  # (h1, "a") was accepted: forever
    assert second.loaded.states == {"t:r1": RowState({"x": ColumnState({"k": [1, None]}, h1, "a")})}

    assert store.read_entries(gw, 0) == [_entry(1, "r1", {"k": [1, None]}, h1)]
    assert store.max_cursor(gw) == 3
    assert store.table_columns(gw) == {"t": ["x"]}
    assert [(rid, s.values()) for rid, s in store.row_states(gw, "t")] == [("r1", {"x": 5})]
    assert gw in store.gateway_ids()


def test_a_planner_that_raises_writes_nothing(store: WalStore, gw: str) -> None:
    def failing(loaded: LoadedRows) -> PushPlan:
        raise ValueError("rejected")

    request = AppendRequest([(1, "a")], ["t:r1"], "c1", ["t:r1"])
    with pytest.raises(ValueError, match="rejected"):
        store.append_changes(gw, request, failing, BASE_MS)
    assert gw not in store.gateway_ids() and store.max_cursor(gw) == 0
    again = Recorder(_plan(0, [], []))
    store.append_changes(gw, request, again, BASE_MS)
    assert again.loaded is not None and again.loaded.fresh_ids == {(1, "a")}  # not claimed


def test_pull_read_scans_rows_by_position_and_records_the_pull(store: WalStore, gw: str) -> None:
    h = encode(BASE_MS, 1)
    rows = [_row("t:r1", 1, h, 1), _row("t:r2", 2, h, 2), _row("t:r3", 3, h, 3)]
    store.append_changes(gw, AppendRequest([], []), Recorder(_plan(3, [], rows)), 0)
    moved = Recorder(_plan(4, [], [_row("t:r1", 9, h, 4)]))
    store.append_changes(gw, AppendRequest([], ["t:r1"]), moved, 0)
    with store.pull_read(gw, "c1", 42, BASE_MS) as reader:
        assert [(r.row_key, r.position) for r in reader.scan(0, 10)] == [
            ("t:r2", 2),
            ("t:r3", 3),
            ("t:r1", 4),
        ]
        assert [r.row_key for r in reader.scan(2, 1)] == ["t:r3"]
        assert reader.scan(4, 10) == []
        assert reader.scan(3, 10)[0].state.values() == {"x": 9}
    # the pusher learns the cursor it last pulled from; a server-side append records nothing
    pushed = store.append_changes(gw, AppendRequest([], [], "c1"), Recorder(_plan(4, [], [])), 0)
    assert pushed.last_since == 42
    never = store.append_changes(gw, AppendRequest([], [], "c2"), Recorder(_plan(4, [], [])), 0)
    assert never.last_since == 0
    server = store.append_changes(gw, AppendRequest([], []), Recorder(_plan(4, [], [])), 0)
    assert server.last_since == 0


def test_a_feed_read_is_not_recorded_as_the_clients_pull(store: WalStore, gw: str) -> None:
    h = encode(BASE_MS, 1)
    store.append_changes(
        gw, AppendRequest([], []), Recorder(_plan(1, [], [_row("t:r1", 1, h, 1)])), 0
    )
    assert store.last_pulled_since(gw, "c1") == 0
    assert not store.has_pulled(gw, "c1")
    with store.pull_read(gw, "c1", 0, BASE_MS, record=False):
        pass
    assert not store.has_pulled(gw, "c1")  # a broadcast's read is not the client's pull
    with store.pull_read(gw, "c1", 0, BASE_MS):
        pass
    assert store.has_pulled(gw, "c1") and store.last_pulled_since(gw, "c1") == 0
    with store.pull_read(gw, "c1", 7, BASE_MS) as reader:
        assert [r.row_key for r in reader.scan(0, 10)] == ["t:r1"]
    assert store.last_pulled_since(gw, "c1") == 7
    with store.pull_read(gw, "c1", 9, BASE_MS, record=False) as reader:
        assert [r.row_key for r in reader.scan(0, 10)] == ["t:r1"]
    assert store.last_pulled_since(gw, "c1") == 7
    assert store.last_pulled_since(gw, "c2") == 0
    assert not store.has_pulled(gw, "c2")


def test_client_records_are_kept_per_client(store: WalStore, gw: str) -> None:
    held = AppendRequest([], [], "c1", ["t:r1", "t:r2"])
    store.append_changes(gw, held, Recorder(_plan(0, [], [])), 0)
    store.save_client_records(gw, "c1", {"t:r2": RowRecord(False, 7), "t:r3": RowRecord(True, 8)})
    with store.pull_read(gw, "c1", 0, 0) as reader:
        assert reader.client_records(["t:r1", "t:r2", "t:r3", "t:r4"]) == {
            "t:r1": RowRecord(True, 0),
            "t:r2": RowRecord(False, 7),
            "t:r3": RowRecord(True, 8),
        }
    with store.pull_read(gw, "c2", 0, 0) as reader:
        assert reader.client_records(["t:r1", "t:r2"]) == {}
    # a server-side append records no client delivery state
    store.append_changes(gw, AppendRequest([], [], None, ["t:r9"]), Recorder(_plan(0, [], [])), 0)
    with store.pull_read(gw, "c1", 0, 0) as reader:
        assert reader.client_records(["t:r9"]) == {}


def test_an_open_store_answers_pings(store: WalStore) -> None:
    store.ping()


def test_entries_watermark_and_trim(store: WalStore, gw: str) -> None:
    service = SyncService(store, clock=lambda: BASE_MS)
    service.push(
        gw,
        "a",
        [make_delta("a", encode(BASE_MS, i), "t", f"r{i}", {"x": i}, "INSERT") for i in range(10)],
    )
    entries = store.read_entries(gw, 0)
    assert [e.cursor for e in entries] == list(range(1, 11))
    assert entries[3].columns[0].value == 3 and entries[3].op == "INSERT"
    assert [e.cursor for e in store.read_entries(gw, 4, limit=3)] == [5, 6, 7]
    stats = store.stats(gw)
    assert (stats.max_cursor, stats.backlog_entries, stats.live_rows) == (10, 10, 10)
    assert stats.backlog_bytes > 0
    store.set_flush_watermark(gw, 6)
    store.set_flush_watermark(gw, 3)  # never moves backwards
    assert store.flush_watermark(gw) == 6
    assert store.stats(gw).backlog_entries == 4
    assert store.trim(gw, 100) == 6  # bounded by the watermark
    assert [e.cursor for e in store.read_entries(gw, 0)] == [7, 8, 9, 10]
    assert store.oldest_unflushed_ms(gw) == BASE_MS
    assert store.log_floor(gw) == 6
    stats = store.stats(gw)
    assert (stats.log_entries, stats.log_floor, stats.backlog_entries) == (4, 6, 4)


def test_trim_in_batches_by_age_and_count_moves_the_floor(store: WalStore, gw: str) -> None:
    now = [BASE_MS]
    service = SyncService(store, clock=lambda: now[0])
    for i in range(12):  # one entry per push, ingested 1 s apart
        now[0] = BASE_MS + i * 1000
        service.push(gw, "a", [make_delta("a", encode(now[0], 0), "t", f"r{i}", {"x": i})])
    assert store.trim(gw, 12) == 0 and store.log_floor(gw) == 0  # nothing is in the lake yet
    store.set_flush_watermark(gw, 10)
    assert store.cursor_keeping(gw, 4) == 8  # the newest 4 (9..12) stay above cursor 8
    assert store.cursor_keeping(gw, 12) == 0
    # Ingested before BASE_MS + 5 s: entries 1..5; the batch size only splits transactions.
    assert store.trim(gw, 12, before_ms=BASE_MS + 5_000, batch=2) == 5
    assert store.log_floor(gw) == 5
    assert store.trim(gw, store.cursor_keeping(gw, 4), batch=2) == 3  # 6..8: the rest stays
    assert [e.cursor for e in store.read_entries(gw, 0)] == [9, 10, 11, 12]
    assert store.trim(gw, 12) == 2  # up to the flush watermark only
    assert store.log_floor(gw) == 10 and store.stats(gw).log_entries == 2
    # Row state stays: every row is still there and pulls from below the floor see them all.
    assert [rid for rid, _ in store.row_states(gw, "t")] == sorted(f"r{i}" for i in range(12))
    page = service.pull(gw, "b", 3, 100, stamped=True)
    assert {d["rowId"] for d in page.deltas} == {f"r{i}" for i in range(3, 12)}
    with pytest.raises(ValueError):
        store.trim(gw, 12, batch=0)


def test_forgotten_delta_ids_are_merged_again_without_effect(store: WalStore, gw: str) -> None:
    service = SyncService(store, clock=lambda: BASE_MS + 10_000)
    old = make_delta("a", encode(BASE_MS, 0), "t", "r1", {"x": 1, "y": 1})
    newer = make_delta("b", encode(BASE_MS + 5_000, 0), "t", "r1", {"x": 2})
    service.push(gw, "a", [old])
    service.push(gw, "b", [newer])
    assert store.trim_delta_ids(gw, encode(BASE_MS + 1_000, 0), batch=1) == 1
    assert store.dedup_horizon(gw) == encode(BASE_MS + 1_000, 0)
    before = (store.max_cursor(gw), list(store.row_states(gw, "t")))
    again = service.push(gw, "a", [old])  # its id is forgotten: merged again, a no-op
    assert again.duplicates == 0 and again.entries == ()
    assert list(store.row_states(gw, "t")) == before[1]
    assert [e.cursor for e in store.read_entries(gw, 0)] == [1, 2]
    assert service.push(gw, "b", [newer]).duplicates == 1  # still remembered


def test_storage_reports_the_footprint(store: WalStore, gw: str) -> None:
    service = SyncService(store, clock=lambda: BASE_MS)
    service.push(gw, "a", [make_delta("a", encode(BASE_MS, 0), "t", "r1", {"x": "y" * 1000})])
    store.set_flush_watermark(gw, 1)
    assert store.trim(gw, 1) == 1
    store.reclaim()  # PostgreSQL: VACUUM outside any transaction; elsewhere nothing to do
    used = store.storage()
    if isinstance(store, MemoryWal):
        assert used == WalStorage(0, None)
    else:
        assert used.bytes > 0


def test_schemas_evolve_additively_with_versions(store: WalStore, gw: str) -> None:
    v1 = parse_table_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
    v2 = parse_table_schema(
        {
            "table": "todos",
            "columns": [{"name": "title", "type": "string"}, {"name": "done", "type": "boolean"}],
        }
    )
    store.save_schema(gw, v1)
    store.save_schema(gw, v1)  # unchanged: same version
    assert store.schema_versions(gw) == {"todos": 1}
    store.save_schema(gw, v2)
    assert store.schema_versions(gw) == {"todos": 2}
    assert store.schemas(gw)["todos"].column_names == ("title", "done")
    with pytest.raises(SchemaError):
        store.save_schema(gw, v1)  # removing a column
    assert store.schema_versions(gw) == {"todos": 2}
    assert gw in store.gateway_ids()


def test_sync_rules_round_trip(store: WalStore, gw: str) -> None:
    assert store.sync_rules(gw) is None
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "b",
                    "tables": ["t"],
                    "filters": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}],
                }
            ],
        }
    )
    store.save_sync_rules(gw, rules)
    stored = store.sync_rules(gw)
    assert stored is not None and sync_rules_to_json(stored) == sync_rules_to_json(rules)


def test_flush_requests_lifecycle(store: WalStore, gw: str) -> None:
    req = store.request_flush(gw, now_ms=5)
    assert [r.request_id for r in store.flush_requests(gw)] == [req.request_id]
    store.update_flush_request(req.request_id, "succeeded", "flushed 10 entries", now_ms=9)
    assert store.flush_requests(gw) == []
    done = store.flush_requests(gw, status=None)[0]
    assert (done.status, done.detail, done.updated_ms) == ("succeeded", "flushed 10 entries", 9)


def test_recent_flush_requests_are_the_newest(store: WalStore, gw: str) -> None:
    made = [store.request_flush(gw, now_ms=ms) for ms in range(1, 26)]
    store.request_flush(gw + "_other", now_ms=100)
    store.update_flush_request(made[-1].request_id, "failed", "boom", now_ms=30)
    recent = store.recent_flush_requests(gw, 20)
    assert [r.requested_ms for r in recent] == list(range(6, 26))
    assert recent[-1].status == "failed"
    assert store.recent_flush_requests(gw, 0) == []


def test_row_states_reflect_the_merge(store: WalStore, gw: str) -> None:
    service = SyncService(store, clock=lambda: BASE_MS)
    service.push(
        gw, "a", [make_delta("a", encode(BASE_MS, 1), "t", "r", {"x": 1, "y": 2}, "INSERT")]
    )
    service.push(gw, "b", [make_delta("b", encode(BASE_MS, 2), "t", "r", None)])
    [(row_id, state)] = list(store.row_states(gw, "t"))
    assert row_id == "r" and not state.live and state.delete_client == "b"


# ---------------------------------------------------------------------- action results

LEASE = 60_000


def test_an_action_claim_is_held_until_its_result_is_stored(store: WalStore, gw: str) -> None:
    keys = ["id:a1", "key:k1"]
    assert store.claim_action(gw, "c", keys, "o1", BASE_MS, LEASE) == ActionClaim("claimed")
    assert store.claim_action(gw, "c", keys, "o2", BASE_MS + 1, LEASE).status == "running"
    # Another action with the same idempotency key waits on the same claim.
    assert store.claim_action(gw, "c", ["id:a2", "key:k1"], "o3", BASE_MS, LEASE).status == (
        "running"
    )
    assert not store.finish_action(gw, "c", keys, "o2", '{"r":1}', BASE_MS)  # not its claim
    assert store.finish_action(gw, "c", keys, "o1", '{"r":1}', BASE_MS + 5)
    stored = ActionClaim("stored", '{"r":1}')
    assert store.claim_action(gw, "c", keys, "o4", BASE_MS + 9, LEASE) == stored
    assert store.claim_action(gw, "c", ["id:a1"], "o4", BASE_MS + 9, LEASE) == stored
    assert store.claim_action(gw, "c", ["id:a3", "key:k1"], "o4", BASE_MS, LEASE) == stored
    # Results never leak to another client or gateway.
    assert store.claim_action(gw, "d", keys, "o5", BASE_MS, LEASE).status == "claimed"
    assert store.claim_action(gw + "_2", "c", keys, "o6", BASE_MS, LEASE).status == "claimed"


def test_a_released_claim_may_run_again(store: WalStore, gw: str) -> None:
    keys = ["id:a1"]
    assert store.claim_action(gw, "c", keys, "o1", BASE_MS, LEASE).status == "claimed"
    assert store.finish_action(gw, "c", keys, "o1", None, BASE_MS)
    assert store.claim_action(gw, "c", keys, "o2", BASE_MS, LEASE).status == "claimed"


def test_an_expired_claim_is_taken_over(store: WalStore, gw: str) -> None:
    keys = ["id:a1", "key:k1"]
    assert store.claim_action(gw, "c", keys, "o1", BASE_MS, LEASE).status == "claimed"
    assert store.claim_action(gw, "c", keys, "o2", BASE_MS + LEASE, LEASE).status == "claimed"
    assert not store.finish_action(gw, "c", keys, "o1", '{"late":1}', BASE_MS + LEASE)
    assert store.finish_action(gw, "c", keys, "o2", '{"r":2}', BASE_MS + LEASE)
    assert store.claim_action(gw, "c", keys, "o3", BASE_MS * 2, LEASE).result_json == '{"r":2}'


def test_concurrent_claims_of_one_key_succeed_once(store: WalStore, gw: str) -> None:
    start = threading.Barrier(8)

    def claim(i: int) -> str:
        start.wait()
        return store.claim_action(gw, "c", ["id:x", "key:y"], f"o{i}", BASE_MS, LEASE).status

    with ThreadPoolExecutor(8) as pool:
        outcomes = sorted(pool.map(claim, range(8)))
    assert outcomes == ["claimed"] + ["running"] * 7


def test_purge_forgets_old_results_and_claims(store: WalStore, gw: str) -> None:
    old = BASE_MS - 10 * LEASE  # older than anything another test of a shared database wrote
    store.claim_action(gw, "c", ["id:old"], "o", old, LEASE)
    store.finish_action(gw, "c", ["id:old"], "o", "{}", old)
    store.claim_action(gw, "c", ["id:stale"], "o", old, LEASE)
    store.claim_action(gw, "c", ["id:new"], "o", BASE_MS, LEASE)
    assert store.purge_actions(old + 1) >= 2
    assert store.claim_action(gw, "c", ["id:old"], "o2", BASE_MS, LEASE).status == "claimed"
    assert store.claim_action(gw, "c", ["id:stale"], "o2", old, LEASE).status == "claimed"
    assert store.claim_action(gw, "c", ["id:new"], "o2", BASE_MS, LEASE).status == "running"
