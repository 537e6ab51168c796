"""One stage at a time on a lake: the inter-process lock every pipeline stage holds while it runs.

Pipeline jobs run side by side — Dagster runs from sensors and schedules, a manual run,
``lakesync run``, later compaction — often in separate processes. Two things go wrong without a
lock, both seen on the embedded set-up:

* The embedded Iceberg catalog is one SQLite file, and SQLite takes one writer at a time. Its
  busy timeout (``jdbc.busy_timeout``, set by :mod:`lakesync_platform.spark.session`) makes a
  writer wait for another one, but not always: when a connection that already reads must
  upgrade to write while another process holds the write lock, SQLite answers
  ``SQLITE_BUSY`` at once rather than risk a deadlock. Iceberg's JDBC catalog does just that
  when it creates a namespace, so a second process failed at once (``lakesync run flush`` of a
  gateway while another run flushed; or with the catalog write-locked for 12 s by another
  process, the run failed within 3 s, far short of its 60 s busy timeout). No journal or timeout
  setting removes that case; one writing process at a time does.
* Two runs of one stage of one gateway race to the same commit. Iceberg keeps the lake correct
  (a flush validates that the change log did not move since its watermark was read; a state
  ``MERGE`` conflicts), but the loser fails instead of finding its work done.

So a stage holds a lock for its whole run, from reading its watermark to its last commit.
A stage that finds the lock taken says so — ``waiting for flush of demo held by pid 4242`` (a
warning of this module's logger) — and waits up to ``lock_timeout_s``
(``LAKESYNC_LOCK_TIMEOUT_SECONDS``), then fails with :class:`FlushError` having touched
nothing. Once in, it reads the watermark the other left: it finds nothing to do, or does the
rest, exactly once.

Where the lock lives follows where the catalog lives (:func:`lake_lock`):

* **SQLite catalog** (``jdbc:sqlite:PATH``, the embedded default): an ``flock`` on
  ``PATH.lock`` (the ``filelock`` library), one for the whole catalog — every stage of every
  gateway, since the file takes one writer anyway; ``PATH.holder`` names the holder. The
  processes must share the file system, as they share the catalog file.
* **PostgreSQL catalog**: a session advisory lock per gateway in the catalog's database
  (Postgres takes concurrent commits to different tables; the lock only orders the stages of
  one gateway); the holder is named by its connection's ``application_name``. Works across
  machines.
* any other catalog: a file lock in the data directory (``lake.lock``), one for the lake,
  which only orders processes that share that directory.

The lock is advisory: code that commits to the lake outside the stages does not take it.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from ..core.errors import FlushError
from ..spark.session import SparkSettings, catalog_sqlalchemy_url

__all__ = [
    "FileLakeLock",
    "LakeLock",
    "LockHolder",
    "PostgresLakeLock",
    "lake_lock",
]

log = logging.getLogger(__name__)

_ADVISORY_CLASS = 0x4C53_4C4B
"""First key of the Postgres advisory locks (``LSLK``); the second is the gateway's hash."""
_APP_PREFIX = "lakesync"


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a lake's lock: the process and the stage it runs."""

    pid: int
    stage: str
    gateway: str

    def describe(self) -> str:
        """``flush of demo held by pid 4242``."""
        return f"{self.stage} of {self.gateway} held by pid {self.pid}"


class LakeLock(Protocol):
    """The lock the pipeline's stages take on one lake (see the module docstring)."""

    def hold(self, stage: str, gw: str) -> AbstractContextManager[None]:
        """Hold the lock while ``stage`` of ``gw`` runs: wait (saying for whom) up to the
        timeout, then raise :class:`FlushError`."""
        ...


def _waiting(holder: LockHolder | None, timeout_s: float) -> None:
    who = holder.describe() if holder is not None else "another pipeline stage"
    log.warning("waiting for %s (up to %g s)", who, timeout_s)


def _busy(stage: str, gw: str, holder: LockHolder | None, timeout_s: float) -> FlushError:
    who = holder.describe() if holder is not None else "another pipeline stage"
    return FlushError(
        f"{stage} of {gw!r} gave up after waiting {timeout_s:g} s for {who} "
        "(raise LAKESYNC_LOCK_TIMEOUT_SECONDS or run it again later)"
    )


class FileLakeLock:
    """The lock as an ``flock`` on ``path`` (``filelock``), its holder in ``<path>.holder``.

    The operating system releases the lock when its process dies, however it dies; the holder
    file of a dead process is overwritten by the next holder.
    """

    def __init__(self, path: Path, timeout_s: float) -> None:
        self.path = path
        self.holder_path = path.with_name(path.name.removesuffix(".lock") + ".holder")
        self.timeout_s = timeout_s

    def holder(self) -> LockHolder | None:
        """The holder recorded by the lock's current (or last) holder, if readable."""
        try:
            data = json.loads(self.holder_path.read_text())
            return LockHolder(int(data["pid"]), str(data["stage"]), str(data["gateway"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @contextmanager
    def hold(self, stage: str, gw: str) -> Iterator[None]:
        """See :meth:`LakeLock.hold`."""
        from filelock import FileLock, Timeout

        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            holder = self.holder()
            if self.timeout_s <= 0:
                raise _busy(stage, gw, holder, self.timeout_s) from None
            _waiting(holder, self.timeout_s)
            try:
                lock.acquire(timeout=self.timeout_s, poll_interval=0.1)
            except Timeout:
                raise _busy(stage, gw, self.holder(), self.timeout_s) from None
        try:
            record = {"pid": os.getpid(), "stage": stage, "gateway": gw}
            self.holder_path.write_text(json.dumps(record))
            yield
        finally:
            self.holder_path.unlink(missing_ok=True)
            lock.release()


class PostgresLakeLock:
    """The lock as a session advisory lock per gateway in a Postgres database.

    The connection that holds it lives as long as the stage; closing it (or the process dying)
    releases the lock. Waiting uses Postgres's own ``lock_timeout``.
    """

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s

    @staticmethod
    def keys(gw: str) -> tuple[int, int]:
        """The advisory lock's two keys for ``gw`` (a constant and the gateway's CRC-32)."""
        return _ADVISORY_CLASS, zlib.crc32(gw.encode()) & 0x7FFF_FFFF

    @contextmanager
    def hold(self, stage: str, gw: str) -> Iterator[None]:
        """See :meth:`LakeLock.hold`."""
        name = f"{_APP_PREFIX}:{os.getpid()}:{stage}:{gw}"[:63]
        engine = create_engine(
            self.url, poolclass=NullPool, connect_args={"application_name": name}
        )
        keys = {"a": self.keys(gw)[0], "b": self.keys(gw)[1]}
        try:
            with engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                got = conn.execute(text("SELECT pg_try_advisory_lock(:a, :b)"), keys).scalar()
                if not got:
                    holder = self._holder(conn, keys)
                    if self.timeout_s <= 0:
                        raise _busy(stage, gw, holder, self.timeout_s)
                    _waiting(holder, self.timeout_s)
                    conn.execute(
                        text("SELECT set_config('lock_timeout', :ms, false)"),
                        {"ms": f"{max(1, round(self.timeout_s * 1000))}ms"},
                    )
                    try:
                        conn.execute(text("SELECT pg_advisory_lock(:a, :b)"), keys)
                    except OperationalError as exc:
                        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
                            raise
                        raise _busy(stage, gw, holder, self.timeout_s) from None
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:a, :b)"), keys)
        finally:
            engine.dispose()

    @staticmethod
    def _holder(conn: Connection, keys: dict[str, int]) -> LockHolder | None:
        """The holder, from the ``application_name`` of the session holding the lock."""
        app = conn.execute(
            text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid::bigint = :a AND l.objid::bigint = :b AND l.objsubid = 2"
            ),
            keys,
        ).scalar()
        parts = str(app or "").split(":", 3)
        if len(parts) != 4 or parts[0] != _APP_PREFIX or not parts[1].isdigit():
            return None
        return LockHolder(int(parts[1]), parts[2], parts[3])


def lake_lock(settings: SparkSettings, timeout_s: float) -> LakeLock:
    """The lock of the lake ``settings`` name: where the catalog lives (module docstring)."""
    uri = settings.resolved_catalog_uri
    if uri.startswith("jdbc:sqlite:"):
        catalog_file = uri.removeprefix("jdbc:sqlite:").split("?", 1)[0]
        return FileLakeLock(Path(catalog_file + ".lock"), timeout_s)
    if uri.startswith("jdbc:postgresql://"):
        return PostgresLakeLock(catalog_sqlalchemy_url(settings), timeout_s)
    return FileLakeLock(settings.data_dir.resolve() / "lake.lock", timeout_s)
