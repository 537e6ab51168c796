"""Steady load through a balancer for long runs (``benchmarks/soak.py``): paced writers and
readers whose latencies the sampler takes in windows."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from lakesync_platform.core.hlc import HLC
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.wire import delta_to_wire
from lakesync_platform.testing import dev_token


def wall_ms() -> int:
    """Epoch milliseconds (every writer's HLC runs on it)."""
    return time.time_ns() // 1_000_000


@dataclass
class Timings:
    """Latencies (seconds) of one kind of request, taken in windows by the sampler."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    window: list[float] = field(default_factory=list)
    total: int = 0
    failures: int = 0

    def add(self, seconds: float) -> None:
        with self.lock:
            self.window.append(seconds)
            self.total += 1

    def fail(self) -> None:
        with self.lock:
            self.failures += 1

    def take(self) -> list[float]:
        with self.lock:
            taken, self.window = self.window, []
            return taken


def paced(rate: float, stop: threading.Event, step: Callable[[], None]) -> None:
    """Call ``step`` ``rate`` times a second until ``stop`` (a fixed schedule: a slow step
    is not made up for by a burst)."""
    period = 1.0 / rate
    due = time.monotonic() + random.random() * period
    while not stop.is_set():
        if stop.wait(max(0.0, due - time.monotonic())):
            return
        step()
        due = max(due + period, time.monotonic())


class Writer:
    """Pushes batches of its own rows of table ``items`` of ``gw`` (inserts up to ``ROWS``
    rows, then updates and a few deletes); ``pushed`` counts the deltas it pushed, each batch
    again until acknowledged (so all of them are). A count, not the ids: every delta id is
    new (its own HLC), nothing else writes to the gateway, so the WAL must hold exactly that
    many ids — and the load generator's memory stays its clients', not a growing set."""

    ROWS = 200

    def __init__(
        self, url: str, gw: str, secret: str, client_id: str, batch: int, timings: Timings
    ) -> None:
        self.gw = gw
        self.client_id = client_id
        self.batch = batch
        self.timings = timings
        self.http = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {dev_token(client_id, gw, secret)}"},
            timeout=httpx.Timeout(30.0, connect=5.0),
        )
        self.hlc = HLC(clock=wall_ms)
        self.rng = random.Random(client_id)
        self.rows = 0
        self.pushed = 0

    def _delta(self) -> RowDelta:
        if self.rows < self.ROWS:
            self.rows += 1
            row, op = f"{self.client_id}-{self.rows}", INSERT
        else:
            row = f"{self.client_id}-{self.rng.randrange(1, self.ROWS + 1)}"
            op = DELETE if self.rng.random() < 0.05 else UPDATE
        cols: tuple[ColumnDelta, ...] = ()
        if op != DELETE:
            picks = {"title": f"{row} @ {wall_ms()}", "n": self.rng.random() * 100}
            picks["done"] = self.rng.random() < 0.5
            cols = tuple(ColumnDelta(k, v) for k, v in picks.items())
        hlc = self.hlc.now()
        return RowDelta(
            op,
            "items",
            row,
            self.client_id,
            cols,
            hlc,
            delta_id(self.client_id, hlc, "items", row, cols),
        )

    def push(self) -> None:
        """Push one batch, again until acknowledged."""
        deltas = [self._delta() for _ in range(self.batch)]
        body = {"clientId": self.client_id, "deltas": [delta_to_wire(d) for d in deltas]}
        while True:
            started = time.monotonic()
            try:
                ok = self.http.post(f"/v1/sync/{self.gw}/push", json=body).status_code == 200
            except httpx.TransportError:
                ok = False
            if ok:
                self.timings.add(time.monotonic() - started)
                self.pushed += len(deltas)
                return
            self.timings.fail()
            time.sleep(0.1)

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()


class Reader:
    """Pulls a page of ``gw`` from its cursor at each step."""

    def __init__(self, url: str, gw: str, secret: str, client_id: str, timings: Timings) -> None:
        self.gw = gw
        self.client_id = client_id
        self.timings = timings
        self.cursor = 0
        self.http = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {dev_token(client_id, gw, secret)}"},
            timeout=httpx.Timeout(30.0, connect=5.0),
        )

    def pull(self) -> None:
        params = {"since": str(self.cursor), "clientId": self.client_id, "limit": "500"}
        started = time.monotonic()
        try:
            resp = self.http.get(f"/v1/sync/{self.gw}/pull", params=params)
        except httpx.TransportError:
            self.timings.fail()
            return
        if resp.status_code != 200:
            self.timings.fail()
            return
        self.timings.add(time.monotonic() - started)
        self.cursor = int(resp.json()["serverHlc"])

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()
