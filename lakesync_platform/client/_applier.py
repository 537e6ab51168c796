"""Apply remote rows to the local store by per-column last-writer-wins.

The rules (stamps ordered by ``(hlc, client_id)`` with
:func:`~lakesync_platform.core.merge.stamp_gt`):

* an upsert sets each remote column whose stamp is newer than the local column's stamp (or the
  local column is absent) and newer than the row's local delete stamp (an unpushed local delete
  is not undone by an older server state);
* a *full* upsert (stamped pull) carries every live column of the row: a local column it lacks
  is kept only if its stamp is newer than the row's remote delete stamp (an unpushed local
  write); otherwise it was cleared on the server and is cleared here;
* an *unstamped* column (a plain delta, or a row sent over the WebSocket, whose columns all
  carry the row's newest stamp) also replaces a local column stamped the same;
* a ``DELETE`` (the row was deleted or left this client's view) drops every local column not
  newer than its stamp; unpushed newer local writes keep the row alive locally. It is not
  recorded as a local delete: a row re-entering the view arrives again, possibly with older
  stamps.

:func:`plan_row` is the pure rule; :func:`apply_rows` runs it for a page and writes the user
tables and the stamps (call it inside a transaction). :func:`apply_block` applies a checkpoint's
block of stamped rows: rows the client holds go through the same rule, rows new to it (all of
them, on a first sync) are inserted in bulk — for a new row the rule takes every column as sent,
so the bulk insert is the rule's result without running it row by row. Tables the client has
not registered, and columns its schema lacks, are skipped (logged) rather than failing the
page — the reference client gets stuck re-pulling such a page forever (PROTOCOL.md §12).
"""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.delta import DELETE, INSERT
from ..core.merge import stamp_gt
from ..core.stamped import StampedBlock, StampedColumns
from ._db import LocalDB
from ._schemas import SchemaRegistry, to_sql
from ._stamps import (
    NO_STAMP,
    RowStamps,
    Stamp,
    encode_full_stamps,
    encode_new_stamps,
    has_stamps,
    load_stamps,
    save_new_stamps,
    save_stamps,
)
from ._wire import RemoteColumn, RemoteRow

__all__ = ["RowPlan", "apply_block", "apply_rows", "block_row", "forget_rows", "plan_row"]

log = logging.getLogger(__name__)


def _newer(a: Stamp, b: Stamp) -> bool:
    return stamp_gt(a[0], a[1], b[0], b[1])


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What applying one remote row does: the new stamps and the column values to write.

    ``values`` maps changed columns to their new JSON value (``None`` clears the column).
    """

    stamps: RowStamps
    values: dict[str, Any]


def plan_row(local: RowStamps, row: RemoteRow, known: Container[str]) -> RowPlan:
    """Merge ``row`` into a row's ``local`` stamps; ``known`` are the local schema's columns."""
    row_stamp = (row.hlc, row.client_id)
    if row.op == DELETE:
        keep = {c: s for c, s in local.columns.items() if _newer(s, row_stamp)}
        dropped = dict.fromkeys((c for c in local.columns if c not in keep), None)
        return RowPlan(RowStamps(keep, local.delete), dropped)
    values: dict[str, Any] = {}
    if not local.columns and local.delete == NO_STAMP:  # a row new to this client
        fresh: dict[str, Stamp] = {}
        for col in row.columns:
            if col.column in known:
                fresh[col.column] = row_stamp if col.hlc is None else (col.hlc, col.client_id or "")
                values[col.column] = col.value
        return RowPlan(RowStamps(fresh, NO_STAMP), values)
    columns = dict(local.columns)
    for col in row.columns:
        if col.column not in known:
            continue
        stamp = row_stamp if col.hlc is None else (col.hlc, col.client_id or "")
        if not _newer(stamp, local.delete):
            continue
        current = columns.get(col.column)
        # An unstamped column carries the row's newest stamp, which a column's own stamp never
        # exceeds: it replaces a local value stamped the same (an earlier delivery of the row).
        if current is None or _newer(stamp, current) or (col.hlc is None and stamp == current):
            columns[col.column] = stamp
            values[col.column] = col.value
    if row.delete_hlc is not None:  # a full row: columns it lacks were cleared on the server
        present = {col.column for col in row.columns}
        remote_delete = (row.delete_hlc, row.delete_client_id)
        for name, stamp in local.columns.items():
            if name not in present and not _newer(stamp, remote_delete):
                del columns[name]
                values[name] = None
    return RowPlan(RowStamps(columns, local.delete), values)


@dataclass(slots=True)
class _RowWrite:
    """The net effect of a page on one local row."""

    live_before: bool
    reset: bool = False
    values: dict[str, Any] = field(default_factory=dict)


def _write_table(
    db: LocalDB,
    table: str,
    types: Mapping[str, str],
    writes: Mapping[str, _RowWrite],
    stamps: Mapping[str, RowStamps],
) -> None:
    quoted = f'"{table}"'
    deletes = [
        (row_id,)
        for row_id, w in writes.items()
        if w.reset or (w.live_before and not stamps[row_id].live)
    ]
    if deletes:
        db.exec_many(f"DELETE FROM {quoted} WHERE _rowId = ?", deletes)
    groups: dict[tuple[str, ...], list[list[Any]]] = {}
    for row_id, w in writes.items():
        if not stamps[row_id].live or not w.values:
            continue
        names = tuple(w.values)
        groups.setdefault(names, []).append(
            [row_id, *(to_sql(w.values[n], types[n]) for n in names)]
        )
    for names, rows in groups.items():
        cols = "".join(f', "{n}"' for n in names)
        marks = ", ?" * len(names)
        updates = ", ".join(f'"{n}" = excluded."{n}"' for n in names)
        db.exec_many(
            f"INSERT INTO {quoted} (_rowId{cols}) VALUES (?{marks}) "
            f"ON CONFLICT (_rowId) DO UPDATE SET {updates}",
            rows,
        )


def apply_rows(db: LocalDB, registry: SchemaRegistry, rows: Sequence[RemoteRow]) -> set[str]:
    """Apply a page of remote rows; returns the user tables that changed.

    Must run inside :meth:`LocalDB.transaction` (the caller also moves the cursor there).
    """
    by_table: dict[str, list[RemoteRow]] = {}
    for row in rows:
        by_table.setdefault(row.table, []).append(row)
    changed: set[str] = set()
    for table, table_rows in by_table.items():
        types = registry.types(table)
        if types is None:
            log.warning("skipping %d remote rows of unregistered table %r", len(table_rows), table)
            continue
        stamps = load_stamps(db, table, (r.row_id for r in table_rows))
        writes: dict[str, _RowWrite] = {}
        touched: dict[str, RowStamps] = {}
        for row in table_rows:
            local = stamps.get(row.row_id) or RowStamps()
            write = writes.get(row.row_id)
            if write is None:
                write = writes[row.row_id] = _RowWrite(local.live)
            plan = plan_row(local, row, types)
            if not plan.values and plan.stamps.columns == local.columns:
                continue
            if local.live and not plan.stamps.live:
                write.reset, write.values = True, {}
            else:
                write.values.update(plan.values)
            stamps[row.row_id] = touched[row.row_id] = plan.stamps
        if touched:
            _write_table(db, table, types, {k: writes[k] for k in touched}, stamps)
            save_stamps(db, table, touched)
            changed.add(table)
    return changed


def block_row(block: StampedBlock, i: int) -> RemoteRow:
    """Row ``i`` of a checkpoint block as a full stamped row."""
    return RemoteRow(
        INSERT,
        block.table,
        block.row_ids[i],
        block.hlcs[i],
        block.client_ids[i],
        tuple(
            RemoteColumn(c.name, c.values[i], c.hlcs[i], c.client_ids[i])
            for c in block.columns
            if c.hlcs[i]
        ),
        block.delete_hlcs[i],
        block.delete_client_ids[i],
    )


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Types SQLite binds as they are (``bool`` as 0/1): a column of only these needs no
:func:`to_sql` per value."""


def _bound(column: StampedColumns, col_type: str) -> list[Any]:
    """A block column's values as SQLite binds them (:func:`to_sql`, skipped for a column of
    plain values, which the set of their types tells in one pass in C)."""
    values = column.values
    if col_type == "json" or not set(map(type, values)) <= _PLAIN:
        return [to_sql(v, col_type) for v in values]
    return values


def _new_row_stamps(columns: Sequence[StampedColumns], rows: int) -> list[bytes]:
    """Each new row's stamps blob: its column stamps ``{name: (hlc, client)}`` (columns it
    lacks left out) and no local delete."""
    names = [c.name for c in columns]
    if all(0 not in c.hlcs for c in columns):  # every row holds every column
        hlcs = [c.hlcs for c in columns]
        return encode_full_stamps(names, hlcs, [c.client_ids for c in columns])
    pairs = [list(zip(c.hlcs, c.client_ids, strict=True)) for c in columns]
    stamps: list[dict[str, Stamp]] = [{} for _ in range(rows)]
    for name, column in zip(names, pairs, strict=True):
        for cells, stamp in zip(stamps, column, strict=True):
            if stamp[0]:
                cells[name] = stamp
    return encode_new_stamps(stamps)


def apply_block(db: LocalDB, registry: SchemaRegistry, block: StampedBlock) -> set[str]:
    """Apply a checkpoint block; returns the user tables that changed (inside a transaction).

    Rows the client holds (it has their stamps) go through :func:`apply_rows`; the others are
    new to it and inserted in bulk with their column stamps (and no local delete stamp), which
    is what :func:`plan_row` makes of a new row.
    """
    types = registry.types(block.table)
    if types is None:
        log.warning("skipping %d checkpoint rows of unregistered table %r", len(block), block.table)
        return set()
    local = load_stamps(db, block.table, block.row_ids) if has_stamps(db, block.table) else {}
    changed = set()
    if local:
        held = [block_row(block, i) for i, rid in enumerate(block.row_ids) if rid in local]
        changed |= apply_rows(db, registry, held)
        block = block.subset([i for i, rid in enumerate(block.row_ids) if rid not in local])
    columns = [c for c in block.columns if c.name in types]
    if not len(block) or not columns:
        return changed
    if len(columns) < len(block.columns):
        # A row with none of the client's columns stays absent (as plan_row leaves it); a live
        # row holds one of the block's columns, so this is needed only when some are unknown.
        stamps_by_row = zip(*(c.hlcs for c in columns), strict=True)
        present = [i for i, hlcs in enumerate(stamps_by_row) if any(hlcs)]
        if len(present) < len(block):
            block = block.subset(present)
            columns = [c for c in block.columns if c.name in types]
    bound = [_bound(c, types[c.name]) for c in columns]
    names = "".join(f', "{c.name}"' for c in columns)
    updates = ", ".join(f'"{c.name}" = excluded."{c.name}"' for c in columns)
    db.exec_many(
        f'INSERT INTO "{block.table}" (_rowId{names}) VALUES (?{", ?" * len(columns)}) '
        f"ON CONFLICT (_rowId) DO UPDATE SET {updates}",
        list(zip(block.row_ids, *bound, strict=True)),
    )
    save_new_stamps(db, block.table, block.row_ids, _new_row_stamps(columns, len(block)))
    changed.add(block.table)
    return changed


def forget_rows(db: LocalDB, registry: SchemaRegistry, rows: Sequence[tuple[str, str]]) -> set[str]:
    """Drop ``(table, row_id)`` rows and their stamps, local deletes included (inside a
    transaction); returns the user tables that changed.

    This reverts writes the gateway refused: the gateway re-announces each such row, so the next
    pull brings the server's state of it as to a client that never held it (or nothing, if the
    row is outside the client's view)."""
    by_table: dict[str, list[tuple[str]]] = {}
    for table, row_id in rows:
        by_table.setdefault(table, []).append((row_id,))
    changed = set()
    for table, ids in by_table.items():
        if registry.types(table) is not None and db.exec_many(
            f'DELETE FROM "{table}" WHERE _rowId = ?', ids
        ):
            changed.add(table)
        db.exec_many(
            "DELETE FROM _lakesync_stamps WHERE tbl = ? AND row_id = ?",
            [(table, row_id) for (row_id,) in ids],
        )
    return changed
