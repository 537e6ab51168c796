"""Applying remote rows: the per-column rules, and convergence with pending local writes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync_platform.client import LocalDB, SchemaRegistry
from lakesync_platform.client._applier import apply_rows, plan_row
from lakesync_platform.client._stamps import (
    STAMPS_DDL,
    RowStamps,
    encode_full_stamps,
    encode_new_stamps,
    load_stamps,
)
from lakesync_platform.client._wire import RemoteColumn, RemoteRow, parse_remote_row
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.merge import RowState, merge_delta

KNOWN = {"a", "b", "c"}


def _full(state: RowState, table: str = "t", row_id: str = "r") -> RemoteRow:
    """The stamped pull encoding of a server row (as ``SyncService`` sends it)."""
    hlc, client = state.newest_stamp()
    if not state.live:
        return RemoteRow("DELETE", table, row_id, hlc, client, (), 0, "")
    cols = tuple(RemoteColumn(n, c.value, c.hlc, c.client_id) for n, c in state.columns.items())
    return RemoteRow(
        "INSERT", table, row_id, hlc, client, cols, state.delete_hlc, state.delete_client
    )


def test_newer_remote_column_wins_older_loses() -> None:
    local = RowStamps({"a": (10, "me"), "b": (10, "me")})
    row = RemoteRow(
        "INSERT",
        "t",
        "r",
        12,
        "x",
        (RemoteColumn("a", "new", 12, "x"), RemoteColumn("b", "stale", 9, "x")),
        0,
        "",
    )
    plan = plan_row(local, row, KNOWN)
    assert plan.values == {"a": "new"}
    assert plan.stamps.columns == {"a": (12, "x"), "b": (10, "me")}


def test_tie_break_by_client_id() -> None:
    local = RowStamps({"a": (10, "m")})
    higher = RemoteRow("INSERT", "t", "r", 10, "z", (RemoteColumn("a", 1, 10, "z"),), 0, "")
    lower = RemoteRow("INSERT", "t", "r", 10, "a", (RemoteColumn("a", 1, 10, "a"),), 0, "")
    assert plan_row(local, higher, KNOWN).values == {"a": 1}
    assert plan_row(local, lower, KNOWN).values == {}


def test_full_row_clears_columns_it_lacks_unless_newer_than_its_delete() -> None:
    local = RowStamps({"a": (5, "me"), "b": (30, "me")})  # b: an unpushed newer write
    row = RemoteRow("INSERT", "t", "r", 25, "x", (RemoteColumn("c", 1, 25, "x"),), 20, "x")
    plan = plan_row(local, row, KNOWN)
    assert plan.values == {"c": 1, "a": None}
    assert plan.stamps.columns == {"b": (30, "me"), "c": (25, "x")}


def test_partial_row_never_clears() -> None:
    local = RowStamps({"a": (5, "me")})
    row = RemoteRow("UPDATE", "t", "r", 25, "x", (RemoteColumn("c", 1, 25, "x"),))
    assert plan_row(local, row, KNOWN).stamps.columns == {"a": (5, "me"), "c": (25, "x")}


def test_delete_keeps_only_newer_local_writes_and_is_not_recorded() -> None:
    local = RowStamps({"a": (5, "me"), "b": (30, "me")}, delete=(2, "me"))
    plan = plan_row(local, RemoteRow("DELETE", "t", "r", 20, "x", (), 0, ""), KNOWN)
    assert plan.stamps == RowStamps({"b": (30, "me")}, (2, "me"))
    assert plan.values == {"a": None}
    # the row re-enters the view later with its old stamps: it comes back
    back = RemoteRow("INSERT", "t", "r", 5, "me", (RemoteColumn("a", "v", 5, "me"),), 0, "")
    assert plan_row(plan.stamps, back, KNOWN).stamps.columns == {"a": (5, "me"), "b": (30, "me")}


def test_unpushed_local_delete_beats_older_server_state() -> None:
    local = RowStamps({}, delete=(50, "me"))
    row = RemoteRow(
        "INSERT",
        "t",
        "r",
        60,
        "x",
        (RemoteColumn("a", 1, 40, "x"), RemoteColumn("b", 2, 60, "x")),
        0,
        "",
    )
    plan = plan_row(local, row, KNOWN)
    assert plan.stamps.columns == {"b": (60, "x")}  # only the write newer than the delete


def test_unknown_columns_and_tables_are_skipped() -> None:
    db = LocalDB.memory()
    db.exec(STAMPS_DDL)
    reg = SchemaRegistry(db)
    reg.load()
    reg.register({"table": "t", "columns": [{"name": "a", "type": "string"}]})
    rows = [
        parse_remote_row(
            {
                "op": "INSERT",
                "table": "t",
                "rowId": "r",
                "clientId": "x",
                "hlc": "9",
                "deltaId": "d",
                "deleteHlc": "0",
                "deleteClientId": "",
                "columns": [
                    {"column": "a", "value": "ok", "hlc": "9", "clientId": "x"},
                    {"column": "zz", "value": 1, "hlc": "9", "clientId": "x"},
                ],
            }
        ),
        parse_remote_row(
            {
                "op": "INSERT",
                "table": "nope",
                "rowId": "r",
                "clientId": "x",
                "hlc": "9",
                "deltaId": "e",
                "columns": [{"column": "a", "value": 1}],
            }
        ),
    ]
    with db.transaction():
        assert apply_rows(db, reg, rows) == {"t"}
    assert db.query("SELECT * FROM t") == [{"_rowId": "r", "a": "ok"}]
    assert load_stamps(db, "t", ["r"])["r"].columns == {"a": (9, "x")}


def test_same_row_twice_in_one_page_ends_in_the_last_state() -> None:
    db = LocalDB.memory()
    db.exec(STAMPS_DDL)
    reg = SchemaRegistry(db)
    reg.load()
    reg.register(
        {
            "table": "t",
            "columns": [{"name": "a", "type": "string"}, {"name": "b", "type": "string"}],
        }
    )
    first = RemoteRow(
        "INSERT",
        "t",
        "r",
        5,
        "x",
        (RemoteColumn("a", "1", 5, "x"), RemoteColumn("b", "1", 5, "x")),
        0,
        "",
    )
    gone = RemoteRow("DELETE", "t", "r", 6, "x", (), 0, "")
    back = RemoteRow("INSERT", "t", "r", 7, "x", (RemoteColumn("a", "2", 7, "x"),), 6, "x")
    with db.transaction():
        apply_rows(db, reg, [first, gone, back])
    assert db.query("SELECT * FROM t") == [{"_rowId": "r", "a": "2", "b": None}]


# --------------------------------------------------------------------------- convergence

writes = st.lists(
    st.tuples(
        st.sampled_from(["me", "x", "y"]),
        st.booleans(),  # delete?
        st.dictionaries(st.sampled_from(sorted(KNOWN)), st.integers(0, 9), min_size=1),
    ),
    max_size=8,
)


def _local_write(
    stamps: RowStamps, values: dict[str, Any], hlc: int, cols: dict[str, Any] | None
) -> None:
    if cols is None:
        stamps.columns.clear()
        values.clear()
        stamps.delete = max(stamps.delete, (hlc, "me"))
        return
    for name, value in cols.items():
        stamps.columns[name] = (hlc, "me")
        values[name] = value


def _apply(stamps: RowStamps, values: dict[str, Any], row: RemoteRow) -> RowStamps:
    plan = plan_row(stamps, row, KNOWN)
    for name, value in plan.values.items():
        if name in plan.stamps.columns:
            values[name] = value
        else:
            values.pop(name, None)
    if not plan.stamps.live:
        values.clear()
    return plan.stamps


@settings(max_examples=300, deadline=None)
@given(writes, st.randoms(use_true_random=False))
def test_pending_local_writes_converge_with_the_server(
    ops: list[tuple[str, bool, dict[str, int]]], rnd: Any
) -> None:
    """Local writes A and others' writes B, any stamps: pull(B), push(A), pull → server state."""
    deltas = []
    for i, (client, is_delete, cols) in enumerate(ops):
        hlc = rnd.randrange(1, 40) * 100 + i  # unique stamps in random order
        columns = () if is_delete else tuple(ColumnDelta(k, v) for k, v in cols.items())
        deltas.append(
            RowDelta("DELETE" if is_delete else "UPDATE", "t", "r", client, columns, hlc, f"d{i}")
        )
    mine = sorted((d for d in deltas if d.client_id == "me"), key=lambda d: d.hlc)
    others = [d for d in deltas if d.client_id != "me"]

    server: RowState | None = None
    for d in others:
        server = merge_delta(server, d).state
    stamps, values = RowStamps(), dict[str, Any]()
    for d in mine:
        _local_write(
            stamps,
            values,
            d.hlc,
            None if d.op == "DELETE" else {c.column: c.value for c in d.columns},
        )
    if server is not None:
        stamps = _apply(stamps, values, _full(server))
    for d in mine:
        server = merge_delta(server, d).state
    if server is None:
        return
    stamps = _apply(stamps, values, _full(server))
    assert stamps.columns == {n: (c.hlc, c.client_id) for n, c in server.columns.items()}
    assert values == server.values()


@settings(max_examples=200, deadline=None)
@given(writes, st.randoms(use_true_random=False))
def test_a_pull_never_replaces_a_newer_unpushed_write(
    ops: list[tuple[str, bool, dict[str, int]]], rnd: Any
) -> None:
    """No flicker: between the pull and the push, newer local values stay on screen."""
    server: RowState | None = None
    stamps, values = RowStamps(), dict[str, Any]()
    for i, (client, is_delete, cols) in enumerate(ops):
        hlc = rnd.randrange(1, 40) * 100 + i
        if client == "me":
            _local_write(stamps, values, hlc, None if is_delete else dict(cols))
        else:
            columns = () if is_delete else tuple(ColumnDelta(k, v) for k, v in cols.items())
            d = RowDelta(
                "DELETE" if is_delete else "UPDATE", "t", "r", client, columns, hlc, f"d{i}"
            )
            server = merge_delta(server, d).state
    if server is None:
        return
    before = dict(values)
    newer = {
        c
        for c, s in stamps.columns.items()
        if (col := server.columns.get(c)) is None or (s[0], s[1]) > (col.hlc, col.client_id)
    }
    newer = {c for c in newer if stamps.columns[c] > (server.delete_hlc, server.delete_client)}
    _apply(stamps, values, _full(server))
    for c in newer:
        assert values[c] == before[c]


_names = st.lists(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=8),
    min_size=1,
    max_size=5,
    unique=True,
)


@given(data=st.data(), names=_names, rows=st.integers(min_value=0, max_value=20))
def test_full_stamps_are_encoded_as_each_rows_stamps_would_be(
    data: st.DataObject, names: list[str], rows: int
) -> None:
    """The column-wise encoding of a checkpoint's new rows gives the side table the bytes
    :meth:`RowStamps.encode` gives row by row (names with quotes, ``%`` or any character)."""
    hlcs = [
        data.draw(st.lists(st.integers(1, 2**63 - 1), min_size=rows, max_size=rows)) for _ in names
    ]
    clients = [
        data.draw(st.lists(st.text(max_size=6), min_size=rows, max_size=rows)) for _ in names
    ]
    expected = [
        RowStamps({n: (hlcs[j][i], clients[j][i]) for j, n in enumerate(names)}).encode()
        for i in range(rows)
    ]
    assert encode_full_stamps(names, hlcs, clients) == expected
    assert encode_new_stamps([RowStamps.decode(b).columns for b in expected]) == expected
