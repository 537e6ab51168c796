"""Group commit: concurrent pushes share one transaction and one fsync.

Callers hand a function of a connection to :meth:`GroupCommitter.run` and block until it has
committed. One writer thread takes every job waiting at that moment (up to ``max_group``), runs
them one after the other in a single transaction and commits once. An acknowledged push is
still committed before its caller returns; it just shares the commit (and the disk flush) with
its neighbours.

A job that raises gets its own exception and nothing of it is written: the transaction is
rolled back and the rest of the group runs again, without it, in a fresh one (a job only reads
and writes through its connection, so running it again is safe). There are no per-job
savepoints: on SQLite a savepoint makes every page a job touches first be copied into a
sub-journal, which would double the page writes of every push to pay for the rare failure.

An observer (``on_commit``) learns the size of every committed group: the gateway records it
as a metric without this package knowing how metrics are kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import AdapterError
from .database import SqlDatabase

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class _Job(Generic[T]):
    key: str
    fn: Callable[[Connection], T]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class _JobFailed(Exception):
    """Job ``index`` of the running group raised ``error``."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


class GroupCommitter:
    """Runs write jobs on one thread, many per transaction (see the module docstring)."""

    def __init__(
        self,
        wal: SqlDatabase,
        max_group: int = 64,
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        self._wal = wal
        self._max_group = max_group
        self._on_commit = on_commit
        self._cond = threading.Condition()
        self._queue: list[_Job[Any]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def run(self, key: str, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in a group transaction; return its result once committed.

        ``key`` orders jobs inside a group (the gateway id: locks are always taken in key
        order, so concurrent groups in several processes cannot deadlock).
        """
        job: _Job[T] = _Job(key, fn)
        with self._cond:
            if self._closed:
                raise AdapterError("The WAL writer is shut down")
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="lakesync-wal-writer", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def close(self) -> None:
        """Finish queued jobs and stop the writer thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                group = self._queue[: self._max_group]
                del self._queue[: self._max_group]
            self._commit(sorted(group, key=lambda j: j.key))

    def _commit(self, group: list[_Job[Any]]) -> None:
        committed = 0
        try:
            while group:
                try:
                    self._run_group(group)
                except _JobFailed as failed:  # undone with the rest; the others run again
                    job = group.pop(failed.index)
                    exc = failed.error
                    job.result = None
                    job.error = (
                        AdapterError(f"WAL write failed: {exc}")
                        if isinstance(exc, SQLAlchemyError)
                        else exc
                    )
                    job.done.set()
                else:
                    committed = len(group)
                    break
        except Exception as exc:  # the commit itself failed: nothing of the group is durable
            log.warning("WAL group commit of %d pushes failed: %s", len(group), exc)
            for job in group:
                job.result, job.error = None, exc
        finally:
            for job in group:
                job.done.set()
        if committed and self._on_commit is not None:
            try:
                self._on_commit(committed)
            except Exception:  # an observer must not stop the writer thread; logged, not raised
                log.exception("WAL group-commit observer failed")

    def _run_group(self, group: list[_Job[Any]]) -> None:
        """Run every job in one transaction and commit; :class:`_JobFailed` if one raises."""
        with self._wal.write() as conn:
            for i, job in enumerate(group):
                try:
                    job.result = job.fn(conn)
                except Exception as exc:
                    raise _JobFailed(i, exc) from exc
