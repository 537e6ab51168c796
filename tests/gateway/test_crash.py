"""Crash test (ARCHITECTURE.md §3, §8): ``kill -9`` the gateway under load, twice, and restart it.

Every client writes only its own rows, one batch after another with increasing HLCs, so every
delta the gateway accepts changes its row and must be in the log as exactly one entry. After
two kills at different moments:

* every acknowledged delta is remembered (``wal_delta_ids``), in the log exactly once, and its
  effect is in the row state;
* a batch that got no answer is either wholly in the WAL or wholly absent;
* cursors stayed strictly increasing across the restarts;
* re-pushing every batch (answered or not) adds nothing for batches already in, and doing it
  again adds nothing at all;
* the restarted gateway serves pulls that converge to its row state.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from lakesync_platform.core.delta import RowDelta
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from tests.gateway.test_e2e import (
    PushRecord,
    Reader,
    Writer,
    check_log,
    known_ids,
    merge_all,
    plain_values,
    reader_plain_values,
    run_threads,
    wal_snapshots,
)

CLIENTS = 5
KILL_AFTER = (2.0, 1.3)
"""Seconds of load before each ``kill -9`` (two different moments)."""


@dataclass
class Cycle:
    """What happened in one load-and-kill round."""

    acked: int
    unanswered: int
    in_flight: int


def load_then_kill(proc: GatewayProcess, writers: list[Writer], seconds: float) -> Cycle:
    """Push from every writer for ``seconds``, SIGKILL the gateway mid-load, restart it."""
    before = [len(w.records) for w in writers]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in writers]
    for th in threads:
        th.start()
    time.sleep(seconds)
    proc.kill()
    stop.set()
    for th in threads:
        th.join(90)
    assert not any(th.is_alive() for th in threads), "a writer hung after the kill"
    proc.start(timeout=60)
    new = [r for w, n in zip(writers, before, strict=True) for r in w.records[n:]]
    unanswered = [r for r in new if r.status is None]
    return Cycle(
        acked=sum(1 for r in new if r.acked),
        unanswered=len(unanswered),
        # Sent, then the connection died: these were being processed when the kill landed.
        in_flight=sum(1 for r in unanswered if "ConnectError" not in r.error),
    )


def repush_each(writers: list[Writer]) -> dict[int, PushRecord]:
    """Every writer re-pushes every batch it ever tried, in order; answers keyed by record id."""
    answers: dict[int, PushRecord] = {}
    lock = threading.Lock()

    def repush(w: Writer) -> None:
        for rec in list(w.records):
            answer = w.push(rec.deltas, record=False)
            with lock:
                answers[id(rec)] = answer

    run_threads([(lambda w=w: repush(w)) for w in writers])
    return answers


def test_kill_9_under_load_keeps_every_acknowledged_delta_exactly_once(
    gateway: GatewayProcess, wal_target: tuple[str | None, str], gw: str
) -> None:
    writers = [
        Writer(gateway.url, gw, f"client{i}", seed=4000 + i, workload="own", max_batch=30)
        for i in range(CLIENTS)
    ]
    readers: list[Reader] = []
    wal: WriteAheadLog | None = None
    try:
        cycles = [load_then_kill(gateway, writers, s) for s in KILL_AFTER]
        for w in writers:
            assert w.errors == []
            odd = [(r.status, r.error) for r in w.records if r.status not in (None, 200)]
            assert odd == [], f"pushes answered with an error: {odd[:3]}"
        for cycle in cycles:
            assert cycle.acked >= CLIENTS, f"too little load before the kill: {cycle}"
        assert sum(c.in_flight for c in cycles) >= 1, f"no push was in flight at a kill: {cycles}"

        records = [r for w in writers for r in w.records]
        all_ids = [d.delta_id for r in records for d in r.deltas]
        assert len(set(all_ids)) == len(all_ids)
        wal = WriteAheadLog.open(wal_target[1])

        # ---- after the crashes: exactly once, whole batches, increasing cursors
        report = check_log(wal, gw, records)
        present = known_ids(wal, gw, all_ids)
        assert set(report.by_id) == present, "an accepted delta without exactly one entry"
        acked_ids = {d.delta_id for r in records if r.acked for d in r.deltas}
        assert acked_ids <= set(report.by_id)
        unacked = [r for r in records if not r.acked]
        halves = [
            (len(r.deltas), len({d.delta_id for d in r.deltas} & present))
            for r in unacked
            if 0 < len({d.delta_id for d in r.deltas} & present) < len(r.deltas)
        ]
        assert halves == [], f"batches half in the WAL (size, present): {halves}"
        was_in = {id(r) for r in records if r.deltas[0].delta_id in present}
        absent = [r for r in unacked if id(r) not in was_in]
        for w in writers:
            mine = [e.hlc for e in report.entries if e.client_id == w.client_id]
            assert mine == sorted(mine) and len(set(mine)) == len(mine), (
                f"{w.client_id}: cursor order differs from push order across the restarts"
            )
        state = wal_snapshots(wal, gw)
        accepted: list[RowDelta] = [d for r in records for d in r.deltas if d.delta_id in present]
        assert merge_all(reversed(accepted)) == state

        # ---- re-push every batch, answered or not
        answers = repush_each(writers)
        for rec in records:
            again = answers[id(rec)]
            assert again.acked, (again.status, again.error)
            assert again.body is not None and again.body["accepted"] == len(rec.deltas)
            if id(rec) in was_in:
                assert again.body["deltas"] == [], "a re-pushed batch appended again"
        report2 = check_log(wal, gw, [*records, *answers.values()])
        assert report2.entries[: len(report.entries)] == report.entries
        new_ids = {e.delta_id for e in report2.entries[len(report.entries) :]}
        assert new_ids <= {d.delta_id for r in absent for d in r.deltas}
        assert new_ids == report2.announced - report.announced
        assert known_ids(wal, gw, all_ids) == set(all_ids)
        state2 = wal_snapshots(wal, gw)
        assert merge_all(d for r in records for d in r.deltas) == state2

        # ---- and once more, in big batches: nothing new at all
        bulk: list[PushRecord] = []

        def repush_all_at_once(w: Writer) -> None:
            mine = [d for r in w.records for d in r.deltas]
            bulk.extend(w.push(mine[i : i + 2000], record=False) for i in range(0, len(mine), 2000))

        run_threads([(lambda w=w: repush_all_at_once(w)) for w in writers])
        assert len(bulk) >= CLIENTS
        for again in bulk:
            assert again.acked and again.body is not None, (again.status, again.error)
            assert again.body["deltas"] == []
        assert wal.read_entries(gw, 0, 10**9) == report2.entries
        assert wal_snapshots(wal, gw) == state2

        # ---- the restarted gateway serves pulls normally
        readers = [
            Reader(gateway.url, gw, "puller-stamped", limit=400),
            Reader(gateway.url, gw, "puller-plain", limit=400, stamped=False),
        ]
        for reader in readers:
            reader.drain(time.monotonic() + 60)
        assert readers[0].rows == state2
        assert reader_plain_values(readers[1]) == plain_values(state2)
        print(
            f"cycles={cycles} batches={len(records)} unacked={len(unacked)} "
            f"unacked_present={len(unacked) - len(absent)} entries={len(report2.entries)}"
        )
    finally:
        if wal is not None:
            wal.close()
        for c in (*writers, *readers):
            c.close()
