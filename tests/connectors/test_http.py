"""The HTTP session sources are given, against a local server on a real socket: retries on
429/503 after Retry-After, 5xx backoff, bounded tries, timeouts, re-authentication on 401, and
declarative endpoints paging by token and by URL."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from lakesync_platform.connectors.http import (
    Endpoint,
    HttpSettings,
    NextToken,
    NextUrl,
    RestStream,
    SourceSession,
    session_factory,
)
from lakesync_platform.connectors.model import Change

Handler = Callable[[BaseHTTPRequestHandler, dict[str, Any]], tuple[int, dict[str, str], Any]]


class Server:
    """A scripted HTTP server: ``script[path]`` answers each request (status, headers, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.hits: list[tuple[str, str, dict[str, Any]]] = []
        server = self

        class _H(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                path = self.path.split("?")[0]
                server.hits.append((self.command, self.path, body))
                status, headers, doc = server.routes[path](self, body)
                payload = json.dumps(doc).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


FAST = HttpSettings(timeout_s=2.0, tries=3, backoff_s=0.01, backoff_max_s=0.05)


def sequence(*answers: tuple[int, dict[str, str], Any]) -> Handler:
    """Answer with ``answers`` in turn, then repeat the last one."""
    it = iter(answers)
    last: list[tuple[int, dict[str, str], Any]] = []

    def handle(_h: BaseHTTPRequestHandler, _b: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        nxt = next(it, None)
        if nxt is not None:
            last[:] = [nxt]
        return last[0]

    return handle


def test_429_is_retried_after_its_retry_after(server: Server) -> None:
    server.routes["/x"] = sequence((429, {"Retry-After": "1"}, {}), (200, {}, {"ok": True}))
    session = session_factory(FAST)(None)
    started = time.monotonic()
    resp = session.get(server.url + "/x")
    assert resp.status_code == 200 and resp.json() == {"ok": True}
    assert time.monotonic() - started >= 0.9  # waited the Retry-After, not the short backoff
    assert len(server.hits) == 2 and session.calls == 2


def test_503_and_500_are_retried_a_bounded_number_of_times(server: Server) -> None:
    server.routes["/x"] = sequence((503, {"Retry-After": "0"}, {}), (500, {}, {}))
    resp = session_factory(FAST)(None).get(server.url + "/x")
    assert resp.status_code == 500  # gave up after FAST.tries tries, answering the last one
    assert len(server.hits) == FAST.tries
    with pytest.raises(requests.HTTPError):
        resp.raise_for_status()


def test_requests_time_out(server: Server) -> None:
    def slow(_h: BaseHTTPRequestHandler, _b: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        time.sleep(0.5)
        return 200, {}, {}

    server.routes["/slow"] = slow
    session = SourceSession(HttpSettings(timeout_s=0.1, tries=1))
    with pytest.raises(requests.ConnectionError):  # a read timeout, after the bounded tries
        session.get(server.url + "/slow")


class TokenAuth:
    """Hands out token-1, token-2, …: each call is one login."""

    def __init__(self) -> None:
        self.logins = 0

    def authenticate(self, session: requests.Session) -> None:
        self.logins += 1
        session.headers["Authorization"] = f"Bearer token-{self.logins}"


def test_a_401_re_authenticates_once_and_repeats_the_request(server: Server) -> None:
    def guarded(h: BaseHTTPRequestHandler, _b: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        if h.headers["Authorization"] != "Bearer token-2":
            return 401, {}, {"error": "expired"}
        return 200, {}, {"ok": True}

    server.routes["/me"] = guarded
    auth = TokenAuth()
    session = session_factory(FAST)(auth)
    assert session.get(server.url + "/me").json() == {"ok": True}
    assert auth.logins == 2
    auth_forever = TokenAuth()
    server.routes["/me"] = sequence((401, {}, {}))
    assert session_factory(FAST)(auth_forever).get(server.url + "/me").status_code == 401
    assert auth_forever.logins == 2  # one re-authentication, not a loop


def test_an_endpoint_pages_by_token_in_the_body(server: Server) -> None:
    pages = {
        None: {"issues": [{"key": "A-1"}, {"key": "A-2"}], "nextPageToken": "t2"},
        "t2": {"issues": [{"key": "A-3"}], "nextPageToken": "t3", "isLast": True},
    }
    server.routes["/search"] = lambda _h, body: (200, {}, pages[body.get("nextPageToken")])
    endpoint = Endpoint(
        "/search", "POST", json={"jql": "x"}, records_path=("issues",), paginator=NextToken()
    )
    got = list(endpoint.pages(session_factory(FAST)(None), server.url))
    assert got == [[{"key": "A-1"}, {"key": "A-2"}], [{"key": "A-3"}]]
    assert [b for _, _, b in server.hits] == [{"jql": "x"}, {"jql": "x", "nextPageToken": "t2"}]


def test_a_rest_stream_pages_by_url_with_a_pure_mapping_and_state(server: Server) -> None:
    server.routes["/query"] = sequence(
        (200, {}, {"records": [{"Id": "1", "Ts": "a"}], "done": False, "nextRecordsUrl": "/q2"})
    )
    server.routes["/q2"] = sequence((200, {}, {"records": [{"Id": "2", "Ts": "b"}], "done": True}))
    stream = RestStream(
        name="accounts",
        table="sf_accounts",
        session=session_factory(FAST)(None),
        base_url=server.url,
        endpoint_for=lambda state: Endpoint(
            "/query", params={"since": state.get("ts", "")}, paginator=NextUrl()
        ),
        to_change=lambda r: Change(r["Id"], {"ts": r["Ts"]}),
        next_state=lambda state, records: {
            "ts": max([state.get("ts", ""), *(r["Ts"] for r in records)])
        },
    )
    pages = list(stream.pages({"ts": "0"}))
    assert [[c.row_id for c in p.changes] for p in pages] == [["1"], ["2"]]
    assert [p.state for p in pages] == [{"ts": "a"}, {"ts": "b"}]
    assert server.hits[0][1] == "/query?since=0"
