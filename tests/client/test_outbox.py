"""The persistent outbox: states, backoff, dead letters, crash recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync_platform.client import LocalDB, Outbox, backoff_ms
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.ids import delta_id


def _delta(n: int, text: str = "x") -> RowDelta:
    cols = (ColumnDelta("title", text),)
    hlc = (1_700_000_000_000 << 16) + n
    return RowDelta(
        "INSERT", "todos", f"r{n}", "c1", cols, hlc, delta_id("c1", hlc, "todos", f"r{n}", cols)
    )


@pytest.fixture
def outbox() -> Outbox:
    box = Outbox(LocalDB.memory())
    box.create()
    return box


def test_backoff_doubles_and_caps() -> None:
    assert [backoff_ms(n) for n in range(7)] == [1000, 2000, 4000, 8000, 16000, 30000, 30000]
    assert backoff_ms(10_000) == 30_000


def test_round_trip_and_ack(outbox: Outbox) -> None:
    deltas = [_delta(i) for i in range(3)]
    for d in deltas:
        outbox.add(d, now_ms=5)
    assert outbox.depth() == 3
    batch = outbox.take_batch(now_ms=5, limit=2, max_bytes=10**6)
    assert [e.delta for e in batch] == deltas[:2]
    assert {e.status for e in outbox.entries("sending")} == {"sending"}
    assert outbox.take_batch(now_ms=5, limit=10, max_bytes=10**6)[0].delta == deltas[2]
    assert outbox.take_batch(now_ms=5, limit=10, max_bytes=10**6) == []
    outbox.ack([e.id for e in batch])
    assert outbox.depth() == 1
    assert outbox.max_hlc() == deltas[2].hlc


def test_batch_respects_byte_budget_but_always_takes_one(outbox: Outbox) -> None:
    for i in range(5):
        outbox.add(_delta(i, "y" * 400), now_ms=0)
    batch = outbox.take_batch(now_ms=0, limit=10, max_bytes=1000)
    assert 1 <= len(batch) < 5
    assert sum(e.size for e in batch) <= 1000
    tiny = outbox.take_batch(now_ms=0, limit=10, max_bytes=1)
    assert len(tiny) == 1


def test_nack_schedules_backoff_then_dead_letters(outbox: Outbox) -> None:
    outbox.add(_delta(1), now_ms=0)
    now = 0
    for attempt in range(1, 4):
        (entry,) = outbox.take_batch(now, 10, 10**6)
        assert outbox.nack([entry.id], now, "down", max_retries=4) == []
        (pending,) = outbox.entries("pending")
        assert pending.retry_count == attempt
        assert pending.retry_after == now + backoff_ms(attempt)
        assert pending.last_error == "down"
        assert outbox.take_batch(now + backoff_ms(attempt) - 1, 10, 10**6) == []
        now += backoff_ms(attempt)
    (entry,) = outbox.take_batch(now, 10, 10**6)
    assert outbox.nack([entry.id], now, "still down", max_retries=4) == [entry.id]
    assert outbox.depth() == 0
    (dead,) = outbox.entries("dead")
    assert dead.last_error == "still down"
    assert outbox.take_batch(now + 10**9, 10, 10**6) == []


def test_nack_honours_a_minimum_delay(outbox: Outbox) -> None:
    outbox.add(_delta(1), now_ms=0)
    (entry,) = outbox.take_batch(0, 10, 10**6)
    outbox.nack([entry.id], 0, "429", max_retries=10, min_delay_ms=45_000)
    assert outbox.entries()[0].retry_after == 45_000


def test_end_outage_makes_unreachable_entries_due_and_keeps_refusals_backing_off(
    outbox: Outbox,
) -> None:
    for i in range(3):
        outbox.add(_delta(i), now_ms=0)
    lost, refused, down = outbox.take_batch(0, 10, 10**6)
    outbox.nack([lost.id, down.id], 0, "connect failed", max_retries=10, unreachable=True)
    outbox.nack([refused.id], 0, "429", max_retries=10, min_delay_ms=45_000)
    assert outbox.take_batch(0, 10, 10**6) == []
    assert outbox.end_outage() == 2
    assert [e.id for e in outbox.take_batch(0, 10, 10**6)] == [lost.id, down.id]
    assert outbox.entries("pending")[0].retry_after == 45_000  # the gateway's refusal stands
    assert outbox.end_outage() == 0  # the outage already ended


def test_a_file_of_an_earlier_version_gains_the_unreachable_column(tmp_path: Path) -> None:
    db = LocalDB.open(tmp_path / "old.db")
    db.exec(  # the outbox table as earlier versions created it
        "CREATE TABLE _lakesync_outbox ("
        "id INTEGER PRIMARY KEY AUTOINCREMENT, delta_id TEXT NOT NULL, tbl TEXT NOT NULL, "
        "row_id TEXT NOT NULL, hlc INTEGER NOT NULL, delta BLOB NOT NULL, "
        "status TEXT NOT NULL DEFAULT 'pending', retry_count INTEGER NOT NULL DEFAULT 0, "
        "retry_after INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, last_error TEXT)"
    )
    box = Outbox(db)
    box.add(_delta(1), now_ms=0)
    box.create()
    (entry,) = box.take_batch(0, 10, 10**6)
    box.nack([entry.id], 0, "connect failed", max_retries=10, unreachable=True)
    assert box.end_outage() == 1 and box.entries()[0].delta == _delta(1)
    db.close()


def test_requeue_and_discard_dead(outbox: Outbox) -> None:
    for i in range(3):
        outbox.add(_delta(i), now_ms=0)
    ids = [e.id for e in outbox.take_batch(0, 10, 10**6)]
    outbox.dead_letter(ids, "schema")
    assert outbox.depth() == 0 and len(outbox.entries("dead")) == 3
    assert outbox.requeue_dead([ids[0]]) == 1
    assert outbox.requeue_dead([]) == 0
    assert [e.id for e in outbox.entries("pending")] == [ids[0]]
    assert outbox.discard_dead([ids[1]]) == 1
    assert outbox.requeue_dead() == 1
    assert outbox.discard_dead() == 0
    assert outbox.depth() == 2


def test_sending_entries_survive_a_crash_and_are_resent_unchanged(tmp_path: Path) -> None:
    db = LocalDB.open(tmp_path / "o.db")
    box = Outbox(db)
    box.create()
    box.add(_delta(7), now_ms=0)
    (taken,) = box.take_batch(0, 10, 10**6)
    db.close()  # "crash" while the entry is sending
    db = LocalDB.open(tmp_path / "o.db")
    box = Outbox(db)
    box.create()
    (again,) = box.take_batch(0, 10, 10**6)
    assert again.id == taken.id and again.delta == taken.delta  # same deltaId, same stamp
    db.close()


def test_release_returns_entries_without_counting(outbox: Outbox) -> None:
    outbox.add(_delta(1), now_ms=0)
    (entry,) = outbox.take_batch(0, 10, 10**6)
    outbox.release([entry.id])
    (pending,) = outbox.entries("pending")
    assert pending.retry_count == 0
    assert outbox.next_retry_at() == 0
