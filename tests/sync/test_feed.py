"""The broadcast feed and the sessions' sending, in one process on the in-memory WAL.

Real asyncio, a real :class:`SyncService`, and sockets that behave like uvicorn's: a send waits
while the peer does not read (``writable`` cleared). The offloader is the gateway's kind (each
call on a worker thread), injected so that the tests count the calls the feed makes and can
hold one back to stage a race. The gateway-level tests (``tests/gateway/test_realtime*.py``)
cover the same paths over real sockets.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.proto import (
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    decode_sync_response,
    encode_sync_pull,
    frame,
)
from lakesync_platform.core.sync_rules import parse_sync_rules
from lakesync_platform.sync.realtime import RealtimeLimits, RealtimeService, Session
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.memory import MemoryWal
from tests.helpers import make_delta
from tests.wal.conftest import BASE_MS, Clock

T = TypeVar("T")

RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}


class MemorySocket:
    """A socket as uvicorn's WebSocket behaves: a send (and the close) waits while the peer
    does not read; what was sent, in order."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.writable = asyncio.Event()
        self.writable.set()
        self.incoming: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        self.closed_with: tuple[int, str] | None = None

    async def receive(self) -> bytes | str | None:
        return await self.incoming.get()

    async def send(self, data: bytes) -> None:
        await self.writable.wait()
        self.sent.append(data)

    async def close(self, code: int, reason: str) -> None:
        await self.writable.wait()
        self.closed_with = (code, reason)

    def broadcasts(self) -> list[list[tuple[str, Any]]]:
        """Each broadcast frame's rows as ``(row id, title)`` (``None`` for a delete)."""
        out = []
        for data in self.sent:
            if data[0] == TAG_BROADCAST:
                deltas, _, _ = decode_sync_response(data[1:])
                out.append([(d.row_id, _title(d)) for d in deltas if d.op != "DELETE" or d.hlc])
        return out


def _title(d: Any) -> Any:
    if d.op == "DELETE":
        return None
    return next((c.value for c in d.columns if c.column == "title"), None)


class Offload:
    """Each call on a worker thread, as the gateway's offloader; counts calls by function
    name, and a call whose name is in ``hold`` runs, then waits for that event to return."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.hold: dict[str, asyncio.Event] = {}
        self.holding: dict[str, asyncio.Event] = {}
        self.running = 0

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        name = getattr(fn, "__name__", "?")
        self.calls[name] += 1
        self.running += 1
        try:
            result = await asyncio.to_thread(fn, *args, **kwargs)
        finally:
            self.running -= 1
        gate = self.hold.get(name)
        if gate is not None:
            self.holding.setdefault(name, asyncio.Event()).set()
            await gate.wait()
        return result


class FailingReads(MemoryWal):
    """The in-memory WAL, whose next ``failing`` reads for the feed fail (a store error)."""

    failing = 0

    def feed_read(self, gw: str) -> Any:
        if self.failing:
            self.failing -= 1
            raise AdapterError("the store failed")
        return super().feed_read(gw)


class Gateway:
    """A sync service on the in-memory WAL with its realtime service."""

    def __init__(self, gw: str, send_queue: int = 64) -> None:
        self.gw = gw
        self.clock = Clock(BASE_MS)
        self.wal = FailingReads()
        self.sync = SyncService(self.wal, self.clock)
        self.offload = Offload()
        limits = RealtimeLimits(
            max_connections=1000,
            max_messages_per_s=1000,
            max_frame_bytes=1 << 20,
            send_queue=send_queue,
            poll_interval_s=3600,  # only this process commits: no polling needed
        )
        self.realtime = RealtimeService(self.sync, self.offload, limits)
        self.served: list[asyncio.Task[None]] = []
        self.n = 0

    async def connect(
        self, client_id: str, admin: bool = False, sub: str = ""
    ) -> tuple[Session, MemorySocket]:
        socket = MemorySocket()
        assert self.realtime.admit()
        claims = {"sub": sub or client_id}
        session = await self.realtime.open(socket, self.gw, client_id, claims, any_client_id=admin)
        self.served.append(asyncio.create_task(self.realtime.serve(session)))
        await self.settled()  # the new session was fed from its cursor
        return session, socket

    async def settled(self) -> None:
        """Wait until the feed has fed every session it owes a page (those just connected
        included) and is idle."""
        feed = self.realtime.feed
        await until(
            lambda: (
                self.offload.running == 0
                and all(not g.wake.is_set() and not g.due for g in feed._gateways.values())
            )
        )

    def write(
        self, client_id: str, row_id: str, title: str, owner: str = "", *, admin: bool = False
    ) -> None:
        """Push one row and tell the feed, as the push route does (``admin``: with an admin
        token, which the sync rules do not restrict)."""
        self.n += 1
        cols = {"title": title, **({"owner": owner} if owner else {})}
        delta = make_delta(client_id, encode(BASE_MS, self.n), "todos", row_id, cols)
        result = self.sync.push(
            self.gw, client_id, [delta], claims={"sub": client_id}, any_client_ids=admin
        )
        assert not result.refused
        self.realtime.committed(self.gw, result.head)

    async def close(self) -> None:
        await self.realtime.close_all()
        await asyncio.gather(*self.served, return_exceptions=True)


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``check()`` holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


# ---------------------------------------------------------------------- fan-out


def test_one_commit_cuts_one_page_for_every_session_at_its_cursor(gw: str) -> None:
    async def scenario() -> None:
        g = Gateway(gw)
        sockets = [(await g.connect(f"c{i}"))[1] for i in range(50)]
        assert all(not s.sent for s in sockets)  # each was fed from its cursor: nothing yet
        calls = g.offload.calls["feed_pages"]
        g.write("w", "r1", "one")
        await until(lambda: all(s.broadcasts() for s in sockets))
        await g.settled()
        # one worker-thread call cut the pages of all 50
        assert g.offload.calls["feed_pages"] - calls == 1
        assert all(s.sent[0] is sockets[0].sent[0] for s in sockets)  # one page, one encoding
        g.write("w", "r2", "two")
        await until(lambda: all(len(s.broadcasts()) == 2 for s in sockets))
        await g.settled()
        assert g.offload.calls["feed_pages"] - calls == 2
        assert all(s.broadcasts() == [[("r1", "one")], [("r2", "two")]] for s in sockets)
        await g.close()

    run(scenario)


def test_with_filtering_rules_each_session_gets_its_own_view(gw: str) -> None:
    async def scenario() -> None:
        g = Gateway(gw)
        g.sync.save_sync_rules(gw, parse_sync_rules(RULES))
        alice = [(await g.connect("alice"))[1] for _ in range(3)]  # one client, three sockets
        bob = [(await g.connect(f"bob-{i}", sub="bob"))[1] for i in range(20)]  # twenty clients
        calls = g.offload.calls["feed_pages"]
        g.write("alice", "a1", "hers", owner="alice")
        g.write("bob", "b1", "his", owner="bob")
        await until(lambda: all(s.broadcasts() for s in alice + bob))
        await until(lambda: all(len(s.broadcasts()) == 1 for s in bob))
        for s in alice:
            await until(lambda s=s: [r for f in s.broadcasts() for r in f] == [("a1", "hers")])
        assert all(s.broadcasts() == [[("b1", "his")]] for s in bob)  # never alice's row
        # One view (the same claims): one page and one encoding for all its clients.
        assert all(s.sent[0] is alice[0].sent[0] for s in alice)
        assert all(s.sent[0] is bob[0].sent[0] for s in bob)
        assert g.offload.calls["feed_pages"] - calls <= 2  # a call per pass, not per socket
        # The row is handed over (by the service: alice may not write a row out of her own
        # view): it leaves alice's view (a delete) and enters bob's whole.
        g.write("service", "a1", "yours", owner="bob", admin=True)
        await until(lambda: all(("a1", "yours") in s.broadcasts()[-1] for s in bob))
        await until(lambda: all(s.broadcasts()[-1] == [("a1", None)] for s in alice))
        await g.close()

    run(scenario)


@pytest.mark.parametrize("rules", [False, True])
def test_a_failed_cut_closes_its_sessions_with_1013_and_the_feed_goes_on(
    gw: str, rules: bool
) -> None:
    async def scenario() -> None:
        g = Gateway(gw)
        if rules:
            g.sync.save_sync_rules(gw, parse_sync_rules(RULES))
        _, one = await g.connect("one", sub="bob")
        _, two = await g.connect("two", sub="bob")
        g.wal.failing = 1
        g.write("bob", "b1", "his", owner="bob")
        await until(lambda: one.closed_with is not None and two.closed_with is not None)
        assert one.closed_with == two.closed_with == (1013, "Broadcast failed: reconnect")
        _, three = await g.connect("three", sub="bob")  # the gateway's feed still runs
        g.write("bob", "b2", "also his", owner="bob")
        await until(lambda: [r for f in three.broadcasts() for r in f][-1:] == [("b2", "also his")])
        await g.close()

    run(scenario)


# ---------------------------------------------------------------------- sending


def test_a_socket_whose_peer_does_not_read_gets_its_frames_in_order_later(gw: str) -> None:
    async def scenario() -> None:
        g = Gateway(gw)
        _, slow = await g.connect("slow")
        _, fast = await g.connect("fast")
        slow.writable.clear()
        for i in range(3):
            g.write("w", f"r{i}", f"t{i}")
            await until(lambda i=i: len(fast.broadcasts()) == i + 1)  # nobody waits for slow
        assert slow.sent == []
        slow.writable.set()
        await until(lambda: len(slow.broadcasts()) == 3)
        assert slow.broadcasts() == fast.broadcasts() == [[(f"r{i}", f"t{i}")] for i in range(3)]
        g.write("w", "r3", "t3")  # and once it reads again, frames go out at once
        await until(lambda: len(slow.broadcasts()) == 4)
        await g.close()

    run(scenario)


def test_a_session_too_far_behind_is_closed_with_1013_and_holds_no_one_back(gw: str) -> None:
    async def scenario() -> None:
        g = Gateway(gw, send_queue=2)
        _, slow = await g.connect("slow")
        _, fast = await g.connect("fast")
        slow.writable.clear()
        for i in range(6):
            g.write("w", f"r{i}", f"t{i}")
            await until(lambda i=i: len(fast.broadcasts()) == i + 1)
        slow.writable.set()  # the close frame goes out once the peer reads
        await until(lambda: slow.closed_with is not None)
        assert slow.closed_with == (1013, "Too far behind: reconnect and pull")
        assert len(slow.broadcasts()) < 6
        await g.close()

    run(scenario)


def test_a_session_opened_while_a_commit_is_fed_gets_it_without_another_commit(
    gw: str,
) -> None:
    """The socket is accepted before its session joins the feed (its cursor is read on a
    worker thread meanwhile); a commit fed in that gap reaches it all the same."""

    async def scenario() -> None:
        g = Gateway(gw)
        _, other = await g.connect("other")
        g.offload.hold["last_pulled_since"] = opened = asyncio.Event()
        late = MemorySocket()
        assert g.realtime.admit()
        claims = {"sub": "late"}
        opening = asyncio.create_task(
            g.realtime.open(late, gw, "late", claims, any_client_id=False)
        )
        await until(lambda: "last_pulled_since" in g.offload.holding)  # its cursor was read
        g.write("w", "r1", "one")
        await until(lambda: other.broadcasts() == [[("r1", "one")]])  # that commit's pass ran
        opened.set()
        session = await opening
        g.served.append(asyncio.create_task(g.realtime.serve(session)))
        await until(lambda: late.broadcasts() == [[("r1", "one")]], timeout=2.0)
        await g.close()

    run(scenario)


def test_a_client_that_comes_back_behind_is_fed_its_rows_on_connecting(gw: str) -> None:
    async def scenario() -> None:
        g = Gateway(gw)
        g.write("w", "r1", "one")
        g.write("w", "r2", "two")
        _, s = await g.connect("back")  # never pulled: its cursor is the log's start
        await until(
            lambda: [r for f in s.broadcasts() for r in f] == [("r1", "one"), ("r2", "two")]
        )
        await g.close()

    run(scenario)


# ---------------------------------------------------------------------- ordering


def test_a_session_busy_with_a_pull_is_fed_after_it(gw: str) -> None:
    async def scenario() -> None:
        g = Gateway(gw)
        session, s = await g.connect("s")
        _, other = await g.connect("other")
        g.offload.hold["pull"] = held = asyncio.Event()  # the socket's own pull waits
        await s.incoming.put(frame(TAG_SYNC_PULL, encode_sync_pull("s", session.cursor, 100)))
        await until(lambda: "pull" in g.offload.holding)
        g.write("w", "r1", "one")
        await until(lambda: len(other.broadcasts()) == 1)
        assert s.sent == []  # skipped while its handler runs
        held.set()
        await until(lambda: len(s.broadcasts()) == 1)  # fed once its handler is done
        assert len(s.sent) == 2 and s.sent[0][0] != TAG_BROADCAST  # after the pull's reply
        assert s.broadcasts() == [[("r1", "one")]]
        await g.close()

    run(scenario)


@pytest.mark.parametrize("pull_as", ["s", "someone-else"])
def test_a_page_cut_before_a_pull_reply_is_never_sent_after_it(gw: str, pull_as: str) -> None:
    """Whether the pull moves the socket's cursor (its own client id) or not (an admin pulling
    as another client), the page the feed cut before it never follows its reply."""

    async def scenario() -> None:
        g = Gateway(gw)
        session, s = await g.connect("s", admin=True)
        _, other = await g.connect("other")
        g.offload.hold["feed_pages"] = cut_held = asyncio.Event()
        g.write("w", "r1", "old")  # the feed cuts a page with "old" and is held back
        await until(lambda: "feed_pages" in g.offload.holding)
        del g.offload.hold["feed_pages"]
        n = g.n + 1
        newer = make_delta("w", encode(BASE_MS, n), "todos", "r1", {"title": "new"})
        g.n = n
        g.sync.push(gw, "w", [newer])  # committed, not yet fed
        await s.incoming.put(frame(TAG_SYNC_PULL, encode_sync_pull(pull_as, session.cursor, 100)))
        await until(lambda: len(s.sent) == 1)
        deltas, _, _ = decode_sync_response(s.sent[0])
        assert [_title(d) for d in deltas if d.op != "DELETE"] == ["new"]
        cut_held.set()  # the held page ("old") must not reach s after its pull's "new"
        await until(lambda: other.broadcasts() == [[("r1", "old")]])
        if pull_as == "s":
            await asyncio.sleep(0.05)
            assert s.broadcasts() == []  # its cursor is past r1 already: cut again, empty
        else:  # its feed cursor did not move: cut again, r1 comes as it is now
            await until(lambda: s.broadcasts() == [[("r1", "new")]])
        g.realtime.committed(gw, g.sync.head(gw))
        await until(lambda: other.broadcasts()[-1] == [("r1", "new")])
        await asyncio.sleep(0.05)
        assert all(("r1", "old") not in f for f in s.broadcasts())
        await g.close()

    run(scenario)
