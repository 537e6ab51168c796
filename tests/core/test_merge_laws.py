"""Per-column LWW merge (ARCHITECTURE.md §5; ``core/merge.py``): laws and worked examples.

The laws are what makes the log convergent: folding any delivery order of the same deltas, with
duplicates, yields the same row states; folding a prefix and then the *effective* outcomes of
the rest is the same as folding everything; re-merging changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from lakesync_platform.core.ids import canonical_json, delta_id
from lakesync_platform.core.merge import (
    RowState,
    decode_row_state,
    encode_row_state,
    js_string_lt,
    merge_delta,
    stamp_gt,
)

ASTRAL = "\U0001f600"  # UTF-16 D83D DE00: sorts *before* U+E000 in JavaScript
PRIVATE = "\ue000"
CLIENTS = ["a", "b", ASTRAL, PRIVATE]


def make(op: str, hlc: int, client: str, row: str = "r1", **columns: Any) -> RowDelta:
    cols = tuple(ColumnDelta(k, v) for k, v in columns.items())
    return RowDelta(op, "t", row, client, cols, hlc, delta_id(client, hlc, "t", row, cols))


def fold(
    deltas: Iterable[RowDelta], states: dict[str, RowState] | None = None
) -> dict[str, RowState]:
    states = dict(states or {})
    for d in deltas:
        states[d.key] = merge_delta(states.get(d.key), d).state
    return states


Snapshot = dict[str, tuple[list[tuple[str, str, int, str]], int, str]]


def snapshot(states: dict[str, RowState]) -> Snapshot:
    """Per row: sorted (column, canonical value, hlc, client) and the delete stamp."""
    return {
        key: (
            sorted((n, canonical_json(c.value), c.hlc, c.client_id) for n, c in s.columns.items()),
            s.delete_hlc,
            s.delete_client,
        )
        for key, s in states.items()
    }


def effective(deltas: Sequence[RowDelta]) -> list[RowDelta]:
    """What folding ``deltas`` from nothing actually changed, as deltas (the log's entries)."""
    states: dict[str, RowState] = {}
    out = []
    for d in deltas:
        outcome = merge_delta(states.get(d.key), d)
        states[d.key] = outcome.state
        if outcome.op is not None:
            out.append(
                RowDelta(
                    outcome.op, d.table, d.row_id, d.client_id, outcome.columns, d.hlc, d.delta_id
                )
            )
    return out


values = st.none() | st.booleans() | st.integers(-2, 2) | st.text(alphabet="xy", max_size=2)
writes = st.builds(
    lambda op, hlc, client, row, cols: make(op, hlc, client, row, **cols),
    st.sampled_from([INSERT, UPDATE]),
    st.integers(1, 4),
    st.sampled_from(CLIENTS),
    st.sampled_from(["r1", "r2"]),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), values, min_size=1, max_size=3),
)
deletes = st.builds(
    lambda hlc, client, row: make(DELETE, hlc, client, row),
    st.integers(1, 4),
    st.sampled_from(CLIENTS),
    st.sampled_from(["r1", "r2"]),
)
delta_lists = st.lists(writes | deletes, min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(delta_lists, st.data())
def test_any_order_with_duplicates_gives_the_same_state(
    deltas: list[RowDelta], data: st.DataObject
) -> None:
    duplicated = deltas + data.draw(st.lists(st.sampled_from(deltas), max_size=6))
    shuffled = data.draw(st.permutations(duplicated))
    assert snapshot(fold(shuffled)) == snapshot(fold(deltas))


@settings(max_examples=300, deadline=None)
@given(delta_lists, st.data())
def test_folding_effective_outcomes_of_a_suffix_is_the_same(
    deltas: list[RowDelta], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, len(deltas)))
    head, tail = deltas[:k], deltas[k:]
    assert snapshot(fold(effective(tail), fold(head))) == snapshot(fold(deltas))
    # ... and in the other grouping too: the effective log of everything folds to the same state.
    assert snapshot(fold(effective(head) + effective(tail))) == snapshot(fold(deltas))
    assert snapshot(fold(effective(deltas))) == snapshot(fold(deltas))


@settings(max_examples=200, deadline=None)
@given(delta_lists)
def test_idempotence(deltas: list[RowDelta]) -> None:
    states = fold(deltas)
    assert snapshot(fold(deltas, states)) == snapshot(states)
    for d in deltas:
        again = merge_delta(states[d.key], d)
        assert again.op is None and again.columns == ()
        assert snapshot({d.key: again.state}) == snapshot({d.key: states[d.key]})


@given(delta_lists)
def test_invariant_columns_are_newer_than_the_delete(deltas: list[RowDelta]) -> None:
    for state in fold(deltas).values():
        for col in state.columns.values():
            assert stamp_gt(col.hlc, col.client_id, state.delete_hlc, state.delete_client)
        assert decode_row_state(encode_row_state(state)) == state


@given(delta_lists)
def test_merge_does_not_modify_its_input(deltas: list[RowDelta]) -> None:
    states = fold(deltas[:-1])
    before = snapshot(states)
    merge_delta(states.get(deltas[-1].key), deltas[-1])
    assert snapshot(states) == before


# --- worked examples ----------------------------------------------------------------------------


def merge_all(*deltas: RowDelta) -> RowState:
    return fold(deltas)["t:r1"]


def test_first_write_inserts() -> None:
    outcome = merge_delta(None, make(INSERT, 1, "a", x=1, y=2))
    assert outcome.op == INSERT and [c.column for c in outcome.columns] == ["x", "y"]
    assert outcome.state.values() == {"x": 1, "y": 2} and outcome.state.live


def test_write_older_than_the_delete_is_dropped() -> None:
    state = merge_all(make(INSERT, 1, "a", x=1), make(DELETE, 5, "a"))
    outcome = merge_delta(state, make(UPDATE, 4, "b", x=2))
    assert outcome.op is None and outcome.columns == ()
    assert not outcome.state.live and outcome.state.delete_hlc == 5


def test_delete_clears_only_older_columns() -> None:
    state = merge_all(make(INSERT, 1, "a", x=1), make(UPDATE, 3, "a", y=2))
    outcome = merge_delta(state, make(DELETE, 2, "b"))
    assert outcome.op == DELETE and outcome.columns == ()
    assert outcome.state.values() == {"y": 2} and outcome.state.live
    assert (outcome.state.delete_hlc, outcome.state.delete_client) == (2, "b")


def test_older_delete_after_a_newer_one_changes_nothing() -> None:
    state = merge_all(make(INSERT, 1, "a", x=1), make(DELETE, 3, "a"))
    outcome = merge_delta(state, make(DELETE, 2, "b"))
    assert outcome.op is None and outcome.state.delete_hlc == 3


def test_resurrection_keeps_only_the_new_writes_columns() -> None:
    state = merge_all(make(INSERT, 1, "a", x=1, y=1), make(DELETE, 2, "a"))
    outcome = merge_delta(state, make(UPDATE, 3, "b", z=3))
    assert outcome.op == INSERT  # the row became live again
    assert outcome.state.values() == {"z": 3}


def test_write_losing_every_column_returns_op_none() -> None:
    state = merge_all(make(INSERT, 5, "a", x=1, y=1))
    outcome = merge_delta(state, make(UPDATE, 3, "b", x=2, y=2))
    assert outcome.op is None and outcome.columns == ()
    assert outcome.state.values() == {"x": 1, "y": 1}


def test_partial_win_keeps_only_the_won_columns() -> None:
    state = merge_all(make(INSERT, 5, "a", x=1))
    outcome = merge_delta(state, make(UPDATE, 3, "b", x=2, y=2))
    assert outcome.op == UPDATE and outcome.columns == (ColumnDelta("y", 2),)
    assert outcome.state.values() == {"x": 1, "y": 2}


def test_per_column_not_per_delta() -> None:
    """Unlike whole-delta LWW (the reference), an older write wins columns no newer one wrote."""
    state = merge_all(
        make(UPDATE, 9, "a", title="new"), make(UPDATE, 2, "b", title="old", done=True)
    )
    assert state.values() == {"title": "new", "done": True}


def test_equal_hlc_higher_client_id_wins() -> None:
    w_a, w_b = make(UPDATE, 7, "client-a", x="from a"), make(UPDATE, 7, "client-b", x="from b")
    assert merge_all(w_a, w_b).values() == merge_all(w_b, w_a).values() == {"x": "from b"}


def test_client_ids_compare_in_javascript_utf16_order() -> None:
    # Python's code-point order says the astral client is higher; JavaScript's says U+E000 is.
    assert ASTRAL > PRIVATE and js_string_lt(ASTRAL, PRIVATE) and not js_string_lt(PRIVATE, ASTRAL)
    astral, private = make(UPDATE, 7, ASTRAL, x="astral"), make(UPDATE, 7, PRIVATE, x="private")
    assert merge_all(astral, private).values() == {"x": "private"}
    assert merge_all(private, astral).values() == {"x": "private"}
    assert stamp_gt(7, PRIVATE, 7, ASTRAL) and not stamp_gt(7, ASTRAL, 7, PRIVATE)
    # Same for deletes: the private-use client's delete at the same HLC beats the astral write.
    state = merge_all(make(UPDATE, 7, ASTRAL, x=1), make(DELETE, 7, PRIVATE))
    assert not state.live


def test_same_stamp_different_values_is_deterministic() -> None:
    one, two = make(UPDATE, 4, "a", x="one"), make(UPDATE, 4, "a", x="two")
    assert merge_all(one, two).values() == merge_all(two, one).values()


def test_row_state_encoding_round_trip() -> None:
    state = merge_all(
        make(INSERT, 1, "a", x={"k": [1, None]}, y="é"),
        make(DELETE, 2, ASTRAL),
        make(UPDATE, 3, "b", z=True),
    )
    assert decode_row_state(encode_row_state(state)) == state
    assert decode_row_state(encode_row_state(RowState())) == RowState()


@given(delta_lists)
def test_newest_stamp_is_the_greatest_stamp_of_the_row(deltas: list[RowDelta]) -> None:
    states: dict[str, RowState] = {}
    for d in deltas:
        states[d.row_id] = merge_delta(states.get(d.row_id), d).state
    for state in states.values():
        best = (state.delete_hlc, state.delete_client)
        for col in state.columns.values():
            if stamp_gt(col.hlc, col.client_id, *best):
                best = (col.hlc, col.client_id)
        assert state.newest_stamp() == best
