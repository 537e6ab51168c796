"""A Python client whose cursor fell below the hot WAL's floor converges: its pull is answered
from row state, like any other (nothing to re-bootstrap), and so is a new client's."""

from __future__ import annotations

from lakesync_platform.sync.cursors import split_cursor
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import ManualClock
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import GW, ClientFactory, local_rows, server_rows


def _flush_and_trim(wal: WriteAheadLog) -> int:
    head = wal.max_cursor(GW)
    wal.set_flush_watermark(GW, head)  # what a flush does once the lake committed
    trimmed = wal.trim(GW, head, batch=4)
    wal.trim_delta_ids(GW, 2**62)
    return trimmed


def test_a_client_behind_the_floor_converges(
    make_client: ClientFactory, service: SyncService, wal: WriteAheadLog, clock: ManualClock
) -> None:
    writer, reader = make_client("writer"), make_client("reader")
    for i in range(30):
        writer.tracker.insert("todos", f"t{i}", {"title": f"todo {i}", "priority": i})
    writer.sync_once()
    reader.sync_once()
    assert local_rows(reader) == server_rows(service)
    behind = split_cursor(reader.coordinator.cursor)[1]

    # The reader is away while the others write and the WAL is flushed and trimmed past it.
    for i in range(0, 30, 3):
        clock.advance(10)
        writer.tracker.update("todos", f"t{i}", {"title": f"edited {i}", "done": True})
    for i in range(1, 30, 5):
        writer.tracker.delete("todos", f"t{i}")
    for i in range(30, 40):
        writer.tracker.insert("todos", f"t{i}", {"title": f"new {i}"})
    writer.sync_once()
    reader.tracker.update("todos", "t2", {"title": "offline edit"})
    assert _flush_and_trim(wal) > 0
    assert wal.log_floor(GW) > behind and wal.stats(GW).log_entries == 0

    reader.sync_once()
    reader.sync_once()
    writer.sync_once()
    newcomer = make_client("newcomer")
    newcomer.sync_once()
    expected = server_rows(service)
    assert expected["t2"]["title"] == "offline edit" and "t1" not in expected
    assert local_rows(reader) == local_rows(writer) == local_rows(newcomer) == expected
