"""The broadcast feed: after every commit, each WebSocket session of the gateway receives the
rows it has not seen yet, as ``0x03`` frames (PROTOCOL.md §7.2, ARCHITECTURE.md §4).

**What a session receives is its own pull.** Each session keeps a feed cursor — every row
changed up to it has been sent on this socket — and is fed the page :meth:`SyncService.pull`
would cut from that cursor with the session's claims (``feed=True``: not remembered as the
client's pull). So pull's guarantees hold as they are: nothing outside the client's view, no
entry skipped (the cursor never moves past what was sent), rows whole and current (never an
old value over a newer one), rows entering and leaving the view, delivery records kept as a
pull keeps them. Each row of a page is a frame of its own (see :mod:`.realtime` for why).

**One fan-out per gateway, one read per pass.** A commit wakes the gateway's fan-out task
once; it asks :meth:`SyncService.feed_pages` for every due session's page in one
worker-thread call, then hands each session its frames in one pass on the event loop. The
pages are cut together (:mod:`.feed_cut`): the changed rows are read once, each view (the
rules against the claims they read) evaluates them once, only a session whose client holds a
row its view hides gets a step of its own, the records of all clients are read and written
in one call each, and sessions sent the same rows at the same cursor share one page. Its
frames are encoded once (:class:`_Frames`): without filtering rules every session at one
cursor shares them; with them, every session of one view and tag.

**A session's frames stay in the order their rows were read.** A frame handler on the socket
(a pull over the socket sends rows too) and the feed must not interleave their reads and
sends. A session says it is :attr:`FeedSession.busy` while a handler runs and counts the
handlers it ran (:attr:`FeedSession.epoch`). A page is handed to a session only if, since the
page was cut, no handler ran on it and its cursor is the one the page was cut from; a busy
session is skipped and fed again once its handler ends (:meth:`BroadcastFeed.feed_later`), and
one whose handler ran meanwhile is cut a fresh page in the same pass.

**Noticing commits.** A commit in this process calls :meth:`BroadcastFeed.committed` (the HTTP
push route and the WebSocket push handler do); a watcher polls the last cursor of every
gateway with sessions every ``poll_interval_s``, which sees commits of every other process on
the same WAL — gateway workers on one SQLite file, gateway processes on one Postgres database,
connectors' appends. Polling was taken over LISTEN/NOTIFY: one code path for both stores, one
indexed read per gateway per interval whatever the number of sockets, no change to the push
transaction. Wake-ups coalesce: a commit during a pass makes one more pass, so a burst of
pushes costs each session at most two pages, and a slow consumer costs the pushers nothing
(its frames wait in its own bounded queue; see :mod:`.realtime`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from ..core.delta import ColumnDelta, RowDelta
from ..core.proto import TAG_BROADCAST, encode_sync_response, frame
from ..core.sync_rules import Claims
from .delivery import PulledDelta, StampedInsert
from .feed_cut import FeedPage, FeedWant
from .service import SyncService

__all__ = ["BroadcastFeed", "FeedSession", "Offloader", "sync_response"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_BROADCAST: Final = frame(TAG_BROADCAST, b"")
_YIELD_EVERY: Final = 256
"""Sessions handed their frames between two turns of the event loop (a fan-out to 10 000
sockets would otherwise hold the loop for a quarter of a second)."""


class Offloader(Protocol):
    """Runs a blocking call on a worker thread."""

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]:
        """``fn(*args, **kwargs)`` off the event loop."""
        ...


class FeedSession(Protocol):
    """What the feed needs of a session (:class:`~.realtime.Session` is one)."""

    gw: str
    client_id: str
    claims: Claims
    cursor: int
    """Where the session's next page starts (every row changed up to it has been sent)."""
    epoch: int
    """How many frame handlers have run on the session (one more as each starts)."""
    feed_pending: bool
    """A pass skipped the session while a handler ran: the handler's end calls
    :meth:`BroadcastFeed.feed_later`."""
    closing: bool

    @property
    def busy(self) -> bool:
        """A frame handler is running on the session."""
        ...

    def deliver(self, frames: Sequence[bytes]) -> bool:
        """Queue ``frames`` for the socket; ``False`` if its queue is full."""
        ...


def _row_delta(d: PulledDelta | StampedInsert) -> RowDelta:
    return RowDelta(
        d.op,
        d.table,
        d.row_id,
        d.client_id,
        tuple(ColumnDelta(c.column, c.value) for c in d.columns),
        int(d.hlc),
        d.delta_id,
    )


def sync_response(
    wire: Sequence[PulledDelta | StampedInsert], cursor: int, has_more: bool
) -> bytes:
    """A ``SyncResponse`` of pulled deltas.

    A cursor of 0 with nothing else would encode to no bytes, which the TS client ignores
    (it waits for its reply forever); such a reply says ``has_more``, which it ignores.
    """
    deltas = [_row_delta(d) for d in wire]
    return encode_sync_response(deltas, cursor, has_more or (cursor == 0 and not deltas))


class _Frames:
    """The broadcast frames of one pass: one row per frame (see :mod:`.realtime` for why),
    each row's message built once and each page's frames once.

    A frame is the row's ``SyncResponse`` with the page's cursor: a message's fields are
    serialised in field order, the deltas (1) before the cursor (2), so the row's serialised
    deltas followed by a message holding only the cursor are the very bytes of the whole
    message, built once per row and once per cursor instead of once per session.
    """

    def __init__(self) -> None:
        self._rows: dict[int, bytes] = {}  # by id() of a row's deltas (alive during the pass)
        self._pages: dict[int, tuple[bytes, ...]] = {}

    def of(self, page: FeedPage) -> tuple[bytes, ...]:
        """``page``'s frames."""
        found = self._pages.get(id(page))
        if found is None:
            tail = encode_sync_response([], page.server_hlc, False)
            found = self._pages[id(page)] = tuple(
                _BROADCAST + self._row(row) + tail for row in page.rows
            )
        return found

    def _row(self, row: tuple[PulledDelta | StampedInsert, ...]) -> bytes:
        found = self._rows.get(id(row))
        if found is None:
            found = self._rows[id(row)] = encode_sync_response(
                [_row_delta(d) for d in row], 0, False
            )
        return found


@dataclass(eq=False)
class _Gateway:
    """The sessions of one gateway and its fan-out task."""

    head: int
    sessions: set[FeedSession] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    everyone: bool = False
    """A commit: every session is due."""
    due: set[FeedSession] = field(default_factory=set)
    """Sessions due although nothing was committed (a handler held them during a pass)."""
    task: asyncio.Task[None] | None = None


class BroadcastFeed:
    """Feeds the WebSocket sessions of a process after every commit of their gateway.

    ``offload`` runs the cutting of the pages (and the reads of the WAL head) on worker
    threads; ``page_size`` bounds a page; the watcher polls every ``poll_interval_s``.
    ``drop(session, reason)`` closes a session the feed cannot serve (its queue is full, or its
    page could not be cut) with a code that makes the client reconnect and pull.
    """

    def __init__(
        self,
        sync: SyncService,
        offload: Offloader,
        *,
        page_size: int,
        poll_interval_s: float,
        drop: Callable[[FeedSession, str], None],
    ) -> None:
        self._sync = sync
        self._offload = offload
        self._page_size = page_size
        self._poll_interval_s = poll_interval_s
        self._drop = drop
        self._gateways: dict[str, _Gateway] = {}
        self._watcher: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ sessions

    async def add(self, session: FeedSession) -> None:
        """Feed ``session`` from its cursor now and after every later commit of its gateway."""
        gw = session.gw
        if gw not in self._gateways:
            head = await self._offload(self._sync.head, gw)
            if gw not in self._gateways:  # (another session may have added it meanwhile)
                self._gateways[gw] = _Gateway(head)
        g = self._gateways[gw]
        g.sessions.add(session)
        # Fed from its cursor at once: a commit the fan-out passed over while this session was
        # being opened (its socket accepted, its cursor read) would otherwise reach it only
        # with the next commit; and a client that comes back behind gets its rows now.
        g.due.add(session)
        g.wake.set()
        if g.task is None or g.task.done():
            g.task = asyncio.create_task(self._fan_out(gw, g), name=f"lakesync-feed-{gw}")
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="lakesync-wal-watch")

    def remove(self, session: FeedSession) -> None:
        """Stop feeding ``session``; a gateway without sessions is forgotten."""
        g = self._gateways.get(session.gw)
        if g is None:
            return
        g.sessions.discard(session)
        g.due.discard(session)
        if not g.sessions:
            del self._gateways[session.gw]
            g.wake.set()  # its fan-out task sees it has no sessions left and ends

    def feed_later(self, session: FeedSession) -> None:
        """Feed ``session`` now: a pass skipped it while one of its frame handlers ran."""
        g = self._gateways.get(session.gw)
        if g is not None and session in g.sessions:
            g.due.add(session)
            g.wake.set()

    async def close(self) -> None:
        """Stop the watcher and every fan-out task."""
        tasks = [g.task for g in self._gateways.values() if g.task is not None]
        if self._watcher is not None:
            tasks.append(self._watcher)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ commits

    def committed(self, gw: str, head: int) -> None:
        """A commit in this process moved the log of ``gw`` to cursor ``head``: feed its
        sessions now (if it moved nothing, there is nothing to feed)."""
        g = self._gateways.get(gw)
        if g is None or head <= g.head:
            return
        g.head = head  # the watcher need not report it again
        self.notify(gw)

    def notify(self, gw: str) -> None:
        """The log of ``gw`` grew: every session of it is fed from its cursor."""
        g = self._gateways.get(gw)
        if g is not None:
            g.everyone = True
            g.wake.set()

    async def _watch(self) -> None:
        """Poll the last cursor of every gateway with sessions; notify when it moved."""
        while self._gateways:
            await asyncio.sleep(self._poll_interval_s)
            for gw in list(self._gateways):
                try:
                    head = await self._offload(self._sync.head, gw)
                except Exception:
                    log.exception("reading the WAL head of %s failed", gw)
                    continue
                g = self._gateways.get(gw)
                if g is not None and head > g.head:
                    g.head = head
                    self.notify(gw)

    # ------------------------------------------------------------------ fan-out

    async def _fan_out(self, gw: str, g: _Gateway) -> None:
        """Feed the due sessions of ``gw`` each time it is woken, until it has none."""
        while True:
            await g.wake.wait()
            g.wake.clear()
            if not g.sessions:
                return
            todo = list(g.sessions) if g.everyone else list(g.due)
            g.everyone = False
            g.due.clear()
            try:
                while todo:
                    todo = await self._feed(gw, g, todo)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: never leave the gateway without its feed
                log.exception("broadcast to the sessions of %s failed", gw)

    async def _feed(self, gw: str, g: _Gateway, todo: list[FeedSession]) -> list[FeedSession]:
        """Cut and hand out one page to each of ``todo``; the sessions that need another."""
        ready: list[tuple[FeedSession, int]] = []
        for s in todo:
            if s.closing:
                continue
            if s.busy:
                self._skip(g, s)
            else:
                ready.append((s, s.epoch))
        if not ready:
            return []
        wants = [FeedWant(s.client_id, s.cursor, s.claims) for s, _ in ready]
        try:
            pages = await self._offload(self._sync.feed_pages, gw, wants, self._page_size)
        except Exception:
            log.exception("cutting the broadcast pages of %s failed", gw)
            for s, _ in ready:
                self._drop(s, "Broadcast failed: reconnect")
            return []
        frames = _Frames()
        again: list[FeedSession] = []
        # Sessions sent rows first: with filtering rules most pages are empty (only a cursor
        # to move), and the sockets waiting for a row should not wait behind them.
        cuts = list(zip(ready, wants, pages, strict=True))
        cuts.sort(key=lambda cut: isinstance(cut[2], FeedPage) and not cut[2].rows)
        for i, ((s, epoch), want, page) in enumerate(cuts):
            if i and not i % _YIELD_EVERY:
                await asyncio.sleep(0)  # let the loop serve others (each session is checked anew)
            if s.closing:
                continue
            if isinstance(page, Exception):  # (logged where it was raised)
                self._drop(s, "Broadcast failed: reconnect")
            elif s.busy:
                self._skip(g, s)
            elif s.epoch != epoch or s.cursor != want.cursor:
                again.append(s)  # a handler ran since the cut: cut it a fresh page
            elif page.rows and not s.deliver(frames.of(page)):
                self._drop(s, "Too far behind: reconnect and pull")
            else:
                # Past an empty page too: what it skipped is outside the client's view.
                s.cursor = page.server_hlc
                if page.has_more:
                    again.append(s)
        return again

    @staticmethod
    def _skip(g: _Gateway, s: FeedSession) -> None:
        """A handler runs on ``s``: feed it once the handler ends (it calls feed_later)."""
        g.due.discard(s)
        s.feed_pending = True
