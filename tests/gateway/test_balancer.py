"""Three gateway processes on one PostgreSQL WAL behind HAProxy (``deploy/haproxy.cfg``), the
scaled-out topology of ARCHITECTURE.md §8 and docs/deploy.md, under load:

* a rolling restart — each gateway in turn gets SIGTERM, drains (fails ``/ready``, serves
  until the balancer has noticed, closes its WebSockets with 1001) and is started again —
  shows the clients no error at all;
* ``kill -9`` of one gateway, several times: clients may see errors and retry, but nothing
  acknowledged is lost.

Either way every acknowledged delta is in the WAL exactly once, every client converges to the
WAL's rows, WebSocket clients reconnect through the balancer and miss nothing, and clients on
every process receive the rows pushed through every other one. The balancer checks ``/ready``
every 150 ms and takes a gateway out after two failures, so a drain of 0.8 s covers it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from lakesync_platform.testing import GatewayProcess
from lakesync_platform.testing_cluster import LoadBalancer
from lakesync_platform.wal.store import WriteAheadLog
from tests.gateway.balanced_clients import (
    GOING_AWAY,
    BalancedReader,
    BalancedWriter,
    SocketClient,
    close_codes,
)
from tests.gateway.test_e2e import LogReport, check_log, plain_values, wal_snapshots
from tests.helpers import ROOT, SECRET

pytestmark = pytest.mark.postgres

PROCESSES = 3
DRAIN_SECONDS = 0.8
CHECK_INTERVAL = "150ms"
WRITERS = 4
READERS = 2
SOCKETS = 6
KILLS = 3
PUSH_PAUSE = 0.02
"""A writer's pause between batches: steady load that leaves the restarting gateways CPU."""


@dataclass
class Topology:
    """The gateways, the balancer in front of them, and the WAL they share."""

    gateways: list[GatewayProcess]
    balancer: LoadBalancer
    wal_url: str

    def name(self, i: int) -> str:
        """The balancer's name for gateway ``i`` (``gw1`` …)."""
        return f"gw{i + 1}"

    def all_up(self) -> None:
        """Wait until the balancer sends to every gateway."""
        self.balancer.wait_for({self.name(i): "UP" for i in range(PROCESSES)})


def _start_all(procs: list[GatewayProcess]) -> None:
    errors: list[BaseException] = []

    def start(p: GatewayProcess) -> None:
        try:
            p.start(timeout=90)
        except BaseException as exc:  # re-raised below, after every process was started
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(p,)) for p in procs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Topology]:
    root = tmp_path_factory.mktemp("balancer")
    drain = ["--drain-seconds", str(DRAIN_SECONDS)]
    # The last gateway runs two workers behind uvicorn's supervisor, as docker-compose.yml's do.
    procs = [
        GatewayProcess(
            root / f"gw{i}", SECRET, wal_url=pg_url, extra_args=drain, workers=1 + i // 2
        )
        for i in range(PROCESSES)
    ]
    balancer = LoadBalancer(
        ROOT / "deploy" / "haproxy.cfg",
        [f"127.0.0.1:{p.port}" for p in procs],
        root / "haproxy.log",
        check_interval=CHECK_INTERVAL,
        fall=2,
        rise=1,
    )
    try:
        _start_all(procs)
        balancer.start()
        topology = Topology(procs, balancer, pg_url)
        topology.all_up()
        yield topology
    finally:
        balancer.stop()
        stoppers = [threading.Thread(target=p.stop) for p in procs]  # drains run side by side
        for th in stoppers:
            th.start()
        for th in stoppers:
            th.join(60)


@dataclass
class Load:
    """The clients of one run, all through the balancer."""

    writers: list[BalancedWriter]
    readers: list[BalancedReader]
    sockets: list[SocketClient]

    def close(self) -> None:
        for c in (*self.writers, *self.readers):
            c.close()


def run_with_load(topology: Topology, gw: str, disrupt: Callable[[], None]) -> Load:
    """Writers, readers and WebSocket clients through the balancer while ``disrupt()`` runs;
    then the writers stop (each with its last batch acknowledged) and every client catches
    up: readers by pulling, WebSocket clients by what the feed sends them."""
    url = topology.balancer.url
    load = Load(
        [BalancedWriter(url, gw, f"writer{i}", seed=9100 + i) for i in range(WRITERS)],
        [BalancedReader(url, gw, f"reader{i}") for i in range(READERS)],
        [SocketClient(url, gw, f"socket{i}").start() for i in range(SOCKETS)],
    )
    stop = threading.Event()
    threads = [
        threading.Thread(target=c.run, args=(stop, PUSH_PAUSE), daemon=True) for c in load.writers
    ]
    threads += [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in load.readers]
    try:
        for th in threads:
            th.start()
        time.sleep(0.5)  # load before the first disruption
        disrupt()
        time.sleep(0.5)  # and after the last one
    finally:
        stop.set()
        for th in threads:
            th.join(60)
    try:
        assert not any(th.is_alive() for th in threads), "a client thread hung"
        wal = WriteAheadLog.open(topology.wal_url)
        try:
            head = wal.max_cursor(gw)
        finally:
            wal.close()
        deadline = time.monotonic() + 30
        for reader in load.readers:
            reader.catch_up(deadline)
        for sock in load.sockets:
            assert sock.wait_for_cursor(head, deadline), (
                f"{sock.client_id} reached {sock.cursor} of {head} through the feed"
            )
    finally:
        for sock in load.sockets:
            sock.stop()
        load.close()
    return load


def check_everything_arrived(topology: Topology, gw: str, load: Load) -> LogReport:
    """Exactly once in the WAL, every client converged, broadcasts crossed processes."""
    assert [e for c in (*load.writers, *load.readers, *load.sockets) for e in c.errors] == []
    records = [r for w in load.writers for r in w.records]
    assert sum(r.acked for r in records) >= WRITERS * 10, "too little load"
    wal = WriteAheadLog.open(topology.wal_url)
    try:
        report = check_log(wal, gw, records)  # every acknowledged delta in the log once
        state = wal_snapshots(wal, gw)
    finally:
        wal.close()
    # Each entry is a delta of an acknowledged batch. Its answer may have been lost (a process
    # killed after the commit): the batch's retry was then acknowledged as a duplicate, and
    # announced nothing.
    acked_ids = {d.delta_id for r in records if r.acked for d in r.deltas}
    assert report.announced <= set(report.by_id) <= acked_ids
    for reader in load.readers:
        assert reader.rows == state, f"{reader.client_id} diverged from the WAL"
    for sock in load.sockets:
        assert sock.values == plain_values(state), f"{sock.client_id} diverged from the WAL"
        assert sum(len(b.stamps) for b in sock.broadcasts) > 0, f"{sock.client_id}: no broadcast"

    # Rows pushed through each gateway reached sockets held by each other gateway.
    pushed_via = {
        (d.hlc, d.client_id): a.gateway
        for w in load.writers
        for a in w.attempts
        if a.record.acked
        for d in a.record.deltas
    }
    crossings = {
        (b.gateway, pushed_via[stamp])
        for s in load.sockets
        for b in s.broadcasts
        for stamp in b.stamps
        if stamp in pushed_via
    }
    names = {topology.name(i) for i in range(PROCESSES)}
    wanted = {(a, b) for a in names for b in names if a != b}
    missing = wanted - crossings
    assert not missing, f"(socket's gateway, push's gateway) pairs no broadcast took: {missing}"
    return report


def test_a_rolling_restart_behind_the_balancer_shows_clients_no_error(
    topology: Topology, gw: str
) -> None:
    def rolling_restart() -> None:
        for i, proc in enumerate(topology.gateways):
            proc.stop(timeout=30)  # SIGTERM: drains, then exits
            assert proc.proc is not None and proc.proc.returncode is not None
            proc.start(timeout=90)
            topology.balancer.wait_for({topology.name(i): "UP"})
            time.sleep(0.3)

    load = run_with_load(topology, gw, rolling_restart)

    failures = [f for w in load.writers for f in w.failures()]
    failures += [f for r in load.readers for f in r.failures]
    failures += [f for s in load.sockets for f in s.failures]
    assert failures == [], f"clients saw {len(failures)} errors: {failures[:5]}"

    # Every socket was closed by a drain at least once (every process restarted), with 1001,
    # and reconnected through the balancer.
    assert set(close_codes(load.sockets)) == {GOING_AWAY}, close_codes(load.sockets)
    for sock in load.sockets:
        assert len(sock.connections) >= 2, f"{sock.client_id} never reconnected"
    report = check_everything_arrived(topology, gw, load)
    # No answer was lost either: every entry was announced by the push that appended it.
    assert set(report.by_id) == report.announced


def test_kill_9_under_load_loses_nothing_acknowledged(topology: Topology, gw: str) -> None:
    def kill_and_restart() -> None:
        for k in range(KILLS):
            i = k % 2  # the single-process gateways (a two-worker one restarts slowly)
            proc = topology.gateways[i]
            proc.kill()
            topology.balancer.wait_for({topology.name(i): "DOWN"})
            proc.start(timeout=90)
            topology.balancer.wait_for({topology.name(i): "UP"})
            time.sleep(0.3)

    load = run_with_load(topology, gw, kill_and_restart)

    # Sockets of a killed process end without a close frame (1006); their clients reconnected
    # through the balancer all the same and, below, converged.
    on_killed = [s for s in load.sockets if {"gw1", "gw2"} & set(s.connections)]
    assert on_killed and all(len(s.connections) >= 2 for s in on_killed)
    check_everything_arrived(topology, gw, load)
