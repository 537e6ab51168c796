"""WebSocket receivers in processes of their own, for broadcast-latency measurements.

A :class:`Receivers` pool starts ``count`` processes; each holds a share of the sockets on its
own event loop, so the gateway under test keeps its loop (and its GIL) to itself and no one
process queues a thousand frames behind each other. Times are ``time.monotonic_ns()``:
``CLOCK_MONOTONIC`` is one clock for the whole machine on Linux, so a receiver's arrival time
and the pushing process's acknowledgement time can be subtracted.

A round: :meth:`Receivers.expect` tells every receiver the bytes that mark this round's
broadcast (the pushed row's id, unique per round) and, when sync rules filter what each socket
sees, which sockets must receive it; it waits until each receiver is ready; the caller pushes;
:meth:`Receivers.collect` returns, per expected socket, when the first ``0x03`` frame carrying
those bytes arrived. A socket that was not expected and receives such a frame counts as a leak
(:meth:`Receivers.close_sockets` returns the count).

The client is a minimal one written here (the opening handshake, unmasked server frames,
masked pong and close replies, optional per-message deflate): the time is read as the bytes
come off the socket, before any parsing, and a frame costs a few microseconds to recognise —
a full client (``websockets``) spends several times that per frame, on the same two cores as
the gateway it measures. This module imports nothing of the product, so the receiver processes
start fast.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import multiprocessing
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, cast

__all__ = ["Pusher", "Receivers"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TAG_BROADCAST = 0x03
_OP_CONT, _OP_BINARY, _OP_CLOSE, _OP_PING = 0x0, 0x2, 0x8, 0x9
_OP_PONG = 0xA
_DEFLATE_TAIL = b"\x00\x00\xff\xff"


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (RFC 6455 §5.3) of ``payload``."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack("!H", n)
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack("!Q", n)
    repeated = (mask * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")
    return head + mask + masked


def _upgrade_request(port: int, path: str, deflate: bool) -> tuple[bytes, bytes]:
    """The opening handshake's request for ``path`` and its ``Sec-WebSocket-Key``."""
    key = base64.b64encode(os.urandom(16))
    ext = (
        b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
        if deflate
        else b""
    )
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    ).encode()
    return head + b"Sec-WebSocket-Key: " + key + b"\r\n" + ext + b"\r\n", key


class _Wire:
    """The client side of one connection without I/O: bytes in, messages and replies out."""

    def __init__(self, key: bytes) -> None:
        self.expected_accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
        self.buffer = b""
        self.handshaken = False
        self.inflater: Any = None
        self.reset_inflater = False
        self.wbits = 15
        self.fragments: list[bytes] = []
        self.compressed = False
        self.closed = False
        self.replies: list[bytes] = []
        """Frames to send back (pongs, the close reply)."""

    def receive(self, data: bytes) -> list[bytes]:
        """Take bytes off the socket; the complete messages they finish. Raises
        ``ConnectionError`` if the handshake fails."""
        self.buffer += data
        if not self.handshaken:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return []
            head, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
            self._handshake(head)
        return self._frames()

    def _handshake(self, head: str) -> None:
        lines = head.split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if not lines[0].startswith("HTTP/1.1 101"):
            raise ConnectionError(f"upgrade refused: {lines[0]}")
        if headers.get("sec-websocket-accept", "").encode() != self.expected_accept:
            raise ConnectionError("bad Sec-WebSocket-Accept")
        ext = headers.get("sec-websocket-extensions", "")
        if ext.startswith("permessage-deflate"):
            params = {p.split("=")[0].strip(): p.partition("=")[2] for p in ext.split(";")[1:]}
            self.wbits = int(params.get("server_max_window_bits") or 15)
            self.inflater = zlib.decompressobj(-self.wbits)
            self.reset_inflater = "server_no_context_takeover" in params
        self.handshaken = True

    def _frames(self) -> list[bytes]:
        out: list[bytes] = []
        buf = self.buffer
        pos = 0
        while len(buf) - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if len(buf) - pos < 4:
                    break
                (length,) = struct.unpack_from("!H", buf, pos + 2)
                head = 4
            elif length == 127:
                if len(buf) - pos < 10:
                    break
                (length,) = struct.unpack_from("!Q", buf, pos + 2)
                head = 10
            if len(buf) - pos < head + length:
                break
            payload = buf[pos + head : pos + head + length]
            pos += head + length
            message = self._frame(b0, payload)
            if message is not None:
                out.append(message)
        self.buffer = buf[pos:]
        return out

    def _frame(self, b0: int, payload: bytes) -> bytes | None:
        opcode = b0 & 0x0F
        if opcode == _OP_PING:
            self.replies.append(_client_frame(_OP_PONG, payload))
            return None
        if opcode == _OP_CLOSE:
            if not self.closed:
                self.replies.append(_client_frame(_OP_CLOSE, payload[:2]))
                self.closed = True
            return None
        if opcode == _OP_PONG:
            return None
        if opcode != _OP_CONT:
            self.compressed = bool(b0 & 0x40)
        self.fragments.append(payload)
        if not b0 & 0x80:
            return None
        data = b"".join(self.fragments) if len(self.fragments) > 1 else self.fragments[0]
        self.fragments = []
        if self.compressed:
            data = self.inflater.decompress(data + _DEFLATE_TAIL)
            if self.reset_inflater:
                self.inflater = zlib.decompressobj(-self.wbits)
        return data


class _Client(asyncio.Protocol):
    """One socket of a receiver: every message is handed to ``on_message`` with the monotonic
    time at which the bytes that completed it were read."""

    def __init__(
        self, request: bytes, key: bytes, on_message: Callable[[_Client, bytes, int], None]
    ) -> None:
        self.request = request
        self.wire = _Wire(key)
        self.on_message = on_message
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.index = -1
        """The socket's place in its receiver's round."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        self.wire.closed = True
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(f"connection lost in handshake: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        try:
            messages = self.wire.receive(data)
        except ConnectionError as exc:
            if not self.opened.done():
                self.opened.set_exception(exc)
            assert self.transport is not None
            self.transport.close()
            return
        if self.wire.handshaken and not self.opened.done():
            self.opened.set_result(None)
        for message in messages:
            self.on_message(self, message, now)
        if self.wire.replies:
            self._write(b"".join(self.wire.replies))
            self.wire.replies = []

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        """Send a close frame (1000) and drop the connection."""
        if not self.wire.closed:
            self._write(_client_frame(_OP_CLOSE, struct.pack("!H", 1000)))
            self.wire.closed = True
        if self.transport is not None:
            self.transport.close()


class Pusher:
    """A blocking socket that sends frames and reads messages with their arrival time
    (``monotonic_ns``), read the same way as the receivers read theirs."""

    def __init__(self, port: int, path: str) -> None:
        request, key = _upgrade_request(port, path, False)
        self.wire = _Wire(key)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(request)
        self.messages: list[tuple[bytes, int]] = []
        while not self.wire.handshaken:
            self._read()

    def _read(self) -> None:
        data = self.sock.recv(1 << 16)
        now = time.monotonic_ns()
        if not data:
            raise ConnectionError("the gateway closed the pusher's connection")
        self.messages += [(m, now) for m in self.wire.receive(data)]
        if self.wire.replies:
            self.sock.sendall(b"".join(self.wire.replies))
            self.wire.replies = []

    def send(self, data: bytes) -> None:
        """Send one binary message."""
        self.sock.sendall(_client_frame(_OP_BINARY, data))

    def recv(self) -> tuple[bytes, int]:
        """The next message and when it arrived."""
        while not self.messages:
            self._read()
        return self.messages.pop(0)

    def close(self) -> None:
        """Send a close frame and drop the connection."""
        with contextlib.suppress(OSError):
            self.sock.sendall(_client_frame(_OP_CLOSE, struct.pack("!H", 1000)))
        self.sock.close()


class _Receiver:
    """The sockets of one receiver process and the round it waits for."""

    def __init__(self, conn: Connection, port: int) -> None:
        self.conn = conn
        self.port = port
        self.clients: list[_Client] = []
        self.needle = b""
        self.times: list[int] = []
        self.expected: list[bool] = []
        self.remaining = 0
        self.leaks = 0
        self.stopped = asyncio.get_running_loop().create_future()

    def on_message(self, client: _Client, data: bytes, now: int) -> None:
        if not data or data[0] != _TAG_BROADCAST or not self.needle or self.needle not in data:
            return
        i = client.index
        if i < 0:
            return
        if not self.expected[i]:
            self.leaks += 1  # a frame of a row outside this socket's view
        elif self.times[i] == 0:
            self.times[i] = now
            self.remaining -= 1
            if self.remaining == 0:
                self._done()

    def _done(self) -> None:
        self.conn.send(("done", [t for t, e in zip(self.times, self.expected, strict=True) if e]))

    async def open(self, paths: Sequence[str], deflate: bool) -> None:
        loop = asyncio.get_running_loop()
        for start in range(0, len(paths), 100):
            batch: list[_Client] = []
            for path in paths[start : start + 100]:
                request, key = _upgrade_request(self.port, path, deflate)
                client = _Client(request, key, self.on_message)
                await asyncio.wait_for(
                    loop.create_connection(lambda c=client: c, "127.0.0.1", self.port),  # type: ignore[misc]
                    30,
                )
                batch.append(client)
            await asyncio.wait_for(asyncio.gather(*(c.opened for c in batch)), 60)
            for c in batch:
                c.index = len(self.clients)
                self.clients.append(c)

    def close_all(self) -> None:
        for c in self.clients:
            c.index = -1
            c.close()
        self.clients = []

    def on_command(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "open":
            task = asyncio.ensure_future(self.open(message[1], message[2]))
            task.add_done_callback(self._opened)
        elif kind == "round":
            self.needle = message[1]
            only: set[int] | None = message[2]
            n = len(self.clients)
            self.expected = [only is None or i in only for i in range(n)]
            self.times = [0] * n
            self.remaining = sum(self.expected)
            self.conn.send(("ready",))
            if self.remaining == 0:  # none of this receiver's sockets sees the row
                self._done()
        elif kind == "status":
            self.conn.send(("status", sum(1 for t in self.times if t), len(self.clients)))
        elif kind == "close":
            lost = sum(1 for c in self.clients if c.wire.closed)  # closed by the gateway
            self.close_all()
            self.conn.send(("closed", self.leaks, lost))
            self.leaks = 0
        elif kind == "stop" and not self.stopped.done():
            self.close_all()
            self.stopped.set_result(None)

    def _opened(self, task: asyncio.Future[None]) -> None:
        exc = task.exception()
        if exc is not None:
            self.close_all()
            self.conn.send(("failed", repr(exc)))
        else:
            self.conn.send(("opened", len(self.clients)))


async def _serve(conn: Connection, port: int) -> None:
    receiver = _Receiver(conn, port)
    loop = asyncio.get_running_loop()

    def read_commands() -> None:
        # A thread of its own: the loop's add_reader would make the pipe non-blocking, and a
        # long command arrives in several reads.
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = ("stop",)
            loop.call_soon_threadsafe(receiver.on_command, message)
            if message[0] == "stop":
                return

    reader = threading.Thread(target=read_commands, daemon=True)
    reader.start()
    await receiver.stopped
    await asyncio.sleep(0.2)  # let the close frames leave


def _main(conn: Connection, port: int) -> None:
    """A receiver process: serve the parent's commands on ``conn`` until told to stop."""
    try:
        import uvloop  # the gateway's loop too; the cheapest asyncio loop here
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        asyncio.run(_serve(conn, port))
    else:
        uvloop.run(_serve(conn, port))


class Receivers:
    """``count`` receiver processes for the sockets of a gateway on ``port`` of 127.0.0.1."""

    def __init__(self, count: int, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_main, args=(child, port), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    @property
    def pids(self) -> list[int]:
        """The receiver processes' ids."""
        return [p.pid for p in self.procs]

    def _answers(self, kind: str, timeout: float) -> list[tuple[Any, ...]]:
        """One answer from every receiver; raises if one says ``failed`` or is late."""
        out: dict[int, tuple[Any, ...]] = {}
        deadline = time.monotonic() + timeout
        while len(out) < len(self.conns):
            pending = [c for i, c in enumerate(self.conns) if i not in out]
            ready = wait(pending, max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError(f"{len(pending)} receivers gave no {kind!r} in {timeout} s")
            for c in ready:
                assert isinstance(c, Connection)
                answer = c.recv()
                if answer[0] == "failed":
                    raise RuntimeError(f"a receiver failed: {answer[1]}")
                if answer[0] != kind:
                    raise RuntimeError(f"a receiver answered {answer!r}, not {kind!r}")
                out[self.conns.index(c)] = answer
        return [out[i] for i in range(len(self.conns))]

    def open(self, paths: Sequence[str], deflate: bool) -> None:
        """Open one socket per path (``/v1/sync/…/ws?token=…``), shared out round-robin."""
        for i, conn in enumerate(self.conns):
            conn.send(("open", list(paths[i :: len(self.conns)]), deflate))
        self._answers("opened", 120)

    def expect(self, needle: bytes, only: Sequence[int] | None = None) -> None:
        """Start a round: the next ``0x03`` frame containing ``needle`` on each socket, or on
        the sockets ``only`` (their places in the list :meth:`open` was given)."""
        count = len(self.conns)
        for r, conn in enumerate(self.conns):
            mine = None if only is None else {i // count for i in only if i % count == r}
            conn.send(("round", needle, mine))
        self._answers("ready", 30)

    def collect(self, timeout: float) -> list[int]:
        """Every expected socket's arrival time (``monotonic_ns``) of this round's broadcast."""
        try:
            answers = self._answers("done", timeout)
        except TimeoutError:
            for conn in self.conns:
                conn.send(("status",))
            got = sum(a[1] for a in self._status())
            raise RuntimeError(f"{got} sockets got the broadcast in {timeout} s") from None
        return [t for a in answers for t in a[1]]

    def _status(self) -> list[tuple[Any, ...]]:
        out = []
        for conn in self.conns:
            while True:
                answer = conn.recv()
                if answer[0] == "status":
                    out.append(answer)
                    break
        return out

    def close_sockets(self) -> tuple[int, int]:
        """Close every socket (the processes stay); how many frames of a round reached a
        socket that was not expected, and how many sockets the gateway had closed, since the
        sockets were opened."""
        for conn in self.conns:
            conn.send(("close",))
        answers = self._answers("closed", 60)
        return sum(a[1] for a in answers), sum(a[2] for a in answers)

    def stop(self) -> None:
        """Close the sockets and end the processes."""
        for conn in self.conns:
            with contextlib.suppress(OSError):  # already stopped
                conn.send(("stop",))
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
