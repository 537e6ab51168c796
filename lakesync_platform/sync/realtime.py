"""The realtime feed: WebSocket sessions, their frames, and the broadcast after every commit.

PROTOCOL.md §7 and ARCHITECTURE.md §3–§4. A :class:`Session` is one authenticated socket of one
gateway. Frames are binary: a tag byte and a protobuf message (:mod:`..core.proto`). Each tag is
served by one :data:`FrameHandler` — push (``0x01``) and pull (``0x02``) here; another tag is one
more function handed to :meth:`RealtimeService.handle`. A handler's reply is sent untagged.

**Push** is :meth:`SyncService.push` — the same validation, one transaction, the reply only
after the commit — as over HTTP.

**Broadcast** is the session's own pull. Each session keeps a feed cursor — every row changed
up to it has been sent on this socket — starting where the client last asked to pull from
(durable in the WAL: a client that pulls from ``C`` holds every row up to ``C``, so frames lost
with an earlier socket are sent again) and following the client's own pulls on the socket. When
the gateway's log grows, every session of that gateway runs :meth:`SyncService.pull` from its
feed cursor with its own claims (``feed=True``: not remembered as the client's pull) and sends
each row of the page as a ``0x03`` frame of its own. Pull's guarantees hold as they are: nothing
outside the client's view, no entry skipped (the feed never moves past what it sent), rows whole
and current (never an old value over a newer one), rows entering and leaving the view.
One frame per row because the TS applier applies a frame whole or not at all, and one case
fails it that no server can foresee: a remote row that beats a local ``INSERT`` still queued
(a plain ``INSERT`` on the row it created). Over pull the client retries from its unmoved
cursor; a broadcast is not re-sent, so the failure must cost that row only — and that row comes
back when the client pushes its ``INSERT`` (it changes the row or, losing, re-announces it).
The pushing session is fed too: its pending write may have been overwritten by a broadcast that
crossed its push (the TS applier ignores entries being sent), and only a later delivery of the
row restores it.

The log's growth is noticed two ways: a commit in this process calls :meth:`notify` (the HTTP
push route and the WebSocket push handler do), and a watcher polls the gateway's last cursor
every :attr:`RealtimeLimits.poll_interval_s` while the gateway has sessions, which sees commits
of every other process on the same WAL — gateway workers on one SQLite file, gateway processes
on one Postgres database, connectors' appends. Polling was taken over LISTEN/NOTIFY: it works
on both stores with one code path, costs one indexed read per gateway per interval whatever the
number of sockets, and needs no change to the push transaction; a commit in this process is
broadcast at once and one in another process within an interval.

Wake-ups coalesce: a session woken while it is already pulling pulls once more afterwards, so a
burst of pushes costs each session at most two pulls, and a slow consumer costs the pushers
nothing. On a gateway without filtering rules, the sessions at one cursor share one page per
wake-up (:class:`_SharedPages`). Replies and broadcast pages (a page's frames together) wait
for the socket in a bounded queue; a session whose queue is full is closed with 1013 (try again
later): the client reconnects and pulls from its cursor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from ..core.actions import checked_action_push
from ..core.delta import ColumnDelta, RowDelta
from ..core.errors import ForbiddenError, LakeSyncError
from ..core.proto import (
    TAG_ACTION_PUSH,
    TAG_ACTION_RESPONSE,
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    TAG_SYNC_PUSH,
    CodecError,
    decode_action_push,
    decode_sync_pull,
    decode_sync_push,
    encode_action_response,
    encode_sync_response,
    frame,
    unframe,
)
from ..core.sync_rules import Claims
from .actions import ActionService
from .delivery import PulledDelta, PullPage, StampedInsert
from .service import SyncService

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_POLICY_VIOLATION",
    "CLOSE_PROTOCOL_ERROR",
    "CLOSE_TRY_AGAIN_LATER",
    "CLOSE_UNSUPPORTED_DATA",
    "CloseSession",
    "FrameHandler",
    "FrameSocket",
    "Offloader",
    "RealtimeLimits",
    "RealtimeService",
    "Session",
]

log = logging.getLogger(__name__)

CLOSE_GOING_AWAY: Final = 1001
"""The gateway is shutting down."""
CLOSE_PROTOCOL_ERROR: Final = 1002
"""A frame too short, with an unknown tag, or whose message does not decode (the reference's)."""
CLOSE_UNSUPPORTED_DATA: Final = 1003
"""A text frame: binary frames only."""
CLOSE_POLICY_VIOLATION: Final = 1008
"""A push or pull refused (validation, schema, clock drift, identity) or the rate limit."""
CLOSE_MESSAGE_TOO_BIG: Final = 1009
"""A frame over the size limit."""
CLOSE_INTERNAL_ERROR: Final = 1011
"""An unexpected server failure."""
CLOSE_TRY_AGAIN_LATER: Final = 1013
"""The session fell too far behind (or the server is full): reconnect and pull."""

_CLOSE_TIMEOUT_S: Final = 10.0
_MAX_REASON_BYTES: Final = 123  # RFC 6455: a close frame's payload is at most 125 bytes
_DEFAULT_PULL_LIMIT: Final = 100
_MAX_PULL_LIMIT: Final = 10_000

T = TypeVar("T")


class FrameSocket(Protocol):
    """The transport under a session: an accepted WebSocket."""

    async def receive(self) -> bytes | str | None:
        """The next message (``bytes`` binary, ``str`` text), ``None`` once the peer left."""
        ...

    async def send(self, data: bytes) -> None:
        """Send one binary message."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Close with ``code`` and ``reason``."""
        ...


class Offloader(Protocol):
    """Runs a blocking call on a worker thread."""

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]:
        """``fn(*args, **kwargs)`` off the event loop."""
        ...


class CloseSession(Exception):
    """Ends a session with a WebSocket close ``code`` and ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RealtimeLimits:
    """The feed's limits: ``GatewaySettings``' ``ws_*`` values (their defaults are there), and
    the rows a broadcast pull reads at most."""

    max_connections: int
    max_messages_per_s: int
    max_frame_bytes: int
    send_queue: int
    poll_interval_s: float
    page_size: int = 1000


@dataclass(eq=False)
class Session:
    """One socket of one gateway: who is on it and the cursor its client holds.

    ``any_client_id``: the caller may push and pull as any client id (an admin token, or auth
    off). ``cursor``: where the next broadcast pull starts, the feed cursor (see the module
    docstring).
    """

    gw: str
    client_id: str
    claims: Claims
    any_client_id: bool
    cursor: int
    socket: FrameSocket
    queue: asyncio.Queue[Sequence[bytes]]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    window_start: float = 0.0
    window_count: int = 0

    def check_client_id(self, client_id: str, what: str) -> None:
        """A push or pull names the token's subject (unless the caller may act for anyone)."""
        if not self.any_client_id and client_id != self.client_id:
            raise ForbiddenError(
                f"Client ID mismatch: {what} clientId does not match authenticated identity"
            )


FrameHandler = Callable[[Session, bytes], Awaitable[bytes | None]]
"""Serves one frame's message (the bytes after the tag); returns the untagged reply, if any.
A :class:`~lakesync_platform.core.errors.LakeSyncError` closes the session with 1008, a
:class:`~lakesync_platform.core.proto.CodecError` with 1002."""


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


def _by_row(
    wire: Sequence[PulledDelta | StampedInsert],
) -> list[list[PulledDelta | StampedInsert]]:
    """A page's deltas grouped by row (a row's are adjacent: a TS pair or one delete)."""
    rows: list[list[PulledDelta | StampedInsert]] = []
    for d in wire:
        if rows and rows[-1][0].row_id == d.row_id and rows[-1][0].table == d.table:
            rows[-1].append(d)
        else:
            rows.append([d])
    return rows


def _frames(page: PullPage) -> tuple[bytes, ...]:
    """The broadcast frames of a feed page, one row per frame."""
    return tuple(
        frame(TAG_BROADCAST, sync_response(row, page.server_hlc, False))
        for row in _by_row(page.wire)
    )


class _SharedPages:
    """Feed pages of gateways without filtering rules, cut and framed once per cursor and
    generation.

    Without filtering rules a page depends on the cursor alone (no claims, no per-client
    records), so the sessions woken by one commit at one cursor share it and its frames.
    ``generation`` counts the gateway's wake-ups: a page cut in the generation a session woke
    in was cut after the commit that woke it. Pages of earlier generations are dropped;
    generations only grow (a page stored late for a gateway whose sessions all left is still
    one cut after its commit).
    """

    def __init__(self, sync: SyncService) -> None:
        self._sync = sync
        self._lock = threading.Lock()
        self._pages: dict[tuple[str, int, int, int], tuple[PullPage, tuple[bytes, ...]]] = {}
        self._generations: dict[str, int] = {}

    def cached(
        self, gw: str, generation: int, cursor: int, limit: int
    ) -> tuple[PullPage, tuple[bytes, ...]] | None:
        """A page and its frames already cut, read on the event loop (a worker-thread hop per
        socket for a lookup cost ~15% of the latency at 1 000 sockets: bench_realtime)."""
        with self._lock:
            return self._pages.get((gw, generation, cursor, limit))

    def page(
        self, gw: str, generation: int, client_id: str, cursor: int, limit: int, claims: Claims
    ) -> tuple[PullPage, tuple[bytes, ...]]:
        """The feed page of ``client_id`` from ``cursor`` and its frames (on a worker thread)."""
        if self._sync.config(gw).has_filters:
            page = self._sync.pull(gw, client_id, cursor, limit, claims=claims, feed=True)
            return page, _frames(page)
        key = (gw, generation, cursor, limit)
        with self._lock:
            shared = self._pages.get(key)
        if shared is None:
            page = self._sync.pull(gw, client_id, cursor, limit, claims=claims, feed=True)
            shared = (page, _frames(page))
            with self._lock:
                if generation > self._generations.get(gw, -1):
                    self._generations[gw] = generation
                    for old in [k for k in self._pages if k[0] == gw and k[1] < generation]:
                        del self._pages[old]
                if generation == self._generations[gw]:
                    self._pages[key] = shared
        return shared

    def forget(self, gw: str) -> None:
        """Drop the pages of ``gw`` (its last session left)."""
        with self._lock:
            for key in [k for k in self._pages if k[0] == gw]:
                del self._pages[key]


def _reason(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= _MAX_REASON_BYTES:
        return text
    return data[: _MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


class RealtimeService:
    """The WebSocket sessions of one gateway process and their broadcast feed."""

    def __init__(
        self,
        sync: SyncService,
        offload: Offloader,
        limits: RealtimeLimits,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sync = sync
        self._offload = offload
        self.limits = limits
        self._monotonic = monotonic
        self._handlers: dict[int, FrameHandler] = {
            TAG_SYNC_PUSH: self._push,
            TAG_SYNC_PULL: self._pull,
        }
        self._sessions: dict[str, set[Session]] = {}
        self._heads: dict[str, int] = {}
        self._generations: dict[str, int] = {}
        self._shared = _SharedPages(sync)
        self._watcher: asyncio.Task[None] | None = None
        self._count = 0

    # ------------------------------------------------------------------ frames

    def handle(self, tag: int, handler: FrameHandler) -> None:
        """Serve frames tagged ``tag`` with ``handler`` (e.g. actions, ``0x04``)."""
        self._handlers[tag] = handler

    def serve_actions(self, actions: ActionService, offload: Offloader) -> None:
        """Serve action frames: ``0x04`` ActionPush in, ``0x05`` ActionResponse out (PROTOCOL.md
        §7.2, §8), with the checks and durable idempotency of ``POST /action``. Handlers run on
        ``offload``'s threads (the requests', not the feed's: one may run for its timeout)."""

        async def run(session: Session, payload: bytes) -> bytes:
            client_id, wire_actions = decode_action_push(payload)
            push = checked_action_push(client_id, wire_actions)
            session.check_client_id(push.client_id, "action")
            results = await offload(
                actions.dispatch, session.gw, push.client_id, push.actions, claims=session.claims
            )
            reply = encode_action_response(results, actions.server_hlc())
            return frame(TAG_ACTION_RESPONSE, reply)

        self.handle(TAG_ACTION_PUSH, run)

    async def _push(self, session: Session, payload: bytes) -> bytes:
        client_id, deltas, _last_seen = decode_sync_push(payload)
        session.check_client_id(client_id, "push")
        result = await self._offload(
            self._sync.push,
            session.gw,
            client_id,
            deltas,
            claims=session.claims,
            any_client_ids=session.any_client_id,
        )
        self.committed(session.gw, result.head)
        return encode_sync_response([], result.server_hlc, result.server_hlc == 0)

    async def _pull(self, session: Session, payload: bytes) -> bytes:
        client_id, since, max_deltas = decode_sync_pull(payload)
        session.check_client_id(client_id, "pull")
        limit = min(max_deltas or _DEFAULT_PULL_LIMIT, _MAX_PULL_LIMIT)
        page = await self._offload(
            self._sync.pull, session.gw, client_id, since, limit, claims=session.claims
        )
        if client_id == session.client_id:  # (an admin may pull as anyone: not its feed)
            session.cursor = page.server_hlc  # the client holds the rows up to it once applied
        return sync_response(page.wire, page.server_hlc, page.has_more)

    # ------------------------------------------------------------------ sessions

    def admit(self) -> bool:
        """Take a place for a new session, unless the process holds its maximum already.

        The place is the session's once :meth:`open` returns it (and freed when it ends);
        :meth:`release` frees it if the session is never opened.
        """
        if self._count >= self.limits.max_connections:
            return False
        self._count += 1
        return True

    def release(self) -> None:
        """Free a place taken by :meth:`admit` for a session that was never opened."""
        self._count -= 1

    async def open(
        self, socket: FrameSocket, gw: str, client_id: str, claims: Claims, *, any_client_id: bool
    ) -> Session:
        """Register a session of ``client_id`` (in a place taken by :meth:`admit`); its feed
        starts where the client last asked to pull from."""
        cursor = await self._offload(self._sync.last_pulled_since, gw, client_id)
        session = Session(
            gw,
            client_id,
            claims,
            any_client_id,
            cursor,
            socket,
            asyncio.Queue(self.limits.send_queue),
        )
        if gw not in self._heads:
            self._heads[gw] = await self._offload(self._sync.head, gw)
        self._sessions.setdefault(gw, set()).add(session)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="lakesync-wal-watch")
        return session

    async def serve(self, session: Session) -> None:
        """Serve ``session`` until its peer leaves or it is closed; then forget it."""
        tasks = [
            asyncio.create_task(self._receive_loop(session)),
            asyncio.create_task(self._send_loop(session)),
            asyncio.create_task(self._feed_loop(session)),
        ]
        try:
            await session.closed.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._forget(session)

    def _forget(self, session: Session) -> None:
        sessions = self._sessions.get(session.gw)
        if sessions is not None and session in sessions:
            sessions.discard(session)
            self._count -= 1
            if not sessions:
                del self._sessions[session.gw]
                self._heads.pop(session.gw, None)
                self._shared.forget(session.gw)  # generations never restart (see _SharedPages)

    async def _close(self, session: Session, code: int, reason: str) -> None:
        """Send the close frame, then end the session. A peer that does not read gets the frame
        after what is already on its way, if it reads within :data:`_CLOSE_TIMEOUT_S`."""
        if session.closing:
            return
        session.closing = True
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await session.socket.close(code, _reason(reason))
        except (TimeoutError, Exception):  # the peer is gone or stuck: nothing more to say
            pass
        finally:
            session.closed.set()

    async def close_all(self) -> None:
        """Close every session with 1001 (going away) and stop watching the WAL."""
        if self._watcher is not None:
            self._watcher.cancel()
        sessions = [s for group in self._sessions.values() for s in group]
        await asyncio.gather(
            *(self._close(s, CLOSE_GOING_AWAY, "Server shutting down") for s in sessions)
        )

    # ------------------------------------------------------------------ receiving

    async def _receive_loop(self, session: Session) -> None:
        try:
            while not session.closing:
                data = await session.socket.receive()
                if data is None:
                    session.closed.set()
                    return
                if not session.closing:
                    await self._on_message(session, data)
        except CloseSession as close:
            await self._close(session, close.code, close.reason)
        except Exception:
            log.exception("WebSocket session of %s failed", session.client_id)
            await self._close(session, CLOSE_INTERNAL_ERROR, "Internal error")

    def _check_rate(self, session: Session) -> None:
        now = self._monotonic()
        if now - session.window_start >= 1.0:
            session.window_start, session.window_count = now, 0
        session.window_count += 1
        if session.window_count > self.limits.max_messages_per_s:
            raise CloseSession(CLOSE_POLICY_VIOLATION, "Rate limit exceeded")

    async def _on_message(self, session: Session, data: bytes | str) -> None:
        if isinstance(data, str):
            raise CloseSession(CLOSE_UNSUPPORTED_DATA, "Binary frames only")
        limit = self.limits.max_frame_bytes
        if len(data) > limit:
            raise CloseSession(CLOSE_MESSAGE_TOO_BIG, f"Message too big (max {limit} bytes)")
        self._check_rate(session)
        try:
            tag, payload = unframe(data)
        except CodecError as exc:
            raise CloseSession(CLOSE_PROTOCOL_ERROR, exc.message) from None
        handler = self._handlers.get(tag)
        if handler is None:
            raise CloseSession(CLOSE_PROTOCOL_ERROR, f"Unknown message tag: 0x{tag:02x}")
        async with session.lock:
            try:
                reply = await handler(session, payload)
            except CodecError as exc:
                raise CloseSession(CLOSE_PROTOCOL_ERROR, exc.message) from None
            except LakeSyncError as exc:
                raise CloseSession(CLOSE_POLICY_VIOLATION, exc.message) from None
            if reply is not None:
                self._enqueue(session, [reply])

    # ------------------------------------------------------------------ sending

    def _enqueue(self, session: Session, frames: Sequence[bytes]) -> None:
        try:
            session.queue.put_nowait(frames)
        except asyncio.QueueFull:
            raise CloseSession(
                CLOSE_TRY_AGAIN_LATER, "Too far behind: reconnect and pull"
            ) from None

    async def _send_loop(self, session: Session) -> None:
        try:
            while not session.closing:
                for data in await session.queue.get():
                    if session.closing:
                        break
                    await session.socket.send(data)
        except asyncio.CancelledError:
            raise
        except Exception:  # the peer went away mid-send
            session.closed.set()

    # ------------------------------------------------------------------ broadcast

    def committed(self, gw: str, head: int) -> None:
        """A push in this process moved the log of ``gw`` to cursor ``head``: feed its sessions
        now (if the push moved nothing, there is nothing to feed)."""
        if gw not in self._sessions or head <= self._heads.get(gw, 0):
            return
        self._heads[gw] = head  # the watcher need not report it again
        self.notify(gw)

    def notify(self, gw: str) -> None:
        """The log of ``gw`` grew: every session of it pulls from its cursor."""
        self._generations[gw] = self._generations.get(gw, 0) + 1
        for session in self._sessions.get(gw, ()):
            session.wake.set()

    async def _watch(self) -> None:
        """Poll the last cursor of every gateway with sessions; notify when it moved."""
        while self._sessions:
            await asyncio.sleep(self.limits.poll_interval_s)
            for gw in list(self._sessions):
                try:
                    head = await self._offload(self._sync.head, gw)
                except Exception:
                    log.exception("reading the WAL head of %s failed", gw)
                    continue
                if head > self._heads.get(gw, 0):
                    self._heads[gw] = head
                    self.notify(gw)

    async def _feed_loop(self, session: Session) -> None:
        try:
            while not session.closing:
                await session.wake.wait()
                session.wake.clear()
                generation = self._generations.get(session.gw, 0)
                async with session.lock:
                    await self._feed(session, generation)
        except CloseSession as close:
            await self._close(session, close.code, close.reason)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("broadcast to %s failed", session.client_id)
            await self._close(session, CLOSE_TRY_AGAIN_LATER, "Broadcast failed: reconnect")

    async def _feed(self, session: Session, generation: int) -> None:
        """Pull from the session's cursor until caught up; send each row of each page."""
        gw, limit = session.gw, self.limits.page_size
        while True:
            shared = self._shared.cached(gw, generation, session.cursor, limit)
            if shared is None:
                args = (gw, generation, session.client_id, session.cursor, limit, session.claims)
                shared = await self._offload(self._shared.page, *args)
            page, frames = shared
            if frames:
                self._enqueue(session, frames)
            # Past an empty page too: what it skipped is outside the client's view.
            session.cursor = page.server_hlc
            if not page.has_more:
                return
