"""Planning a push: a pure fold over the row states a push transaction loaded.

Push (ARCHITECTURE.md §3): every delta is validated before anything is written
(:mod:`.prepare`); then, in one transaction under the gateway's lock, the store drops
already-accepted ``deltaId``s (forever) and loads the rows the batch touches, and
:func:`plan_push` merges each delta into row state by per-column LWW (core.merge) and decides
what to write: the *effective* change of each delta, appended with the next ingest cursor; the
row states that change, with their new positions; the columns seen for the first time. A row
where the pusher's write lost (wholly or in part), or that it pushed again, is re-announced at
a fresh cursor so the pusher re-reads the winning state. The store then writes the plan and
commits (plan, then commit, as the flush does).

With a ``guard`` (the pusher's :class:`~lakesync_platform.core.sync_rules.ClientView`, when
the sync rules check writes), each delta is judged on the row state it meets and the state it
would leave (:meth:`~lakesync_platform.core.sync_rules.ClientView.may_write`) inside the same
transaction, so no concurrent write slips between the check and the commit. A refused delta
changes nothing; its row is re-announced to the pusher (a row it does not exist as yet is
written as an empty tombstone, so that there is something to re-announce), and the rest of the
batch goes on.

A server-side append (connectors) is planned by :func:`plan_append`: the same merge, but only
the columns whose value differs from the row's are applied (a re-polled, unchanged record
appends nothing), and nothing is re-announced — there is no pusher to re-read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from ..core.delta import DELETE, INSERT, RowDelta
from ..core.merge import RowState, encode_row_state, merge_delta
from ..core.sync_rules import ClientView
from ..core.wal import LoadedRows, NewColumn, PushPlan, RowWrite, WalEntry, encode_columns
from .prepare import Prepared, estimate_bytes

__all__ = ["changed_part", "plan_append", "plan_push"]

_json_encode = msgspec.json.Encoder().encode


def plan_push(
    columns: Mapping[str, list[str]],
    loaded: LoadedRows,
    deltas: Sequence[RowDelta],
    prep: Prepared,
    now: int,
    guard: ClientView | None = None,
) -> PushPlan:
    """What a client's push writes, given what its transaction loaded (see the module docstring).

    ``columns`` are the gateway's known columns per table; ``prep`` the batch's precomputed
    parts (:func:`~.prepare.prepare`); ``guard`` the pusher's view when writes are checked. A
    write to a row nobody has takes a shortcut (its stored state is precomputed); the outcome
    equals merging every delta in order. Pure: ``loaded`` is not modified.
    """
    fresh_ids = set(loaded.fresh_ids)
    states = dict(loaded.states)
    cursor = loaded.counters.last_cursor
    keys = prep.keys
    entries: list[WalEntry] = []
    entries_json: list[str] = []
    positions: dict[str, int] = {}
    rows_of: dict[str, RowDelta] = {}
    # rows this push created whose state is still exactly one delta's (its index)
    created: dict[str, int] = {}
    bump: dict[str, None] = {}
    new_columns: list[NewColumn] = []
    known: dict[str, set[str]] | None = None
    duplicates = 0
    added_bytes = 0
    refused: list[int] = []
    for i, d in enumerate(deltas):
        key = keys[i]
        stamped_id = (d.hlc, d.delta_id)
        if stamped_id not in fresh_ids:
            duplicates += 1
            if key in states or key in created:
                bump[key] = None
                rows_of.setdefault(key, d)
            continue
        fresh_ids.discard(stamped_id)
        judge = guard if guard is not None and not guard.writes_unchecked(d.table) else None
        size = prep.sizes[i]
        if prep.new_row_json[i] is not None and key not in states and key not in created:
            if judge is not None and not judge.may_write(
                d.table, "insert", None, {c.column: c.value for c in d.columns}
            ):
                _refuse(i, key, d, states, rows_of, bump, refused)
                continue
            rows_of[key] = d
            # A write to a row nobody has: every column wins, the row is born with it.
            cursor += 1
            added_bytes += size
            entries.append(
                WalEntry(
                    cursor, d.delta_id, d.table, d.row_id, INSERT, d.client_id,
                    d.hlc, d.columns, now, size,
                )
            )  # fmt: skip
            entries_json.append(prep.columns_json[i])
            positions[key] = cursor
            created[key] = i
        else:
            if key in created:
                states[key] = merge_delta(None, deltas[created.pop(key)]).state
            before = states.get(key)
            outcome = merge_delta(before, d)
            if judge is not None and not _permitted(judge, d, before, outcome.state):
                _refuse(i, key, d, states, rows_of, bump, refused)
                continue
            rows_of[key] = d
            states[key] = outcome.state
            if outcome.op is not None:
                cursor += 1
                added_bytes += size
                entries.append(
                    WalEntry(
                        cursor, d.delta_id, d.table, d.row_id, outcome.op,
                        d.client_id, d.hlc, outcome.columns, now, size,
                    )
                )  # fmt: skip
                entries_json.append(
                    prep.columns_json[i]
                    if outcome.columns == d.columns
                    else encode_columns(outcome.columns)
                )
                positions[key] = cursor
            if outcome.op is None or (
                d.op != DELETE and len(outcome.columns) < len({c.column for c in d.columns})
            ):
                bump[key] = None
        if prep.may_add_columns[i]:
            if known is None:
                known = {tbl: set(cols) for tbl, cols in list(columns.items())}
            _note_new_columns(known, d, new_columns)
    for key in bump:
        cursor += 1
        positions[key] = cursor
    new_row_json = prep.new_row_json
    rows: list[RowWrite] = []
    for key, pos in positions.items():
        d = rows_of[key]
        index = created.get(key)
        born = new_row_json[index] if index is not None else None
        if born is not None:  # still exactly the write that created it: precomputed
            rows.append(RowWrite(key, d.table, d.row_id, born, True, pos))
        else:
            rows.append(_row_write(key, d, states[key], pos))
    return PushPlan(
        entries, entries_json, rows, list(bump), new_columns, duplicates, added_bytes, cursor,
        refused,
    )  # fmt: skip


def _permitted(guard: ClientView, d: RowDelta, before: RowState | None, after: RowState) -> bool:
    """Whether the pusher may take the row from ``before`` to ``after`` (the merged state).

    The operation is judged on the row, not on the delta's ``op``: a write that makes a row
    live is an insert, one that changes a live row an update, one that ends it a delete. A
    delta that leaves a row dead that was dead (a delete of an unknown row, a write that lost
    to a newer delete) needs the table to allow its kind of operation at all.
    """
    old = before.values() if before is not None and before.live else None
    if old is not None and after.live:
        return guard.may_update(d.table, old, {c.column for c in d.columns}, after.values)
    new = after.values() if after.live else None
    if new is not None:
        op = "update" if old is not None else "insert"
    elif old is not None:
        op = "delete"
    else:
        op = "delete" if d.op == DELETE else "insert"
    return guard.may_write(d.table, op, old, new)


def _refuse(
    i: int,
    key: str,
    d: RowDelta,
    states: dict[str, RowState],
    rows_of: dict[str, RowDelta],
    bump: dict[str, None],
    refused: list[int],
) -> None:
    """Record delta ``i`` as refused and re-announce its row to the pusher: the row as it is,
    or, if nobody has it, an empty tombstone (a ``DELETE`` for a pusher that holds it)."""
    refused.append(i)
    rows_of.setdefault(key, d)
    states.setdefault(key, RowState())
    bump[key] = None


def plan_append(
    columns: Mapping[str, list[str]],
    loaded: LoadedRows,
    deltas: Sequence[RowDelta],
    now: int,
) -> PushPlan:
    """What a server-side append writes: each delta's :func:`changed_part`, merged in order.

    Duplicates (already accepted ``(hlc, deltaId)`` pairs) and unchanged deltas append
    nothing; nothing is re-announced. Pure: ``loaded`` is not modified.
    """
    fresh_ids = set(loaded.fresh_ids)
    states = dict(loaded.states)
    cursor = loaded.counters.last_cursor
    entries: list[WalEntry] = []
    entries_json: list[str] = []
    positions: dict[str, int] = {}
    rows_of: dict[str, RowDelta] = {}
    new_columns: list[NewColumn] = []
    known = {tbl: set(cols) for tbl, cols in list(columns.items())}
    duplicates = 0
    added_bytes = 0
    for d in deltas:
        stamped_id = (d.hlc, d.delta_id)
        if stamped_id not in fresh_ids:
            duplicates += 1
            continue
        fresh_ids.discard(stamped_id)
        key = d.key
        change = changed_part(states.get(key), d)
        if change is None:
            continue
        _note_new_columns(known, change, new_columns)
        outcome = merge_delta(states.get(key), change)
        states[key] = outcome.state
        if outcome.op is None:
            continue
        cursor += 1
        size = estimate_bytes(change)
        added_bytes += size
        entries.append(
            WalEntry(
                cursor, d.delta_id, d.table, d.row_id, outcome.op, d.client_id, d.hlc,
                outcome.columns, now, size,
            )
        )  # fmt: skip
        entries_json.append(encode_columns(outcome.columns))
        positions[key] = cursor
        rows_of[key] = d
    rows = [_row_write(key, rows_of[key], states[key], pos) for key, pos in positions.items()]
    return PushPlan(entries, entries_json, rows, [], new_columns, duplicates, added_bytes, cursor)


def changed_part(state: RowState | None, d: RowDelta) -> RowDelta | None:
    """``d`` without the columns whose value the row already holds; ``None`` if nothing is left.

    A ``DELETE`` of a row that is not live changes nothing. Values compare by their JSON
    encoding (``1``, ``1.0`` and ``true`` differ); a ``null`` for a column a live row does not
    hold changes nothing either (the row reads ``null`` there already: a column a source grew
    does not rewrite every row it re-reads).
    """
    if d.op == DELETE:
        return d if state is not None and state.live else None
    if state is None or not state.columns:
        return d
    held = state.columns
    cols = tuple(
        c
        for c in d.columns
        if ((cur := held.get(c.column)) is None and (c.value is not None or not state.live))
        or (cur is not None and _json_encode(cur.value) != _json_encode(c.value))
    )
    if not cols:
        return None
    if len(cols) == len(d.columns):
        return d
    return RowDelta(d.op, d.table, d.row_id, d.client_id, cols, d.hlc, d.delta_id)


def _row_write(key: str, d: RowDelta, state: RowState, position: int) -> RowWrite:
    return RowWrite(key, d.table, d.row_id, encode_row_state(state).decode(), state.live, position)


def _note_new_columns(known: dict[str, set[str]], d: RowDelta, out: list[NewColumn]) -> None:
    """Append to ``out`` the columns of ``d`` not in ``known`` (and add them there)."""
    table_known = known.setdefault(d.table, set())
    for col in d.columns:
        if col.column not in table_known:
            table_known.add(col.column)
            out.append(NewColumn(d.table, col.column, len(table_known)))
