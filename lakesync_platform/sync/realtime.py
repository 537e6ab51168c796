"""The realtime feed's sessions: WebSocket sessions, their frames, and their sending.

PROTOCOL.md §7 and ARCHITECTURE.md §3–§4. A :class:`Session` is one authenticated socket of one
gateway. Frames are binary: a tag byte and a protobuf message (:mod:`..core.proto`). Each tag is
served by one :data:`FrameHandler` — push (``0x01``) and pull (``0x02``) here; another tag is one
more function handed to :meth:`RealtimeService.handle`. A handler's reply is sent untagged.

**Push** is :meth:`SyncService.push` — the same validation, one transaction, the reply only
after the commit — as over HTTP.

**Broadcast** is :mod:`.feed`: after every commit each session is fed the rows changed after
its feed cursor, which starts where the client last asked to pull from (durable in the WAL: a
client that pulls from ``C`` holds every row up to ``C``, so frames lost with an earlier socket
are sent again) and follows the client's own pulls on the socket. One frame per row because the
TS applier applies a frame whole or not at all, and one case fails it that no server can
foresee: a remote row that beats a local ``INSERT`` still queued (a plain ``INSERT`` on the row
it created). Over pull the client retries from its unmoved cursor; a broadcast is not re-sent,
so the failure must cost that row only — and that row comes back when the client pushes its
``INSERT`` (it changes the row or, losing, re-announces it). The pushing session is fed too:
its pending write may have been overwritten by a broadcast that crossed its push (the TS
applier ignores entries being sent), and only a later delivery of the row restores it.

**Sending** (:meth:`Session.deliver`). A reply or a broadcast page (a page's frames together)
is written on its caller's turn — the feed's, the handler's — when nothing waits to go before it
and the socket takes it without waiting for the peer: a task or a queue hop per frame cost more
than the write itself. A send that has to wait goes on as a task, and what follows it waits in
a bounded queue that the session's send task empties in order; a session whose queue is full is
closed with 1013 (try again later): the client reconnects and pulls from its cursor. So a slow
consumer holds back no one: pushes return at commit and the feed hands out pages without
waiting for any socket.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ..core.actions import checked_action_push
from ..core.errors import ForbiddenError, LakeSyncError
from ..core.proto import (
    TAG_ACTION_PUSH,
    TAG_ACTION_RESPONSE,
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
from .feed import BroadcastFeed, FeedSession, Offloader, sync_response
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


class FrameSocket(Protocol):
    """The transport under a session: an accepted WebSocket."""

    async def receive(self) -> bytes | str | None:
        """The next message (``bytes`` binary, ``str`` text), ``None`` once the peer left."""
        ...

    async def send(self, data: bytes) -> None:
        """Send one binary message; it waits (suspends) only while the peer is not reading."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Close with ``code`` and ``reason``."""
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
    off). ``cursor``: where the next broadcast page starts, the feed cursor (see the module
    docstring). ``lock`` is held while a frame handler runs; ``epoch`` counts the handlers that
    started and ``feed_pending`` says the feed skipped the session meanwhile (:mod:`.feed`).
    """

    gw: str
    client_id: str
    claims: Claims
    any_client_id: bool
    cursor: int
    socket: FrameSocket
    queue: asyncio.Queue[Sequence[bytes]]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    sending: bool = False
    """The send task is sending frames it took off the queue."""
    unfinished: asyncio.Task[None] | None = None
    """A send started at once that had to wait for the peer; the send task waits for it."""
    epoch: int = 0
    feed_pending: bool = False
    window_start: float = 0.0
    window_count: int = 0

    @property
    def busy(self) -> bool:
        """A frame handler is running on the session."""
        return self.lock.locked()

    def deliver(self, frames: Sequence[bytes]) -> bool:
        """Send ``frames``: at once while nothing waits to be sent before them and the socket
        takes them without waiting for the peer, else through the queue (the send task sends
        them in order). ``False`` if the queue is full."""
        if self.sending or self.unfinished is not None or not self.queue.empty():
            return self._queue(frames)
        for i, data in enumerate(frames):
            try:
                self.unfinished = _start(self.socket.send(data))
            except Exception:  # the peer went away mid-send
                self.closed.set()
                return True
            if self.unfinished is not None:  # the rest waits behind it (or just wakes the task)
                return self._queue(frames[i + 1 :])
        return True

    def check_client_id(self, client_id: str, what: str) -> None:
        """A push or pull names the token's subject (unless the caller may act for anyone)."""
        if not self.any_client_id and client_id != self.client_id:
            raise ForbiddenError(
                f"Client ID mismatch: {what} clientId does not match authenticated identity"
            )

    def _queue(self, frames: Sequence[bytes]) -> bool:
        try:
            self.queue.put_nowait(frames)
        except asyncio.QueueFull:
            return False
        return True


def _start(send: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``send`` on the caller's turn until it first waits: ``None`` if it finished (a
    socket that took the frame at once, the common case), else a task that finishes it.

    What Python 3.12 calls an eager task, by hand for 3.11: a socket send costs microseconds,
    and a task per send (or a queue hop to the session's send task) cost more than the send
    itself — at 1 000 sockets about a quarter of the gateway's CPU per broadcast
    (bench_realtime)."""
    try:
        waiting_on = send.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_resume(send, waiting_on))


async def _resume(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    """Drive ``coro`` on from where it waits on the future ``waiting_on``, as its task would
    have: once the future is done (whatever its outcome: the coroutine reads it), resume the
    coroutine; if this task is cancelled meanwhile, cancel the future and pass the cancellation
    in. (The future was yielded to us, not awaited by us: we wait for it to be done.)"""
    while True:
        try:
            if waiting_on is None:  # a bare yield: let the loop go round once
                await asyncio.sleep(0)
            else:
                await asyncio.wait((waiting_on,))
        except asyncio.CancelledError as exc:
            if waiting_on is not None:
                waiting_on.cancel()
            try:
                waiting_on = coro.throw(exc)
            except StopIteration:
                return
            continue
        try:
            waiting_on = coro.send(None)
        except StopIteration:
            return


FrameHandler = Callable[[Session, bytes], Awaitable[bytes | None]]
"""Serves one frame's message (the bytes after the tag); returns the untagged reply, if any.
A :class:`~lakesync_platform.core.errors.LakeSyncError` closes the session with 1008, a
:class:`~lakesync_platform.core.proto.CodecError` with 1002."""


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
        self._sessions: set[Session] = set()
        self._count = 0
        self._closing: set[asyncio.Task[None]] = set()
        self.feed = BroadcastFeed(
            sync,
            offload,
            page_size=limits.page_size,
            poll_interval_s=limits.poll_interval_s,
            drop=self._drop,
        )

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
        await self.feed.add(session)
        self._sessions.add(session)
        return session

    async def serve(self, session: Session) -> None:
        """Serve ``session`` until its peer leaves or it is closed; then forget it."""
        tasks = [
            asyncio.create_task(self._receive_loop(session)),
            asyncio.create_task(self._send_loop(session)),
        ]
        try:
            await session.closed.wait()
        finally:
            if session.unfinished is not None:
                tasks.append(session.unfinished)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._forget(session)

    def _forget(self, session: Session) -> None:
        self.feed.remove(session)
        if session in self._sessions:
            self._sessions.discard(session)
            self._count -= 1

    def _drop(self, session: FeedSession, reason: str) -> None:
        """Close a session the feed cannot serve with 1013: the client reconnects and pulls."""
        assert isinstance(session, Session)
        task = asyncio.create_task(self._close(session, CLOSE_TRY_AGAIN_LATER, reason))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

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
        """Close every session with 1001 (going away) and stop the feed."""
        await self.feed.close()
        await asyncio.gather(
            *(self._close(s, CLOSE_GOING_AWAY, "Server shutting down") for s in self._sessions)
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
            session.epoch += 1
            try:
                reply = await handler(session, payload)
            except CodecError as exc:
                raise CloseSession(CLOSE_PROTOCOL_ERROR, exc.message) from None
            except LakeSyncError as exc:
                raise CloseSession(CLOSE_POLICY_VIOLATION, exc.message) from None
            if reply is not None:
                self._enqueue(session, [reply])
        if session.feed_pending:  # the feed skipped it while the handler ran
            session.feed_pending = False
            self.feed.feed_later(session)

    # ------------------------------------------------------------------ sending

    def _enqueue(self, session: Session, frames: Sequence[bytes]) -> None:
        if not session.deliver(frames):
            raise CloseSession(CLOSE_TRY_AGAIN_LATER, "Too far behind: reconnect and pull")

    async def _send_loop(self, session: Session) -> None:
        """Send what waits in the queue, after a send that had to wait for the peer."""
        try:
            while not session.closing:
                frames = await session.queue.get()
                session.sending = True
                if session.unfinished is not None:
                    await session.unfinished
                    session.unfinished = None
                for data in frames:
                    if session.closing:
                        break
                    await session.socket.send(data)
                session.sending = False
        except asyncio.CancelledError:
            raise
        except Exception:  # the peer went away mid-send
            session.closed.set()

    # ------------------------------------------------------------------ broadcast

    def committed(self, gw: str, head: int) -> None:
        """A push in this process moved the log of ``gw`` to cursor ``head``: feed its sessions
        now (see :meth:`BroadcastFeed.committed`)."""
        self.feed.committed(gw, head)
