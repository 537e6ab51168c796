"""A gateway drains on SIGTERM (``gateway/drain.py``): readiness fails at once, everything
else is served for ``--drain-seconds``, then its WebSockets close with 1001 and it exits."""

from __future__ import annotations

import json
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from lakesync_platform.core.hlc import encode
from lakesync_platform.testing import GatewayProcess
from tests.gateway.test_e2e import wall_ms
from tests.helpers import SECRET, make_delta, token, wire

DRAIN_SECONDS = 2.5
SERVED_FOR = 1.0
"""How long the test asks during the drain: well inside it, also when a request is slow."""
PUSH = "/v1/sync/gw1/push"


def test_sigterm_fails_readiness_keeps_serving_then_closes_sockets_going_away(
    tmp_path: Path,
) -> None:
    """One process here; ``test_balancer`` restarts a two-worker gateway too (the workers'
    supervisor passes SIGTERM on to each worker, which drains)."""
    gateway = GatewayProcess(
        tmp_path, SECRET, extra_args=["--drain-seconds", str(DRAIN_SECONDS)]
    ).start()
    closes: list[int | None] = []
    stack = ExitStack()
    try:
        sockets = [
            stack.enter_context(
                connect(f"ws://127.0.0.1:{gateway.port}/v1/sync/gw1/ws?token={token(c, 'gw1')}")
            )
            for c in ("c0", "c1")
        ]

        def read(ws: ClientConnection) -> None:
            try:
                while True:
                    ws.recv()
            except ConnectionClosed:
                closes.append(ws.close_code)

        readers = [threading.Thread(target=read, args=(ws,), daemon=True) for ws in sockets]
        for th in readers:
            th.start()
        time.sleep(0.5)  # the sessions are open

        assert gateway.proc is not None
        gateway.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        time.sleep(0.2)
        answers = []
        while time.monotonic() - sent < SERVED_FOR:
            answers.append(gateway.request("GET", "/ready", timeout=5)[0])
            answers.append(gateway.request("GET", "/health", timeout=5)[0])
            delta = make_delta("c0", encode(wall_ms(), 0), "todos", f"r{len(answers)}", {"a": 1})
            body = json.dumps({"clientId": "c0", "deltas": [wire(delta)]}).encode()
            answers.append(gateway.request("POST", PUSH, body, token("c0", "gw1"))[0])
            time.sleep(0.1)
        assert answers[0::3] == [503] * len(answers[0::3])  # not ready from the signal on
        assert set(answers[1::3]) == {200} and set(answers[2::3]) == {200}  # all else served
        assert closes == []  # sockets stay open while the balancer takes notice

        assert gateway.proc.wait(30) is not None
        for th in readers:
            th.join(10)
        assert closes == [1001] * len(sockets)
        assert time.monotonic() - sent >= DRAIN_SECONDS
    finally:
        stack.close()
        gateway.stop()
