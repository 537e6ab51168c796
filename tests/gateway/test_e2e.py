"""End to end against a real uvicorn gateway: concurrent writers, a concurrent paging reader.

Several writer threads (each with its own token, ``clientId``, HLC and HTTP client) push batches
of inserts, updates of rows they all share, and deletes for a few seconds while readers page
through ``GET /pull`` with a small ``limit``. Afterwards the WAL must hold every acknowledged
change exactly once at strictly increasing cursors, and every reader's rows (rebuilt from the
last delivery of each row) must equal the WAL's row state — stamps included.

Run against the SQLite WAL (the embedded default) and the Postgres WAL.

The writer, reader and check helpers below are reused by ``test_multiprocess.py`` and
``test_crash.py``.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
from sqlalchemy import select

from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, RowDelta
from lakesync_platform.core.hlc import HLC, encode
from lakesync_platform.core.merge import RowState, merge_delta
from lakesync_platform.core.wal import WalEntry
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal import tables as t
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import make_delta, token, wire

TABLES = ("items", "notes")
COLUMNS = ("a", "b", "c", "d")
SHARED_ROWS = 24

RowKey = tuple[str, str]
Snapshot = tuple[bool, dict[str, tuple[Any, int, str]], tuple[int, str]]
"""A row as ``(live, {column: (value, hlc, clientId)}, (delete hlc, delete clientId))``."""


def wall_ms() -> int:
    """The real wall clock in epoch milliseconds (what every writer's HLC runs on)."""
    return int(time.time() * 1000)


# ---------------------------------------------------------------------- row snapshots


def snapshot(state: RowState) -> Snapshot:
    """A row state in comparable form."""
    return (
        state.live,
        {n: (c.value, c.hlc, c.client_id) for n, c in state.columns.items()},
        (state.delete_hlc, state.delete_client),
    )


def stamped_snapshot(delivery: dict[str, Any]) -> Snapshot:
    """The row a ``format=stamped`` delivery describes (one full row per delta)."""
    if delivery["op"] == DELETE:
        assert delivery["columns"] == [], delivery
        return (False, {}, (int(delivery["hlc"]), delivery["clientId"]))
    assert delivery["op"] == INSERT, delivery
    columns = {c["column"]: (c["value"], int(c["hlc"]), c["clientId"]) for c in delivery["columns"]}
    assert columns, f"a live row was delivered without columns: {delivery}"
    return (True, columns, (int(delivery["deleteHlc"]), delivery["deleteClientId"]))


def merge_all(deltas: Iterable[RowDelta]) -> dict[RowKey, Snapshot]:
    """Row states after merging ``deltas`` (in the given order) into empty rows."""
    states: dict[RowKey, RowState] = {}
    for d in deltas:
        key = (d.table, d.row_id)
        states[key] = merge_delta(states.get(key), d).state
    return {key: snapshot(state) for key, state in states.items()}


def wal_snapshots(wal: WriteAheadLog, gw: str) -> dict[RowKey, Snapshot]:
    """Every row of ``gw`` as the WAL holds it (tombstones included)."""
    return {
        (table, row_id): snapshot(state)
        for table in TABLES
        for row_id, state in wal.row_states(gw, table)
    }


def known_ids(wal: WriteAheadLog, gw: str, ids: Iterable[str]) -> set[str]:
    """The subset of ``ids`` recorded in ``wal_delta_ids`` for ``gw``."""
    wanted = set(ids)
    c = t.delta_ids.c
    with wal.read() as conn:
        stored = conn.execute(select(c.delta_id).where(c.gateway_id == gw)).scalars()
        return {i for i in stored if i in wanted}


# ---------------------------------------------------------------------- writers


@dataclass
class PushRecord:
    """One push attempt: the batch, and the answer (``status=None``: transport error)."""

    client_id: str
    deltas: list[RowDelta]
    status: int | None
    body: dict[str, Any] | None
    error: str = ""

    @property
    def acked(self) -> bool:
        """Whether the gateway acknowledged the batch (200)."""
        return self.status == 200


class Writer:
    """A client pushing batches: its own token, ``clientId``, HLC and HTTP connection pool.

    ``workload`` picks what a batch holds:

    * ``mixed``: inserts of new rows, updates and deletes of rows every writer shares (some
      with a stale HLC, as from a client that was offline), updates and deletes of its own rows
      (many deltas lose wholly or in part);
    * ``own``: only its own rows, so every delta it pushes (in HLC order) wins at least once;
    * ``fresh``: only inserts of brand-new rows (one WAL entry per delta, no re-announcements).
    """

    def __init__(
        self,
        base_url: str,
        gw: str,
        client_id: str,
        *,
        seed: int,
        workload: str = "mixed",
        max_batch: int = 8,
    ) -> None:
        self.gw = gw
        self.client_id = client_id
        self.workload = workload
        self.max_batch = max_batch
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token(client_id, gw)}"},
            timeout=httpx.Timeout(60.0, connect=5.0),
        )
        self.hlc = HLC(clock=wall_ms)
        self.stale_hlc = encode(wall_ms() - 60_000, 0)
        self.rng = random.Random(seed)
        self.counter = 0
        self.own_rows: list[RowKey] = []
        self.records: list[PushRecord] = []
        self.errors: list[str] = []

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()

    def _value(self) -> Any:
        self.counter += 1
        pick = self.rng.randrange(6)
        if pick == 0:
            return self.counter
        if pick == 1:
            return self.counter + 0.25
        if pick == 2:
            return self.rng.random() < 0.5
        if pick == 3:
            return {"by": self.client_id, "n": [self.counter, "x"]}
        if pick == 4 and self.workload == "mixed":
            return None
        return f"{self.client_id}:{self.counter}:é"

    def _columns(self, low: int = 1) -> dict[str, Any]:
        names = self.rng.sample(COLUMNS, self.rng.randint(low, len(COLUMNS)))
        return {n: self._value() for n in names}

    def new_row(self) -> RowDelta:
        """An insert of a brand-new row of this writer's."""
        self.counter += 1
        key = (self.rng.choice(TABLES), f"{self.client_id}-{self.counter}")
        self.own_rows.append(key)
        return make_delta(self.client_id, self.hlc.now(), *key, self._columns(2), op=INSERT)

    def _own_change(self) -> RowDelta:
        key = self.rng.choice(self.own_rows)
        if self.rng.random() < 0.25:
            return make_delta(self.client_id, self.hlc.now(), *key, None)
        return make_delta(self.client_id, self.hlc.now(), *key, self._columns(), op=UPDATE)

    def _delta(self) -> RowDelta:
        roll = self.rng.random()
        if self.workload == "fresh" or not self.own_rows:
            return self.new_row()
        if self.workload == "own":
            return self.new_row() if roll < 0.2 else self._own_change()
        if roll < 0.05:
            # An offline client's late write: older than anything written during the run, so
            # it loses wherever a column was written since, and wins only on fresh columns.
            self.stale_hlc += 1
            key = (self.rng.choice(TABLES), f"s{self.rng.randrange(SHARED_ROWS)}")
            return make_delta(self.client_id, self.stale_hlc, *key, self._columns())
        if roll < 0.3:
            return self.new_row()
        if roll < 0.8:
            key = (self.rng.choice(TABLES), f"s{self.rng.randrange(SHARED_ROWS)}")
            if roll < 0.68:
                return make_delta(self.client_id, self.hlc.now(), *key, self._columns())
            return make_delta(self.client_id, self.hlc.now(), *key, None)
        return self._own_change()

    def batch(self) -> list[RowDelta]:
        """The next batch (HLCs always increase, except for ``mixed``'s stale writes)."""
        return [self._delta() for _ in range(self.rng.randint(1, self.max_batch))]

    def push(self, deltas: list[RowDelta], *, record: bool = True) -> PushRecord:
        """Push one batch and (unless ``record=False``) remember the outcome."""
        body = {"clientId": self.client_id, "deltas": [wire(d) for d in deltas]}
        try:
            resp = self.http.post(f"/v1/sync/{self.gw}/push", json=body)
        except httpx.TransportError as exc:
            rec = PushRecord(self.client_id, deltas, None, None, repr(exc))
        else:
            ok = resp.status_code == 200
            rec = PushRecord(
                self.client_id,
                deltas,
                resp.status_code,
                resp.json() if ok else None,
                "" if ok else resp.text[:500],
            )
        if record:
            self.records.append(rec)
        return rec

    def run(self, stop: threading.Event, *, pause_on_error: float = 0.02) -> None:
        """Push batches back to back until ``stop``; never raises (errors are recorded)."""
        try:
            while not stop.is_set():
                if self.push(self.batch()).status is None:
                    time.sleep(pause_on_error)
        except Exception as exc:  # recorded and asserted on by the test
            self.errors.append(f"{self.client_id}: {exc!r}")


# ---------------------------------------------------------------------- readers


@dataclass
class Page:
    """One pull as a reader saw it."""

    since: int
    server: int
    has_more: bool
    keys: list[RowKey]


@dataclass
class Reader:
    """A client paging through ``GET /pull`` with its own cursor, applying every delivery.

    ``stamped`` readers keep every row as its last delivery said (full rows with stamps); plain
    readers apply the TypeScript-client encoding (``DELETE`` stamped 0 then a full-row
    ``INSERT``) and check that an ``INSERT`` never hits a row they still hold.
    """

    base_url: str
    gw: str
    client_id: str
    limit: int
    stamped: bool = True
    cursor: int = 0
    rows: dict[RowKey, Snapshot] = field(default_factory=dict)
    values: dict[RowKey, dict[str, Any]] = field(default_factory=dict)
    pages: list[Page] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token(self.client_id, self.gw)}"},
            timeout=httpx.Timeout(60.0, connect=5.0),
        )

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()

    def pull(self) -> Page:
        """Pull one page from the current cursor, check it, apply it, move the cursor."""
        params = {"since": str(self.cursor), "clientId": self.client_id, "limit": str(self.limit)}
        if self.stamped:
            params["format"] = "stamped"
        resp = self.http.get(f"/v1/sync/{self.gw}/pull", params=params)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        deltas: list[dict[str, Any]] = body["deltas"]
        page = Page(self.cursor, int(body["serverHlc"]), body["hasMore"], [])
        assert page.server >= page.since, f"cursor went backwards: {page}"
        assert deltas or not page.has_more, "empty page with hasMore=true"
        if not deltas:
            assert page.server == page.since, f"an empty page moved the cursor: {page}"
        for d in deltas:
            key = (d["table"], d["rowId"])
            if self.stamped:
                self.rows[key] = stamped_snapshot(d)
                page.keys.append(key)
            elif d["op"] == DELETE:
                self.values.pop(key, None)
                if d["hlc"] != "0":
                    page.keys.append(key)
            else:
                assert d["op"] == INSERT, d
                assert key not in self.values, f"INSERT of a row the client holds: {d}"
                self.values[key] = {c["column"]: c["value"] for c in d["columns"]}
                page.keys.append(key)
        if self.stamped:
            assert len(deltas) <= self.limit, (len(deltas), self.limit)
            assert len(set(page.keys)) == len(page.keys), "a row twice in one page"
        self.pages.append(page)
        self.cursor = page.server
        return page

    def drain(self, deadline: float) -> None:
        """Pull until a page comes back empty (bounded by ``deadline``)."""
        while time.monotonic() < deadline:
            page = self.pull()
            if not page.keys and not page.has_more:
                return
        raise AssertionError(f"{self.client_id} did not reach the end of the log in time")

    def run(self, writers_done: threading.Event, deadline: float, delay: float = 0.0) -> None:
        """Page while the writers run (starting after ``delay`` seconds, so a backlog exists),
        then to the end; never raises (errors are recorded)."""
        try:
            writers_done.wait(delay)
            while not writers_done.is_set() and time.monotonic() < deadline:
                if not self.pull().has_more:
                    time.sleep(0.005)
            self.drain(deadline)
        except Exception as exc:  # recorded and asserted on by the test
            self.errors.append(f"{self.client_id}: {exc!r}")


def plain_values(rows: dict[RowKey, Snapshot]) -> dict[RowKey, dict[str, Any]]:
    """Live rows as ``{column: value}`` without nulls (what a plain reader can compare)."""
    return {
        key: {n: v for n, (v, _, _) in cols.items() if v is not None}
        for key, (live, cols, _) in rows.items()
        if live
    }


def reader_plain_values(reader: Reader) -> dict[RowKey, dict[str, Any]]:
    """A plain reader's rows without nulls (full-row deliveries carry unset columns as null)."""
    return {
        key: {n: v for n, v in cols.items() if v is not None} for key, cols in reader.values.items()
    }


# ---------------------------------------------------------------------- log checks


@dataclass
class LogReport:
    """What :func:`check_log` found, for further assertions."""

    entries: list[WalEntry]
    by_id: dict[str, WalEntry]
    announced: set[str]


def check_log(wal: WriteAheadLog, gw: str, records: Iterable[PushRecord]) -> LogReport:
    """Check the log's own invariants and every acknowledged push's answer against it.

    * cursors strictly increasing, none above the gateway's ``last_cursor``;
    * no ``deltaId`` twice in the log;
    * every delta of an acknowledged batch recorded in ``wal_delta_ids``;
    * every change a push answered with is in the log, as answered, at consecutive cursors;
    * replaying the log in cursor order rebuilds the row state exactly.
    """
    entries = wal.read_entries(gw, 0, 10**9)
    cursors = [e.cursor for e in entries]
    assert cursors, "the log is empty"
    assert cursors[0] >= 1
    bad = [(a, b) for a, b in itertools.pairwise(cursors) if a >= b]
    assert bad == [], f"cursors not strictly increasing: {bad[:5]}"
    assert cursors[-1] <= wal.max_cursor(gw)
    dups = {d: n for d, n in Counter(e.delta_id for e in entries).items() if n > 1}
    assert dups == {}, f"deltaIds appended more than once: {list(dups.items())[:5]}"
    by_id = {e.delta_id: e for e in entries}

    acked = [r for r in records if r.acked]
    acked_ids = [d.delta_id for r in acked for d in r.deltas]
    missing = set(acked_ids) - known_ids(wal, gw, acked_ids)
    assert missing == set(), f"{len(missing)} acknowledged deltaIds not remembered"

    announced: set[str] = set()
    for rec in acked:
        assert rec.body is not None
        assert rec.body["accepted"] == len(rec.deltas), rec.body
        positions = []
        for w in rec.body["deltas"]:
            entry = by_id.get(w["deltaId"])
            assert entry is not None, f"answered change not in the log: {w}"
            assert w["deltaId"] not in announced, f"change answered twice: {w}"
            announced.add(w["deltaId"])
            assert (w["op"], w["table"], w["rowId"], w["clientId"], int(w["hlc"])) == (
                entry.op,
                entry.table,
                entry.row_id,
                entry.client_id,
                entry.hlc,
            )
            assert [(c["column"], c["value"]) for c in w["columns"]] == [
                (c.column, c.value) for c in entry.columns
            ]
            positions.append(entry.cursor)
        if positions:
            expected = list(range(positions[0], positions[0] + len(positions)))
            assert positions == expected, f"one push's entries not consecutive: {positions}"

    replayed = merge_all(e.to_delta() for e in entries)
    assert replayed == wal_snapshots(wal, gw), "replaying the log does not give the row state"
    return LogReport(entries, by_id, announced)


def run_threads(targets: Iterable[Callable[[], None]], *, join_timeout: float = 90.0) -> None:
    """Start one thread per target and join them all."""
    threads = [threading.Thread(target=fn, daemon=True) for fn in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join(join_timeout)
        assert not th.is_alive(), "a worker thread hung"


def run_load(
    writers: list[Writer], readers: list[Reader], seconds: float, *, reader_delay: float = 0.5
) -> None:
    """Writers push for ``seconds`` while readers page (from ``reader_delay`` on, so they start
    behind); once every writer has stopped (no push in flight), the readers pull to the end."""
    stop = threading.Event()
    writers_done = threading.Event()
    deadline = time.monotonic() + seconds + 60
    reader_threads = [
        threading.Thread(target=r.run, args=(writers_done, deadline, reader_delay), daemon=True)
        for r in readers
    ]
    timer = threading.Timer(seconds, stop.set)
    for th in reader_threads:
        th.start()
    timer.start()
    try:
        run_threads([(lambda w=w: w.run(stop)) for w in writers])
    finally:
        timer.cancel()
        stop.set()
        writers_done.set()
        for th in reader_threads:
            th.join(90)
    assert not any(th.is_alive() for th in reader_threads), "a reader hung"


def push_copies_together(copies: list[Writer], rounds: int) -> list[PushRecord]:
    """Push the same batch through every writer at once, ``rounds`` times; close them; return
    every answer (``copies[i].records[r]`` is writer i's answer in round r)."""

    def push_together(w: Writer, batch: list[RowDelta], barrier: threading.Barrier) -> None:
        barrier.wait(10)
        w.push(batch)

    try:
        for _ in range(rounds):
            batch = copies[0].batch()
            barrier = threading.Barrier(len(copies))
            run_threads([partial(push_together, w, batch, barrier) for w in copies])
    finally:
        for w in copies:
            w.close()
    return [r for w in copies for r in w.records]


# ---------------------------------------------------------------------- the test


WRITERS = 7
LOAD_SECONDS = 3.0


def test_concurrent_writers_and_paging_reader(
    gateway: GatewayProcess, wal_target: tuple[str | None, str], gw: str
) -> None:
    writers = [Writer(gateway.url, gw, f"writer{i}", seed=1000 + i) for i in range(WRITERS)]
    readers = [
        Reader(gateway.url, gw, "reader-stamped", limit=11),
        Reader(gateway.url, gw, "reader-plain", limit=50, stamped=False),
    ]
    try:
        run_load(writers, readers, LOAD_SECONDS)
    finally:
        for c in (*writers, *readers):
            c.close()

    assert [e for c in (*writers, *readers) for e in c.errors] == []
    records = [r for w in writers for r in w.records]
    failed = [(r.status, r.error) for r in records if not r.acked]
    assert failed == [], f"{len(failed)} pushes failed: {failed[:3]}"
    assert len(records) >= WRITERS * 5, f"too little load: {len(records)} pushes"
    pushed = [d for r in records for d in r.deltas]

    wal = WriteAheadLog.open(wal_target[1])
    try:
        report = check_log(wal, gw, records)
        # Every push was acknowledged, so the log is exactly the changes the pushes answered.
        assert set(report.by_id) == report.announced
        assert set(report.by_id) <= {d.delta_id for d in pushed}
        # Each delta that changed something is in the log once: the shared rows make many
        # deltas lose, so the log is strictly smaller than what was pushed.
        assert 0 < len(report.entries) < len(pushed)
        state = wal_snapshots(wal, gw)
    finally:
        wal.close()

    # Every acknowledged delta's effect is in the row state: merging everything pushed, in any
    # order, gives the same rows (the merge is commutative and idempotent).
    shuffled = list(pushed)
    random.Random(7).shuffle(shuffled)
    assert merge_all(shuffled) == state
    assert sum(1 for live, _, _ in state.values() if not live) > 0, "no deletes exercised"

    stamped, plain = readers
    print(
        f"pushes={len(records)} deltas={len(pushed)} entries={len(report.entries)} "
        f"rows={len(state)} pages={len(stamped.pages)}/{len(plain.pages)}"
    )
    assert len(stamped.pages) > 5, "the reader barely paged"
    assert any(p.has_more for p in stamped.pages), "no page was cut by the limit"
    assert stamped.rows == state
    assert reader_plain_values(plain) == plain_values(state)


def test_one_batch_pushed_on_several_connections_at_once_is_appended_once(
    gateway: GatewayProcess, wal_target: tuple[str | None, str], gw: str
) -> None:
    """A client retrying a push while the first attempt is still in flight: every copy is
    answered 200, exactly one appends, the others are pure duplicates."""
    copies = [
        Writer(gateway.url, gw, "retrier", seed=5000, workload="own", max_batch=20)
        for _ in range(4)
    ]
    rounds = 15
    records = push_copies_together(copies, rounds)
    assert [(r.status, r.error) for r in records if not r.acked] == []
    for i in range(rounds):
        answers = [w.records[i] for w in copies]
        appended = [a for a in answers if a.body and a.body["deltas"]]
        assert len(appended) == 1, [a.body for a in answers]
        assert len(appended[0].body["deltas"]) == len(answers[0].deltas)  # type: ignore[index]
    wal = WriteAheadLog.open(wal_target[1])
    try:
        report = check_log(wal, gw, records)
    finally:
        wal.close()
    assert set(report.by_id) == report.announced == {d.delta_id for r in records for d in r.deltas}
