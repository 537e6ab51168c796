"""SQLite's writer lock and checkpointer, and how the WAL's SQLite connections are set up.

The embedded WAL is one SQLite file in WAL journal mode with ``synchronous=FULL``; writes take
the database lock up front (``BEGIN IMMEDIATE``), reads run on their own connections. Commits
only append to the ``-wal`` file (and fsync it); copying pages back into the database file
(the checkpoint) runs on a background thread with its own connection
(:class:`SqliteCheckpointer`), off the commit path.

The ``-wal`` file is reused from its start once a checkpoint has copied all of it, but SQLite
never shrinks it by itself: after a burst of pushes it kept its largest size (~72 MB, the
restart threshold's frames and what came in meanwhile) for good. Two things bound it now:
every connection sets ``journal_size_limit`` (:data:`JOURNAL_SIZE_LIMIT`, the restart
threshold's size), so the first commit after the log starts over truncates the file to that
size; and once no write has come for :data:`IDLE_TRUNCATE_S` after a checkpoint, the
checkpointer truncates a file larger than :data:`IDLE_KEEP_BYTES` to zero
(``wal_checkpoint(TRUNCATE)``): a burst leaves no large journal behind.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event

__all__ = [
    "BATCH_MEMORY",
    "IDLE_KEEP_BYTES",
    "IDLE_TRUNCATE_S",
    "JOURNAL_SIZE_LIMIT",
    "RESTART_FRAMES",
    "SERVER_MEMORY",
    "SqliteCheckpointer",
    "SqliteMemory",
    "SqliteWriterLock",
    "configure_sqlite",
]


@dataclass(frozen=True, slots=True)
class SqliteMemory:
    """How much of the WAL file each SQLite connection of a process keeps in its memory: a page
    cache of ``cache_kib`` and a memory map of ``mmap_bytes`` (0: read through the OS cache)."""

    cache_kib: int
    mmap_bytes: int


SERVER_MEMORY = SqliteMemory(cache_kib=131_072, mmap_bytes=1 << 30)
"""A gateway's connections: the hot index pages (delta ids, row keys) stay cached and the file
is mapped (a long-lived process serving every push)."""
BATCH_MEMORY = SqliteMemory(cache_kib=16_384, mmap_bytes=0)
"""A pipeline run's connections (a connector poll, a flush): a bounded page cache and no map.
Every mapped page a run touches counts in its resident memory, so a poll whose appends look up
rows spread over a large WAL grew with the WAL (a 1%-changed poll of a 1M-row WAL: 639 MB,
against 122 MB at 100k); read through the OS's cache instead, a run holds what it works on."""

RESTART_FRAMES = 16_384
"""Frames in the log at which :class:`SqliteCheckpointer` makes it start over (``RESTART``)."""
JOURNAL_SIZE_LIMIT = RESTART_FRAMES * (4096 + 24)
"""Bytes of ``-wal`` file SQLite keeps when the log starts over (its ``journal_size_limit``):
what the log holds when the checkpointer restarts it (4 KiB pages, 24-byte frame headers), so a
sustained load reuses the file instead of growing it again after every restart — with a 16 MiB
limit the regrowth (an extending write and its metadata flushed at each commit) cut push
throughput by about 30% (``benchmarks/bench_wal_journal.py``, at load 7-8). A larger file,
left by a long reader that kept the log from restarting, is cut back to this at the next
restart."""
IDLE_TRUNCATE_S = 5.0
"""Seconds without a write after which the checkpointer truncates a large ``-wal`` file."""
IDLE_KEEP_BYTES = 4 * 1024 * 1024
"""A ``-wal`` file up to this size is left as it is when writes pause."""

log = logging.getLogger(__name__)


class SqliteWriterLock:
    """Serialises SQLite writers: threads on a lock, processes on ``flock`` of ``<db>.lock``.

    SQLite's own busy handler polls with sleeps, which idles the single writer under load; a
    kernel lock hands the database over the moment the previous writer commits, also between
    the worker processes of one gateway (``--workers``).
    """

    def __init__(self, database: str) -> None:
        self._thread_lock = threading.Lock()
        self._path = database + ".lock" if database not in ("", ":memory:") else None
        self._fd: int | None = None

    def __enter__(self) -> None:
        self._thread_lock.acquire()
        if self._path is None:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def close(self) -> None:
        """Close the lock file."""
        with self._thread_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


_CATCH_UP_ROUNDS = 8
"""Passive checkpoints at most, after the first, before a restart takes the writer lock."""
_CATCH_UP_FRAMES = 512
"""A catch-up pass that copied fewer frames than this leaves little for the restart."""


class SqliteCheckpointer:
    """Checkpoints a SQLite WAL on a background thread, off the commit path.

    Every connection of the SQLite WAL runs with ``wal_autocheckpoint=0``: a commit
    only appends its pages to the ``-wal`` file and fsyncs it (``synchronous=FULL``; that is
    what makes an acknowledged push durable). Copying those pages into the database file and
    fsyncing it — the checkpoint, which SQLite would otherwise run inside every ~1000th commit —
    happens here, on a separate connection: SQLite releases the GIL while it checkpoints, so
    the copy overlaps with the next pushes instead of delaying them.

    After a write is signalled the thread waits ``delay_s`` (so one checkpoint covers many
    commits) and runs a ``PASSIVE`` checkpoint, which never blocks readers or writers. Under
    continuous writes a passive checkpoint may never catch up with the end of the log, so the
    log could not restart from its beginning; once it holds ``restart_frames`` frames the
    thread takes the writer lock (writers queue for the few milliseconds it takes to copy the
    rest) and runs a ``RESTART`` checkpoint, after which the next commit starts the log over.

    When no write is signalled for ``idle_s`` after a checkpoint and the ``-wal`` file is
    larger than ``keep_bytes``, the thread truncates it (:meth:`truncate`): a burst of pushes
    leaves no large journal behind.
    """

    def __init__(
        self,
        database: str,
        writer_lock: SqliteWriterLock,
        *,
        delay_s: float = 0.05,
        restart_frames: int = RESTART_FRAMES,
        idle_s: float = IDLE_TRUNCATE_S,
        keep_bytes: int = IDLE_KEEP_BYTES,
    ) -> None:
        self._database = database
        self._writer_lock = writer_lock
        self._delay_s = delay_s
        self._restart_frames = restart_frames
        self._idle_s = idle_s
        self._keep_bytes = keep_bytes
        self._cond = threading.Condition()
        self._pending = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def notify(self) -> None:
        """A write committed (or failed): check the log soon."""
        if self._pending:
            return
        with self._cond:
            self._pending = True
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="lakesync-wal-checkpoint", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Stop the thread (after a last checkpoint)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self._database, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=2000")
            conn.execute("PRAGMA wal_autocheckpoint=0")
            idle_at: float | None = None  # when, with no write meanwhile, the log is truncated
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        wait = None if idle_at is None else idle_at - time.monotonic()
                        if wait is not None and wait <= 0:
                            break
                        self._cond.wait(wait)
                    if not self._pending and self._closed:
                        return
                    written = self._pending
                if not written:
                    idle_at = None
                    self.truncate(conn)
                    continue
                if not self._closed:
                    time.sleep(self._delay_s)
                self._pending = False
                self.checkpoint(conn)
                idle_at = time.monotonic() + self._idle_s
        except Exception as exc:  # never take the gateway down; SQLite checkpoints on close
            log.warning("WAL checkpoint thread stopped: %s", exc)
        finally:
            if conn is not None:
                conn.close()

    def checkpoint(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """One passive checkpoint; a restart under the writer lock once the log is long.

        Before it takes the lock, the thread runs passive checkpoints again (at most
        ``_CATCH_UP_ROUNDS``) while each still copies many frames — those committed during
        the previous one — so that the restart, which writers wait for, copies few. With 1M
        rows stored (a push then dirties hundreds of pages), the lock was held for 33-50 ms
        instead of up to 120 ms, and the slowest of 300 in-process 500-delta pushes took
        55-72 ms instead of 125-141 ms.
        """
        busy, frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames >= self._restart_frames:
            for _ in range(_CATCH_UP_ROUNDS):
                before = done
                busy, frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if done - before < _CATCH_UP_FRAMES:
                    break  # little was left: the restart will be quick too
            with self._writer_lock:
                busy, frames, done = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        return int(busy), int(frames), int(done)

    def truncate(self, conn: sqlite3.Connection) -> bool:
        """Truncate the ``-wal`` file to zero bytes if it is larger than ``keep_bytes``;
        returns whether it was.

        A ``TRUNCATE`` checkpoint under the writer lock, which it holds only as long as
        copying what is left takes (nothing, after the last checkpoint): it does not wait for
        readers (busy timeout 0) and leaves the file for the next idle spell when one still
        reads from the log.
        """
        try:
            size = os.path.getsize(self._database + "-wal")
        except FileNotFoundError:
            return False
        if size <= self._keep_bytes:
            return False
        with self._writer_lock:
            conn.execute("PRAGMA busy_timeout=0")
            try:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute("PRAGMA busy_timeout=2000")
        return not busy


def configure_sqlite(
    engine: Engine,
    *,
    immediate: bool,
    synchronous: str = "FULL",
    memory: SqliteMemory = SERVER_MEMORY,
    journal_size_limit: int = JOURNAL_SIZE_LIMIT,
) -> None:
    """WAL journal, fsync on commit (``FULL``), busy timeout, explicit transaction control, the
    page cache and memory map of ``memory``, a ``-wal`` file truncated to
    ``journal_size_limit`` bytes when the log starts over.

    No automatic checkpoints: :class:`SqliteCheckpointer` runs them in the background.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA busy_timeout=30000")
        # Large WALs: keep the hot index pages (delta ids, row keys) in memory.
        cur.execute(f"PRAGMA cache_size=-{int(memory.cache_kib)}")
        cur.execute(f"PRAGMA mmap_size={int(memory.mmap_bytes)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA wal_autocheckpoint=0")
        cur.execute(f"PRAGMA journal_size_limit={int(journal_size_limit)}")
        # Statement journals (a multi-row INSERT may have to undo itself) in memory, not in a
        # temporary file: one write syscall per touched page otherwise.
        cur.execute("PRAGMA temp_store=MEMORY")
        cur.close()

    begin_sql = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin_sql)
