"""The realtime feed: broadcast latency at scale, idle connections per process, and push and
actions over the WebSocket against HTTP.

Raises this process's open-files limit to its hard limit (the gateway, a child, inherits it),
starts one gateway process (``lakesync gateway``, SQLite WAL in a temporary data directory,
``--ws-max-connections`` above the largest idle step) and measures, in one run:

* **broadcast latency** to N connected sockets (``--fanout``, default 10, 100 and 1 000), each
  with its own token, held by ``--receivers`` processes of their own (default 4; each a share
  of the sockets on its own event loop, see ``harness/ws_receivers.py``), so the gateway keeps
  its process and no one loop queues a thousand frames. One more socket, in this process,
  pushes one delta at a time (``--pushes`` rounds, each after every socket got the previous
  one; ``harness/fanout.py``). Each size runs under each of ``--rules``: ``none`` (every socket
  receives every row), ``per-user`` (sync rules: each of ``--users`` users, default N / 10,
  sees the rows it owns; a round creates one user's row or hands the last one to another
  user, so only their sockets receive it, and any other socket receiving it counts as a
  leak) and ``other-table`` (a filtered bucket on another table beside an unfiltered one for
  the pushed rows). For every receiving socket: the time from the push's acknowledgement (and
  from sending it) to the ``0x03`` frame, all read with ``time.monotonic_ns()`` as the bytes
  come off each socket (``CLOCK_MONOTONIC``, one clock for the machine) — p50 and p99 over all
  deliveries, and the median over rounds of each round's p50 and p99. Beside them, the **CPU
  seconds** the gateway process (all its threads) and the receivers spent per round
  (``/proc/PID/stat``), which another job on the machine disturbs far less than the
  latencies, and the 1-minute load average before and after. Every size is measured with
  the client offering per-message deflate (a gateway that negotiates it compresses every
  frame) and without it (``--compression``);
* **idle connections**: sockets opened and left idle in steps (``--idle``) up to the largest
  step or the first refusal, and the gateway process's RSS at each step (``/proc/PID/status``);
* **push throughput**: ``--throughput`` pushes of one delta each, sent one after the other,
  over one WebSocket and over one HTTP keep-alive connection, on gateway ids without sockets;
* **actions**: ``--actions`` actions of a declared ``webhook`` connector (against an HTTP
  server in this process) one after the other over one WebSocket (``0x04`` → ``0x05``) and
  over ``POST /v1/sync/{gw}/action``, fresh and then again (duplicates, answered from the
  stored result).

``--pin`` runs the gateway on the first CPU and the receivers and the pusher on the others, so
the receivers never take the gateway's core (on two cores: one each); it holds for the whole
run, so the throughput and action figures then come from a gateway on one core.
``--code DIR`` runs the gateway on the product packages under ``DIR`` (its working directory
and ``PYTHONPATH``), e.g. ``git archive main lakesync_platform gateway | tar -x -C DIR``, to
compare two versions side by side. ``--fanout-only`` skips the last three measurements (their
JSON keys are then null). Between rounds the benchmark waits until no thread of the gateway
has run for 20 ms (``harness/fanout.py`` ``wait_idle``): with filtering rules a round's few
receiving sockets may have their frame before the gateway has cut every other socket's page,
and the next commit would fold into that pass. The
figures are measured and reported, not asserted (targets: p50 ≤ 20 ms and p99 ≤ 100 ms from
acknowledgement at 1 000 sockets; 10 000 idle sockets in one process within 1 GiB RSS). The
receivers share the machine's cores with the gateway: on a loaded machine the latencies say as
much about the other jobs as about the gateway, which the CPU per round and the load average
show.

Prints tables and writes ``benchmarks/results/realtime.json`` (``--out``).

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_realtime.py                                   # ~5 min
    .venv/bin/python benchmarks/bench_realtime.py --fanout 10 100 --pushes 10 --idle 500 1000 \
        --throughput 100 --actions 100                                              # quick
    .venv/bin/python benchmarks/bench_realtime.py --fanout 1000 --compression none --fanout-only
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import httpx
from websockets.asyncio.client import ClientConnection, connect

from benchmarks.harness.fanout import RULES, fanout, make_delta, pin
from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import git_info
from benchmarks.harness.stats import pct
from benchmarks.harness.ws_receivers import Receivers
from lakesync_platform.core.actions import Action, ActionResult
from lakesync_platform.core.ids import action_id
from lakesync_platform.core.proto import (
    TAG_ACTION_PUSH,
    TAG_ACTION_RESPONSE,
    TAG_BROADCAST,
    TAG_SYNC_PUSH,
    decode_action_response,
    encode_action_push,
    encode_sync_push,
    frame,
)
from lakesync_platform.core.wire import delta_to_wire
from lakesync_platform.testing import GatewayProcess, dev_token

SECRET = "bench-realtime-secret"
ACTS = "acts"
DEFS = """
gateway: acts
actions:
  - connector: hooks
    kind: webhook
    url: "http://127.0.0.1:${HOOK_PORT}/ok"
    retries: 0
    types:
      notify: {description: Post to the hook}
"""
GIB = 1 << 30


def raise_open_files() -> int:
    """Raise the soft open-files limit to the hard one; children inherit it."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (``VmRSS`` in ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def socket_url(proc: GatewayProcess, gw: str, sub: str) -> str:
    """The socket of ``sub`` on ``gw``."""
    return f"ws://127.0.0.1:{proc.port}/v1/sync/{gw}/ws?token={dev_token(sub, gw, SECRET)}"


async def open_sockets(
    proc: GatewayProcess, gw: str, subs: list[str], into: list[ClientConnection], deflate: bool
) -> None:
    """Open one socket per subject into ``into``, 100 handshakes at a time, without keepalive
    pings; the first failed handshake is raised once its batch is done."""
    for i in range(0, len(subs), 100):
        opened = await asyncio.gather(
            *(
                connect(
                    socket_url(proc, gw, sub),
                    max_size=None,
                    compression="deflate" if deflate else None,
                    ping_interval=None,
                    open_timeout=60,
                )
                for sub in subs[i : i + 100]
            ),
            return_exceptions=True,
        )
        into += [ws for ws in opened if isinstance(ws, ClientConnection)]
        for failed in opened:
            if isinstance(failed, BaseException):
                raise failed


async def idle(proc: GatewayProcess, steps: list[int]) -> list[dict[str, Any]]:
    """Open idle sockets up to each step and record the gateway's RSS; stop at a refusal."""
    assert proc.proc is not None
    pid = proc.proc.pid
    out: list[dict[str, Any]] = [{"connections": 0, "rss_bytes": rss_bytes(pid)}]
    sockets: list[ClientConnection] = []
    try:
        for step in sorted(steps):
            started = time.perf_counter()
            try:
                subs = [f"i{i}" for i in range(len(sockets), step)]
                await open_sockets(proc, "idle", subs, sockets, deflate=True)
            except Exception as exc:  # the first refusal ends the climb
                log(f"idle sockets: stopped before {step}: {exc!r}")
                out.append({"connections": len(sockets), "error": repr(exc)})
                break
            await asyncio.sleep(1)  # let the gateway settle before reading its RSS
            out.append(
                {
                    "connections": len(sockets),
                    "rss_bytes": rss_bytes(pid),
                    "open_s": time.perf_counter() - started,
                }
            )
            log(f"idle sockets: {len(sockets)}, gateway RSS {out[-1]['rss_bytes'] / 2**20:.0f} MiB")
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return out


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


@contextmanager
def serve_hook() -> Iterator[int]:
    """An HTTP/1.1 server on a free loopback port answering every POST with ``{}``; yields
    its port."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave in separate writes

        def do_POST(self) -> None:  # http.server's naming
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def make_actions(client: str, n: int, salt: int) -> list[Action]:
    """``n`` distinct ``hooks.notify`` actions of ``client``."""
    out = []
    for i in range(n):
        params = {"i": i, "salt": salt}
        aid = action_id(client, i + 1, "hooks", "notify", params)
        out.append(Action(aid, client, i + 1, "hooks", "notify", params))
    return out


def timed_rate(latencies: list[float]) -> dict[str, float]:
    """Actions per second and p50/p99 latency (ms) of sequential calls."""
    return {
        "per_s": len(latencies) / sum(latencies),
        "p50_ms": pct(latencies, 50) * 1000,
        "p99_ms": pct(latencies, 99) * 1000,
    }


async def ws_actions(proc: GatewayProcess, actions: list[Action]) -> list[float]:
    """Send each action in its own ``0x04`` frame and wait for its ``0x05`` answer."""
    client = actions[0].client_id
    url = f"ws://127.0.0.1:{proc.port}/v1/sync/{ACTS}/ws?token={dev_token(client, ACTS, SECRET)}"
    out = []
    async with connect(url, max_size=None) as ws:
        for act in actions:
            started = time.perf_counter()
            await ws.send(frame(TAG_ACTION_PUSH, encode_action_push(client, [act])))
            while True:
                reply = await ws.recv()
                assert isinstance(reply, bytes)
                if reply[0] == TAG_ACTION_RESPONSE:
                    break
            out.append(time.perf_counter() - started)
            (result,), _ = decode_action_response(reply[1:])
            if not isinstance(result, ActionResult):
                raise RuntimeError(f"action failed over the WebSocket: {result}")
    return out


def http_actions(proc: GatewayProcess, actions: list[Action]) -> list[float]:
    """Send each action in its own ``POST /v1/sync/{gw}/action``."""
    client = actions[0].client_id
    headers = {"Authorization": "Bearer " + dev_token(client, ACTS, SECRET)}
    out = []
    with httpx.Client(base_url=proc.url, headers=headers, timeout=60) as http:
        for act in actions:
            started = time.perf_counter()
            body = {"clientId": client, "actions": [act.to_json()]}
            response = http.post(f"/v1/sync/{ACTS}/action", json=body)
            out.append(time.perf_counter() - started)
            response.raise_for_status()
            if "data" not in response.json()["results"][0]:
                raise RuntimeError(f"action failed over HTTP: {response.text}")
    return out


def bench_actions(proc: GatewayProcess, n: int) -> dict[str, dict[str, float]]:
    """Fresh then duplicate actions over each transport (distinct clients, so distinct ids)."""
    over_ws = make_actions("ws-client", n, 1)
    over_http = make_actions("http-client", n, 2)
    return {
        "websocket fresh": timed_rate(asyncio.run(ws_actions(proc, over_ws))),
        "websocket duplicate": timed_rate(asyncio.run(ws_actions(proc, over_ws))),
        "http fresh": timed_rate(http_actions(proc, over_http)),
        "http duplicate": timed_rate(http_actions(proc, over_http)),
    }


def main() -> None:
    """Run every measurement on one gateway process and report them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fanout", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--pushes", type=int, default=30)
    parser.add_argument(
        "--receivers", type=int, default=4, help="processes holding the fan-out sockets"
    )
    parser.add_argument(
        "--compression",
        choices=["both", "deflate", "none"],
        default="both",
        help="whether the fan-out sockets offer per-message deflate",
    )
    parser.add_argument(
        "--rules",
        nargs="+",
        choices=["none", *RULES],
        default=["none", "per-user"],
        help="sync rules of the fan-out's gateway (per-user: socket i is user i %% users)",
    )
    parser.add_argument(
        "--users", type=int, default=0, help="users of the per-user rules (default: sockets / 10)"
    )
    parser.add_argument("--idle", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    parser.add_argument("--throughput", type=int, default=500)
    parser.add_argument("--actions", type=int, default=300)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="run the gateway on the first CPU and the receivers and pusher on the others",
    )
    parser.add_argument(
        "--fanout-only",
        action="store_true",
        help="measure the broadcast latency only (no idle sockets, throughput or actions)",
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="run the gateway on the product packages under this directory (e.g. an older"
        " commit's `git archive`), for figures side by side",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "realtime.json")
    args = parser.parse_args()
    modes = {"both": [True, False], "deflate": [True], "none": [False]}[args.compression]

    open_files = raise_open_files()
    log(f"open-files limit {open_files} (this process and the gateway)")
    with tempfile.TemporaryDirectory(prefix="bench-realtime-") as tmp, serve_hook() as port:
        data = Path(tmp) / "gw"
        (data / "defs").mkdir(parents=True)
        (data / "defs" / "acts.yaml").write_text(DEFS)
        connections = str(max([*args.fanout, *args.idle]) + 100)
        proc = GatewayProcess(
            data,
            SECRET,
            # The throughput runs send far more than the default 50 messages/s per socket.
            extra_args=[
                "--defs",
                str(data / "defs"),
                "--ws-max-connections",
                connections,
                "--ws-rate-limit",
                "1000000",
            ],
            env={"HOOK_PORT": str(port)}
            | ({"PYTHONPATH": str(args.code.resolve())} if args.code else {}),
            # ``python -m`` puts the working directory first on the path: start it there too.
            cwd=args.code.resolve() if args.code else None,
        ).start()
        receivers = None
        held: list[dict[str, Any]] = []
        http_rate = ws_rate = float("nan")
        acts: dict[str, dict[str, float]] = {}
        try:
            receivers = Receivers(args.receivers, proc.port)
            if args.pin:
                cpus = sorted(os.sched_getaffinity(0))
                assert proc.proc is not None and len(cpus) > 1, "--pin needs two CPUs"
                pin(proc.proc.pid, {cpus[0]})
                for pid in [os.getpid(), *receivers.pids]:
                    pin(pid, set(cpus[1:]))
                log(f"gateway pinned to CPU {cpus[0]}, receivers and pusher to {cpus[1:]}")
            fan = []
            for n, rules, deflate in itertools.product(args.fanout, args.rules, modes):
                users = args.users or max(n // 10, 1)
                log(
                    f"fan-out to {n} sockets (deflate {deflate}, rules {rules}"
                    f"{f', {users} users' if rules == 'per-user' else ''}), {args.pushes} pushes"
                )
                fan.append(fanout(proc, SECRET, receivers, n, args.pushes, deflate, rules, users))
                f = fan[-1]
                log(
                    f"  p50 {f['from_ack_ms']['p50']:.1f} ms, p99 {f['from_ack_ms']['p99']:.1f}"
                    f" ms, gateway CPU {f['gateway_cpu_ms_per_round']:.1f} ms per round,"
                    f" load {f['load_average_1m']['after']:.2f}, leaks {f['leaks']},"
                    f" closed by the gateway {f['closed_by_gateway']}"
                )
            receivers.stop()
            if not args.fanout_only:
                log(f"idle sockets in steps {args.idle}")
                held = asyncio.run(idle(proc, args.idle))
                log(f"push throughput, {args.throughput} pushes each way")
                http_rate = http_throughput(proc, args.throughput)
                ws_rate = asyncio.run(ws_throughput(proc, args.throughput))
                log(f"actions, {args.actions} each way, fresh then duplicate")
                acts = bench_actions(proc, args.actions)
        finally:
            if receivers is not None:
                receivers.stop()
            proc.stop()

    print(
        table(
            [
                "sockets",
                "rules",
                "deflate",
                "p50 ack ms",
                "p99 ack ms",
                "round p50",
                "round p99",
                "gw CPU ms/round",
                "gw CPU µs/frame",
                "load",
            ],
            [
                [
                    f["sockets"],
                    f["rules"] + (f" ({f['users']} users)" if f["users"] else ""),
                    "on" if f["deflate"] else "off",
                    round(f["from_ack_ms"]["p50"], 2),
                    round(f["from_ack_ms"]["p99"], 2),
                    round(f["round_median_from_ack_ms"]["p50"], 2),
                    round(f["round_median_from_ack_ms"]["p99"], 2),
                    round(f["gateway_cpu_ms_per_round"], 2),
                    round(f["gateway_cpu_us_per_delivery"], 1),
                    round(f["load_average_1m"]["after"], 2),
                ]
                for f in fan
            ],
        )
    )
    if not args.fanout_only:
        print()
        print(
            table(
                ["idle sockets", "gateway RSS MiB"],
                [
                    [h["connections"], round(h["rss_bytes"] / 2**20) if "rss_bytes" in h else "-"]
                    for h in held
                ],
            )
        )
        print()
        print(
            table(
                ["transport", "pushes/s"],
                [["WebSocket", round(ws_rate)], ["HTTP", round(http_rate)]],
            )
        )
        print()
        print(
            table(
                ["actions", "per s", "p50 ms", "p99 ms"],
                [
                    [k, round(v["per_s"]), round(v["p50_ms"], 2), round(v["p99_ms"], 2)]
                    for k, v in acts.items()
                ],
            )
        )
    ten_k = [h for h in held if h["connections"] >= 10_000 and "rss_bytes" in h]
    out = write_json(
        args.out,
        {
            "benchmark": "realtime",
            "open_files_limit": open_files,
            "load_average": list(os.getloadavg()),
            "pinned": args.pin,
            "gateway_code": str(args.code) if args.code else None,
            "fanout": fan,
            # Skipped parts (--fanout-only) are null.
            "idle": {
                "steps": held,
                "reached": max(h["connections"] for h in held),
                "ten_thousand_within_1_gib": bool(ten_k) and ten_k[0]["rss_bytes"] <= GIB,
            }
            if held
            else None,
            "push_throughput": {
                "websocket_per_s": ws_rate,
                "http_per_s": http_rate,
                "pushes": args.throughput,
            }
            if held
            else None,
            "actions": {"count": args.actions, **acts} if acts else None,
            "git": git_info(),
        },
    )
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
