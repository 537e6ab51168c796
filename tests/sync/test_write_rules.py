"""Write permissions (docs/gateway.md, "Security model"): a delta is accepted only if the pusher
may see the row before the change and after it, judged inside the push transaction on the
merged row state; refused deltas are reported, their ids released, their rows re-announced.

Every scenario runs on every WAL store (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

from typing import Any

import pytest

from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.sync_rules import (
    ClientView,
    parse_sync_rules,
    sync_rules_to_json,
)
from lakesync_platform.core.wal import AppendRequest, PushCommit, PushPlanner
from lakesync_platform.sync.service import PushResult, SyncService
from tests.helpers import make_delta
from tests.sync.test_service import h, stamped_rows

MINE = {
    "name": "mine",
    "tables": ["notes"],
    "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
}
RULES = {"version": 1, "buckets": [MINE, {"name": "board", "tables": ["todos"], "filters": []}]}
ADMIN = {"any_client_ids": True}  # an admin token: the rules do not restrict it


def note(client: str, ms: int, row: str, cols: dict[str, Any] | None, op: str = "UPDATE") -> Any:
    return make_delta(client, h(ms), "notes", row, cols, op)


def push(service: SyncService, gw: str, client: str, *deltas: Any, **kw: Any) -> PushResult:
    return service.push(gw, client, list(deltas), claims={"sub": client}, **kw)


def refused_rows(result: PushResult) -> list[str]:
    return [r.delta.row_id for r in result.refused]


@pytest.fixture
def seeded(service: SyncService, gw: str) -> SyncService:
    """alice's n1 and bob's n2, written by the service."""
    service.save_sync_rules(gw, parse_sync_rules(RULES))
    push(
        service,
        gw,
        "svc",
        note("svc", 1, "n1", {"owner": "alice", "body": "hers"}, "INSERT"),
        note("svc", 1, "n2", {"owner": "bob", "body": "his"}, "INSERT"),
        **ADMIN,
    )
    return service


# ----------------------------------------------------------------------------- the rules JSON


def test_write_is_parsed_validated_and_written_back_only_when_not_the_default() -> None:
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [
                MINE,
                {**MINE, "name": "ro", "write": False},
                {**MINE, "name": "some", "write": ["insert", "update"]},
            ],
        }
    )
    assert [sorted(b.write) for b in rules.buckets] == [
        ["delete", "insert", "update"],
        [],
        ["insert", "update"],
    ]
    out = sync_rules_to_json(rules)
    assert "write" not in out["buckets"][0] and "writes" not in out
    assert out["buckets"][1]["write"] == [] and out["buckets"][2]["write"] == ["insert", "update"]
    assert parse_sync_rules(out) == rules
    # rules written before writes were checked keep their exact form (and view tags)
    assert sync_rules_to_json(parse_sync_rules(RULES)) == RULES
    opt_out = parse_sync_rules({**RULES, "writes": "unrestricted"})
    assert opt_out.unrestricted_writes and sync_rules_to_json(opt_out)["writes"] == "unrestricted"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"write": "yes"}, 'Bucket "mine" write must be true, false or an array of:'),
        ({"write": ["upsert"]}, "(got 'upsert')"),
        ({"write": [1]}, 'Bucket "mine" write must be true'),
    ],
)
def test_a_bad_write_is_refused_with_the_bucket_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_sync_rules({"version": 1, "buckets": [{**MINE, **change}]})
    assert message in err.value.message


def test_a_bad_writes_is_refused() -> None:
    with pytest.raises(ValidationError) as err:
        parse_sync_rules({**RULES, "writes": "open"})
    assert err.value.message == 'Sync rules writes must be "rules" or "unrestricted"'


def test_may_write_is_using_and_with_check_over_the_buckets_that_allow_the_operation() -> None:
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [
                {**MINE, "write": ["update"]},
                {
                    "name": "drafts",
                    "tables": ["notes"],
                    "filters": [{"column": "state", "op": "eq", "value": "draft"}],
                    "write": ["insert", "update", "delete"],
                },
            ],
        }
    )
    view = ClientView(rules, {"sub": "bob"})
    mine, draft = {"owner": "bob", "state": "done"}, {"owner": "x", "state": "draft"}
    assert view.may_write("notes", "update", mine, mine)
    assert not view.may_write("notes", "delete", mine, None)  # "mine" does not allow deletes
    assert view.may_write("notes", "delete", draft, None)
    assert view.may_write("notes", "update", mine, draft)  # before in one bucket, after in another
    assert not view.may_write("notes", "update", mine, {"owner": "alice", "state": "done"})
    assert not view.may_write("notes", "insert", None, mine)  # only drafts may be inserted
    assert not view.may_write("todos", "insert", None, {"x": 1})  # no bucket shows todos
    assert not view.writes_unchecked("notes")
    assert ClientView(None, {}).writes_unchecked("notes")
    # an update that writes no tested column keeps the row in its bucket: "after" is not built
    untouched = view.may_update("notes", mine, {"body"}, lambda: pytest.fail("built"))
    assert untouched
    away = {"owner": "alice", "state": "done"}
    assert not view.may_update("notes", mine, {"owner"}, lambda: away)
    assert view.may_update("notes", mine, {"owner", "state"}, lambda: draft)


# ----------------------------------------------------------------------------- pushes


def test_nobody_writes_a_row_they_cannot_see_and_the_rest_of_the_batch_lands(
    seeded: SyncService, gw: str
) -> None:
    service = seeded
    result = push(
        service,
        gw,
        "bob",
        note("bob", 2, "n1", {"body": "bob was here"}),  # update alice's row
        note("bob", 3, "n1", None),  # delete it
        note("bob", 4, "n1", {"owner": "bob"}),  # take it over
        note("bob", 5, "n3", {"owner": "alice", "body": "planted"}, "INSERT"),  # plant one
        note("bob", 6, "n2", {"owner": "alice"}),  # give his away
        note("bob", 7, "n2", {"body": "his, edited"}),  # his own: fine
        note("bob", 8, "n4", {"owner": "bob", "body": "new"}, "INSERT"),  # his own: fine
        make_delta("bob", h(9), "todos", "t1", {"title": "board"}, "INSERT"),  # open table
    )
    assert refused_rows(result) == ["n1", "n1", "n1", "n3", "n2"]
    assert {r.error.code for r in result.refused} == {"WRITE_FORBIDDEN"}
    assert result.accepted == 3 and [e.row_id for e in result.entries] == ["n2", "n4", "t1"]
    rows = {k: (s.values() if s.live else None) for k, s in service.known_rows(gw, "notes").items()}
    assert rows["n1"] == {"owner": "alice", "body": "hers"}
    assert rows["n2"] == {"owner": "bob", "body": "his, edited"}
    assert rows["n4"] == {"owner": "bob", "body": "new"}
    assert rows.get("n3") is None  # at most the empty tombstone a re-announcement needs
    assert stamped_rows(service, gw, "alice")[0] == {
        "n1": {"owner": "alice", "body": "hers"},
        "t1": {"title": "board"},
    }


def test_the_refusal_says_nothing_of_whether_a_hidden_row_exists(
    seeded: SyncService, gw: str
) -> None:
    hidden = push(seeded, gw, "bob", note("bob", 2, "n1", {"owner": "alice", "body": "x"}))
    missing = push(seeded, gw, "bob", note("bob", 3, "n9", {"owner": "alice", "body": "x"}))
    (a,), (b,) = hidden.refused, missing.refused
    assert a.error.message.replace("n1", "n?") == b.error.message.replace("n9", "n?")
    assert hidden.entries == missing.entries == ()
    assert (hidden.accepted, missing.accepted) == (0, 0)


def test_the_pusher_is_brought_back_to_the_servers_row_or_told_it_is_gone(
    seeded: SyncService, gw: str
) -> None:
    service = seeded
    _, cursor = stamped_rows(service, gw, "bob")
    push(
        service,
        gw,
        "bob",
        note("bob", 2, "n2", {"owner": "alice"}),  # his own row, given away: refused
        note("bob", 3, "n1", {"owner": "bob"}),  # alice's row: refused
        note("bob", 4, "n7", {"owner": "alice"}, "INSERT"),  # a row nobody has: refused
    )
    page, _ = stamped_rows(service, gw, "bob", since=cursor)
    # the row he may see comes back whole as the server has it; the others as DELETEs
    assert page == {"n2": {"owner": "bob", "body": "his"}, "n1": None, "n7": None}
    # alice hears of n1 again (re-announced, unchanged) and nothing of n7
    assert stamped_rows(service, gw, "alice")[0] == {"n1": {"owner": "alice", "body": "hers"}}
    # and a plain (TS) pull gives bob the same: n2 as DELETE 0 + INSERT, n1 and n7 as DELETEs
    plain = service.pull(gw, "bob", cursor, 100, claims={"sub": "bob"}).deltas
    assert [(d["op"], d["rowId"]) for d in plain] == [
        ("DELETE", "n2"),
        ("INSERT", "n2"),
        ("DELETE", "n1"),
        ("DELETE", "n7"),
    ]


def test_a_write_to_a_table_no_bucket_shows_is_refused_and_deleted_on_the_writer(
    service: SyncService, gw: str
) -> None:
    service.save_sync_rules(gw, parse_sync_rules({"version": 1, "buckets": [MINE]}))
    _, cursor = stamped_rows(service, gw, "bob")
    d = make_delta("bob", h(1), "secrets", "s1", {"v": 1}, "INSERT")
    result = push(service, gw, "bob", d)
    assert result.refused[0].error.message == (
        'Table "secrets" is not writable by this client under the sync rules'
    )
    assert service.known_rows(gw, "secrets").get("s1") is None or not (
        service.known_rows(gw, "secrets")["s1"].live
    )
    assert stamped_rows(service, gw, "bob", since=cursor)[0] == {"s1": None}
    assert stamped_rows(service, gw, "carol")[0] == {}  # nobody else hears of it


def test_read_only_and_per_operation_buckets(service: SyncService, gw: str) -> None:
    rules = {
        "version": 1,
        "buckets": [
            {"name": "board", "tables": ["todos"], "filters": [], "write": False},
            {**MINE, "write": ["insert", "update"]},
        ],
    }
    service.save_sync_rules(gw, parse_sync_rules(rules))
    push(service, gw, "svc", make_delta("svc", h(1), "todos", "t1", {"title": "x"}), **ADMIN)
    result = push(
        service,
        gw,
        "bob",
        make_delta("bob", h(2), "todos", "t1", {"title": "mine now"}),
        make_delta("bob", h(3), "todos", "t2", {"title": "new"}, "INSERT"),
        note("bob", 4, "n1", {"owner": "bob", "body": "a"}, "INSERT"),
        note("bob", 5, "n1", {"body": "b"}),
        note("bob", 6, "n1", None),  # deletes are not among the operations "mine" allows
    )
    assert refused_rows(result) == ["t1", "t2", "n1"]
    assert service.known_rows(gw, "notes")["n1"].values() == {"owner": "bob", "body": "b"}
    assert service.known_rows(gw, "todos")["t1"].values() == {"title": "x"}


def test_a_refused_delta_is_judged_again_when_pushed_again(seeded: SyncService, gw: str) -> None:
    service = seeded
    d = note("bob", 2, "n1", {"body": "bob was here"})
    assert refused_rows(push(service, gw, "bob", d)) == ["n1"]
    assert refused_rows(push(service, gw, "bob", d)) == ["n1"]  # not taken for a duplicate
    service.save_sync_rules(gw, parse_sync_rules({**RULES, "writes": "unrestricted"}))
    again = push(service, gw, "bob", d)
    assert not again.refused and again.duplicates == 0 and len(again.entries) == 1
    assert service.known_rows(gw, "notes")["n1"].values()["body"] == "bob was here"


def test_the_opt_out_and_admin_tokens_write_anything(seeded: SyncService, gw: str) -> None:
    assert not push(seeded, gw, "bob", note("bob", 2, "n1", {"body": "a"}), **ADMIN).refused
    seeded.save_sync_rules(gw, parse_sync_rules({**RULES, "writes": "unrestricted"}))
    assert not push(seeded, gw, "bob", note("bob", 3, "n1", {"owner": "bob"})).refused
    assert seeded.known_rows(gw, "notes")["n1"].values() == {"owner": "bob", "body": "a"}


def test_the_check_sees_the_row_as_the_transaction_does_not_as_it_was_before(
    seeded: SyncService, gw: str
) -> None:
    """A write that commits between bob's validation and his transaction (the service gives
    n2 to alice) is the state bob's delta is judged on: his update of n2 is refused."""
    service = seeded
    store = service.wal
    real = store.append_changes
    moved: list[PushCommit] = []

    def racing(gw_: str, request: AppendRequest, planner: PushPlanner, now: int) -> PushCommit:
        if not moved and request.client_id == "bob":
            moved.append(real(gw_, *_give_n2_to_alice(service, gw_, now)))
        return real(gw_, request, planner, now)

    store.append_changes = racing  # type: ignore[method-assign]
    try:
        result = push(service, gw, "bob", note("bob", 3, "n2", {"body": "still his?"}))
    finally:
        store.append_changes = real  # type: ignore[method-assign]
    assert moved and refused_rows(result) == ["n2"]
    assert service.known_rows(gw, "notes")["n2"].values() == {"owner": "alice", "body": "his"}


def _give_n2_to_alice(
    service: SyncService, gw: str, now: int
) -> tuple[AppendRequest, PushPlanner, int]:
    """The request and planner of a service push that gives n2 to alice (run by the caller)."""
    from lakesync_platform.sync.plan import plan_push
    from lakesync_platform.sync.prepare import prepare

    d = note("svc", 2, "n2", {"owner": "alice"})
    cfg = service.config(gw)
    prep = prepare(cfg, "svc", [d], now, any_client_ids=True)
    request = AppendRequest([(d.hlc, d.delta_id)], [d.key], "svc")
    return request, (lambda loaded: plan_push(cfg.columns, loaded, [d], prep, now)), now
