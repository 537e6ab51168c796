"""Cutting a pull page from row state.

Pull (ARCHITECTURE.md §4): pages are cut from **row state** in cursor order — every row whose
last change is after ``since`` appears once, whole, as it is now (:mod:`.delivery` says how).
That is what makes any cursor safe: a client that re-pulls an old cursor, ignores ``hasMore``,
or restarts from 0 receives current rows, never a stale value. Sync rules are evaluated on the
row as it is now, with the caller's claims: a row in the view is sent whole, a row deleted or
out of the view is sent as a ``DELETE`` only to a client that may hold it (tracked per client
when sync rules filter the table). A page is never empty while ``has_more`` is true, and with
``has_more`` its cursor is the position of its last row.

A page is cut in two steps, so that the broadcast feed (:mod:`.feed_cut`) can take the first
once for every client that shares a view and a starting position:

1. :func:`view_rows` — what the *view* (rules and claims) makes of the rows after the start:
   each row is sent whole (:data:`SEND`), sent as a ``DELETE`` to everyone (:data:`GONE`: a
   deleted row of a table the view shows whole), sent as a ``DELETE`` only to a client that
   may hold it (:data:`MAYBE`: deleted or outside the view, in a filtered table or one the
   view cannot show at all — a client holds such a row only if it wrote it, and the write was
   refused). Rows are read until every client's page has ended.
2. :func:`page_rows` — what one *client* receives: its records decide the :data:`MAYBE` rows,
   and the page ends where its deltas would pass the limit.

The push response's ``serverHlc`` is the cursor the client last pulled from: the TS client
sets its cursor to it, and it must never jump past entries the client has not received.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ..core.sync_rules import ClientView
from ..core.wal import RowReader, RowRecord, StoredRow
from .config import GatewayConfig
from .delivery import PulledDelta, StampedInsert, out_of_view_delete, stamped_insert, ts_row_deltas

__all__ = [
    "GONE",
    "MAYBE",
    "SEND",
    "PageCut",
    "ViewRows",
    "cut_page",
    "encode_row",
    "may_hold",
    "page_rows",
    "view_rows",
]

_SCAN_CHUNK = 2000

SEND: Final = 0
"""A live row in the view: sent whole."""
GONE: Final = 1
"""A deleted row of a table the view shows whole: a ``DELETE`` to every client."""
MAYBE: Final = 2
"""A row deleted or outside the view, in a table the rules filter: a ``DELETE`` to a client
that may hold it (:func:`may_hold`), nothing to the others."""

Delivery = PulledDelta | StampedInsert


@dataclass(frozen=True, slots=True)
class PageCut:
    """A page as cut: its deltas, the position of its last row, and whether more follow.

    ``delivered`` lists the rows of filtered tables the page sends, with whether the client
    holds them once it applied the page (``False``: the page deletes them); ``read`` the
    records the page's deletes were decided on (saved only if still unchanged, see
    :meth:`~lakesync_platform.core.wal.WalStore.save_client_records`).
    """

    deltas: list[Delivery]
    last_position: int
    has_more: bool
    delivered: list[tuple[str, bool]]
    read: dict[str, RowRecord] = field(default_factory=dict)


@dataclass(slots=True)
class ViewRows:
    """The rows after a start position as one view sees them, up to where every client's page
    ends (step 1 of a page).

    ``rows[i]`` is a row the view does not skip, ``kinds[i]`` what it is (:data:`SEND`,
    :data:`GONE`, :data:`MAYBE`), ``tracked[i]`` whether its table is filtered (a client's
    delivery of it is recorded), ``before[i]`` the position of the row read just before it
    (where a page that ends before it ends). ``end`` is the position of the last row read, the
    end of a page that takes every listed row.
    """

    rows: list[StoredRow] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    tracked: list[bool] = field(default_factory=list)
    before: list[int] = field(default_factory=list)
    end: int = 0

    def maybe_keys(self) -> list[str]:
        """The keys of the :data:`MAYBE` rows: the records a client's page depends on."""
        return [r.row_key for r, kind in zip(self.rows, self.kinds, strict=True) if kind == MAYBE]


def may_hold(record: RowRecord | None, since_position: int) -> bool:
    """Whether a client may hold a row, by its record: it was delivered the row whole, or a
    page that deleted it is not confirmed yet (the client pulls from before that page)."""
    return record is not None and (record.held or record.at_cursor > since_position)


def view_rows(
    scan: Callable[[int, int], list[StoredRow]],
    cfg: GatewayConfig,
    view: ClientView,
    *,
    start: int,
    limit: int,
    per_row: int,
    read_ahead: int = _SCAN_CHUNK,
) -> ViewRows:
    """What ``view`` makes of the rows ``scan`` reads after position ``start`` — up to the row
    at which every page of at most ``limit`` deltas (``per_row`` for a row sent whole) ends.

    Without filtering rules exactly one page of rows is read (plus one, to see if more exist);
    with them rows are read ``read_ahead`` at a time, since many may be invisible (a reader
    whose rows are costly to read asks for fewer).
    """
    out = ViewRows(end=start)
    chunk_size = (limit // per_row + 1) if not cfg.has_filters else read_ahead
    unfiltered: dict[str, bool] = {}  # per table: every row visible
    hidden: set[str] = set()  # tables no bucket of the view can show
    certain = 0  # deltas every client's page holds so far (the MAYBE rows left out)
    after = start
    while True:
        chunk = scan(after, chunk_size)
        if not chunk:
            return out
        for row in chunk:
            table = row.table
            if table not in unfiltered:
                unfiltered[table] = view.table_unfiltered(table)
                if not unfiltered[table] and not view.table_visible(table):
                    hidden.add(table)
            live = bool(row.state.columns)
            if unfiltered[table]:
                kind, need = (SEND, per_row) if live else (GONE, 1)
            elif table in hidden:
                # Only a client that wrote the row holds it (its write was refused, as
                # every write to a table outside its view is): it is sent the DELETE.
                kind, need = MAYBE, 0
            elif live and view.row_visible(table, row.state.values()):
                kind, need = SEND, per_row
            else:
                kind, need = MAYBE, 0
            out.rows.append(row)
            out.kinds.append(kind)
            out.tracked.append(not unfiltered[table])
            out.before.append(out.end)
            out.end = row.position
            if need:
                if certain and certain + need > limit:
                    # Every client's page holds at least ``certain`` deltas before this row:
                    # each ends at it or before it (page_rows), whatever its records.
                    return out
                certain += need
        if len(chunk) < chunk_size:
            return out
        after = chunk[-1].position


def page_rows(
    rows: ViewRows,
    records: Mapping[str, RowRecord],
    *,
    since_position: int,
    limit: int,
    per_row: int,
) -> tuple[list[int], int, bool]:
    """One client's page of ``rows`` (step 2): the indices of the rows it is sent, the
    position its page ends at, and whether more follow. ``records``: what the client holds of
    the :data:`MAYBE` rows; ``since_position``: where it last pulled from under this view."""
    picked: list[int] = []
    count = 0
    for i, kind in enumerate(rows.kinds):
        if kind == MAYBE:
            if not may_hold(records.get(rows.rows[i].row_key), since_position):
                continue
            need = 1
        else:
            need = per_row if kind == SEND else 1
        if count and count + need > limit:
            return picked, rows.before[i], True
        picked.append(i)
        count += need
    return picked, rows.end, False


def encode_row(row: StoredRow, kind: int, cfg: GatewayConfig, *, stamped: bool) -> list[Delivery]:
    """The deltas that deliver ``row`` as ``kind``: the row whole in the client's encoding
    (:data:`SEND`), else its ``DELETE``."""
    if kind != SEND:
        return [out_of_view_delete(row)]
    names, name_set = cfg.delivered_columns(row.table)
    if stamped:
        return [stamped_insert(row, names, name_set)]
    return list(ts_row_deltas(row, names, name_set))


def cut_page(
    rows: RowReader,
    cfg: GatewayConfig,
    view: ClientView,
    *,
    start: int,
    since_position: int,
    limit: int,
    stamped: bool,
    read_ahead: int = _SCAN_CHUNK,
) -> PageCut:
    """The rows after position ``start`` a client with ``view`` receives, at most ``limit``
    deltas (a row is never split). ``since_position``: the position the client last pulled
    from under its current view (rows it confirmed leaving before that are not re-sent).
    ``read_ahead``: rows read per scan when sync rules filter."""
    per_row = 1 if stamped else 2
    seen = view_rows(
        rows.scan, cfg, view, start=start, limit=limit, per_row=per_row, read_ahead=read_ahead
    )
    keys = seen.maybe_keys()
    records = rows.client_records(keys) if keys else {}
    picked, last, more = page_rows(
        seen, records, since_position=since_position, limit=limit, per_row=per_row
    )
    deltas: list[Delivery] = []
    delivered: list[tuple[str, bool]] = []
    read: dict[str, RowRecord] = {}
    for i in picked:
        row, kind = seen.rows[i], seen.kinds[i]
        deltas.extend(encode_row(row, kind, cfg, stamped=stamped))
        if seen.tracked[i]:
            delivered.append((row.row_key, kind == SEND))
        if kind == MAYBE:
            read[row.row_key] = records[row.row_key]
    return PageCut(deltas, last, more, delivered, read)
