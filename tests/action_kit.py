"""External systems for the action tests: a webhook server on a real socket that counts what it
receives, an SQLite database for the ``sql`` connector, the defs declaring both, and a gateway
process started with them."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lakesync_platform.testing import GatewayProcess
from tests.helpers import SECRET

GW = "acts"

DEFS = """
gateway: acts
destinations:
  - name: ops
    kind: sqlite
    url: "sqlite:///${LAKESYNC_DATA_DIR}/ops.db"
actions:
  - connector: hooks
    kind: webhook
    url: "http://127.0.0.1:${HOOK_PORT}/ok"
    retries: 0
    types:
      notify:
        description: Post a note to the hook
        params:
          text: {type: string}
          urgent: {type: boolean, required: false}
  - connector: slow
    kind: webhook
    url: "http://127.0.0.1:${HOOK_PORT}/slow"
    types:
      notify: {description: Post slowly}
  - connector: flaky
    kind: webhook
    url: "http://127.0.0.1:${HOOK_PORT}/flaky"
    retries: 0
    types:
      notify: {description: "Fails once per action, then succeeds"}
  - connector: strict
    kind: webhook
    url: "http://127.0.0.1:${HOOK_PORT}/reject"
    types:
      notify: {description: Always refuses}
  - connector: notes
    kind: sql
    destination: ops
    types:
      add:
        description: Insert a note
        statement: >-
          INSERT INTO notes (action_id, body, author)
          VALUES (:lakesync_action_id, :body, :lakesync_client_id)
          RETURNING action_id
        params:
          body: {type: string}
"""


@dataclass
class Hook:
    """An HTTP server on a real socket that records every request it receives: ``/ok``
    answers at once, ``/slow`` after 0.5 s, ``/flaky`` 503 to the first request of each
    ``Idempotency-Key``, ``/reject`` 422."""

    server: ThreadingHTTPServer
    received: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server.server_address[1])

    def count(self, path: str | None = None, key: str | None = None) -> int:
        with self.lock:
            return sum(
                1
                for p, k, _ in self.received
                if (path is None or p == path) and (key is None or k == key)
            )


@contextmanager
def serve_hook() -> Iterator[Hook]:
    """A :class:`Hook` serving on a free loopback port until the block ends."""
    state: dict[str, Hook] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's naming
            hook = state["hook"]
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = self.headers["Idempotency-Key"]
            with hook.lock:
                hook.received.append((self.path, key, body))
                seen = sum(1 for p, k, _ in hook.received if p == self.path and k == key)
            if self.path == "/slow":
                time.sleep(0.5)
            status = 200
            if self.path == "/reject":
                status = 422
            elif self.path == "/flaky" and seen == 1:
                status = 503
            payload = json.dumps({"received": seen, "params": body["params"]}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["hook"] = Hook(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["hook"]
    finally:
        server.shutdown()
        server.server_close()


def prepare(data_dir: Path) -> Path:
    """The defs folder and the ``ops`` database the ``notes`` connector writes to."""
    defs = data_dir / "defs"
    defs.mkdir(parents=True, exist_ok=True)
    (defs / "actions.yaml").write_text(DEFS)
    with sqlite3.connect(data_dir / "ops.db") as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS notes (action_id TEXT PRIMARY KEY, body TEXT, author TEXT)"
        )
    return defs


def start(
    data_dir: Path, hook: Hook, wal_url: str | None = None, *args: str, port: int | None = None
) -> GatewayProcess:
    """A gateway process serving the declared connectors (on ``port``, if given)."""
    defs = prepare(data_dir)
    process = GatewayProcess(
        data_dir,
        SECRET,
        wal_url=wal_url,
        extra_args=["--defs", str(defs), *args],
        env={"HOOK_PORT": str(hook.port)},
    )
    if port is not None:
        process.port = port
    return process.start()
