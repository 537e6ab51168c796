"""Cutting a pull page from row state.

Pull (ARCHITECTURE.md §4): pages are cut from **row state** in cursor order — every row whose
last change is after ``since`` appears once, whole, as it is now (:mod:`.delivery` says how).
That is what makes any cursor safe: a client that re-pulls an old cursor, ignores ``hasMore``,
or restarts from 0 receives current rows, never a stale value. Sync rules are evaluated on the
row as it is now, with the caller's claims: a row in the view is sent whole, a row deleted or
out of the view is sent as a ``DELETE`` only to a client that may hold it (tracked per client
when sync rules filter the table). A page is never empty while ``has_more`` is true, and with
``has_more`` its cursor is the position of its last row.

The push response's ``serverHlc`` is the cursor the client last pulled from: the TS client
sets its cursor to it, and it must never jump past entries the client has not received.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.sync_rules import ClientView
from ..core.wal import RowReader
from .config import GatewayConfig
from .delivery import PulledDelta, StampedInsert, out_of_view_delete, stamped_insert, ts_row_deltas

__all__ = ["PageCut", "cut_page"]

_SCAN_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class PageCut:
    """A page as cut: its deltas, the position of its last row, and whether more follow.

    ``delivered`` lists the rows of filtered tables the page sends, with whether the client
    holds them once it applied the page (``False``: the page deletes them).
    """

    deltas: list[PulledDelta | StampedInsert]
    last_position: int
    has_more: bool
    delivered: list[tuple[str, bool]]


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
    ``read_ahead``: rows read per scan when sync rules filter (a reader whose rows are costly
    to read asks for fewer)."""
    out: list[PulledDelta | StampedInsert] = []
    delivered: list[tuple[str, bool]] = []
    last_pos = start
    has_more = False
    per_row = 1 if stamped else 2
    # Unfiltered views need exactly the rows of one page (plus one to see if more exist);
    # filtered views read ahead, since many rows may be invisible.
    chunk_size = (limit // per_row + 1) if not cfg.has_filters else read_ahead
    unfiltered: dict[str, bool] = {}  # per table: every row visible
    hidden: set[str] = set()  # tables no bucket of the view can show
    after = start
    while True:
        chunk = rows.scan(after, chunk_size)
        if not chunk:
            break
        tracked = (
            [r.row_key for r in chunk if not view.table_unfiltered(r.table)]
            if cfg.has_filters
            else []
        )
        records = rows.client_records(tracked) if tracked else {}
        for row in chunk:
            table = row.table
            if table not in unfiltered:
                unfiltered[table] = view.table_unfiltered(table)
                if not unfiltered[table] and not view.table_visible(table):
                    hidden.add(table)
            if table in hidden:
                last_pos = row.position
                continue
            live = bool(row.state.columns)
            filtered = not unfiltered[table]
            visible = (live and view.row_visible(table, row.state.values())) if filtered else live
            if not visible and filtered:
                rec = records.get(row.row_key)
                may_hold = rec is not None and (rec.held or rec.at_cursor > since_position)
                if not may_hold:
                    last_pos = row.position
                    continue
            need = per_row if visible else 1
            if out and len(out) + need > limit:
                has_more = True
                break
            if not visible:
                out.append(out_of_view_delete(row))
            else:
                names, name_set = cfg.delivered_columns(table)
                if stamped:
                    out.append(stamped_insert(row, names, name_set))
                else:
                    out.extend(ts_row_deltas(row, names, name_set))
            if filtered:
                delivered.append((row.row_key, visible))
            last_pos = row.position
        if has_more or len(chunk) < chunk_size:
            break
        after = chunk[-1].position
    return PageCut(out, last_pos, has_more, delivered)
