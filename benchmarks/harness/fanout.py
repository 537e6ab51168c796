"""The broadcast fan-out measured on a running gateway: rounds of one push each, received by
the sockets of :class:`~.ws_receivers.Receivers`, with or without sync rules that filter what
each socket sees (see ``benchmarks/bench_realtime.py``).

Per round the pusher sends one delta over its own socket and reads its acknowledgement; every
socket whose view the row touches must receive a ``0x03`` frame carrying the row's id, and a
socket whose view it does not touch must receive none (a *leak*, counted). With the per-user
rules (socket ``i`` has claim ``user`` = ``u{i % users}``, each user sees the rows it owns),
even rounds create a row of one user and odd rounds hand the previous round's row to another
user: its old owner's sockets receive a ``DELETE``, its new owner's the row.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.proto import TAG_BROADCAST, TAG_SYNC_PUSH, encode_sync_push, frame
from lakesync_platform.testing import GatewayProcess, dev_token

from .stats import pct
from .ws_receivers import Pusher, Receivers

__all__ = ["RULES", "cpu_seconds", "fanout", "make_delta", "pin", "wait_idle"]

_TICK = os.sysconf("SC_CLK_TCK")


def make_delta(client: str, row_id: str, n: int, owner: str = "", op: str = "INSERT") -> RowDelta:
    """A one-row write stamped now (with ``owner``: that column too, alone for an update)."""
    hlc = encode(time.time_ns() // 1_000_000, n & 0xFFFF)
    cols = (ColumnDelta("title", f"row {row_id}"), ColumnDelta("n", n))
    if owner:
        cols = (
            (ColumnDelta("owner", owner),)
            if op == "UPDATE"
            else (*cols, ColumnDelta("owner", owner))
        )
    return RowDelta(
        op, "todos", row_id, client, cols, hlc, delta_id(client, hlc, "todos", row_id, cols)
    )


RULES: dict[str, dict[str, Any]] = {
    # Each user sees the rows they own: pushes touch one user's rows, every other round hands
    # the previous round's row to another user (a DELETE to the old owner's sockets).
    "per-user": {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["todos"],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:user"}],
            }
        ],
    },
    # A filtered bucket on another table beside an unfiltered one for the pushed table: every
    # socket sees every pushed row, but the gateway has filtering rules.
    "other-table": {
        "version": 1,
        "buckets": [
            {"name": "all", "tables": ["todos"], "filters": []},
            {
                "name": "notes",
                "tables": ["notes"],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:user"}],
            },
        ],
    },
}


def save_rules(proc: GatewayProcess, secret: str, gw: str, rules: dict[str, Any]) -> None:
    """Store ``rules`` for ``gw`` through the admin route (tokens signed with ``secret``)."""
    headers = {"Authorization": "Bearer " + dev_token("admin", gw, secret, role="admin")}
    r = httpx.post(f"{proc.url}/v1/admin/sync-rules/{gw}", json=rules, headers=headers)
    r.raise_for_status()


def plan_round(
    gw: str, k: int, users: int, owners: list[int]
) -> tuple[str, RowDelta, list[int] | None]:
    """Round ``k``'s marker (the row id), the pusher's delta, and the sockets that must receive
    it (``None``: all). ``users`` 0: no per-user rules, a new row each round. Else socket ``i``
    belongs to user ``i % users``: even rounds create a row of one user, odd rounds hand the
    previous round's row to another user, whose sockets and the previous owner's receive it."""
    if not users:
        row_id = f"{gw}-round-{k:05d}"
        return row_id, make_delta("pusher", row_id, k), None
    if k % 2 == 0:
        owner = (k // 2) % users
        row_id = f"{gw}-round-{k:05d}"
        delta = make_delta("pusher", row_id, k, owner=f"u{owner}")
        touched = {owner}
    else:
        row_id = f"{gw}-round-{k - 1:05d}"
        before, owner = (k // 2) % users, (k // 2 + users // 2 + 1) % users
        delta = make_delta("pusher", row_id, k, owner=f"u{owner}", op="UPDATE")
        touched = {before, owner}
    return row_id, delta, [i for i in owners if i % users in touched]


def pin(pid: int, cpus: set[int]) -> None:
    """Bind every thread of process ``pid`` to ``cpus`` (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread, exited ones too) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def busy_threads(pid: int) -> int:
    """How many threads of process ``pid`` are running or waiting for a CPU (state ``R``)."""
    busy = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended
            continue
        busy += stat.rsplit(")", 1)[1].split()[0] == "R"
    return busy


def wait_idle(pid: int, quiet_s: float = 0.02, timeout_s: float = 30.0) -> int:
    """Wait until no thread of process ``pid`` has been seen running for ``quiet_s`` (checked
    every 2 ms); the ``monotonic_ns`` at which one was last seen running.

    A round ends when its expected sockets have their frame, but with filtering rules the
    gateway may still be cutting the other sockets' pages; the next round's commit would then
    fold into that pass, and the CPU per round would count less than a fan-out per commit."""
    last = start = time.monotonic_ns()
    while time.monotonic_ns() - last < quiet_s * 1e9:
        if busy_threads(pid):
            last = time.monotonic_ns()
        if last - start > timeout_s * 1e9:
            raise TimeoutError(f"process {pid} still busy after {timeout_s} s")
        time.sleep(0.002)
    return last


def fanout(
    proc: GatewayProcess,
    secret: str,
    receivers: Receivers,
    n: int,
    pushes: int,
    deflate: bool,
    rules: str = "none",
    users: int = 0,
) -> dict[str, Any]:
    """Latencies of ``pushes`` broadcasts to ``n`` sockets held by the receiver processes, and
    the CPU the gateway and the receivers spent per round (tokens signed with ``secret``).
    ``rules``: a key of :data:`RULES` (``none``: no sync rules); socket ``i`` has claim
    ``user`` = ``u{i % users}``."""
    assert proc.proc is not None
    gw = f"fanout{n}{'z' if deflate else 'p'}{rules.replace('-', '')}"
    if rules != "none":
        save_rules(proc, secret, gw, RULES[rules])
    users = users if rules == "per-user" else 0
    paths = [
        f"/v1/sync/{gw}/ws?token={dev_token(f'r{i}', gw, secret, user=f'u{i % max(users, 1)}')}"
        for i in range(n)
    ]
    receivers.open(paths, deflate)
    leaks = lost = 0
    from_send: list[float] = []
    from_ack: list[float] = []
    round_p50: list[float] = []
    round_p99: list[float] = []
    busy_until: list[float] = []  # per round: the gateway last seen running, ms after the ack
    pid = proc.proc.pid
    load = [os.getloadavg()[0]]
    try:
        pusher = Pusher(proc.port, f"/v1/sync/{gw}/ws?token={dev_token('pusher', gw, secret)}")
        try:
            gateway_cpu0 = cpu_seconds(pid)
            receiver_cpu0 = sum(cpu_seconds(p) for p in receivers.pids)
            for k in range(pushes):
                row_id, delta, only = plan_round(gw, k, users, list(range(n)))
                receivers.expect(row_id.encode(), only)
                data = frame(TAG_SYNC_PUSH, encode_sync_push("pusher", [delta], 0))
                sent = time.monotonic_ns()
                pusher.send(data)
                while True:
                    reply, acked = pusher.recv()
                    if reply[0] != TAG_BROADCAST:
                        break
                times = receivers.collect(60)
                busy_until.append((wait_idle(pid) - acked) / 1e6)
                lat = [max(t - acked, 0) / 1e6 for t in times]
                from_ack += lat
                from_send += [(t - sent) / 1e6 for t in times]
                round_p50.append(pct(lat, 50))
                round_p99.append(pct(lat, 99))
            gateway_cpu = cpu_seconds(pid) - gateway_cpu0
            receiver_cpu = sum(cpu_seconds(p) for p in receivers.pids) - receiver_cpu0
        finally:
            pusher.close()
    finally:
        leaks, lost = receivers.close_sockets()
    load.append(os.getloadavg()[0])
    return {
        "sockets": n,
        "deflate": deflate,
        "rules": rules,
        "users": users,
        "leaks": leaks,
        "closed_by_gateway": lost,
        "pushes": pushes,
        "deliveries": len(from_send),
        "from_send_ms": {"p50": pct(from_send, 50), "p99": pct(from_send, 99)},
        "from_ack_ms": {"p50": pct(from_ack, 50), "p99": pct(from_ack, 99)},
        "round_median_from_ack_ms": {
            "p50": statistics.median(round_p50),
            "p99": statistics.median(round_p99),
        },
        "gateway_busy_after_ack_ms_median": statistics.median(busy_until),
        "gateway_cpu_ms_per_round": gateway_cpu * 1000 / pushes,
        "gateway_cpu_us_per_delivery": gateway_cpu * 1e6 / max(len(from_send), 1),
        "receivers_cpu_ms_per_round": receiver_cpu * 1000 / pushes,
        "receivers": len(receivers.pids),
        "load_average_1m": {"before": load[0], "after": load[1]},
    }
