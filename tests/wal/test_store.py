"""The SQL WAL specifically: migrations, SQLite journal and checkpoints, open errors.

What every store does is in ``test_contract.py``."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.hlc import encode
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal import tables
from lakesync_platform.wal.log import CursorSpan
from lakesync_platform.wal.sqlite import JOURNAL_SIZE_LIMIT, SqliteCheckpointer, SqliteWriterLock
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import make_delta
from tests.wal.conftest import BASE_MS


def test_migrations_are_versioned_and_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'wal.db'}"
    for _ in range(2):
        wal = WriteAheadLog.open(url, now_ms=1)
        with wal.read() as conn:
            versions = conn.execute(select(tables.schema_version.c.version)).scalars().all()
        wal.close()
        assert versions == [v for v, _ in tables.MIGRATIONS]


def test_sqlite_runs_in_wal_journal_mode_with_full_sync(tmp_path: Path) -> None:
    wal = WriteAheadLog.open(f"sqlite:///{tmp_path / 'wal.db'}")
    with wal.write() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    # the first commit after the log starts over truncates the -wal file to this size
    for connect in (wal.write, wal.read, wal._bookkeeping):
        with connect() as conn:
            limit = conn.exec_driver_sql("PRAGMA journal_size_limit").scalar()
            assert limit == JOURNAL_SIZE_LIMIT
    wal.close()


def _push_rows(wal: WriteAheadLog, gw: str, first: int, n: int) -> None:
    SyncService(wal, clock=lambda: BASE_MS).push(
        gw,
        "a",
        [
            make_delta("a", encode(BASE_MS, i), "t", f"r{i}", {"x": "v" * 200}, "INSERT")
            for i in range(first, first + n)
        ],
    )


def test_sqlite_commits_leave_checkpoints_to_a_background_thread(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    wal = WriteAheadLog.open(f"sqlite:///{path}")
    with wal.write() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    with wal._bookkeeping() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    _push_rows(wal, "gw", 0, 2000)  # ~1 MB: past SQLite's default 1000-page autocheckpoint
    # the commit only appended to the -wal file; the checkpoint thread copies the pages into
    # the database file soon after (waited for, not timed)
    deadline = time.monotonic() + 30
    while path.stat().st_size < 2000 * 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.stat().st_size >= 2000 * 200
    wal.close()
    reopened = WriteAheadLog.open(f"sqlite:///{path}")
    assert reopened.stats("gw").row_count == 2000
    reopened.close()


def test_sqlite_checkpoint_restarts_a_long_log_under_the_writer_lock(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    wal = WriteAheadLog.open(f"sqlite:///{path}")
    ckpt = wal._checkpointer
    assert ckpt is not None
    ckpt.close()  # no background checkpoints: this test runs them itself
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        _push_rows(wal, "gw", 0, 500)
        ckpt._restart_frames = 10**9  # passive only: the log keeps its frames
        busy, frames, done = ckpt.checkpoint(conn)
        assert busy == 0 and frames > 0 and done == frames
        _push_rows(wal, "gw", 500, 500)
        ckpt._restart_frames = 1  # a long log: RESTART under the writer lock
        busy, frames, done = ckpt.checkpoint(conn)
        assert busy == 0 and done == frames
        _push_rows(wal, "gw", 1000, 1)
        # after a restart the next commit writes from the start of the log again
        _, frames_after, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert 0 < frames_after < frames
    finally:
        conn.close()
    assert wal.stats("gw").row_count == 1001
    wal.close()


def test_sqlite_checkpoint_catches_up_before_it_restarts_under_the_lock(tmp_path: Path) -> None:
    """Frames committed while a passive checkpoint runs are copied by another passive one
    before the restart takes the writer lock (the restart then copies little)."""
    path = tmp_path / "wal.db"
    wal = WriteAheadLog.open(f"sqlite:///{path}")
    ckpt = wal._checkpointer
    assert ckpt is not None
    ckpt.close()  # no background checkpoints: this test runs them itself
    raw = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    calls: list[str] = []
    # as if a push committed while each of the first two checkpoints ran: a large one (well
    # over the catch-up threshold in frames), then a small one
    during = {1: (1000, 4000), 2: (5000, 10)}

    class Recording:
        """Records the checkpoints run through it."""

        def execute(self, sql: str) -> sqlite3.Cursor:
            calls.append(sql.split("(")[1].rstrip(")"))
            cursor = raw.execute(sql)
            if len(calls) in during and calls[-1] == "PASSIVE":  # (a restart holds the lock)
                _push_rows(wal, "gw", *during[len(calls)])
            return cursor

    try:
        _push_rows(wal, "gw", 0, 500)
        ckpt._restart_frames = 1
        busy, frames, done = ckpt.checkpoint(Recording())  # type: ignore[arg-type]
        assert busy == 0 and done == frames
        # the first catch-up pass copied the large push made during the first checkpoint,
        # the second only the small one made during the first pass: then the restart
        assert calls == ["PASSIVE", "PASSIVE", "PASSIVE", "RESTART"]
    finally:
        raw.close()
    assert wal.stats("gw").row_count == 4510
    wal.close()


def test_sqlite_journal_left_large_by_a_burst_is_truncated_once_writes_pause(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wal.db"
    journal = Path(f"{path}-wal")
    wal = WriteAheadLog.open(f"sqlite:///{path}")
    assert wal._checkpointer is not None
    wal._checkpointer.close()  # this test's own checkpointer watches the file instead
    ckpt = SqliteCheckpointer(
        str(path), SqliteWriterLock(str(path)), idle_s=0.05, keep_bytes=400_000
    )
    try:
        _push_rows(wal, "gw", 0, 2000)  # ~1 MB of journal
        assert journal.stat().st_size > 1_000_000
        ckpt.notify()
        deadline = time.monotonic() + 20  # waited for, not timed
        while journal.stat().st_size > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert journal.stat().st_size == 0
        # a small journal is left alone; writes go on as before
        _push_rows(wal, "gw", 2000, 10)
        size = journal.stat().st_size
        assert 0 < size <= 400_000
        ckpt.notify()
        time.sleep(0.3)  # a checkpoint and an idle spell later
        assert journal.stat().st_size == size
    finally:
        ckpt.close()
    assert wal.stats("gw").row_count == 2010
    wal.close()


def test_unreachable_database_is_a_clear_adapter_error() -> None:
    with pytest.raises(AdapterError, match="Cannot open the WAL"):
        WriteAheadLog.open("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with pytest.raises(AdapterError, match="Unsupported WAL URL"):
        WriteAheadLog.open("mysql://x")


def test_v2_migration_keys_delta_ids_by_hlc_and_keeps_older_ids_deduplicated(
    wal: WriteAheadLog, gw: str
) -> None:
    # Turn the fresh WAL back into a version-1 one: wal_delta_ids keyed by id alone.
    old = make_delta("a", encode(BASE_MS, 1), "t", "r1", {"x": 1}, "INSERT")
    with wal.write() as conn:
        conn.exec_driver_sql("DROP TABLE wal_delta_ids")
        conn.exec_driver_sql(
            "CREATE TABLE wal_delta_ids (gateway_id TEXT NOT NULL, delta_id TEXT NOT NULL,"
            " CONSTRAINT pk_wal_delta_ids PRIMARY KEY (gateway_id, delta_id))"
        )
        conn.exec_driver_sql(
            "INSERT INTO wal_delta_ids (gateway_id, delta_id) VALUES ('"
            + gw
            + "', '"
            + old.delta_id
            + "')"
        )
        conn.execute(tables.schema_version.delete().where(tables.schema_version.c.version >= 2))
    reopened = WriteAheadLog.open(wal.url, now_ms=1)
    try:
        with reopened.read() as conn:
            versions = conn.execute(select(tables.schema_version.c.version)).scalars().all()
            rows = conn.exec_driver_sql(
                "SELECT gateway_id, hlc, delta_id FROM wal_delta_ids WHERE gateway_id = '"
                + gw
                + "'"
            ).all()
        assert max(versions) == len(tables.MIGRATIONS)
        assert [tuple(r) for r in rows] == [(gw, tables.LEGACY_HLC, old.delta_id)]
        service = SyncService(reopened, lambda: BASE_MS)
        new = make_delta("a", encode(BASE_MS, 2), "t", "r2", {"x": 2}, "INSERT")
        first = service.push(gw, "a", [old, new])
        assert first.duplicates == 1 and [e.delta_id for e in first.entries] == [new.delta_id]
        again = service.push(gw, "a", [new, old])
        assert again.duplicates == 2 and again.entries == ()
        with reopened.read() as conn:
            ids = conn.execute(
                select(tables.delta_ids.c.delta_id).where(tables.delta_ids.c.gateway_id == gw)
            ).scalars()
            assert set(ids) == {old.delta_id, new.delta_id}
    finally:
        reopened.close()


def test_cursor_span_counts_and_sums_a_range_in_the_database(tmp_path: Path) -> None:
    """What the log check holds the lake to: count and cursor sum of a range, other gateways
    apart, and a sample of the cursors a range holds."""
    wal = WriteAheadLog.open(f"sqlite:///{tmp_path / 'wal.db'}")
    try:
        _push_rows(wal, "g1", 0, 6)
        _push_rows(wal, "g2", 0, 3)
        assert wal.cursor_span("g1", 2, 4) == CursorSpan(3, 2 + 3 + 4)
        assert wal.cursor_span("g1", 1, 99) == CursorSpan(6, 21)
        assert wal.cursor_span("g1", 5, 4) == CursorSpan(0, 0)
        assert wal.cursor_span("nobody", 1, 9) == CursorSpan(0, 0)
        assert wal.cursors_between("g1", 2, 6, limit=3) == [2, 3, 4]
        assert wal.cursors_between("g2", 3, 9) == [3]
    finally:
        wal.close()
