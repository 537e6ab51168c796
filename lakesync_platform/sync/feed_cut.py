"""The broadcast feed's pages: every session's page cut from one read of the rows.

Each session wants the page :meth:`~.service.SyncService.pull` would cut for its client from
its feed cursor with its claims (``feed=True``) — and gets exactly that page, with the same
delivery records kept, for the page is cut by the same two steps (:mod:`.pull`). What is
shared between the sessions is everything that does not depend on the client:

* the rows after a position are read once for every session that starts there (after a
  commit, nearly all sessions are at the same position);
* a view — the rules compiled against the claims they read — is built once per distinct set
  of those claims (:meth:`~.config.GatewayConfig.view_key`: the tabs and devices of one user,
  every client of a bucket without claim filters), and step 1 (:func:`~.pull.view_rows`)
  runs once per view and starting position;
* only the rows a view hides (:data:`~.pull.MAYBE`) depend on the client: the records of
  every client that may be sent such a row are read in one call per set of rows, and a client
  holding none of them gets the view's common page without a step of its own;
* a row's deltas are built once, and sessions sent the same rows at the same cursor share
  one :class:`FeedPage` (and so, in :mod:`.feed`, its encoded frames);
* the records the pages set are merged per client and saved in one call, before any page is
  handed out (a crash between the two could otherwise lose the record of a row sent); the
  record of a row a page deletes is saved only if it is still the one the delete was decided
  on, as a pull saves it (a push marking the row held meanwhile stays).

So a pass costs one read of the changed rows, one evaluation of each row per view, and per
session a dictionary look-up or two — plus a step of its own only for a session whose
client holds a row its view hides. Two pages of one client in one pass (two sessions at
different cursors) set a row's record to the union of what they say: held if either sent it
whole, unconfirmed up to the later page.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core.sync_rules import Claims
from ..core.wal import FeedReader, RowRecord, StoredRow
from .config import GatewayConfig, ViewKey
from .cursors import MAX_CURSOR, compose_cursor, split_cursor
from .pull import SEND, Delivery, ViewRows, encode_row, page_rows, view_rows

__all__ = ["FeedCut", "FeedPage", "FeedWant", "cut_feed_pages"]

log = logging.getLogger(__name__)

_PER_ROW = 2
"""Deltas of a row sent whole: the feed speaks the TS client's encoding (a pair)."""


class FeedWant(NamedTuple):
    """A session's want: its client, its feed cursor and its claims (a tuple: a pass builds
    one per session, and a frozen dataclass takes three times as long to build)."""

    client_id: str
    cursor: int
    claims: Claims


@dataclass(frozen=True, slots=True, eq=False)
class FeedPage:
    """A broadcast page: each row's deltas (shared between the pages that send the row), the
    cursor the session resumes from, and whether more follow."""

    rows: tuple[tuple[Delivery, ...], ...]
    server_hlc: int
    has_more: bool

    @property
    def wire(self) -> list[Delivery]:
        """The page's deltas, as :attr:`~.delivery.PullPage.wire`."""
        return [d for row in self.rows for d in row]


@dataclass(frozen=True, slots=True)
class FeedCut:
    """Each want's page (an exception where its page could not be cut), the records the pages
    set, ``{client_id: {row_key: record}}``, to be saved before any page is sent, and the
    records the pages' deletes were decided on (``read``: saved only if still unchanged)."""

    pages: list[FeedPage | Exception]
    records: dict[str, dict[str, RowRecord]]
    read: dict[str, dict[str, RowRecord]]


class _Rows:
    """The rows after one position, read once for every view that starts there."""

    def __init__(self, reader: FeedReader, start: int) -> None:
        self._reader = reader
        self._rows: list[StoredRow] = []
        self._positions: list[int] = []
        self._last = start
        self._exhausted = False

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after ``after`` (at or past the start), ``limit`` at most."""
        i = bisect_right(self._positions, after)
        missing = i + limit - len(self._rows)
        if missing > 0 and not self._exhausted:
            more = self._reader.scan(self._last, missing)
            self._exhausted = len(more) < missing
            if more:
                self._rows += more
                self._positions += [r.position for r in more]
                self._last = more[-1].position
        return self._rows[i : i + limit]


_Cut = tuple[FeedPage, tuple[int, ...]]
"""A page, and which of its view's rows it sends that the client's records must note (the
rows of filtered tables)."""


@dataclass(eq=False)
class _View:
    """The sessions of one view starting at one position, and what they share."""

    start: int
    key: ViewKey
    claims: Claims
    wants: list[int] = field(default_factory=list)
    seen: ViewRows | None = None
    maybe: tuple[str, ...] = ()
    """The keys of the rows the view hides: what a client's page depends on."""
    held: dict[str, dict[str, RowRecord]] = field(default_factory=dict)
    """What the view's clients hold of those rows, by client id."""
    pages: dict[tuple[int, tuple[int, ...], int, bool], _Cut] = field(default_factory=dict)
    common: dict[int, _Cut] = field(default_factory=dict)
    """By view tag: the page of a client that holds none of the hidden rows."""


class _Cutter:
    """One cut of many wants' pages (see the module docstring)."""

    def __init__(self, reader: FeedReader, cfg: GatewayConfig, limit: int) -> None:
        self.reader = reader
        self.cfg = cfg
        self.limit = limit
        self.scans: dict[int, _Rows] = {}
        self.deltas: dict[tuple[str, int, int], tuple[Delivery, ...]] = {}

    def group(self, wants: Sequence[FeedWant]) -> tuple[list[_View], list[int], list[int]]:
        """The views of ``wants``; each want's view (index) and view tag."""
        cfg = self.cfg
        views: dict[tuple[int, ViewKey], int] = {}
        groups: list[_View] = []
        of: list[int] = []
        tags: list[int] = []
        filters = cfg.has_filters
        key: ViewKey = None  # without filtering rules: one view, tag 0
        tag = 0
        for i, want in enumerate(wants):
            claims = want.claims
            if filters:
                key = cfg.view_key(claims)
                tag = cfg.view_tag(claims, key)
            since = want.cursor if 0 <= want.cursor <= MAX_CURSOR else 0
            since_tag, since_pos = split_cursor(since)
            start = since_pos if since_tag == tag else 0  # another view: start it over
            g = views.get((start, key))
            if g is None:
                g = views[(start, key)] = len(groups)
                groups.append(_View(start, key, claims))
            groups[g].wants.append(i)
            of.append(g)
            tags.append(tag)
        return groups, of, tags

    def see(self, view: _View) -> None:
        """Step 1 for ``view``: what it makes of the rows after its start."""
        rows = self.scans.get(view.start)
        if rows is None:
            rows = self.scans[view.start] = _Rows(self.reader, view.start)
        view.seen = view_rows(
            rows.scan,
            self.cfg,
            self.cfg.client_view(view.claims, view.key),
            start=view.start,
            limit=self.limit,
            per_row=_PER_ROW,
        )
        view.maybe = tuple(view.seen.maybe_keys())

    def page(self, view: _View, tag: int, want: FeedWant) -> _Cut:
        """Step 2 for one client of ``view``: its page (shared with every client of the view
        sent the same rows at the same cursor) and the indices of the rows sent."""
        seen = view.seen
        assert seen is not None
        records = view.held.get(want.client_id)
        if not records:  # the view's common page: it depends on the tag alone
            common = view.common.get(tag)
            if common is None:
                common = view.common[tag] = self._page(view, tag, {}, 0)
            return common
        since = want.cursor if 0 <= want.cursor <= MAX_CURSOR else 0
        return self._page(view, tag, records, split_cursor(since)[1])

    def _page(
        self, view: _View, tag: int, records: dict[str, RowRecord], since_position: int
    ) -> _Cut:
        seen = view.seen
        assert seen is not None
        picked, last, more = page_rows(
            seen, records, since_position=since_position, limit=self.limit, per_row=_PER_ROW
        )
        signature = (tag, tuple(picked), last, more)
        cut = view.pages.get(signature)
        if cut is None:
            rows = tuple(self.row_deltas(seen.rows[i], seen.kinds[i]) for i in picked)
            page = FeedPage(rows, compose_cursor(tag, last), more)
            cut = view.pages[signature] = (page, tuple(i for i in picked if seen.tracked[i]))
        return cut

    def row_deltas(self, row: StoredRow, kind: int) -> tuple[Delivery, ...]:
        """The deltas that deliver ``row`` as ``kind``, built once per cut."""
        key = (row.row_key, row.position, kind)
        found = self.deltas.get(key)
        if found is None:
            found = self.deltas[key] = tuple(encode_row(row, kind, self.cfg, stamped=False))
        return found


def cut_feed_pages(
    reader: FeedReader, cfg: GatewayConfig, wants: Sequence[FeedWant], limit: int
) -> FeedCut:
    """The broadcast page of each want, at most ``limit`` deltas, cut from ``reader`` under
    ``cfg``; a failure to cut a view's pages fails that view's wants only (its exception stands
    in for their pages), a failure to read records fails the cut."""
    cutter = _Cutter(reader, cfg, limit)
    views, of, tags = cutter.group(wants)
    failed: dict[int, Exception] = {}
    for g, view in enumerate(views):
        try:
            cutter.see(view)
        except Exception as exc:
            log.exception("cutting the broadcast pages of a view failed")
            failed[g] = exc
    # The records of the clients that may be sent a row their view hides: one read per set
    # of such rows (after a commit: one set, the changed rows, for every view that hides them).
    asks: dict[tuple[str, ...], set[str]] = {}
    for g, view in enumerate(views):
        if view.maybe and g not in failed:
            asks.setdefault(view.maybe, set()).update(wants[i].client_id for i in view.wants)
    held = {keys: reader.delivery_records(sorted(ids), keys) for keys, ids in asks.items()}
    held_by: dict[str, dict[str, RowRecord]] = {}  # every record read, by client
    for found in held.values():
        for client_id, recs in found.items():
            mine = held_by.setdefault(client_id, {})
            for key, rec in recs.items():
                mine.setdefault(key, rec)
    for view in views:
        if view.maybe:
            view.held = held.get(view.maybe, {})
    pages: list[FeedPage | Exception] = []
    records: dict[str, dict[str, RowRecord]] = {}
    for i, want in enumerate(wants):
        g = of[i]
        if g in failed:
            pages.append(failed[g])
            continue
        view = views[g]
        try:
            page, tracked = cutter.page(view, tags[i], want)
        except Exception as exc:
            log.exception("cutting the broadcast page of %s failed", want.client_id)
            pages.append(exc)
            continue
        pages.append(page)
        if tracked:
            assert view.seen is not None
            _note(records.setdefault(want.client_id, {}), view.seen, tracked, page)
    # A delete was decided on the record read: saved only if no one changed it meanwhile (a
    # push marking the row held). A row another page sent whole is saved held, whatever.
    read: dict[str, dict[str, RowRecord]] = {}
    for client_id, noted in records.items():
        for key, rec in noted.items():
            if not rec.held:
                was = held_by[client_id][key]
                read.setdefault(client_id, {})[key] = was
    return FeedCut(pages, records, read)


def _note(
    into: dict[str, RowRecord], seen: ViewRows, picked: tuple[int, ...], page: FeedPage
) -> None:
    """Record that a client was sent the rows ``picked`` of ``seen`` by ``page`` (merged with
    what another page of the same cut recorded: held if either sent the row whole, and
    unconfirmed up to the later page)."""
    at = split_cursor(page.server_hlc)[1]
    for i in picked:
        key, held = seen.rows[i].row_key, seen.kinds[i] == SEND
        before = into.get(key)
        if before is not None:
            held, at_cursor = held or before.held, max(at, before.at_cursor)
        else:
            at_cursor = at
        into[key] = RowRecord(held, at_cursor)
