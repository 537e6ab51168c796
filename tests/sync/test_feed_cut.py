"""The broadcast feed's pages cut together (``SyncService.feed_pages``) against an independent
pull per client: the same page, the same delivery records, the same later pull.

The reference for each session is :meth:`SyncService.pull` with ``feed=True`` from the
session's cursor, run on a store of its own that went through the same history (so every
reference pull reads the state the shared cut read). Clients have views that filter a table
by owner (two clients per user), a table every view shows whole and a table no view shows;
the history mixes pushes (rows created, changed, handed between users, deleted) and pulls in
both encodings (the TS client's and the stamped one), which leave delivery records behind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync_platform.core.hlc import encode
from lakesync_platform.core.proto import TAG_BROADCAST, encode_sync_response, frame
from lakesync_platform.core.sync_rules import parse_sync_rules
from lakesync_platform.core.wal import RowRecord, WalStore
from lakesync_platform.sync.cursors import compose_cursor
from lakesync_platform.sync.feed import _Frames, sync_response
from lakesync_platform.sync.feed_cut import FeedPage, FeedWant
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.memory import MemoryWal
from tests.helpers import make_delta
from tests.wal.conftest import ALL_BACKENDS, BASE_MS, SQL_BACKENDS, Clock, open_store

GW = "feed"
RULES = parse_sync_rules(
    {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["todos"],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:user"}],
            },
            {"name": "board", "tables": ["notes"], "filters": []},
        ],
    }
)
USERS = {"a1": "alice", "a2": "alice", "b1": "bob", "b2": "bob", "c1": "carol"}
"""Client id → its ``user`` claim: two clients (devices) of alice and of bob, one of carol."""
TABLES = ("todos", "notes", "secret")  # filtered by owner, shown whole, shown to no one
ROWS = ("r0", "r1", "r2", "r3")


def claims(client: str) -> dict[str, str]:
    return {"sub": client, "user": USERS[client]}


@dataclass(frozen=True)
class Push:
    writer: str
    table: str
    row: str
    owner: str | None  # None: a write without the owner column; "-": a DELETE
    title: str
    admin: bool = False  # with an admin token: the sync rules do not restrict it


@dataclass(frozen=True)
class Pull:
    client: str
    stamped: bool
    from_start: bool


Op = Push | Pull


def apply(service: SyncService, n: int, op: Op, cursors: dict[str, int]) -> None:
    """Run ``op``, the ``n``-th of a history (its stamp), on ``service``."""
    if isinstance(op, Push):
        cols: dict[str, Any] | None = {"title": op.title}
        if op.owner == "-":
            cols = None
        elif op.owner is not None:
            cols = {"title": op.title, "owner": op.owner}
        delta = make_delta(op.writer, encode(BASE_MS, n), op.table, op.row, cols)
        service.push(GW, op.writer, [delta], claims=claims(op.writer), any_client_ids=op.admin)
    else:
        since = 0 if op.from_start else cursors.get(op.client, 0)
        page = service.pull(GW, op.client, since, 3, claims=claims(op.client), stamped=op.stamped)
        cursors[op.client] = page.server_hlc


def build(ops: Sequence[Op], store: WalStore | None = None) -> tuple[SyncService, dict[str, int]]:
    """A sync service that went through ``ops``, and the cursor each client last pulled to."""
    service = SyncService(store or MemoryWal(), Clock(BASE_MS))
    service.save_sync_rules(GW, RULES)
    cursors: dict[str, int] = {}
    for n, op in enumerate(ops, 1):
        apply(service, n, op, cursors)
    return service, cursors


def row_keys() -> list[str]:
    return [f"{t}:{r}" for t in TABLES for r in ROWS]


def want_cursor(service: SyncService, client: str, choice: str, cursors: dict[str, int]) -> int:
    """A session's feed cursor: 0, where the client last pulled to, another client's cursor
    (another view's tag), or a position of the log under the client's own tag."""
    if choice == "zero":
        return 0
    if choice == "own":
        return cursors.get(client, 0)
    if choice == "other":
        return next((c for k, c in sorted(cursors.items()) if k != client), 0)
    position = min(int(choice), service.head(GW))
    return compose_cursor(service.config(GW).view_tag(claims(client)), position)


def check_against_pulls(
    service: SyncService,
    ops: Sequence[Op],
    wants: Sequence[FeedWant],
    limit: int,
) -> list[FeedPage]:
    """Cut ``wants``' pages on ``service`` (which went through ``ops``) and check each against
    an independent pull, its records, and a later pull. A client appears at one cursor only."""
    pages = service.feed_pages(GW, wants, limit)
    checked: set[str] = set()
    out = []
    for want, page in zip(wants, pages, strict=True):
        assert isinstance(page, FeedPage), page
        out.append(page)
        if want.client_id in checked:
            continue
        checked.add(want.client_id)
        ref, _ = build(ops)
        expected = ref.pull(GW, want.client_id, want.cursor, limit, claims=want.claims, feed=True)
        assert msgspec.to_builtins(page.wire) == msgspec.to_builtins(expected.wire)
        assert (page.server_hlc, page.has_more) == (expected.server_hlc, expected.has_more)
        keys = row_keys()
        assert service.wal.client_records(GW, want.client_id, keys) == ref.wal.client_records(
            GW, want.client_id, keys
        )
        for stamped in (False, True):  # a later pull from where the page left the session
            args = (GW, want.client_id, page.server_hlc, 100)
            later = service.pull(*args, claims=want.claims, stamped=stamped)
            again = ref.pull(*args, claims=want.claims, stamped=stamped)
            assert msgspec.to_builtins(later.wire) == msgspec.to_builtins(again.wire), stamped
            assert later.server_hlc == again.server_hlc
    return out


# ---------------------------------------------------------------------- property

clients = st.sampled_from(sorted(USERS))
pushes = st.builds(
    Push,
    writer=clients,
    table=st.sampled_from(TABLES),
    row=st.sampled_from(ROWS),
    owner=st.sampled_from([None, "-", "alice", "bob", "carol"]),
    title=st.sampled_from(["x", "y", "z"]),
)
pulls = st.builds(Pull, client=clients, stamped=st.booleans(), from_start=st.booleans())
histories = st.lists(st.one_of(pushes, pushes, pulls), min_size=1, max_size=14)
cursor_choices = st.sampled_from(["zero", "own", "own", "other", "0", "3", "6", "99"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=histories,
    chosen=st.lists(
        st.tuples(clients, cursor_choices, st.integers(1, 3)), min_size=1, unique_by=lambda t: t[0]
    ),
    limit=st.sampled_from([1, 2, 3, 5, 100]),
)
def test_every_page_equals_an_independent_pull(
    ops: list[Op], chosen: list[tuple[str, str, int]], limit: int
) -> None:
    service, cursors = build(ops)
    wants = [
        FeedWant(client, want_cursor(service, client, choice, cursors), claims(client))
        for client, choice, tabs in chosen
        for _ in range(tabs)  # a client's tabs: sessions at one cursor
    ]
    pages = check_against_pulls(service, ops, wants, limit)
    for want, page in zip(wants, pages, strict=True):  # tabs share their page
        assert page is pages[wants.index(want)]


# ---------------------------------------------------------------------- scenarios


@pytest.fixture(params=ALL_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WalStore]:
    opened = open_store(request.param, request, tmp_path)
    yield opened
    opened.close()


def test_a_row_handed_over_leaves_only_the_devices_that_hold_it(store: WalStore) -> None:
    """alice's a1 holds r0; a2 joined after it (its cursor is past r0, it never got it). carol,
    with an admin token (the sync rules would refuse her a row she cannot see), hands r0 to
    bob: a1 is sent the DELETE, a2 nothing, bob's devices the row whole, and carol, who wrote
    it (so may hold it), the DELETE."""
    ops: list[Op] = [Push("a1", "todos", "r0", "alice", "x"), Pull("a1", False, True)]
    service, cursors = build(ops, store)
    a2_cursor = compose_cursor(service.config(GW).view_tag(claims("a2")), service.head(GW))
    ops.append(Push("c1", "todos", "r0", "bob", "y", admin=True))  # carol hands it to bob
    apply(service, len(ops), ops[-1], cursors)
    wants = [
        FeedWant("a1", cursors["a1"], claims("a1")),
        FeedWant("a2", a2_cursor, claims("a2")),
        FeedWant("b1", 0, claims("b1")),
        FeedWant("b2", 0, claims("b2")),
        FeedWant("c1", 0, claims("c1")),
    ]
    pages = check_against_pulls(service, ops, wants, 100)
    ops_of = [[(d.op, d.row_id) for d in p.wire if d.op != "DELETE" or d.hlc != "0"] for p in pages]
    assert ops_of == [
        [("DELETE", "r0")],
        [],
        [("INSERT", "r0")],
        [("INSERT", "r0")],
        [("DELETE", "r0")],
    ]
    assert pages[2] is pages[3]  # bob's two devices: one view, one tag, one page
    assert store.client_records(GW, "a1", ["todos:r0"]) == {
        "todos:r0": RowRecord(False, service.head(GW))
    }
    assert store.client_records(GW, "a2", ["todos:r0"]) == {}


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_records_of_many_clients_are_read_and_written_in_one_call(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """More clients and rows than one SQLite statement takes: every record comes back."""
    store = open_store(backend, request, tmp_path)
    memory = MemoryWal()
    try:
        ids = [f"c{i:03d}" for i in range(300)]
        keys = [f"todos:r{k:03d}" for k in range(260)]
        records = {
            c: {k: RowRecord(j % 2 == 0, i + j) for j, k in enumerate(keys) if (i + j) % 7 == 0}
            for i, c in enumerate(ids)
        }
        for wal in (store, memory):
            wal.save_delivery_records(GW, records)
        with store.feed_read(GW) as sql_reader, memory.feed_read(GW) as memory_reader:
            asked = ([*ids[::2], "nobody"], keys[1:])
            found = sql_reader.delivery_records(*asked)
            assert found == memory_reader.delivery_records(*asked)
        assert sum(len(v) for v in found.values()) > 1000
    finally:
        store.close()


def test_two_sessions_of_one_client_at_two_cursors_record_the_union(gw: str) -> None:
    """One page sends the row whole, the other (an older cursor of another view) deletes a
    row it may hold: the client's record says it may hold the row, unconfirmed to the later."""
    service = SyncService(MemoryWal(), Clock(BASE_MS))
    service.save_sync_rules(gw, RULES)
    delta = make_delta("a1", encode(BASE_MS, 1), "todos", "r0", {"title": "x", "owner": "alice"})
    service.push(gw, "a1", [delta], claims=claims("a1"))
    as_bob = {"sub": "a1", "user": "bob"}  # a second token of the same client, another view
    pages = service.feed_pages(
        gw, [FeedWant("a1", 0, claims("a1")), FeedWant("a1", 0, as_bob)], 100
    )
    assert [[d.op for d in p.wire] for p in pages if isinstance(p, FeedPage)] == [
        ["DELETE", "INSERT"],
        ["DELETE"],
    ]
    assert service.wal.client_records(gw, "a1", ["todos:r0"]) == {"todos:r0": RowRecord(True, 1)}


def test_a_frame_is_the_rows_response_with_the_pages_cursor() -> None:
    service, _ = build(
        [Push("a1", "todos", "r0", "alice", "x"), Push("a1", "notes", "r1", None, "y")]
    )
    (page,) = service.feed_pages(GW, [FeedWant("a1", 0, claims("a1"))], 100)
    assert isinstance(page, FeedPage) and len(page.rows) == 2
    frames = _Frames().of(page)
    expected = [
        frame(TAG_BROADCAST, sync_response(row, page.server_hlc, False)) for row in page.rows
    ]
    assert list(frames) == expected
    assert encode_sync_response([], page.server_hlc, False)  # the cursor is never left out


def test_a_claim_the_rules_do_not_read_changes_no_view_tag() -> None:
    service, _ = build([])
    cfg = service.config(GW)
    tag = cfg.view_tag(claims("a1"))
    assert cfg.view_tag({"sub": "a2", "user": "alice", "team": "x"}) == tag  # user is read
    assert cfg.view_tag({"sub": "a1", "user": "bob"}) != tag
    assert cfg.view_tag({"sub": "a1"}) not in (tag, 0)  # no user: a view of its own


def test_a_record_changed_since_it_was_read_is_not_overwritten(store: WalStore) -> None:
    store.save_client_records(GW, "a1", {"t:r1": RowRecord(True, 3), "t:r2": RowRecord(True, 3)})
    store.save_client_records(GW, "a1", {"t:r1": RowRecord(True, 0)})  # a push marks it held
    read = {"t:r1": RowRecord(True, 3), "t:r2": RowRecord(True, 3)}
    store.save_delivery_records(
        GW, {"a1": {"t:r1": RowRecord(False, 9), "t:r2": RowRecord(False, 9)}}, {"a1": read}
    )
    assert store.client_records(GW, "a1", ["t:r1", "t:r2"]) == {
        "t:r1": RowRecord(True, 0),  # changed since read: left as it is
        "t:r2": RowRecord(False, 9),
    }


class PushBetween(MemoryWal):
    """The in-memory WAL; ``between`` runs once the feed has read the records it decides on
    and before it saves what its pages set (a push committing meanwhile)."""

    between: Any = None

    def save_delivery_records(self, gw: str, records: Any, expected: Any = None) -> None:
        hook, self.between = self.between, None
        if hook is not None:
            hook()
        super().save_delivery_records(gw, records, expected)


def test_a_row_its_client_writes_while_its_delete_is_cut_is_deleted_again() -> None:
    """a1 holds r0, which carol (an admin token) hands to bob: a1's page deletes it. a1 writes
    r0 (its title) before that page's records are saved: the sync rules refuse the write (r0
    is bob's now), but a1's device holds it again, so the push's mark that a1 holds r0 must
    survive, and the next page deletes r0 again."""
    wal = PushBetween()
    ops: list[Op] = [Push("a1", "todos", "r0", "alice", "x"), Pull("a1", False, True)]
    service, cursors = build(ops, wal)
    apply(service, 3, Push("c1", "todos", "r0", "bob", "y", admin=True), cursors)
    wal.between = lambda: apply(service, 4, Push("a1", "todos", "r0", None, "mine"), cursors)
    (page,) = service.feed_pages(GW, [FeedWant("a1", cursors["a1"], claims("a1"))], 100)
    assert isinstance(page, FeedPage) and [(d.op, d.row_id) for d in page.wire] == [
        ("DELETE", "r0")
    ]
    (again,) = service.feed_pages(GW, [FeedWant("a1", page.server_hlc, claims("a1"))], 100)
    assert isinstance(again, FeedPage) and [(d.op, d.row_id) for d in again.wire] == [
        ("DELETE", "r0")
    ]
    assert again.rows[0][0].hlc == str(encode(BASE_MS, 3))  # the row's newest stamp: carol's
