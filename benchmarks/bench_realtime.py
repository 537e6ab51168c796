"""The realtime feed: broadcast fan-out latency, and push over the WebSocket against HTTP.

Starts one gateway process (``lakesync gateway``, SQLite WAL in a temporary data directory)
and measures, in one run:

* **fan-out latency** for N = 10 and 100 connected sockets (``--fanout``): one more socket
  pushes a row at a time (``--pushes``, sequentially, each after every socket got the previous
  one); for every receiving socket the time from sending the push to the broadcast frame that
  carries the row, and from the push's acknowledgement to that frame — p50 and p99 over all
  deliveries;
* **push throughput**: ``--throughput`` pushes of one delta each, sent one after the other,
  over one WebSocket and over one HTTP keep-alive connection, on gateway ids without sockets.

Prints a table and writes ``benchmarks/results/realtime.json`` (``--out``).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_realtime.py                        # ~1 min
    .venv/bin/python benchmarks/bench_realtime.py --fanout 10 100 1000 --pushes 50
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import httpx
from websockets.asyncio.client import ClientConnection, connect

from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import git_info
from benchmarks.harness.stats import pct
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.proto import (
    TAG_BROADCAST,
    TAG_SYNC_PUSH,
    decode_sync_response,
    encode_sync_push,
    frame,
)
from lakesync_platform.core.wire import delta_to_wire
from lakesync_platform.testing import GatewayProcess, dev_token

SECRET = "bench-realtime-secret"


def make_delta(client: str, row_id: str, n: int) -> RowDelta:
    """A one-row insert stamped now."""
    hlc = encode(time.time_ns() // 1_000_000, n & 0xFFFF)
    cols = (ColumnDelta("title", f"row {row_id}"), ColumnDelta("n", n))
    return RowDelta(
        "INSERT", "todos", row_id, client, cols, hlc, delta_id(client, hlc, "todos", row_id, cols)
    )


def socket_url(proc: GatewayProcess, gw: str, sub: str) -> str:
    """The socket of ``sub`` on ``gw``."""
    return f"ws://127.0.0.1:{proc.port}/v1/sync/{gw}/ws?token={dev_token(sub, gw, SECRET)}"


async def receive(ws: ClientConnection, arrivals: dict[str, float]) -> None:
    """Record when each row first arrives by broadcast."""
    async for message in ws:
        now = time.perf_counter()
        assert isinstance(message, bytes)
        if message[0] != TAG_BROADCAST:
            continue
        for d in decode_sync_response(message[1:])[0]:
            arrivals.setdefault(d.row_id, now)


async def fanout(proc: GatewayProcess, n: int, pushes: int) -> dict[str, Any]:
    """Latencies of ``pushes`` broadcasts to ``n`` sockets."""
    gw = f"fanout{n}"
    sockets = [await connect(socket_url(proc, gw, f"r{i}"), max_size=None) for i in range(n)]
    arrivals: list[dict[str, float]] = [{} for _ in sockets]
    tasks = [asyncio.create_task(receive(ws, a)) for ws, a in zip(sockets, arrivals, strict=True)]
    from_send: list[float] = []
    from_ack: list[float] = []
    async with connect(socket_url(proc, gw, "pusher"), max_size=None) as pusher:
        for k in range(pushes):
            row = f"p{k}"
            data = frame(
                TAG_SYNC_PUSH, encode_sync_push("pusher", [make_delta("pusher", row, k)], 0)
            )
            sent = time.perf_counter()
            await pusher.send(data)
            while True:
                reply = await pusher.recv()
                assert isinstance(reply, bytes)
                if reply[0] != TAG_BROADCAST:
                    break
            acked = time.perf_counter()
            deadline = acked + 30
            while not all(row in a for a in arrivals):
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"broadcast of {row} did not reach every socket")
                await asyncio.sleep(0.001)
            for a in arrivals:
                from_send.append((a[row] - sent) * 1000)
                from_ack.append(max(a[row] - acked, 0.0) * 1000)
    for task in tasks:
        task.cancel()
    for ws in sockets:
        await ws.close()
    return {
        "sockets": n,
        "pushes": pushes,
        "deliveries": len(from_send),
        "from_send_ms": {"p50": pct(from_send, 50), "p99": pct(from_send, 99)},
        "from_ack_ms": {"p50": pct(from_ack, 50), "p99": pct(from_ack, 99)},
    }


async def ws_throughput(proc: GatewayProcess, count: int) -> float:
    """Sequential one-delta pushes per second over one socket."""
    async with connect(socket_url(proc, "tput_ws", "w"), max_size=None) as ws:
        started = time.perf_counter()
        for k in range(count):
            await ws.send(
                frame(TAG_SYNC_PUSH, encode_sync_push("w", [make_delta("w", f"t{k}", k)], 0))
            )
            while (await ws.recv())[0] == TAG_BROADCAST:
                pass
        return count / (time.perf_counter() - started)


def http_throughput(proc: GatewayProcess, count: int) -> float:
    """Sequential one-delta pushes per second over one HTTP keep-alive connection."""
    gw = "tput_http"
    headers = {"Authorization": "Bearer " + dev_token("h", gw, SECRET)}
    with httpx.Client(base_url=proc.url, headers=headers) as http:
        started = time.perf_counter()
        for k in range(count):
            body = {"clientId": "h", "deltas": [delta_to_wire(make_delta("h", f"t{k}", k))]}
            response = http.post(f"/v1/sync/{gw}/push", json=body)
            assert response.status_code == 200, response.text
        return count / (time.perf_counter() - started)


def main() -> None:
    """Run both measurements and report them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fanout", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--pushes", type=int, default=30)
    parser.add_argument("--throughput", type=int, default=500)
    parser.add_argument("--out", type=Path, default=RESULTS / "realtime.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-realtime-") as tmp:
        connections = str(max(args.fanout) + 10)
        proc = GatewayProcess(
            Path(tmp) / "gw",
            SECRET,
            # The throughput run sends far more than the default 50 messages/s per socket.
            extra_args=["--ws-max-connections", connections, "--ws-rate-limit", "1000000"],
        ).start()
        try:
            fan = []
            for n in args.fanout:
                log(f"fan-out to {n} sockets, {args.pushes} pushes")
                fan.append(asyncio.run(fanout(proc, n, args.pushes)))
            log(f"push throughput, {args.throughput} pushes each way")
            http_rate = http_throughput(proc, args.throughput)
            ws_rate = asyncio.run(ws_throughput(proc, args.throughput))
        finally:
            proc.stop()

    print(
        table(
            [
                "sockets",
                "p50 from send ms",
                "p99 from send ms",
                "p50 from ack ms",
                "p99 from ack ms",
            ],
            [
                [
                    f["sockets"],
                    round(f["from_send_ms"]["p50"], 2),
                    round(f["from_send_ms"]["p99"], 2),
                    round(f["from_ack_ms"]["p50"], 2),
                    round(f["from_ack_ms"]["p99"], 2),
                ]
                for f in fan
            ],
        )
    )
    print()
    print(
        table(
            ["transport", "pushes/s"], [["WebSocket", round(ws_rate)], ["HTTP", round(http_rate)]]
        )
    )
    out = write_json(
        args.out,
        {
            "benchmark": "realtime",
            "fanout": fan,
            "push_throughput": {
                "websocket_per_s": ws_rate,
                "http_per_s": http_rate,
                "pushes": args.throughput,
            },
            "git": git_info(),
        },
    )
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
