"""A fake API server on a real socket: routes as data, calls counted, faults on demand.

A subclass lists its routes (:meth:`FakeServer.routes`: method, path pattern, name, handler);
each request is matched in order and answered by its handler with a :class:`Reply`. Before
routing, an injected :class:`Fault` whose path prefix matches answers instead (``times``
times), so a test can make the next search a 429 with ``Retry-After`` or the next query a 503.
Every answered request is counted under its route's name (:meth:`FakeServer.count`).

The server speaks HTTP/1.1 with keep-alive (a client's connection pool is reused, as against
the real APIs) on ``127.0.0.1`` and a free port, in daemon threads; ``with`` starts and stops it.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import msgspec

__all__ = ["FakeServer", "Fault", "Reply", "Request", "Route", "json_reply"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True, slots=True)
class Request:
    """One request as a handler sees it: ``match`` holds the route pattern's groups."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    match: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body as JSON (``None`` when empty)."""
        return _decode(self.body) if self.body else None

    def form(self) -> dict[str, str]:
        """The body as an ``application/x-www-form-urlencoded`` form."""
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer: status, body bytes, content type and extra headers."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


def json_reply(status: int, doc: Any, headers: Mapping[str, str] | None = None) -> Reply:
    """A JSON answer."""
    return Reply(status, _encode(doc), headers=dict(headers or {}))


@dataclass
class Fault:
    """Answer requests whose path starts with ``prefix`` (and of ``method``, if given) with
    ``status`` ``times`` times."""

    prefix: str
    status: int
    times: int = 1
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    method: str | None = None


Handler = Callable[[Request], Reply]


@dataclass(frozen=True, slots=True)
class Route:
    """``method`` requests whose path matches ``pattern`` (whole) go to ``handler``."""

    method: str
    pattern: re.Pattern[str]
    name: str
    handler: Handler


class _QuietServer(ThreadingHTTPServer):
    """A threaded server that lets a client vanish mid-request (a poll killed by a test)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a connection the client dropped; report anything else as usual."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeServer:
    """Base of the fakes: serving, routing, counting and faults (see the module docstring)."""

    name = "fake"

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.faults: list[Fault] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._routes: list[Route] = []

    # ------------------------------------------------------------------ subclass API

    def routes(self) -> list[Route]:
        """Every route, matched in order."""
        return []

    @staticmethod
    def route(method: str, pattern: str, name: str, handler: Handler) -> Route:
        """A :class:`Route` (``pattern`` a regular expression with named groups)."""
        return Route(method, re.compile(pattern), name, handler)

    def authorised(self, request: Request) -> Reply | None:
        """``None`` when the request may be answered, else the refusal (default: open)."""
        return None

    def decorate(self, request: Request, route: Route, reply: Reply) -> Reply:
        """A last look at every routed answer (e.g. to add quota headers)."""
        return reply

    # ------------------------------------------------------------------ test API

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:<port>``)."""
        if self._httpd is None:
            raise RuntimeError(f"{self.name} is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def fail(
        self,
        prefix: str,
        status: int,
        *,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        method: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests under ``prefix`` with ``status``."""
        with self.lock:
            self.faults.append(Fault(prefix, status, times, dict(headers or {}), body, method))

    def count(self, name: str) -> int:
        """Requests answered by route ``name`` (faults are counted as ``fault``)."""
        with self.lock:
            return self.calls[name]

    def start(self) -> Self:
        """Listen and serve in a daemon thread."""
        self._routes = self.routes()
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                request = Request(self.command, parts.path, query, dict(self.headers), body)
                reply = server.dispatch(request)
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.status != 204:
                    self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                """Quiet: tests read counts, not logs."""

        self._httpd = _QuietServer(("127.0.0.1", self._port), _Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.name}-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self if self._httpd is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, request: Request) -> Reply:
        """Answer one request: an injected fault, a refusal, a route, or 404."""
        fault = self._take_fault(request)
        if fault is not None:
            with self.lock:
                self.calls["fault"] += 1
            body = _encode(fault.body) if fault.body is not None else b""
            return Reply(fault.status, body, headers=dict(fault.headers))
        for route in self._routes:
            if route.method != request.method:
                continue
            match = route.pattern.fullmatch(request.path)
            if match is None:
                continue
            refused = self.authorised(request)
            if refused is not None:
                with self.lock:
                    self.calls["refused"] += 1
                return refused
            routed = Request(
                request.method,
                request.path,
                request.query,
                request.headers,
                request.body,
                {k: v for k, v in match.groupdict().items() if v is not None},
            )
            with self.lock:
                self.calls[route.name] += 1
            try:
                reply = route.handler(routed)
            except msgspec.DecodeError:
                reply = json_reply(400, {"error": "malformed JSON body"})
            return self.decorate(routed, route, reply)
        return json_reply(404, {"errorMessages": [f"No route for {request.method} {request.path}"]})

    def _take_fault(self, request: Request) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if request.path.startswith(fault.prefix) and fault.method in (
                    None,
                    request.method,
                ):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None


class Stamps:
    """Strictly increasing epoch-millisecond stamps from ``clock`` (two changes never share a
    stamp, so ordering by stamp is total, as the APIs' modification times are in practice)."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._last = 0

    def __call__(self) -> int:
        self._last = max(self._clock(), self._last + 1)
        return self._last


def iter_chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size``."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
